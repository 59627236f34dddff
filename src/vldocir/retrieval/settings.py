"""Retrieval settings: how a retriever's scores become the evaluated run (paper §4.2).

A setting maps a retriever (and, for combinations, other runs) to one run. ``Base`` is the
retriever's own ranking; ``DocumentContext`` adds document-context scoring (paper Eq. 8).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import pyarrow as pa

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.base import Retriever


class Setting(ABC):
    @abstractmethod
    def cache_params(self) -> dict[str, Any]:
        """Everything about the setting that changes the run."""

    @abstractmethod
    def apply(
        self, retriever: Retriever, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache
    ) -> pa.Table: ...


class Base(Setting):
    """The retriever's own top-N."""

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "base"}

    def apply(self, retriever, bench, queries, depth, cache):
        return retriever.retrieve(bench, queries, depth, cache)


class DocumentContext(Setting):
    """Page MaxSim plus the MaxSim of the query against its document's ``n_ctx`` context vectors.

    Paper Eq. 8: s(q, p, d) = s_page(q, p) + s_doc(q, d), where the document's context vectors are
    spherical k-means centroids of all its page token vectors (:mod:`vldocir.retrieval.context`).
    Needs an embedding retriever; reuses its page embeddings, builds the context vectors once per
    ``n_ctx`` and searches exactly.

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
        return {"setting": "ctx", "n_ctx": self.n_ctx, "kmeans_iterations": self.kmeans_iterations, "seed": self.seed}

    def vectors(self, store, bench, cache, progress: bool = True, stats: dict | None = None):
        from vldocir.retrieval.context import document_context_vectors

        return document_context_vectors(store, bench, cache, self.n_ctx, self.kmeans_iterations, self.seed,
                                        progress=progress, stats=stats)

    def apply(self, retriever, bench, queries, depth, cache):
        from vldocir.retrieval.dense import EmbeddingRetriever

        if not isinstance(retriever, EmbeddingRetriever):
            raise ValueError(
                f"setting=ctx scores pages with document-context vectors built from page embeddings; "
                f"{type(retriever).__name__} has none (use an embedding retriever such as retriever=colqwen25)"
            )
        return retriever.retrieve(bench, queries, depth, cache, context=self)
