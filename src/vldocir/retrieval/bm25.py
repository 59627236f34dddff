"""BM25 over page text with bm25s: DOM-BM25 (``dom_text``) and OCR-BM25 (``ocr_text``)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError, read_json
from vldocir.data.benchmark import Benchmark
from vldocir.data.runs import run_from_indices
from vldocir.errors import ConfigError
from vldocir.retrieval.base import Retriever

log = logging.getLogger(__name__)
logging.getLogger("bm25s").setLevel(logging.WARNING)

BACKENDS = ("auto", "numba", "numpy")

NUMBA_MIN_WORK = 4e8
"""``backend="auto"`` takes numba when queries x pages reaches this. Compiling bm25s's numba
functions costs about 7 s in every process; past that, numba's top-k selection is 8-10x faster
than numpy's (measured here: numpy ~1.8e-8 s per query x page, numba ~1.6e-9), so they break
even near 4e8 (e.g. 1,000 queries over 400,000 pages). The mini benchmark is 9e4, the paper 1e11."""


class BM25Retriever(Retriever):
    """Lucene-style BM25 over one text column of the pages table.

    Args:
        text_field: ``dom_text`` or ``ocr_text``.
        k1, b, method: bm25s scoring parameters.
        stemmer: a Snowball language for PyStemmer (``english``), or ``None``.
        stopwords: a bm25s stop-word list name (``en``), or ``None``.
        query_batch_size: queries scored per bm25s call (memory only; results do not depend on it).
        backend: bm25s's top-k selection, ``numba`` (compiled, parallel over queries; 8-10x faster
            at paper scale, after a ~7 s compilation per process), ``numpy``, or ``auto``: numba
            where the search is large enough to repay the compilation (:data:`NUMBA_MIN_WORK`).
            Speed only: the ranking is the same (see ``retrieve``).
        n_threads: threads for the top-k selection; ``-1`` uses every core. Speed only.

    Rankings are deterministic whatever the backend, thread count or batch size: pages are ordered
    by score, ties by page_id (the benchmark's page order), as everywhere else. bm25s breaks ties at
    the cut-off arbitrarily, so each query fetches ``depth + tie_margin`` candidates; where pages
    tied with the last kept one may lie beyond those, the query is fetched again with more.
    """

    def __init__(
        self,
        text_field: str = "dom_text",
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stemmer: str | None = "english",
        stopwords: str | None = "en",
        query_batch_size: int = 4096,
        backend: str = "auto",
        n_threads: int = -1,
        tie_margin: int = 16,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.text_field = text_field
        self.k1, self.b, self.method = k1, b, method
        self.stemmer_language, self.stopwords = stemmer, stopwords
        self.query_batch_size = query_batch_size
        self.backend, self.n_threads, self.tie_margin = backend, n_threads, tie_margin
        self.stats: dict[str, Any] = {}

    def cache_params(self) -> dict[str, Any]:
        return {
            "index": "bm25s",
            "text_field": self.text_field,
            "k1": self.k1,
            "b": self.b,
            "method": self.method,
            "stemmer": self.stemmer_language,
            "stopwords": self.stopwords,
        }

    def _tokenizer(self):
        import bm25s

        stemmer = None
        if self.stemmer_language:
            import Stemmer

            stemmer = Stemmer.Stemmer(self.stemmer_language).stemWord
        return bm25s.tokenization.Tokenizer(stemmer=stemmer, stopwords=self.stopwords or [])

    def _index(self, bench: Benchmark, cache: ArtifactCache):
        """The bm25s index, its tokenizer vocabulary and the page order: built once per key."""

        key = cache.key_for("bm25-index", benchmark=bench.fingerprint, **self.cache_params())
        page_order = bench.arrow("pages", ["page_id"]).column("page_id").to_pylist()
        loaded: list[tuple] = []

        def verify(path: Path) -> None:
            """The page order is the benchmark's (the index was built from the pages table in its
            order), and bm25s reads the index back."""
            if read_json(path / "page_ids.json") != page_order:
                raise CorruptArtifactError(
                    path / "page_ids.json", f"is not the page order of benchmark {bench.name}'s pages table"
                )
            loaded.append(self._load(path, len(page_order)))

        if cache.lookup("bm25-index", key, verify) is None:
            description = {"benchmark": bench.fingerprint, **self.cache_params()}
            with cache.build_once("bm25-index", key, description) as staging:
                if staging is None:  # another job built it while this one waited
                    cache.check("bm25-index", key, verify)
                else:
                    self._build_index(bench, staging, page_order)
            if not loaded:
                loaded.append(self._load(cache.directory("bm25-index", key), len(page_order)))
        model, tokenizer = loaded[-1]
        return model, tokenizer, np.asarray(page_order, dtype=object)

    def _build_index(self, bench: Benchmark, staging: Path, page_order: list[str]) -> None:
        import bm25s

        tick = time.perf_counter()
        pages = bench.arrow("pages", ["page_id", self.text_field])
        texts = pages.column(self.text_field).to_pylist()
        missing = sum(t is None for t in texts)
        if missing == len(texts):
            raise ConfigError(
                f"BM25 reads each page's '{self.text_field}', and benchmark {bench.name} has it for no page: "
                + ("run the OCR stage first" if self.text_field == "ocr_text" else "it was built without page text")
                + "; use a visual retriever (e.g. retriever=colqwen25)"
            )
        if missing:
            log.warning("%d of %d pages have no %s; they are indexed as empty", missing, len(texts), self.text_field)
        tokenizer = self._tokenizer()
        tokens = tokenizer.tokenize([t or "" for t in texts], update_vocab=True, return_as="tuple", show_progress=True)
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        model.index(tokens, show_progress=True)
        model.save(staging / "bm25", show_progress=False)
        tokenizer.save_vocab(staging / "bm25")
        (staging / "page_ids.json").write_text(json.dumps(page_order))
        self.stats["index"] = {"pages": len(texts), "build_s": round(time.perf_counter() - tick, 3)}

    def _load(self, path: Path, n_pages: int) -> tuple:
        """The bm25s model (memory-mapped) and tokenizer of the index at ``path``, after the checks
        that cost no pass over the postings: the parameters and page count are this index's, and
        the sparse matrix's shape agrees with the vocabulary. Raises :class:`CorruptArtifactError`
        naming the file."""
        import bm25s

        try:
            model = bm25s.BM25.load(path / "bm25", mmap=True, show_progress=False)
            tokenizer = self._tokenizer()
            tokenizer.load_vocab(path / "bm25")
        except (OSError, ValueError, KeyError, TypeError, EOFError) as error:
            raise CorruptArtifactError(
                path / "bm25", f"bm25s cannot read it ({type(error).__name__}: {error})"
            ) from None
        params = path / "bm25" / "params.index.json"
        found = (model.k1, model.b, model.method, model.scores.get("num_docs"))
        if found != (self.k1, self.b, self.method, n_pages):
            raise CorruptArtifactError(
                params,
                f"holds k1, b, method, num_docs {found}; this index is {(self.k1, self.b, self.method, n_pages)}",
            )
        indptr = model.scores["indptr"]
        if len(indptr) != len(model.vocab_dict) + 1 or indptr[0] != 0 or indptr[-1] != len(model.scores["data"]):
            raise CorruptArtifactError(
                path / "bm25" / "indptr.csc.index.npy", "does not fit the vocabulary and postings"
            )
        if len(model.scores["indices"]) != len(model.scores["data"]):
            raise CorruptArtifactError(path / "bm25" / "indices.csc.index.npy", "does not fit the postings")
        return model, tokenizer

    def retrieve(self, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache) -> pa.Table:
        model, tokenizer, page_ids = self._index(bench, cache)
        order = np.argsort(page_ids, kind="stable")  # index position -> rank of its page_id
        page_rank = np.empty(len(page_ids), dtype=np.int64)
        page_rank[order] = np.arange(len(page_ids))
        depth = min(depth, len(page_ids))
        query_ids = list(queries)
        texts = [queries[q] for q in query_ids]
        model.backend = choose_backend(self.backend, len(texts), len(page_ids))
        indices = np.full((len(texts), depth), -1, dtype=np.int64)
        scores = np.zeros((len(texts), depth), dtype=np.float32)
        refetched = 0
        tick = time.perf_counter()
        bar = tqdm(total=len(texts), desc=f"BM25 search ({self.text_field})", unit="query")
        for start in range(0, len(texts), self.query_batch_size):
            batch = texts[start : start + self.query_batch_size]
            tokens = tokenizer.tokenize(batch, update_vocab=False, return_as="ids", show_progress=False)
            top, n = self._top(model, tokens, depth, page_rank)
            indices[start : start + len(batch)] = top[0]
            scores[start : start + len(batch)] = top[1]
            refetched += n
            bar.update(len(batch))
        bar.close()
        elapsed = time.perf_counter() - tick
        self.stats["search"] = {
            "queries": len(texts),
            "search_s": round(elapsed, 3),
            "queries_per_s": round(len(texts) / elapsed, 1) if elapsed else None,
            "backend": model.backend,
            "n_threads": self.n_threads,
            "refetched_for_ties": refetched,
        }
        return run_from_indices(query_ids, page_ids, indices, scores)

    def _fetch(self, model, tokens, k: int) -> tuple[np.ndarray, np.ndarray]:
        docs, values = model.retrieve(tokens, k=k, show_progress=False, n_threads=self.n_threads)
        return np.asarray(docs, dtype=np.int64), np.asarray(values, dtype=np.float32)

    def _top(self, model, tokens: list[list[int]], depth: int, page_rank: np.ndarray):
        """Each query's top ``depth`` index positions (-1 pads) and scores, by score then page_id,
        and how many queries had to be fetched again. A page scoring 0 shares no query term and is
        never retrieved."""
        n_docs = len(page_rank)
        k = min(depth + self.tie_margin, n_docs)
        docs, values = self._fetch(model, tokens, k)
        top_docs, top_values = _best(docs, values, page_rank, depth)
        pending = np.arange(len(tokens))
        refetched = 0
        while k < n_docs:
            # The tie group at the cut-off is complete only where the last fetched score is lower.
            open_ties = (values[:, depth - 1] > 0) & (values[:, -1] == values[:, depth - 1])
            pending = pending[open_ties]
            if not len(pending):
                break
            k = min(k * 4, n_docs)
            docs, values = self._fetch(model, [tokens[i] for i in pending], k)
            top_docs[pending], top_values[pending] = _best(docs, values, page_rank, depth)
            refetched += len(pending)
        return (top_docs, top_values), refetched


def choose_backend(backend: str, n_queries: int, n_pages: int) -> str:
    """The bm25s backend to search with: ``backend`` itself, or for ``auto`` numba when
    ``n_queries * n_pages`` reaches :data:`NUMBA_MIN_WORK`, numpy below."""
    if backend != "auto":
        return backend
    return "numba" if n_queries * n_pages >= NUMBA_MIN_WORK else "numpy"


def _best(docs: np.ndarray, values: np.ndarray, page_rank: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of (n_queries, k) candidates, the ``depth`` best by (score desc, page_id asc);
    positions with no positive score are -1 (score 0)."""
    n, k = docs.shape
    rows = np.repeat(np.arange(n), k)
    order = np.lexsort((page_rank[docs].ravel(), -values.ravel(), rows)).reshape(n, k)[:, :depth]
    order -= (np.arange(n) * k)[:, None]
    best_docs = np.take_along_axis(docs, order, axis=1)
    best_values = np.take_along_axis(values, order, axis=1)
    best_docs[best_values <= 0] = -1
    best_values[best_values <= 0] = 0
    return best_docs, best_values
