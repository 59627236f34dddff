"""Resolving a job's run through the results store (:class:`RunResolver`): the setting's input runs
first, each composed as a job of its own, resolved the same way and filed as an entry of its own;
then the run itself, reused from the store when an entry holds its content key and verifies, else
computed by the setting from its inputs; and the manifest sections that say which it was
(:func:`run_sections`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from omegaconf import DictConfig

from vldocir import store
from vldocir.cache import ArtifactCache, content_key
from vldocir.data.benchmark import Benchmark
from vldocir.evaluation.aggregate import summarise
from vldocir.evaluation.metrics import RUN_COLUMNS, EvidenceIndex, per_query_metrics
from vldocir.evaluation.protocol import Protocol, summarise_protocol
from vldocir.leases import Lease
from vldocir.manifest import redact_secrets
from vldocir.pipeline.jobs import plan_job, start_manifest
from vldocir.retrieval.settings import RunJob

log = logging.getLogger(__name__)


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
    scope: str = "corpus"  # the setting's search scope (corpus | document)

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
    manifest. Every evaluation follows the dataset's ``protocol`` (``None``: none; ``pooled``: add
    the pooled view, see :mod:`vldocir.evaluation.protocol`).
    """

    def __init__(
        self,
        bench: Benchmark,
        cache: ArtifactCache,
        ks: list[int],
        protocol: Protocol | None = None,
        pooled: bool = False,
    ):
        self.bench, self.cache, self.ks = bench, cache, ks
        self.protocol, self.pooled = protocol, pooled
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
            resolved = ResolvedRun(
                None, key, stored, setting_dir, inputs=inputs, query_flags=_stored_flags(stored), scope=setting.scope
            )
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
                dict(zip(queries["query_id"], queries["text"], strict=True)),
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
                run,
                key,
                None,
                setting_dir,
                retrieval=job.stats,
                inputs=inputs,
                query_flags=job.query_flags,
                scope=setting.scope,
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
        return per_query, self.summarise(per_query, resolved.scope)

    def summarise(self, per_query: pd.DataFrame, scope: str) -> dict:
        """``metrics.json`` of per-query rows (all, or one language's): under the protocol if there is one."""
        if self.protocol is None:
            return summarise(per_query, self.ks)
        return summarise_protocol(per_query, self.ks, self.protocol, self.pooled, run_scope=scope)

    @property
    def eval_params(self) -> dict[str, Any]:
        """What besides the run and ks makes ``metrics.json`` (part of the store's ``eval_key``)."""
        return {} if self.protocol is None else self.protocol.eval_params(self.pooled)

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
        manifest = start_manifest(cfg, overrides)
        manifest.update(
            input_of=chain[-1],
            benchmark={**self.bench.summary(), "root": str(self.bench.root)},
            cache=[],
            **run_sections(resolved, int(cfg.depth), self.ks, self.bench.fingerprint, self.eval_params),
        )
        resolved.entry = store.publish(
            resolved.setting_dir,
            name,
            run=None if resolved.reused else resolved.run,
            reused=resolved.reused,
            per_query=per_query,
            metrics=metrics,
            manifest=redact_secrets(manifest),  # the sections added since start_manifest too
        )
        if resolved.claim is not None:  # filed: the jobs waiting for this run reuse it now
            resolved.claim.release()
        log.info("input run %s/%s filed in %s", cfg.retriever.id, cfg.setting.id, resolved.entry)
        return resolved


def run_sections(
    resolved: ResolvedRun, depth: int, ks: list[int], fingerprint: str, eval_params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest's ``run``, ``store`` and (for a run computed now) ``retrieval`` sections.
    ``eval_params``: what else makes the evaluation (a protocol), hashed into ``eval_key``."""
    run: dict[str, Any] = {"key": resolved.key, "depth": depth, "reused": resolved.reused is not None}
    if resolved.inputs:
        run["inputs"] = resolved.inputs
    if resolved.query_flags:
        run["query_flags"] = sorted(resolved.query_flags)
    sections: dict[str, Any] = {
        "run": run,
        "store": _store_record(resolved.key, depth, ks, fingerprint, eval_params or {}),
    }
    if resolved.reused is not None:
        run["reused_from"] = str(resolved.reused.path)
    else:
        sections["retrieval"] = resolved.retrieval
    return sections


def _store_record(run_key: str, depth: int, ks: list[int], fingerprint: str, eval_params: dict) -> dict[str, Any]:
    return {
        "run_key": run_key,
        "eval_key": content_key({"run": run_key, "ks": ks, **eval_params}),
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
    return {c: dict(zip(table["query_id"], table[c], strict=True)) for c in flags}
