"""Merging ranked lists: round robin (the paper's B+Ctx, ensembles and query splitting) and
reciprocal rank fusion (the RRF hybrids of Table 13).

Both take runs (``RUN_SCHEMA`` tables) and return a run whose ``rank`` is the merged order and
whose ``score`` is ``n, n-1, ..., 1`` down each query's list of ``n`` pages: strictly decreasing,
so that every reader that orders by score (the evaluation does) sees exactly the merged order.
(RRF sums are not stored as scores: two different float64 sums can round to one float32 score.)
A query missing from some inputs is merged from the others.

Each input is read as ranked lists: a query's rows in ``rank`` order (without a ``rank`` column:
score descending), ties by page_id; a page's position in its list counts every row above it,
duplicates included. The merges run on integer codes (queries in output order, pages in page_id
order, so that comparing codes compares page_ids) with numpy sorts over all rows at once, no loop
over queries: two paper-scale runs (271,760 queries x 100) merge about 10x faster than one Python
merge per query did (``perf/bench_fusion.py``).
:func:`round_robin_lists` and :func:`rrf_scores` state both definitions on one query's lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.data.runs import make_run
from vldocir.data.schema import RUN_SCHEMA

_KEY_BITS = 63
"""Bits of the non-negative int64 sort keys that pack several codes; where they do not fit, a slower lexsort."""

# -- one query's lists: the definitions --------------------------------------------------------------


def round_robin_lists(lists: Sequence[Sequence[str]], depth: int | None = None) -> list[str]:
    """Take the first item of each list in turn, then the second, ...; an item already taken is
    skipped (its later occurrences do not use up a turn). Stable: ties between lists go to the
    list given first. Lists may differ in length; a list that runs out is passed over."""
    merged: list[str] = []
    seen: set[str] = set()
    for position in range(max((len(x) for x in lists), default=0)):
        for items in lists:
            if position < len(items) and items[position] not in seen:
                seen.add(items[position])
                merged.append(items[position])
                if depth is not None and len(merged) == depth:
                    return merged
    return merged


def rrf_scores(lists: Sequence[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack et al. 2009): sum over lists of 1 / (k + rank), rank from 1."""
    scores: dict[str, float] = {}
    for items in lists:
        for rank, item in enumerate(items, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def ordered_run(query_ids: Sequence[str], lists: Sequence[Sequence[str]]) -> pa.Table:
    """A run holding each query's list in the given order (scores ``n, n-1, ..., 1``)."""
    scores = [np.arange(len(items), 0, -1, dtype=np.float64) for items in lists]
    return make_run(query_ids, lists, scores)


# -- runs as integer codes -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Codes:
    """An id column as its distinct ids (``values``) and, chunk by chunk, each chunk's dictionary
    indices (``indices``) and where each dictionary entry is in ``values`` (``lookups``)."""

    values: pa.Array
    lookups: list[np.ndarray]
    indices: list[np.ndarray]

    def __len__(self) -> int:
        return sum(len(i) for i in self.indices)

    def codes(self, into: np.ndarray | None = None) -> np.ndarray:
        """(rows,) int32: each row's position in ``values``, or ``into[position]``: one gather per row."""
        lookups = self.lookups if into is None else [into[lookup] for lookup in self.lookups]
        if len(lookups) == 1 and np.array_equal(lookups[0], np.arange(len(lookups[0]))):
            return self.indices[0].astype(np.int32, copy=False)  # a dictionary of distinct ids, as written
        out = np.empty(len(self), dtype=np.int32)
        row = 0
        for lookup, indices in zip(lookups, self.indices, strict=True):
            np.take(lookup, indices, out=out[row : row + len(indices)])
            row += len(indices)
        return out


def _id_codes(column: pa.ChunkedArray | pa.Array, what: str) -> _Codes:
    """Codes of a run's id column, plain or dictionary-encoded (as :func:`~vldocir.data.runs.read_run`
    gives it), in any number of chunks. Chunks that share a dictionary (a Parquet file's row groups)
    have it looked up once."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    if column.null_count:
        raise ValueError(f"the run has empty {what} ids")
    if not pa.types.is_dictionary(column.type):
        if not pa.types.is_string(column.type):
            column = column.cast(pa.string())
        column = pa.chunked_array(
            [pc.dictionary_encode(column.combine_chunks())], pa.dictionary(pa.int32(), pa.string())
        )
    chunks = [chunk for chunk in column.chunks if len(chunk)]
    dictionaries: dict[tuple, int] = {}
    distinct, chunk_dictionary = [], []
    for chunk in chunks:
        dictionary = chunk.dictionary
        key = (dictionary.offset, len(dictionary), *(b.address if b is not None else 0 for b in dictionary.buffers()))
        if key not in dictionaries:
            dictionaries[key] = len(distinct)
            distinct.append(dictionary.cast(pa.string()))
        chunk_dictionary.append(dictionaries[key])
    if not distinct:
        return _Codes(pa.array([], pa.string()), [], [])
    unified = pc.dictionary_encode(pa.concat_arrays(distinct))
    mapping = unified.indices.to_numpy().astype(np.int32)
    starts = np.cumsum([0, *(len(d) for d in distinct)])
    lookups = [mapping[starts[d] : starts[d + 1]] for d in chunk_dictionary]
    return _Codes(unified.dictionary, lookups, [chunk.indices.to_numpy() for chunk in chunks])


def _block_starts(codes: np.ndarray) -> np.ndarray:
    """Rows where the code differs from the row above (row 0 included)."""
    if not len(codes):
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))


def _output_queries(query_codes: Sequence[_Codes], query_ids: Sequence[str] | None) -> pa.Array:
    """The output's queries: ``query_ids``, else every run's queries in order of first appearance."""
    if query_ids is not None:
        queries = pa.array(list(query_ids), pa.string())
        if pc.count_distinct(queries).as_py() != len(queries):
            raise ValueError("query_ids name a query more than once")
        return queries
    firsts = []
    for ids in query_codes:
        codes = ids.codes()
        firsts.append(ids.values.take(codes[_block_starts(codes)]))
    return pc.unique(pa.chunked_array(firsts, pa.string())) if firsts else pa.array([], pa.string())


def _positions(query: np.ndarray, rank_key: np.ndarray, page: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Each row's position in its query's ranked list (by ``rank_key``, then page code), and the
    row order that lists them so (``None``: the rows already are, as every run this package writes)."""
    n = len(query)
    if n == 0:
        return None, np.zeros(0, dtype=np.int32)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(query[1:], query[:-1], out=new[1:])
    grouped = np.count_nonzero(new) == np.count_nonzero(np.bincount(query))  # each query's rows in one block
    if (
        grouped
        and rank_key.dtype.kind in "iu"
        and rank_key[0] == 1
        and np.where(new[1:], rank_key[1:] == 1, rank_key[1:] == rank_key[:-1] + 1).all()
    ):
        return None, (rank_key - 1).astype(np.int32)  # ranked 1, 2, ... down each query, as written
    same = ~new[1:]
    later, earlier = rank_key[1:][same], rank_key[:-1][same]
    in_order = (later > earlier) | ((later == earlier) & (page[1:][same] >= page[:-1][same]))
    order = None
    if not (grouped and in_order.all()):
        order = np.lexsort((page, rank_key, query))  # NaN keys sort last, as pandas puts them
        new = np.zeros(n, dtype=bool)
        new[_block_starts(query[order])] = True
    starts = np.flatnonzero(new)
    return order, (np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))).astype(np.int32)


@dataclass
class _RankedLists:
    """The ranked lists of several runs, as integer codes.

    ``queries`` (Arrow strings) and ``pages`` (Arrow strings in page_id order) are the ids the codes
    point to; ``lists`` holds, per run (a "turn" of the round robin), the (rows,) int32 arrays
    ``query`` (code into ``queries``), ``position`` (0-based, in its query's list) and ``page``
    (code into ``pages``), rows grouped by query, each query's in list order.
    """

    queries: pa.Array
    pages: pa.Array
    lists: list[tuple[np.ndarray, np.ndarray, np.ndarray]]

    @classmethod
    def of_runs(cls, runs: Sequence[pa.Table], query_ids: Sequence[str] | None) -> _RankedLists:
        query_codes = [_id_codes(run.column("query_id"), "query") for run in runs]
        page_codes = [_id_codes(run.column("page_id"), "page") for run in runs]
        queries = _output_queries(query_codes, query_ids)
        # every run's distinct pages, numbered in page_id order (UTF-8 byte order is str order)
        union = pc.dictionary_encode(
            pa.concat_arrays([ids.values for ids in page_codes] or [pa.array([], pa.string())])
        )
        by_id = pc.sort_indices(union.dictionary).to_numpy()
        page_rank = np.empty(len(by_id), dtype=np.int32)
        page_rank[by_id] = np.arange(len(by_id))
        union_rank = page_rank[union.indices.to_numpy()]
        lists, offset = [], 0
        for run, q_ids, p_ids in zip(runs, query_codes, page_codes, strict=True):
            page = p_ids.codes(union_rank[offset : offset + len(p_ids.values)])
            offset += len(p_ids.values)
            # queries outside query_ids get codes past the output's, and are left out below
            found = pc.index_in(q_ids.values, value_set=queries).to_numpy(zero_copy_only=False)
            missing = np.isnan(found) if found.dtype.kind == "f" else np.zeros(len(found), dtype=bool)
            found = np.where(missing, len(queries) + np.arange(len(found)), np.nan_to_num(found)).astype(np.int32)
            query = q_ids.codes(found)
            if "rank" in run.column_names:
                key = run.column("rank").to_numpy()
            else:
                key = -run.column("score").to_numpy().astype(np.float64)
            order, position = _positions(query, key, page)
            if order is not None:
                query, page = query[order], page[order]
            if missing.any():
                kept = query < len(queries)
                query, position, page = query[kept], position[kept], page[kept]
            lists.append((query, position, page))
        return cls(queries, union.dictionary.take(by_id), lists)

    def lengths(self) -> np.ndarray:
        """(queries, turns) int32: the length of each query's list in each run."""
        return np.stack(
            [np.bincount(query, minlength=len(self.queries)) for query, _, _ in self.lists] or [np.zeros(0)], axis=1
        ).astype(np.int32)


def _by_query_page(
    lists: _RankedLists, withins: list[np.ndarray], rows_within: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Every row of ``lists`` ordered by (query, page, within), ``withins`` holding the rows'
    ``within`` per run (no two rows of one (query, page) share one). Returns whether each row in
    that order starts a new (query, page); the query, page and within of each such first row;
    and every row's within (if ``rows_within``). Empties ``lists.lists`` to free its memory.

    One in-place sort of int64 keys (the three packed in bits) where they fit, else a lexsort."""
    n = sum(len(w) for w in withins)
    within_bits = max((int(w.max(initial=0)).bit_length() for w in withins), default=0)
    page_bits = max(len(lists.pages) - 1, 0).bit_length()
    query_bits = max(len(lists.queries) - 1, 0).bit_length()
    if query_bits + page_bits + within_bits > _KEY_BITS:
        query = np.concatenate([q for q, _, _ in lists.lists])
        page = np.concatenate([p for _, _, p in lists.lists])
        within = np.concatenate(withins)
        lists.lists.clear()
        order = np.lexsort((within, page, query))
        query, page, within = query[order], page[order], within[order]
        first = np.concatenate(([True], (query[1:] != query[:-1]) | (page[1:] != page[:-1]))) if n else within > 0
        return first, query[first], page[first], within[first], within if rows_within else None
    key = np.empty(n, dtype=np.int64)
    row, block = 0, 1 << 22  # packed a block at a time, so that the temporaries stay small
    while lists.lists:
        (query, _, page), within = lists.lists.pop(0), withins.pop(0)
        for start in range(0, len(query), block):
            stop = min(start + block, len(query))
            part = key[row + start : row + stop]
            np.left_shift(query[start:stop], page_bits + within_bits, out=part, dtype=np.int64)
            part |= np.left_shift(page[start:stop], within_bits, dtype=np.int64)
            part |= within[start:stop]
        row += len(query)
        del query, page, within
    key.sort()
    first = np.empty(n, dtype=bool)
    first[:1] = True
    for start in range(1, n, block):
        stop = min(start + block, n)
        np.not_equal(key[start:stop] >> within_bits, key[start - 1 : stop - 1] >> within_bits, out=first[start:stop])
    heads = key[first]
    within_mask = (1 << within_bits) - 1
    head_within = (heads & within_mask).astype(np.int32)
    heads >>= within_bits
    head_page = (heads & ((1 << page_bits) - 1)).astype(np.int32)
    heads >>= page_bits
    head_query = heads.astype(np.int32)
    del heads
    if not rows_within:
        return first, head_query, head_page, head_within, None
    key &= within_mask
    return first, head_query, head_page, head_within, key


def _run(lists: _RankedLists, counts: np.ndarray, page: np.ndarray, depth: int) -> pa.Table:
    """The run of the merged lists: ``page`` holds each query's merged list (``counts[q]`` pages,
    queries in output order), of which the first ``depth`` are kept."""
    kept = np.minimum(counts, depth)
    if (kept < counts).any():
        within = np.arange(len(page)) - np.repeat(np.cumsum(counts) - counts, counts)
        page = page[within < depth]
    page_id = lists.pages.take(page)
    del page
    query = np.repeat(np.arange(len(counts), dtype=np.int32), kept)
    within = np.arange(len(query), dtype=np.int32)
    within -= np.repeat((np.cumsum(kept) - kept).astype(np.int32), kept)
    score = pa.array((kept[query] - within).astype(np.float32))
    within += 1
    return pa.table(
        {"query_id": lists.queries.take(query), "page_id": page_id, "rank": pa.array(within), "score": score},
        schema=RUN_SCHEMA,
    )


def _check_depth(depth: int) -> None:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")


# -- merges of runs ----------------------------------------------------------------------------------


def _round_robin(lists: _RankedLists, depth: int) -> pa.Table:
    lengths = lists.lengths()
    n_turns = lengths.shape[1]
    # each row's place in its query's rows ordered by (position, turn): every list's rows at earlier
    # positions, plus the rows of earlier turns at this position
    befores = []
    for turn, (query, position, _) in enumerate(lists.lists):
        before = position.copy()
        for other in range(n_turns):
            if other != turn:
                length = lengths[:, other][query]
                before += np.minimum(length, position)
                if other < turn:
                    before += position < length
        befores.append(before)
        del before, query, position
    starts = np.concatenate(([0], np.cumsum(lengths.sum(axis=1, dtype=np.int64))))
    _, query, page, before, _ = _by_query_page(lists, befores, rows_within=False)
    # each page's first row in its query's (position, turn) order, laid out in that order
    page_at = np.full(int(starts[-1]), -1, dtype=np.int32)
    before += starts[query]
    page_at[before] = page
    del before, page
    counts = np.bincount(query, minlength=len(lists.queries))
    del query
    merged = page_at[page_at >= 0]
    del page_at
    return _run(lists, counts, merged, depth)


def round_robin(runs: Sequence[pa.Table], depth: int, query_ids: Sequence[str] | None = None) -> pa.Table:
    """Round-robin merge of ``runs`` (first run first), top ``depth`` per query: per query, as
    :func:`round_robin_lists` of the runs' lists. ``query_ids``: the queries of the output, in
    that order (default: every run's queries, in order of first appearance)."""
    _check_depth(depth)
    return _round_robin(_RankedLists.of_runs(runs, query_ids), depth)


def _rrf(lists: _RankedLists, depth: int, k: float) -> pa.Table:
    n_queries = len(lists.queries)
    width = max((int(position.max(initial=0)) + 1 for _, position, _ in lists.lists), default=1)
    # summed in (turn, position) order, as rrf_scores adds them: float sums depend on the order
    withins = [position + turn * width for turn, (_, position, _) in enumerate(lists.lists)]
    first, query, page, _, within = _by_query_page(lists, withins, rows_within=True)
    within %= width
    within += 1  # the rank in its list
    weight = 1.0 / (k + within.astype(np.float64))
    del within
    group = np.cumsum(first, dtype=np.int32) - 1
    del first
    sums = np.bincount(group, weights=weight) if len(weight) else np.zeros(0)
    del group, weight
    # each query's pages by sum descending, then page_id: they are in page order, so a stable
    # order by sum within each query; here one int64 sort per query of (sum bits, place) keys
    counts = np.bincount(query, minlength=n_queries)
    starts = np.cumsum(counts) - counts
    widest = int(counts.max(initial=0))
    if widest and n_queries * widest <= 2 * len(query) + (1 << 20):
        bits = sums.view(np.int64)  # positive floats: their bits order as they do
        descending = int(bits.max()) - bits
        slot_bits = max(widest - 1, 1).bit_length()
        padding = np.iinfo(np.int64).max
        if (int(descending.max()) + 1).bit_length() + slot_bits <= _KEY_BITS:  # keys stay below the padding
            slot = np.arange(len(query)) - np.repeat(starts, counts)
            descending <<= slot_bits
            descending |= slot
            keys = np.full((n_queries, widest), padding, dtype=np.int64)
            keys[query, slot] = descending
            del descending, slot, query, sums
            keys.sort(axis=1)
            keys = keys[:, :depth]
            valid = keys != padding
            picked = starts[np.nonzero(valid)[0]] + (keys[valid] & ((1 << slot_bits) - 1))
            return _run(lists, valid.sum(axis=1), page[picked], depth)
    by_sum = np.lexsort((page, -sums, query))
    return _run(lists, counts, page[by_sum], depth)


def reciprocal_rank_fusion(
    runs: Sequence[pa.Table], depth: int, k: int = 60, query_ids: Sequence[str] | None = None
) -> pa.Table:
    """Equal-weight RRF of ``runs``, top ``depth`` per query, ordered by the float64 sums, ties by
    page_id: per query, as :func:`rrf_scores` of the runs' lists (summed in the same order)."""
    _check_depth(depth)
    if not k >= 0:
        raise ValueError(f"k must be >= 0, got {k!r}")
    return _rrf(_RankedLists.of_runs(runs, query_ids), depth, k)


def ranked_lists(run: pa.Table) -> dict[str, list[str]]:
    """``query_id -> [page_id, ...]`` in rank order (rank, else score descending; ties by page_id)."""
    lists = _RankedLists.of_runs([run], None)
    query, _, page = lists.lists[0]  # rows grouped by query, each query's in list order
    pages = lists.pages.take(page).to_pylist()
    bounds = np.append(_block_starts(query), len(query))
    names = lists.queries.take(query[bounds[:-1]]).to_pylist()
    return {name: pages[start:end] for name, (start, end) in zip(names, pairwise(bounds.tolist()), strict=True)}
