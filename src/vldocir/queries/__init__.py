"""The query layer: the queries and qrels of a benchmark, from evidence on its pages.

- ``template_queries``: template queries over facts planted in generated documents;
- ``evidence_configs``: the evidence configurations VLM queries are written from (paper §3.3);
- ``vlm_generation``: the two VLM steps' requests (prompts in ``prompts/generation/``), their
  answers parsed, grounded and filtered;
- ``cleaning``: the LLM judge of generated queries (build step) and the Tables 6-10 ablations
  (prompts ``prompts/cleaning_*.md``);
- ``query_stage``: sampling, generation, filter and cleaning chained for a build, recorded answers
  replayed through :mod:`vldocir.llm_server` when asked;
- ``user_queries``: the user's own queries, or none.

It reads a rendered benchmark's tables and knows nothing of how they were rendered: the build
(:mod:`vldocir.construction`) calls it, and every path grounds evidence by the rules of
:mod:`vldocir.data.evidence`.
"""
