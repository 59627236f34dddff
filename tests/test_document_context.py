"""Document-context scoring (setting=ctx, paper Eq. 8): context vectors, exact scores, caching."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

from helpers import evaluate, tiny_overrides
from test_search import shard, stored_fp32
from vldocir.errors import ConfigError
from vldocir.retrieval.context import DocumentContextVectors, spherical_kmeans
from vldocir.retrieval.search import exact_search
from vldocir.retrieval.vectors import RaggedVectors

score_multi_vector = BaseVisualRetrieverProcessor.score_multi_vector


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_spherical_kmeans_gives_unit_centroids_deterministically():
    rng = np.random.default_rng(0)
    tokens = unit(rng.standard_normal((600, 16)))
    centroids = spherical_kmeans(tokens, 8, iterations=10, seed=3)
    assert centroids.shape == (8, 16)
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(centroids, spherical_kmeans(tokens, 8, iterations=10, seed=3))
    # Clustering beats 8 arbitrary tokens at covering the document: higher mean best cosine.
    assert (tokens @ centroids.T).max(1).mean() > (tokens @ tokens[:8].T).max(1).mean()
    few = unit(rng.standard_normal((5, 16)))
    np.testing.assert_allclose(spherical_kmeans(few, 8, iterations=10, seed=3), few, atol=1e-6)


def test_context_scores_equal_page_maxsim_plus_document_maxsim():
    rng = np.random.default_rng(1)
    pages_per_doc = [3, 1, 5, 2, 4, 2, 6, 1]
    doc_of_page = np.repeat(np.arange(len(pages_per_doc)), pages_per_doc)
    pages = [unit(rng.standard_normal((int(rng.integers(6, 20)), 24))) for _ in doc_of_page]
    stored_pages = stored_fp32(pages, "float16")
    contexts = [spherical_kmeans(np.concatenate([p.numpy() for p, d in zip(stored_pages, doc_of_page) if d == doc]), 4, 10, 0)
                for doc in range(len(pages_per_doc))]
    context = DocumentContextVectors(RaggedVectors.from_list(contexts), [f"d{i}" for i in range(len(contexts))], doc_of_page)
    queries = [unit(rng.standard_normal((int(rng.integers(3, 9)), 24))) for _ in range(13)]

    top = exact_search(RaggedVectors.from_list(queries), shard(pages, 5), depth=len(pages), context=context.for_shard,
                       query_batch_size=4, page_block_tokens=40, device="cpu", progress=False)

    qs = [torch.from_numpy(q) for q in queries]
    page_scores = torch.cat([score_multi_vector(qs, [p], device="cpu") for p in stored_pages], dim=1)
    doc_scores = torch.cat([score_multi_vector(qs, [torch.from_numpy(c)], device="cpu") for c in contexts], dim=1)
    reference = page_scores + doc_scores[:, torch.from_numpy(doc_of_page)]
    order = torch.sort(reference, dim=1, descending=True, stable=True).indices
    np.testing.assert_array_equal(top.indices, order.numpy())
    np.testing.assert_allclose(top.scores, reference.gather(1, order).numpy(), rtol=1e-5, atol=1e-4)


def test_ctx_on_a_text_retriever_says_what_it_needs(subset_dir, isolated_paths):
    with pytest.raises(ConfigError, match=r"setting ctx-n4 scores pages .* retriever dom_bm25 \(BM25Retriever\) has none"):
        evaluate("setting=ctx", "n_ctx=4", f"dataset.source={subset_dir}")


@pytest.mark.slow
def test_ctx_end_to_end_builds_context_vectors_once_per_n_ctx(subset_dir, tiny, isolated_paths):
    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "setting=ctx"]

    def events(manifest, kind):
        return [e["status"] for e in manifest["cache"] if e["kind"] == kind]

    metrics, manifest, run_dir = evaluate(*common, "n_ctx=4")
    assert run_dir.parent.name == "ctx-n4" and metrics["n_queries"] == 21
    assert manifest["retrieval"]["doc_context"] == {"n_ctx": 4, "documents": 3, "build_s": manifest["retrieval"]["doc_context"]["build_s"]}
    assert events(manifest, "doc-context") == ["miss"]

    _, manifest, _ = evaluate(*common, "n_ctx=8")
    assert events(manifest, "page-embeddings") == ["hit"] and events(manifest, "doc-context") == ["miss"]

    _, manifest, ctx_dir = evaluate(*common, "n_ctx=4", "depth=10")
    assert events(manifest, "page-embeddings") == ["hit"] and events(manifest, "doc-context") == ["hit"]
    assert len(list((isolated_paths / "cache" / "doc-context").glob("[!.]*"))) == 2

    # The document term moves pages of the best-matching document up: the rankings differ.
    _, _, base_dir = evaluate(*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "depth=10")
    base_run = pq.read_table(base_dir / "run.parquet").to_pandas()
    ctx_run = pq.read_table(ctx_dir / "run.parquet").to_pandas()
    assert len(base_run) == len(ctx_run) == 21 * 10
    assert not base_run[["query_id", "page_id"]].equals(ctx_run[["query_id", "page_id"]])
