"""Evaluation of a run against the benchmark's evidence.

- ``metrics``: what nDCG, Recall, nDCGAll and RecallAll are, per query (``per_query_metrics``);
- ``codes``: the benchmark's and the run's ids as integer codes, fast at paper scale;
- ``aggregate``: Macro / Micro / source and domain Macro and the breakdowns;
- ``console``: the table printed at the end of a run.
"""
