"""Embedding retrievers: an encoder + the sharded embedding store + exact search.

Every visual retriever of the paper and OCR-dense are this one class with a different encoder
(``conf/retriever/<name>.yaml``). Page embeddings are keyed by the benchmark fingerprint and the
encoder's cache parameters (model, commit, processor settings, dtype) plus the storage dtype,
so every setting, depth and k reuses them; query embeddings are keyed by the same plus the
query texts. The key holds a commit, never a branch name (a floating revision is resolved
first), so a hub update is never served old vectors; the store's store.json records it.

Integrity (see :mod:`vldocir.retrieval.embeddings`): every encode or search first checks every
shard cheaply and re-encodes damaged ones; query embeddings are checked in full and rebuilt when
damaged; page shards are checksummed as the search streams them. Damage found only then (a
checksum, or NaN/Inf in a block) stops the run with :class:`DamagedStoreError`, after dropping
the shard from the store so that the next run re-encodes it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from vldocir.cache import DONE_FILE, ArtifactCache, CorruptArtifactError, content_key
from vldocir.data.benchmark import Benchmark
from vldocir.data.runs import run_from_indices
from vldocir.errors import VldocirError
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.compressed import CompressedSearch
from vldocir.retrieval.context import DocumentContext
from vldocir.retrieval.embeddings import (
    RAGGED_FILES,
    BadPagesError,
    PageEmbeddingStore,
    PageInputs,
    encode_shards,
    finish_if_complete,
    open_page_store,
    read_json,
    read_ragged,
    verify_ragged,
    write_ragged,
)
from vldocir.retrieval.encoders import Encoder
from vldocir.retrieval.hierarchical import HierarchicalSearch
from vldocir.retrieval.search import NonFiniteVectorsError, exact_search, resolve_precision
from vldocir.retrieval.vectors import RaggedVectors, resolve_device

log = logging.getLogger(__name__)

BAD_PAGE_POLICIES = ("fail", "skip")
VERIFY_LEVELS = ("full", "cheap")


class DamagedStoreError(VldocirError, RuntimeError):
    """A cached artifact turned out damaged during the search; it has been dropped, a rerun rebuilds it."""


class IncompleteStoreError(VldocirError, RuntimeError):
    """The page store lacks shards that another job (a stage=encode task) was to write."""


def _gpu_seconds(device: str, seconds: float) -> float:
    return round(seconds, 3) if resolve_device(device).type == "cuda" else 0.0


class EmbeddingRetriever(Retriever):
    """Encode pages once into a sharded store, encode queries, exact top-N search.

    Args:
        encoder: the model (an :class:`~vldocir.retrieval.encoders.Encoder`).
        shard_size: pages per shard file (the unit of resumption and of job-array work).
        storage_dtype: ``float16`` or ``bfloat16`` for stored vectors.
        on_bad_page: ``fail`` (stop before search, listing undecodable pages) or ``skip``
            (leave them out of the ranking; recorded in the manifest).
        search: ``query_batch_size``, ``page_block_tokens``, ``device`` for :func:`exact_search`.
        decode_workers: threads decoding page images one batch ahead of the model.
        progress: show progress bars.
        verify: ``full`` (checksum every page shard as the search streams it, overlapped with the
            search of the previous shard) or ``cheap`` (sizes, headers and offsets only; NaN/Inf
            is still caught in the search). Does not change results, so not part of any key.
        context: document-context scoring (paper Eq. 8), a
            :class:`~vldocir.retrieval.context.DocumentContext`; ``setting=ctx`` sets it. ``None``:
            page scores alone.
        hierarchical: hierarchical retrieval (documents first, then their pages), a
            :class:`~vldocir.retrieval.hierarchical.HierarchicalSearch`; ``setting=hierarchical``
            sets it. ``None``: exhaustive search.
        compressed: compressed and indexed search (token pooling, coded vectors, a centroid index
            with MaxSim rescoring), a :class:`~vldocir.retrieval.compressed.CompressedSearch`;
            ``setting=compressed`` sets it. ``None``: exact search over the stored vectors.
    """

    def __init__(
        self,
        encoder: Encoder,
        shard_size: int = 1024,
        storage_dtype: str = "float16",
        on_bad_page: str = "fail",
        search: dict | None = None,
        decode_workers: int = 4,
        progress: bool = True,
        verify: str = "full",
        context: DocumentContext | None = None,
        hierarchical: HierarchicalSearch | None = None,
        compressed: CompressedSearch | None = None,
    ):
        if sum(x is not None for x in (context, hierarchical, compressed)) > 1:
            raise ValueError(
                "document-context scoring, hierarchical retrieval and compressed search are separate settings; "
                "set one of them"
            )
        if on_bad_page not in BAD_PAGE_POLICIES:
            raise ValueError(f"on_bad_page must be one of {BAD_PAGE_POLICIES}, got {on_bad_page!r}")
        if verify not in VERIFY_LEVELS:
            raise ValueError(f"verify must be one of {VERIFY_LEVELS}, got {verify!r}")
        self.verify = verify
        self.context, self.hierarchical, self.compressed = context, hierarchical, compressed
        self.encoder, self.shard_size, self.storage_dtype = encoder, shard_size, storage_dtype
        self.on_bad_page = on_bad_page
        self.search = dict(search or {})  # exact_search's keyword arguments; its defaults otherwise
        self.decode_workers, self.progress = decode_workers, progress
        self.stats: dict[str, Any] = {}

    def cache_params(self) -> dict[str, Any]:
        # on_bad_page changes the run (skipped pages are never retrieved); shard size does not.
        params = {
            "kind": self.encoder.kind,
            "encoder": self.encoder.cache_params(),
            "storage_dtype": self.storage_dtype,
            "on_bad_page": self.on_bad_page,
        }
        if self.context is not None:
            params["context"] = self.context.cache_params()
        if self.hierarchical is not None:
            params["hierarchical"] = self.hierarchical.cache_params()
        if self.compressed is not None:
            params["compressed"] = self.compressed.cache_params()
        if self.search.get("precision") == "bf16":  # rounds the stored fp16 vectors: other scores
            params["search_precision"] = "bf16"
        return params

    # -- pages ---------------------------------------------------------------------------------
    def _page_key_parts(self, bench: Benchmark) -> dict[str, Any]:
        return {
            "benchmark": bench.fingerprint,
            "encoder": self.encoder.cache_params(),
            "storage_dtype": self.storage_dtype,
        }

    def page_store(self, bench: Benchmark, cache: ArtifactCache) -> tuple[PageEmbeddingStore, PageInputs]:
        parts = self._page_key_parts(bench)
        key = cache.key_for("page-embeddings", **parts)
        inputs = PageInputs(bench, self.encoder.page_input)
        return open_page_store(cache, key, parts, inputs.page_ids, self.shard_size, self.storage_dtype), inputs

    def encode_pages(
        self, bench: Benchmark, cache: ArtifactCache, task: int = 0, num_tasks: int = 1
    ) -> PageEmbeddingStore:
        """Encode this task's shards (shard ``i`` belongs to task ``i % num_tasks``); resumable."""
        if not 0 <= task < num_tasks:
            raise ValueError(f"encode task {task} is outside 0..{num_tasks - 1}")
        store, inputs = self.page_store(bench, cache)
        overwrite = cache.policy == "overwrite"
        if not overwrite:  # cheap checks of every shard present; damaged ones are dropped and encoded again
            store.repair(full=False)
        if store.complete and not overwrite:
            cache.record("page-embeddings", store.directory.name, "hit")
            return store
        # The store's own claim says which job leads its encoding ("miss") and which help ("shared");
        # each shard is claimed on its own, so any number of jobs (a stage=encode array) share the work.
        # Its holder releases it only once the store is complete, hence the second look.
        claim = cache.leases.claim(f"page-embeddings/{store.directory.name}/store")
        if claim is not None and store.complete and not overwrite:
            claim.release()
            cache.record("page-embeddings", store.directory.name, "hit")
            return store
        if overwrite:
            (store.directory / "artifact.json").unlink(missing_ok=True)
        mine = [s for s in range(store.n_shards) if s % num_tasks == task]
        try:
            if overwrite or any(not store.has_shard(s) for s in mine):
                self.encoder.prepare()
            stats = encode_shards(
                store,
                inputs,
                self.encoder.encode_pages,
                mine,
                overwrite=overwrite,
                batch_size=self.encoder.batch_size,
                decode_workers=self.decode_workers,
                progress=self.progress,
                leases=cache.leases,
            )
            finish_if_complete(store, self._page_key_parts(bench))
        finally:
            if claim is not None:
                claim.release()
        status = "overwrite" if overwrite else "miss" if claim else "shared" if stats["shards_encoded"] else "hit"
        cache.record("page-embeddings", store.directory.name, status)
        stats.update(
            pages_per_s=round(stats["pages_encoded"] / stats["encode_s"], 3) if stats["encode_s"] else None,
            gpu_s=_gpu_seconds(self.encoder.device_name, stats["encode_s"]),
            encode_s=round(stats["encode_s"], 3),
        )
        self.stats["encode_pages"] = stats
        return store

    # -- queries -------------------------------------------------------------------------------
    def query_vectors(self, bench: Benchmark, queries: dict[str, str], cache: ArtifactCache) -> RaggedVectors:
        ids = list(queries)
        parts = {
            "encoder": self.encoder.cache_params(),
            "storage_dtype": self.storage_dtype,
            "queries": content_key([[q, queries[q]] for q in ids]),
        }
        key = cache.key_for("query-embeddings", **parts)

        def verify(path: Path) -> None:  # small: checked in full; the key covers ids, so they must match
            verify_ragged(path, full=True)
            if read_json(path / "query_ids.json") != ids:
                raise CorruptArtifactError(path / "query_ids.json", "differs from the requested query ids")

        path = cache.lookup("query-embeddings", key, verify=verify)
        if path is None:
            path = cache.directory("query-embeddings", key)
            with cache.build_once("query-embeddings", key, parts) as staging:
                if staging is None:  # another job encoded them while this one waited
                    cache.check("query-embeddings", key, verify)
                else:
                    self._encode_queries(staging, ids, [queries[q] for q in ids])
        return read_ragged(path)

    def _encode_queries(self, staging: Path, ids: list[str], texts: list[str]) -> None:
        self.encoder.prepare()
        tick = time.perf_counter()
        vectors = []
        step = self.encoder.query_batch_size
        for start in tqdm(range(0, len(texts), step), desc="encode queries", unit="batch", disable=not self.progress):
            vectors += self.encoder.encode_queries(texts[start : start + step])
        write_ragged(staging, vectors, self.storage_dtype, {})
        (staging / "query_ids.json").write_text(json.dumps(ids))
        elapsed = time.perf_counter() - tick
        self.stats["encode_queries"] = {
            "queries": len(ids),
            "encode_s": round(elapsed, 3),
            "gpu_s": _gpu_seconds(self.encoder.device_name, elapsed),
        }

    # -- retrieve ------------------------------------------------------------------------------
    def retrieve(self, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache) -> pa.Table:
        """The top ``depth`` pages per query; with ``self.context`` (setting=ctx), scored by paper Eq. 8."""
        context = self.context
        store = self.encode_pages(bench, cache)
        if not store.complete:
            missing = store.missing_shards()
            listed = f"{missing[:10]}{'...' if len(missing) > 10 else ''}"
            raise IncompleteStoreError(
                f"{store.directory}: shards {listed} are not encoded yet (stage=encode tasks "
                "still running or failed; rerun them, or run without stage=encode)"
            )
        bad = store.bad_pages()
        if bad:
            if self.on_bad_page == "fail":
                raise BadPagesError(bad, store.directory)
            log.warning("skipping %d undecodable page(s): %s", len(bad), ", ".join(b["page_id"] for b in bad[:10]))
            self.stats["skipped_pages"] = bad
        query_vectors = self.query_vectors(bench, queries, cache)
        context_vectors = None
        tick = time.perf_counter()
        try:
            if self.compressed is not None:
                self.stats["compressed"] = {}
                pages = self.compressed.pages(store, cache, self.progress, self.stats["compressed"])
                tick = time.perf_counter()
                top = self.compressed.search(query_vectors, pages, depth, self.progress, self.stats["compressed"])
                self.stats["compressed"].update(bytes=pages.meta["bytes"], vectors=pages.meta["n_vectors"])
            elif self.hierarchical is not None:
                doc_vectors, doc_of_item = self.hierarchical.document_vectors(
                    store, bench, cache, self.progress, self.stats
                )
                tick = time.perf_counter()
                self.stats["hierarchical"] = {}
                top = self.hierarchical.search(
                    query_vectors,
                    doc_vectors,
                    doc_of_item,
                    store.shards(full=self.verify == "full"),
                    depth,
                    n_items=store.n_pages,
                    progress=self.progress,
                    stats=self.stats["hierarchical"],
                    **self.search,
                )
            else:
                if context is not None:
                    context_vectors = context.vectors(store, bench, cache, progress=self.progress, stats=self.stats)
                    tick = time.perf_counter()
                top = exact_search(
                    query_vectors,
                    store.shards(full=self.verify == "full"),
                    depth,
                    total_items=store.n_pages,
                    progress=self.progress,
                    context=context_vectors.for_shard if context_vectors else None,
                    **self.search,
                )
        except (CorruptArtifactError, NonFiniteVectorsError) as error:
            raise _drop_damaged(store, cache, error) from error
        elapsed = time.perf_counter() - tick
        device = self.search.get("device", "auto")
        self.stats["search"] = {
            "search_s": round(elapsed, 3),
            "gpu_s": _gpu_seconds(device, elapsed),
            "device": str(resolve_device(device)),
            "precision": resolve_precision(self.search.get("precision", "auto"), resolve_device(device)),
            "queries": len(queries),
            "pages": store.n_pages,
        }
        self.stats["encoder"] = self.encoder.describe()
        self.stats["page_embeddings"] = {
            "dir": str(store.directory),
            "shards": store.n_shards,
            "shard_size": store.shard_size,
            "dtype": store.dtype,
        }

        return run_from_indices(list(queries), np.asarray(store.page_ids(), dtype=object), top.indices, top.scores)


def _drop_damaged(store: PageEmbeddingStore, cache: ArtifactCache, error: Exception) -> Exception:
    """Drop what ``error`` found damaged, so that the next run rebuilds it; the error to raise.

    A page shard is discarded (the store is marked incomplete; the next run re-encodes that
    shard only). Another cached artifact (query embeddings, document context) loses its
    ``artifact.json``, so the next run rebuilds it. Anything else is left alone.
    """
    if isinstance(error, NonFiniteVectorsError) and not error.source:
        return error  # vectors not read from the cache: nothing to drop
    path = Path(error.path if isinstance(error, CorruptArtifactError) else error.source)
    reason = error.reason if isinstance(error, CorruptArtifactError) else "the stored vectors hold NaN or Inf"
    shard = store.shard_of(path if path.name not in (*RAGGED_FILES, "shard.json") else path.parent)
    if shard is not None:
        store.discard_shard(shard, f"{path}: {reason}")
        action = (
            f"The shard was removed and the store {store.directory} marked incomplete; rerun the same command: "
            "it re-encodes this shard only and keeps the others."
        )
    else:
        artifact = path if (path / DONE_FILE).is_file() else path.parent
        if not ((artifact / DONE_FILE).is_file() and cache.root in artifact.parents):
            return error
        log.warning("damaged cached artifact %s (%s): marking it unfinished; it is rebuilt", artifact, reason)
        (artifact / DONE_FILE).unlink(missing_ok=True)
        action = f"The artifact {artifact} was marked unfinished; rerun the same command: it is rebuilt."
    return DamagedStoreError(f"{path}: {reason}. {action}")
