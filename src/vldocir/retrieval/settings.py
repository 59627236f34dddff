"""Retrieval settings: operators that turn runs into the evaluated run (paper §4.2).

A setting names its **input runs** (:class:`RunSpec`: a retriever, a setting and overrides, i.e.
what ``python run.py retriever=R setting=S <overrides>`` would compute, recursively) and combines
them in :meth:`Setting.make_run`. The pipeline resolves every input through the results store
first (computed once, filed as an entry of its own, reused by every setting and sweep point that
names it) and records the inputs' run keys in the manifest. A setting with no inputs works on the
job's retriever directly (:class:`Base`; query splitting).

Adding a setting is one class here (or in its own module) and one ``conf/setting/<name>.yaml``.
Document-context scoring (``setting=ctx``) is not a setting class: it is an option of the
embedding retriever's search (``retriever.model.context``, set by ``conf/setting/ctx.yaml``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.fusion import reciprocal_rank_fusion, round_robin


@dataclass(frozen=True)
class RunSpec:
    """One input run: ``setting`` (a ``conf/setting`` name) of ``retriever`` (a ``conf/retriever``
    name; ``None``: the job's own retriever, with the job's overrides of it), plus ``overrides``
    (Hydra overrides, e.g. ``["n_ctx=512"]``). The job's other overrides (dataset, paths, depth,
    n_ctx, ...) carry over."""

    setting: str
    retriever: str | None = None
    overrides: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: Any) -> "RunSpec":
        """From YAML: ``base``, ``ocr_bm25:base``, or ``{setting: ctx, retriever: null, overrides: [...]}``."""
        if isinstance(value, RunSpec):
            return value
        if isinstance(value, str):
            retriever, _, setting = value.rpartition(":")
            return cls(setting=setting, retriever=retriever or None)
        if isinstance(value, Mapping):
            unknown = set(value) - {"setting", "retriever", "overrides"}
            if unknown or "setting" not in value:
                raise ValueError(f"an input run is {{setting, retriever, overrides}}, got {dict(value)!r}")
            overrides = value.get("overrides") or ()
            if isinstance(overrides, str):
                overrides = (overrides,)
            return cls(setting=str(value["setting"]), retriever=None if value.get("retriever") is None else str(value["retriever"]),
                       overrides=tuple(str(o) for o in overrides))
        raise ValueError(f"an input run is a setting name, 'retriever:setting' or a mapping, got {value!r}")

    def label(self) -> str:
        return (f"{self.retriever}:" if self.retriever else "") + self.setting + "".join(f" {o}" for o in self.overrides)


def parse_inputs(inputs: Any, least: int = 1) -> tuple[RunSpec, ...]:
    if isinstance(inputs, (str, Mapping)) or not isinstance(inputs, Sequence):
        raise ValueError(f"inputs must be a list of runs, got {inputs!r}")
    specs = tuple(RunSpec.parse(i) for i in inputs)
    if len(specs) < least:
        raise ValueError(f"needs at least {least} input run(s), got {len(specs)}")
    return specs


@dataclass
class RunJob:
    """What a setting works with: the benchmark, the queries (``query_id -> text``), the depth,
    the artifact cache, the job's retriever, the input runs (in :meth:`Setting.inputs` order),
    ``stats``, which the manifest records under ``retrieval``, and ``query_flags`` (column name ->
    ``{query_id: value}``), which become extra columns of the entry's ``per_query.parquet``."""

    bench: Benchmark
    queries: dict[str, str]
    depth: int
    cache: ArtifactCache
    retriever: Retriever
    inputs: list[pa.Table] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    query_flags: dict[str, dict[str, Any]] = field(default_factory=dict)


class Setting(ABC):
    #: whether the run depends on the job's retriever itself (beyond its input runs): part of the run key
    uses_retriever: bool = True

    def inputs(self) -> tuple[RunSpec, ...]:
        """The runs this setting combines; none for a setting that searches with the retriever."""
        return ()

    @abstractmethod
    def cache_params(self) -> dict[str, Any]:
        """Everything about the setting that changes the run (the inputs' keys are added by the pipeline)."""

    @abstractmethod
    def make_run(self, job: RunJob) -> pa.Table:
        """The run, top ``job.depth`` per query."""


class Base(Setting):
    """The retriever's own top-N (with document-context scoring when the retriever has it on)."""

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "base"}

    def make_run(self, job: RunJob) -> pa.Table:
        run = job.retriever.retrieve(job.bench, job.queries, job.depth, job.cache)
        job.stats.update(getattr(job.retriever, "stats", {}))
        return run


class RoundRobin(Setting):
    """Round robin over the input runs (the first input first), duplicates skipped (paper: B+Ctx,
    the ensembles). See :func:`vldocir.retrieval.fusion.round_robin_lists`."""

    uses_retriever = False

    def __init__(self, inputs: Sequence[Any]):
        self.runs = parse_inputs(inputs, least=1)

    def inputs(self) -> tuple[RunSpec, ...]:
        return self.runs

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "round_robin"}

    def make_run(self, job: RunJob) -> pa.Table:
        return round_robin(job.inputs, job.depth, query_ids=list(job.queries))


class ReciprocalRankFusion(Setting):
    """Equal-weight reciprocal rank fusion of the input runs, ``sum 1 / (k + rank)`` (Table 13's hybrids)."""

    uses_retriever = False

    def __init__(self, inputs: Sequence[Any], k: int = 60):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        self.runs, self.k = parse_inputs(inputs, least=1), k

    def inputs(self) -> tuple[RunSpec, ...]:
        return self.runs

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "rrf", "k": self.k}

    def make_run(self, job: RunJob) -> pa.Table:
        return reciprocal_rank_fusion(job.inputs, job.depth, self.k, query_ids=list(job.queries))
