"""Per-query metrics, their aggregation and run errors.

a) hand-computed cases on a tiny hand-made corpus (expected values worked out in the comments);
b) equality with trec_eval (pytrec_eval) and ranx on random runs over the small synthetic benchmark;
c) ``summarise`` and ``evidence_completeness`` on hand-made per-query frames;
d) runs that cannot be evaluated.

Discounts used below: 1/log2(2) = 1, 1/log2(3) = 0.6309297535714575, 1/log2(4) = 0.5,
1/log2(5) = 0.43067655807339306, 1/log2(6) = 0.38685280723454163.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import pytrec_eval

from helpers import random_tie_free_run
from vldocir.data.runs import make_run
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.evaluation.aggregate import evidence_completeness, summarise
from vldocir.evaluation.metrics import EvidenceIndex, RunError, metric_columns, per_query_metrics, rank_run

KS = (3, 5, 10)
D2, D3, D4, D5, D6 = (1 / math.log2(r + 1) for r in range(2, 7))  # discount at ranks 2..6
D1 = 1.0

# ----------------------------------------------------------------------------------------------
# A hand-made corpus: documents a (5 pages), b (5 pages), c (3 pages); page ids sort as a0 < a1 ...
# ----------------------------------------------------------------------------------------------

PAGES = pd.DataFrame(
    {
        "page_id": [f"{d}{i}" for d, n in (("a", 5), ("b", 5), ("c", 3)) for i in range(n)],
        "doc_id": [d for d, n in (("a", 5), ("b", 5), ("c", 3)) for _ in range(n)],
    }
)
EVIDENCE = {
    "q_single": ("page_single", ["a1"]),
    "q_multi": ("page_multi", ["b2"]),
    "q_adj": ("doc_adjacent", ["a2", "a3"]),
    "q_near": ("doc_near", ["c0", "c2"]),
    "q_far": ("doc_far", ["b0", "b4"]),
    "q_cross": ("cross_doc", ["a0", "b1", "c2"]),
}
QUERIES = pd.DataFrame(
    {
        "query_id": list(EVIDENCE),
        "evidence_structure": [s for s, _ in EVIDENCE.values()],
        "source": "wikipedia",
        "domain": "Arts",
        "generator": "gen",
        "evidence_types": [["text"]] * len(EVIDENCE),
    }
)
QRELS = pd.DataFrame(
    [(q, p, p[0]) for q, (_, pages) in EVIDENCE.items() for p in pages], columns=["query_id", "page_id", "doc_id"]
)


@pytest.fixture(scope="module")
def index() -> EvidenceIndex:
    # Shuffle the page table so that the index cannot rely on the caller's page order.
    pages = PAGES.sample(frac=1.0, random_state=3).reset_index(drop=True)
    return EvidenceIndex.from_tables(QUERIES, QRELS, pages)


def run_table(rows: list[tuple[str, str, float]]) -> pa.Table:
    """A run in exactly the given row order (no rank column: ranks are always derived)."""
    q, p, s = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {"query_id": pa.array(q, pa.string()), "page_id": pa.array(p, pa.string()), "score": pa.array(s, pa.float32())}
    )


def ranked(query: str, pages: list[str]) -> list[tuple[str, str, float]]:
    """Rows placing ``pages`` at ranks 1, 2, ... with strictly decreasing scores."""
    return [(query, page, float(len(pages) - i)) for i, page in enumerate(pages)]


def metrics_of(index: EvidenceIndex, rows, ks=KS) -> pd.DataFrame:
    return per_query_metrics(run_table(rows), index, ks).set_index("query_id")


def assert_row(row: pd.Series, expected: dict[str, float]) -> None:
    for column, value in expected.items():
        assert row[column] == pytest.approx(value, abs=1e-12), column


# ----------------------------------------------------------------------------------------------
# a) hand-computed cases
# ----------------------------------------------------------------------------------------------


def test_single_evidence_at_rank_1(index):
    row = metrics_of(index, ranked("q_single", ["a1", "a0", "b0", "b1"])).loc["q_single"]
    # E = {a1} at rank 1: DCG = 1 = IDCG at every k; all four metrics are 1.
    for k in KS:
        assert_row(row, {f"ndcg@{k}": 1.0, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": 1.0})
    assert row["in_run"]
    assert row["n_evidence_pages"] == 1 and row["n_evidence_docs"] == 1


def test_single_evidence_at_rank_2(index):
    row = metrics_of(index, ranked("q_single", ["a0", "a1", "b0"])).loc["q_single"]
    # E = {a1} at rank 2: DCG = 1/log2(3), IDCG = 1 -> nDCG = 0.6309297535714575 at every k.
    for k in KS:
        assert_row(row, {f"ndcg@{k}": D2, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": D2})
    assert pytest.approx(0.6309297535714575, abs=1e-15) == D2


def test_single_evidence_at_rank_4(index):
    row = metrics_of(index, ranked("q_single", ["a0", "a2", "a3", "a1", "b0"])).loc["q_single"]
    # rank 4: outside the top 3 (everything 0), inside the top 5 and 10 with nDCG = 1/log2(5).
    assert_row(row, {"ndcg@3": 0.0, "recall@3": 0.0, "recallall@3": 0.0, "ndcgall@3": 0.0, "pages_found@3": 0})
    for k in (5, 10):
        assert_row(row, {f"ndcg@{k}": D4, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": D4})
    assert pytest.approx(0.43067655807339306, abs=1e-15) == D4


def test_single_evidence_absent(index):
    row = metrics_of(index, ranked("q_single", ["a0", "a2", "b0", "b1", "c0"])).loc["q_single"]
    for column in metric_columns(KS):
        assert row[column] == 0.0, column
    assert row["in_run"]  # listed in the run, just without its evidence


def test_two_evidence_pages_at_ranks_1_and_4(index):
    # E = {a2, a3}; a2 at rank 1, a3 at rank 4.
    row = metrics_of(index, ranked("q_adj", ["a2", "a0", "a1", "a3", "a4"])).loc["q_adj"]
    # k=3: DCG = 1, IDCG = 1 + 1/log2(3) -> nDCG = 1/1.6309297535714575 = 0.6131471927654584;
    #      Recall = 1/2, but the evidence is incomplete: RecallAll = 0 and nDCGAll = 0.
    assert_row(row, {"ndcg@3": 1 / (1 + D2), "recall@3": 0.5, "recallall@3": 0.0, "ndcgall@3": 0.0})
    assert pytest.approx(0.6131471927654584, abs=1e-15) == 1 / (1 + D2)
    # k=5 and 10: DCG = 1 + 1/log2(5) = 1.430676558073393, IDCG = 1.6309297535714575
    #      -> nDCG = 0.8772153153380491 = nDCGAll; Recall = RecallAll = 1.
    expected = (1 + D4) / (1 + D2)
    assert expected == pytest.approx(0.8772153153380491, abs=1e-15)
    for k in (5, 10):
        assert_row(row, {f"ndcg@{k}": expected, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": expected})
    assert row["pages_found@3"] == 1 and row["pages_found@5"] == 2


def test_two_evidence_pages_both_in_top_k(index):
    # E = {b0, b4} at ranks 2 and 3: DCG = 1/log2(3) + 1/2, IDCG = 1 + 1/log2(3)
    #   -> nDCG = 1.1309297535714575 / 1.6309297535714575 = 0.6934264036172708 at every k.
    row = metrics_of(index, ranked("q_far", ["b1", "b0", "b4"])).loc["q_far"]
    expected = (D2 + D3) / (1 + D2)
    assert expected == pytest.approx(0.6934264036172708, abs=1e-15)
    for k in KS:
        assert_row(row, {f"ndcg@{k}": expected, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": expected})


def test_cross_doc_three_pages(index):
    # E = {a0, b1, c2} at ranks 2, 3 and 5 (rank 1 is c0: a non-evidence page of an evidence doc).
    row = metrics_of(index, ranked("q_cross", ["c0", "a0", "b1", "a4", "c2", "b3"])).loc["q_cross"]
    idcg3 = 1 + D2 + D3  # = 2.1309297535714578; IDCG@5 = IDCG@10 = IDCG@3 since |E| = 3
    # k=3: DCG = 1/log2(3) + 1/2 = 1.1309297535714575 -> nDCG = 0.5307212739772434; Recall = 2/3.
    assert_row(row, {"ndcg@3": (D2 + D3) / idcg3, "recall@3": 2 / 3, "recallall@3": 0.0, "ndcgall@3": 0.0})
    assert (D2 + D3) / idcg3 == pytest.approx(0.5307212739772434, abs=1e-15)
    # k=5: DCG adds 1/log2(6) -> 1.5177825608059992 / 2.1309297535714578 = 0.7122630665145961; all found.
    full = (D2 + D3 + D5) / idcg3
    assert full == pytest.approx(0.7122630665145961, abs=1e-15)
    for k in (5, 10):
        assert_row(row, {f"ndcg@{k}": full, f"recall@{k}": 1.0, f"recallall@{k}": 1.0, f"ndcgall@{k}": full})
    # Documents: c (rank 1 via c0), a, b all in the top 3; pages: a0 and b1.
    assert row["n_evidence_pages"] == 3 and row["n_evidence_docs"] == 3
    assert row["docs_found@3"] == 3 and row["pages_found@3"] == 2 and row["pages_found@5"] == 3


def test_k_larger_than_the_run(index):
    # Only two pages retrieved; E = {a1} at rank 2: nDCG@10 = 1/log2(3), Recall@10 = 1.
    # E = {a2, a3} with only a3 retrieved (rank 1): nDCG = 1 / (1 + 1/log2(3)), Recall = 1/2.
    rows = ranked("q_single", ["a0", "a1"]) + ranked("q_adj", ["a3"])
    frame = metrics_of(index, rows, ks=(1, 3, 10))
    assert_row(
        frame.loc["q_single"], {"ndcg@1": 0.0, "ndcg@3": D2, "ndcg@10": D2, "recall@10": 1.0, "recallall@10": 1.0}
    )
    assert_row(
        frame.loc["q_adj"],
        {
            "ndcg@1": 1.0,
            "recall@1": 0.5,
            "ndcg@10": 1 / (1 + D2),
            "recall@10": 0.5,
            "recallall@10": 0.0,
            "ndcgall@10": 0.0,
        },
    )


def test_query_missing_from_the_run(index):
    frame = metrics_of(index, ranked("q_single", ["a1"]))
    assert frame.loc["q_single", "in_run"]
    assert list(frame.index) == list(EVIDENCE)  # one row per benchmark query, in benchmark order
    for query in EVIDENCE:
        if query == "q_single":
            continue
        row = frame.loc[query]
        assert not row["in_run"]
        for column in [*metric_columns(KS), *(f"pages_found@{k}" for k in KS), *(f"docs_found@{k}" for k in KS)]:
            assert row[column] == 0, (query, column)


def test_empty_run(index):
    frame = metrics_of(index, [])
    assert not frame["in_run"].any()
    assert (frame[metric_columns(KS)] == 0).all().all()


@pytest.mark.parametrize("evidence_first_in_input", [True, False])
def test_ties_broken_by_page_id(index, evidence_first_in_input):
    # a0 and a1 share the top score; a0 < a1 so a0 takes rank 1 and the evidence a1 rank 2,
    # whatever the input order: nDCG = 1/log2(3).
    rows = [("q_single", "a1", 0.5), ("q_single", "a0", 0.5), ("q_single", "b0", 0.1)]
    if not evidence_first_in_input:
        rows = [rows[1], rows[0], rows[2]]
    row = metrics_of(index, rows, ks=(1, 3)).loc["q_single"]
    assert_row(row, {"ndcg@1": 0.0, "recall@1": 0.0, "ndcg@3": D2, "recall@3": 1.0})
    # The same tie with the evidence on the smaller id (q_cross has a0): a0 takes rank 1.
    rows = [("q_cross", "a1", 0.5), ("q_cross", "a0", 0.5)]
    if not evidence_first_in_input:
        rows = rows[::-1]
    row = metrics_of(index, rows, ks=(1,)).loc["q_cross"]
    assert row["pages_found@1"] == 1


def test_ties_ignore_the_rank_column(index):
    # A rank column in the run is never trusted: here it claims a1 is first.
    run = run_table([("q_single", "a1", 0.5), ("q_single", "a0", 0.5)]).append_column(
        "rank", pa.array([1, 2], pa.int32())
    )
    row = per_query_metrics(run, index, (1,)).set_index("query_id").loc["q_single"]
    assert row["ndcg@1"] == 0.0


def test_rank_run_orders_by_score_then_page_id(index):
    rows = [
        ("q_adj", "b0", 0.2),
        ("q_single", "c1", 0.9),
        ("q_adj", "a4", 0.7),
        ("q_single", "a2", 0.9),
        ("q_adj", "a1", 0.7),
    ]
    qcode, pcode, rank = rank_run(run_table(rows), index)
    got = [(index.query_ids[q], index.page_ids[p], int(r)) for q, p, r in zip(qcode, pcode, rank, strict=True)]
    # Queries in benchmark order (q_single before q_adj); within a query score desc, then page_id asc.
    assert got == [
        ("q_single", "a2", 0),
        ("q_single", "c1", 1),
        ("q_adj", "a1", 0),
        ("q_adj", "a4", 1),
        ("q_adj", "b0", 2),
    ]


def _random_rows(seed: int, ties: bool) -> list[tuple[str, str, float]]:
    rng = np.random.default_rng(seed)
    rows = []
    for query in EVIDENCE:
        pages = rng.choice(PAGES["page_id"].to_numpy(), size=int(rng.integers(1, 13)), replace=False)
        scores = rng.integers(0, 4, size=len(pages)) if ties else rng.permutation(len(pages))
        rows += [(query, str(p), float(s)) for p, s in zip(pages, scores, strict=True)]
    return rows


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("ties", [False, True])
def test_shuffled_run_evaluates_like_sorted(index, seed, ties):
    rows = _random_rows(seed, ties)
    by_make_run = make_run(
        list(EVIDENCE),
        [[p for q, p, _ in rows if q == query] for query in EVIDENCE],
        [[s for q, _, s in rows if q == query] for query in EVIDENCE],
    )
    shuffled = [rows[i] for i in np.random.default_rng(seed + 100).permutation(len(rows))]
    sorted_result = per_query_metrics(by_make_run, index, KS)
    shuffled_result = per_query_metrics(run_table(shuffled), index, KS)
    pd.testing.assert_frame_equal(sorted_result, shuffled_result)


# ----------------------------------------------------------------------------------------------
# b) equality with trec_eval (pytrec_eval) and ranx on random runs over the synthetic benchmark
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_index(small_bench):
    return EvidenceIndex.from_tables(small_bench.queries, small_bench.qrels, small_bench.pages)


def test_index_from_the_needed_columns_only(small_bench, bench_index):
    index = EvidenceIndex.from_benchmark(small_bench)
    for name in ("evidence_pages", "evidence_docs", "page_doc"):
        np.testing.assert_array_equal(getattr(index, name), getattr(bench_index, name))
    assert index.query_ids.equals(bench_index.query_ids) and index.page_ids.equals(bench_index.page_ids)
    pd.testing.assert_frame_equal(index.queries, bench_index.queries)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_equals_trec_eval(small_bench, bench_index, seed):
    run, run_dict, qrels = random_tie_free_run(small_bench, seed)
    ours = per_query_metrics(run, bench_index, KS).set_index("query_id")
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3,5,10", "recall.3,5,10"})
    theirs = evaluator.evaluate(run_dict)
    assert set(theirs) == set(ours.index)
    # The random runs must exercise complete, partial and missing evidence.
    assert 0 < ours["recallall@10"].mean() < 1 and (ours["recall@10"] == 0).any()
    for query, measures in theirs.items():
        for k in KS:
            assert ours.at[query, f"ndcg@{k}"] == pytest.approx(measures[f"ndcg_cut_{k}"], abs=1e-9), (query, k)
            assert ours.at[query, f"recall@{k}"] == pytest.approx(measures[f"recall_{k}"], abs=1e-9), (query, k)
            complete = float(measures[f"recall_{k}"] == 1.0)
            assert ours.at[query, f"recallall@{k}"] == complete
            assert ours.at[query, f"ndcgall@{k}"] == pytest.approx(complete * measures[f"ndcg_cut_{k}"], abs=1e-9)


@pytest.mark.filterwarnings("ignore:unsafe cast")  # numba, inside ranx's ndcg
@pytest.mark.slow  # ranx's numba functions take ~10 s to load (and ~45 s to compile on first use)
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_ranx(small_bench, bench_index, seed):
    import ranx  # here, not at the top: loading its numba functions takes ~10 s

    run, run_dict, qrels = random_tie_free_run(small_bench, seed)
    ours = per_query_metrics(run, bench_index, KS).set_index("query_id")
    ranx_run = ranx.Run.from_dict(run_dict)
    measures = [f"{m}@{k}" for m in ("ndcg", "recall") for k in KS]
    ranx.evaluate(ranx.Qrels.from_dict(qrels), ranx_run, measures, threads=1)
    for measure in measures:
        theirs = pd.Series(dict(ranx_run.scores[measure]))
        assert set(theirs.index) == set(ours.index)
        np.testing.assert_allclose(ours.loc[theirs.index, measure].to_numpy(), theirs.to_numpy(), rtol=0, atol=1e-9)


# ----------------------------------------------------------------------------------------------
# c) aggregation
# ----------------------------------------------------------------------------------------------


def per_query_frame(rows: list[dict], ks=(3,)) -> pd.DataFrame:
    """A per-query frame as ``per_query_metrics`` makes it; each row gives one value ``v`` used for
    all four metrics at every k (so every metric aggregates to the same number)."""
    records = []
    for i, row in enumerate(rows):
        record = {
            "query_id": f"q{i}",
            "evidence_structure": row["structure"],
            "source": row["source"],
            "domain": row["domain"],
            "generator": row.get("generator", "gen"),
            "evidence_type": row.get("evidence_type", "text"),
            "n_evidence_pages": row.get("n_evidence_pages", 1),
            "n_evidence_docs": row.get("n_evidence_docs", 1),
            "in_run": row.get("in_run", True),
        }
        for k in ks:
            record |= {column: float(row["v"]) for column in metric_columns([k])}
            record[f"pages_found@{k}"] = row.get("pages_found", 1)
            record[f"docs_found@{k}"] = row.get("docs_found", 1)
        records.append(record)
    return pd.DataFrame(records)


def test_summarise_macro_micro_source_domain():
    frame = per_query_frame(
        [
            {"structure": "page_single", "source": "S1", "domain": "D1", "v": 1},
            {"structure": "page_single", "source": "S1", "domain": "D2", "v": 1},
            {"structure": "page_single", "source": "S2", "domain": "D2", "v": 0},
            {"structure": "doc_near", "source": "S1", "domain": "D2", "v": 0, "in_run": False},
        ]
    )
    metrics = summarise(frame, [3])
    aggregates = metrics["aggregates"]
    for column in metric_columns([3]):
        # Micro: (1 + 1 + 0 + 0) / 4 = 50 %.
        assert aggregates["micro"][column] == pytest.approx(50.0)
        # Macro: page_single mean 2/3, doc_near mean 0 -> (2/3 + 0) / 2 = 1/3 = 33.33 % (not 50 %).
        assert aggregates["macro"][column] == pytest.approx(100 / 3, abs=1e-5)
        # Source Macro: S1 = (page_single 1 + doc_near 0) / 2 = 1/2; S2 = page_single 0 = 0
        #   -> (1/2 + 0) / 2 = 25 %.
        assert aggregates["source_macro"][column] == pytest.approx(25.0)
        # Domain Macro: D1 = page_single 1 = 1; D2 = (page_single (1+0)/2 + doc_near 0) / 2 = 1/4
        #   -> (1 + 1/4) / 2 = 62.5 %.
        assert aggregates["domain_macro"][column] == pytest.approx(62.5)
    assert metrics["n_queries"] == 4
    assert metrics["n_queries_missing_from_run"] == 1
    assert metrics["ks"] == [3]
    # Structures without queries are listed and left out of Macro: averaging them as zeros would
    # give (2/3 + 0 + 0 + 0 + 0 + 0) / 6 = 11.1 %.
    assert metrics["empty"]["structures"] == ["page_multi", "doc_adjacent", "doc_far", "cross_doc"]
    assert metrics["empty"]["source_structure_cells"] == ["S2/doc_near"]
    assert metrics["empty"]["domain_structure_cells"] == ["D1/doc_near"]
    structure = metrics["breakdowns"]["structure"]
    assert list(structure) == ["page_single", "doc_near"]
    assert structure["page_single"]["n_queries"] == 3
    assert structure["page_single"]["recall@3"] == pytest.approx(200 / 3, abs=1e-5)
    source = metrics["breakdowns"]["source"]
    assert source["S1"]["recall@3"] == pytest.approx(50.0) and source["S1"]["n_structures"] == 2
    assert source["S2"]["recall@3"] == pytest.approx(0.0) and source["S2"]["n_queries"] == 1
    domain = metrics["breakdowns"]["domain"]
    assert domain["D1"]["recall@3"] == pytest.approx(100.0) and domain["D2"]["recall@3"] == pytest.approx(25.0)
    cells = metrics["breakdowns"]["source_structure"]
    assert cells["S1"]["page_single"]["recall@3"] == pytest.approx(100.0)
    assert cells["S1"]["doc_near"]["n_queries"] == 1
    assert "doc_near" not in cells["S2"]


def test_summarise_macro_equals_micro_when_balanced():
    # Two structures with two queries each: Macro = Micro = (1 + 0 + 1 + 1) / 4 = 75 %.
    frame = per_query_frame(
        [
            {"structure": s, "source": "S", "domain": "D", "v": v}
            for s, v in (("page_single", 1), ("page_single", 0), ("cross_doc", 1), ("cross_doc", 1))
        ]
    )
    aggregates = summarise(frame, [3])["aggregates"]
    assert aggregates["macro"]["ndcg@3"] == pytest.approx(75.0)
    assert aggregates["micro"]["ndcg@3"] == pytest.approx(75.0)


def test_evidence_completeness_from_a_run(index):
    rows = (
        ranked("q_single", ["a1"])
        + ranked("q_multi", ["a0"])
        # doc_adjacent E = {a2, a3}: only a2 found -> pages partial; one document, found -> documents all.
        + ranked("q_adj", ["a2", "a0", "a1"])
        # doc_far E = {b0, b4}: both found -> all / all.
        + ranked("q_far", ["b4", "b0"])
        # doc_near E = {c0, c2}: nothing of document c in the top 3 -> none / none.
        + ranked("q_near", ["a0", "b0", "b1", "c0"])
        # cross_doc E = {a0, b1, c2}: top 1 = a4 (doc a only), top 3 = a4, b1, c0: one evidence page,
        # but a page of every evidence document -> pages partial, documents partial @1 and all @3.
        + ranked("q_cross", ["a4", "b1", "c0"])
    )
    frame = per_query_metrics(run_table(rows), index, (1, 3))
    result = evidence_completeness(frame, (1, 3))
    page, document = result["page"]["@3"], result["document"]["@3"]
    assert set(page) == {"doc_adjacent", "doc_near", "doc_far", "cross_doc", "all_multi_page"}  # no single-page
    assert page["doc_adjacent"] == {"all": 0.0, "partial": 100.0, "none": 0.0}
    assert page["doc_far"] == {"all": 100.0, "partial": 0.0, "none": 0.0}
    assert page["doc_near"] == {"all": 0.0, "partial": 0.0, "none": 100.0}
    assert page["cross_doc"] == {"all": 0.0, "partial": 100.0, "none": 0.0}
    # Over the 4 multi-page queries: pages 1 all, 2 partial, 1 none.
    assert page["all_multi_page"] == {"all": 25.0, "partial": 50.0, "none": 25.0}
    assert document["doc_adjacent"] == {"all": 100.0, "partial": 0.0, "none": 0.0}
    assert document["cross_doc"] == {"all": 100.0, "partial": 0.0, "none": 0.0}
    assert document["doc_near"] == {"all": 0.0, "partial": 0.0, "none": 100.0}
    # Documents: adjacent, far and cross all found; near none -> 75 / 0 / 25.
    assert document["all_multi_page"] == {"all": 75.0, "partial": 0.0, "none": 25.0}
    # At k=1 the cross_doc query has found 1 of its 3 documents (a, through a4) and no evidence page.
    assert result["document"]["@1"]["cross_doc"] == {"all": 0.0, "partial": 100.0, "none": 0.0}
    assert result["page"]["@1"]["cross_doc"] == {"all": 0.0, "partial": 0.0, "none": 100.0}
    # summarise carries the same table.
    assert summarise(frame, (1, 3))["evidence_completeness"] == result


# ----------------------------------------------------------------------------------------------
# d) runs that cannot be evaluated
# ----------------------------------------------------------------------------------------------


def test_unknown_page_id(index):
    with pytest.raises(RunError, match="zz-unknown-page"):
        per_query_metrics(run_table([("q_single", "a1", 1.0), ("q_single", "zz-unknown-page", 0.5)]), index, KS)


def test_unknown_query_id(index):
    with pytest.raises(RunError, match="q_nowhere"):
        per_query_metrics(run_table([("q_nowhere", "a1", 1.0)]), index, KS)


def test_duplicate_page_in_top_depth(index):
    rows = [("q_single", "a1", 0.9), ("q_single", "a0", 0.5), ("q_single", "a1", 0.4)]
    with pytest.raises(RunError, match=r"page a1 more than once for query q_single"):
        per_query_metrics(run_table(rows), index, KS)


def test_duplicate_page_with_equal_scores(index):
    rows = [("q_adj", "a2", 0.5), ("q_adj", "a2", 0.5)]
    with pytest.raises(RunError, match=r"page a2 more than once for query q_adj"):
        per_query_metrics(run_table(rows), index, KS)


def test_nan_score(index):
    rows = [("q_single", "a1", 0.9), ("q_single", "a0", float("nan"))]
    with pytest.raises(RunError, match="NaN"):
        per_query_metrics(run_table(rows), index, KS)


def test_null_page_id(index):
    run = pa.table(
        {
            "query_id": pa.array(["q_single", "q_single"], pa.string()),
            "page_id": pa.array(["a1", None], pa.string()),
            "score": pa.array([1.0, 0.5], pa.float32()),
        }
    )
    with pytest.raises(RunError, match="empty page ids"):
        per_query_metrics(run, index, KS)


@pytest.mark.parametrize("ks", [(), (0, 3), (-1,)])
def test_invalid_cutoffs(index, ks):
    with pytest.raises(ValueError, match="cut-offs"):
        per_query_metrics(run_table(ranked("q_single", ["a1"])), index, ks)


def test_metric_columns_order():
    assert metric_columns([3, 5]) == [
        "ndcg@3",
        "ndcg@5",
        "recall@3",
        "recall@5",
        "ndcgall@3",
        "ndcgall@5",
        "recallall@3",
        "recallall@5",
    ]
    assert set(EVIDENCE_STRUCTURES) == {s for s, _ in EVIDENCE.values()}
