"""``setting=doc_scope`` ranks every page of the query's document(s): the pages the input run did not
return (a retriever that ranks no other page, like BM25 without a query term on the page) are
appended in page order (page_index, then page_id) below the returned ones; a query whose input
was cut at ``input_depth`` gets nothing appended. Rankings and metrics by hand; then the pipeline
with DOM-BM25 on the graded two-language benchmark."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.test_scope_language import DOCS, QUERIES, write_graded_bench
from helpers import evaluate
from vldocir import store
from vldocir.evaluation.metrics import EvidenceIndex, per_query_metrics
from vldocir.retrieval.fusion import ranked_lists
from vldocir.retrieval.settings import DocumentScope, scope_to_documents

D4 = 1 / math.log2(5)  # discount at rank 4

# Document a: page ids whose string order is not their page order (a-10 sorts before a-2); b: two pages.
PAGE_INDEX = {"a-0": 0, "a-1": 1, "a-10": 10, "a-2": 2, "a-3": 3, "b-0": 0, "b-1": 1}
GRADES = {"far": {"a-1": 2, "a-10": 1}, "cross": {"a-3": 1, "b-1": 1}, "cut": {"a-0": 1}}


class Tables:
    """What scope_to_documents reads of a benchmark: ``arrow(table, columns)``."""

    def __init__(self):
        self.pages = pa.table(
            {
                "page_id": list(PAGE_INDEX),
                "doc_id": [p[0] for p in PAGE_INDEX],
                "page_index": pa.array(list(PAGE_INDEX.values()), pa.int32()),
            }
        )
        rows = [(q, p, p[0], g) for q, pages in GRADES.items() for p, g in pages.items()]
        self.qrels = pa.Table.from_pandas(pd.DataFrame(rows, columns=["query_id", "page_id", "doc_id", "grade"]))

    def arrow(self, name, columns):
        return getattr(self, name).select(list(columns))


def input_run() -> pa.Table:
    rows = [
        ("far", "a-10", 5.0),  # BM25-like: far's input returns two pages of a and one of b
        ("far", "b-0", 4.0),
        ("far", "a-3", 2.5),
        ("cross", "b-1", 3.0),  # cross's input returns one page of its two documents
        ("cut", "a-2", 9.0),  # cut's input holds input_depth = 4 rows: it was cut, nothing appended
        ("cut", "b-0", 8.0),
        ("cut", "a-1", 7.0),
        ("cut", "b-1", 6.0),
    ]
    q, p, s = zip(*rows, strict=True)
    return pa.table({"query_id": list(q), "page_id": list(p), "score": pa.array(s, pa.float32())})


def test_pages_not_returned_are_appended_in_page_order():
    run, stats, flags = scope_to_documents(input_run(), Tables(), 100, list(GRADES), input_depth=4)
    lists = ranked_lists(run)
    # far: a-10, a-3 returned (b-0 is outside its document), then a's other pages in page order
    assert lists["far"] == ["a-10", "a-3", "a-0", "a-1", "a-2"]
    # cross: b-1 returned, then a and b's other pages by page_index, ties by page_id (a-0 < b-0)
    assert lists["cross"] == ["b-1", "a-0", "b-0", "a-1", "a-2", "a-3", "a-10"]
    assert lists["cut"] == ["a-2", "a-1"]  # cut at the input depth: ranked down to the pages held
    scores = run.to_pandas().groupby("query_id")["score"].apply(list)
    assert scores["far"][2] < 2.5 and all(x > y for x, y in zip(scores["far"], scores["far"][1:], strict=False))
    assert stats["pages_appended"] == 3 + 6 and stats["queries_with_pages_appended"] == 2
    assert stats["note"] == "doc_scope: 9 pages the retriever did not return were appended in page order"
    assert stats["queries_cut"] == 1 and stats["fewest_pages_ranked_when_cut"] == 2
    assert flags["scope_pages"] == {"far": 5, "cross": 7, "cut": 5}
    assert flags["scope_pages_ranked"] == {"far": 2, "cross": 1, "cut": 2}
    assert flags["scope_pages_appended"] == {"far": 3, "cross": 6, "cut": 0}

    queries = pd.DataFrame(
        {
            "query_id": list(GRADES),
            "evidence_structure": ["doc_far", "cross_doc", "page_single"],
            "source": "wikipedia",
            "domain": "Arts",
            "generator": "gen",
            "evidence_types": [["text"]] * 3,
        }
    )
    index = EvidenceIndex.from_tables(queries, Tables().qrels.to_pandas(), Tables().pages.to_pandas())
    row = per_query_metrics(run, index, (3, 5)).set_index("query_id").loc["far"]
    # far: a-10 (grade 1) rank 1, a-1 (grade 2) rank 4. @3: DCG 1, IDCG 2 + 1/log2(3); @5: DCG 1 + 2 D4.
    assert row["recall@3"] == 0.5 and row["recallall@3"] == 0.0 and row["recallall@5"] == 1.0
    assert row["ndcg@3"] == pytest.approx(1 / (2 + 1 / math.log2(3)), abs=1e-12)
    assert row["ndcg@5"] == pytest.approx((1 + 2 * D4) / (2 + 1 / math.log2(3)), abs=1e-12)
    assert row["mrr@5"] == 1.0
    cross = per_query_metrics(run, index, (3, 5)).set_index("query_id").loc["cross"]
    assert cross["recall@5"] == 0.5 and cross["recall@3"] == 0.5  # a-3 only at rank 6


def test_stale_doc_scope_runs_are_not_reused():
    # the key of a run made before pages were appended ({"setting": "doc_scope", "scope": ...} alone) differs
    assert DocumentScope().cache_params() != {"setting": "doc_scope", "scope": "evidence_documents"}


def test_bm25_in_document_scope_ranks_every_page(isolated_paths):
    bench = write_graded_bench(isolated_paths / "graded")
    scoped = evaluate(f"dataset.source={bench}", "dataset.name=graded-two-lang", "setting=doc_scope")
    run = pq.read_table(scoped.entry / store.RUN_FILE).to_pandas()
    per_query = pq.read_table(scoped.entry / store.PER_QUERY_FILE).to_pandas().set_index("query_id")
    for query, (_, _, _, grades) in QUERIES.items():
        docs = {p[:2] for p, g in grades.items() if g > 0}
        ranked = run[run["query_id"] == query]
        assert set(ranked["page_id"]) == {f"{d}_p{i}" for d in docs for i in range(DOCS[d][2])}, query
        assert per_query.at[query, "recall@10"] == 1.0 or per_query.at[query, "scope_pages"] > 10
        appended = per_query.at[query, "scope_pages_appended"]
        assert appended == per_query.at[query, "scope_pages"] - per_query.at[query, "scope_pages_ranked"]
    stats = scoped.manifest["retrieval"]["doc_scope"]
    total = int(per_query["scope_pages_appended"].sum())
    assert stats["pages_appended"] == total > 0 and stats["queries_cut"] == 0
    assert stats["note"] == f"doc_scope: {total} pages the retriever did not return were appended in page order"
