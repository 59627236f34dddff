"""The paper tables and figures in Weights & Biases.

``python -m vldocir.apps.report logger=wandb`` (``make tables WANDB=1``) logs, in one W&B run of job type
``report``: every table as a ``wandb.Table`` (one row per cell: published, reproduced, difference,
OK / DIFF / MISSING), every figure as a ``wandb.Image``, the check's counts as the summary, and the
rendered files (Markdown, LaTeX, PDF, PNG) as an artifact. Project, entity, mode and directory are
the ``logger=wandb`` group's (``conf/logger/wandb.yaml``), as for runs; the API key comes only from
the environment (docs/evaluation.md, Secrets). When a sweep ends:
:class:`vldocir.reporting.report_tasks.TablesOnSweepEnd`.

Mode ``online`` with no API key to be found (no ``WANDB_API_KEY``, no ``wandb login`` entry in the
netrc file) logs offline instead, saying so in one line: the report is rendered by then, and a
sweep's end is no place to fail or to wait at a login prompt; ``wandb sync <dir>`` uploads it later.
"""

from __future__ import annotations

import logging
import netrc
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vldocir.errors import MissingDependencyError
from vldocir.manifest import redact_overrides, redact_text
from vldocir.reporting.check import check_table
from vldocir.reporting.outputs import ReportTable
from vldocir.tracking.wandb import WandbTracker

log = logging.getLogger(__name__)


def api_key_configured() -> bool:
    """Whether wandb finds an API key without prompting: ``WANDB_API_KEY`` (or an identity token
    file), or the W&B host's entry in the netrc file (``NETRC``, else ``~/.netrc``) that
    ``wandb login`` writes."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def report_mode(mode: str) -> str:
    """``mode``, or ``offline`` for ``online`` with no API key (one warning line says so)."""
    if mode == "online" and not api_key_configured():
        log.warning(
            "W&B: no API key found (WANDB_API_KEY, or `wandb login`): logging the report offline "
            "(`wandb sync <its directory>` uploads it; WANDB_MODE=offline or disabled chooses up front)"
        )
        return "offline"
    return mode


def _cell_rows(table: ReportTable) -> tuple[list[str], list[list[Any]]]:
    cells = check_table(table)
    columns = [*table.index, "column", "published", "reproduced", "difference", "check", "run"]
    rows = []
    for cell in cells.itertuples():
        difference = cell.reproduced - cell.published
        rows.append(
            [
                *(str(k) if k is not None else "" for k in cell.row),
                cell.column,
                _nan_to_none(cell.published),
                _nan_to_none(cell.reproduced),
                _nan_to_none(difference),
                cell.check,
                cell.run or "",
            ]
        )
    return columns, rows


def _nan_to_none(value):
    return None if value != value else float(value)  # NaN != NaN


def log_report(
    tables: dict[str, ReportTable],
    figures: dict[str, Path],
    logger: WandbTracker,
    benchmark: str,
    note: str | None = None,
    files: list[Path] | None = None,
) -> str:
    """Log ``tables`` (name -> ReportTable) and ``figures`` (name -> PNG path) to a W&B run with
    ``logger``'s project, entity, mode, directory, group and tags; returns the run's directory
    (offline) or URL."""
    try:
        import wandb
    except ImportError as error:
        raise MissingDependencyError("logger=wandb needs the wandb package: uv sync (or pip install wandb)") from error
    if logger.dir:
        os.makedirs(logger.dir, exist_ok=True)
    argv = sys.argv  # wandb records the command line: hide secret-looking overrides from it (as WandbTracker.start)
    sys.argv = [*argv[:1], *redact_overrides(argv[1:])]
    try:
        run = wandb.init(
            project=logger.project,
            entity=logger.entity,
            mode=report_mode(logger.mode),
            dir=logger.dir,
            group=redact_text(logger.group) if logger.group else None,
            tags=[redact_text(str(tag)) for tag in logger.tags],
            job_type="report",
            name=f"paper-tables/{benchmark}",
            config={"benchmark": benchmark, "note": note, "tables": list(tables), "figures": list(figures)},
            reinit="finish_previous",
        )
    finally:
        sys.argv = argv
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
