"""Weights & Biases mirror of a results-store entry.

The manifest becomes the run config, the aggregates (and the benchmark protocol's main score, per
subset too) the summary, and the structure × metric table a ``wandb.Table``. The API key is read by
wandb from ``WANDB_API_KEY`` (or ``wandb login``) and is never passed through the config. What W&B
records goes through the project's one redaction rule (:mod:`vldocir.manifest`): the manifest as
config, the command line, the run's name, group and tags. Content hashes (``store.run_key``,
``run.key``) are no secrets and stay visible.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import pandas as pd

from vldocir.errors import MissingDependencyError
from vldocir.manifest import install_log_redaction, redact_overrides, redact_secrets, redact_text

log = logging.getLogger(__name__)
MODES = ("online", "offline", "disabled")


def _run_name(manifest: dict[str, Any]) -> str:
    """``benchmark/retriever/setting``, as in the results store. The tracker starts before the
    benchmark is opened (so that a failing job is recorded too); until then ``dataset.name`` stands in."""
    config = manifest.get("config", {})
    benchmark = manifest.get("benchmark", {}).get("name") or config.get("dataset", {}).get("name")
    return "/".join(
        str(part) for part in (benchmark, config.get("retriever", {}).get("id"), config.get("setting", {}).get("id"))
    )


class WandbTracker:
    """``init`` starts the W&B run and returns it (default ``wandb.init``); of the run, the tracker
    uses ``config`` (``keys``, ``update``), ``name``, ``summary.update``, ``log`` and ``finish``."""

    def __init__(
        self,
        project: str,
        mode: str = "offline",
        entity: str | None = None,
        dir: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        init: Callable[..., Any] | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"logger.mode must be one of {MODES}, got {mode!r}")
        self.project, self.mode, self.entity, self.dir = project, mode, entity, dir
        self.group, self.tags = group, list(tags or [])
        self.init = init
        self.run = None
        install_log_redaction()  # as NullTracker: logging is set up by now, scrub it of secrets

    def start(self, manifest: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as error:
            raise MissingDependencyError(
                "logger=wandb needs the wandb package: uv sync (or pip install wandb)"
            ) from error
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
        # wandb records the command line (sys.argv) with the run: hide secret-looking overrides from it.
        argv = sys.argv
        sys.argv = [*argv[:1], *redact_overrides(argv[1:])]
        try:
            self.run = (self.init or wandb.init)(
                project=self.project,
                entity=self.entity,
                mode=self.mode,
                dir=self.dir,
                group=redact_text(self.group) if self.group else None,
                tags=[redact_text(str(tag)) for tag in self.tags],
                name=_run_name(manifest),
                config=redact_secrets(manifest),
                reinit="finish_previous",
            )
        finally:
            sys.argv = argv

    def log_results(
        self, metrics: dict[str, Any], structure_table: pd.DataFrame, manifest: dict[str, Any] | None = None
    ) -> None:
        import wandb

        if self.run is None:
            return
        if manifest:  # what became known after start: benchmark fingerprint, run key, cache events, timings
            later = {k: v for k, v in manifest.items() if k not in self.run.config}
            self.run.config.update(redact_secrets(later), allow_val_change=True)
            self.run.name = _run_name(manifest)
        summary = {
            f"{aggregate}/{metric}": value
            for aggregate, values in metrics["aggregates"].items()
            for metric, value in values.items()
        }
        summary["n_queries"] = metrics["n_queries"]
        summary["n_queries_missing_from_run"] = metrics["n_queries_missing_from_run"]
        summary |= _protocol_summary(metrics.get("protocol"))
        self.run.summary.update(summary)
        table = structure_table.reset_index()
        self.run.log({"structure_metrics": wandb.Table(dataframe=table)})

    def finish(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None


def _protocol_summary(protocol: dict[str, Any] | None) -> dict[str, Any]:
    """The benchmark's main score (``main_score/<metric>``, the mean over subsets where the protocol
    has them) and its value per subset (``<subsets>/<value>/<metric>``), as the console shows them."""
    if not protocol:
        return {}
    score = protocol["main_score"]
    summary = {f"main_score/{score}": protocol["mean"][score]}
    for subset, record in (protocol.get("per_subset") or {}).items():
        summary[f"{protocol['subsets']}/{subset}/{score}"] = record[score]
    return summary
