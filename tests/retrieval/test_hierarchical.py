"""Hierarchical retrieval: documents first, then exact page MaxSim within each query's top documents.

Oracles: a brute-force numpy implementation (score every document, keep the top ones, score their
pages, sort), exhaustive exact search when every document is kept, and the pipeline end to end.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import SUBSET_PAGES, SUBSET_QUERIES, evaluate, tiny_overrides
from test_search import random_items, shard, stored_fp32
from vldocir.retrieval.hierarchical import (
    HierarchicalSearch,
    document_shards,
    hierarchical_search,
    pooled_page_vectors,
)
from vldocir.retrieval.search import exact_search
from vldocir.retrieval.vectors import RaggedVectors


def maxsim(query: np.ndarray, item: np.ndarray) -> float:
    return float((query @ item.T).max(axis=1).sum()) if len(item) else float("-inf")


def brute_force(queries, docs, pages, page_doc, top_docs, depth):
    """Per query: top_docs documents by MaxSim (ties by index), then their pages by MaxSim (ties by index)."""
    out = []
    for q in queries:
        doc_scores = np.array([maxsim(q, d) for d in docs], dtype=np.float32)
        kept = sorted(range(len(docs)), key=lambda d: (-doc_scores[d], d))[:top_docs]
        cands = [p for p in range(len(pages)) if page_doc[p] in kept]
        scores = {p: np.float32(maxsim(q, pages[p])) for p in cands}
        out.append(sorted(cands, key=lambda p: (-scores[p], p))[:depth])
    return out


def corpus(seed=0, n_docs=12, n_pages=90, dim=16):
    rng = np.random.default_rng(seed)
    pages = random_items(rng, n_pages, (3, 9), dim=dim)
    page_doc = np.sort(rng.integers(0, n_docs, n_pages))
    page_doc[:n_docs] = np.arange(n_docs)  # every document has a page
    page_doc = np.sort(page_doc)
    docs = random_items(rng, n_docs, (1, 5), dim=dim)
    queries = random_items(rng, 17, (2, 6), dim=dim)
    return queries, docs, pages, page_doc


@pytest.mark.parametrize("top_docs", [1, 3, 5])
def test_equals_brute_force(top_docs):
    queries, docs, pages, page_doc = corpus()
    pages_16 = stored_fp32(pages, "float16")  # the oracle sees the stored numbers
    stats = {}
    top = hierarchical_search(
        RaggedVectors.from_list(queries),
        RaggedVectors.from_list(docs),
        page_doc,
        shard(pages, 16),
        depth=10,
        top_docs=top_docs,
        n_items=len(pages),
        device="cpu",
        query_batch_size=4,
        page_block_tokens=40,
        progress=False,
        stats=stats,
    )
    expected = brute_force(queries, docs, [p.numpy() for p in pages_16], page_doc, top_docs, 10)
    for q, want in enumerate(expected):
        got = [int(i) for i in top.indices[q] if i >= 0]
        assert got == want, q
    assert 0 < stats["page_score_fraction"] < 1
    # one score per (query, page of a kept document): the pages of the documents the query kept
    kept_pages = 0
    for query in queries:
        doc_scores = np.array([maxsim(query, d) for d in docs], dtype=np.float32)
        kept = sorted(range(len(docs)), key=lambda d: (-doc_scores[d], d))[:top_docs]
        kept_pages += int(np.isin(page_doc, kept).sum())
    assert stats["page_scores"] == kept_pages
    assert stats["exhaustive_page_scores"] == len(queries) * len(pages)


def test_every_document_kept_is_exhaustive_search():
    queries, docs, pages, page_doc = corpus(seed=1)
    q = RaggedVectors.from_list(queries)
    stats = {}
    hier = hierarchical_search(
        q,
        RaggedVectors.from_list(docs),
        page_doc,
        shard(pages, 7),
        depth=25,
        top_docs=len(docs),
        n_items=len(pages),
        device="cpu",
        progress=False,
        stats=stats,
    )
    exact = exact_search(q, shard(pages, 7), 25, device="cpu", progress=False)
    np.testing.assert_array_equal(hier.indices, exact.indices)
    np.testing.assert_allclose(hier.scores, exact.scores, rtol=1e-6)
    assert stats["page_score_fraction"] == 1.0


def test_tiny_document_shards_and_candidate_folds_change_nothing():
    """Stage 1 on shards of 1 to 7 document vectors and stage 2 folding its candidates every few
    rows rank exactly as one shard and one final sort do, and as the brute force; the documents'
    pages interleave across page shards, so folds see page indices out of order."""
    queries, docs, pages, _ = corpus(seed=2)
    page_doc = np.random.default_rng(5).permutation(np.arange(len(pages)) % len(docs))
    q, d = RaggedVectors.from_list(queries), RaggedVectors.from_list(docs)
    args = dict(depth=4, top_docs=3, n_items=len(pages), device="cpu", query_batch_size=4, progress=False)
    whole = hierarchical_search(q, d, page_doc, shard(pages, 16), **args, doc_shard_tokens=10**9)
    for doc_tokens, rows in [(1, 1), (7, 1), (7, 30)]:
        streamed = hierarchical_search(
            q, d, page_doc, shard(pages, 16), **args, doc_shard_tokens=doc_tokens, candidate_rows=rows
        )
        np.testing.assert_array_equal(streamed.indices, whole.indices)
        np.testing.assert_array_equal(streamed.scores, whole.scores)
    pages_16 = [p.numpy() for p in stored_fp32(pages, "float16")]
    expected = brute_force(queries, docs, pages_16, page_doc, 3, 4)
    assert [[int(i) for i in row if i >= 0] for row in whole.indices] == expected


def test_document_shards_are_whole_documents_within_the_bound():
    rng = np.random.default_rng(4)
    docs = RaggedVectors.from_list(random_items(rng, 9, (1, 6), dim=4))
    assert docs.lengths.max() > 3 and (docs.lengths < 3).sum() >= 2  # both cases occur
    parts = list(document_shards(docs, 3))
    assert [p.first_index for p in parts] == list(np.cumsum([0] + [len(p) for p in parts[:-1]]))
    assert sum(len(p) for p in parts) == len(docs)
    for part in parts:  # at most 3 vectors, or one document longer than that
        assert len(part.vectors) <= 3 or (len(part) == 1 and len(part.vectors) > 3)
        for k in range(len(part)):
            np.testing.assert_array_equal(part.item(k), docs.item(part.first_index + k))
    with pytest.raises(ValueError, match="doc_shard_tokens must be >= 1"):
        list(document_shards(docs, 0))


def test_pooled_page_vectors_are_unit_means_per_document():
    rng = np.random.default_rng(3)
    pages = random_items(rng, 10, (2, 5), dim=8)
    page_doc = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 0])
    pooled = pooled_page_vectors(shard(pages, 4, dtype="float16"), page_doc, 3)
    stored = [p.numpy() for p in stored_fp32(pages, "float16")]
    for doc in range(3):
        members = np.flatnonzero(page_doc == doc)
        want = np.stack([stored[p].mean(0) / np.linalg.norm(stored[p].mean(0)) for p in members])
        np.testing.assert_allclose(pooled.subset(np.array([doc])).fp32().numpy(), want, rtol=1e-5, atol=1e-6)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="top_docs must be an integer >= 1"):
        HierarchicalSearch(top_docs=0, doc_vectors="pooled")
    with pytest.raises(ValueError, match="doc_vectors must be one of context, pooled"):
        HierarchicalSearch(doc_vectors="mean")
    with pytest.raises(ValueError, match="needs the document-context settings"):
        HierarchicalSearch(doc_vectors="context")


@pytest.mark.slow
@pytest.mark.parametrize("doc_vectors", ["context", "pooled"])
def test_end_to_end_records_the_fraction_of_page_scores(subset_dir, tiny, isolated_paths, doc_vectors):
    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "n_ctx=4"]
    exhaustive = evaluate(*common)
    hier = evaluate(
        *common,
        "setting=hierarchical",
        "retriever.model.hierarchical.top_docs=1",
        f"retriever.model.hierarchical.doc_vectors={doc_vectors}",
    )
    assert hier.entry.parent.name == ("hier-context-n4-d1" if doc_vectors == "context" else "hier-pooled-d1")
    stats = hier.manifest["retrieval"]["hierarchical"]
    assert stats["exhaustive_page_scores"] == SUBSET_QUERIES * SUBSET_PAGES and 0 < stats["page_score_fraction"] < 1
    # page embeddings and query embeddings are shared with the exhaustive run
    assert ("page-embeddings", "hit") in [(e["kind"], e["status"]) for e in hier.manifest["cache"]]
    run = hier.entry / "run.parquet"
    import pyarrow.parquet as pq

    frame = pq.read_table(run).to_pandas()
    pages = pq.read_table(subset_dir / "pages.parquet", columns=["page_id", "doc_id"]).to_pandas()
    docs_per_query = frame.merge(pages, on="page_id").groupby("query_id")["doc_id"].nunique()
    assert (docs_per_query == 1).all()  # top_docs=1: one document's pages per query
    assert exhaustive.metrics["n_queries"] == hier.metrics["n_queries"]
