"""vldocir.retrieval.fusion against a plain-Python reference written from the definitions, and ranx.

The reference reads each run's rows query by query (rank order, else score descending; ties by
page_id), merges each query's lists in turn (round robin) or sums 1 / (k + rank) in run order (RRF),
and writes the expected run row by row. Randomized runs have duplicates, tied scores, lists of
unequal and zero length, queries missing from some runs, shuffled rows, dictionary-encoded
chunked columns and runs without a rank column; hand-computed cases pin the rules down."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from ranx import Run, fuse

from vldocir.data.schema import RUN_SCHEMA
from vldocir.retrieval import fusion
from vldocir.retrieval.fusion import ranked_lists, reciprocal_rank_fusion, round_robin


def table(rows: list[tuple[str, str, int, float]], with_rank: bool = True) -> pa.Table:
    """A run from (query_id, page_id, rank, score) rows, in the given row order."""
    columns = {
        "query_id": pa.array([r[0] for r in rows], pa.string()),
        "page_id": pa.array([r[1] for r in rows], pa.string()),
        "rank": pa.array([r[2] for r in rows], pa.int32()),
        "score": pa.array([r[3] for r in rows], pa.float32()),
    }
    if not with_rank:
        del columns["rank"]
    return pa.table(columns)


# -- the reference ------------------------------------------------------------------------------------


def reference_lists(run: pa.Table) -> dict[str, list[str]]:
    rows = run.to_pylist()
    if "rank" in run.column_names:
        rows.sort(key=lambda r: (r["rank"], r["page_id"]))
    else:
        rows.sort(key=lambda r: (-r["score"], r["page_id"]))
    lists: dict[str, list[str]] = {}
    for r in rows:
        lists.setdefault(str(r["query_id"]), []).append(str(r["page_id"]))
    return lists


def reference_queries(runs, query_ids):
    if query_ids is not None:
        return list(query_ids)
    seen = {}
    for run in runs:
        seen.update(dict.fromkeys(run.column("query_id").to_pylist()))
    return list(seen)


def reference_round_robin(runs, depth, query_ids=None) -> list[tuple]:
    per_run = [reference_lists(run) for run in runs]
    out = []
    for q in reference_queries(runs, query_ids):
        lists = [r.get(q, []) for r in per_run]
        merged: list[str] = []
        for position in range(max(map(len, lists), default=0)):
            for items in lists:
                if position < len(items) and items[position] not in merged:
                    merged.append(items[position])
        out += expected_rows(q, merged[:depth])
    return out


def reference_rrf(runs, depth, k=60, query_ids=None) -> list[tuple]:
    per_run = [reference_lists(run) for run in runs]
    out = []
    for q in reference_queries(runs, query_ids):
        sums: dict[str, float] = {}
        for r in per_run:  # in run order: float sums depend on the order
            for rank, page in enumerate(r.get(q, []), start=1):
                sums[page] = sums.get(page, 0.0) + 1.0 / (k + rank)
        out += expected_rows(q, sorted(sums, key=lambda p: (-sums[p], p))[:depth])
    return out


def expected_rows(query: str, pages: list[str]) -> list[tuple]:
    return [(query, page, i + 1, float(len(pages) - i)) for i, page in enumerate(pages)]


def rows_of(run: pa.Table) -> list[tuple]:
    assert run.schema == RUN_SCHEMA
    return [(r["query_id"], r["page_id"], r["rank"], r["score"]) for r in run.to_pylist()]


def random_runs(rng: np.random.Generator, n_runs: int) -> list[pa.Table]:
    pages = [f"doc{d}-p{i:02d}" for d in range(3) for i in range(int(rng.integers(2, 12)))]
    n_queries = int(rng.integers(1, 7))
    runs = []
    for _ in range(n_runs):
        rows = []
        for q in range(n_queries):
            if rng.random() < 0.25:
                continue  # a query this run lacks
            n = int(rng.integers(0, 14))
            chosen = rng.choice(pages, size=n, replace=True)  # duplicates allowed
            scores = rng.integers(0, 4, n).astype(float)  # tied scores
            ranked = sorted(zip(chosen, scores, strict=True), key=lambda x: (-x[1], x[0]))
            rows += [(f"q{q}", str(p), i + 1, float(s)) for i, (p, s) in enumerate(ranked)]
        run = table(rows, with_rank=rng.random() < 0.7)
        if rng.random() < 0.5:
            run = run.take(rng.permutation(run.num_rows))
        if rng.random() < 0.4:  # as read_run gives them: dictionary-encoded, in several chunks
            encoded = {c: pc.dictionary_encode(run[c]) if c.endswith("_id") else run[c] for c in run.column_names}
            run = pa.table(encoded)
            run = pa.concat_tables([run.slice(0, run.num_rows // 2), run.slice(run.num_rows // 2)])
        runs.append(run)
    return runs


def random_query_ids(rng: np.random.Generator, runs):
    if rng.random() < 0.4:
        return None
    known = sorted({q for run in runs for q in run.column("query_id").to_pylist()})
    chosen = [q for q in known if rng.random() < 0.8] + ["q-unknown"] * (rng.random() < 0.5)
    return [chosen[i] for i in rng.permutation(len(chosen))]


# -- randomized, against the reference -----------------------------------------------------------------


@pytest.mark.parametrize("packed", [True, False], ids=["packed-keys", "lexsort"])
def test_merges_equal_the_reference_on_random_runs(packed, monkeypatch):
    if not packed:  # the paths taken where codes do not fit one int64 key
        monkeypatch.setattr(fusion, "_KEY_BITS", 0)
    rng = np.random.default_rng(25)
    for trial in range(80):
        runs = random_runs(rng, int(rng.integers(1, 4)))
        query_ids = random_query_ids(rng, runs)
        depth, k = int(rng.integers(1, 12)), int(rng.integers(0, 70))
        assert rows_of(round_robin(runs, depth, query_ids)) == reference_round_robin(runs, depth, query_ids), trial
        assert rows_of(reciprocal_rank_fusion(runs, depth, k, query_ids)) == reference_rrf(runs, depth, k, query_ids)
        for run in runs:
            assert ranked_lists(run) == reference_lists(run)


@pytest.mark.parametrize(("k", "n_runs"), [(60, 3), (0, 2)])
def test_rrf_equals_ranx_fuse(k, n_runs):
    """ranx adds the terms in another order: with three runs, equal sums can differ in the last bit
    at k=0, so k=0 is checked on two runs (a + b == b + a exactly)."""
    rng = np.random.default_rng(k)
    pages = [f"p{i:03d}" for i in range(80)]
    runs, ranx_runs = [], []
    for _ in range(n_runs):
        lists = {f"q{q}": list(rng.choice(pages, size=int(rng.integers(1, 60)), replace=False)) for q in range(30)}
        rows = [(q, p, i + 1, float(len(v) - i)) for q, v in lists.items() for i, p in enumerate(v)]
        runs.append(table(rows))
        ranx_runs.append(Run({q: {p: float(len(v) - i) for i, p in enumerate(v)} for q, v in lists.items()}))
    theirs = fuse(ranx_runs, norm=None, method="rrf", params={"k": k}).to_dict()
    ours = ranked_lists(reciprocal_rank_fusion(runs, depth=200, k=k))
    assert ours == {q: sorted(s, key=lambda p: (-round(s[p], 12), p)) for q, s in theirs.items()}


# -- by hand ------------------------------------------------------------------------------------------


def test_round_robin_by_hand():
    a = table([("q", "p1", 1, 3), ("q", "p2", 2, 2), ("q", "p3", 3, 1), ("r", "x", 1, 1)])
    b = table([("q", "p2", 1, 9), ("q", "p2", 2, 8), ("q", "p4", 3, 7), ("s", "y", 1, 1)])
    # turn 1: p1 (a), p2 (b); turn 2: a's p2 taken, b's duplicate p2 taken; turn 3: p3 (a), p4 (b)
    merged = round_robin([a, b], depth=10, query_ids=["s", "q", "none"])
    assert rows_of(merged) == [("s", "y", 1, 1.0), *expected_rows("q", ["p1", "p2", "p3", "p4"])]
    assert rows_of(round_robin([b, a], depth=3)) == [
        *expected_rows("q", ["p2", "p1", "p4"]),
        ("s", "y", 1, 1.0),
        ("r", "x", 1, 1.0),
    ]


def test_rrf_by_hand_with_a_tie_and_positions_not_ranks():
    # ranks 1, 5, 9 are positions 1, 2, 3; b's duplicate of "c" adds twice
    a = table([("q", "b", 1, 3), ("q", "a", 5, 2), ("q", "c", 9, 1)])
    b = table([("q", "a", 1, 3), ("q", "b", 2, 2), ("q", "c", 3, 1), ("q", "c", 4, 0)])
    # k=60: c 1/63 + 1/63 + 1/64 = 0.0474 > a 1/62 + 1/61 = b 1/61 + 1/62 (a tie: page id order)
    fused = reciprocal_rank_fusion([a, b], depth=10, k=60)
    assert rows_of(fused) == expected_rows("q", ["c", "a", "b"])
    # k=0: a 1/2 + 1 = b 1 + 1/2 = 1.5 > c 1/3 + 1/3 + 1/4
    assert ranked_lists(reciprocal_rank_fusion([a, b], depth=2, k=0)) == {"q": ["a", "b"]}


def test_input_order_without_rank_is_score_then_page_id():
    run = table([("q", "b", 0, 1.0), ("q", "a", 0, 1.0), ("q", "c", 0, 2.0)], with_rank=False)
    assert ranked_lists(run) == {"q": ["c", "a", "b"]}


def test_no_rows():
    empty = table([])
    assert rows_of(round_robin([empty, empty], depth=5, query_ids=["q"])) == []
    assert rows_of(reciprocal_rank_fusion([empty, empty], depth=5)) == []
    assert ranked_lists(empty) == {}


def test_bad_input_is_one_line():
    run = table([("q", "a", 1, 1.0)])
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        round_robin([run, run], depth=0)
    with pytest.raises(ValueError, match="k must be >= 0"):
        reciprocal_rank_fusion([run, run], depth=5, k=-1)
    with pytest.raises(ValueError, match="more than once"):
        round_robin([run, run], depth=5, query_ids=["q", "q"])
    nulls = pa.table({"query_id": pa.array(["q", None]), "page_id": ["a", "b"], "rank": [1, 2], "score": [1.0, 0.5]})
    with pytest.raises(ValueError, match="empty query ids"):
        round_robin([nulls, run], depth=5)


def test_rrf_orders_float_sums_as_the_definition_does():
    """1/63 + 1/140 and 1/84 + 1/90 are equal in exact arithmetic (29/1260) but not as float64
    sums: the one that rounds higher comes first, as in rrf_scores, whatever the page ids."""
    a = [f"f{i:03d}" for i in range(24)]
    a[2], a[23] = "x", "y"  # ranks 3 and 24: 1/63, 1/84
    b = [f"g{i:03d}" for i in range(80)]
    b[29], b[79] = "y", "x"  # ranks 30 and 80: 1/90, 1/140
    runs = [table([("q", p, i + 1, 0.0) for i, p in enumerate(items)]) for items in (a, b)]
    assert 1 / 84 + 1 / 90 > 1 / 63 + 1 / 140
    assert ranked_lists(reciprocal_rank_fusion(runs, depth=2, k=60)) == {"q": ["y", "x"]}
