"""Per-query evidence-complete metrics over a run, vectorised for paper-scale runs.

Notation of the paper (§4.1, App. B.2): E(q) the evidence pages of query q, R_k(q) its top-k pages.

- Recall@k(q)    = |E(q) ∩ R_k(q)| / |E(q)|
- nDCG@k(q)      = DCG@k / IDCG@k with gain g(p) and 1/log2(rank+1) discounts,
                   IDCG@k summing the min(|E(q)|, k) largest gains times the first discounts
- RecallAll@k(q) = 1[E(q) ⊆ R_k(q)]
- nDCGAll@k(q)   = RecallAll@k(q) · nDCG@k(q)
- MRR@k(q)       = 1 / (rank of the first evidence page) when that rank <= k, else 0 (mteb's
                   ``MRR@k``; a per-query column, not one of :data:`METRICS`, like ``pages_found@k``)

Graded relevance. The qrels may carry a ``grade`` (ViDoRe v2/v3, BEIR; absent or null: 1, so a
benchmark without grades is binary and evaluates as before, bit for bit). E(q) is the set of pages
with grade > 0: Recall, RecallAll and nDCGAll count every such page as evidence, whatever its grade;
a qrel of grade 0 (judged not relevant) is not evidence. nDCG uses the grade as the gain,
g(p) = grade (trec_eval's ``ndcg_cut``, not 2^grade - 1), so it equals trec_eval's ``ndcg_cut_k``
with graded qrels (``tests/evaluation/test_graded.py`` checks it against pytrec_eval).

Ranks are derived here, never trusted from the run: pages are ordered by score (descending), ties
broken by page_id (ascending), so two runs with the same scores evaluate identically. A query
absent from the run scores 0 on every metric and is flagged ``in_run = False``.

Everything works on integer codes: pages are numbered in page_id order (so comparing codes compares
page_ids), queries in the benchmark's order; :mod:`vldocir.evaluation.codes` makes them. Only the
first max(k) rows of each query are ever matched against the evidence, which keeps a
27-million-row run to a few seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa

from vldocir.evaluation.codes import (
    GRADE,
    LANGUAGE,
    RunError,
    RunIds,
    all_distinct,
    evidence_fields,
    unique_string_values,
)

__all__ = ["METRICS", "RUN_COLUMNS", "EvidenceIndex", "RunError", "metric_columns", "per_query_metrics", "rank_run"]

METRICS = ("ndcg", "recall", "ndcgall", "recallall")

INDEX_COLUMNS = {
    "queries": ("query_id", "evidence_structure", "source", "domain", "generator", "evidence_types"),
    "qrels": ("query_id", "page_id"),
    "pages": ("page_id", "doc_id"),
}
"""The columns an :class:`EvidenceIndex` is made of, per table (in ``from_tables``' argument order)."""

OPTIONAL_INDEX_COLUMNS = {"queries": (LANGUAGE,), "qrels": (GRADE,)}
"""Columns read too (their defaults where a table lacks them): the query's language, the qrel's grade."""

RUN_COLUMNS = ("query_id", "page_id", "score")
"""The columns of a run that the metrics read (they rank rows themselves: a stored ``rank`` is not needed)."""


def metric_columns(ks: Sequence[int]) -> list[str]:
    """Column names in the paper's order: ``ndcg@3, ndcg@5, ..., recallall@10``."""
    return [f"{m}@{k}" for m in METRICS for k in ks]


@dataclass
class EvidenceIndex:
    """The benchmark's queries and evidence as integer arrays, built once per benchmark.

    Attributes:
        query_ids: (Q,) benchmark query ids, in benchmark order; query code = position.
        page_ids: (P,) page ids sorted ascending; page code = position.
        evidence_pages: (Q, E) int32 page codes of each query's evidence, padded with -1.
        evidence_grades: (Q, E) float64 grades (gains) of those pages, padded with 0; ``None`` when
            every evidence grade is 1 (binary relevance).
        evidence_docs: (Q, D) int32 document codes of each query's evidence documents, padded with -1.
        page_doc: (P,) int32 document code of each page.
        queries: query attributes (structure, source, domain, generator, evidence_type, and language
            where the queries have one), index = query code.
    """

    query_ids: pd.Index
    page_ids: pd.Index
    evidence_pages: np.ndarray
    evidence_docs: np.ndarray
    page_doc: np.ndarray
    queries: pd.DataFrame
    evidence_grades: np.ndarray | None = None

    @classmethod
    def from_benchmark(cls, bench) -> EvidenceIndex:
        """From a :class:`~vldocir.data.benchmark.Benchmark`, reading only :data:`INDEX_COLUMNS` and
        :data:`OPTIONAL_INDEX_COLUMNS` (their defaults where a table lacks them), not the query texts
        and answers, nor the qrels' element ids: half the time at paper scale."""
        return cls.from_tables(
            *(
                bench.arrow(name, (*columns, *OPTIONAL_INDEX_COLUMNS.get(name, ()))).to_pandas()
                for name, columns in INDEX_COLUMNS.items()
            )
        )

    @classmethod
    def from_tables(cls, queries: pd.DataFrame, qrels: pd.DataFrame, pages: pd.DataFrame) -> EvidenceIndex:
        fields, arrow_ids = evidence_fields(queries, qrels, pages)
        index = cls(**fields)
        index.__dict__["_arrow_id_cache"] = arrow_ids
        return index

    def _arrow_ids(self, name: str) -> pa.Array | None:
        """``query_ids`` or ``page_ids`` as Arrow strings for fast lookups (``None``: use pandas).

        Cached per Index object, so that replacing the attribute invalidates it.
        """
        ids = getattr(self, name)
        cache = self.__dict__.setdefault("_arrow_id_cache", {})
        cached = cache.get(name)
        if cached is None or cached[0] is not ids:
            cached = cache[name] = (ids, unique_string_values(ids))
        return cached[1]

    @cached_property
    def n_evidence(self) -> np.ndarray:
        return (self.evidence_pages >= 0).sum(axis=1)

    @cached_property
    def n_evidence_docs(self) -> np.ndarray:
        return (self.evidence_docs >= 0).sum(axis=1)

    def ideal_dcg(self, depth: int) -> np.ndarray:
        """(Q, depth) float64: IDCG@k of each query for k = 1..depth (column k - 1).

        Binary: the sum of the first min(|E|, k) discounts. Graded: each query's grades sorted
        descending times the discounts, summed (the padding's zero gains add nothing).
        """
        discounts = 1.0 / np.log2(np.arange(2, depth + 2))
        ideal_cumulative = np.cumsum(discounts)
        if self.evidence_grades is None:
            return ideal_cumulative[np.minimum(self.n_evidence[:, None], np.arange(1, depth + 1)) - 1]
        gains = -np.sort(-self.evidence_grades, axis=1)[:, :depth]
        width = gains.shape[1]
        cumulative = np.cumsum(gains * discounts[:width], axis=1)
        return cumulative[:, np.minimum(np.arange(depth), width - 1)]


def rank_run(run: pa.Table, index: EvidenceIndex, depth: int | None = None):
    """Order a run by (query, score desc, page_id asc) and cut it at ``depth`` rows per query.

    Returns:
        qcode: (R,) int64 query code per kept row
        pcode: (R,) int64 page code per kept row
        rank: (R,) int32 0-based rank within the query
    """
    queries = RunIds(run.column("query_id"), index.query_ids, "query", index._arrow_ids("query_ids"))
    pages = RunIds(run.column("page_id"), index.page_ids, "page", index._arrow_ids("page_ids"))
    score = run.column("score").to_numpy()
    if score.dtype != np.float32:  # float32 compares exactly as its float64 widening would
        score = score.astype(np.float64, copy=False)
    if np.isnan(score).any():
        raise RunError(f"the run has {int(np.isnan(score).sum())} NaN scores")
    n_rows = len(queries)
    # Runs written by vldocir are already in this order; checking is O(R) and cheaper than sorting.
    # Within a query, a row is in order if its score is lower than the previous row's, or equal
    # with a larger page code: only rows without a lower score need their page codes.
    same = queries.same_as_previous()
    suspect = np.flatnonzero(same > (score[1:] < score[:-1]))
    in_order = bool(((score[suspect + 1] == score[suspect]) & (pages.at(suspect + 1) > pages.at(suspect))).all())
    starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if n_rows else np.zeros(0, np.int64)
    # Each query in one block of rows: the blocks' queries are all different.
    contiguous = all_distinct(queries.at(starts))
    qcode = pcode = None
    if not (in_order and contiguous):
        qcode, pcode = queries.all(), pages.all()
        order = np.lexsort((pcode, -score, qcode))
        qcode, pcode = qcode[order], pcode[order]
        same = qcode[1:] == qcode[:-1]
        starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if n_rows else np.zeros(0, np.int64)
    del same, score, suspect
    lengths = np.diff(np.concatenate((starts, [n_rows])))
    if depth is None:
        rank = (np.arange(n_rows) - np.repeat(starts, lengths)).astype(np.int32)
        qcode = queries.all() if qcode is None else qcode
        pcode = pages.all() if pcode is None else pcode
        qcode, pcode = qcode.astype(np.int64), pcode.astype(np.int64)
    else:
        # Gather the first ``depth`` rows of each query directly.
        kept = np.minimum(lengths, max(int(depth), 0))
        first_out = np.cumsum(kept) - kept
        rank = (np.arange(int(kept.sum())) - np.repeat(first_out, kept)).astype(np.int32)
        rows = np.repeat(starts, kept) + rank
        qcode = queries.at(rows) if qcode is None else qcode[rows]
        pcode = pages.at(rows) if pcode is None else pcode[rows]
        qcode, pcode = qcode.astype(np.int64), pcode.astype(np.int64)
        lengths = kept
    # A page listed twice for one query would count twice. Each query's rows are one block now:
    # sort the blocks' page codes side by side (padded with distinct negative values) and compare
    # neighbours; when that table would be large, fall back to np.unique over (query, page) keys.
    width = int(lengths.max(initial=0))
    if width and len(lengths) * width <= 4 * len(pcode) + 1024:
        table = np.broadcast_to(-1 - np.arange(width, dtype=np.int64), (len(lengths), width)).copy()
        table[np.repeat(np.arange(len(lengths)), lengths), rank] = pcode
        table.sort(axis=1)
        duplicated = bool((table[:, 1:] == table[:, :-1]).any())
    else:
        key = qcode * len(index.page_ids) + pcode
        duplicated = len(np.unique(key)) != len(key)
    if duplicated:
        key = qcode * len(index.page_ids) + pcode
        dup = pd.Series(key).duplicated().to_numpy()
        first = int(np.flatnonzero(dup)[0])
        raise RunError(
            f"the run lists page {index.page_ids[pcode[first]]} more than once for query "
            f"{index.query_ids[qcode[first]]}"
        )
    return qcode, pcode, rank


def per_query_metrics(run: pa.Table, index: EvidenceIndex, ks: Sequence[int]) -> pd.DataFrame:
    """One row per benchmark query: its attributes, evidence counts and every metric at every k.

    Metric columns are fractions in [0, 1]; ``pages_found@k``/``docs_found@k`` count the evidence
    pages and evidence documents (any page of the document) in the top k; ``mrr@k`` is the
    reciprocal rank of the first evidence page in the top k (0 when none is).
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs k must be positive integers, got {ks}")
    n_queries = len(index.query_ids)
    qcode, pcode, rank = rank_run(run, index, depth=ks[-1])

    # Only rows that hit an evidence page or an evidence document count: find them once, column by
    # column of the padded evidence, then count per k over those few rows (kept in row order, so
    # the sums are the same as over all rows).
    relevant = np.zeros(len(qcode), dtype=bool)
    grades = index.evidence_grades
    gain = None if grades is None else np.zeros(len(qcode), dtype=np.float64)
    for slot in range(index.evidence_pages.shape[1]):
        match = index.evidence_pages[:, slot][qcode] == pcode
        relevant |= match
        if gain is not None:
            gain[match] = grades[:, slot][qcode[match]]
    hit_rows = np.flatnonzero(relevant)
    hit_query, hit_rank = qcode[hit_rows], rank[hit_rows]
    hit_gain = None if gain is None else gain[hit_rows]
    row_doc = index.page_doc[pcode]
    # 0-based rank of each query's first evidence page (max(k): none in the run's top max(k) rows)
    first_hit = np.full(n_queries, ks[-1], dtype=np.int64)
    np.minimum.at(first_hit, hit_query, hit_rank)
    doc_hits = []  # per evidence-document slot: (query, rank) of the rows on that document
    for slot in range(index.evidence_docs.shape[1]):
        rows = np.flatnonzero(index.evidence_docs[:, slot][qcode] == row_doc)
        doc_hits.append((qcode[rows], rank[rows]))

    n_ev = index.n_evidence
    discounts = 1.0 / np.log2(np.arange(2, ks[-1] + 2))
    ideal_cumulative = np.cumsum(discounts)
    graded_ideal = None if grades is None else index.ideal_dcg(ks[-1])
    out = index.queries.copy()
    out["n_evidence_pages"] = n_ev
    out["n_evidence_docs"] = index.n_evidence_docs
    out["in_run"] = np.bincount(qcode, minlength=n_queries) > 0
    columns = {}
    for k in ks:
        top = hit_rank < k
        found = np.bincount(hit_query[top], minlength=n_queries)
        weights = discounts[hit_rank[top]] if hit_gain is None else discounts[hit_rank[top]] * hit_gain[top]
        dcg = np.bincount(hit_query[top], weights=weights, minlength=n_queries)
        idcg = ideal_cumulative[np.minimum(n_ev, k) - 1] if graded_ideal is None else graded_ideal[:, k - 1]
        ndcg = dcg / idcg
        complete = (found == n_ev).astype(np.float64)
        docs_found = np.zeros(n_queries, dtype=np.int64)
        for doc_query, doc_rank in doc_hits:
            docs_found += np.bincount(doc_query[doc_rank < k], minlength=n_queries) > 0
        columns |= {
            f"ndcg@{k}": ndcg,
            f"recall@{k}": found / n_ev,
            f"ndcgall@{k}": complete * ndcg,
            f"recallall@{k}": complete,
            f"pages_found@{k}": found,
            f"docs_found@{k}": docs_found,
            f"mrr@{k}": np.where(first_hit < k, 1.0 / (first_hit + 1), 0.0),
        }
    return pd.concat([out, pd.DataFrame(columns)], axis=1)
