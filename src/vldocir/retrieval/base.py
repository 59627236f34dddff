"""The retriever interface (STYLE.md #7): a retriever turns a benchmark into a run.

A retriever is built by Hydra from ``conf/retriever/<name>.yaml`` (``_target_`` + arguments).
``cache_params`` lists exactly what changes its artifacts, so the artifact cache can key on them
(batch sizes and devices are left out on purpose: they do not change results).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import pyarrow as pa

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark


class Retriever(ABC):
    @abstractmethod
    def cache_params(self) -> dict[str, Any]:
        """Everything that changes this retriever's indexes, embeddings or scores."""

    @abstractmethod
    def retrieve(self, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache) -> pa.Table:
        """Return the top ``depth`` pages for each query (``query_id -> text``) as a run table.

        Indexes and embeddings go through ``cache``, keyed by ``bench.fingerprint`` and
        :meth:`cache_params`, so that they are computed once.
        """
