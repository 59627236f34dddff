"""Weights & Biases mirror of a results-store entry.

The manifest becomes the run config, the aggregates the summary, and the structure × metric table
a ``wandb.Table``. The API key is read by wandb from ``WANDB_API_KEY`` (or ``wandb login``) and is
never passed through the config.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pandas as pd

from vldocir.tracking.manifest import redact_secrets

log = logging.getLogger(__name__)
MODES = ("online", "offline", "disabled")


class WandbTracker:
    def __init__(self, project: str, mode: str = "offline", entity: str | None = None, dir: str | None = None,
                 group: str | None = None, tags: list[str] | None = None):
        if mode not in MODES:
            raise ValueError(f"logger.mode must be one of {MODES}, got {mode!r}")
        self.project, self.mode, self.entity, self.dir = project, mode, entity, dir
        self.group, self.tags = group, list(tags or [])
        self.run = None

    def start(self, manifest: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as error:
            raise ImportError("logger=wandb needs the wandb package: uv sync (or pip install wandb)") from error
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
        config = manifest.get("config", {})
        name = "/".join(
            str(part) for part in (manifest["benchmark"]["name"], config.get("retriever", {}).get("id"), config.get("setting", {}).get("id"))
        )
        self.run = wandb.init(
            project=self.project, entity=self.entity, mode=self.mode, dir=self.dir, group=self.group,
            tags=self.tags, name=name, config=redact_secrets(manifest), reinit="finish_previous",
        )

    def log_results(self, metrics: dict[str, Any], structure_table: pd.DataFrame) -> None:
        import wandb

        if self.run is None:
            return
        summary = {f"{aggregate}/{metric}": value for aggregate, values in metrics["aggregates"].items() for metric, value in values.items()}
        summary["n_queries"] = metrics["n_queries"]
        summary["n_queries_missing_from_run"] = metrics["n_queries_missing_from_run"]
        self.run.summary.update(summary)
        table = structure_table.reset_index()
        self.run.log({"structure_metrics": wandb.Table(dataframe=table)})

    def finish(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None
