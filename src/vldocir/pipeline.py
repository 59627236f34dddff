"""One job of ``run.py``: benchmark → run (cached) → per-query metrics → results store.

``run.py`` composes the config and calls :func:`run_stage`, which checks the whole config first
(:func:`vldocir.config_checks.check_config`) and runs ``stage=evaluate`` (:func:`evaluate`) or
``stage=encode`` (:func:`encode`: one task of a job array filling the page-embedding store).

:func:`evaluate` first checks the job's setting and retriever and, recursively, every input run
they name (:func:`check_inputs`, through :func:`plan_job`), then opens the benchmark (building a
synthetic or reduced one on first use) and resolves the job's run through :class:`RunResolver`: the
setting's input runs first, each composed as a job of its own, resolved the same way and filed as an
entry of its own; then the run itself, reused from the store when an entry holds its content key
and verifies, else computed by the setting from its inputs. It evaluates the run at ``eval.ks`` and
publishes the entry with its manifest (config, versions, timings, cache events). Every expensive
step is skipped when its artifact exists under the same key: re-running a command re-evaluates the
stored run and searches nothing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vldocir import store
from vldocir.cache import ArtifactCache, content_key
from vldocir.config_checks import ConfigError, check_config, optimized_metric
from vldocir.data.benchmark import Benchmark, load_benchmark
from vldocir.data.reduced import open_dataset
from vldocir.evaluation.aggregate import check_language, language_subset, summarise
from vldocir.evaluation.console import format_report, headline_intervals, structure_table
from vldocir.evaluation.metrics import RUN_COLUMNS, EvidenceIndex, per_query_metrics
from vldocir.io import atomic_write_json
from vldocir.leases import LEASES_DIR, Lease, Leases, release_held
from vldocir.manifest import (
    git_state,
    hardware,
    is_secret_value,
    package_versions,
    redact_overrides,
    redact_secrets,
)
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.settings import RunJob, Setting, check_id_names_inputs
from vldocir.threads import set_torch_threads

log = logging.getLogger(__name__)


def open_benchmark(dataset: DictConfig, cache_dir: str | Path) -> Benchmark:
    """The benchmark ``dataset`` names. A derived one (``dataset.derive``: conf/dataset/*_reduced.yaml)
    is made from its parent's benchmark on first use and cached under ``cache_dir`` (vldocir.data.reduced)."""
    return open_dataset(dataset, Path(cache_dir), _open_source)


def _open_source(dataset: DictConfig) -> Benchmark:
    """Load ``dataset.source``; build it first from ``dataset.build``, or import it with
    ``dataset.importer`` (vldocir.importers), if it does not exist yet."""
    source = str(dataset.source)
    local = not source.startswith("hf://")
    if local and dataset.get("importer") is not None:
        from vldocir.importers.base import open_imported

        return open_imported(instantiate(dataset.importer, _convert_="all"), source, name=dataset.name)
    if local and dataset.get("build") is not None:
        from vldocir.construction.synthetic import generate

        spec = instantiate(dataset.build)
        if not (Path(source) / "benchmark.json").is_file():
            log.info("building benchmark %s into %s (first use)", dataset.name, source)
            generate(spec, source)
        else:
            _check_generated_from(Path(source), spec)
    return load_benchmark(source, revision=dataset.get("revision"))


def _check_generated_from(source: Path, spec) -> None:
    """A generated benchmark directory must come from the spec the config asks for now: a
    ``dataset.build.*`` override does not silently reuse what an earlier spec generated there."""
    from vldocir.construction.synthetic import spec_differences

    try:
        recorded = json.loads((source / "benchmark.json").read_text()).get("built_by", {}).get("spec")
    except (OSError, ValueError, AttributeError):
        return  # load_benchmark reports an unreadable benchmark.json
    if recorded is None:
        log.warning("benchmark %s does not record the spec it was generated from; it is used as it is", source)
        return
    differing = spec_differences(recorded, spec)
    if differing:
        raise ConfigError(
            f"benchmark {source} was generated from another dataset.build spec (differs in: {', '.join(differing)}); "
            "delete that directory to generate it again, or give this spec its own dataset.name"
        )


def _overrides() -> list[str]:
    """The command line's task overrides as typed: ``${oc.env:...}`` references stay unresolved
    (iterating the ListConfig would resolve them and put environment values into the manifest)."""
    if not HydraConfig.initialized():
        return []
    return [str(o) for o in OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)]


def _start_manifest(cfg: DictConfig, overrides: list[str] | None = None) -> dict[str, Any]:
    return {
        "config": redact_secrets(OmegaConf.to_container(cfg, resolve=True)),
        "overrides": redact_overrides(_overrides() if overrides is None else overrides),
        "git": git_state(Path(cfg.paths.root_dir)),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def run_stage(cfg: DictConfig, tracker) -> dict[str, Any]:
    """``stage=evaluate`` (the default) or ``stage=encode`` (page embeddings only, one job-array task).

    The whole config is checked first (:func:`check_config`), so a bad override fails in a second.
    """
    check_config(cfg, _overrides())
    _check_directory_names(cfg)
    set_torch_threads(cfg.threads)  # here, not in run.py: a submitit job calls this too
    stages = {"evaluate": evaluate, "encode": encode}
    try:
        return stages[cfg.stage](cfg, tracker)
    finally:
        release_held()  # a failed job's claims end with it, not with its process (sweeps run in one)


def _leases(cfg: DictConfig) -> Leases:
    """The claims on units of work this job shares with concurrent ones (``leases`` in the config)."""
    return Leases(
        Path(cfg.paths.cache_dir) / LEASES_DIR,
        float(cfg.leases.duration_s),
        float(cfg.leases.wait_s),
        check_local_pid=bool(cfg.leases.check_local_pid),
    )


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


def _instantiate(cfg: DictConfig, node: str, label: str):
    """Instantiate ``cfg.<node>``; a parameter check that fails is one line naming the node."""
    try:
        return instantiate(OmegaConf.select(cfg, node))
    except InstantiationException as error:
        cause = error.__cause__ or error
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"{node} ({label}): {cause}") from error
        raise


def instantiate_setting(cfg: DictConfig):
    """The setting object; its parameter checks fail here, as one line naming ``setting.method``."""
    return _instantiate(cfg, "setting.method", cfg.setting.id)


def instantiate_retriever(cfg: DictConfig):
    """The retriever object; its parameter checks (document context's n_ctx too) fail as one line."""
    return _instantiate(cfg, "retriever.model", cfg.retriever.id)


def job_rank() -> tuple[int, int]:
    """This process's rank among its job's tasks and their number: ``(0, 1)`` unless it is one of
    several tasks of a submitit job (``hydra.launcher.tasks_per_node``, e.g. the ``slurm_node``
    launcher: one task per GPU), which is then pinned to its node-local GPU."""
    if "SUBMITIT_EXECUTOR" not in os.environ:  # set by submitit in its jobs only
        return 0, 1
    import submitit
    import torch

    env = submitit.JobEnvironment()
    if env.num_tasks > 1 and torch.cuda.device_count() > 1:  # each task sees the node's GPUs: take one
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    return env.global_rank, env.num_tasks


def global_encode_task(task: int, num_tasks: int, rank: int, ranks: int) -> tuple[int, int]:
    """Job-array task ``task`` of ``num_tasks``, process ``rank`` of its ``ranks``, as one task of
    ``num_tasks * ranks``: shard ``s`` goes to ``s % (num_tasks * ranks) == task * ranks + rank``, so
    the processes of all the array's jobs share the shards without overlap."""
    return task * ranks + rank, num_tasks * ranks


def encode(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Encode task ``encode.task`` of ``encode.num_tasks``' page shards into the embedding store.

    A Hydra multirun over ``encode.task`` is a SLURM job array (hydra-submitit-launcher); the
    evaluation run afterwards finds every shard present and goes straight to search. A job of
    several tasks (one per GPU of a node) splits its share further by rank (:func:`job_rank`).
    """
    rank, ranks = job_rank()  # first: before anything touches CUDA (the manifest's hardware)
    cache = ArtifactCache(
        Path(cfg.paths.cache_dir), cfg.cache_policy, integrity=cfg.cache_integrity, leases=_leases(cfg)
    )
    manifest = _start_manifest(cfg)
    tracker.start(manifest)
    bench = open_benchmark(cfg.dataset, cfg.paths.cache_dir)
    retriever = instantiate_retriever(cfg)
    from vldocir.retrieval.dense import EmbeddingRetriever

    if not isinstance(retriever, EmbeddingRetriever):
        raise ValueError(
            f"retriever {cfg.retriever.id} keeps no page embeddings: stage=encode applies to embedding retrievers"
        )
    task, num_tasks = global_encode_task(int(cfg.encode.task), int(cfg.encode.num_tasks), rank, ranks)
    store = retriever.encode_pages(bench, cache, task=task, num_tasks=num_tasks)
    # A complete store is a cache hit and encodes nothing: all of this task's shards are reused.
    stats = retriever.stats.get("encode_pages") or {
        "shards_encoded": 0,
        "shards_reused": len(range(task, store.n_shards, num_tasks)),
    }
    manifest.update(
        benchmark=bench.summary(),
        encode={"task": task, "num_tasks": num_tasks, "job_task": int(cfg.encode.task), "rank": rank, **stats},
        encoder=retriever.encoder.describe(),
        cache=cache.events,
    )
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


@dataclass
class ResolvedRun:
    """A run of one (retriever, setting) job: computed now, or reused from the store (read on first use)."""

    computed: pa.Table | None
    key: str
    reused: store.Entry | None  # the verified entry it was read from
    setting_dir: Path
    retrieval: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    query_flags: dict[str, dict[str, Any]] = field(default_factory=dict)
    entry: Path | None = None  # the entry that holds it evaluated at this job's ks
    claim: Lease | None = None  # this job's claim on computing it, held until its entry is published

    @property
    def run(self) -> pa.Table:
        if self.computed is None:
            self.computed = store.read_stored_run(self.reused)
        return self.computed

    def run_to_evaluate(self) -> pa.Table:
        """The run as the metrics read it: in memory if it is, else the stored run's ids and scores
        only (no ranks: a quarter less to read at paper scale), not kept."""
        return self.computed if self.computed is not None else store.read_stored_run(self.reused, RUN_COLUMNS)


class RunResolver:
    """Resolves a job's run, and first the input runs its setting names, through the results store.

    Each input is composed as its own job (:func:`plan_job`), resolved the same way (recursively),
    evaluated at the job's ``eval.ks`` and filed as an entry of its own; within one job an input
    named twice is resolved once. Every resolution is a ``run`` cache event (hit or miss) in the
    manifest.
    """

    def __init__(self, bench: Benchmark, cache: ArtifactCache, ks: list[int]):
        self.bench, self.cache, self.ks = bench, cache, ks
        self.done: dict[str, ResolvedRun] = {}
        self._index: EvidenceIndex | None = None

    @property
    def index(self) -> EvidenceIndex:
        if self._index is None:
            self._index = EvidenceIndex.from_benchmark(self.bench)
        return self._index

    def resolve(self, cfg: DictConfig, overrides: list[str], chain: tuple[str, ...] = ()) -> ResolvedRun:
        job = plan_job(cfg, overrides, chain)
        label, setting, retriever = job.label, job.setting, job.retriever
        depth = int(cfg.depth)
        inputs, input_runs = [], []
        for sub in job.inputs:
            resolved = self.resolve_and_file(sub.cfg, sub.overrides, (*chain, label))
            input_runs.append(resolved)
            inputs.append(
                {
                    "input": sub.label,
                    "retriever": sub.cfg.retriever.id,
                    "setting": sub.cfg.setting.id,
                    "run_key": resolved.key,
                    "entry": str(resolved.entry) if resolved.entry else None,
                    "reused": resolved.reused is not None,
                }
            )
        parts = {
            "benchmark": self.bench.fingerprint,
            "retriever": retriever.cache_params() if setting.uses_retriever else None,
            "setting": setting.cache_params(),
            "depth": depth,
        }
        if inputs:
            parts["inputs"] = [i["run_key"] for i in inputs]
        key = content_key(parts)
        setting_dir = store.setting_directory(cfg.paths.results_dir, self.bench.name, cfg.retriever.id, cfg.setting.id)
        if key in self.done:
            self.cache.record("run", key, "hit")
            return self.done[key]
        stored, claim = self._claim(key, setting_dir, cfg.cache_policy == "overwrite")
        self.cache.record("run", key, "hit" if stored else ("overwrite" if cfg.cache_policy == "overwrite" else "miss"))
        if stored is not None:
            log.info("%s: reusing the run stored in %s (key %s): no search", label, stored.path, key)
            resolved = ResolvedRun(None, key, stored, setting_dir, inputs=inputs, query_flags=_stored_flags(stored))
        else:
            for other in store.other_parameters(setting_dir, key, self.bench.fingerprint, depth):
                log.warning(
                    "%s holds a run of %s with other parameters; both are kept, and reports use the newest. "
                    "Give a variant its own id (retriever.id=... or setting.id=...) to compare them side by side",
                    other,
                    label,
                )
            queries = self.bench.queries
            job = RunJob(
                self.bench,
                dict(zip(queries["query_id"], queries["text"])),
                depth,
                self.cache,
                retriever,
                [i.run for i in input_runs],
            )
            log.info(
                "%s: computing the run (key %s)%s",
                label,
                key,
                f" from {len(input_runs)} input run(s)" if input_runs else "",
            )
            run = setting.make_run(job)
            resolved = ResolvedRun(
                run, key, None, setting_dir, retrieval=job.stats, inputs=inputs, query_flags=job.query_flags
            )
        resolved.claim = claim
        self.done[key] = resolved
        return resolved

    def _claim(self, key: str, setting_dir: Path, overwrite: bool) -> tuple[store.Entry | None, Lease | None]:
        """The verified stored entry of run ``key``, or else this job's claim on computing it
        (the unit ``run/<benchmark>/<retriever id>/<setting id>/<key>``).

        A job that finds another one computing the same run (a parallel sweep point, the base run of
        ctx jobs) waits for it and reuses its entry; a claim whose job died lapses and is taken over.
        """
        found: list[store.Entry | None] = [None]

        def stored() -> bool:
            found[0] = None if overwrite else store.find_run(setting_dir, key)
            return found[0] is not None

        claim = self.cache.leases.acquire("/".join(("run", *setting_dir.parts[-3:], key)), stored)
        return found[0], claim

    def evaluate(self, resolved: ResolvedRun, keep_run: bool = False) -> tuple[pd.DataFrame, dict]:
        """Per-query metrics and their aggregates. A stored run is read for this alone (its ids and
        scores only), unless ``keep_run``: then it is read in full once, and kept."""
        run = resolved.run if keep_run else resolved.run_to_evaluate()
        per_query = per_query_metrics(run, self.index, self.ks)
        for column, values in resolved.query_flags.items():
            per_query[column] = per_query["query_id"].map(values)
        return per_query, summarise(per_query, self.ks)

    def resolve_and_file(self, cfg: DictConfig, overrides: list[str], chain: tuple[str, ...]) -> ResolvedRun:
        """Resolve an input run and make sure the store holds it evaluated at this job's ks."""
        resolved = self.resolve(cfg, overrides, chain)
        if resolved.entry is not None:
            return resolved
        name = store.entry_name(int(cfg.depth), self.ks, resolved.key)
        if resolved.reused is not None and resolved.reused.path.name == name:
            resolved.entry = resolved.reused.path  # already evaluated at these ks
            return resolved
        per_query, metrics = self.evaluate(resolved, keep_run=True)  # the setting combines it next
        manifest = _start_manifest(cfg, overrides)
        manifest.update(
            input_of=chain[-1],
            benchmark={**self.bench.summary(), "root": str(self.bench.root)},
            cache=[],
            **_run_sections(resolved, int(cfg.depth), self.ks, self.bench.fingerprint),
        )
        resolved.entry = store.publish(
            resolved.setting_dir,
            name,
            run=None if resolved.reused else resolved.run,
            reused=resolved.reused,
            per_query=per_query,
            metrics=metrics,
            manifest=redact_secrets(manifest),  # the sections added since _start_manifest too
        )
        if resolved.claim is not None:  # filed: the jobs waiting for this run reuse it now
            resolved.claim.release()
        log.info("input run %s/%s filed in %s", cfg.retriever.id, cfg.setting.id, resolved.entry)
        return resolved


@dataclass
class InputJob:
    """An input run of a setting, composed as its own job and checked."""

    label: str  # as the setting names it (RunSpec.label)
    cfg: DictConfig
    overrides: list[str]


@dataclass
class JobPlan:
    """A job's setting and retriever, instantiated, and its input runs, composed and checked."""

    label: str  # <retriever id>/<setting id>
    setting: Setting
    retriever: Retriever
    inputs: list[InputJob]


def plan_job(cfg: DictConfig, overrides: list[str], chain: tuple[str, ...] = ()) -> JobPlan:
    """Instantiate the job's setting and retriever and compose and check each input run it names,
    as the job ``python run.py <job overrides> retriever=.. setting=..``
    (:func:`vldocir.launch.input_overrides`). ``chain``: the jobs this one is an input of. A cycle,
    an input that does not compose or fails its checks, or one on another dataset is a
    :class:`ConfigError` naming the input."""
    from vldocir.launch import compose_job, input_overrides

    label = f"{cfg.retriever.id}/{cfg.setting.id}"
    if label in chain:
        raise ConfigError(f"setting inputs form a cycle: {' -> '.join((*chain, label))}")
    setting, retriever = instantiate_setting(cfg), instantiate_retriever(cfg)
    check_id_names_inputs(setting, str(cfg.setting.id), overrides)
    dataset = OmegaConf.to_container(cfg.dataset, resolve=True)
    inputs = []
    for spec in setting.inputs():
        sub_overrides = input_overrides(overrides, spec)
        try:
            sub_cfg = compose_job(sub_overrides)
        except HydraException as error:
            raise ConfigError(f"input run {spec.label()!r} of {label}: {str(error).splitlines()[0]}") from error
        try:
            check_config(sub_cfg, sub_overrides)
        except ConfigError as error:
            raise ConfigError(f"input run {spec.label()!r} of {label}: {error}") from error
        if OmegaConf.to_container(sub_cfg.dataset, resolve=True) != dataset:
            raise ConfigError(
                f"input run {spec.label()!r} of {label} is on another dataset ({sub_cfg.dataset.name}); "
                "a setting combines runs of one benchmark"
            )
        inputs.append(InputJob(spec.label(), sub_cfg, sub_overrides))
    return JobPlan(label, setting, retriever, inputs)


def check_inputs(cfg: DictConfig, overrides: list[str], chain: tuple[str, ...] = ()) -> None:
    """:func:`plan_job` for the job and, recursively, for every input run, so that a bad input
    fails in a second, before any work, as a :class:`ConfigError` naming it."""
    job = plan_job(cfg, overrides, chain)
    for sub in job.inputs:
        try:
            check_inputs(sub.cfg, sub.overrides, (*chain, job.label))
        except ConfigError as error:
            raise ConfigError(f"input run {sub.label!r} of {job.label}: {error}") from error


def _run_sections(resolved: ResolvedRun, depth: int, ks: list[int], fingerprint: str) -> dict[str, Any]:
    """The manifest's ``run``, ``store`` and (for a run computed now) ``retrieval`` sections."""
    run: dict[str, Any] = {"key": resolved.key, "depth": depth, "reused": resolved.reused is not None}
    if resolved.inputs:
        run["inputs"] = resolved.inputs
    if resolved.query_flags:
        run["query_flags"] = sorted(resolved.query_flags)
    sections: dict[str, Any] = {"run": run, "store": _store_record(resolved.key, depth, ks, fingerprint)}
    if resolved.reused is not None:
        run["reused_from"] = str(resolved.reused.path)
    else:
        sections["retrieval"] = resolved.retrieval
    return sections


def _store_record(run_key: str, depth: int, ks: list[int], fingerprint: str) -> dict[str, Any]:
    return {
        "run_key": run_key,
        "eval_key": content_key({"run": run_key, "ks": ks}),
        "depth": depth,
        "ks": ks,
        "fingerprint": fingerprint,
    }


def _stored_flags(entry: store.Entry) -> dict[str, dict[str, Any]]:
    """The per-query flags a setting recorded with a stored run (the columns per_query_metrics does not make)."""
    import pyarrow.parquet as pq

    path = entry.path / store.PER_QUERY_FILE
    flags = (entry.manifest.get("run") or {}).get("query_flags") or []
    if not flags or not path.is_file():
        return {}
    table = pq.read_table(path, columns=["query_id", *flags]).to_pandas()
    return {c: dict(zip(table["query_id"], table[c])) for c in flags}


def evaluate(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Run the stages ``cfg`` asks for and record them; returns ``metrics.json``'s content."""
    started = time.perf_counter()
    timings: dict[str, Any] = {}
    cache = ArtifactCache(
        Path(cfg.paths.cache_dir), cfg.cache_policy, integrity=cfg.cache_integrity, leases=_leases(cfg)
    )
    overrides = _overrides()
    check_inputs(cfg, overrides)  # parameter checks of the job and of every input run, before anything starts
    manifest = _start_manifest(cfg, overrides)
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

    ks, depth = [int(k) for k in cfg.eval.ks], int(cfg.depth)
    manifest["benchmark"] = {**bench.summary(), "root": str(bench.root)}
    resolver = RunResolver(bench, cache, ks)
    tick = time.perf_counter()
    resolved = resolver.resolve(cfg, overrides)
    timings["retrieve_s"] = time.perf_counter() - tick
    manifest.update(_run_sections(resolved, depth, ks, bench.fingerprint))

    tick = time.perf_counter()
    per_query, metrics = resolver.evaluate(resolved)
    timings["evaluate_s"] = time.perf_counter() - tick
    timings["wall_s"] = time.perf_counter() - started

    manifest["cache"] = cache.events
    manifest["timings"] = _rounded(timings)
    manifest = redact_secrets(manifest)  # the sections added since _start_manifest too (settings' stats)
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
        metrics = {"language": language, **summarise(per_query, ks)}
        setting_dir = store.setting_directory(
            cfg.paths.results_dir, f"{bench.name}.lang-{language}", cfg.retriever.id, cfg.setting.id
        )
        manifest["store"] = {
            **manifest["store"],
            "language": language,
            "eval_key": content_key({"run": resolved.key, "ks": ks, "language": language}),
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
