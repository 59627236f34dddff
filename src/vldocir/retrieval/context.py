"""Document-context vectors (paper Eq. 8): ``n_ctx`` spherical k-means centroids per document.

For each document, the token vectors of all its pages (as the page-embedding store holds them,
L2-normalised) are clustered with faiss's spherical k-means into ``n_ctx`` unit centroids. A
document with at most ``n_ctx`` token vectors keeps the vectors themselves (the limit of k-means
with one point per cluster). The result is one cached artifact per (page store, n_ctx, k-means
settings), ``<cache>/doc-context/<key>/``, reused by every run and sweep point with that ``n_ctx``.

Building it at paper scale (29,641 documents, up to 1,024 vectors each: about 40 GB at n_ctx=1024)
takes hours and more memory than a machine has, so it is streamed, parallel and resumable:

- Flat memory. Every document's row count, min(n_ctx, its tokens), is known from the page shards'
  offsets, so ``offsets.npy`` is written first and ``vectors.npy`` preallocated; documents are
  clustered in chunks (those whose first page lies in one page shard) and each chunk's vectors
  are written to their rows as soon as it is done (:class:`~vldocir.retrieval.embeddings.RaggedWriter`).
  A chunk maps only the page shards it reads, and releases them when done.
- Parallel. ``workers`` processes (spawned) cluster chunks, each reading the page shards itself,
  with one OpenMP thread for faiss: a k-means of one document is too small for threads to pay
  (on a loaded 2-core machine two threads were 6-10x slower than one). k-means is seeded per
  document, so the vectors are bit for bit the same whatever the number of workers, and
  ``workers`` is no part of the key.
- Resumable. The build happens in ``<cache>/doc-context/.<key>.partial/``
  (:meth:`~vldocir.cache.ArtifactCache.build_in_parts`); each finished chunk is recorded in its
  ``chunks.jsonl`` (document range, sha256 of its rows, checksums of the page shards it read). A
  killed build continues with the chunks whose record still holds: rows unchanged and shards
  unchanged. Once every chunk is written, ``shard.json`` (sizes, checksums) is written and the
  directory published by one rename.

The page shards are verified in full (checksums) by the chunk that reads them, before reading
(a shard two chunks read is checked twice); the artifact itself is verified in full on every read
(it is small next to the page store: its files against ``artifact.json``, its vectors against its
``shard.json``, ``doc_ids.json`` against the benchmark's document order); a damaged one is reported
by path and rebuilt.

GPU. Nothing here uses one: the unit of work is :func:`_cluster_chunk`, and a GPU k-means
(faiss-gpu's ``Kmeans(gpu=True)``, or a batched torch k-means over a chunk's documents) would
replace it. It would not give the CPU's vectors bit for bit, so it would be another ``method`` of
the cache key, not a drop-in.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.embeddings import (
    CHECKSUM,
    PageEmbeddingStore,
    RaggedWriter,
    read_json,
    read_ragged,
    verify_ragged,
)
from vldocir.retrieval.vectors import RaggedVectors

log = logging.getLogger(__name__)

MIN_DOCS_PER_WORKER = 500
"""A worker process costs seconds to start: spawned, it imports the job's main module, torch,
pandas and faiss (7-8 CPU seconds on the 2-core development machine); at 0.03-0.05 s a document
(n_ctx 1024, 1,300 tokens), fewer documents than this each are clustered as fast in fewer
processes."""


class DocumentContext:
    """Document-context scoring, an option of the embedding retriever's search (``setting=ctx``).

    Paper Eq. 8: s(q, p, d) = s_page(q, p) + s_doc(q, d), where s_doc is the MaxSim of the query
    against its document's ``n_ctx`` context vectors: spherical k-means centroids of all the
    document's page token vectors. Built once per (page store, n_ctx, k-means settings).

    Args:
        n_ctx: context vectors per document.
        kmeans_iterations, seed: spherical k-means settings (part of the cache key).
        workers: processes clustering documents while the vectors are built, faiss on one thread
            in each; ``None``: the CPUs this process may use; 1: in this process. Not part of the
            key (the vectors are the same whatever it is). At most one per chunk and per
            ``MIN_DOCS_PER_WORKER`` documents left to cluster.
    """

    def __init__(self, n_ctx: int, kmeans_iterations: int = 20, seed: int = 0, workers: int | None = None):
        for name, value, least in (
            ("n_ctx", n_ctx, 1),
            ("kmeans_iterations", kmeans_iterations, 1),
            ("seed", seed, 0),
            ("workers", 1 if workers is None else workers, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.n_ctx, self.kmeans_iterations, self.seed, self.workers = n_ctx, kmeans_iterations, seed, workers

    def cache_params(self) -> dict[str, Any]:
        return {"n_ctx": self.n_ctx, "kmeans_iterations": self.kmeans_iterations, "seed": self.seed}

    def vectors(
        self,
        store: PageEmbeddingStore,
        bench: Benchmark,
        cache: ArtifactCache,
        progress: bool = True,
        stats: dict | None = None,
    ) -> DocumentContextVectors:
        doc_ids, page_doc = doc_of_page(bench, store.page_ids())
        return document_context_vectors(
            store,
            doc_ids,
            page_doc,
            cache,
            self.n_ctx,
            self.kmeans_iterations,
            self.seed,
            workers=self.workers,
            progress=progress,
            stats=stats,
        )


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
    kmeans = faiss.Kmeans(
        tokens.shape[1],
        n_ctx,
        niter=iterations,
        spherical=True,
        seed=seed,
        verbose=False,
        min_points_per_centroid=1,
        max_points_per_centroid=len(tokens),
    )
    kmeans.train(tokens)
    return np.asarray(kmeans.centroids, dtype=np.float32)


def doc_of_page(bench: Benchmark, page_ids: list[str]) -> tuple[list[str], np.ndarray]:
    """Document ids (in order of first appearance) and each store page's document position."""
    pages = bench.arrow("pages", ["page_id", "doc_id"]).to_pandas()
    doc_by_page = dict(zip(pages["page_id"], pages["doc_id"], strict=True))
    docs = [doc_by_page[p] for p in page_ids]
    doc_ids = list(dict.fromkeys(docs))
    position = {d: i for i, d in enumerate(doc_ids)}
    return doc_ids, np.fromiter((position[d] for d in docs), dtype=np.int64, count=len(docs))


def document_context_vectors(
    store: PageEmbeddingStore,
    doc_ids: list[str],
    page_doc: np.ndarray,
    cache: ArtifactCache,
    n_ctx: int,
    iterations: int,
    seed: int,
    *,
    workers: int | None = None,
    progress: bool = True,
    stats: dict[str, Any] | None = None,
) -> DocumentContextVectors:
    """Build (once, resuming a partial build) or load the context vectors of every document of ``store``.

    ``doc_ids`` gives the artifact's item order; ``page_doc`` (n_pages,) int64 is each store page's
    position in it (:func:`doc_of_page`). ``workers``: see :class:`DocumentContext`. ``stats``
    gets ``doc_context`` when the vectors are built here (not when read from the cache).
    """
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be at least 1, got {n_ctx}")
    parts = {
        "page_embeddings": store.directory.name,
        "n_ctx": n_ctx,
        "method": "faiss-spherical-kmeans",
        "iterations": iterations,
        "seed": seed,
    }
    key = cache.key_for("doc-context", **parts)

    def verify(path) -> None:
        verify_ragged(path, full=True)
        if read_json(path / "doc_ids.json") != doc_ids:
            raise CorruptArtifactError(path / "doc_ids.json", "differs from the benchmark's document order")

    path = cache.lookup("doc-context", key, verify=verify)
    if path is None:
        path = cache.directory("doc-context", key)
        with cache.build_in_parts("doc-context", key, parts) as partial:
            if partial is None:  # another job built it while this one waited
                cache.check("doc-context", key, verify)
            else:
                built = _build(partial, store, doc_ids, page_doc, n_ctx, iterations, seed, workers, progress)
                if stats is not None:
                    stats["doc_context"] = built
    return DocumentContextVectors(read_ragged(path), doc_ids, page_doc)


RECORD = "chunks.jsonl"
"""In a partial build: one line per finished chunk (its documents, the sha256 of its rows, the
recorded checksums of the page shards it read)."""


@dataclass(frozen=True, eq=False)
class _Chunk:
    """Documents ``first_doc:stop_doc``: those whose first page lies in one page shard."""

    first_doc: int
    stop_doc: int
    pages: tuple[np.ndarray, ...]  # per document, its pages' positions in the store, ascending
    shards: tuple[int, ...]  # the page shards holding them


def _build(
    partial: Path,
    store: PageEmbeddingStore,
    doc_ids: list[str],
    page_doc: np.ndarray,
    n_ctx: int,
    iterations: int,
    seed: int,
    workers: int | None,
    progress: bool,
) -> dict[str, Any]:
    """Fill ``partial`` with the artifact's files, skipping the chunks a previous build finished; returns stats."""
    tick = time.perf_counter()
    chunks, lengths, dim, shard_sums = _plan(store, page_doc, len(doc_ids), n_ctx)
    writer = RaggedWriter(partial, lengths, dim, store.dtype)
    finished = {chunk.first_doc for chunk in _finished_chunks(partial, writer, chunks, shard_sums)}
    todo = [chunk for chunk in chunks if chunk.first_doc not in finished]
    reused = len(doc_ids) - sum(chunk.stop_doc - chunk.first_doc for chunk in todo)
    if reused:
        log.info(
            "document context (n_ctx=%d): continuing a partial build, %d of %d documents already done",
            n_ctx,
            reused,
            len(doc_ids),
        )
    workers = max(1, min(workers or _available_cpus(), len(todo), (len(doc_ids) - reused) // MIN_DOCS_PER_WORKER))
    bar = tqdm(
        total=len(doc_ids), initial=reused, desc=f"document context (n_ctx={n_ctx})", unit="doc", disable=not progress
    )

    def write(chunk: _Chunk, vectors: list[np.ndarray]) -> None:
        digest = writer.write(chunk.first_doc, vectors, names=doc_ids[chunk.first_doc : chunk.stop_doc])
        record = {
            "docs": [chunk.first_doc, chunk.stop_doc],
            CHECKSUM: digest,
            "shards": [[shard, shard_sums[shard]] for shard in chunk.shards],
        }
        with open(partial / RECORD, "a") as handle:  # after the rows: a record always describes rows written
            handle.write(json.dumps(record) + "\n")
        bar.update(chunk.stop_doc - chunk.first_doc)

    _cluster(todo, store, n_ctx, iterations, seed, workers, write)
    bar.close()
    writer.finish({})
    (partial / "doc_ids.json").write_text(json.dumps(doc_ids))
    (partial / RECORD).unlink(missing_ok=True)
    elapsed = time.perf_counter() - tick
    clustered = len(doc_ids) - reused
    return {
        "n_ctx": n_ctx,
        "documents": len(doc_ids),
        "documents_clustered": clustered,
        "documents_reused": reused,
        "workers": workers,
        "build_s": round(elapsed, 3),
        "s_per_doc": round(elapsed / clustered, 5) if clustered else None,
    }


def _plan(
    store: PageEmbeddingStore, page_doc: np.ndarray, n_docs: int, n_ctx: int
) -> tuple[list[_Chunk], np.ndarray, int, list[str | None]]:
    """The chunks; each document's row count, min(n_ctx, its tokens), (n_docs,) int64; the
    vectors' dim; each page shard's vectors.npy checksum as recorded (``None`` for shards written
    before checksums were). Reads only the shards' small files (cheap checks included)."""
    page_tokens, shard_sums, dim = [], [], 0
    for shard in range(store.n_shards):
        directory = store.shard_dir(shard)
        meta = verify_ragged(directory)  # sizes, headers, offsets; the checksums when a chunk reads the shard
        page_tokens.append(np.diff(np.load(directory / "offsets.npy")))
        shard_sums.append(((meta.get("files") or {}).get("vectors.npy") or {}).get(CHECKSUM))
        if not dim and meta["n_tokens"]:
            dim = int(meta.get("dim") or np.load(directory / "vectors.npy", mmap_mode="r").shape[1])
    page_tokens = np.concatenate(page_tokens)
    if len(page_tokens) != len(page_doc):
        raise ValueError(f"{store.directory} holds {len(page_tokens)} pages; {len(page_doc)} were given a document")
    if not n_docs:
        return [], np.zeros(0, dtype=np.int64), dim, shard_sums
    doc_tokens = np.zeros(n_docs, dtype=np.int64)
    np.add.at(doc_tokens, page_doc, page_tokens)
    pages_per_doc = np.bincount(page_doc, minlength=n_docs)
    if (pages_per_doc == 0).any():
        raise ValueError(f"document {int(np.argmin(pages_per_doc))} has no page in {store.directory}")
    pages_of_doc = np.split(np.argsort(page_doc, kind="stable"), np.cumsum(pages_per_doc)[:-1])
    first_shard = np.array([pages[0] for pages in pages_of_doc]) // store.shard_size
    bounds = [0, *(np.flatnonzero(np.diff(first_shard)) + 1).tolist(), n_docs]
    chunks = []
    for first, stop in pairwise(bounds):
        pages = tuple(pages_of_doc[first:stop])
        shards = tuple(np.unique(np.concatenate(pages) // store.shard_size).tolist())
        chunks.append(_Chunk(first, stop, pages, shards))
    return chunks, np.minimum(doc_tokens, n_ctx), dim, shard_sums


def _finished_chunks(
    partial: Path, writer: RaggedWriter, chunks: list[_Chunk], shard_sums: list[str | None]
) -> list[_Chunk]:
    """The chunks a previous build of ``partial`` finished whose record still holds: the rows on
    disk have the recorded sha256, and the page shards they were built from are unchanged."""
    if not writer.resumed:  # a fresh (or unusable) partial: nothing in it counts
        (partial / RECORD).unlink(missing_ok=True)
        return []
    records = {}
    if (partial / RECORD).is_file():
        for line in (partial / RECORD).read_text().splitlines():
            try:
                record = json.loads(line)
                records[tuple(record["docs"])] = record
            except (ValueError, KeyError, TypeError):  # a line cut short by a kill
                continue
    finished = []
    for chunk in chunks:
        record = records.get((chunk.first_doc, chunk.stop_doc))
        sources = [[shard, shard_sums[shard]] for shard in chunk.shards]
        if (
            record
            and record.get("shards") == sources
            and None not in (s for _, s in sources)
            and record.get(CHECKSUM) == writer.digest(chunk.first_doc, chunk.stop_doc)
        ):
            finished.append(chunk)
    return finished


def _available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cluster(
    chunks: list[_Chunk],
    store: PageEmbeddingStore,
    n_ctx: int,
    iterations: int,
    seed: int,
    workers: int,
    done: Callable[[_Chunk, list[np.ndarray]], None],
) -> None:
    """Cluster every chunk, calling ``done(chunk, vectors)`` in this process as each finishes.

    ``workers`` 1: here, in order. More: that many spawned processes, at most two chunks queued
    per worker (so the vectors waiting to be written stay a few chunks' worth); the first failure
    cancels the queued chunks and is raised once the running ones end.
    """

    def task(chunk: _Chunk) -> tuple:
        shards = {shard: (str(store.shard_dir(shard)), store.shard_range(shard)[0]) for shard in chunk.shards}
        return shards, chunk.pages, n_ctx, iterations, seed

    if workers == 1:
        with _faiss_threads(1):
            for chunk in chunks:
                done(chunk, _cluster_chunk(*task(chunk)))
        return
    queue = iter(chunks)
    running: dict[Any, _Chunk] = {}
    with ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    ) as pool:
        try:
            while True:
                while len(running) < 2 * workers and (chunk := next(queue, None)) is not None:
                    running[pool.submit(_cluster_chunk, *task(chunk))] = chunk
                if not running:
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    done(running.pop(future), future.result())
        finally:
            for future in running:
                future.cancel()


def _cluster_chunk(
    shards: dict[int, tuple[str, int]], pages: tuple[np.ndarray, ...], n_ctx: int, iterations: int, seed: int
) -> list[np.ndarray]:
    """The context vectors of one chunk's documents: per document (min(n_ctx, n_tokens), dim) fp32.

    ``shards`` maps each page shard the documents' ``pages`` lie in to (its directory, its first
    page). Each is verified in full before it is read, memory-mapped, and unmapped on return.
    """
    opened = [read_ragged(Path(directory), first, full=True) for _, (directory, first) in sorted(shards.items())]
    firsts = np.array([shard.first_index for shard in opened])
    vectors = []
    for doc_pages in pages:
        # A document's pages may straddle shards: take each shard's part of them.
        in_shard = np.searchsorted(firsts, doc_pages, side="right") - 1
        tokens = np.concatenate(
            [
                opened[s].subset(doc_pages[in_shard == s] - opened[s].first_index).fp32().numpy()
                for s in np.unique(in_shard)
            ]
        )
        vectors.append(spherical_kmeans(tokens, n_ctx, iterations, seed))
    return vectors


def _init_worker() -> None:
    """One thread per worker process: the processes are the parallelism."""
    import faiss
    import torch

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)


@contextmanager
def _faiss_threads(threads: int) -> Iterator[None]:
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)
