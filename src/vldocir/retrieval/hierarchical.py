"""Hierarchical retrieval (paper Fig. 8): rank documents first, then score pages only within each
query's top documents. An option of the embedding retriever's search, like document context.

Stage 1 scores every document by the MaxSim of the query against the document's vectors: its
``n_ctx`` document-context vectors (``doc_vectors=context``, :mod:`vldocir.retrieval.context`) or
its pages' mean-pooled token vectors, one per page (``doc_vectors=pooled``). Stage 2 scores, by
exact page MaxSim, only the pages of the ``top_docs`` best documents of each query: for each
document, the queries that selected it against its pages, as one matrix product. A query's run
holds pages of its top documents only, ordered by page score (ties by page index, as in exact
search). ``stats`` records the fraction of the exhaustive (query, page) scores computed.

Memory stays flat in the corpus size: stage 1 streams the document vectors to exact search in
shards of at most ``doc_shard_tokens`` vectors (it upcasts one shard to fp32 at a time, never all
of them), and stage 2 keeps a running top ``depth`` per query, folding in the candidate (query,
page, score) rows whenever more than ``candidate_rows`` (at least ``n_queries * depth``) are
waiting. Both are exact: the order (score descending, then page index) is a total order, so the
best ``depth`` of a union is the best ``depth`` of the parts' best ``depth``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.retrieval.context import DocumentContext, doc_of_page
from vldocir.retrieval.embeddings import PageEmbeddingStore
from vldocir.retrieval.search import (
    TopN,
    _as_operand,
    _matmul_precision,
    _maxsim,
    _page_blocks,
    exact_search,
    resolve_precision,
)
from vldocir.retrieval.vectors import RaggedVectors, resolve_device

log = logging.getLogger(__name__)

DOC_VECTORS = ("context", "pooled")


DOC_SHARD_TOKENS = 1 << 18
"""Stage 1's most document vectors per shard: 128 MB of fp32 at dim 128, whatever the corpus."""

CANDIDATE_ROWS = 1 << 22
"""Stage 2's candidate (query, page, score) rows waiting before they are folded into the running
top-N (at least ``n_queries * depth``, so folding costs at most twice one final sort)."""


class HierarchicalSearch:
    """Documents first, then pages within each query's ``top_docs`` documents.

    Args:
        top_docs: documents kept per query after stage 1.
        doc_vectors: ``context`` (needs ``context``, the document-context settings) or ``pooled``.
        context: a :class:`~vldocir.retrieval.context.DocumentContext` for ``doc_vectors=context``.
    """

    def __init__(self, top_docs: int = 20, doc_vectors: str = "context", context: DocumentContext | None = None):
        if isinstance(top_docs, bool) or not isinstance(top_docs, int) or top_docs < 1:
            raise ValueError(f"top_docs must be an integer >= 1, got {top_docs!r}")
        if doc_vectors not in DOC_VECTORS:
            raise ValueError(f"doc_vectors must be one of {', '.join(DOC_VECTORS)}, got {doc_vectors!r}")
        if doc_vectors == "context" and context is None:
            raise ValueError("doc_vectors=context needs the document-context settings (context: n_ctx, ...)")
        self.top_docs, self.doc_vectors, self.context = top_docs, doc_vectors, context

    def cache_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"top_docs": self.top_docs, "doc_vectors": self.doc_vectors}
        if self.doc_vectors == "context":
            params["context"] = self.context.cache_params()
        return params

    def document_vectors(
        self, store: PageEmbeddingStore, bench: Benchmark, cache: ArtifactCache, progress: bool, stats: dict
    ) -> tuple[RaggedVectors, np.ndarray]:
        """(one item per document, each page's document position)."""
        if self.doc_vectors == "context":
            built = self.context.vectors(store, bench, cache, progress=progress, stats=stats)
            return built.vectors, built.doc_of_page
        doc_ids, page_doc = doc_of_page(bench, store.page_ids())
        return pooled_page_vectors(store.shards(full=False), page_doc, len(doc_ids)), page_doc

    def search(
        self,
        queries: RaggedVectors,
        doc_vectors: RaggedVectors,
        doc_of_item: np.ndarray,
        shards: Iterable[RaggedVectors],
        depth: int,
        *,
        n_items: int,
        device: str = "auto",
        query_batch_size: int = 32,
        page_block_tokens: int = 4096,
        precision: str = "auto",
        progress: bool = True,
        stats: dict | None = None,
    ) -> TopN:
        return hierarchical_search(
            queries,
            doc_vectors,
            doc_of_item,
            shards,
            depth,
            self.top_docs,
            n_items=n_items,
            device=device,
            query_batch_size=query_batch_size,
            page_block_tokens=page_block_tokens,
            precision=precision,
            progress=progress,
            stats=stats,
        )


def pooled_page_vectors(shards: Iterable[RaggedVectors], page_doc: np.ndarray, n_docs: int) -> RaggedVectors:
    """Each document as the unit-norm means of its pages' token vectors (one vector per page).

    ``page_doc`` (n_pages,) int64 document positions; returns one item per document (n_docs),
    fp32, in document order; a page with no tokens contributes nothing.
    """
    pooled = np.zeros((len(page_doc), 0), np.float32)
    has_tokens = np.zeros(len(page_doc), dtype=bool)
    for shard in shards:
        if pooled.shape[1] != shard.dim:
            pooled = np.zeros((len(page_doc), shard.dim), np.float32)
        lengths = shard.lengths
        nonempty = np.flatnonzero(lengths > 0)
        if not len(nonempty):
            continue
        tokens = shard.fp32(np.arange(len(shard.vectors))).numpy()  # a copy: the shard may be a read-only map
        means = np.add.reduceat(tokens, shard.offsets[:-1][nonempty], axis=0) / lengths[nonempty, None]
        norms = np.linalg.norm(means, axis=1, keepdims=True)
        rows = shard.first_index + nonempty
        pooled[rows] = means / np.where(norms > 0, norms, 1)
        has_tokens[rows] = True
    order = np.argsort(page_doc, kind="stable")
    order = order[has_tokens[order]]
    counts = np.bincount(page_doc[order], minlength=n_docs)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return RaggedVectors(np.ascontiguousarray(pooled[order]), offsets)


def hierarchical_search(
    queries: RaggedVectors,
    doc_vectors: RaggedVectors,
    doc_of_item: np.ndarray,
    shards: Iterable[RaggedVectors],
    depth: int,
    top_docs: int,
    *,
    n_items: int,
    device: str = "auto",
    query_batch_size: int = 32,
    page_block_tokens: int = 4096,
    precision: str = "auto",
    progress: bool = True,
    stats: dict | None = None,
    doc_shard_tokens: int = DOC_SHARD_TOKENS,
    candidate_rows: int = CANDIDATE_ROWS,
) -> TopN:
    """Top ``depth`` items per query among the items of its ``top_docs`` best groups (documents).

    Args:
        queries: query token vectors (n_queries items).
        doc_vectors: one item per group; group ``g`` is item ``g``.
        doc_of_item: (n_items,) int64, each corpus item's group.
        shards: the corpus in order (as for :func:`~vldocir.retrieval.search.exact_search`).
        precision: the products' operands in both stages (as for exact search).
        doc_shard_tokens, candidate_rows: memory bounds of stage 1 and 2 (the module notes);
            results do not depend on them.
    Returns:
        :class:`TopN` as exact search returns it; ``stats`` gets ``page_scores`` (computed),
        ``exhaustive_page_scores`` and ``page_score_fraction``.
    """
    target = resolve_device(device)
    precision = resolve_precision(precision, target)
    n_queries = len(queries)
    top = exact_search(
        queries,
        document_shards(doc_vectors, doc_shard_tokens),
        min(top_docs, len(doc_vectors)),
        device=device,
        query_batch_size=query_batch_size,
        page_block_tokens=page_block_tokens,
        precision=precision,
        progress=False,
    )
    pairs_q, pairs_d = np.nonzero(top.indices >= 0)
    chosen_doc = top.indices[pairs_q, pairs_d]
    # queries selecting each document, as one CSR-like structure
    order = np.argsort(chosen_doc, kind="stable")
    queries_by_doc = pairs_q[order]
    doc_sorted = chosen_doc[order]
    starts = np.searchsorted(doc_sorted, np.arange(len(doc_vectors)), side="left")
    stops = np.searchsorted(doc_sorted, np.arange(len(doc_vectors)), side="right")

    indices = np.full((n_queries, depth), -1, dtype=np.int64)
    values = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    cand_q, cand_i, cand_s = [], [], []
    waiting, fold_at = 0, max(candidate_rows, n_queries * depth)
    computed = 0
    bar = tqdm(total=n_items, desc=f"hierarchical search (top {top_docs} docs)", unit="page", disable=not progress)
    with torch.inference_mode(), _matmul_precision(precision):
        for shard in shards:
            docs_here = doc_of_item[shard.first_index : shard.first_index + len(shard)]
            nonempty = shard.lengths > 0
            for doc in np.unique(docs_here):
                selecting = queries_by_doc[starts[doc] : stops[doc]]
                members = np.flatnonzero((docs_here == doc) & nonempty)
                if not len(selecting) or not len(members):
                    continue
                member_blocks = _page_blocks(shard.subset(members), page_block_tokens, target, precision=precision)
                blocks = [(torch.from_numpy(members[pos.cpu().numpy()]).to(target), b) for pos, b in member_blocks]
                scores = torch.full((len(selecting), len(shard)), float("-inf"), device=target)
                for start in range(0, len(selecting), query_batch_size):
                    batch = selecting[start : start + query_batch_size]
                    flat = queries.padded_fp32(batch, target, pad="zero").reshape(-1, queries.dim)
                    flat = _as_operand(flat, precision)
                    scores[start : start + len(batch)] = _maxsim(flat, len(batch), blocks, len(shard))
                block_scores = scores[:, torch.from_numpy(members).to(target)].cpu().numpy()
                computed += block_scores.size
                cand_q.append(np.repeat(selecting, len(members)))
                cand_i.append(np.tile(members + shard.first_index, len(selecting)))
                cand_s.append(block_scores.reshape(-1))
                waiting += block_scores.size
                if waiting >= fold_at:
                    _fold_candidates(indices, values, cand_q, cand_i, cand_s)
                    waiting = 0
            bar.update(len(shard))
    bar.close()
    _fold_candidates(indices, values, cand_q, cand_i, cand_s)
    if stats is not None:
        exhaustive = n_queries * n_items
        stats.update(
            page_scores=int(computed),
            exhaustive_page_scores=int(exhaustive),
            page_score_fraction=round(computed / exhaustive, 6) if exhaustive else 0.0,
            document_scores=int(n_queries * len(doc_vectors)),
            top_docs=top_docs,
        )
    return TopN(indices, values)


def document_shards(doc_vectors: RaggedVectors, max_tokens: int) -> Iterator[RaggedVectors]:
    """``doc_vectors`` as consecutive shards of whole documents, each of at most ``max_tokens``
    vectors (or one document, if longer), views of its arrays with ``first_index`` set."""
    if max_tokens < 1:
        raise ValueError(f"doc_shard_tokens must be >= 1, got {max_tokens!r}")
    offsets, start = doc_vectors.offsets, 0
    while start < len(doc_vectors):
        stop = int(np.searchsorted(offsets, offsets[start] + max_tokens, side="right")) - 1
        stop = min(max(stop, start + 1), len(doc_vectors))
        yield RaggedVectors(
            doc_vectors.vectors[offsets[start] : offsets[stop]],
            offsets[start : stop + 1] - offsets[start],
            doc_vectors.bfloat16,
            doc_vectors.first_index + start,
            doc_vectors.source,
        )
        start = stop


def _fold_candidates(indices: np.ndarray, values: np.ndarray, cand_q: list, cand_i: list, cand_s: list) -> None:
    """Fold the waiting candidate rows (lists of arrays, emptied here) into the running top-N
    ``indices`` / ``values`` ((n_queries, depth), best first, -1 / -inf where empty), in place.

    Only the queries with candidates are touched: their held entries and their candidates are
    sorted together, per query by score descending, then item index.
    """
    if not cand_q:
        return
    q, i = np.concatenate(cand_q), np.concatenate(cand_i)
    s = np.concatenate(cand_s).astype(np.float32)
    cand_q.clear(), cand_i.clear(), cand_s.clear()
    depth = indices.shape[1]
    touched = np.unique(q)
    held = indices[touched] >= 0
    q = np.concatenate([np.repeat(touched, held.sum(axis=1)), q])
    i = np.concatenate([indices[touched][held], i])
    s = np.concatenate([values[touched][held], s])
    ordered = np.lexsort((i, -s, q))  # per query: score descending, then item index
    q, i, s = q[ordered], i[ordered], s[ordered]
    rank = np.arange(len(q)) - np.searchsorted(q, q, side="left")
    keep = rank < depth
    indices[touched], values[touched] = -1, -np.inf
    indices[q[keep], rank[keep]] = i[keep]
    values[q[keep], rank[keep]] = s[keep]
