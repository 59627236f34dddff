"""The paper tables and figures in Weights & Biases, e.g. when a sweep finishes.

``make tables WANDB=1`` (or ``python -m vldocir.reporting.tables --wandb``) logs, in one W&B run
of job type ``report``: every table as a ``wandb.Table`` (one row per cell: published, reproduced,
difference, OK / DIFF / MISSING), every figure as a ``wandb.Image``, the check's counts as the
summary, and the rendered files (Markdown, LaTeX, PDF, PNG) as an artifact. The mode comes from
``WANDB_MODE`` (online | offline | disabled), the project from ``WANDB_PROJECT`` (default vldocir);
the API key only from the environment, as for runs (README, Tracking).

To render and log them when a Hydra sweep ends, add the callback:

    python run.py -m experiment=fig10_nctx +hydra.callbacks.tables._target_=vldocir.reporting.wandb_report.TablesOnSweepEnd
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)


def _cell_rows(table) -> tuple[list[str], list[list[Any]]]:
    from vldocir.reporting.check import check_table

    cells = check_table(table)
    columns = [*table.index, "column", "published", "reproduced", "difference", "check", "run"]
    rows = []
    for cell in cells.itertuples():
        difference = cell.reproduced - cell.published
        rows.append([*(str(k) if k is not None else "" for k in cell.row), cell.column,
                     _nan_to_none(cell.published), _nan_to_none(cell.reproduced), _nan_to_none(difference), cell.check, cell.run or ""])
    return columns, rows


def _nan_to_none(value):
    return None if value != value else float(value)  # NaN != NaN


def log_report(tables: dict, figures: dict[str, Path], benchmark: str, note: str | None = None,
               files: list[Path] | None = None) -> str:
    """Log ``tables`` (name -> ReportTable) and ``figures`` (name -> PNG path); returns the run's
    directory (offline) or URL."""
    try:
        import wandb
    except ImportError as error:
        raise ImportError("--wandb needs the wandb package: uv sync (or pip install wandb)") from error
    log_dir = Path(os.environ.get("VLDOCIR_LOG_DIR", "logs"))
    log_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "vldocir"),
        entity=os.environ.get("WANDB_ENTITY") or None,
        mode=os.environ.get("WANDB_MODE", "online"),
        dir=str(log_dir),
        job_type="report",
        name=f"paper-tables/{benchmark}",
        config={"benchmark": benchmark, "note": note, "tables": list(tables), "figures": list(figures)},
        reinit="finish_previous",
    )
    failed = True
    try:
        totals: Counter = Counter()
        payload: dict[str, Any] = {}
        for name, table in tables.items():
            columns, rows = _cell_rows(table)
            payload[f"tables/{name}"] = wandb.Table(columns=columns, data=rows)
            counts = Counter(row[columns.index("check")] for row in rows)
            totals.update(counts)
            for status, count in counts.items():
                run.summary[f"check/{name}/{status}"] = count
        for name, png in figures.items():
            payload[f"figures/{name}"] = wandb.Image(str(png), caption=name)
        run.log(payload)
        for status, count in totals.items():
            run.summary[f"check/{status}"] = count
        if files:
            artifact = wandb.Artifact(f"paper-tables-{benchmark}", type="report")
            for path in files:
                artifact.add_file(str(path), name=f"{path.parent.name}/{path.name}")
            run.log_artifact(artifact)
        failed = False
        return run.dir if run.settings.mode != "online" else (run.url or run.dir)
    finally:
        run.finish(exit_code=1 if failed else 0)


class TablesOnSweepEnd(Callback):
    """Hydra callback: when a multirun ends, render the paper tables and figures from the results
    store and log them to W&B (``wandb=False``: render only)."""

    def __init__(self, wandb: bool = True, benchmark: str | None = None):
        self.wandb, self.benchmark = wandb, benchmark

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        from vldocir.reporting.tables import main

        root = Path(config.paths.root_dir)
        argv = [
            "--results", str(config.paths.results_dir),
            "--manifest", str(root / "experiments" / "paper.yaml"),
            "--paper", str(root / "results" / "paper"),
            "--benchmark", self.benchmark or str(config.dataset.name),
        ]
        if self.wandb:
            argv.append("--wandb")
        log.info("sweep finished: rendering the paper tables (%s)", " ".join(argv))
        main(argv)
