"""``stage=evaluate``: the job's run resolved (reused or computed, its inputs first), evaluated at
``eval.ks`` and published in the results store with its manifest (config, versions, timings, cache
events); with ``eval.language``, its evaluation on that language's queries beside it. Where the
dataset config names a ``protocol``, every evaluation follows it (per subset, its main score:
:mod:`vldocir.evaluation.protocol`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from vldocir import store
from vldocir.cache import ArtifactCache, content_key
from vldocir.config_checks import ConfigError
from vldocir.evaluation.aggregate import check_language, language_subset
from vldocir.evaluation.console import format_report, headline_intervals, structure_table
from vldocir.evaluation.protocol import Protocol, with_main_k
from vldocir.io import atomic_write_json
from vldocir.manifest import redact_secrets
from vldocir.pipeline.datasets import open_benchmark
from vldocir.pipeline.jobs import check_inputs, job_leases, start_manifest, task_overrides
from vldocir.pipeline.resolution import RunResolver, run_sections


def evaluate(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Run the stages ``cfg`` asks for and record them; returns ``metrics.json``'s content."""
    started = time.perf_counter()
    timings: dict[str, Any] = {}
    cache = ArtifactCache(
        Path(cfg.paths.cache_dir), cfg.cache_policy, integrity=cfg.cache_integrity, leases=job_leases(cfg)
    )
    overrides = task_overrides()
    check_inputs(cfg, overrides)  # parameter checks of the job and of every input run, before anything starts
    manifest = start_manifest(cfg, overrides)
    # Started before anything can fail, so that a failed job is recorded (and finished) as failed.
    tracker.start(manifest)

    tick = time.perf_counter()
    bench = open_benchmark(cfg.dataset, cfg.paths.cache_dir)
    timings["load_benchmark_s"] = time.perf_counter() - tick
    timings.update(bench.load_timings)  # validate_s, fingerprint_s and whether each came from the memo
    if not bench.arrow("queries", ["query_id"]).num_rows:  # a corpus built with queries=none
        raise ConfigError(
            f"benchmark {bench.name} ({bench.root}) has no queries, so there is nothing to evaluate (stage=encode "
            "encodes its pages); add queries with python -m vldocir.apps.generate_queries "
            f"benchmark={bench.root} queries=file queries.path=<file>"
        )
    language = OmegaConf.select(cfg, "eval.language")
    if language is not None:  # before any search: a mistyped language costs a second
        language = str(language)
        check_language(bench.arrow("queries", ["language"]).column(0).to_pandas(), language)

    protocol, pooled = _protocol(cfg, bench, one_language=language is not None)
    ks, depth = with_main_k(cfg.eval.ks, protocol), int(cfg.depth)
    manifest["benchmark"] = {**bench.summary(), "root": str(bench.root)}
    resolver = RunResolver(bench, cache, ks, protocol, pooled)
    tick = time.perf_counter()
    resolved = resolver.resolve(cfg, overrides)
    timings["retrieve_s"] = time.perf_counter() - tick
    manifest.update(run_sections(resolved, depth, ks, bench.fingerprint, resolver.eval_params))

    tick = time.perf_counter()
    per_query, metrics = resolver.evaluate(resolved)
    timings["evaluate_s"] = time.perf_counter() - tick
    timings["wall_s"] = time.perf_counter() - started

    manifest["cache"] = cache.events
    manifest["timings"] = _rounded(timings)
    manifest = redact_secrets(manifest)  # the sections added since start_manifest too (settings' stats)
    setting_dir, name, reused = resolved.setting_dir, store.entry_name(depth, ks, resolved.key), resolved.reused
    if language is not None:
        # The run is filed with its evaluation over all queries as usual (any later job reuses it),
        # and this language's evaluation beside it, under the benchmark '<name>.lang-<language>'.
        whole = store.publish(
            setting_dir,
            name,
            run=None if reused else resolved.run,
            reused=reused,
            per_query=per_query,
            metrics=metrics,
            manifest={**manifest},
        )
        per_query = language_subset(per_query, language)
        metrics = {"language": language, **resolver.summarise(per_query, resolved.scope)}
        setting_dir = store.setting_directory(
            cfg.paths.results_dir, f"{bench.name}.lang-{language}", cfg.retriever.id, cfg.setting.id
        )
        manifest["store"] = {
            **manifest["store"],
            "language": language,
            "eval_key": content_key({"run": resolved.key, "ks": ks, "language": language, **resolver.eval_params}),
        }
        reused = store.Entry(whole)
    entry = store.publish(
        setting_dir,
        name,
        run=None if reused else resolved.run,
        reused=reused,
        per_query=per_query,
        metrics=metrics,
        manifest=manifest,
    )
    if resolved.claim is not None:  # published: the jobs waiting for this run reuse it now
        resolved.claim.release()
    _write_job_manifest(manifest, entry)
    tracker.log_results(metrics, structure_table(metrics), manifest=manifest)
    intervals = headline_intervals(per_query, ks) if OmegaConf.select(cfg, "eval.intervals", default=False) else None
    print(format_report(metrics, entry, resolved.reused is not None, intervals), flush=True)
    return metrics


def _protocol(cfg: DictConfig, bench, one_language: bool) -> tuple[Protocol | None, bool]:
    """The dataset's protocol (``dataset.protocol``; absent on older configs: none) and ``eval.pooled``,
    checked before any search: the subsets column, the main score's k within ``depth``, intervals
    (not of a mean over subsets; ``one_language``: ``eval.language`` evaluates one query set)."""
    block = OmegaConf.select(cfg, "dataset.protocol")
    protocol = Protocol.from_config(OmegaConf.to_container(block, resolve=True) if block is not None else None)
    pooled = bool(OmegaConf.select(cfg, "eval.pooled", default=False))
    if protocol is None:
        return None, pooled
    if protocol.subsets is not None:
        column = bench.arrow("queries", [protocol.subsets]).column(0)
        protocol.check_subsets(column.null_count == len(column))
        if OmegaConf.select(cfg, "eval.intervals", default=False) and not one_language:
            raise ConfigError(
                f"eval.intervals=true: the intervals of a mean over {protocol.subsets} query sets (dataset.protocol) "
                "are not computed yet; evaluate one language (eval.language=<code>) or set "
                "dataset.protocol.subsets=null for intervals over one query set"
            )
    if protocol.main_k > int(cfg.depth):
        raise ConfigError(
            f"dataset.protocol.main_score={protocol.main_score} needs k={protocol.main_k} but depth={cfg.depth} "
            f"keeps only {cfg.depth} pages per query; raise depth"
        )
    return protocol, pooled


def _rounded(timings: dict[str, Any]) -> dict[str, Any]:
    """Seconds to the millisecond; flags (``*_from_memo``) and nested records kept."""
    return {
        k: _rounded(v) if isinstance(v, dict) else round(v, 3) if isinstance(v, float) else v
        for k, v in timings.items()
    }


def _write_job_manifest(manifest: dict[str, Any], entry: Path) -> None:
    """The job's own manifest, also when its entry was reused or already held this result, in the
    Hydra job directory (``<log_dir>/.../manifest.json``): what this job found, computed and reused."""
    output_dir = (
        OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None) if HydraConfig.initialized() else None
    )
    if output_dir and Path(output_dir).is_dir():
        atomic_write_json({**manifest, "entry": str(entry)}, Path(output_dir) / "manifest.json")
