"""Graded relevance: nDCG@k with the qrels' grades as gains equals trec_eval's ``ndcg_cut_k``
(pytrec_eval) per query; every qrel with grade > 0 is evidence for Recall / RecallAll / nDCGAll,
grade 0 is not; a benchmark without grades (or with every grade 1) evaluates exactly as before.

Discounts: 1/log2(2) = 1, 1/log2(3) = 0.6309297535714575, 1/log2(4) = 0.5,
1/log2(5) = 0.43067655807339306, 1/log2(6) = 0.38685280723454163.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import pytrec_eval

from vldocir.data.runs import make_run
from vldocir.evaluation.metrics import EvidenceIndex, RunError, per_query_metrics, rank_run

KS = (1, 3, 5, 10)
D2, D3, D4, D5 = (1 / math.log2(r + 1) for r in range(2, 6))  # discounts at ranks 2..5

PAGES = pd.DataFrame(
    {
        "page_id": [f"{d}{i}" for d, n in (("a", 6), ("b", 6), ("c", 4)) for i in range(n)],
        "doc_id": [d for d, n in (("a", 6), ("b", 6), ("c", 4)) for _ in range(n)],
    }
)
GRADES = {
    # several grades, two pages of equal grade (a1, a2), a judged non-relevant page (a3: grade 0)
    "g1": {"a0": 3, "a1": 2, "a2": 2, "b0": 1, "a3": 0},
    # a grade-3 page that the runs below never retrieve
    "g2": {"b1": 1, "b2": 3},
    # one evidence page; a grade-0 page retrieved first
    "g3": {"c0": 2, "c1": 0},
    # binary grades inside a graded benchmark
    "g4": {"a4": 1, "c3": 1},
}
QUERIES = pd.DataFrame(
    {
        "query_id": list(GRADES),
        "evidence_structure": ["cross_doc", "doc_adjacent", "page_single", "cross_doc"],
        "source": "wikipedia",
        "domain": "Arts",
        "generator": "gen",
        "evidence_types": [["text"]] * len(GRADES),
    }
)


def qrels(grades: dict[str, dict[str, int]] = GRADES) -> pd.DataFrame:
    rows = [(q, p, p[0], g) for q, pages in grades.items() for p, g in pages.items()]
    return pd.DataFrame(rows, columns=["query_id", "page_id", "doc_id", "grade"])


def run_table(rows: list[tuple[str, str, float]]) -> pa.Table:
    q, p, s = zip(*rows, strict=True)
    return pa.table(
        {"query_id": pa.array(q, pa.string()), "page_id": pa.array(p, pa.string()), "score": pa.array(s, pa.float32())}
    )


def ranked(query: str, pages: list[str]) -> list[tuple[str, str, float]]:
    return [(query, page, float(len(pages) - i)) for i, page in enumerate(pages)]


@pytest.fixture(scope="module")
def index() -> EvidenceIndex:
    return EvidenceIndex.from_tables(QUERIES, qrels(), PAGES.sample(frac=1.0, random_state=1))


def trec_eval(index: EvidenceIndex, run: pa.Table, graded: dict[str, dict[str, int]], ks=KS) -> dict[str, dict]:
    """pytrec_eval on the run in vldocir's order: each query's pages get distinct scores n, n-1, ...
    by the evaluation's own ranking (score desc, then page_id asc), so that a tie is broken the same
    way for both (trec_eval breaks ties by docno, descending)."""
    qcode, pcode, rank = rank_run(run, index)
    as_dict: dict[str, dict[str, float]] = {}
    for q, p, r in zip(qcode, pcode, rank, strict=True):
        as_dict.setdefault(index.query_ids[q], {})[index.page_ids[p]] = float(10_000 - r)
    cuts = ",".join(map(str, ks))
    return pytrec_eval.RelevanceEvaluator(graded, {f"ndcg_cut.{cuts}", f"recall.{cuts}"}).evaluate(as_dict)


def test_graded_ndcg_by_hand(index):
    # g1: a1 (2) at rank 1, b5 (not judged) 2, a0 (3) 3, a3 (grade 0) 4, b0 (1) 5.
    rows = ranked("g1", ["a1", "b5", "a0", "a3", "b0"])
    row = per_query_metrics(run_table(rows), index, KS).set_index("query_id").loc["g1"]
    # DCG@3 = 2*1 + 0 + 3*(1/2) = 3.5; IDCG@3 = 3 + 2*D2 + 2*D3 (grades 3, 2, 2) = 5.261859507142915.
    assert row["ndcg@3"] == pytest.approx(3.5 / (3 + 2 * D2 + 2 * D3), abs=1e-12)
    assert pytest.approx(0.6651640918, abs=1e-9) == 3.5 / (3 + 2 * D2 + 2 * D3)
    # DCG@5 adds 0 (a3: grade 0 is no gain) and 1*D5; IDCG@5 adds the last evidence grade, 1*D4.
    assert row["ndcg@5"] == pytest.approx((3.5 + D5) / (3 + 2 * D2 + 2 * D3 + D4), abs=1e-12)
    # nDCG@1: a1 (2) where the ideal has a0 (3): 2/3.
    assert row["ndcg@1"] == pytest.approx(2 / 3, abs=1e-12)
    # Evidence = grade > 0: a0, a1, a2, b0 (not a3). Found in the top 5: a1, a0, b0.
    assert row["n_evidence_pages"] == 4 and row["n_evidence_docs"] == 2
    assert row["recall@5"] == pytest.approx(0.75) and row["recallall@5"] == 0.0 and row["ndcgall@5"] == 0.0
    assert row["pages_found@3"] == 2


def test_grade_zero_is_not_evidence(index):
    # g3: E = {c0}; c1 (grade 0) at rank 1, c0 at rank 2: RecallAll@1 = 0, @3 = 1; nDCG@3 = 2*D2 / 2.
    row = per_query_metrics(run_table(ranked("g3", ["c1", "c0"])), index, KS).set_index("query_id").loc["g3"]
    assert row["n_evidence_pages"] == 1
    assert row["recallall@1"] == 0.0 and row["recallall@3"] == 1.0
    assert row["ndcg@3"] == pytest.approx(D2, abs=1e-12) and row["ndcgall@3"] == pytest.approx(D2, abs=1e-12)


def test_graded_equals_trec_eval_on_a_hand_made_run_with_ties(index):
    rows = [
        # g1: ties between a judged grade-2 page and a grade-3 page, and with non-evidence pages
        ("g1", "a2", 5.0),
        ("g1", "a0", 5.0),
        ("g1", "c2", 5.0),
        ("g1", "a3", 4.0),
        ("g1", "b0", 1.0),
        # g2: the grade-3 page b2 missing from the run
        ("g2", "b1", 2.0),
        ("g2", "a5", 2.0),
        ("g2", "b3", 1.0),
        ("g3", "c1", 9.0),
        ("g3", "c0", 8.0),
        ("g4", "c3", 1.0),
        ("g4", "b4", 1.0),
        ("g4", "a4", 0.5),
    ]
    run = run_table(rows)
    ours = per_query_metrics(run, index, KS).set_index("query_id")
    theirs = trec_eval(index, run, GRADES)
    assert set(theirs) == set(ours.index)
    for query, measures in theirs.items():
        for k in KS:
            assert ours.at[query, f"ndcg@{k}"] == pytest.approx(measures[f"ndcg_cut_{k}"], abs=1e-12), (query, k)
            assert ours.at[query, f"recall@{k}"] == pytest.approx(measures[f"recall_{k}"], abs=1e-12), (query, k)
            assert ours.at[query, f"recallall@{k}"] == float(measures[f"recall_{k}"] == 1.0)
    # the graded case is exercised: g1's nDCG differs from its binary value
    binary = EvidenceIndex.from_tables(QUERIES, qrels().assign(grade=lambda f: (f.grade > 0).astype(int)), PAGES)
    assert per_query_metrics(run, binary, KS).set_index("query_id").at["g1", "ndcg@5"] != ours.at["g1", "ndcg@5"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_graded_equals_trec_eval_on_random_runs(small_bench, seed):
    """Random grades 0..3 on the synthetic benchmark's qrels (each query keeps one page of grade >= 1),
    random runs with tied scores."""
    rng = np.random.default_rng(seed)
    frame = small_bench.qrels[["query_id", "page_id", "doc_id"]].copy()
    frame["grade"] = rng.integers(0, 4, len(frame))
    first = ~frame["query_id"].duplicated()
    frame.loc[first, "grade"] = rng.integers(1, 4, int(first.sum()))
    index = EvidenceIndex.from_tables(small_bench.queries, frame, small_bench.pages)
    page_ids = small_bench.pages["page_id"].to_numpy(dtype=object)
    candidates, scores = [], []
    evidence = frame.groupby("query_id")["page_id"].apply(list).to_dict()
    for query in small_bench.queries["query_id"]:
        kept = [p for p in evidence[query] if rng.random() < 0.7]
        others = [p for p in rng.choice(page_ids, 15, replace=False) if p not in kept]
        candidates.append(kept + others)
        scores.append(rng.integers(0, 6, len(kept) + len(others)).astype(np.float64))  # many ties
    run = make_run(list(small_bench.queries["query_id"]), candidates, scores)
    graded = {
        q: dict(zip(g["page_id"], g["grade"].astype(int).tolist(), strict=True)) for q, g in frame.groupby("query_id")
    }
    ours = per_query_metrics(run, index, KS).set_index("query_id")
    theirs = trec_eval(index, run, graded)
    assert index.evidence_grades is not None and 0 < ours["recallall@10"].mean() < 1
    for query, measures in theirs.items():
        for k in KS:
            assert ours.at[query, f"ndcg@{k}"] == pytest.approx(measures[f"ndcg_cut_{k}"], abs=1e-12), (query, k)
            assert ours.at[query, f"recall@{k}"] == pytest.approx(measures[f"recall_{k}"], abs=1e-12), (query, k)


def test_binary_grades_evaluate_exactly_as_without_grades(small_bench):
    """Grade 1 everywhere, or grade-0 rows added, changes nothing: not one bit of any metric."""
    rng = np.random.default_rng(5)
    base_qrels = small_bench.qrels[["query_id", "page_id", "doc_id"]]
    plain = EvidenceIndex.from_tables(small_bench.queries, base_qrels, small_bench.pages)
    ones = EvidenceIndex.from_tables(small_bench.queries, base_qrels.assign(grade=1), small_bench.pages)
    extra = small_bench.pages.sample(40, random_state=2)[["page_id", "doc_id"]]
    extra = extra.assign(query_id=rng.choice(small_bench.queries["query_id"].to_numpy(), len(extra)), grade=0)
    extra = extra.merge(base_qrels, on=["query_id", "page_id"], how="left", indicator=True, suffixes=("", "_"))
    extra = extra[extra["_merge"] == "left_only"][["query_id", "page_id", "doc_id", "grade"]]
    with_zeros = EvidenceIndex.from_tables(
        small_bench.queries, pd.concat([base_qrels.assign(grade=1), extra], ignore_index=True), small_bench.pages
    )
    assert ones.evidence_grades is None and with_zeros.evidence_grades is None
    page_ids = small_bench.pages["page_id"].to_numpy(dtype=object)
    query_ids = list(small_bench.queries["query_id"])
    run = make_run(
        query_ids,
        [list(rng.choice(page_ids, 20, replace=False)) for _ in query_ids],
        [rng.integers(0, 5, 20).astype(float) for _ in query_ids],
    )
    expected = per_query_metrics(run, plain, KS)
    pd.testing.assert_frame_equal(per_query_metrics(run, ones, KS), expected, check_exact=True)
    pd.testing.assert_frame_equal(per_query_metrics(run, with_zeros, KS), expected, check_exact=True)


def test_a_benchmark_without_grades_reads_grade_1(small_bench):
    """The synthetic benchmark's qrels file has no grade column: the index reads it as binary."""
    assert "grade" not in small_bench.arrow("qrels").column_names
    assert EvidenceIndex.from_benchmark(small_bench).evidence_grades is None


def test_a_query_with_only_grade_zero_qrels_is_refused():
    grades = {**GRADES, "g3": {"c0": 0, "c1": 0}}
    with pytest.raises(RunError, match=r"1 queries have no evidence page \(no qrel with grade > 0\), e.g. g3"):
        EvidenceIndex.from_tables(QUERIES, qrels(grades), PAGES)
