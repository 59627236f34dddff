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


# Fast paths. Looking strings up in a pandas Index hashes one Python object per value (about 1 s
# per million); Arrow hashes the UTF-8 bytes. These helpers take the Arrow route only where it gives
# exactly the pandas answer (ids that are all non-null ``str``, a unique index) and return ``None``
# otherwise, so that the caller falls back to the pandas code path, errors included.


def _string_values(values) -> pa.Array | None:
    """``values`` (pandas Series/Index, numpy array, Arrow array) as an Arrow string array, if they
    are all non-null ``str``; otherwise ``None``."""
    try:
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            array = values
        elif isinstance(values, (pd.Series, pd.Index)):
            dtype = values.dtype
            if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
                array = pa.array(values.array)  # zero-copy
            else:
                array = pa.array(values.to_numpy(dtype=object), from_pandas=False)
        else:
            array = pa.array(np.asarray(values, dtype=object), from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)) or array.null_count:
        return None
    return array


def _unique_string_values(index: pd.Index) -> pa.Array | None:
    """The index as Arrow strings if it is made of distinct non-null ``str`` (else ``None``)."""
    values = _string_values(index)
    if values is None or pc.count_distinct(values).as_py() != len(values):
        return None
    return values


def _positions(values: pa.Array, index_values: pa.Array) -> np.ndarray:
    """Position of each value in ``index_values``, -1 where absent (``Index.get_indexer``)."""
    found = pc.index_in(values, value_set=index_values)
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.intp, copy=False)


def _get_indexer(index: pd.Index, index_values: pa.Array | None, target) -> np.ndarray:
    """``index.get_indexer(target)``, through Arrow when both sides are plain strings."""
    if index_values is not None:
        target_values = _string_values(target)
        if target_values is not None:
            return _positions(target_values, index_values)
    return index.get_indexer(target.to_numpy(dtype=object) if isinstance(target, pd.Series) else target)


def _object_values(column: pd.Series) -> np.ndarray:
    """``column.to_numpy(dtype=object)``; for Arrow-backed strings without nulls each distinct
    value becomes one Python string, shared by its rows (a low-cardinality column converts in
    milliseconds instead of creating one object per row)."""
    dtype = column.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow" and not column.hasnans:
        encoded = pa.array(column.array)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        encoded = pc.dictionary_encode(encoded)
        if len(encoded.dictionary) * 4 < len(encoded):
            dictionary = encoded.dictionary.to_numpy(zero_copy_only=False)
            return dictionary[encoded.indices.to_numpy()]
    return column.to_numpy(dtype=object)


def _type_label(types) -> str:
    """A query's evidence types as one label: sorted and joined with '+', or 'unknown'."""
    return "+".join(sorted(types)) if types is not None and len(types) else "unknown"


def _type_labels(column: pd.Series) -> np.ndarray:
    """``column.map(_type_label)`` as an object array, computed once per distinct list of types.

    Rows are keyed by their sorted multiset of types (vectorised with Arrow and numpy); the label of
    each key comes from ``_type_label`` on one row holding it. Anything unusual (non-string types,
    null entries, very long lists) takes the per-row path.
    """
    values = column.to_numpy(dtype=object)
    try:
        lists = pa.array(values, type=pa.list_(pa.string()), from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError):
        lists = None
    if lists is not None and len(lists):
        flat = pc.list_flatten(lists)
        lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if not flat.null_count:
            encoded = pc.dictionary_encode(flat)
            names = encoded.dictionary.to_pylist()
            base = len(names) + 1
            if lengths.max(initial=0) * np.log2(base) < 62:
                rank_of = np.empty(len(names), dtype=np.int64)
                rank_of[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
                codes = rank_of[encoded.indices.to_numpy()] + 1  # 1..len(names) in sorted order
                parents = np.repeat(np.arange(len(lengths)), lengths)
                codes = codes[np.lexsort((codes, parents))]  # each row's types, sorted
                position = np.arange(len(codes)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
                digits = codes * base ** position
                keys = np.zeros(len(lengths), dtype=np.int64)
                nonempty = lengths > 0
                if len(digits):
                    starts = (np.cumsum(lengths) - lengths)[nonempty]
                    keys[nonempty] = np.add.reduceat(digits, starts)
                unique_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
                labels = np.array([_type_label(values[i]) for i in first], dtype=object)
                return labels[inverse.ravel()]
    return np.array([_type_label(t) for t in values], dtype=object)


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
        page_values = pages["page_id"].to_numpy(dtype=object)
        order = np.argsort(page_values, kind="stable")
        page_ids = pd.Index(page_values[order])
        doc_codes, doc_ids = pd.factorize(pages["doc_id"].to_numpy(dtype=object)[order])
        arrow_ids = {"query_ids": (query_ids, _unique_string_values(query_ids)), "page_ids": (page_ids, _unique_string_values(page_ids))}
        qcode = _get_indexer(query_ids, arrow_ids["query_ids"][1], qrels["query_id"])
        pcode = _get_indexer(page_ids, arrow_ids["page_ids"][1], qrels["page_id"])
        if (qcode < 0).any() or (pcode < 0).any():
            raise RunError("qrels name queries or pages that the benchmark does not have")
        by_query = np.argsort(qcode, kind="stable")
        qcode, pcode = qcode[by_query], pcode[by_query]
        evidence_pages = _padded(qcode, pcode.astype(np.int32), len(query_ids))
        page_doc = doc_codes.astype(np.int32)
        pair_doc = page_doc[pcode]
        if len(pair_doc) and pair_doc.min() >= 0:
            # (query, document) pairs as one sortable integer: np.unique over rows, without axis=0.
            n_docs = len(doc_ids)
            keys = np.unique(qcode.astype(np.int64) * n_docs + pair_doc)
            pair_query, pair_doc = keys // n_docs, keys % n_docs
        else:
            pairs = np.unique(np.stack([qcode, pair_doc], axis=1), axis=0)
            pair_query, pair_doc = pairs[:, 0], pairs[:, 1]
        evidence_docs = _padded(pair_query, pair_doc.astype(np.int32), len(query_ids))

        attributes = pd.DataFrame(
            {
                "query_id": query_ids,
                "evidence_structure": _object_values(queries["evidence_structure"]),
                "source": _object_values(queries["source"]),
                "domain": _object_values(queries["domain"]),
                "generator": _object_values(queries["generator"]),
                "evidence_type": _type_labels(queries["evidence_types"]),
            }
        )
        index = cls(query_ids, page_ids, evidence_pages, evidence_docs, page_doc, attributes)
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
            cached = cache[name] = (ids, _unique_string_values(ids))
        return cached[1]

    @cached_property
    def n_evidence(self) -> np.ndarray:
        return (self.evidence_pages >= 0).sum(axis=1)

    @cached_property
    def n_evidence_docs(self) -> np.ndarray:
        return (self.evidence_docs >= 0).sum(axis=1)


def _codes(column: pa.ChunkedArray | pa.Array, index: pd.Index, what: str, index_values: pa.Array | None = None) -> np.ndarray:
    """Map an id column to codes in ``index`` through its dictionaries (one lookup per distinct id).

    A Parquet file read with ``read_dictionary`` comes in many chunks that share a few dictionaries
    (one per row group): each distinct dictionary is looked up once and its chunks' indices are
    translated, without unifying the dictionaries. ``index_values``: the index as Arrow strings
    (see :meth:`EvidenceIndex._arrow_ids`), or ``None`` to look up through pandas.

    Returns int32 codes (int64 for an index of 2**31 ids or more).
    """
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    if not pa.types.is_dictionary(column.type):
        column = pa.chunked_array([pc.dictionary_encode(column.combine_chunks())])
    chunks = [chunk for chunk in column.chunks if len(chunk) or len(chunk.dictionary)]

    # The distinct dictionaries, in order of first use (same buffers = same dictionary).
    dictionaries: dict[tuple, int] = {}
    chunk_dictionary = []
    for chunk in chunks:
        dictionary = chunk.dictionary
        key = (dictionary.offset, len(dictionary), *(b.address if b is not None else 0 for b in dictionary.buffers()))
        chunk_dictionary.append(dictionaries.setdefault(key, len(dictionaries)))
    distinct = [None] * len(dictionaries)
    for chunk, d in zip(chunks, chunk_dictionary):
        if distinct[d] is None:
            distinct[d] = chunk.dictionary
    all_values = pa.concat_arrays(distinct) if distinct else pa.array([], pa.string())

    lookup = None
    if index_values is not None and (pa.types.is_string(all_values.type) or pa.types.is_large_string(all_values.type)):
        if not all_values.null_count:
            lookup = _positions(all_values, index_values)
    if lookup is None:
        lookup = index.get_indexer(all_values.to_numpy(zero_copy_only=False))
    if (lookup < 0).any():
        # Distinct unknown ids, in the order of the dictionaries (as if they had been unified).
        unknown = all_values.filter(pa.array(lookup < 0)).to_pylist()
        if len(distinct) > 1:
            unknown = list(dict.fromkeys(unknown))
        raise RunError(
            f"the run names {len(unknown)} {what} id(s) that the benchmark does not have, e.g. "
            f"{', '.join(map(str, unknown[:5]))}: was it made on another benchmark?"
        )
    if column.null_count:
        raise RunError(f"the run has empty {what} ids")

    lookup = lookup.astype(np.int32 if len(index) < 2**31 else np.int64)
    bounds = np.cumsum([0, *(len(d) for d in distinct)])
    codes = np.empty(sum(len(chunk) for chunk in chunks), dtype=lookup.dtype)
    row = 0
    for chunk, d in zip(chunks, chunk_dictionary):
        n = len(chunk)
        np.take(lookup[bounds[d] : bounds[d + 1]], chunk.indices.to_numpy(), out=codes[row : row + n])
        row += n
    return codes


def rank_run(run: pa.Table, index: EvidenceIndex, depth: int | None = None):
    """Order a run by (query, score desc, page_id asc) and cut it at ``depth`` rows per query.

    Returns:
        qcode: (R,) int64 query code per kept row
        pcode: (R,) int64 page code per kept row
        rank: (R,) int32 0-based rank within the query
    """
    qcode = _codes(run.column("query_id"), index.query_ids, "query", index._arrow_ids("query_ids"))
    pcode = _codes(run.column("page_id"), index.page_ids, "page", index._arrow_ids("page_ids"))
    score = run.column("score").to_numpy()
    if score.dtype != np.float32:  # float32 compares exactly as its float64 widening would
        score = score.astype(np.float64, copy=False)
    if np.isnan(score).any():
        raise RunError(f"the run has {int(np.isnan(score).sum())} NaN scores")
    n_rows = len(qcode)
    # Runs written by vldocir are already in this order; checking is O(R) and cheaper than sorting.
    # Within a query, a row is in order if its score is lower than the previous row's, or equal
    # with a larger page code: only the rows without a lower score need the page codes.
    same = qcode[1:] == qcode[:-1]
    suspect = np.flatnonzero(same > (score[1:] < score[:-1]))
    in_order = bool(((score[suspect + 1] == score[suspect]) & (pcode[suspect + 1] > pcode[suspect])).all())
    starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if n_rows else np.zeros(0, np.int64)
    # Each query in one block of rows: the blocks' queries are all different.
    contiguous = bool(np.bincount(qcode[starts]).max(initial=0) <= 1) if n_rows else True
    if not (in_order and contiguous):
        order = np.lexsort((pcode, -score, qcode))
        qcode, pcode = qcode[order], pcode[order]
        same = qcode[1:] == qcode[:-1]
        starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if n_rows else np.zeros(0, np.int64)
    del same, score
    lengths = np.diff(np.concatenate((starts, [n_rows])))
    if depth is None:
        rank = (np.arange(n_rows) - np.repeat(starts, lengths)).astype(np.int32)
        qcode, pcode = qcode.astype(np.int64), pcode.astype(np.int64)
    else:
        # Gather the first ``depth`` rows of each query directly.
        kept = np.minimum(lengths, max(int(depth), 0))
        first_out = np.cumsum(kept) - kept
        rank = (np.arange(int(kept.sum())) - np.repeat(first_out, kept)).astype(np.int32)
        rows = np.repeat(starts, kept) + rank
        qcode, pcode = qcode[rows].astype(np.int64), pcode[rows].astype(np.int64)
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
