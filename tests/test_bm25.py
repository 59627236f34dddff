"""DOM-BM25 over the real bm25s index, through the artifact cache."""

from __future__ import annotations

import pytest

from vldocir.cache import ArtifactCache
from vldocir.retrieval.bm25 import BM25Retriever


def _fact_queries(bench, n=20):
    """Queries that copy a page's heading and first fact sentence: that page must come first."""
    pages = bench.pages.sample(n, random_state=0)
    queries = {f"probe-{row.page_id}": row.dom_text.split(". ")[0] for row in pages.itertuples()}
    return queries, {f"probe-{p}": p for p in pages.page_id}


def test_page_with_the_exact_fact_ranks_first(small_bench, tmp_path):
    queries, expected = _fact_queries(small_bench)
    run = BM25Retriever().retrieve(small_bench, queries, depth=10, cache=ArtifactCache(tmp_path))
    top = run.to_pandas().query("rank == 1").set_index("query_id")["page_id"]
    hits = sum(top.get(q) == page for q, page in expected.items())
    assert hits >= 0.9 * len(expected), f"only {hits}/{len(expected)} probe pages ranked first"


def test_run_is_ranked_and_deterministic(small_bench, tmp_path):
    queries = dict(zip(small_bench.queries.query_id, small_bench.queries.text))
    run = BM25Retriever().retrieve(small_bench, queries, depth=25, cache=ArtifactCache(tmp_path)).to_pandas()
    for _, group in run.groupby("query_id"):
        assert list(group["rank"]) == list(range(1, len(group) + 1))
        assert group["score"].is_monotonic_decreasing
        assert len(group) <= 25 and group["page_id"].is_unique
    again = BM25Retriever(query_batch_size=7).retrieve(small_bench, queries, depth=25, cache=ArtifactCache(tmp_path))
    assert again.to_pandas().equals(run), "results must not depend on the query batch size"


def test_index_is_built_once_per_key(small_bench, tmp_path):
    cache = ArtifactCache(tmp_path)
    queries = {"q": "population"}
    BM25Retriever().retrieve(small_bench, queries, 5, cache)
    BM25Retriever().retrieve(small_bench, queries, 5, cache)
    BM25Retriever(k1=0.9).retrieve(small_bench, queries, 5, cache)
    assert [e["status"] for e in cache.events] == ["miss", "hit", "miss"]
    assert len(list((tmp_path / "bm25-index").iterdir())) == 2
    overwrite = ArtifactCache(tmp_path, policy="overwrite")
    BM25Retriever().retrieve(small_bench, queries, 5, overwrite)
    assert overwrite.events[0]["status"] == "overwrite"


def test_missing_text_column_says_what_to_do(small_bench, tmp_path):
    with pytest.raises(ValueError, match="no 'ocr_text' for any page: run the OCR stage first"):
        BM25Retriever(text_field="ocr_text").retrieve(small_bench, {"q": "x"}, 5, ArtifactCache(tmp_path))


def test_query_without_known_terms_is_absent_from_the_run(small_bench, tmp_path):
    run = BM25Retriever().retrieve(small_bench, {"q": "qqqzzzxxy"}, 5, ArtifactCache(tmp_path))
    assert run.num_rows == 0
