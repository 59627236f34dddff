"""Building the compressed pages of a page store, once per store and knobs
(:meth:`vldocir.retrieval.compressed.CompressedSearch.pages` caches the artifact): each page's tokens
pooled (:func:`pool_pages`), the codec and the centroid index trained on a sample of them, every
token coded and assigned to its centroid, the pages' bags and the centroids' inverted lists written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.retrieval.compressed.codecs import FLOAT16, MEAN_CODEC, code_size, codec_index
from vldocir.retrieval.compressed.pages import INDEX_FILE
from vldocir.retrieval.vectors import RaggedVectors

if TYPE_CHECKING:
    from vldocir.retrieval.compressed import CompressedSearch


RANGE_TRAIN_TOKENS = 1 << 16
"""Offsets a scalar quantizer's ranges are fitted on with ``coded=residuals``: faiss's ``RS_optim``
takes time superlinear in the sample (3.7 s for 2^16 tokens of 128 dimensions here, many minutes for
2^20), and a range per dimension needs no more."""


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
    for i, vectors in zip(poolable, pooled, strict=True):
        out[i] = vectors.numpy()
    return out


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
    if settings.codec != FLOAT16 and dim:
        codec_index(settings.codec, dim)  # a codec that cannot code this dimension fails before the training
    rng = np.random.default_rng(settings.seed)
    codec = centroids = assigner = mean_codec = None
    pool_s = 0.0
    if trained:
        sample_pages, pool_s = _training_pages(shards, settings, rng, threads, progress)
        sample = _token_sample(sample_pages, settings.train_tokens, rng)
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
        if settings.codec != FLOAT16:
            codec = codec_index(settings.codec, dim)
            if settings.residuals:
                mean_codec = codec_index(MEAN_CODEC, dim)
                offsets = _train_bag_means(sample_pages, assigner, mean_codec)
                n_sample = settings.train_tokens
                if hasattr(codec, "sq"):  # ranges that minimise the squared error, not the extremes
                    codec.sq.rangestat = faiss.ScalarQuantizer.RS_optim
                    n_sample = min(n_sample, RANGE_TRAIN_TOKENS)
                sample = _token_sample([offsets], n_sample, rng)
                faiss.write_index(mean_codec, str(out / "mean_codec.faiss"))
            codec.train(sample)
            faiss.write_index(codec, str(out / "codec.faiss"))
        del sample, sample_pages
    train_s = time.perf_counter() - tick

    size = code_size(settings.codec, dim)
    offsets = np.zeros(n_pages + 1, dtype=np.int64)
    total = 0
    page_centroids: list[np.ndarray] = []  # per shard: its bag entries as page * n_centroids + centroid, ascending
    token_counts: list[np.ndarray] = []  # per shard, with residuals: the tokens of each bag entry
    with (
        open(out / "codes.part", "wb") as codes_file,
        open(out / "mean_codes.part", "wb") if mean_codec else nullcontext() as means_file,
    ):
        for shard in tqdm(shards, desc="compress pages", unit="shard", disable=not progress):
            pages = [shard.fp32(slice(int(a), int(b))).numpy() for a, b in pairwise(shard.offsets)]
            t0 = time.perf_counter()
            pages = pool_pages(pages, settings.pool_factor, threads)
            pool_s += time.perf_counter() - t0
            lengths = np.array([len(p) for p in pages], dtype=np.int64)
            vectors = np.concatenate(pages) if lengths.sum() else np.zeros((0, dim), np.float32)
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            first = shard.first_index
            if centroids is not None and len(vectors):
                bags = _bags(vectors, lengths, assigner, first)
                page_centroids.append(bags.entries)
                if mean_codec is not None:
                    vectors = vectors[bags.order]  # each page's tokens in bag order
                    means = mean_codec.sa_encode(bags.means(vectors))
                    means_file.write(np.ascontiguousarray(means).tobytes())
                    vectors -= mean_codec.sa_decode(means)[bags.entry_of_token]
                    token_counts.append(bags.counts)
            stored = vectors.astype(np.float16) if codec is None else codec.sa_encode(vectors)
            codes_file.write(np.ascontiguousarray(stored).tobytes())
            offsets[first + 1 : first + len(shard) + 1] = total + np.cumsum(lengths)
            total += int(lengths.sum())
    _save_rows(out, "codes", total, (dim, np.float16) if codec is None else (size, np.uint8))
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
        pages_of, centroid_of = np.divmod(pairs, len(centroids))  # by page, then centroid
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
        meta.update(n_centroids=len(centroids), list_entries=len(pairs))
    if mean_codec is not None:
        _save_rows(out, "mean_codes", len(pairs), (int(mean_codec.sa_code_size()), np.uint8))
        bag_token_offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(np.concatenate(token_counts) if token_counts else [], out=bag_token_offsets[1:])
        np.save(out / "bag_token_offsets.npy", bag_token_offsets)
        meta["mean_code_bytes"] = int(mean_codec.sa_code_size())
    meta["bytes"] = sum(p.stat().st_size for p in out.iterdir())
    (out / INDEX_FILE).write_text(json.dumps(meta, indent=2))
    return {
        "build_s": round(time.perf_counter() - tick, 3),
        "train_s": round(train_s, 3),
        "pool_s": round(pool_s, 3),
        "bytes": meta["bytes"],
        "vectors": total,
    }


def _save_rows(out: Path, name: str, n_rows: int, row: tuple[int, Any]) -> None:
    """``<name>.part`` (rows written one after another) saved as ``<name>.npy`` of ``n_rows`` rows
    of ``row`` = (width, dtype); the part file is removed."""
    width, dtype = row
    part = out / f"{name}.part"
    data = np.memmap(part, dtype=dtype, mode="r", shape=(n_rows, width)) if n_rows else np.zeros((0, width), dtype)
    np.save(out / f"{name}.npy", data)
    del data
    part.unlink()


@dataclass
class _Bags:
    """The bag entries of some pages' tokens: ``entries`` (page * n_centroids + centroid,
    ascending), ``order`` (the tokens in bag order: by page, then centroid, stable), ``counts``
    (tokens of each entry) and ``entry_of_token`` (each token's entry, in bag order)."""

    entries: np.ndarray
    order: np.ndarray
    counts: np.ndarray
    entry_of_token: np.ndarray

    def means(self, ordered: np.ndarray) -> np.ndarray:
        """The mean of each entry's tokens, from the tokens in bag order."""
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        return np.add.reduceat(ordered, starts, axis=0) / self.counts[:, None].astype(np.float32)


def _bags(vectors: np.ndarray, lengths: np.ndarray, assigner, first_page: int = 0) -> _Bags:
    """The bag entries of the pages whose tokens are ``vectors`` (cut by ``lengths``)."""
    _, nearest = assigner.search(vectors, 1)
    keys = np.repeat(np.arange(first_page, first_page + len(lengths)), lengths) * assigner.ntotal + nearest[:, 0]
    order = np.argsort(keys, kind="stable")
    entries, entry_of_token, counts = np.unique(keys[order], return_inverse=True, return_counts=True)
    return _Bags(entries, order, counts, entry_of_token)


def _train_bag_means(pages: list[np.ndarray], assigner, mean_codec) -> np.ndarray:
    """Train ``mean_codec`` on the bag means of the sample ``pages``; returns the tokens' offsets
    from their (coded, then decoded) bag means, the training sample of the token codec."""
    lengths = np.array([len(p) for p in pages], dtype=np.int64)
    vectors = np.ascontiguousarray(np.concatenate(pages), dtype=np.float32)
    bags = _bags(vectors, lengths, assigner)
    ordered = vectors[bags.order]
    means = np.ascontiguousarray(bags.means(ordered), dtype=np.float32)
    mean_codec.train(means)
    return ordered - mean_codec.sa_decode(mean_codec.sa_encode(means))[bags.entry_of_token]


def _training_pages(
    shards, settings: CompressedSearch, rng, threads: int, progress: bool
) -> tuple[list[np.ndarray], float]:
    """Whole (pooled) pages holding about ``train_tokens`` tokens, drawn from every shard in
    proportion to its tokens; (pages, seconds spent pooling)."""
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
    return picked, pool_s


def _token_sample(pages: list[np.ndarray], n_tokens: int, rng) -> np.ndarray:
    """At most ``n_tokens`` tokens of ``pages``, drawn without replacement (all when fewer)."""
    sample = np.ascontiguousarray(np.concatenate(pages), dtype=np.float32) if pages else np.zeros((0, 0), np.float32)
    if len(sample) > n_tokens:
        sample = sample[np.sort(rng.choice(len(sample), n_tokens, replace=False))]
    return sample
