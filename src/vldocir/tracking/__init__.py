"""Experiment trackers: ``logger=none`` (the results store only) or ``logger=wandb``.

A tracker mirrors what the results store holds; it is opened before the pipeline and always
finished, also when the job fails (``run.py``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd


class NullTracker:
    """Records nothing beyond the results store."""

    def start(self, manifest: dict[str, Any]) -> None:
        pass

    def log_results(self, metrics: dict[str, Any], structure_table: pd.DataFrame, manifest: dict[str, Any] | None = None) -> None:
        pass

    def finish(self, failed: bool) -> None:
        pass
