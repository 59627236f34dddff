"""Reports from the results store: what a run prints, the paper's tables and figures, the failure viewer.

- ``console``: the table printed at the end of a run.
- ``paper``: the published numbers (``results/paper/``) and the row -> run manifest
  (``experiments/paper.yaml``).
- ``store_view``: read-only access to the store's runs, aggregated with the harness's own code.
- ``tables`` / ``formats`` / ``check``: ``make tables`` (Markdown, LaTeX) and ``make check``.
- ``figures``: ``make figures`` (PDF, PNG).
- ``wandb_report``: the tables and figures in W&B, and the Hydra callback for the end of a sweep.
- ``viewer``: the static per-query failure viewer (``python -m vldocir.reporting.viewer``).
"""
