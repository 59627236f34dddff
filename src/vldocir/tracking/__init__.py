"""Experiment trackers: ``logger=none`` (the results store only) or ``logger=wandb``.

A tracker mirrors what the results store holds; it is opened before the pipeline and always
finished, also when the job fails (``run.py``). Secrets never reach a tracker: see
:mod:`vldocir.manifest` for the one redaction rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vldocir.manifest import install_log_redaction

if TYPE_CHECKING:  # pandas is slow to import; run.py's command-line guard imports this package
    import pandas as pd


class NullTracker:
    """Records nothing beyond the results store."""

    def __init__(self) -> None:
        # The tracker is the first object of ours a job creates once Hydra has set up its logging
        # (also in submitit's job processes): from here on, log records are scrubbed of secrets.
        install_log_redaction()

    def start(self, manifest: dict[str, Any]) -> None:
        pass

    def log_results(
        self, metrics: dict[str, Any], structure_table: pd.DataFrame, manifest: dict[str, Any] | None = None
    ) -> None:
        pass

    def finish(self, failed: bool) -> None:
        pass
