"""Merging ranked lists: round robin (the paper's B+Ctx, ensembles and query splitting) and
reciprocal rank fusion (the RRF hybrids of Table 13).

Both take runs (``RUN_SCHEMA`` tables) and return a run whose ``rank`` is the merged order and
whose ``score`` is ``n, n-1, ..., 1`` down each query's list of ``n`` pages: strictly decreasing,
so that every reader that orders by score (the evaluation does) sees exactly the merged order.
(RRF sums are not stored as scores: two different float64 sums can round to one float32 score.)
A query missing from some inputs is merged from the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from vldocir.data.runs import make_run


def ranked_lists(run: pa.Table) -> dict[str, list[str]]:
    """``query_id -> [page_id, ...]`` in rank order (rank, else score descending then page_id)."""
    frame = run.select(["query_id", "page_id", "score"] + (["rank"] if "rank" in run.column_names else [])).to_pandas()
    if "rank" in frame:
        frame = frame.sort_values(["query_id", "rank", "page_id"], kind="stable")
    else:
        frame = frame.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True], kind="stable")
    frame["query_id"] = frame["query_id"].astype(str)
    frame["page_id"] = frame["page_id"].astype(str)
    return {q: list(g) for q, g in frame.groupby("query_id", sort=False)["page_id"]}


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


def _ordered_queries(runs: Sequence[pa.Table], query_ids: Sequence[str] | None) -> list[str]:
    if query_ids is not None:
        return list(query_ids)
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(str(q) for q in run.column("query_id").to_pylist()))
    return list(seen)


def ordered_run(query_ids: Sequence[str], lists: Sequence[Sequence[str]]) -> pa.Table:
    """A run holding each query's list in the given order (scores ``n, n-1, ..., 1``)."""
    scores = [np.arange(len(items), 0, -1, dtype=np.float64) for items in lists]
    return make_run(query_ids, lists, scores)


def round_robin(runs: Sequence[pa.Table], depth: int, query_ids: Sequence[str] | None = None) -> pa.Table:
    """Round-robin merge of ``runs`` (first run first), top ``depth`` per query."""
    per_run = [ranked_lists(run) for run in runs]
    queries = _ordered_queries(runs, query_ids)
    return ordered_run(queries, [round_robin_lists([r.get(q, []) for r in per_run], depth) for q in queries])


def reciprocal_rank_fusion(
    runs: Sequence[pa.Table], depth: int, k: int = 60, query_ids: Sequence[str] | None = None
) -> pa.Table:
    """Equal-weight RRF of ``runs``, top ``depth`` per query, ordered by the float64 sums, ties by page_id."""
    per_run = [ranked_lists(run) for run in runs]
    queries = _ordered_queries(runs, query_ids)
    lists = []
    for q in queries:
        fused = rrf_scores([r.get(q, []) for r in per_run], k)
        lists.append([p for p, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:depth]])
    return ordered_run(queries, lists)
