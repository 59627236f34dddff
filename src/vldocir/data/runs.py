"""Runs: the top-N pages per query (DESIGN.md §1), as an Arrow table with ``RUN_SCHEMA``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.data.schema import RUN_SCHEMA
from vldocir.errors import VldocirError
from vldocir.io import atomic_path, atomic_write_parquet


def make_run(
    query_ids: Sequence[str], page_ids: Sequence[Sequence[str]], scores: Sequence[Sequence[float]]
) -> pa.Table:
    """Build a run from each query's candidate pages and scores (any order, any length).

    Rows are ordered by query (in the given order), then score descending, then page_id ascending,
    and ranked 1..n: the same deterministic tie-breaking the evaluation applies.
    """
    lengths = np.fromiter((len(p) for p in page_ids), dtype=np.int64, count=len(page_ids))
    frame = pd.DataFrame(
        {
            "query_order": np.repeat(np.arange(len(query_ids)), lengths),
            "page_id": np.concatenate([np.asarray(p, dtype=object) for p in page_ids]) if len(page_ids) else [],
            "score": np.concatenate([np.asarray(s, dtype=np.float32) for s in scores]) if len(scores) else [],
        }
    )
    frame = frame.sort_values(["query_order", "score", "page_id"], ascending=[True, False, True], kind="stable")
    order = frame["query_order"].to_numpy()
    starts = np.searchsorted(order, order, side="left")
    return pa.table(
        {
            "query_id": pa.array(np.asarray(query_ids, dtype=object)[order], pa.string()),
            "page_id": pa.array(frame["page_id"].to_numpy(dtype=object), pa.string()),
            "rank": pa.array(np.arange(len(frame)) - starts + 1, pa.int32()),
            "score": pa.array(frame["score"].to_numpy(), pa.float32()),
        },
        schema=RUN_SCHEMA,
    )


def run_from_indices(
    query_ids: Sequence[str], page_ids: Sequence[str], indices: np.ndarray, scores: np.ndarray
) -> pa.Table:
    """The run of ``make_run``, from each query's candidates as positions into ``page_ids``.

    ``indices`` (n_queries, n) int64 positions into ``page_ids`` (-1: no candidate), ``scores``
    (n_queries, n) float; rows ordered by query (given order), score descending, page_id ascending,
    ranked 1..n. Integer sorts and dictionary-built id columns, no per-row Python objects: a
    paper-scale run (27 M rows) takes seconds (``make_run`` takes about a minute).
    """
    indices = np.asarray(indices, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    page_ids = np.asarray(page_ids, dtype=object)
    n_queries, width = indices.shape if indices.ndim == 2 else (len(query_ids), 0)
    by_id = np.argsort(page_ids, kind="stable")
    page_rank = np.empty(len(page_ids), dtype=np.int64)
    page_rank[by_id] = np.arange(len(page_ids))
    valid = indices >= 0
    rows = np.repeat(np.arange(n_queries), width)
    # invalid cells sort last in their row (score -inf, rank past every page)
    key_score = np.where(valid, -scores.astype(np.float64), np.inf).ravel()
    key_page = np.where(valid, page_rank[np.where(valid, indices, 0)], len(page_ids)).ravel()
    order = np.lexsort((key_page, key_score, rows))
    order = order[valid.ravel()[order]]
    query_of_row = rows[order]
    counts = np.bincount(query_of_row, minlength=n_queries)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    query_col = pa.DictionaryArray.from_arrays(
        pa.array(query_of_row.astype(np.int32)), pa.array(np.asarray(query_ids, dtype=object), pa.string())
    )
    page_col = pa.DictionaryArray.from_arrays(
        pa.array(indices.ravel()[order].astype(np.int32)), pa.array(page_ids, pa.string())
    )
    return pa.table(
        {
            "query_id": query_col.cast(pa.string()),
            "page_id": page_col.cast(pa.string()),
            "rank": pa.array((np.arange(len(order)) - starts + 1).astype(np.int32), pa.int32()),
            "score": pa.array(scores.ravel()[order], pa.float32()),
        },
        schema=RUN_SCHEMA,
    )


def write_run(run: pa.Table, path: str | Path) -> None:
    """Write atomically, ids dictionary-encoded so that readers get codes without re-hashing.

    Row groups of up to 64 Mi rows: a paper-scale run (27 M rows) is one row group, so readers map
    one dictionary of page ids to codes instead of one per row group.
    """
    atomic_write_parquet(
        run,
        path,
        use_dictionary=["query_id", "page_id"],
        dictionary_pagesize_limit=64 << 20,
        row_group_size=64 << 20,
        compression="zstd",
    )


def read_run(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A stored run (all columns, or ``columns``), its ids dictionary-encoded as written."""
    ids = [c for c in ("query_id", "page_id") if columns is None or c in columns]
    table = pq.read_table(path, columns=None if columns is None else list(columns), read_dictionary=ids)
    required = {"query_id", "page_id", "score"}
    missing = (required if columns is None else required & set(columns)) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a run, columns {sorted(missing)} are missing")
    return table


# -- runs made elsewhere: their own order, float32 scores --------------------------------------------
#
# A run's order is (score desc, page_id asc) per query, and a stored run holds float32 scores. Both
# helpers below lower float32 scores by the fewest float32 steps that make a given order come out:
# walking down a query, a row that must rank strictly below the row above it goes (at least) one
# float32 step below it, and the rows after it follow only as far as they must to stay below.


def _float_key(values: np.ndarray) -> np.ndarray:
    """Floats (float32 or float64) as int64 keys in the same order, adjacent floats one apart
    (-0.0 and 0.0 share key 0): ``key - 1`` is the next float below."""
    bits = values.view(np.int32 if values.dtype == np.float32 else np.int64).astype(np.int64)
    lowest = np.iinfo(np.int32 if values.dtype == np.float32 else np.int64).min
    return np.where(bits >= 0, bits, lowest - bits)


def _from_float_key(keys: np.ndarray, dtype) -> np.ndarray:
    """The inverse of :func:`_float_key`."""
    int_type = np.int32 if np.dtype(dtype) == np.float32 else np.int64
    lowest = np.iinfo(int_type).min
    return np.where(keys >= 0, keys, lowest - keys).astype(int_type).view(dtype)


FLOAT32_NEG_INF_KEY = int(_float_key(np.array([-np.inf], np.float32))[0])


def _query_starts(qcode: np.ndarray) -> np.ndarray:
    """(R,) bool: the first row of each query's block (rows sorted by query)."""
    first = np.ones(len(qcode), dtype=bool)
    first[1:] = qcode[1:] != qcode[:-1]
    return first


def _within_query(counts: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running count of the True ``counts`` since each query's first row (that row included)."""
    total = np.cumsum(counts)
    return total - np.maximum.accumulate(np.where(first, total - counts, 0))


def _page_up(pages: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """(R,) bool: row i's page_id is greater than row i-1's (True at row 0)."""
    up = np.ones(len(pages), dtype=bool)
    if len(pages) > 1:
        up[1:] = pc.greater(pages.slice(1), pages.slice(0, len(pages) - 1)).to_numpy(zero_copy_only=False)
    return up


def _lowered_keys(cast: np.ndarray, first: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Float32 keys of ``cast`` (rows in rank order), lowered where needed so that each row with
    ``gap`` is strictly below the row above it and no row is above the row above it (within a query).

    With D the running count of gaps in the query, key_i = min_{j<=i}(cast_key_j + D_j) - D_i: one
    running minimum per query, which every query's block shifted below the ones before it turns
    into one global running minimum.
    """
    gaps = _within_query(gap & ~first, first)
    values = _float_key(cast) + gaps
    if not len(values):
        return values
    block = np.cumsum(first) - 1
    span = int(values.max() - values.min()) + 1
    return np.minimum.accumulate(values - block * span) + block * span - gaps


def float32_keeping_order(score: np.ndarray, qcode: np.ndarray, page_up: np.ndarray) -> tuple[np.ndarray, dict]:
    """float32 scores that rank the rows exactly as ``score`` (at its own precision) does.

    Args:
        score: (R,) float scores (float64 for a run made elsewhere), rows sorted by query, then
            score descending, then page_id ascending: the order to keep.
        qcode: (R,) int query code per row (equal for a query's rows).
        page_up: (R,) bool, row i's page_id is greater than row i-1's (ignored at a query's first row).

    Returns the (R,) float32 scores and what the conversion did. A plain cast keeps the order unless
    it makes two distinct scores of one query equal *and* page_id, the tie-break, then ranks them
    the other way round. Only then are scores changed, by the fewest float32 steps (see above);
    equal input scores stay equal, and queries a cast does not reorder keep their cast values.
    Where that cannot work (scores below float32's range, all -inf), the query's scores become its
    dense ranks, negated (-1, -2, ...; equal scores equal).
    """
    score = np.asarray(score)
    with np.errstate(over="ignore"):  # beyond float32's range: +-inf, handled below
        cast = score.astype(np.float32)
    first = _query_starts(qcode)
    previous = np.maximum(np.arange(len(score)) - 1, 0)  # (none for an empty run)
    distinct = ~first & (score != score[previous])
    merged = distinct & (cast == cast[previous])
    needs_gap = distinct & ~page_up  # a float32 tie here would rank the two rows the other way round
    stats = {
        "input_dtype": str(score.dtype),
        "merged_pairs": int(merged.sum()),
        "reordered_pairs": int((needs_gap & merged).sum()),
        "changed_rows": 0,
        "changed_queries": 0,
        "method": "cast",
    }
    if not stats["reordered_pairs"]:
        return cast, stats
    keys, stats["method"] = _lowered_keys(cast, first, needs_gap), "float32 steps"
    below = keys < FLOAT32_NEG_INF_KEY
    if below.any():
        dense = _within_query(distinct | first, first)
        keys = np.where(np.isin(qcode, qcode[below]), _float_key(-dense.astype(np.float32)), keys)
        stats["method"] = "float32 steps; dense ranks for queries below float32's range"
    out = _from_float_key(keys, np.float32)
    changed = out.view(np.int32) != cast.view(np.int32)
    stats["changed_rows"], stats["changed_queries"] = int(changed.sum()), len(np.unique(qcode[changed]))
    return out, stats


def _ranked(qcode: pa.Array | pa.ChunkedArray, score, pages) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Rows sorted by (query code, score desc, page_id asc): the table ``q, s, p``, the query codes
    and the 0-based rank of each row within its query."""
    keyed = pa.table({"q": qcode, "s": score, "p": pages})
    keyed = keyed.take(pc.sort_indices(keyed, sort_keys=[("q", "ascending"), ("s", "descending"), ("p", "ascending")]))
    q = keyed.column("q").to_numpy()
    rank = _within_query(np.ones(len(q), dtype=np.int64), _query_starts(q)) - 1
    return keyed, q, rank


def run_from_rows(rows: pa.Table, query_ids: Sequence[str], depth: int | None = None) -> tuple[pa.Table, dict]:
    """A run (``RUN_SCHEMA``) from rows made elsewhere, ranked exactly as their own scores rank them.

    Args:
        rows: ``query_id``, ``page_id`` (strings) and ``score`` (any numeric type, e.g. the float64
            of a TREC file), no NaN, each (query, page) once, every query in ``query_ids``.
        query_ids: the order of the queries in the run (the benchmark's).
        depth: keep the first ``depth`` rows of each query (``None``: all).

    Rows are ranked by score (descending, at the input's precision), then page_id (ascending),
    cut at ``depth``, and stored with the float32 scores of :func:`float32_keeping_order`, so the
    stored run ranks them the same way. Returns the run and
    ``{"rows_in": ..., "rows_kept": ..., "score_conversion": {...}}``.
    """
    qcode = pc.index_in(rows.column("query_id"), value_set=pa.array(list(query_ids), pa.string()))
    if qcode.null_count:
        raise ValueError("run_from_rows: rows name queries outside query_ids")
    score = rows.column("score")
    if not pa.types.is_floating(score.type):
        score = pc.cast(score, pa.float64())
    keyed, q, rank = _ranked(qcode, score, rows.column("page_id"))
    if depth is not None:
        kept = rank < depth
        keyed, q, rank = keyed.filter(pa.array(kept)), q[kept], rank[kept]
    pages = keyed.column("p")
    scores, conversion = float32_keeping_order(keyed.column("s").to_numpy(), q, _page_up(pages))
    run = pa.table(
        {
            "query_id": pa.array(np.asarray(list(query_ids), dtype=object)[q], pa.string()),
            "page_id": pc.cast(pages, pa.string()),
            "rank": pa.array(rank + 1, pa.int32()),
            "score": pa.array(scores, pa.float32()),
        },
        schema=RUN_SCHEMA,
    )
    return run, {"rows_in": rows.num_rows, "rows_kept": run.num_rows, "score_conversion": conversion}


# -- TREC run files ----------------------------------------------------------------------------------

TREC_COLUMNS = ("query_id", "q0", "page_id", "rank", "score", "tag")
"""trec_eval's run format: one line per retrieved page, ``qid Q0 docid rank score tag``."""
_WHITESPACE = b" \t\n\r\x0b\x0c"  # what bytes.split() splits on: the separators of a TREC line


class TrecRunError(VldocirError, ValueError):
    """A TREC run file that cannot be read; the message names the file and the line."""


def read_trec_run(path: str | Path) -> pa.Table:
    """Read a TREC run file (``qid Q0 docid rank score tag``, whitespace separated).

    Returns the rows in file order (blank lines skipped) as ``query_id``, ``page_id``, ``score``
    (float64, correctly rounded from the text) and ``tag``. The ``Q0`` and ``rank`` columns are
    not read: like trec_eval, vldocir ranks by score, never by the file's rank. A line without six
    columns, a score that is not a number (or is NaN), or text that is not UTF-8 raises
    :class:`TrecRunError` naming the file and the line.

    Tab- or single-space-separated files are parsed by Arrow's CSV reader; anything else (or any
    doubt) goes through the line-by-line reader, which is the reference and names the bad line.
    """
    path = Path(path)
    table = _read_trec_with_arrow(path)
    return table if table is not None else _read_trec_lines(path)


def _read_trec_with_arrow(path: Path) -> pa.Table | None:
    """The fast route, or ``None`` when it cannot vouch for the result."""
    import pyarrow.csv as csv

    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    first = next((line for line in head.splitlines() if line.strip(_WHITESPACE)), None)
    if first is None:
        return None
    delimiter = next((d for d in ("\t", " ") if len(first.split(d.encode())) == len(TREC_COLUMNS)), None)
    if delimiter is None:
        return None
    try:
        table = csv.read_csv(
            path,
            read_options=csv.ReadOptions(column_names=list(TREC_COLUMNS)),
            parse_options=csv.ParseOptions(delimiter=delimiter, quote_char=False),
            convert_options=csv.ConvertOptions(
                column_types=dict.fromkeys(TREC_COLUMNS, pa.string()),
                include_columns=["query_id", "q0", "page_id", "score", "tag"],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        score = pc.cast(table.column("score"), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    # A field holding other whitespace (a tab in a space-separated file, a trailing space) or an
    # empty field means the whitespace-split columns differ from the CSV ones: let the reference decide.
    odd = "^$|[" + "".join(chr(b) for b in _WHITESPACE) + "]"
    if any(
        pc.any(pc.match_substring_regex(table.column(c), odd)).as_py() for c in ("query_id", "q0", "page_id", "tag")
    ):
        return None
    if table.num_rows and pc.any(pc.is_nan(score)).as_py():
        return None
    return pa.table(
        {
            "query_id": table.column("query_id"),
            "page_id": table.column("page_id"),
            "score": score,
            "tag": table.column("tag"),
        }
    )


def _read_trec_lines(path: Path) -> pa.Table:
    columns: dict[str, list] = {"query_id": [], "page_id": [], "score": [], "tag": []}
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields:
                continue
            where = f"{path}, line {number}"
            if len(fields) != len(TREC_COLUMNS):
                shown = line.rstrip(b"\r\n")[:200].decode("utf-8", "replace")
                raise TrecRunError(
                    f"{where}: expected 6 whitespace-separated columns (qid Q0 docid rank score tag), "
                    f"found {len(fields)}: {shown!r}"
                )
            try:
                query_id, _, page_id, _, score_text, tag = (field.decode("utf-8") for field in fields)
            except UnicodeDecodeError:
                raise TrecRunError(f"{where}: not UTF-8 text") from None
            try:
                score = float(score_text) if "_" not in score_text else None  # float() would take "1_0"
            except ValueError:
                score = None
            if score is None or math.isnan(score):
                raise TrecRunError(f"{where}: the score (5th column) {score_text!r} is not a number")
            columns["query_id"].append(query_id)
            columns["page_id"].append(page_id)
            columns["score"].append(score)
            columns["tag"].append(tag)
    return pa.table(
        {
            "query_id": pa.array(columns["query_id"], pa.string()),
            "page_id": pa.array(columns["page_id"], pa.string()),
            "score": pa.array(columns["score"], pa.float64()),
            "tag": pa.array(columns["tag"], pa.string()),
        }
    )


def trec_scores(run: pa.Table, separate_ties: bool = True) -> tuple[pa.Table, dict]:
    """The run in vldocir's order, with scores that trec_eval ranks the same way.

    trec_eval (and pytrec_eval) reads each score into a C ``float`` (float32) and orders equal
    scores by docid *descending*; vldocir orders them by page_id ascending. With
    ``separate_ties``, each query's scores are made strictly decreasing in vldocir's order: a page
    tied with the one above it goes one float32 step below it, later pages following down only
    where they must (see :func:`_lowered_keys`). With no ties left, both rules read the file alike:
    trec_eval ranks every query as vldocir does, and vldocir reads the file back as the same
    ranking. Scores are returned as float64 holding float32 values exactly. Ties at -inf cannot be
    separated (nothing is below) and stay trec_eval's to break.

    Returns the sorted run (``query_id``, ``page_id``, ``rank`` 1..n, ``score``; queries in order
    of first appearance) and ``{"rows", "lowered", "ties_left"}``: rows whose score was lowered,
    and pairs of tied pages that trec_eval ranks the other way round.
    """
    queries = pc.cast(run.column("query_id"), pa.string())
    qcode = pc.index_in(queries, value_set=pc.unique(queries))
    with np.errstate(over="ignore"):
        score = np.asarray(run.column("score").to_numpy(), dtype=np.float32)
    keyed, q, rank = _ranked(qcode, pa.array(score), pc.cast(run.column("page_id"), pa.string()))
    cast = keyed.column("s").to_numpy()
    first, page_up = _query_starts(q), _page_up(keyed.column("p"))
    keys = _float_key(cast)
    if separate_ties:
        keys = np.maximum(_lowered_keys(cast, first, np.ones_like(first)), np.minimum(keys, FLOAT32_NEG_INF_KEY))
    previous = np.maximum(np.arange(len(keys)) - 1, 0)  # (none for an empty run)
    out = pa.table(
        {
            "query_id": pc.take(queries.unique(), keyed.column("q")),
            "page_id": keyed.column("p"),
            "rank": pa.array(rank + 1, pa.int64()),
            "score": pa.array(_from_float_key(keys, np.float32).astype(np.float64), pa.float64()),
        }
    )
    return out, {
        "rows": len(keys),
        "lowered": int((keys != _float_key(cast)).sum()),
        "ties_left": int((~first & page_up & (keys == keys[previous])).sum()),
    }


def write_trec_run(
    run: pa.Table, path: str | Path, tag: str, separate_ties: bool = True, batch_rows: int = 1 << 20
) -> dict:
    """Write ``run`` (``query_id``, ``page_id``, ``score``) as a TREC run file, atomically.

    Lines ``qid Q0 docid rank score tag`` in vldocir's order (score descending, page_id ascending;
    queries in order of first appearance), ``rank`` 1..n per query, scores as the float64 text
    that reads back to the same value (a float32 value, so trec_eval's float reads it exactly),
    ties separated as :func:`trec_scores` says unless ``separate_ties`` is false. Returns
    :func:`trec_scores`' counts.
    """
    if not tag or any(ch.isspace() for ch in tag):
        raise ValueError(f"a TREC run tag is one word without whitespace, got {tag!r}")
    table, counts = trec_scores(run, separate_ties)
    for column in ("query_id", "page_id"):
        odd = pc.match_substring_regex(table.column(column), "^$|\\s")
        if pc.any(odd).as_py():
            example = pc.filter(table.column(column), odd)[0].as_py()
            raise ValueError(f"{column} {example!r} cannot be written in a TREC run file (empty or holding whitespace)")
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        for start in range(0, table.num_rows, batch_rows):
            part = table.slice(start, batch_rows)
            lines = pc.binary_join_element_wise(
                part.column("query_id"),
                "Q0",
                part.column("page_id"),
                pc.cast(part.column("rank"), pa.string()),
                pc.cast(part.column("score"), pa.string()),
                tag + "\n",
                " ",
            )  # Arrow: shortest round-trip text
            for chunk in lines.chunks:
                # A string array's values lie end to end in one buffer (its offsets say where): the text.
                offsets = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
                out.write(memoryview(chunk.buffers()[2])[offsets[0] : offsets[-1]])
    return counts
