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
the code's levels (:class:`~vldocir.retrieval.compressed.codecs.AffineCodec`), and with residuals
the bag means' products are taken once per bag entry and added to their tokens'. Other codecs are
decoded (faiss ``sa_decode``).

What the search costs and what it gives up against exact search over the same page embeddings is
measured by ``perf/bench_compressed.py`` (storage, time, memory, recall of exact top-k and the
RecallAll@k change); perf/README.md quotes it.

Integrity: the artifact's files are checksummed by the cache like every artifact; the build
streams the page store's shards (their checksums verified as they are read) and holds one
shard's tokens at a time, plus the training sample.

By job: :mod:`~vldocir.retrieval.compressed.codecs` (the codecs), :mod:`~vldocir.retrieval.compressed.build`
(pooling, training, coding: the artifact), :mod:`~vldocir.retrieval.compressed.pages` (the artifact
opened, MaxSim over it), :mod:`~vldocir.retrieval.compressed.search` (the candidates and their
rescoring); :class:`CompressedSearch` holds the knobs and joins them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vldocir.cache import ArtifactCache, CorruptArtifactError, read_json
from vldocir.retrieval.compressed.build import build_compressed
from vldocir.retrieval.compressed.codecs import FLOAT16, MEAN_CODEC, PARSE_DIM, codec_index
from vldocir.retrieval.compressed.pages import INDEX_FILE, CompressedPages
from vldocir.retrieval.compressed.search import compressed_search
from vldocir.retrieval.embeddings import PageEmbeddingStore
from vldocir.retrieval.search import TopN
from vldocir.retrieval.vectors import RaggedVectors

log = logging.getLogger(__name__)

CODED = ("tokens", "residuals")


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
            codec_index(codec, PARSE_DIM)  # a string faiss cannot parse fails here, before any work
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
    ) -> CompressedPages:
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
        pages: CompressedPages,
        depth: int,
        progress: bool = True,
        stats: dict | None = None,
    ) -> TopN:
        return compressed_search(
            queries, pages, depth, nprobe=self.nprobe, candidates=self.candidates, rescore=self.rescore,
            threads=self.threads, progress=progress, stats=stats,
        )  # fmt: skip
