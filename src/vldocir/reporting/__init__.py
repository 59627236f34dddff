"""Reports from the results store: the paper's tables and figures, the failure viewer.

- ``paper``: the published numbers (``results/paper/``) and the row -> run manifest
  (``conf/paper_tables.yaml``).
- ``store_view``: read-only access to the store's runs, aggregated with the harness's own code.
- ``benchmark_view``: the compared benchmark's own tables (Table 1, Figs. 5-7), found without runs.
- ``audit``: the query audit (Table 12; ``python -m vldocir.apps.audit``) and the bounding-box census.
- ``report_tasks``: ``python -m vldocir.apps.report`` (``make tables``, ``make figures``, ``make check``): one function,
  :func:`~vldocir.reporting.report_tasks.run`, over ``conf/report.yaml``; the Hydra callback for the end of a sweep.
- ``outputs``: what the steps share (``ReportTable``, generated folders).
- ``tables`` / ``significance_marks`` / ``formats`` / ``check``: the tables (their layouts, the
  significance marks against a baseline row, Markdown and LaTeX) and the reproduction check.
- ``other_runs``: the store's runs that no paper row uses (your own system, variants, other benchmarks' runs).
- ``figures``: the figures (PDF, PNG).
- ``wandb_report``: the tables and figures in W&B.
- ``viewer``: the static per-query failure viewer (``python -m vldocir.reporting.viewer``).
"""
