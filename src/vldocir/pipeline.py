"""The evaluation pipeline: benchmark → run (cached) → per-query metrics → results store.

``run.py`` composes the config and calls :func:`evaluate`. Each stage is skipped when its artifact
exists under the same key: re-running a command re-evaluates the stored run (cheap) and searches
nothing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vldocir import store
from vldocir.cache import ArtifactCache, content_key
from vldocir.config_checks import ConfigError, check_config, optimized_metric
from vldocir.data.benchmark import Benchmark, load_benchmark
from vldocir.evaluation.aggregate import summarise
from vldocir.evaluation.console import format_report, structure_table
from vldocir.evaluation.metrics import EvidenceIndex, per_query_metrics
from vldocir.io import atomic_write_json
from vldocir.manifest import git_state, hardware, package_versions, redact_overrides, redact_secrets

log = logging.getLogger(__name__)


def open_benchmark(dataset: DictConfig) -> Benchmark:
    """Load ``dataset.source``; build it first from ``dataset.build`` if it does not exist yet."""
    source = str(dataset.source)
    local = not source.startswith("hf://")
    if local and not (Path(source) / "benchmark.json").is_file() and dataset.get("build") is not None:
        from vldocir.construction.synthetic import generate

        log.info("building benchmark %s into %s (first use)", dataset.name, source)
        generate(instantiate(dataset.build), source)
    return load_benchmark(source, revision=dataset.get("revision"))


def _overrides() -> list[str]:
    """The command line's task overrides as typed: ``${oc.env:...}`` references stay unresolved
    (iterating the ListConfig would resolve them and put environment values into the manifest)."""
    if not HydraConfig.initialized():
        return []
    return [str(o) for o in OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)]


def _start_manifest(cfg: DictConfig) -> dict[str, Any]:
    return {
        "config": redact_secrets(OmegaConf.to_container(cfg, resolve=True)),
        "overrides": redact_overrides(_overrides()),
        "git": git_state(Path(cfg.paths.root_dir)),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def run_stage(cfg: DictConfig, tracker) -> dict[str, Any]:
    """``stage=evaluate`` (the default) or ``stage=encode`` (page embeddings only, one job-array task).

    The whole config is checked first (:func:`check_config`), so a bad override fails in a second.
    """
    check_config(cfg, _overrides())
    stages = {"evaluate": evaluate, "encode": encode}
    return stages[cfg.stage](cfg, tracker)


def optimized_value(cfg: DictConfig, metrics: dict[str, Any] | None) -> float | None:
    """The value a Hydra sweeper optimises (``optimized_metric``); ``None`` for ``stage=encode``."""
    if cfg.stage != "evaluate":
        return None
    aggregate, metric = optimized_metric(cfg.optimized_metric, list(cfg.eval.ks))
    return metrics["aggregates"][aggregate][metric]


def instantiate_setting(cfg: DictConfig):
    """The setting object; its parameter checks fail here, as one line naming ``setting.method``."""
    try:
        return instantiate(cfg.setting.method)
    except InstantiationException as error:
        cause = error.__cause__ or error
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"setting.method ({cfg.setting.id}): {cause}") from error
        raise


def encode(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Encode task ``encode.task`` of ``encode.num_tasks``' page shards into the embedding store.

    A Hydra multirun over ``encode.task`` is a SLURM job array (hydra-submitit-launcher); the
    evaluation run afterwards finds every shard present and goes straight to search.
    """
    cache = ArtifactCache(Path(cfg.paths.cache_dir), cfg.cache_policy)
    manifest = _start_manifest(cfg)
    tracker.start(manifest)
    bench = open_benchmark(cfg.dataset)
    retriever = instantiate(cfg.retriever.model)
    from vldocir.retrieval.dense import EmbeddingRetriever

    if not isinstance(retriever, EmbeddingRetriever):
        raise ValueError(f"retriever {cfg.retriever.id} keeps no page embeddings: stage=encode applies to embedding retrievers")
    task, num_tasks = int(cfg.encode.task), int(cfg.encode.num_tasks)
    store = retriever.encode_pages(bench, cache, task=task, num_tasks=num_tasks)
    # A complete store is a cache hit and encodes nothing: all of this task's shards are reused.
    stats = retriever.stats.get("encode_pages") or {"shards_encoded": 0, "shards_reused": len(range(task, store.n_shards, num_tasks))}
    manifest.update(benchmark=bench.summary(), encode={"task": task, "num_tasks": num_tasks, **stats},
                    encoder=retriever.encoder.describe(), cache=cache.events)
    record = store.directory / "tasks" / f"task-{task:04d}-of-{num_tasks:04d}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(manifest, record)
    missing = store.missing_shards()
    print(
        f"encode task {task}/{num_tasks}: {stats['shards_encoded']} shard(s) encoded, "
        f"{stats['shards_reused']} already present; store {store.directory} "
        + ("complete" if not missing else f"still misses {len(missing)} of {store.n_shards} shard(s)"),
        flush=True,
    )
    return {"store": str(store.directory), "complete": not missing, **stats}


def evaluate(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Run the stages ``cfg`` asks for and record them; returns ``metrics.json``'s content."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    cache = ArtifactCache(Path(cfg.paths.cache_dir), cfg.cache_policy)
    setting = instantiate_setting(cfg)
    manifest = _start_manifest(cfg)
    # Started before anything can fail, so that a failed job is recorded (and finished) as failed.
    tracker.start(manifest)

    tick = time.perf_counter()
    bench = open_benchmark(cfg.dataset)
    timings["load_benchmark_s"] = time.perf_counter() - tick
    retriever = instantiate(cfg.retriever.model)

    ks, depth = [int(k) for k in cfg.eval.ks], int(cfg.depth)
    setting_dir = store.setting_directory(cfg.paths.results_dir, bench.name, cfg.retriever.id, cfg.setting.id)
    run_key = content_key(
        {"benchmark": bench.fingerprint, "retriever": retriever.cache_params(), "setting": setting.cache_params(), "depth": depth}
    )
    manifest["benchmark"] = bench.summary()
    manifest["run"] = {"key": run_key, "depth": depth}
    manifest["store"] = {"run_key": run_key, "eval_key": content_key({"run": run_key, "ks": ks}), "depth": depth, "ks": ks,
                         "fingerprint": bench.fingerprint}

    tick = time.perf_counter()
    stored = None if cfg.cache_policy == "overwrite" else store.find_run(setting_dir, run_key)
    cache.record("run", run_key, "hit" if stored else ("overwrite" if cfg.cache_policy == "overwrite" else "miss"))
    if stored is not None:
        log.info("reusing the run stored in %s (key %s): no search", stored.path, run_key)
        run = store.read_stored_run(stored)
        manifest["run"]["reused_from"] = str(stored.path)
    else:
        for other in store.other_parameters(setting_dir, run_key, bench.fingerprint, depth):
            log.warning("%s holds a run of %s/%s with other parameters; both are kept, and reports use the newest. "
                        "Give a variant its own id (retriever.id=... or setting.id=...) to compare them side by side",
                        other, cfg.retriever.id, cfg.setting.id)
        queries = bench.queries
        query_texts = dict(zip(queries["query_id"], queries["text"]))
        run = setting.apply(retriever, bench, query_texts, depth, cache)
        manifest["retrieval"] = getattr(retriever, "stats", {})
    timings["retrieve_s"] = time.perf_counter() - tick

    tick = time.perf_counter()
    index = EvidenceIndex.from_tables(bench.queries, bench.qrels, bench.arrow("pages", ["page_id", "doc_id"]).to_pandas())
    per_query = per_query_metrics(run, index, ks)
    metrics = summarise(per_query, ks)
    timings["evaluate_s"] = time.perf_counter() - tick
    timings["wall_s"] = time.perf_counter() - started

    manifest["run"]["reused"] = stored is not None
    manifest["cache"] = cache.events
    manifest["timings"] = {k: round(v, 3) for k, v in timings.items()}
    entry = store.publish(setting_dir, store.entry_name(depth, ks, run_key), run=None if stored else run, reused=stored,
                          per_query=per_query, metrics=metrics, manifest=manifest)
    tracker.log_results(metrics, structure_table(metrics), manifest=manifest)
    print(format_report(metrics, entry, stored is not None), flush=True)
    return metrics
