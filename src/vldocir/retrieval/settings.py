"""Retrieval settings: how a retriever's scores become the evaluated run (paper §4.2).

A setting maps a retriever (and, for combinations, other runs) to one run. ``Base`` is the
retriever's own ranking; the others are declared here so that their configs compose now.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import pyarrow as pa

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.base import NotImplementedYet, Retriever


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
    """Page score plus the MaxSim of the query against its document's ``n_ctx`` context vectors."""

    def __init__(self, n_ctx: int):
        self.n_ctx = n_ctx
        raise NotImplementedYet("document-context scoring (setting=ctx)", "retrieval settings")

    def cache_params(self) -> dict[str, Any]:
        return {"setting": "ctx", "n_ctx": self.n_ctx}

    def apply(self, retriever, bench, queries, depth, cache):
        raise NotImplementedYet("document-context scoring (setting=ctx)", "retrieval settings")
