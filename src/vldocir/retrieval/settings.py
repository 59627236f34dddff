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
    query's documents, in the input's order (score, then page_id), then the pages of those
    documents that the input did not return, cut at the job's depth.

    Pages not returned. A query with fewer input rows than ``input_depth`` was not cut: the
    retriever ranks no other page (BM25 returns only pages sharing a term with the query). Its
    documents' other pages are appended in page order (page_index, then page_id) with scores
    strictly below its lowest returned score, so every question has a ranking of its whole
    document(s), as the protocol ranks every page; the run's stats (``retrieval.doc_scope``) count
    them (``pages_appended``, and a ``note``: "doc_scope: N pages the retriever did not return were
    appended in page order"), ``per_query.parquet`` per query (``scope_pages_appended``).

    Exactness: the input holds the corpus's top ``input_depth`` pages, so the pages of a document
    that it holds are exactly that document's top pages, in order (up to ties at the input's last
    score). Where the input was cut at ``input_depth`` before it held every page of a query's
    documents, that query is ranked exactly down to the pages held (nothing is appended to it): its
    metrics at k are exact while k <= that number. ``per_query.parquet`` gives the counts per query
    (``scope_pages``, ``scope_pages_ranked``: those the input ranked), the manifest
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
        # (the input's key holds its depth); "unreturned": runs made before pages were appended differ
        return {"setting": "doc_scope", "scope": "evidence_documents", "unreturned": "appended_in_page_order"}

    def make_run(self, job: RunJob) -> pa.Table:
        run, stats, flags = scope_to_documents(job.inputs[0], job.bench, job.depth, list(job.queries), self.input_depth)
        job.stats["doc_scope"] = stats
        job.query_flags.update(flags)
        log.info("%s", stats["note"])
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
    """The rows of ``run`` on pages of each query's evidence documents, then the pages of those
    documents that ``run`` did not return (for a query it holds whole), ranked and cut at ``depth``.

    ``input_depth``: the depth ``run`` was cut at. A query with fewer rows than that was not cut:
    its documents' pages missing from ``run`` are appended in page order (page_index, then page_id)
    with scores strictly below its lowest returned one (``None``: nothing is appended, and a query
    with fewer rows than its documents' pages counts as cut). Returns the run, stats (``queries``,
    ``queries_cut``, ``fewest_pages_ranked_when_cut``, ``pages_appended``,
    ``queries_with_pages_appended``, ``note``, ``rows_in``, ``rows_kept``) and per-query flags
    ``scope_pages`` (pages of the query's documents), ``scope_pages_ranked`` (those in ``run``)
    and ``scope_pages_appended``.
    """
    pages = bench.arrow("pages", ["page_id", "doc_id", "page_index"])
    qrels = bench.arrow("qrels", ["query_id", "doc_id", "grade"])
    qrels = qrels.filter(pc.greater(pc.fill_null(qrels.column("grade"), 1), 0))  # evidence: grade > 0
    docs = pc.unique(pages.column("doc_id"))
    n_docs = len(docs)
    queries = pa.array(list(query_ids), pa.string())
    page_ids = pages.column("page_id").combine_chunks()
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
    row_page = _codes(run.column("page_id"), page_ids)
    if (row_query < 0).any() or (row_page < 0).any():
        raise ValueError("doc_scope: the input run names queries or pages that the benchmark does not have")
    row_doc = page_doc[row_page]
    inside = np.zeros(len(row_doc), dtype=bool)
    for slot in range(scope_docs.shape[1]):
        inside |= scope_docs[:, slot][row_query] == row_doc
    kept = run.filter(pa.array(inside))
    rows_per_query = np.bincount(row_query, minlength=len(queries))
    input_cut = np.ones(len(queries), bool) if input_depth is None else rows_per_query >= input_depth
    appended_query, appended_page, appended_score = _unreturned_pages(
        pages,
        page_doc,
        pair_query[~input_cut[pair_query]],
        pair_doc[~input_cut[pair_query]],
        row_query[inside],
        row_page[inside],
        kept.column("score"),
        len(queries),
    )
    rows = pa.table(
        {
            "query_id": pa.concat_arrays(
                [kept.column("query_id").cast(pa.string()).combine_chunks(), queries.take(appended_query)]
            ),
            "page_id": pa.concat_arrays(
                [kept.column("page_id").cast(pa.string()).combine_chunks(), page_ids.take(appended_page)]
            ),
            "score": pa.concat_arrays(
                [kept.column("score").cast(pa.float64()).combine_chunks(), pa.array(appended_score, pa.float64())]
            ),
        }
    )
    scoped, conversion = run_from_rows(rows, list(query_ids), depth)

    doc_pages = np.bincount(page_doc, minlength=n_docs)
    scope_pages = np.bincount(scope_keys // n_docs, weights=doc_pages[scope_keys % n_docs], minlength=len(queries))
    ranked = np.bincount(row_query[inside], minlength=len(queries))
    appended = np.bincount(appended_query, minlength=len(queries))
    cut = (ranked < scope_pages) & input_cut
    stats = {
        "queries": len(query_ids),
        "queries_cut": int(cut.sum()),
        "fewest_pages_ranked_when_cut": int(ranked[cut].min()) if cut.any() else None,
        "pages_appended": int(appended.sum()),
        "queries_with_pages_appended": int((appended > 0).sum()),
        "note": f"doc_scope: {int(appended.sum())} pages the retriever did not return were appended in page order",
        "rows_in": conversion["rows_in"],
        "rows_kept": conversion["rows_kept"],
    }
    flags = {
        "scope_pages": dict(zip(query_ids, scope_pages.astype(np.int64).tolist(), strict=True)),
        "scope_pages_ranked": dict(zip(query_ids, ranked.tolist(), strict=True)),
        "scope_pages_appended": dict(zip(query_ids, appended.tolist(), strict=True)),
    }
    return scoped, stats, flags


def _unreturned_pages(
    pages: pa.Table,
    page_doc: np.ndarray,
    pair_query: np.ndarray,
    pair_doc: np.ndarray,
    ranked_query: np.ndarray,
    ranked_page: np.ndarray,
    ranked_score: pa.ChunkedArray,
    n_queries: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pages of the (query, document) pairs given that the run did not rank for that query, in
    page order (page_index, then page_id) per query, scored 1, 2, ... below the query's lowest
    ranked score (0 without one). Returns (A,) query codes, page codes and float64 scores."""
    n_pages = len(page_doc)
    page_ids = pages.column("page_id").combine_chunks()
    page_index = pages.column("page_index").to_numpy(zero_copy_only=False)
    id_rank = np.empty(n_pages, dtype=np.int64)
    id_rank[pc.sort_indices(page_ids).to_numpy()] = np.arange(n_pages)
    order_rank = np.empty(n_pages, dtype=np.int64)
    order_rank[np.lexsort((id_rank, page_index))] = np.arange(n_pages)  # position in page order
    by_doc = np.argsort(page_doc, kind="stable")
    doc_pages = np.bincount(page_doc, minlength=int(page_doc.max(initial=-1)) + 1)
    doc_start = np.cumsum(doc_pages) - doc_pages
    lengths = doc_pages[pair_doc]
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    query = np.repeat(pair_query, lengths)
    page = by_doc[np.repeat(doc_start[pair_doc], lengths) + offsets]
    new = ~np.isin(query * n_pages + page, ranked_query * n_pages + ranked_page)
    query, page = query[new], page[new]
    order = np.lexsort((order_rank[page], query))
    query, page = query[order], page[order]
    lowest = np.full(n_queries, np.inf)
    np.minimum.at(lowest, ranked_query, ranked_score.to_numpy().astype(np.float64))
    lowest[np.isinf(lowest)] = 0.0
    counts = np.bincount(query, minlength=n_queries)
    position = np.arange(len(query)) - np.repeat(np.cumsum(counts) - counts, counts)
    return query, page, lowest[query] - (position + 1)


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
