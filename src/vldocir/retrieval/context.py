"""Document-context vectors (paper Eq. 8): ``n_ctx`` spherical k-means centroids per document.

For each document, the token vectors of all its pages (as the page-embedding store holds them,
L2-normalised) are clustered with faiss's spherical k-means into ``n_ctx`` unit centroids. A
document with at most ``n_ctx`` token vectors keeps the vectors themselves (the limit of k-means
with one point per cluster). The result is one cached artifact per (page store, n_ctx, k-means
settings), ``<cache>/doc-context/<key>/``, reused by every run and sweep point with that ``n_ctx``.

The page shards it is built from are verified in full (checksums) as they are read, and the
artifact itself is verified in full on every read (it is small: n_ctx vectors per document); a
damaged one is reported by path and rebuilt.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.embeddings import PageEmbeddingStore, read_json, read_ragged, verify_ragged, write_ragged
from vldocir.retrieval.vectors import RaggedVectors

log = logging.getLogger(__name__)


class DocumentContext:
    """Document-context scoring, an option of the embedding retriever's search (``setting=ctx``).

    Paper Eq. 8: s(q, p, d) = s_page(q, p) + s_doc(q, d), where s_doc is the MaxSim of the query
    against its document's ``n_ctx`` context vectors: spherical k-means centroids of all the
    document's page token vectors. Built once per (page store, n_ctx, k-means settings).

    Args:
        n_ctx: context vectors per document.
        kmeans_iterations, seed: spherical k-means settings (part of the cache key).
    """

    def __init__(self, n_ctx: int, kmeans_iterations: int = 20, seed: int = 0):
        for name, value, least in (("n_ctx", n_ctx, 1), ("kmeans_iterations", kmeans_iterations, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.n_ctx, self.kmeans_iterations, self.seed = n_ctx, kmeans_iterations, seed

    def cache_params(self) -> dict[str, Any]:
        return {"n_ctx": self.n_ctx, "kmeans_iterations": self.kmeans_iterations, "seed": self.seed}

    def vectors(self, store: PageEmbeddingStore, bench: Benchmark, cache: ArtifactCache, progress: bool = True,
                stats: dict | None = None) -> "DocumentContextVectors":
        return document_context_vectors(store, bench, cache, self.n_ctx, self.kmeans_iterations, self.seed,
                                        progress=progress, stats=stats)


@dataclass
class DocumentContextVectors:
    """Context vectors of every document, and which document each page (store order) belongs to."""

    vectors: RaggedVectors  # one item per document, in ``doc_ids`` order
    doc_ids: list[str]
    doc_of_page: np.ndarray  # (n_pages,) int64 positions in ``doc_ids``

    def for_shard(self, shard: RaggedVectors) -> tuple[RaggedVectors, np.ndarray]:
        """The context vectors of the shard's documents, and each page's position among them."""
        docs = self.doc_of_page[shard.first_index : shard.first_index + len(shard)]
        local, position = np.unique(docs, return_inverse=True)
        return self.vectors.subset(local), position


def spherical_kmeans(tokens: np.ndarray, n_ctx: int, iterations: int, seed: int) -> np.ndarray:
    """(n_tokens, dim) float32 -> (min(n_ctx, n_tokens), dim) unit-norm centroids."""
    tokens = np.ascontiguousarray(tokens, dtype=np.float32)
    norms = np.linalg.norm(tokens, axis=1, keepdims=True)
    tokens = tokens / np.where(norms > 0, norms, 1)
    if len(tokens) <= n_ctx:
        return tokens
    import faiss

    # Every token takes part (no subsampling) and no warning for few points per centroid.
    kmeans = faiss.Kmeans(tokens.shape[1], n_ctx, niter=iterations, spherical=True, seed=seed, verbose=False,
                          min_points_per_centroid=1, max_points_per_centroid=len(tokens))
    kmeans.train(tokens)
    return np.asarray(kmeans.centroids, dtype=np.float32)


def doc_of_page(bench: Benchmark, page_ids: list[str]) -> tuple[list[str], np.ndarray]:
    """Document ids (in order of first appearance) and each store page's document position."""
    pages = bench.arrow("pages", ["page_id", "doc_id"]).to_pandas()
    doc_by_page = dict(zip(pages["page_id"], pages["doc_id"]))
    docs = [doc_by_page[p] for p in page_ids]
    doc_ids = list(dict.fromkeys(docs))
    position = {d: i for i, d in enumerate(doc_ids)}
    return doc_ids, np.fromiter((position[d] for d in docs), dtype=np.int64, count=len(docs))


def document_context_vectors(
    store: PageEmbeddingStore, bench: Benchmark, cache: ArtifactCache, n_ctx: int, iterations: int, seed: int,
    progress: bool = True, stats: dict[str, Any] | None = None,
) -> DocumentContextVectors:
    """Build (once) or load the context vectors of every document of ``store``."""
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be at least 1, got {n_ctx}")
    page_ids = store.page_ids()
    doc_ids, page_doc = doc_of_page(bench, page_ids)
    parts = {"page_embeddings": store.directory.name, "n_ctx": n_ctx, "method": "faiss-spherical-kmeans",
             "iterations": iterations, "seed": seed}
    key = cache.key_for("doc-context", **parts)

    def verify(path) -> None:
        verify_ragged(path, full=True)
        if read_json(path / "doc_ids.json") != doc_ids:
            raise CorruptArtifactError(path / "doc_ids.json", "differs from the benchmark's document order")

    path = cache.lookup("doc-context", key, verify=verify)
    if path is None:
        tick = time.perf_counter()
        # Clustering reads every page token anyway: checksumming the shards as well costs little.
        shards = list(store.shards(full=True))
        first_of_shard = np.array([s.first_index for s in shards])
        pages_of_doc = np.split(np.argsort(page_doc, kind="stable"), np.cumsum(np.bincount(page_doc, minlength=len(doc_ids)))[:-1])
        contexts = []
        for pages in tqdm(pages_of_doc, desc=f"document context (n_ctx={n_ctx})", unit="doc", disable=not progress):
            # A document's pages may straddle shards: take each shard's part of them.
            in_shard = np.searchsorted(first_of_shard, pages, side="right") - 1
            tokens = np.concatenate([shards[s].subset(pages[in_shard == s] - shards[s].first_index).fp32().numpy()
                                     for s in np.unique(in_shard)])
            contexts.append(spherical_kmeans(tokens, n_ctx, iterations, seed))
        with cache.build("doc-context", key, parts) as staging:
            write_ragged(staging, contexts, store.dtype, {})
            (staging / "doc_ids.json").write_text(json.dumps(doc_ids))
        path = cache.directory("doc-context", key)
        if stats is not None:
            stats["doc_context"] = {"n_ctx": n_ctx, "documents": len(doc_ids), "build_s": round(time.perf_counter() - tick, 3)}
    return DocumentContextVectors(read_ragged(path), doc_ids, page_doc)
