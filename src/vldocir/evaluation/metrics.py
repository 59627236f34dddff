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


def _ascending(values: pa.Array, strict: bool) -> bool:
    """Whether Arrow strings are sorted (UTF-8 byte order is Python's ``str`` order)."""
    if len(values) < 2:
        return True
    compare = pc.less if strict else pc.less_equal
    return bool(pc.all(compare(values.slice(0, len(values) - 1), values.slice(1))).as_py())


def _unique_string_values(index: pd.Index) -> pa.Array | None:
    """The index as Arrow strings if it is made of distinct non-null ``str`` (else ``None``)."""
    values = _string_values(index)
    if values is None:
        return None
    if not _ascending(values, strict=True) and pc.count_distinct(values).as_py() != len(values):
        return None
    return values


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for integers, by sorting (much faster than hashing here)."""
    values = np.sort(values, kind="stable")
    if len(values) < 2:
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def _inferred_dtype(kind: type = pd.Series):
    """The dtype pandas gives an object array of ``str`` (``str`` in pandas 3, else object)."""
    return kind(np.array(["a"], dtype=object)).dtype


def _index_values(column: pd.Series):
    """What ``pd.Index(column.to_numpy(dtype=object))`` holds, without the round trip through
    Python objects when the column already has the dtype that pandas would infer."""
    if column.dtype == _inferred_dtype(pd.Index) and not column.hasnans:
        return column.array
    return column.to_numpy(dtype=object)


def _frame_values(column: pd.Series):
    """What ``pd.DataFrame`` makes of ``column.to_numpy(dtype=object)``, without the round trip
    when the column already has the dtype that pandas would infer for it."""
    if column.dtype == _inferred_dtype(pd.Series) and not column.hasnans:
        return column.array
    return column.to_numpy(dtype=object)


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


def _type_label(types) -> str:
    """A query's evidence types as one label: sorted and joined with '+', or 'unknown'."""
    return "+".join(sorted(types)) if types is not None and len(types) else "unknown"


def _type_labels(column: pd.Series) -> np.ndarray:
    """``column.map(_type_label)``, computed once per distinct list of types (an object array, or
    the string array that ``pd.DataFrame`` would make of it).

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
                # One representative row per distinct key (sorting beats hashing here).
                order = np.argsort(keys, kind="stable")
                new_key = np.concatenate(([True], keys[order][1:] != keys[order][:-1]))
                inverse = np.empty(len(keys), dtype=np.intp)
                inverse[order] = np.cumsum(new_key) - 1
                labels = [_type_label(values[i]) for i in order[new_key]]
                dtype = _inferred_dtype(pd.Series)
                if isinstance(dtype, pd.StringDtype):  # what pd.DataFrame would make of the labels
                    return pd.array(labels, dtype=dtype).take(inverse)
                return np.array(labels, dtype=object)[inverse]
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
        query_ids = pd.Index(_index_values(queries["query_id"]))
        page_strings = _string_values(pages["page_id"])
        if page_strings is not None and _ascending(page_strings, strict=False):
            order = None  # already sorted, as write_benchmark leaves them: a stable argsort keeps them
            page_ids = pd.Index(_index_values(pages["page_id"]))
        else:
            page_values = pages["page_id"].to_numpy(dtype=object)
            order = np.argsort(page_values, kind="stable")
            page_ids = pd.Index(page_values[order])
        doc_strings = _string_values(pages["doc_id"])
        if doc_strings is not None:  # codes in order of first appearance, as pd.factorize
            encoded = pc.dictionary_encode(doc_strings if order is None else doc_strings.take(order))
            doc_codes, n_docs = encoded.indices.to_numpy().astype(np.intp), len(encoded.dictionary)
        else:
            doc_values = pages["doc_id"].to_numpy(dtype=object)
            doc_codes, doc_ids = pd.factorize(doc_values if order is None else doc_values[order])
            n_docs = len(doc_ids)
        arrow_ids = {
            "query_ids": (query_ids, _unique_string_values(query_ids)),
            "page_ids": (page_ids, _unique_string_values(page_ids)),
        }
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
            # (query, document) pairs as one integer: the same sorted unique pairs as np.unique(axis=0).
            keys = _sorted_unique(qcode.astype(np.int64) * n_docs + pair_doc)
            pair_query, pair_doc = keys // n_docs, keys % n_docs
        else:
            pairs = np.unique(np.stack([qcode, pair_doc], axis=1), axis=0)
            pair_query, pair_doc = pairs[:, 0], pairs[:, 1]
        evidence_docs = _padded(pair_query, pair_doc.astype(np.int32), len(query_ids))

        attributes = pd.DataFrame(
            {
                "query_id": query_ids,
                "evidence_structure": _frame_values(queries["evidence_structure"]),
                "source": _frame_values(queries["source"]),
                "domain": _frame_values(queries["domain"]),
                "generator": _frame_values(queries["generator"]),
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


class _RunIds:
    """An id column of a run mapped to codes in ``index``, dictionary by dictionary.

    A Parquet file read with ``read_dictionary`` comes in many chunks that share a few dictionaries
    (one per row group): each distinct dictionary is looked up once (one lookup per distinct id)
    and the chunks' indices are translated, without unifying the dictionaries. A dictionary that
    lists a stretch of the index in order (query ids of a run written in benchmark order) is
    recognised by comparison, without hashing. ``index_values``: the index as Arrow strings (see
    :meth:`EvidenceIndex._arrow_ids`), or ``None`` to look up through pandas.

    Raises :class:`RunError` for ids the index lacks, then for null ids.
    """

    def __init__(
        self, column: pa.ChunkedArray | pa.Array, index: pd.Index, what: str, index_values: pa.Array | None
    ):
        if isinstance(column, pa.Array):
            column = pa.chunked_array([column])
        if not pa.types.is_dictionary(column.type):
            column = pa.chunked_array([pc.dictionary_encode(column.combine_chunks())])
        chunks = [chunk for chunk in column.chunks if len(chunk) or len(chunk.dictionary)]

        # The distinct dictionaries, in order of first use (same buffers = same dictionary).
        dictionaries: dict[tuple, int] = {}
        chunk_dictionary = []
        distinct = []
        for chunk in chunks:
            dictionary = chunk.dictionary
            buffers = (b.address if b is not None else 0 for b in dictionary.buffers())
            key = (dictionary.offset, len(dictionary), *buffers)
            if key not in dictionaries:
                dictionaries[key] = len(distinct)
                distinct.append(dictionary)
            chunk_dictionary.append(dictionaries[key])
        all_values = pa.concat_arrays(distinct) if distinct else pa.array([], pa.string())
        is_string = pa.types.is_string(all_values.type) or pa.types.is_large_string(all_values.type)
        usable = index_values is not None and is_string and not all_values.null_count

        lookup = self._stretches(distinct, index_values) if usable else None
        if lookup is None and usable:
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

        self.lookup = lookup.astype(np.int32 if len(index) < 2**31 else np.int64)
        bounds = np.cumsum([0, *(len(d) for d in distinct)])
        dictionary_lookup = [self.lookup[bounds[d] : bounds[d + 1]] for d in range(len(distinct))]
        # Whether each dictionary maps to distinct codes (then equal codes = equal indices).
        self.injective = all(_distinct(lookup) for lookup in dictionary_lookup)
        self.chunk_lookup = [dictionary_lookup[d] for d in chunk_dictionary]
        self.chunk_indices = [chunk.indices.to_numpy() for chunk in chunks]
        self.offsets = np.cumsum([0, *(len(chunk) for chunk in chunks)])

    @staticmethod
    def _stretches(distinct: list[pa.Array], index_values: pa.Array) -> np.ndarray | None:
        """Codes when each dictionary equals a stretch of the index, each starting where the previous
        one ended (or on its last id, shared by two row groups); else ``None``."""
        codes, start = [], 0
        for dictionary in distinct:
            for first in (start, start - 1):
                if first < 0 or first + len(dictionary) > len(index_values):
                    continue
                stretch = index_values.slice(first, len(dictionary))
                if dictionary.cast(stretch.type).equals(stretch):
                    codes.append(np.arange(first, first + len(dictionary), dtype=np.intp))
                    start = first + len(dictionary)
                    break
            else:
                return None
        return np.concatenate(codes) if codes else np.zeros(0, dtype=np.intp)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def all(self) -> np.ndarray:
        """The code of every row."""
        codes = np.empty(len(self), dtype=self.lookup.dtype)
        for lookup, indices, row in zip(self.chunk_lookup, self.chunk_indices, self.offsets):
            np.take(lookup, indices, out=codes[row : row + len(indices)])
        return codes

    def same_as_previous(self) -> np.ndarray:
        """(n - 1,) bool: whether each row after the first has the same id as the row before it.

        Compares dictionary indices within each chunk, where a dictionary maps to distinct codes,
        so that the codes of every row are not needed; codes only at chunk boundaries.
        """
        n = len(self)
        if not self.injective:
            codes = self.all()
            return codes[1:] == codes[:-1]
        same = np.empty(max(n - 1, 0), dtype=bool)
        previous = None  # code of the last row of the previous non-empty chunk
        for lookup, indices, row in zip(self.chunk_lookup, self.chunk_indices, self.offsets):
            if not len(indices):
                continue
            if previous is not None:
                same[row - 1] = lookup[indices[0]] == previous
            np.equal(indices[1:], indices[:-1], out=same[row : row + len(indices) - 1])
            previous = lookup[indices[-1]]
        return same

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The codes of the given rows (ascending row numbers)."""
        codes = np.empty(len(rows), dtype=self.lookup.dtype)
        cuts = np.searchsorted(rows, self.offsets)
        chunks = zip(self.chunk_lookup, self.chunk_indices, self.offsets, cuts, cuts[1:])
        for lookup, indices, row, lo, hi in chunks:
            if hi > lo:
                codes[lo:hi] = lookup[indices[rows[lo:hi] - row]]
        return codes


def _distinct(codes: np.ndarray) -> bool:
    """Whether non-negative integer codes are all different."""
    return len(codes) < 2 or int(np.bincount(codes).max()) <= 1


def rank_run(run: pa.Table, index: EvidenceIndex, depth: int | None = None):
    """Order a run by (query, score desc, page_id asc) and cut it at ``depth`` rows per query.

    Returns:
        qcode: (R,) int64 query code per kept row
        pcode: (R,) int64 page code per kept row
        rank: (R,) int32 0-based rank within the query
    """
    queries = _RunIds(run.column("query_id"), index.query_ids, "query", index._arrow_ids("query_ids"))
    pages = _RunIds(run.column("page_id"), index.page_ids, "page", index._arrow_ids("page_ids"))
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
    contiguous = _distinct(queries.at(starts))
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
    pages and evidence documents (any page of the document) in the top k.
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
    for slot in range(index.evidence_pages.shape[1]):
        relevant |= index.evidence_pages[:, slot][qcode] == pcode
    hit_rows = np.flatnonzero(relevant)
    hit_query, hit_rank = qcode[hit_rows], rank[hit_rows]
    row_doc = index.page_doc[pcode]
    doc_hits = []  # per evidence-document slot: (query, rank) of the rows on that document
    for slot in range(index.evidence_docs.shape[1]):
        rows = np.flatnonzero(index.evidence_docs[:, slot][qcode] == row_doc)
        doc_hits.append((qcode[rows], rank[rows]))

    n_ev = index.n_evidence
    discounts = 1.0 / np.log2(np.arange(2, ks[-1] + 2))
    ideal_cumulative = np.cumsum(discounts)
    out = index.queries.copy()
    out["n_evidence_pages"] = n_ev
    out["n_evidence_docs"] = index.n_evidence_docs
    out["in_run"] = np.bincount(qcode, minlength=n_queries) > 0
    columns = {}
    for k in ks:
        top = hit_rank < k
        found = np.bincount(hit_query[top], minlength=n_queries)
        dcg = np.bincount(hit_query[top], weights=discounts[hit_rank[top]], minlength=n_queries)
        idcg = ideal_cumulative[np.minimum(n_ev, k) - 1]
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
        }
    return pd.concat([out, pd.DataFrame(columns)], axis=1)
