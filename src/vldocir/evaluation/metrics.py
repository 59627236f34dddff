"""Per-query evidence-complete metrics over a run, vectorised for paper-scale runs.

Notation of the paper (§4.1, App. B.2): E(q) the evidence pages of query q, R_k(q) its top-k pages.

- Recall@k(q)    = |E(q) ∩ R_k(q)| / |E(q)|
- nDCG@k(q)      = DCG@k / IDCG@k with binary gains and 1/log2(rank+1) discounts,
                   IDCG@k summing the first min(|E(q)|, k) discounts
- RecallAll@k(q) = 1[E(q) ⊆ R_k(q)]
- nDCGAll@k(q)   = RecallAll@k(q) · nDCG@k(q)

Ranks are derived here, never trusted from the run: pages are ordered by score (descending), ties
broken by page_id (ascending), so two runs with the same scores evaluate identically. A query
absent from the run scores 0 on every metric and is flagged ``in_run = False``.

Everything works on integer codes: pages are numbered in page_id order (so comparing codes compares
page_ids), queries in the benchmark's order. Only the first max(k) rows of each query are ever
matched against the evidence, which keeps a 27-million-row run to a few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.data.schema import EVIDENCE_STRUCTURES

METRICS = ("ndcg", "recall", "ndcgall", "recallall")


def metric_columns(ks: Sequence[int]) -> list[str]:
    """Column names in the paper's order: ``ndcg@3, ndcg@5, ..., recallall@10``."""
    return [f"{m}@{k}" for m in METRICS for k in ks]


class RunError(ValueError):
    """A run that cannot be evaluated against this benchmark."""


def _padded(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Scatter ``values`` (sorted by ``groups``) into an (n_groups, max_count) int32 array padded with -1."""
    counts = np.bincount(groups, minlength=n_groups)
    width = max(int(counts.max(initial=0)), 1)
    out = np.full((n_groups, width), -1, dtype=np.int32)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    slot = np.arange(len(groups)) - np.repeat(starts, counts)
    out[groups, slot] = values
    return out


@dataclass
class EvidenceIndex:
    """The benchmark's queries and evidence as integer arrays, built once per benchmark.

    Attributes:
        query_ids: (Q,) benchmark query ids, in benchmark order; query code = position.
        page_ids: (P,) page ids sorted ascending; page code = position.
        evidence_pages: (Q, E) int32 page codes of each query's evidence, padded with -1.
        evidence_docs: (Q, D) int32 document codes of each query's evidence documents, padded with -1.
        page_doc: (P,) int32 document code of each page.
        queries: query attributes (structure, source, domain, generator, evidence_type), index = query code.
    """

    query_ids: pd.Index
    page_ids: pd.Index
    evidence_pages: np.ndarray
    evidence_docs: np.ndarray
    page_doc: np.ndarray
    queries: pd.DataFrame

    @classmethod
    def from_tables(cls, queries: pd.DataFrame, qrels: pd.DataFrame, pages: pd.DataFrame) -> "EvidenceIndex":
        query_ids = pd.Index(queries["query_id"].to_numpy(dtype=object))
        order = np.argsort(pages["page_id"].to_numpy(dtype=object), kind="stable")
        page_ids = pd.Index(pages["page_id"].to_numpy(dtype=object)[order])
        doc_codes, doc_ids = pd.factorize(pages["doc_id"].to_numpy(dtype=object)[order])
        qcode = query_ids.get_indexer(qrels["query_id"].to_numpy(dtype=object))
        pcode = page_ids.get_indexer(qrels["page_id"].to_numpy(dtype=object))
        if (qcode < 0).any() or (pcode < 0).any():
            raise RunError("qrels name queries or pages that the benchmark does not have")
        by_query = np.argsort(qcode, kind="stable")
        qcode, pcode = qcode[by_query], pcode[by_query]
        evidence_pages = _padded(qcode, pcode.astype(np.int32), len(query_ids))
        page_doc = doc_codes.astype(np.int32)
        pairs = np.unique(np.stack([qcode, page_doc[pcode]], axis=1), axis=0)
        evidence_docs = _padded(pairs[:, 0], pairs[:, 1].astype(np.int32), len(query_ids))

        types = queries["evidence_types"].map(
            lambda t: "+".join(sorted(t)) if t is not None and len(t) else "unknown"
        )
        attributes = pd.DataFrame(
            {
                "query_id": query_ids,
                "evidence_structure": queries["evidence_structure"].to_numpy(dtype=object),
                "source": queries["source"].to_numpy(dtype=object),
                "domain": queries["domain"].to_numpy(dtype=object),
                "generator": queries["generator"].to_numpy(dtype=object),
                "evidence_type": types.to_numpy(dtype=object),
            }
        )
        return cls(query_ids, page_ids, evidence_pages, evidence_docs, page_doc, attributes)

    @cached_property
    def n_evidence(self) -> np.ndarray:
        return (self.evidence_pages >= 0).sum(axis=1)

    @cached_property
    def n_evidence_docs(self) -> np.ndarray:
        return (self.evidence_docs >= 0).sum(axis=1)


def _codes(column: pa.ChunkedArray | pa.Array, index: pd.Index, what: str) -> np.ndarray:
    """Map an id column to codes in ``index`` through its dictionary (one lookup per distinct id)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    dictionary = column.dictionary.to_numpy(zero_copy_only=False)
    lookup = index.get_indexer(dictionary).astype(np.int64)
    if (lookup < 0).any():
        unknown = dictionary[lookup < 0]
        raise RunError(
            f"the run names {len(unknown)} {what} id(s) that the benchmark does not have, e.g. "
            f"{', '.join(map(str, unknown[:5]))}: was it made on another benchmark?"
        )
    indices = column.indices.to_numpy(zero_copy_only=False)
    if column.null_count:
        raise RunError(f"the run has empty {what} ids")
    return lookup[indices]


def rank_run(run: pa.Table, index: EvidenceIndex, depth: int | None = None):
    """Order a run by (query, score desc, page_id asc) and cut it at ``depth`` rows per query.

    Returns:
        qcode: (R,) int64 query code per kept row
        pcode: (R,) int64 page code per kept row
        rank: (R,) int32 0-based rank within the query
    """
    qcode = _codes(run.column("query_id"), index.query_ids, "query")
    pcode = _codes(run.column("page_id"), index.page_ids, "page")
    score = run.column("score").to_numpy().astype(np.float64, copy=False)
    if np.isnan(score).any():
        raise RunError(f"the run has {int(np.isnan(score).sum())} NaN scores")
    # Runs written by vldocir are already in this order; checking is O(R) and cheaper than sorting.
    same = qcode[1:] == qcode[:-1]
    in_order = ~same | (score[1:] < score[:-1]) | ((score[1:] == score[:-1]) & (pcode[1:] > pcode[:-1]))
    contiguous = (1 + int((~same).sum())) == len(np.unique(qcode)) if len(qcode) else True
    if not (in_order.all() and contiguous):
        order = np.lexsort((pcode, -score, qcode))
        qcode, pcode = qcode[order], pcode[order]
        same = qcode[1:] == qcode[:-1]
    starts = np.flatnonzero(np.concatenate(([True], ~same))) if len(qcode) else np.zeros(0, np.int64)
    lengths = np.diff(np.concatenate((starts, [len(qcode)])))
    rank = (np.arange(len(qcode)) - np.repeat(starts, lengths)).astype(np.int32)
    if depth is not None:
        keep = rank < depth
        qcode, pcode, rank = qcode[keep], pcode[keep], rank[keep]
    # A page listed twice for one query would count twice; the kept rows are few, so check them all.
    key = qcode * len(index.page_ids) + pcode
    if len(np.unique(key)) != len(key):
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
    pages and evidence documents (any page of the document) in the top k.
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs k must be positive integers, got {ks}")
    n_queries = len(index.query_ids)
    qcode, pcode, rank = rank_run(run, index, depth=ks[-1])

    evidence = index.evidence_pages[qcode]
    relevant = (evidence == pcode[:, None]).any(axis=1)
    evidence_docs = index.evidence_docs[qcode]
    doc_hit = evidence_docs == index.page_doc[pcode][:, None]  # (R, D): which evidence doc this row hits

    n_ev = index.n_evidence
    discounts = 1.0 / np.log2(np.arange(2, ks[-1] + 2))
    ideal_cumulative = np.cumsum(discounts)
    out = index.queries.copy()
    out["n_evidence_pages"] = n_ev
    out["n_evidence_docs"] = index.n_evidence_docs
    out["in_run"] = np.bincount(qcode, minlength=n_queries) > 0
    columns = {}
    for k in ks:
        top = rank < k
        hit = relevant & top
        found = np.bincount(qcode[hit], minlength=n_queries)
        dcg = np.bincount(qcode[hit], weights=discounts[rank[hit]], minlength=n_queries)
        idcg = ideal_cumulative[np.minimum(n_ev, k) - 1]
        ndcg = dcg / idcg
        complete = (found == n_ev).astype(np.float64)
        docs_found = np.zeros(n_queries, dtype=np.int64)
        for slot in range(evidence_docs.shape[1]):
            rows = top & doc_hit[:, slot]
            docs_found += np.bincount(qcode[rows], minlength=n_queries) > 0
        columns |= {
            f"ndcg@{k}": ndcg,
            f"recall@{k}": found / n_ev,
            f"ndcgall@{k}": complete * ndcg,
            f"recallall@{k}": complete,
            f"pages_found@{k}": found,
            f"docs_found@{k}": docs_found,
        }
    return pd.concat([out, pd.DataFrame(columns)], axis=1)


def structure_order(values) -> list[str]:
    """The paper's structure order, followed by any unknown values (never silently dropped)."""
    present = list(dict.fromkeys(values))
    return [s for s in EVIDENCE_STRUCTURES] + sorted(s for s in present if s not in EVIDENCE_STRUCTURES)
