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
  ``nprobe`` 0 looks up every centroid of every page's bag; otherwise only each query token's
  ``nprobe`` best centroids, through their inverted lists (a page missing them all counts their
  bound, the best score of a centroid not probed), which costs the probed lists' entries instead
  of every bag. The ``candidates`` best pages by that score are rescored by MaxSim over their
  stored vectors, and the run is their top ``depth`` (ties by page index).
- ``coded``: ``tokens`` codes each token; ``residuals`` (with an index and a faiss codec) stores
  each token as its offset from its bag mean (the mean of the page's tokens that share its
  centroid) and codes the offsets, the bag means coded with :data:`MEAN_CODEC`, one per bag
  entry. A page's tokens cluster around a few such means, so the offsets are a fraction of the
  tokens' spread and a 4-bit codec keeps most of what 8 bits do (perf/README.md). A page's
  tokens are stored in bag order (MaxSim does not depend on their order), so a stored token's
  bag entry follows from the entries' token counts and costs no byte per token. A scalar
  quantizer's ranges are then trained to minimise the offsets' squared error (faiss
  ``RS_optim``) rather than to span their extremes. The bag means also rank the candidates
  cheaply: ``rescore`` keeps the candidates' best by MaxSim over their bag means alone (one
  product per bag entry instead of per token) for the MaxSim rescoring.

Rescoring never decodes an 8- or 4-bit scalar quantizer's codes: such a codec is affine per
dimension, so a query token's product with a coded vector is a constant plus a weighted sum of
the code's levels (:class:`_AffineCodec`), and with residuals the bag means' products are taken
once per bag entry and added to their tokens'. Other codecs are decoded (faiss ``sa_decode``).

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
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError, read_json
from vldocir.retrieval.embeddings import PageEmbeddingStore
from vldocir.retrieval.search import TopN, exact_search
from vldocir.retrieval.vectors import RaggedVectors, concatenated_ranges

log = logging.getLogger(__name__)

FLOAT16 = "float16"
CODED = ("tokens", "residuals")
MEAN_CODEC = "SQ8"
"""How bag means are coded with ``coded=residuals``: 8 bits a dimension, one vector a bag entry."""
RANGE_TRAIN_TOKENS = 1 << 16
"""Offsets a scalar quantizer's ranges are fitted on with ``coded=residuals``: faiss's ``RS_optim``
takes time superlinear in the sample (3.7 s for 2^16 tokens of 128 dimensions here, many minutes for
2^20), and a range per dimension needs no more."""
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
        coded: what the codec codes: ``tokens``, or ``residuals``, each token's offset from its
            bag mean (module notes; needs an index and a faiss codec).
        nprobe: centroids probed per query token (their scores are the only ones looked up, through
            the inverted lists); 0: every centroid of every page's bag.
        candidates: pages chosen per query by centroid interaction (at least the run depth).
        rescore: with residuals, the candidates' best by bag-mean interaction that MaxSim
            rescores (at least the run depth); 0: every candidate.
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
        coded: str = "tokens",
        nprobe: int = 0,
        candidates: int = 1024,
        rescore: int = 0,
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
            ("rescore", rescore, 0),
            ("train_tokens", train_tokens, 1),
            ("kmeans_iterations", kmeans_iterations, 1),
            ("threads", threads, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if codec != FLOAT16:
            _codec_index(codec, PARSE_DIM)  # a string faiss cannot parse fails here, before any work
        if coded not in CODED:
            raise ValueError(f"coded must be one of {', '.join(CODED)}, got {coded!r}")
        if coded == "residuals" and (not n_centroids or codec == FLOAT16):
            raise ValueError(
                "coded=residuals codes tokens as offsets from their bag means: it needs an index (n_centroids > 0) "
                f"and a faiss codec (codec={codec!r}, n_centroids={n_centroids})"
            )
        if rescore and coded != "residuals":
            raise ValueError(
                f"rescore={rescore} ranks the candidates by their bag means, which only coded=residuals stores "
                f"(coded={coded!r}); rescore=0 rescores every candidate"
            )
        self.pool_factor, self.codec, self.n_centroids = pool_factor, codec, n_centroids
        self.coded = coded
        self.nprobe, self.candidates, self.rescore, self.train_tokens = nprobe, candidates, rescore, train_tokens
        self.kmeans_iterations, self.seed, self.threads = kmeans_iterations, seed, threads

    @property
    def residuals(self) -> bool:
        return self.coded == "residuals"

    def build_params(self) -> dict[str, Any]:
        """What the artifact depends on (the search knobs nprobe, candidates and rescore are not in it)."""
        params: dict[str, Any] = {"pool_factor": self.pool_factor, "codec": self.codec, "seed": self.seed}
        if self.pool_factor > 1:
            params["pooler"] = "colpali_engine.HierarchicalTokenPooler"
        if self.n_centroids or self.codec != FLOAT16:
            params["train_tokens"] = self.train_tokens
        if self.n_centroids:
            params.update(n_centroids=self.n_centroids, kmeans_iterations=self.kmeans_iterations)
        if self.residuals:  # only when on: artifacts built before the knob existed keep their keys
            params.update(coded="residuals", mean_codec=MEAN_CODEC)
        return params

    def cache_params(self) -> dict[str, Any]:
        params = self.build_params()
        if self.n_centroids:
            params.update(nprobe=self.nprobe, candidates=self.candidates)
            if self.nprobe:  # probed centroids' scores only (before: every centroid of the pages probed)
                params["probe"] = "probed-centroid-scores"
            if self.rescore:
                params["rescore"] = self.rescore
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
            queries, pages, depth, nprobe=self.nprobe, candidates=self.candidates, rescore=self.rescore,
            threads=self.threads, progress=progress, stats=stats,
        )  # fmt: skip


# -- codecs ------------------------------------------------------------------------------------


def _codec_index(codec: str, dim: int):
    import faiss

    try:
        return faiss.index_factory(dim, codec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1] if str(error).strip() else "unknown"
        if dim != PARSE_DIM:
            try:
                faiss.index_factory(PARSE_DIM, codec, faiss.METRIC_INNER_PRODUCT)
            except RuntimeError:
                pass
            else:  # a codec faiss knows, for another dimension (PQ64x8 needs a multiple of 64)
                raise ValueError(
                    f"codec {codec!r} cannot code the pages' {dim}-dimensional vectors ({first})"
                ) from None
        raise ValueError(f"codec {codec!r} is not a faiss index_factory codec ({first})") from None


@dataclass
class _AffineCodec:
    """A faiss scalar quantizer of 8 or 4 bits read as what it is, an affine map per dimension:
    component d decodes to ``vmin[d] + (level[d] + 1/2) * step[d]`` (``step = vdiff / (2^bits - 1)``).
    A query token's product with a coded vector is then a constant plus a product with the
    vector's levels, so MaxSim needs no decoded copy: the levels of a 4-bit code are its bytes
    (low nibble plus 16 x high) and their high nibbles, weighted so that the two products add up
    to the nibbles' (faiss codes the even dimension of a byte in its low nibble)."""

    bits: int
    vmin: torch.Tensor
    step: torch.Tensor
    code_bytes: int

    @classmethod
    def of(cls, codec) -> "_AffineCodec | None":
        """The affine reading of ``codec``, or None when it is not an 8- or 4-bit scalar quantizer."""
        import faiss

        index = faiss.downcast_index(codec)
        if not isinstance(index, faiss.IndexScalarQuantizer):
            return None
        types = faiss.ScalarQuantizer
        bits = {types.QT_8bit: 8, types.QT_8bit_uniform: 8, types.QT_4bit: 4, types.QT_4bit_uniform: 4}
        if index.sq.qtype not in bits:
            return None
        dim, trained = index.sq.d, faiss.vector_to_array(index.sq.trained).astype(np.float32)
        vmin, vdiff = (
            (trained[:dim], trained[dim : 2 * dim]) if len(trained) == 2 * dim else (trained[:1], trained[1:2])
        )
        levels = (1 << bits[index.sq.qtype]) - 1
        vmin, step = np.broadcast_to(vmin, dim).copy(), np.broadcast_to(vdiff / levels, dim).copy()
        return cls(bits[index.sq.qtype], torch.from_numpy(vmin), torch.from_numpy(step), int(index.sa_code_size()))

    def products(self, tokens: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """``tokens`` (n, dim) fp32 times the vectors coded in ``codes`` (m, code_bytes) uint8: (n, m)."""
        weights = tokens * self.step
        constant = (tokens @ self.vmin + 0.5 * weights.sum(dim=1))[:, None]
        if self.bits == 8:
            return torch.addmm(constant, weights, codes.T.float())
        low = weights[:, 0::2]
        high = torch.zeros_like(low)
        high[:, : weights.shape[1] // 2] = weights[:, 1::2]
        levels = torch.empty((len(codes), 2 * self.code_bytes))
        levels[:, : self.code_bytes] = codes
        levels[:, self.code_bytes :] = codes >> 4
        return torch.addmm(constant, torch.cat([low, high - 16 * low], dim=1), levels.T)


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
    levels: "_AffineCodec | None" = None
    mean_levels: "_AffineCodec | None" = None

    def __post_init__(self):
        self.levels = _AffineCodec.of(self.codec) if self.codec is not None else None
        self.mean_levels = _AffineCodec.of(self.mean_codec) if self.mean_codec is not None else None

    @classmethod
    def open(cls, path: Path) -> "CompressedPages":
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
        _codec_index(settings.codec, dim)  # a codec that cannot code this dimension fails before the training
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
            codec = _codec_index(settings.codec, dim)
            if settings.residuals:
                mean_codec = _codec_index(MEAN_CODEC, dim)
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
            pages = [shard.fp32(slice(int(a), int(b))).numpy() for a, b in zip(shard.offsets[:-1], shard.offsets[1:])]
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
        meta.update(n_centroids=len(centroids), list_entries=int(len(pairs)))
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


# -- search --------------------------------------------------------------------------------------


def compressed_search(
    queries: RaggedVectors,
    pages: CompressedPages,
    depth: int,
    *,
    nprobe: int = 0,
    candidates: int = 1024,
    rescore: int = 0,
    threads: int = 0,
    progress: bool = True,
    stats: dict | None = None,
) -> TopN:
    """The top ``depth`` pages per query by MaxSim over the compressed pages: every page without an
    index, else the ``candidates`` best of the centroid index (see the module notes), of which,
    with ``rescore`` and residuals, only the ``rescore`` best by bag-mean interaction are rescored.

    ``stats`` gets ``scored_vectors`` (page vectors and bag means scored per query, mean) for the
    cost accounting.
    """
    if pages.centroids is None:
        top = exact_search(
            queries, pages.decoded_shards(), depth, total_items=pages.n_pages, device="cpu", progress=progress
        )
        if stats is not None:
            stats.update(scored_vectors=int(pages.meta["n_vectors"]), candidates=pages.n_pages)
        return top
    if rescore and pages.mean_codes is None:
        raise ValueError(f"rescore={rescore} needs bag means: these compressed pages were not coded as residuals")
    n_queries = len(queries)
    candidates = max(candidates, depth)
    rescore = max(rescore, depth) if rescore else 0
    indices = np.full((n_queries, depth), -1, dtype=np.int64)
    values = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    has_bag = np.diff(pages.bag_offsets) > 0
    threads = threads or torch.get_num_threads()
    scored = np.zeros(n_queries, dtype=np.int64)

    def one(q: int) -> None:
        tokens = queries.fp32(slice(int(queries.offsets[q]), int(queries.offsets[q + 1])))
        if not len(tokens):
            return
        pool = _candidates(tokens, pages, nprobe, candidates, has_bag)
        if rescore and len(pool) > rescore:
            scored[q] += int(pages.bag_offsets[pool + 1].sum() - pages.bag_offsets[pool].sum())
            pool = np.sort(pool[_best(pages.bag_mean_scores(tokens, pool).numpy(), rescore)])
        scores = pages.maxsim(tokens, pool)
        empty = torch.from_numpy(pages.offsets[pool + 1] == pages.offsets[pool])
        scores[empty] = float("-inf")
        order = torch.sort(scores, descending=True, stable=True).indices[:depth].numpy()  # pool ascends: ties by page
        kept = scores.numpy()[order]
        valid = np.isfinite(kept)
        indices[q, : len(order)] = np.where(valid, pool[order], -1)
        values[q, : len(order)] = kept
        scored[q] += int(pages.offsets[pool + 1].sum() - pages.offsets[pool].sum())

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
"""Candidate page vectors scored in one step: their levels (or decoded vectors), 2 MB of fp32 at
dim 128, kept in cache between the product and the max."""

CANDIDATE_LOOKUPS = 1 << 20
"""Centroid-interaction lookups (query tokens x bag entries) per step: 4 MB of fp32 in cache."""


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest ``scores`` (all when fewer), in no order."""
    return np.argpartition(-scores, k - 1)[:k] if 0 < k < len(scores) else np.arange(len(scores))


def _candidates(
    tokens: torch.Tensor, pages: CompressedPages, nprobe: int, candidates: int, has_bag: np.ndarray
) -> np.ndarray:
    """The ``candidates`` best pages of one query by centroid interaction, ascending page index."""
    scored, approximate = _centroid_interaction(tokens, pages, nprobe, has_bag)
    return np.sort(scored[_best(approximate, min(candidates, len(scored)))])


def _centroid_interaction(
    tokens: torch.Tensor, pages: CompressedPages, nprobe: int, has_bag: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(pages with a bag, their centroid-interaction scores). With ``nprobe`` (fewer than the
    centroids), only each query token's ``nprobe`` best centroids are looked up, through their
    inverted lists; a query token none of whose probed centroids is in a page's bag counts the
    best score of the centroids not probed (which bounds every one of them), so a page's score
    is the exact one whenever each query token's best centroid in its bag was probed. The lookups
    are the probed lists' entries instead of every page's bag; the running best is a buffer of
    (pages x query tokens) fp32."""
    centroid_scores = torch.from_numpy(pages.centroids) @ tokens.T  # (centroids, query tokens): an entry reads a row
    scored = np.flatnonzero(has_bag)
    if nprobe and nprobe < len(centroid_scores):
        n_tokens = len(tokens)
        top = torch.topk(centroid_scores, nprobe + 1, dim=0)  # sorted, per query token
        bound = top.values[nprobe]
        probed = top.indices[:nprobe].reshape(-1).numpy()  # probe-major: token t of probe j at j * n_tokens + t
        gains = (top.values[:nprobe] - bound).reshape(-1).numpy()  # >= 0
        lengths = pages.list_offsets[probed + 1] - pages.list_offsets[probed]
        listed = np.asarray(pages.list_pages[concatenated_ranges(pages.list_offsets[probed], lengths)], dtype=np.int64)
        token = np.repeat(np.tile(np.arange(n_tokens), nprobe), lengths)
        best = torch.zeros(pages.n_pages * n_tokens)
        best.scatter_reduce_(
            0, torch.from_numpy(listed * n_tokens + token), torch.from_numpy(np.repeat(gains, lengths)), "amax"
        )
        approximate = best.view(pages.n_pages, n_tokens).sum(dim=1) + bound.sum()
        return scored, approximate.numpy()[scored]
    approximate = torch.empty(len(scored))
    bag_starts, bag_lengths = pages.bag_offsets[:-1], np.diff(pages.bag_offsets)
    step = max(1, CANDIDATE_LOOKUPS // max(1, len(tokens)))
    ends = pages.bag_offsets[scored + 1]
    begin = 0
    while begin < len(scored):  # consecutive pages whose bag entries fit one step (at least one page)
        end = max(begin + 1, int(np.searchsorted(ends, bag_starts[scored[begin]] + step, side="right")))
        part = scored[begin:end]
        rows = slice(int(bag_starts[part[0]]), int(pages.bag_offsets[part[-1] + 1]))  # their bags are one slice
        entries = torch.from_numpy(np.asarray(pages.bag_centroids[rows], dtype=np.int64))
        lengths = torch.from_numpy(bag_lengths[part])
        best = torch.segment_reduce(centroid_scores[entries], "max", lengths=lengths, axis=0)
        approximate[begin:end] = best.sum(dim=1)
        begin = end
    return scored, approximate.numpy()
