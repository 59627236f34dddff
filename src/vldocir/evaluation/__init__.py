"""Evaluation of a run against the benchmark's evidence.

- ``metrics``: what nDCG, Recall, nDCGAll and RecallAll (and MRR) are, per query (``per_query_metrics``);
- ``codes``: the benchmark's and the run's ids as integer codes, fast at paper scale;
- ``aggregate``: Macro / Micro / source and domain Macro and the breakdowns;
- ``protocol``: a public benchmark's own protocol (``dataset.protocol``): per-subset evaluation
  (languages scored alone, then averaged) and its main score;
- ``console``: the table printed at the end of a run.
"""
