"""Exact search over stored embeddings: MaxSim (multi-vector) and dot product (single-vector).

One code path serves both kinds: a single-vector embedding is a multi-vector one with one token,
and MaxSim over one token is the dot product.

The corpus is streamed shard by shard; each query keeps a running top-N, so memory is bounded by
one shard (upcast to fp32) plus one query batch's score buffer, whatever the corpus size, and no
(queries x pages) score matrix is ever materialised.

Exactness notes:
- Pages are scored in blocks of similar length, each padded to its block's longest page by
  repeating one of the page's own token vectors. A repeated token cannot change a maximum, so
  the padded MaxSim equals the unpadded one. (colpali-engine's ``score_multi_vector`` pads with
  zero vectors instead, which
  raises a page's score wherever all of a query token's dot products with it are negative;
  its scores equal ours whenever the pages of a batch have equal lengths.)
- Queries are padded with zero vectors: a zero query token adds exactly 0, as in colpali-engine.
- Ties are broken by page index (the benchmark's page order, i.e. page_id), so the top-N does not
  depend on the query or page batch sizes.

Integrity: a NaN or Inf among the vectors would make every score of its page NaN, and such a
page would silently fall out of the ranking. Every block of vectors is checked finite as it is
upcast (one elementwise pass, small next to the matrix products that follow), and a failure
raises :class:`NonFiniteVectorsError` naming the vectors' ``source`` (the shard's directory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.errors import VldocirError
from vldocir.retrieval.vectors import RaggedVectors, resolve_device


class NonFiniteVectorsError(VldocirError, ValueError):
    """Stored vectors hold NaN or Inf; ``source`` names where they were read from."""

    def __init__(self, source: str, first_index: int):
        self.source, self.first_index = source, first_index
        where = source or f"in-memory vectors (first item {first_index})"
        super().__init__(f"{where}: the stored vectors hold non-finite values (NaN or Inf)")


def _check_finite(blocks: Sequence[torch.Tensor], vectors: RaggedVectors) -> None:
    """Raise :class:`NonFiniteVectorsError` unless every block is finite (one device sync in all)."""
    if blocks and not bool(torch.stack([torch.isfinite(b).all() for b in blocks]).all()):
        raise NonFiniteVectorsError(vectors.source, vectors.first_index)


@dataclass
class TopN:
    """The best ``depth`` items per query, best first; ties broken by item index ascending.

    ``indices`` (n_queries, depth) int64 global item indices, -1 where fewer items exist;
    ``scores`` (n_queries, depth) float32, -inf where ``indices`` is -1.
    """

    indices: np.ndarray
    scores: np.ndarray


def _merge(best_scores, best_indices, new_scores, new_indices, depth):
    """Keep the ``depth`` best of the union, ordered by (score desc, index asc).

    ``best_*`` are already in that order and all their indices are lower than ``new_indices``
    (which ascend), so a stable descending sort of the concatenation gives exactly that order.
    """
    scores = torch.cat([best_scores, new_scores], dim=1)
    indices = torch.cat([best_indices, new_indices.expand(scores.shape[0], -1)], dim=1)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :depth]
    return scores.gather(1, order), indices.gather(1, order)


def _page_blocks(
    shard: RaggedVectors, page_block_tokens: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A shard's pages as fp32 blocks of about ``page_block_tokens`` tokens, upcast once per shard.

    Pages are grouped by length (sorted), so padding to a block's longest page wastes little when
    token counts vary (pages of other aspect ratios, image-splitting processors). Returns
    (positions within the shard, (n_block, width, dim) tensor) pairs. Raises
    :class:`NonFiniteVectorsError` if the shard holds NaN or Inf.
    """
    lengths = shard.lengths
    order = np.argsort(lengths, kind="stable")
    blocks, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * max(int(lengths[order[stop]]), 1) <= page_block_tokens:
            stop += 1
        members = order[start:stop]
        blocks.append((torch.from_numpy(members).to(device), shard.padded_fp32(members, device)))
        start = stop
    _check_finite([block for _, block in blocks], shard)
    return blocks


def _maxsim(flat_queries: torch.Tensor, n_batch: int, blocks, n_items: int) -> torch.Tensor:
    """(n_batch, n_items) MaxSim of a zero-padded query batch, flattened to (n_batch * Lq, dim),
    against items given as :func:`_page_blocks`."""
    query_tokens = flat_queries.shape[0] // n_batch
    scores = torch.empty((n_batch, n_items), device=flat_queries.device)
    for positions, block in blocks:
        n_block, width, dim = block.shape
        sims = flat_queries @ block.view(-1, dim).T  # (B*Lq, nb*Lp)
        scores[:, positions] = sims.view(n_batch, query_tokens, n_block, width).amax(dim=3).sum(dim=1)
    return scores


Context = Callable[[RaggedVectors], tuple[RaggedVectors, np.ndarray]]
"""For a shard: the context vectors of the groups (documents) its items belong to, as one
:class:`RaggedVectors` with an item per group, and each item's group position in it."""


def exact_search(
    queries: RaggedVectors,
    shards: Iterable[RaggedVectors],
    depth: int,
    *,
    context: Context | None = None,
    query_batch_size: int = 32,
    page_block_tokens: int = 4096,
    device: str = "auto",
    total_items: int | None = None,
    progress: bool = True,
) -> TopN:
    """MaxSim (sum over query tokens of the max dot product over page tokens), top ``depth`` per query.

    With ``context``, an item's score is its MaxSim plus the MaxSim of the query against its
    group's context vectors (document-context scoring, paper Eq. 8), still exact: the group term
    is computed for every item, shard by shard.

    Args:
        queries: the query token vectors (any float dtype; upcast to fp32).
        shards: the corpus in order, each a :class:`RaggedVectors` whose ``first_index`` places it;
            items with no tokens (pages skipped as undecodable) are never returned.
        depth: N, the number of items kept per query.
        query_batch_size: queries scored together (memory and speed only; results do not change).
        page_block_tokens: page tokens per matrix product (memory and speed only).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``.
        total_items: corpus size, for the progress bar.

    Raises:
        NonFiniteVectorsError: a shard (or the queries, or a context) holds NaN or Inf; it names
            the vectors' ``source``. Such a page is never silently left out of the ranking.
    """
    target = resolve_device(device)
    n_queries = len(queries)
    # Queries of similar length share a batch, so zero padding wastes little arithmetic.
    order = np.argsort(queries.lengths, kind="stable")
    batches = [order[i : i + query_batch_size] for i in range(0, n_queries, query_batch_size)]
    query_tensors = [queries.padded_fp32(batch, target, pad="zero").reshape(-1, queries.dim) for batch in batches]
    _check_finite(query_tensors, queries)
    best = [
        (
            torch.full((len(b), 0), float("-inf"), device=target),
            torch.zeros((len(b), 0), dtype=torch.int64, device=target),
        )
        for b in batches
    ]

    bar = tqdm(total=total_items, desc="exact search", unit="page", disable=not progress)
    with torch.inference_mode():
        for shard in shards:
            n_items = len(shard)
            if n_items == 0:
                continue
            blocks = _page_blocks(shard, page_block_tokens, target)
            empty = torch.from_numpy(shard.lengths == 0).to(target)
            shard_indices = torch.arange(n_items, device=target, dtype=torch.int64) + shard.first_index
            if context is not None:
                groups, group_of_item = context(shard)
                group_blocks = _page_blocks(groups, page_block_tokens, target)
                group_of_item = torch.from_numpy(np.asarray(group_of_item, dtype=np.int64)).to(target)
            for b, flat_queries in enumerate(query_tensors):
                n_batch = len(batches[b])
                scores = _maxsim(flat_queries, n_batch, blocks, n_items)
                if context is not None:
                    scores += _maxsim(flat_queries, n_batch, group_blocks, len(groups))[:, group_of_item]
                scores[:, empty] = float("-inf")
                best[b] = _merge(best[b][0], best[b][1], scores, shard_indices[None, :], depth)
            bar.update(n_items)
    bar.close()

    indices = np.full((n_queries, depth), -1, dtype=np.int64)
    values = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    for batch, (scores, idx) in zip(batches, best):
        scores, idx = scores.cpu().numpy(), idx.cpu().numpy()
        valid = np.isfinite(scores)
        idx = np.where(valid, idx, -1)
        width = scores.shape[1]
        indices[batch, :width] = idx
        values[batch, :width] = scores
    return TopN(indices, values)
