"""Per-query MRR@k (``mrr@k`` of :func:`per_query_metrics`): 1 / rank of the first evidence page in
the top k, else 0.

a) by hand on a small graded corpus (a grade-0 page is not evidence; the first evidence page
   counts, not the best graded one);
b) equal to mteb's own ``MRR@k`` (``mteb._evaluators.retrieval_metrics.mrr``) on random runs over
   the small synthetic benchmark, scores distinct (mteb breaks ties by doc id descending, we by
   page_id ascending).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from mteb._evaluators.retrieval_metrics import mrr as mteb_mrr

from helpers import random_tie_free_run
from vldocir.evaluation.metrics import METRICS, EvidenceIndex, metric_columns, per_query_metrics

KS = (1, 3, 5)

PAGES = pd.DataFrame({"page_id": [f"a{i}" for i in range(8)], "doc_id": "a"})
GRADES = {
    "m1": {"a2": 1, "a5": 3},  # first evidence page a2 at rank 2
    "m2": {"a0": 0, "a4": 2},  # a0 (grade 0) at rank 1 is no hit; a4 at rank 4
    "m3": {"a7": 1},  # not in the run
    "m4": {"a3": 1},  # at rank 1
}
QUERIES = pd.DataFrame(
    {
        "query_id": list(GRADES),
        "evidence_structure": ["doc_far", "page_single", "page_single", "page_single"],
        "source": "wikipedia",
        "domain": "Arts",
        "generator": "gen",
        "evidence_types": [["text"]] * len(GRADES),
    }
)
QRELS = pd.DataFrame(
    [(q, p, "a", g) for q, pages in GRADES.items() for p, g in pages.items()],
    columns=["query_id", "page_id", "doc_id", "grade"],
)


def ranked(query: str, pages: list[str]) -> list[tuple[str, str, float]]:
    return [(query, page, float(len(pages) - i)) for i, page in enumerate(pages)]


def test_mrr_by_hand():
    rows = [
        *ranked("m1", ["a0", "a2", "a5", "a1"]),
        *ranked("m2", ["a0", "a1", "a2", "a4"]),
        *ranked("m3", ["a1", "a2"]),
        *ranked("m4", ["a3"]),
    ]
    q, p, s = zip(*rows, strict=True)
    run = pa.table({"query_id": list(q), "page_id": list(p), "score": pa.array(s, pa.float32())})
    index = EvidenceIndex.from_tables(QUERIES, QRELS, PAGES)
    frame = per_query_metrics(run, index, KS).set_index("query_id")
    expected = {
        "m1": {1: 0.0, 3: 1 / 2, 5: 1 / 2},
        "m2": {1: 0.0, 3: 0.0, 5: 1 / 4},
        "m3": {1: 0.0, 3: 0.0, 5: 0.0},
        "m4": {1: 1.0, 3: 1.0, 5: 1.0},
    }
    for query, by_k in expected.items():
        for k, value in by_k.items():
            assert frame.at[query, f"mrr@{k}"] == value, (query, k)
    # an extra per-query column, not one of the aggregated metrics
    assert "mrr" not in METRICS and not any(c.startswith("mrr@") for c in metric_columns(KS))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mrr_equals_mteb(small_bench, seed):
    run, as_dict, qrels = random_tie_free_run(small_bench, seed, n_candidates=15, keep=0.6)
    query_ids = list(small_bench.queries["query_id"])
    index = EvidenceIndex.from_tables(small_bench.queries, small_bench.qrels, small_bench.pages)
    ours = per_query_metrics(run, index, (1, 3, 5, 10)).set_index("query_id")
    theirs = mteb_mrr(qrels, as_dict, [1, 3, 5, 10])
    for k in (1, 3, 5, 10):
        values = dict(zip(as_dict, theirs[f"MRR@{k}"], strict=True))
        assert ours.loc[query_ids, f"mrr@{k}"].tolist() == pytest.approx([values[q] for q in query_ids], abs=1e-12)
    # the runs exercise hits at rank 1, later hits and misses
    assert (ours["mrr@10"] == 1).any() and ((ours["mrr@10"] > 0) & (ours["mrr@10"] < 1)).any()
    assert (ours["mrr@10"] == 0).any()
