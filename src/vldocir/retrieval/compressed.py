"""Compressed and indexed late-interaction search: fewer page vectors, fewer bytes per vector, and
a centroid index that picks the pages exact MaxSim rescores. An option of the embedding retriever's
search (``setting=compressed``), like hierarchical retrieval; each configuration is its own run.

Three independent knobs, built once per page store into one cached artifact
(:class:`CompressedSearch`; the key holds the page store and every knob):

- ``pool_factor``: colpali-engine's :class:`HierarchicalTokenPooler` merges each page's tokens
  into at most ``len // pool_factor`` cluster means (Ward linkage on cosine distance); 1 keeps
  every token. Pages of one token are kept as they are.
- ``codec``: how each stored vector is coded, a faiss ``index_factory`` string used through its
  standalone codec interface (``sa_encode`` / ``sa_decode``): ``SQ8`` (8 bits a dimension, a range
  trained per dimension), ``SQ4``, ``PQ32x8`` (32 bytes a vector), ... ``float16`` stores the
  vectors as the page store does. The codec is trained on a sample of (pooled) page tokens.
- ``n_centroids``: 0 scores every page (exhaustive MaxSim over the decoded vectors). Otherwise a
  PLAID-style index: spherical k-means centroids of the page tokens (faiss), each token assigned
  to its nearest one; a page is stored as the set of its tokens' centroids (its bag), and each
  centroid lists the pages holding it (an inverted list). A page's candidate score is PLAID's
  centroid interaction: for each query token the best score of a centroid of the page's bag,
  summed over the query's tokens (a lookup per bag entry instead of a dot product per token).
  ``nprobe`` 0 scores every page so; otherwise only the pages in the inverted lists of each query
  token's ``nprobe`` best centroids. The ``candidates`` best pages by that score are rescored by
  MaxSim over their decoded vectors, and the run is their top ``depth`` (ties by page index).

What the search costs and what it gives up against exact search over the same page embeddings is
measured by ``perf/bench_compressed.py`` (storage, time, memory, recall of exact top-k and the
RecallAll@k change); perf/README.md quotes it.

Integrity: the artifact's files are checksummed by the cache like every artifact; the build
streams the page store's shards (their checksums verified as they are read) and holds one
shard's tokens at a time, plus the training sample.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError, read_json
from vldocir.retrieval.embeddings import PageEmbeddingStore
from vldocir.retrieval.search import TopN, exact_search
from vldocir.retrieval.vectors import RaggedVectors

log = logging.getLogger(__name__)

FLOAT16 = "float16"
INDEX_FILE = "compressed.json"
PARSE_DIM = 3840
"""A dimension that every usual codec divides (2^8 x 3 x 5), to check a codec string before the page
dimension is known; the build checks it again with the real one."""


class CompressedSearch:
    """Token pooling, coded storage and a centroid index for the embedding retriever's search.

    Args:
        pool_factor: at most ``tokens // pool_factor`` vectors a page (1: all).
        codec: ``float16`` or a faiss ``index_factory`` codec (``SQ8``, ``SQ4``, ``PQ32x8``, ...).
        n_centroids: centroids of the index; 0 searches every page.
        nprobe: centroids probed per query token to choose the pages scored by centroid
            interaction; 0: every page.
        candidates: pages rescored per query (at least the run depth).
        train_tokens: page tokens sampled to train the centroids and the codec.
        kmeans_iterations: k-means iterations for the centroids.
        seed: for the sample and k-means.
        threads: scoring threads (0: ``torch.get_num_threads()``).
    """

    def __init__(
        self,
        pool_factor: int = 1,
        codec: str = FLOAT16,
        n_centroids: int = 0,
        nprobe: int = 0,
        candidates: int = 1024,
        train_tokens: int = 1 << 18,
        kmeans_iterations: int = 20,
        seed: int = 0,
        threads: int = 0,
    ):
        for name, value, low in (
            ("pool_factor", pool_factor, 1),
            ("n_centroids", n_centroids, 0),
            ("nprobe", nprobe, 0),
            ("candidates", candidates, 1),
            ("train_tokens", train_tokens, 1),
            ("kmeans_iterations", kmeans_iterations, 1),
            ("threads", threads, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if codec != FLOAT16:
            _codec_index(codec, PARSE_DIM)  # a string faiss cannot parse fails here, before any work
        self.pool_factor, self.codec, self.n_centroids = pool_factor, codec, n_centroids
        self.nprobe, self.candidates, self.train_tokens = nprobe, candidates, train_tokens
        self.kmeans_iterations, self.seed, self.threads = kmeans_iterations, seed, threads

    def build_params(self) -> dict[str, Any]:
        """What the artifact depends on (the search knobs nprobe and candidates are not in it)."""
        params: dict[str, Any] = {"pool_factor": self.pool_factor, "codec": self.codec, "seed": self.seed}
        if self.pool_factor > 1:
            params["pooler"] = "colpali_engine.HierarchicalTokenPooler"
        if self.n_centroids or self.codec != FLOAT16:
            params["train_tokens"] = self.train_tokens
        if self.n_centroids:
            params.update(n_centroids=self.n_centroids, kmeans_iterations=self.kmeans_iterations)
        return params

    def cache_params(self) -> dict[str, Any]:
        params = self.build_params()
        if self.n_centroids:
            params.update(nprobe=self.nprobe, candidates=self.candidates)
        return params

    def pages(
        self, store: PageEmbeddingStore, cache: ArtifactCache, progress: bool = True, stats: dict | None = None
    ) -> "CompressedPages":
        """Build (once) or load the compressed pages of ``store``."""
        parts = {"page_embeddings": store.directory.name, **self.build_params()}
        key = cache.key_for("compressed-pages", **parts)

        def verify(path: Path) -> None:
            meta = read_json(path / INDEX_FILE)
            if meta.get("n_pages") != store.n_pages:
                raise CorruptArtifactError(
                    path / INDEX_FILE, f"holds {meta.get('n_pages')} pages, the store {store.n_pages}"
                )

        path = cache.lookup("compressed-pages", key, verify=verify)
        if path is None:
            path = cache.directory("compressed-pages", key)
            with cache.build_once("compressed-pages", key, parts) as staging:
                if staging is None:
                    cache.check("compressed-pages", key, verify)
                else:
                    built = build_compressed(store.shards(full=True), store.n_pages, staging, self, progress=progress)
                    if stats is not None:
                        stats["build"] = built
        return CompressedPages.open(path)

    def search(
        self,
        queries: RaggedVectors,
        pages: "CompressedPages",
        depth: int,
        progress: bool = True,
        stats: dict | None = None,
    ) -> TopN:
        return compressed_search(
            queries, pages, depth, nprobe=self.nprobe, candidates=self.candidates, threads=self.threads,
            progress=progress, stats=stats,
        )  # fmt: skip


# -- codecs ------------------------------------------------------------------------------------


def _codec_index(codec: str, dim: int):
    import faiss

    try:
        return faiss.index_factory(dim, codec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1] if str(error).strip() else "unknown"
        raise ValueError(f"codec {codec!r} is not a faiss index_factory codec ({first})") from None


def code_size(codec: str, dim: int) -> int:
    """Bytes per stored vector."""
    return 2 * dim if codec == FLOAT16 else int(_codec_index(codec, dim).sa_code_size())


# -- token pooling -------------------------------------------------------------------------------


def pool_pages(pages: list[np.ndarray], pool_factor: int, threads: int = 1) -> list[np.ndarray]:
    """Each page's tokens pooled by colpali-engine's hierarchical token pooler (fp32 in and out).

    A page of one token (or none) cannot be clustered and is kept as it is.
    """
    if pool_factor == 1:
        return pages
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    pooler = HierarchicalTokenPooler()
    poolable = [i for i, page in enumerate(pages) if len(page) > 1]
    pooled = pooler.pool_embeddings(
        [torch.from_numpy(np.ascontiguousarray(pages[i], dtype=np.float32)) for i in poolable],
        pool_factor=pool_factor,
        num_workers=threads if threads > 1 else None,
    )
    out = list(pages)
    for i, vectors in zip(poolable, pooled):
        out[i] = vectors.numpy()
    return out


# -- the artifact --------------------------------------------------------------------------------


@dataclass
class CompressedPages:
    """The compressed pages, memory-mapped: ``codes`` (n_vectors, code size) uint8 (or float16
    vectors for ``codec=float16``) with ``offsets`` (n_pages + 1); with an index, ``centroids``
    (n_centroids, dim) fp32, the pages' bags ``bag_centroids`` (int32 centroid indices, ascending
    per page) cut by ``bag_offsets`` (n_pages + 1), and the inverted lists ``list_pages`` (int32 page
    indices, ascending per centroid) cut by ``list_offsets`` (n_centroids + 1)."""

    meta: dict
    codes: np.ndarray
    offsets: np.ndarray
    codec: Any
    centroids: np.ndarray | None
    bag_offsets: np.ndarray | None
    bag_centroids: np.ndarray | None
    list_offsets: np.ndarray | None
    list_pages: np.ndarray | None

    @classmethod
    def open(cls, path: Path) -> "CompressedPages":
        import faiss

        meta = read_json(path / INDEX_FILE)
        load = lambda name: np.load(path / name, mmap_mode="r")  # noqa: E731
        codec = None if meta["codec"] == FLOAT16 else faiss.read_index(str(path / "codec.faiss"))
        indexed = bool(meta.get("n_centroids"))
        return cls(
            meta,
            load("codes.npy"),
            np.asarray(load("offsets.npy")),
            codec,
            np.array(load("centroids.npy")) if indexed else None,  # small: in memory, writable for torch
            np.asarray(load("bag_offsets.npy")) if indexed else None,
            load("bag_centroids.npy") if indexed else None,
            np.asarray(load("list_offsets.npy")) if indexed else None,
            load("list_pages.npy") if indexed else None,
        )

    @property
    def n_pages(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def decode(self, rows: np.ndarray) -> torch.Tensor:
        """The given stored vectors as fp32, (len(rows), dim)."""
        codes = np.take(self.codes, rows, axis=0)
        if self.codec is None:
            return torch.from_numpy(codes).float()
        return torch.from_numpy(self.codec.sa_decode(codes))

    def decoded_shards(self, pages_per_shard: int = 1024) -> Iterable[RaggedVectors]:
        """Every page's decoded vectors, in shards for :func:`exact_search`."""
        for start in range(0, self.n_pages, pages_per_shard):
            stop = min(self.n_pages, start + pages_per_shard)
            first, last = int(self.offsets[start]), int(self.offsets[stop])
            vectors = self.decode(np.arange(first, last)).numpy()
            yield RaggedVectors(vectors, self.offsets[start : stop + 1] - first, first_index=start)


def build_compressed(
    shards: Iterable[RaggedVectors], n_pages: int, out: Path, settings: CompressedSearch, progress: bool = True
) -> dict:
    """Write the compressed pages of ``shards`` (the page store, in order) into ``out``; returns
    what the build did and cost. The shards are read twice when a codec or index is trained:
    once for the training sample, once to pool (again), code and assign."""
    import faiss

    tick = time.perf_counter()
    shards = list(shards)
    dim = next((s.dim for s in shards), 0)
    threads = settings.threads or torch.get_num_threads()
    trained = settings.codec != FLOAT16 or settings.n_centroids > 0
    rng = np.random.default_rng(settings.seed)
    codec = centroids = None
    pool_s = 0.0
    if trained:
        sample, pool_s = _training_sample(shards, settings, rng, threads, progress)
        if settings.codec != FLOAT16:
            codec = _codec_index(settings.codec, dim)
            codec.train(sample)
            faiss.write_index(codec, str(out / "codec.faiss"))
        if settings.n_centroids:
            n_centroids = min(settings.n_centroids, len(sample))
            kmeans = faiss.Kmeans(
                dim, n_centroids, niter=settings.kmeans_iterations, seed=settings.seed, spherical=True,
                max_points_per_centroid=max(256, -(-len(sample) // n_centroids)), verbose=False,
            )  # fmt: skip
            kmeans.train(sample)
            centroids = np.ascontiguousarray(kmeans.centroids, dtype=np.float32)
            assigner = faiss.IndexFlatIP(dim)
            assigner.add(centroids)
        del sample
    train_s = time.perf_counter() - tick

    size = code_size(settings.codec, dim)
    offsets = np.zeros(n_pages + 1, dtype=np.int64)
    total = 0
    parts = []  # per shard: (first page, lengths, codes file rows) written to a growing file
    codes_path = out / "codes.part"
    page_centroids: list[np.ndarray] = []  # (page, centroid) pairs, deduplicated per shard
    with open(codes_path, "wb") as codes_file:
        for shard in tqdm(shards, desc="compress pages", unit="shard", disable=not progress):
            pages = [shard.fp32(slice(int(a), int(b))).numpy() for a, b in zip(shard.offsets[:-1], shard.offsets[1:])]
            t0 = time.perf_counter()
            pages = pool_pages(pages, settings.pool_factor, threads)
            pool_s += time.perf_counter() - t0
            lengths = np.array([len(p) for p in pages], dtype=np.int64)
            vectors = np.concatenate(pages) if lengths.sum() else np.zeros((0, dim), np.float32)
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            stored = vectors.astype(np.float16) if codec is None else codec.sa_encode(vectors)
            codes_file.write(np.ascontiguousarray(stored).tobytes())
            first = shard.first_index
            offsets[first + 1 : first + len(shard) + 1] = total + np.cumsum(lengths)
            total += int(lengths.sum())
            if centroids is not None and len(vectors):
                _, nearest = assigner.search(vectors, 1)
                pairs = np.unique(
                    np.repeat(np.arange(first, first + len(shard)), lengths) * len(centroids) + nearest[:, 0]
                )
                page_centroids.append(pairs)
            parts.append(first)
    codes_dtype = np.float16 if codec is None else np.uint8
    width = dim if codec is None else size
    codes = (
        np.memmap(codes_path, dtype=codes_dtype, mode="r", shape=(total, width))
        if total
        else np.zeros((0, width), codes_dtype)
    )
    np.save(out / "codes.npy", codes)
    del codes
    codes_path.unlink()
    np.save(out / "offsets.npy", offsets)
    meta = {
        **settings.build_params(),
        "dim": dim,
        "n_pages": n_pages,
        "n_vectors": total,
        "code_bytes": size,
    }
    if centroids is not None:
        pairs = np.concatenate(page_centroids) if page_centroids else np.zeros(0, np.int64)
        pages_of, centroid_of = np.divmod(pairs, len(centroids))  # by page, then centroid (np.unique sorted)
        bag_offsets = np.zeros(n_pages + 1, dtype=np.int64)
        np.cumsum(np.bincount(pages_of, minlength=n_pages), out=bag_offsets[1:])
        order = np.lexsort((pages_of, centroid_of))  # by centroid, then page: each list ascends
        list_offsets = np.zeros(len(centroids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(centroid_of, minlength=len(centroids)), out=list_offsets[1:])
        np.save(out / "centroids.npy", centroids)
        np.save(out / "bag_offsets.npy", bag_offsets)
        np.save(out / "bag_centroids.npy", centroid_of.astype(np.int32))
        np.save(out / "list_offsets.npy", list_offsets)
        np.save(out / "list_pages.npy", pages_of[order].astype(np.int32))
        meta.update(n_centroids=len(centroids), list_entries=int(len(pairs)))
    meta["bytes"] = sum(p.stat().st_size for p in out.iterdir())
    (out / INDEX_FILE).write_text(json.dumps(meta, indent=2))
    return {
        "build_s": round(time.perf_counter() - tick, 3),
        "train_s": round(train_s, 3),
        "pool_s": round(pool_s, 3),
        "bytes": meta["bytes"],
        "vectors": total,
    }


def _training_sample(shards, settings: CompressedSearch, rng, threads: int, progress: bool) -> tuple[np.ndarray, float]:
    """About ``train_tokens`` (pooled) page tokens, drawn from every shard in proportion to its
    tokens; (sample, seconds spent pooling)."""
    total = sum(len(s.vectors) for s in shards)
    fraction = min(1.0, settings.pool_factor * settings.train_tokens / max(total, 1))
    picked, pool_s = [], 0.0
    for shard in tqdm(shards, desc="training sample", unit="shard", disable=not progress):
        n_pages = len(shard)
        chosen = np.flatnonzero(rng.random(n_pages) < fraction) if fraction < 1 else np.arange(n_pages)
        if not len(chosen):
            continue
        pages = [shard.fp32(slice(int(shard.offsets[i]), int(shard.offsets[i + 1]))).numpy() for i in chosen]
        t0 = time.perf_counter()
        pages = pool_pages(pages, settings.pool_factor, threads)
        pool_s += time.perf_counter() - t0
        picked += [p for p in pages if len(p)]
    sample = np.ascontiguousarray(np.concatenate(picked), dtype=np.float32) if picked else np.zeros((0, 0), np.float32)
    if len(sample) > settings.train_tokens:
        sample = sample[np.sort(rng.choice(len(sample), settings.train_tokens, replace=False))]
    return sample, pool_s


# -- search --------------------------------------------------------------------------------------

PROBE_SCORES = 1 << 22
"""The most (query token x page) candidate scores held at once: 16 MB of fp32 (queries are taken
together while their tokens times the pages fit)."""


def compressed_search(
    queries: RaggedVectors,
    pages: CompressedPages,
    depth: int,
    *,
    nprobe: int = 0,
    candidates: int = 1024,
    threads: int = 0,
    progress: bool = True,
    stats: dict | None = None,
) -> TopN:
    """The top ``depth`` pages per query by MaxSim over the compressed pages: every page without an
    index, else the ``candidates`` best of the centroid index (see the module notes).

    ``stats`` gets ``scored_vectors`` (page vectors scored per query, mean) for the cost accounting.
    """
    if pages.centroids is None:
        top = exact_search(
            queries, pages.decoded_shards(), depth, total_items=pages.n_pages, device="cpu", progress=progress
        )
        if stats is not None:
            stats.update(scored_vectors=int(pages.meta["n_vectors"]), candidates=pages.n_pages)
        return top
    n_queries = len(queries)
    candidates = max(candidates, depth)
    indices = np.full((n_queries, depth), -1, dtype=np.int64)
    values = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    bag_starts = pages.bag_offsets[:-1]
    has_bag = np.diff(pages.bag_offsets) > 0
    threads = threads or torch.get_num_threads()
    scored = np.zeros(n_queries, dtype=np.int64)

    def one(q: int) -> None:
        tokens = queries.fp32(slice(int(queries.offsets[q]), int(queries.offsets[q + 1])))
        if not len(tokens):
            return
        pool = _candidates(tokens, pages, nprobe, candidates, bag_starts, has_bag)
        rows, width = RaggedVectors(pages.codes, pages.offsets).padded_rows(pool)
        scores = torch.empty(len(pool))
        step = max(1, RESCORE_VECTORS // width)  # pages decoded and scored while they are in cache
        for p0 in range(0, len(pool), step):
            p1 = min(len(pool), p0 + step)
            vectors = pages.decode(rows[p0 * width : p1 * width])
            sims = (tokens @ vectors.T).view(len(tokens), p1 - p0, width)
            scores[p0:p1] = sims.amax(dim=2).sum(dim=0)
        empty = torch.from_numpy(np.diff(pages.offsets)[pool] == 0)
        scores[empty] = float("-inf")
        order = torch.sort(scores, descending=True, stable=True).indices[:depth].numpy()  # pool ascends: ties by page
        kept = scores.numpy()[order]
        valid = np.isfinite(kept)
        indices[q, : len(order)] = np.where(valid, pool[order], -1)
        values[q, : len(order)] = kept
        scored[q] = len(rows)

    def run(chunk: np.ndarray) -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            for q in chunk:
                one(int(q))
                bar.update(1)

    bar = tqdm(total=n_queries, desc="indexed search", unit="query", disable=not progress)
    saved = torch.get_num_threads()
    try:
        chunks = np.array_split(np.arange(n_queries), max(1, min(n_queries, threads * 8)))
        if threads > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="indexed") as pool_:
                list(pool_.map(run, chunks))
        else:
            run(np.arange(n_queries))
    finally:
        torch.set_num_threads(saved)
        bar.close()
    if stats is not None:
        stats.update(scored_vectors=float(scored.mean()) if n_queries else 0.0, candidates=candidates)
    return TopN(indices, values)


RESCORE_VECTORS = 1 << 12
"""Candidate page vectors decoded and scored in one step: 2 MB of fp32 at dim 128, kept in cache
between the decode, the product and the max."""

CANDIDATE_LOOKUPS = 1 << 20
"""Centroid-interaction lookups (query tokens x bag entries) per step: 4 MB of fp32 in cache."""


def _candidates(
    tokens: torch.Tensor,
    pages: CompressedPages,
    nprobe: int,
    candidates: int,
    bag_starts: np.ndarray,
    has_bag: np.ndarray,
) -> np.ndarray:
    """The ``candidates`` best pages of one query by centroid interaction, ascending page index."""
    centroid_scores = torch.from_numpy(pages.centroids) @ tokens.T  # (centroids, query tokens): an entry reads a row
    if nprobe:
        probed = torch.topk(centroid_scores, min(nprobe, len(centroid_scores)), dim=0).indices
        chosen = np.zeros(pages.n_pages, dtype=bool)
        for centroid in np.unique(probed.numpy()):
            chosen[pages.list_pages[pages.list_offsets[centroid] : pages.list_offsets[centroid + 1]]] = True
        scored = np.flatnonzero(chosen & has_bag)
    else:
        scored = np.flatnonzero(has_bag)
    approximate = torch.empty(len(scored))
    bag_lengths = np.diff(pages.bag_offsets)
    step = max(1, CANDIDATE_LOOKUPS // max(1, len(tokens)))
    ends = pages.bag_offsets[scored + 1]
    begin = 0
    while begin < len(scored):  # the pages whose bag entries fit one step (at least one page)
        end = max(begin + 1, int(np.searchsorted(ends, bag_starts[scored[begin]] + step, side="right")))
        part = scored[begin:end]
        if nprobe:
            rows = np.concatenate([np.arange(a, b) for a, b in zip(bag_starts[part], pages.bag_offsets[part + 1])])
        else:  # consecutive pages: their bags are one slice
            rows = slice(int(bag_starts[part[0]]), int(pages.bag_offsets[part[-1] + 1]))
        entries = torch.from_numpy(np.asarray(pages.bag_centroids[rows], dtype=np.int64))
        lengths = torch.from_numpy(bag_lengths[part])
        best = torch.segment_reduce(centroid_scores[entries], "max", lengths=lengths, axis=0)
        approximate[begin:end] = best.sum(dim=1)
        begin = end
    approximate = approximate.numpy()
    k = min(candidates, len(scored))
    best = np.argpartition(-approximate, k - 1)[:k] if 0 < k < len(scored) else np.arange(len(scored))
    return np.sort(scored[best])
