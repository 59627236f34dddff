"""Benchmark and run ids as integer codes, fast enough for paper-scale runs (27 M rows in seconds).

The metrics (:mod:`vldocir.evaluation.metrics`) work on integer codes: pages numbered in page_id
order (so comparing codes compares page_ids), queries in the benchmark's order, documents in order
of first appearance. This module makes those codes:

- :func:`evidence_fields`: the benchmark's queries, qrels and pages as the padded integer arrays
  of an ``EvidenceIndex``;
- :class:`RunIds`: a run's (dictionary-encoded) id column mapped to codes, one dictionary at a
  time, with the row-level views that ranking needs (every code, codes at given rows, "same id as
  the previous row");
- :class:`RunError`: a run (or qrels) naming ids that the benchmark lacks.

Everything here is an exact, faster route to what the plain pandas code would give; where the fast
route does not apply (ids that are not all non-null strings, a non-unique index), the pandas route
is taken, errors included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.errors import VldocirError


class RunError(VldocirError, ValueError):
    """A run that cannot be evaluated against this benchmark."""


def _padded(groups: np.ndarray, values: np.ndarray, n_groups: int, fill=-1, dtype=np.int32) -> np.ndarray:
    """Scatter ``values`` (sorted by ``groups``) into an (n_groups, max_count) array padded with ``fill``."""
    counts = np.bincount(groups, minlength=n_groups)
    width = max(int(counts.max(initial=0)), 1)
    out = np.full((n_groups, width), fill, dtype=dtype)
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


def unique_string_values(index: pd.Index) -> pa.Array | None:
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
                digits = codes * base**position
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


GRADE = "grade"
"""The qrels' relevance grade (optional; 1 where the column is absent or null)."""
LANGUAGE = "language"
"""The queries' language (optional): kept as a query attribute when the queries carry it."""
UNKNOWN = "unknown"
"""The label of a missing query attribute (a query without a language, without evidence types)."""


def qrel_grades(qrels: pd.DataFrame) -> np.ndarray | None:
    """The qrels' grades as float64 (null: 1), or ``None`` when the qrels carry no ``grade`` column."""
    if GRADE not in qrels.columns:
        return None
    grades = pd.to_numeric(qrels[GRADE], errors="raise")
    return grades.astype("float64").fillna(1.0).to_numpy(dtype=np.float64)


def evidence_fields(queries: pd.DataFrame, qrels: pd.DataFrame, pages: pd.DataFrame) -> tuple[dict, dict]:
    """The fields of :class:`~vldocir.evaluation.metrics.EvidenceIndex` from the benchmark tables,
    and the Arrow views of its ids (``{"query_ids"|"page_ids": (Index, Arrow strings or None)}``).

    Pages are numbered in page_id order, queries in the benchmark's order, documents in order of
    first appearance among the sorted pages (as ``pd.factorize``). Qrels of grade <= 0 are left out
    (not evidence); ``evidence_grades`` is ``None`` unless some evidence grade differs from 1.
    Raises :class:`RunError` if the qrels name queries or pages that the tables lack, or leave a
    query without evidence.
    """
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
        "query_ids": (query_ids, unique_string_values(query_ids)),
        "page_ids": (page_ids, unique_string_values(page_ids)),
    }
    qcode = _get_indexer(query_ids, arrow_ids["query_ids"][1], qrels["query_id"])
    pcode = _get_indexer(page_ids, arrow_ids["page_ids"][1], qrels["page_id"])
    if (qcode < 0).any() or (pcode < 0).any():
        raise RunError("qrels name queries or pages that the benchmark does not have")
    grade = qrel_grades(qrels)
    if grade is not None:  # a qrel of grade <= 0 is judged not relevant: not evidence
        evidence = grade > 0
        qcode, pcode, grade = qcode[evidence], pcode[evidence], grade[evidence]
    without = np.flatnonzero(np.bincount(qcode, minlength=len(query_ids)) == 0)
    if len(without):
        raise RunError(
            f"{len(without)} queries have no evidence page (no qrel with grade > 0), e.g. "
            f"{', '.join(map(str, query_ids[without[:5]]))}: such queries cannot be scored; leave them out"
        )
    by_query = np.argsort(qcode, kind="stable")
    qcode, pcode = qcode[by_query], pcode[by_query]
    evidence_pages = _padded(qcode, pcode.astype(np.int32), len(query_ids))
    evidence_grades = None
    if grade is not None and (grade[by_query] != 1).any():
        evidence_grades = _padded(qcode, grade[by_query], len(query_ids), fill=0.0, dtype=np.float64)
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
    if LANGUAGE in queries.columns and queries[LANGUAGE].notna().any():  # (no languages: no column, as before)
        attributes[LANGUAGE] = _frame_values(queries[LANGUAGE].astype(object).where(queries[LANGUAGE].notna(), UNKNOWN))
    fields = {
        "query_ids": query_ids,
        "page_ids": page_ids,
        "evidence_pages": evidence_pages,
        "evidence_grades": evidence_grades,
        "evidence_docs": evidence_docs,
        "page_doc": page_doc,
        "queries": attributes,
    }
    return fields, arrow_ids


class RunIds:
    """An id column of a run mapped to codes in ``index``, dictionary by dictionary.

    A Parquet file read with ``read_dictionary`` comes in many chunks that share a few dictionaries
    (one per row group): each distinct dictionary is looked up once (one lookup per distinct id)
    and the chunks' indices are translated, without unifying the dictionaries. A dictionary that
    lists a stretch of the index in order (query ids of a run written in benchmark order) is
    recognised by comparison, without hashing. ``index_values``: the index as Arrow strings (see
    :meth:`EvidenceIndex._arrow_ids`), or ``None`` to look up through pandas.

    Raises :class:`RunError` for ids the index lacks, then for null ids.
    """

    def __init__(self, column: pa.ChunkedArray | pa.Array, index: pd.Index, what: str, index_values: pa.Array | None):
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
        self.injective = all(all_distinct(lookup) for lookup in dictionary_lookup)
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
        for lookup, indices, row in zip(self.chunk_lookup, self.chunk_indices, self.offsets[:-1], strict=True):
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
        for lookup, indices, row in zip(self.chunk_lookup, self.chunk_indices, self.offsets[:-1], strict=True):
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
        chunks = zip(self.chunk_lookup, self.chunk_indices, self.offsets[:-1], cuts[:-1], cuts[1:], strict=True)
        for lookup, indices, row, lo, hi in chunks:
            if hi > lo:
                codes[lo:hi] = lookup[indices[rows[lo:hi] - row]]
        return codes


def all_distinct(codes: np.ndarray) -> bool:
    """Whether non-negative integer codes are all different."""
    return len(codes) < 2 or int(np.bincount(codes).max()) <= 1
