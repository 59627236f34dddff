"""The compressed pages of a page store as built
(:func:`vldocir.retrieval.compressed.build.build_compressed`), memory-mapped
(:class:`CompressedPages`), and what is scored over them: their stored vectors' products with
query tokens, MaxSim, the bag means' interaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vldocir.cache import read_json
from vldocir.retrieval.compressed.codecs import FLOAT16, AffineCodec
from vldocir.retrieval.vectors import RaggedVectors, concatenated_ranges

INDEX_FILE = "compressed.json"
"""The artifact's description (its knobs, dimension and counts), by which a cached artifact is checked."""

RESCORE_VECTORS = 1 << 12
"""Candidate page vectors scored in one step: their levels (or decoded vectors), 2 MB of fp32 at
dim 128, kept in cache between the product and the max."""


@dataclass
class CompressedPages:
    """The compressed pages, memory-mapped: ``codes`` (n_vectors, code size) uint8 (or float16
    vectors for ``codec=float16``) with ``offsets`` (n_pages + 1); with an index, ``centroids``
    (n_centroids, dim) fp32, the pages' bags ``bag_centroids`` (int32 centroid indices, ascending
    per page) cut by ``bag_offsets`` (n_pages + 1), and the inverted lists ``list_pages`` (int32 page
    indices, ascending per centroid) cut by ``list_offsets`` (n_centroids + 1). With residuals,
    ``codes`` hold offsets, ``mean_codes`` (n_bag_entries, mean code size) uint8 the bag means
    and ``bag_token_offsets`` (n_bag_entries + 1) the stored tokens of each bag entry."""

    meta: dict
    codes: np.ndarray
    offsets: np.ndarray
    codec: Any
    centroids: np.ndarray | None
    bag_offsets: np.ndarray | None
    bag_centroids: np.ndarray | None
    list_offsets: np.ndarray | None
    list_pages: np.ndarray | None
    mean_codes: np.ndarray | None = None
    mean_codec: Any = None
    bag_token_offsets: np.ndarray | None = None
    levels: AffineCodec | None = None
    mean_levels: AffineCodec | None = None

    def __post_init__(self):
        self.levels = AffineCodec.of(self.codec) if self.codec is not None else None
        self.mean_levels = AffineCodec.of(self.mean_codec) if self.mean_codec is not None else None

    @classmethod
    def open(cls, path: Path) -> CompressedPages:
        import faiss

        meta = read_json(path / INDEX_FILE)
        load = lambda name: np.load(path / name, mmap_mode="r")  # noqa: E731
        codec = None if meta["codec"] == FLOAT16 else faiss.read_index(str(path / "codec.faiss"))
        indexed = bool(meta.get("n_centroids"))
        residuals = meta.get("coded") == "residuals"
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
            load("mean_codes.npy") if residuals else None,
            faiss.read_index(str(path / "mean_codec.faiss")) if residuals else None,
            np.asarray(load("bag_token_offsets.npy")) if residuals else None,
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
        vectors = self.codec.sa_decode(codes)
        if self.mean_codes is not None:
            vectors += self.mean_codec.sa_decode(np.take(self.mean_codes, self.bag_entry_of(rows), axis=0))
        return torch.from_numpy(vectors)

    def bag_entry_of(self, rows: np.ndarray) -> np.ndarray:
        """With residuals, the bag entry of each given stored vector (tokens are stored in bag order)."""
        return np.searchsorted(self.bag_token_offsets, rows, side="right") - 1

    def products(self, tokens: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """The query ``tokens``' products with the given stored vectors, (len(tokens), len(rows)):
        over their coded levels when the codec is an affine scalar quantizer (no decoding), else
        over the decoded vectors. With residuals the bag means' products are not included."""
        codes = np.take(self.codes, rows, axis=0)
        if self.levels is None:
            vectors = (
                torch.from_numpy(codes).float() if self.codec is None else torch.from_numpy(self.codec.sa_decode(codes))
            )
            return tokens @ vectors.T
        return self.levels.products(tokens, torch.from_numpy(codes))

    def mean_products(self, tokens: torch.Tensor, entries: np.ndarray) -> torch.Tensor:
        """The query ``tokens``' products with the given bag entries' means, (len(tokens), len(entries))."""
        codes = torch.from_numpy(np.take(self.mean_codes, entries, axis=0))
        if self.mean_levels is None:
            return tokens @ torch.from_numpy(self.mean_codec.sa_decode(codes.numpy())).T
        return self.mean_levels.products(tokens, codes)

    def bag_entries(self, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bag entries of the pages ``pool``, page after page, and each page's entry count."""
        counts = self.bag_offsets[pool + 1] - self.bag_offsets[pool]
        return concatenated_ranges(self.bag_offsets[pool], counts), counts

    def bag_mean_scores(self, tokens: torch.Tensor, pool: np.ndarray) -> torch.Tensor:
        """Each page of ``pool``'s MaxSim over its bag means (every token replaced by its bag's
        mean): per query token the best of its entries' means, summed. Needs residuals."""
        entries, counts = self.bag_entries(pool)
        products = self.mean_products(tokens, entries).T  # (entries, query tokens)
        return torch.segment_reduce(products, "max", lengths=torch.from_numpy(counts), axis=0).sum(dim=1)

    def maxsim(self, tokens: torch.Tensor, pool: np.ndarray) -> torch.Tensor:
        """MaxSim of the query ``tokens`` with each page of ``pool`` over its stored vectors
        (:meth:`products`; a page of no tokens scores 0), a cache-sized chunk of pages at a time."""
        rows, width = RaggedVectors(self.codes, self.offsets).padded_rows(pool)
        scores = torch.zeros(len(pool))
        if not len(self.codes) or not len(pool):
            return scores
        means = entry_of_row = None
        if self.mean_codes is not None and self.levels is not None:  # the means' products once per entry
            entries, _ = self.bag_entries(pool)  # ascending: pool ascends, a page's entries too
            if not len(entries):  # only pages without tokens
                return scores
            means = self.mean_products(tokens, entries)
            local = np.searchsorted(entries, self.bag_entry_of(rows))  # an empty page's rows: any entry
            entry_of_row = torch.from_numpy(np.minimum(local, len(entries) - 1))
        step = max(1, RESCORE_VECTORS // width)
        for p0 in range(0, len(pool), step):
            p1 = min(len(pool), p0 + step)
            chunk = slice(p0 * width, p1 * width)
            if means is not None:
                sims = self.products(tokens, rows[chunk]).add_(means.index_select(1, entry_of_row[chunk]))
            elif self.mean_codes is not None:  # a codec without levels: decode tokens and means
                sims = tokens @ self.decode(rows[chunk]).T
            else:
                sims = self.products(tokens, rows[chunk])
            scores[p0:p1] = sims.view(len(tokens), p1 - p0, width).amax(dim=2).sum(dim=0)
        scores[torch.from_numpy(self.offsets[pool + 1] == self.offsets[pool])] = 0.0
        return scores

    def decoded_shards(self, pages_per_shard: int = 1024) -> Iterable[RaggedVectors]:
        """Every page's decoded vectors, in shards for :func:`exact_search`."""
        for start in range(0, self.n_pages, pages_per_shard):
            stop = min(self.n_pages, start + pages_per_shard)
            first, last = int(self.offsets[start]), int(self.offsets[stop])
            vectors = self.decode(np.arange(first, last)).numpy()
            yield RaggedVectors(vectors, self.offsets[start : stop + 1] - first, first_index=start)
