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
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vldocir import store
from vldocir.cache import ArtifactCache, content_key
from vldocir.data.benchmark import Benchmark, load_benchmark
from vldocir.evaluation.aggregate import summarise
from vldocir.io import atomic_write_json
from vldocir.evaluation.metrics import EvidenceIndex, per_query_metrics
from vldocir.reporting.console import format_report, structure_table
from vldocir.tracking.manifest import git_state, hardware, package_versions, redact_overrides, redact_secrets

log = logging.getLogger(__name__)


def open_benchmark(dataset: DictConfig) -> Benchmark:
    """Load ``dataset.source``; build it first from ``dataset.build`` if it does not exist yet."""
    source = str(dataset.source)
    local = not source.startswith("hf://")
    if local and not (Path(source) / "benchmark.json").is_file() and dataset.get("build") is not None:
        from vldocir.build.synthetic import generate

        log.info("building benchmark %s into %s (first use)", dataset.name, source)
        generate(instantiate(dataset.build), source)
    return load_benchmark(source, revision=dataset.get("revision"))


def _overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _start_manifest(cfg: DictConfig) -> dict[str, Any]:
    return {
        "config": redact_secrets(OmegaConf.to_container(cfg, resolve=True)),
        "overrides": redact_overrides(_overrides()),
        "git": git_state(Path(cfg.paths.root_dir)),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def run_stage(cfg: DictConfig, tracker) -> dict[str, Any]:
    """``stage=evaluate`` (the default) or ``stage=encode`` (page embeddings only, one job-array task)."""
    stages = {"evaluate": evaluate, "encode": encode}
    if cfg.stage not in stages:
        raise ValueError(f"stage must be one of {sorted(stages)}, got {cfg.stage!r}")
    return stages[cfg.stage](cfg, tracker)


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
    manifest = _start_manifest(cfg)
    # Started before anything can fail, so that a failed job is recorded (and finished) as failed.
    tracker.start(manifest)

    tick = time.perf_counter()
    bench = open_benchmark(cfg.dataset)
    timings["load_benchmark_s"] = time.perf_counter() - tick
    retriever = instantiate(cfg.retriever.model)
    setting = instantiate(cfg.setting.method)

    run_dir = store.run_directory(cfg.paths.results_dir, bench.name, cfg.retriever.id, cfg.setting.id)
    run_key = content_key(
        {"benchmark": bench.fingerprint, "retriever": retriever.cache_params(), "setting": setting.cache_params(), "depth": cfg.depth}
    )
    manifest["benchmark"] = bench.summary()
    manifest["run"] = {"key": run_key, "dir": str(run_dir), "depth": cfg.depth}

    tick = time.perf_counter()
    run = store.reusable_run(run_dir, run_key, cfg.cache_policy)
    reused = run is not None
    had_run = (run_dir / store.RUN_FILE).is_file()
    cache.record("run", run_key, "hit" if reused else ("overwrite" if had_run and cfg.cache_policy == "overwrite" else "miss"))
    if reused:
        log.info("reusing the stored run in %s (key %s): no search", run_dir, run_key)
    else:
        queries = bench.queries
        query_texts = dict(zip(queries["query_id"], queries["text"]))
        run = setting.apply(retriever, bench, query_texts, int(cfg.depth), cache)
        manifest["retrieval"] = getattr(retriever, "stats", {})
    timings["retrieve_s"] = time.perf_counter() - tick

    tick = time.perf_counter()
    index = EvidenceIndex.from_tables(bench.queries, bench.qrels, bench.arrow("pages", ["page_id", "doc_id"]).to_pandas())
    per_query = per_query_metrics(run, index, cfg.eval.ks)
    metrics = summarise(per_query, cfg.eval.ks)
    timings["evaluate_s"] = time.perf_counter() - tick
    timings["wall_s"] = time.perf_counter() - started

    manifest["run"]["reused"] = reused
    manifest["cache"] = cache.events
    manifest["timings"] = {k: round(v, 3) for k, v in timings.items()}
    store.write_results(run_dir, None if reused else run, per_query, metrics, manifest)
    tracker.log_results(metrics, structure_table(metrics), manifest=manifest)
    print(format_report(metrics, run_dir, reused), flush=True)
    return metrics
