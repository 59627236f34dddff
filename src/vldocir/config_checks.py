"""Checks on the composed job config, run before any work (DESIGN.md §5).

A mistyped override should cost a second, not an encode: everything that can be judged from the
config alone is judged here, before the benchmark is opened or a model loaded, and each problem
is one line naming the key, what it holds and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vldocir.cache import INTEGRITY_LEVELS, POLICIES
from vldocir.errors import ConfigError
from vldocir.evaluation.metrics import METRICS
from vldocir.store import SAFE_NAME

STAGES = ("evaluate", "encode")
AGGREGATES = ("macro", "micro", "source_macro", "domain_macro")
OPTIMIZED = re.compile(r"(?P<aggregate>[a-z_]+)/(?P<metric>[a-z]+)@(?P<k>\d+|max)")


def _positive_int(key: str, value: Any) -> int:
    # bool is an int in Python; `depth=true` is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    return value


def _ks(value: Any) -> list[int]:
    if not isinstance(value, (list, tuple, ListConfig)):
        raise ConfigError(f"eval.ks must be a list of positive integers such as eval.ks=[1,5,10], got {value!r}")
    ks = [_positive_int("every k in eval.ks", k) for k in value]
    if not ks:
        raise ConfigError("eval.ks is empty: give at least one cut-off, e.g. eval.ks=[10]")
    if len(set(ks)) != len(ks):
        raise ConfigError(f"eval.ks lists a cut-off twice: {ks}")
    return ks


def optimized_metric(spec: str, ks: Sequence[int]) -> tuple[str, str]:
    """``macro/recallall@10`` -> ("macro", "recallall@10"); ``@max`` is the largest k of ``ks``."""
    match = OPTIMIZED.fullmatch(str(spec))
    if match is None:
        raise ConfigError(
            f"optimized_metric must read <aggregate>/<metric>@<k or max>, e.g. macro/recallall@10, got {spec!r}"
        )
    aggregate, metric, k = match["aggregate"], match["metric"], match["k"]
    if aggregate not in AGGREGATES:
        raise ConfigError(f"optimized_metric: aggregate {aggregate!r} is not one of {', '.join(AGGREGATES)}")
    if metric not in METRICS:
        raise ConfigError(f"optimized_metric: metric {metric!r} is not one of {', '.join(METRICS)}")
    k = max(ks) if k == "max" else int(k)
    if k not in ks:
        raise ConfigError(
            f"optimized_metric {spec} needs k={k}, which eval.ks={list(ks)} does not compute; "
            "add it to eval.ks or use @max"
        )
    return aggregate, f"{metric}@{k}"


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # run.py's config_path


def _known_top_level_keys(conf_dir: Path = CONF_DIR) -> set[str]:
    """What a ``+key=`` override may add at the top: the primary config's keys and the config groups
    (a key that a group file places at the top, such as setting=ctx's n_ctx, is set without ``+``)."""
    primary = OmegaConf.load(conf_dir / "config.yaml")
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    return set(primary.keys()) | groups | {"hydra"}


def _added_top_level_keys(overrides: Sequence[str]) -> list[str]:
    added = []
    for override in overrides:
        if override.startswith("+") and not override.startswith("++") and "=" in override:
            key = override[1:].split("=", 1)[0]
            if "/" not in key and "." not in key:  # `+group=option` and nested additions are Hydra's
                added.append(key)
    return added


def check_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> None:
    """Raise :class:`ConfigError` for the first problem found in ``cfg`` (the composed job config)
    and ``overrides`` (the command line's task overrides)."""
    if cfg.stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {cfg.stage!r}")
    if cfg.cache_policy not in POLICIES:
        raise ConfigError(f"cache_policy must be one of {', '.join(POLICIES)}, got {cfg.cache_policy!r}")
    if cfg.cache_integrity not in INTEGRITY_LEVELS:
        raise ConfigError(f"cache_integrity must be one of {', '.join(INTEGRITY_LEVELS)}, got {cfg.cache_integrity!r}")
    _check_leases(cfg)
    depth = _positive_int("depth", cfg.depth)
    ks = _ks(cfg.eval.ks)
    if max(ks) > depth:
        raise ConfigError(
            f"eval.ks={ks} asks for k={max(ks)} but depth={depth} keeps only {depth} pages per query; "
            "raise depth or lower k"
        )
    optimized_metric(cfg.optimized_metric, ks)
    num_tasks = _positive_int("encode.num_tasks", cfg.encode.num_tasks)
    task = cfg.encode.task
    if isinstance(task, bool) or not isinstance(task, int) or not 0 <= task < num_tasks:
        raise ConfigError(
            f"encode.task must be an integer in 0..{num_tasks - 1} (encode.num_tasks={num_tasks}), got {task!r}"
        )
    for key in ("dataset.name", "retriever.id", "setting.id"):
        value = str(OmegaConf.select(cfg, key))
        if not SAFE_NAME.fullmatch(value) or value in (".", ".."):
            raise ConfigError(
                f"{key} names a results-store directory and must use letters, digits, '.', '_' and '-' only, "
                f"got {value!r}"
            )
    _check_context(cfg)
    known = _known_top_level_keys()
    for key in _added_top_level_keys(overrides):
        if key not in known:
            raise ConfigError(
                f"+{key}=... adds a top-level key that nothing reads (known: {', '.join(sorted(known - {'hydra'}))}); "
                "check the spelling, or set a nested key such as retriever.model.<name>"
            )


def _check_leases(cfg: DictConfig) -> None:
    """The claims between concurrent jobs (vldocir.leases): a duration above 0, a wait of at least 0."""
    for key, allow_zero in (("leases.duration_s", False), ("leases.wait_s", True)):
        value = OmegaConf.select(cfg, key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or value < 0 or (value == 0 and not allow_zero):
            bound = "at least 0" if allow_zero else "above 0"
            raise ConfigError(f"{key} must be a number of seconds {bound}, got {value!r}")
    if not isinstance(OmegaConf.select(cfg, "leases.check_local_pid"), bool):
        raise ConfigError(f"leases.check_local_pid must be true or false, got {cfg.leases.check_local_pid!r}")


def _check_context(cfg: DictConfig) -> None:
    """Document-context scoring (``setting=ctx``) and hierarchical retrieval are options of the
    embedding retriever's search."""
    if all(OmegaConf.select(cfg, f"retriever.model.{option}") is None for option in ("context", "hierarchical")):
        return
    from hydra.utils import get_class

    from vldocir.retrieval.dense import EmbeddingRetriever

    target = str(OmegaConf.select(cfg, "retriever.model._target_"))
    try:
        accepts = issubclass(get_class(target), EmbeddingRetriever)
    except Exception:  # an unknown target fails at instantiation, with Hydra's own message
        return
    if not accepts:
        raise ConfigError(
            f"setting {cfg.setting.id} scores pages with document-context vectors built from page embeddings; "
            f"retriever {cfg.retriever.id} ({target.rsplit('.', 1)[-1]}) has none: "
            "use an embedding retriever such as retriever=colqwen25"
        )
