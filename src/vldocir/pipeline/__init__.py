"""One job of ``run.py``: benchmark → run (cached) → per-query metrics → results store.

``run.py`` composes the config and calls :func:`run_stage`, which checks the whole config first
(:func:`vldocir.config_checks.check_config`) and runs ``stage=evaluate``
(:func:`~vldocir.pipeline.evaluate_stage.evaluate`) or ``stage=encode``
(:func:`~vldocir.pipeline.encode_stage.encode`: one task of a job array filling the page-embedding
store).

``evaluate`` first checks the job's setting and retriever and, recursively, every input run they
name (:func:`~vldocir.pipeline.jobs.check_inputs`, through :func:`~vldocir.pipeline.jobs.plan_job`),
then opens the benchmark (:mod:`~vldocir.pipeline.datasets`: building a synthetic, imported or
reduced one on first use) and resolves the job's run through
:class:`~vldocir.pipeline.resolution.RunResolver`: the setting's input runs first, each composed as
a job of its own, resolved the same way and filed as an entry of its own; then the run itself,
reused from the store when an entry holds its content key and verifies, else computed by the
setting from its inputs. It evaluates the run at ``eval.ks`` and publishes the entry with its
manifest (config, versions, timings, cache events). Every expensive step is skipped when its
artifact exists under the same key: re-running a command re-evaluates the stored run and searches
nothing.

The modules, by job: ``datasets`` (opening the benchmark), ``jobs`` (a job's objects, its input
runs checked, its leases, the start of its manifest), ``resolution`` (the run through the store),
``evaluate_stage`` and ``encode_stage`` (the two stages); this one runs the stage ``cfg`` names.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from vldocir import store
from vldocir.config_checks import ConfigError, check_config, optimized_metric
from vldocir.leases import release_held
from vldocir.manifest import is_secret_value
from vldocir.pipeline.encode_stage import encode
from vldocir.pipeline.evaluate_stage import evaluate
from vldocir.pipeline.jobs import task_overrides
from vldocir.threads import set_torch_threads


def run_stage(cfg: DictConfig, tracker) -> dict[str, Any]:
    """``stage=evaluate`` (the default) or ``stage=encode`` (page embeddings only, one job-array task).

    The whole config is checked first (:func:`check_config`), so a bad override fails in a second.
    """
    check_config(cfg, task_overrides())
    _check_directory_names(cfg)
    set_torch_threads(cfg.threads)  # here, not in run.py: a submitit job calls this too
    stages = {"evaluate": evaluate, "encode": encode}
    try:
        return stages[cfg.stage](cfg, tracker)
    finally:
        release_held()  # a failed job's claims end with it, not with its process (sweeps run in one)


def _check_directory_names(cfg: DictConfig) -> None:
    """The names that become directories (results store, data dir), checked before any work: a
    secret there (``retriever.id='${oc.env:OPENAI_API_KEY}'``) would be written into every path."""
    store.check_name("retriever id", cfg.retriever.id)
    store.check_name("setting id", cfg.setting.id)
    if is_secret_value(str(cfg.dataset.name)):
        raise ConfigError(
            "dataset.name names directories and looks like a secret; secrets come from the environment only"
        )


def optimized_value(cfg: DictConfig, metrics: dict[str, Any] | None) -> float | None:
    """The value a Hydra sweeper optimises (``optimized_metric``); ``None`` for ``stage=encode``."""
    if cfg.stage != "evaluate":
        return None
    aggregate, metric = optimized_metric(cfg.optimized_metric, list(cfg.eval.ks))
    return metrics["aggregates"][aggregate][metric]
