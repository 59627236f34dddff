"""BM25 over page text with bm25s: DOM-BM25 (``dom_text``) and OCR-BM25 (``ocr_text``)."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.data.runs import make_run
from vldocir.retrieval.base import Retriever

log = logging.getLogger(__name__)
logging.getLogger("bm25s").setLevel(logging.WARNING)


class BM25Retriever(Retriever):
    """Lucene-style BM25 over one text column of the pages table.

    Args:
        text_field: ``dom_text`` or ``ocr_text``.
        k1, b, method: bm25s scoring parameters.
        stemmer: a Snowball language for PyStemmer (``english``), or ``None``.
        stopwords: a bm25s stop-word list name (``en``), or ``None``.
        query_batch_size: queries scored per bm25s call (memory only; results do not depend on it).
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
    ):
        self.text_field = text_field
        self.k1, self.b, self.method = k1, b, method
        self.stemmer_language, self.stopwords = stemmer, stopwords
        self.query_batch_size = query_batch_size

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
        import bm25s

        key = cache.key_for("bm25-index", benchmark=bench.fingerprint, **self.cache_params())
        path = cache.lookup("bm25-index", key)
        if path is None:
            pages = bench.arrow("pages", ["page_id", self.text_field])
            texts = pages.column(self.text_field).to_pylist()
            missing = sum(t is None for t in texts)
            if missing == len(texts):
                raise ValueError(
                    f"benchmark {bench.name} has no '{self.text_field}' for any page: "
                    + ("run the OCR stage first" if self.text_field == "ocr_text" else "it was built without page text")
                )
            if missing:
                log.warning("%d of %d pages have no %s; they are indexed as empty", missing, len(texts), self.text_field)
            tokenizer = self._tokenizer()
            tokens = tokenizer.tokenize(
                [t or "" for t in texts], update_vocab=True, return_as="tuple", show_progress=True
            )
            model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            model.index(tokens, show_progress=True)
            with cache.build("bm25-index", key, {"benchmark": bench.fingerprint, **self.cache_params()}) as staging:
                model.save(staging / "bm25", show_progress=False)
                tokenizer.save_vocab(staging / "bm25")
                (staging / "page_ids.json").write_text(json.dumps(pages.column("page_id").to_pylist()))
            path = cache.directory("bm25-index", key)
        model = bm25s.BM25.load(path / "bm25", mmap=True, show_progress=False)
        tokenizer = self._tokenizer()
        tokenizer.load_vocab(path / "bm25")
        page_ids = np.asarray(json.loads((path / "page_ids.json").read_text()), dtype=object)
        return model, tokenizer, page_ids

    def retrieve(self, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache) -> pa.Table:
        model, tokenizer, page_ids = self._index(bench, cache)
        depth = min(depth, len(page_ids))
        query_ids = list(queries)
        texts = [queries[q] for q in query_ids]
        hits: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        bar = tqdm(total=len(texts), desc=f"BM25 search ({self.text_field})", unit="query")
        for start in range(0, len(texts), self.query_batch_size):
            batch = texts[start : start + self.query_batch_size]
            tokens = tokenizer.tokenize(batch, update_vocab=False, return_as="ids", show_progress=False)
            docs, batch_scores = model.retrieve(tokens, k=depth, show_progress=False, n_threads=0)
            for row_docs, row_scores in zip(docs, batch_scores):
                matched = row_scores > 0  # a page sharing no query term is not retrieved
                hits.append(page_ids[row_docs[matched]])
                scores.append(row_scores[matched])
            bar.update(len(batch))
        bar.close()
        return make_run(query_ids, hits, scores)
