"""Retrieval settings: operators that turn runs into the evaluated run (paper §4.2).

A setting names its **input runs** (:class:`RunSpec`: a retriever, a setting and overrides, i.e.
what ``python run.py retriever=R setting=S <overrides>`` would compute, recursively) and combines
them in :meth:`Setting.make_run`. The pipeline resolves every input through the results store
first (computed once, filed as an entry of its own, reused by every setting and sweep point that
names it) and records the inputs' run keys in the manifest. A setting with no inputs works on the
job's retriever directly (:class:`Base`; query splitting).

:class:`DocumentScope` is the search scope ``document`` (MMDocIR's protocol: pages ranked within
the query's own document) as an operator over a deeper input run; every other setting searches the
whole corpus (scope ``corpus``), so both protocols are entries of their own on the same benchmark.

Adding a setting is one class here (or in its own module) and one ``conf/setting/<name>.yaml``.
Document-context scoring (``setting=ctx``) is not a setting class: it is an option of the
embedding retriever's search (``retriever.model.context``, set by ``conf/setting/ctx.yaml``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.data.runs import run_from_rows
from vldocir.errors import ConfigError
from vldocir.manifest import override_key
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.fusion import reciprocal_rank_fusion, round_robin

log = logging.getLogger(__name__)


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
    def parse(cls, value: Any) -> RunSpec:
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
            retriever = None if value.get("retriever") is None else str(value["retriever"])
            return cls(setting=str(value["setting"]), retriever=retriever, overrides=tuple(str(o) for o in overrides))
        raise ValueError(f"an input run is a setting name, 'retriever:setting' or a mapping, got {value!r}")

    def label(self) -> str:
        prefix = f"{self.retriever}:" if self.retriever else ""
        return prefix + self.setting + "".join(f" {o}" for o in self.overrides)


def parse_inputs(inputs: Any, least: int = 1) -> tuple[RunSpec, ...]:
    if isinstance(inputs, (str, Mapping)) or not isinstance(inputs, Sequence):
        raise ValueError(f"inputs must be a list of runs, got {inputs!r}")
    specs = tuple(RunSpec.parse(i) for i in inputs)
    if len(specs) < least:
        raise ValueError(f"needs at least {least} input run(s), got {len(specs)}")
    return specs


def fusion_inputs(inputs: Any) -> tuple[RunSpec, ...]:
    """The inputs of a merge of runs: two or more distinct ones. A merge of one run (or of a run
    with itself) ranks that run's pages in that run's order, so it would file a copy of its input
    under the merge's name."""
    specs = parse_inputs(inputs, least=0)
    if len(specs) == 1:
        only = specs[0]
        command = " ".join([f"retriever={only.retriever}"] * bool(only.retriever) + [f"setting={only.setting}"])
        raise ValueError(
            f"merges two or more runs, got one ({only.label()}): a merge of one run is that run; "
            f"run it as it is ({' '.join([command, *only.overrides])})"
        )
    if len(specs) < 2:
        raise ValueError(f"merges two or more runs, got {len(specs)}")
    twice = sorted({spec.label() for spec in specs if specs.count(spec) > 1})
    if twice:
        raise ValueError(f"names input run {', '.join(repr(t) for t in twice)} twice: give each run once")
    return specs


#: the ``setting.method`` keys that say what a setting combines: its method and its input runs
NAMED_METHOD_KEYS = ("_target_", "inputs", "input")


def check_id_names_inputs(setting: Setting, setting_id: str, overrides: Sequence[str]) -> None:
    """Refuse a job whose overrides change what its ``setting.id`` names, keeping that id.

    A setting file's id names its method and its input runs (``rrf-ctx-n256-ocr_bm25``: RRF of
    ctx and OCR-BM25), derived from the file's own knobs (``setting.fuse``, ``setting.scoped``,
    ``n_ctx``, ...). An override of the method or of its inputs themselves
    (``setting.method.inputs=...``, ``setting.method.input=...``, ``setting.method._target_=...``)
    makes another run, which that id would misname and the store would file, and reports read,
    as the named one; such a run needs an id of its own, given with ``setting.id=<name>``.
    """
    keys = [override_key(str(o)) for o in overrides if "=" in str(o) or str(o).startswith("~")]
    named = [
        key
        for key in keys
        if key == "setting.method" or any(key.split(".")[:3] == ["setting", "method", k] for k in NAMED_METHOD_KEYS)
    ]
    if not named or "setting.id" in keys:
        return
    runs = "-".join(_safe(spec.label()) for spec in setting.inputs())
    suggestion = "-".join(p for p in (str(setting.cache_params().get("setting", "")), runs) if p)
    raise ConfigError(
        f"{', '.join(dict.fromkeys(named))} changes what setting.id={setting_id} names (its method and input "
        f"runs), so the run would be filed as {setting_id}: give it an id of its own, e.g. setting.id={suggestion}"
    )


def _safe(label: str) -> str:
    """A run label (``ocr_bm25:base n_ctx=512``) as store-directory characters (``ocr_bm25.base_n_ctx_512``)."""
    return "".join(c if c.isalnum() or c in "._-" else ("." if c == ":" else "_") for c in label)


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
    #: the search scope: ``corpus`` (the whole corpus) or ``document`` (the query's own documents)
    scope: str = "corpus"

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
        self.runs = fusion_inputs(inputs)

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
        self.runs, self.k = fusion_inputs(inputs), k

    def inputs(self) -> tuple[RunSpec, ...]:
        return self.runs

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "rrf", "k": self.k}

    def make_run(self, job: RunJob) -> pa.Table:
        return reciprocal_rank_fusion(job.inputs, job.depth, self.k, query_ids=list(job.queries))


class DocumentScope(Setting):
    """Search scope ``document``: each query's pages ranked within its own document(s), the
    documents of its evidence pages (grade > 0; MMDocIR asks each question about one document),
    instead of the whole corpus.

    An operator over one input run (``input``: a setting of this job's retriever, or
    ``retriever:setting``), computed ``input_depth`` pages deep as a run of its own: its rows on the
    query's documents, in the input's order (score, then page_id), cut at the job's depth.

    Exactness: the input holds the corpus's top ``input_depth`` pages, so the pages of a document
    that it holds are exactly that document's top pages, in order (up to ties at the input's last
    score). Where the input was cut at ``input_depth`` before it held every page of a query's
    documents, that query is ranked exactly down to the pages held: its metrics at k are exact
    while k <= that number. (A query with fewer input rows than ``input_depth`` was not cut: the
    retriever ranks no other page, e.g. BM25's pages without a query term.) ``per_query.parquet``
    gives the counts per query (``scope_pages``, ``scope_pages_ranked``), the manifest
    (``retrieval.doc_scope``) the number of queries cut; ``input_depth`` >= the corpus's page count
    never cuts one.
    """

    uses_retriever = False
    scope = "document"

    def __init__(self, input: Any = "base", input_depth: int = 1000):
        if isinstance(input_depth, bool) or not isinstance(input_depth, int) or input_depth < 1:
            raise ValueError(f"input_depth must be an integer >= 1, got {input_depth!r}")
        spec = RunSpec.parse(input)
        self.input_depth = input_depth
        self.run = RunSpec(spec.setting, spec.retriever, (*spec.overrides, f"depth={input_depth}"))

    def inputs(self) -> tuple[RunSpec, ...]:
        return (self.run,)

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "doc_scope", "scope": "evidence_documents"}  # (the input's key holds its depth)

    def make_run(self, job: RunJob) -> pa.Table:
        run, stats, flags = scope_to_documents(job.inputs[0], job.bench, job.depth, list(job.queries), self.input_depth)
        job.stats["doc_scope"] = stats
        job.query_flags.update(flags)
        if stats["queries_cut"]:
            log.warning(
                "doc_scope: the input run (depth %d) was cut before it held every page of the documents of "
                "%d of %d queries (it holds at least %d of their pages each): their metrics are exact at k up to "
                "that; raise setting.input_depth to hold them whole",
                self.input_depth,
                stats["queries_cut"],
                stats["queries"],
                stats["fewest_pages_ranked_when_cut"],
            )
        return run


def scope_to_documents(
    run: pa.Table, bench: Benchmark, depth: int, query_ids: Sequence[str], input_depth: int | None = None
) -> tuple[pa.Table, dict[str, Any], dict[str, dict[str, Any]]]:
    """The rows of ``run`` on pages of each query's evidence documents, ranked and cut at ``depth``.

    ``input_depth``: the depth ``run`` was cut at (``None``: a query with fewer rows than its
    documents' pages counts as cut). Returns the run, stats (``queries``, ``queries_cut``,
    ``fewest_pages_ranked_when_cut``, ``rows_in``, ``rows_kept``) and per-query flags
    ``scope_pages`` (pages of the query's documents) and ``scope_pages_ranked`` (those in ``run``).
    """
    pages = bench.arrow("pages", ["page_id", "doc_id"])
    qrels = bench.arrow("qrels", ["query_id", "doc_id", "grade"])
    qrels = qrels.filter(pc.greater(pc.fill_null(qrels.column("grade"), 1), 0))  # evidence: grade > 0
    docs = pc.unique(pages.column("doc_id"))
    n_docs = len(docs)
    queries = pa.array(list(query_ids), pa.string())
    page_doc = _codes(pages.column("doc_id"), docs)
    # Each query's scope documents, as an (n_queries, width) table of document codes padded with -1.
    pair_query, pair_doc = _codes(qrels.column("query_id"), queries), _codes(qrels.column("doc_id"), docs)
    known = (pair_query >= 0) & (pair_doc >= 0)
    scope_keys = np.unique(pair_query[known] * n_docs + pair_doc[known])
    pair_query, pair_doc = scope_keys // n_docs, scope_keys % n_docs
    counts = np.bincount(pair_query, minlength=len(queries))
    scope_docs = np.full((len(queries), max(int(counts.max(initial=0)), 1)), -1, dtype=np.int64)
    scope_docs[pair_query, np.arange(len(pair_query)) - np.repeat(np.cumsum(counts) - counts, counts)] = pair_doc
    row_query = _codes(run.column("query_id"), queries)
    row_page = _codes(run.column("page_id"), pages.column("page_id").combine_chunks())
    if (row_query < 0).any() or (row_page < 0).any():
        raise ValueError("doc_scope: the input run names queries or pages that the benchmark does not have")
    row_doc = page_doc[row_page]
    inside = np.zeros(len(row_doc), dtype=bool)
    for slot in range(scope_docs.shape[1]):
        inside |= scope_docs[:, slot][row_query] == row_doc
    kept = run.filter(pa.array(inside))
    rows = pa.table(
        {
            "query_id": kept.column("query_id").cast(pa.string()),
            "page_id": kept.column("page_id").cast(pa.string()),
            "score": kept.column("score"),
        }
    )
    scoped, conversion = run_from_rows(rows, list(query_ids), depth)

    doc_pages = np.bincount(page_doc, minlength=n_docs)
    scope_pages = np.bincount(scope_keys // n_docs, weights=doc_pages[scope_keys % n_docs], minlength=len(queries))
    ranked = np.bincount(row_query[inside], minlength=len(queries))
    cut = ranked < scope_pages
    if input_depth is not None:
        cut &= np.bincount(row_query, minlength=len(queries)) >= input_depth
    stats = {
        "queries": len(query_ids),
        "queries_cut": int(cut.sum()),
        "fewest_pages_ranked_when_cut": int(ranked[cut].min()) if cut.any() else None,
        "rows_in": conversion["rows_in"],
        "rows_kept": conversion["rows_kept"],
    }
    flags = {
        "scope_pages": dict(zip(query_ids, scope_pages.astype(np.int64).tolist(), strict=True)),
        "scope_pages_ranked": dict(zip(query_ids, ranked.tolist(), strict=True)),
    }
    return scoped, stats, flags


def _codes(values: pa.ChunkedArray | pa.Array, value_set: pa.Array) -> np.ndarray:
    """(n,) int64 position of each value in ``value_set`` (distinct strings), -1 where absent. A
    dictionary-encoded column (a run read from the store) is looked up one dictionary at a time."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    out = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            lookup = pc.index_in(chunk.dictionary.cast(pa.string()), value_set=value_set).fill_null(-1).to_numpy()
            codes = lookup.astype(np.int64)[chunk.indices.to_numpy(zero_copy_only=False)]
            if chunk.null_count:
                codes[chunk.is_null().to_numpy(zero_copy_only=False)] = -1
            out.append(codes)
        else:
            out.append(pc.index_in(chunk, value_set=value_set).fill_null(-1).to_numpy().astype(np.int64))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
