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

Speed on CPU (perf/bench_maxsim.py; the aim is the rate of a plain fp32 matrix product):
- A shard is upcast to fp32 once, into a buffer reused for every shard, and serves every query
  batch. Fresh multi-megabyte tensors cost page faults on every allocation, so the products write
  into per-thread buffers too.
- Each product is one tile of at most :data:`CPU_TILE_SCORES` scores (page tokens as rows, query
  tokens as columns), maxed over page tokens right after it while it is still in the core's L2
  cache. The max runs down the columns, vectorised across the query tokens; a page longer than
  a tile is scored in parts whose maxima are merged.
- ``torch.get_num_threads()`` worker threads (set once per job, :mod:`vldocir.threads`) each score
  whole query batches with single-threaded products, pulling the next batch when done. No product
  waits at a barrier for a thread the OS has descheduled, so the rate degrades with the machine's
  load instead of collapsing; each tile stays in its own core's cache.

Precision (``precision``) is that of the products' operands, never of the accumulation: scores
are accumulated, maxed and summed in fp32 whatever it is.
- ``fp32``: the arithmetic above, bit for bit, also on CUDA where the process allowed TF32. There
  it leaves the tensor cores idle (H200, dense: 67 fp32 TFLOP/s against 495 TF32 and 989 bf16).
- ``tf32`` (``auto`` on CUDA): the tensor cores read the operands rounded to 11 significant bits
  and accumulate in fp32. The store holds page, query and context vectors in fp16 or bf16 (11 and 8
  significant bits), which TF32 represents exactly, so the products are those of fp32 but for the
  order of the fp32 additions: the same rankings up to ties within rounding. Vectors held in fp32
  (hierarchical search's pooled document vectors) are rounded to 11 bits.
- ``bf16``: both operands rounded to 8 significant bits (fp16 pages lose 3), multiplied into fp32
  (``torch.mm(..., out_dtype=torch.float32)``); scores move by at most about 2^-7 of
  sum_t |q_t| max_p |p| (the test's bound). Twice TF32's peak, but every product also writes its
  (query tokens x page tokens) fp32 scores for the max to read back, 8 bytes per 2 x dim FLOPs
  whatever the operands, which can bound both before their peaks (perf/bench_gpu.py measures the
  three); bf16 blocks take half the memory of fp32 ones.
On CPU ``auto`` is ``fp32`` and ``tf32`` computes fp32 (the TF32 switch is CUDA's); ``bf16``
computes what CUDA's does, for testing: the same bf16-rounded operands held in fp32 (a product of two
bf16 values is exact in fp32), no faster than fp32. The fp32/TF32 choice is torch's process-wide
switch (``torch.backends.cuda.matmul.fp32_precision``), set for the search and put back after it,
also on error; a CUDA product another thread ran meanwhile would follow it too.

Integrity: a NaN or Inf among the vectors would make every score of its page NaN, and such a
page would silently fall out of the ranking. Every shard is checked finite as it is upcast (one
sum: a sum is finite only if every term is; only a non-finite sum, which overflow can also cause,
pays the elementwise check), and a failure raises :class:`NonFiniteVectorsError` naming the
vectors' ``source`` (the shard's directory).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

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
    """Raise :class:`NonFiniteVectorsError` unless every block is finite (one device sync in all).

    A sum is finite only if every term is (NaN and Inf propagate; Inf - Inf is NaN), so a finite
    sum per block proves it; a non-finite one (also reached by overflow) is settled elementwise.
    """
    if not blocks:
        return
    if bool(torch.isfinite(torch.stack([b.sum() for b in blocks])).all()):
        return
    if not bool(torch.stack([torch.isfinite(b).all() for b in blocks]).all()):
        raise NonFiniteVectorsError(vectors.source, vectors.first_index)


PRECISIONS = ("auto", "fp32", "tf32", "bf16")
"""``precision`` values of :func:`exact_search` (module notes)."""


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto`` -> ``tf32`` on CUDA, ``fp32`` elsewhere; other names are returned as they are."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "tf32" if device.type == "cuda" else "fp32"
    return precision


def _operand_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The dtype products read: bf16 for ``bf16`` on CUDA; fp32 otherwise (on CPU, bf16 values in fp32)."""
    return torch.bfloat16 if precision == "bf16" and device.type == "cuda" else torch.float32


def _as_operand(tensor: torch.Tensor, precision: str) -> torch.Tensor:
    """An fp32 tensor as a product operand of ``precision`` (see :func:`_operand_dtype`)."""
    if precision != "bf16":
        return tensor
    return tensor.to(torch.bfloat16).to(_operand_dtype(precision, tensor.device))


def _product(pages: torch.Tensor, queries: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """(m, dim) x (n, dim) -> ``pages @ queries.T`` written into the (m, n) fp32 ``out``: one row of
    scores per page token, so that the max over a page's tokens runs down columns, vectorised
    across the query tokens.

    bf16 operands (CUDA) are multiplied on the tensor cores with fp32 accumulation and fp32 results
    (``out_dtype``): only the operands are rounded, never the scores the max and sums read.
    """
    if queries.dtype == torch.float32:
        return torch.mm(pages, queries.T, out=out)
    return torch.mm(pages, queries.T, out_dtype=torch.float32, out=out)


@contextmanager
def _matmul_precision(precision: str) -> Iterator[None]:
    """CUDA's fp32 products inside the block in TF32 (``tf32``) or in full fp32 (``fp32``, whatever
    the process set), torch's setting restored after; ``bf16`` products do not read it.

    Read and written through ``fp32_precision`` (torch's current API): torch refuses to read a mix
    of its legacy and current APIs in some orders, and this one reads back whatever either set.
    """
    if precision == "bf16":
        yield
        return
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = saved


CPU_TILE_SCORES = 1 << 18
"""On CPU, the most (page token x query token) scores one matrix product writes: 1 MB of fp32,
about a core's L2 cache on current x86 machines, from which the max over page tokens reads them
back (256 tokens of a page by the 1,024 query tokens of 32 queries). perf/bench_maxsim.py
(perf/README.md): at 2,000 pages, 0.90x (1 thread) and 0.92x (2 threads) the best fp32 matmul
rate with tiles of 2^18, against 0.87x / 0.81x with 2^17, 0.82x / 0.73x with 2^19 and 0.73x /
0.54x with 2^22. On CUDA a block is one product."""

MIN_TILE_PAGE_TOKENS = 16
"""Page tokens a CPU tile holds at least; a query batch with more query tokens than
``CPU_TILE_SCORES / MIN_TILE_PAGE_TOKENS`` is split across tiles instead."""


class _Buffers:
    """Flat scratch tensors (fp32 unless asked) reused from call to call, one set per thread."""

    def __init__(self, device: torch.device):
        self.device, self._tensors = device, {}

    def get(self, name: str, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        tensor = self._tensors.get(name)
        if tensor is None or tensor.numel() < numel or tensor.dtype != dtype:
            tensor = self._tensors[name] = torch.empty(numel, device=self.device, dtype=dtype)
        return tensor[:numel]


@dataclass
class TopN:
    """The best ``depth`` items per query, best first; ties broken by item index ascending.

    ``indices`` (n_queries, depth) int64 global item indices, -1 where fewer items exist;
    ``scores`` (n_queries, depth) float32, -inf where ``indices`` is -1.
    """

    indices: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class _ShardBlocks:
    """One shard's (or its groups') blocks as :func:`_page_blocks` gives them, with its item count;
    for a shard, its empty items and their global indices, for groups, each item's group."""

    blocks: list[tuple[torch.Tensor, torch.Tensor]]
    n_items: int
    empty: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    of_item: torch.Tensor | None = None


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
    shard: RaggedVectors,
    page_block_tokens: int,
    device: torch.device,
    buffers: _Buffers | None = None,
    precision: str = "fp32",
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A shard's pages as blocks of about ``page_block_tokens`` tokens, converted once per shard to
    the operands of ``precision`` (fp32, or bf16 on CUDA for ``bf16``; see :func:`_operand_dtype`).

    Pages are grouped by length (sorted), so padding to a block's longest page wastes little when
    token counts vary (pages of other aspect ratios, image-splitting processors). Returns
    (positions within the shard, (n_block, width, dim) tensor) pairs. With ``buffers`` the blocks
    are views of its ``"pages"`` tensor, valid until the next call with the same buffers.
    Raises :class:`NonFiniteVectorsError` if the shard holds NaN or Inf.
    """
    lengths = shard.lengths
    order = np.argsort(lengths, kind="stable")
    groups, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * max(int(lengths[order[stop]]), 1) <= page_block_tokens:
            stop += 1
        groups.append(order[start:stop])
        start = stop
    layout = [shard.padded_rows(members) if len(shard.vectors) else (None, 1) for members in groups]
    n_rows = sum(len(members) * width for members, (_, width) in zip(groups, layout, strict=True))
    dtype = _operand_dtype(precision, device)
    flat = (
        buffers.get("pages", n_rows * shard.dim, dtype)
        if buffers
        else torch.empty(n_rows * shard.dim, device=device, dtype=dtype)
    )
    flat = flat.view(n_rows, shard.dim)
    if len(shard.vectors):
        shard.fp32_into(np.concatenate([rows for rows, _ in layout]), flat)  # copy_ converts to flat's dtype
        if precision == "bf16" and dtype == torch.float32:
            flat.copy_(flat.to(torch.bfloat16))  # bf16 values held in fp32 (CPU)
    else:
        flat.zero_()
    blocks, row = [], 0
    for members, (_, width) in zip(groups, layout, strict=True):
        block = flat[row : row + len(members) * width].view(len(members), width, shard.dim)
        row += len(members) * width
        empty = lengths[members] == 0
        if empty.any():
            block[torch.from_numpy(empty).to(device)] = 0
        blocks.append((torch.from_numpy(members).to(device), block))
    _check_finite([flat], shard)
    return blocks


def _maxsim(
    flat_queries: torch.Tensor,
    n_batch: int,
    blocks,
    n_items: int,
    buffers: _Buffers | None = None,
    tile_scores: int | None = None,
) -> torch.Tensor:
    """(n_batch, n_items) fp32 MaxSim of a zero-padded query batch, flattened to (n_batch * Lq, dim),
    against items given as :func:`_page_blocks` (queries and blocks of one precision's operands).

    Each product holds page tokens as rows and query tokens as columns (:func:`_product`).
    ``tile_scores`` (CPU): at most about that many scores a product (:func:`_tile_steps`): whole
    pages, or a page in parts whose maxima are merged, so the max reads the scores from the cache
    the product left them in. ``buffers`` hold the outputs from call to call.
    """
    device = flat_queries.device
    n_rows, dim = flat_queries.shape
    query_tokens = n_rows // n_batch
    n_columns = sum(len(positions) for positions, _ in blocks)
    token_max = (
        buffers.get("token_max", n_columns * n_rows) if buffers else torch.empty(n_columns * n_rows, device=device)
    ).view(n_columns, n_rows)

    def scratch(name: str, rows: int, columns: int) -> torch.Tensor:
        flat = buffers.get(name, rows * columns) if buffers else torch.empty(rows * columns, device=device)
        return flat.view(rows, columns)

    column = 0
    for _, block in blocks:
        n_block, width, _ = block.shape
        pages = block.view(-1, dim)
        query_step, page_step, part = _tile_steps(n_batch, query_tokens, n_block, width, tile_scores)
        for q0 in range(0, n_batch, query_step):
            rows = slice(q0 * query_tokens, min(n_batch, q0 + query_step) * query_tokens)
            queries = flat_queries[rows]
            n_query_rows = len(queries)
            if part >= width:  # whole pages a tile
                sims = scratch("sims", page_step * width, n_query_rows)
                for p0 in range(0, n_block, page_step):
                    p1 = min(n_block, p0 + page_step)
                    tile = _product(pages[p0 * width : p1 * width], queries, sims[: (p1 - p0) * width])
                    torch.amax(
                        tile.view(p1 - p0, width, n_query_rows), dim=1, out=token_max[column + p0 : column + p1, rows]
                    )
                continue
            # One page a tile, in parts: each part's max into a row of part_max, then their max.
            starts = range(0, width, part)
            sims, part_max = scratch("sims", part, n_query_rows), scratch("part_max", len(starts), n_query_rows)
            for p in range(n_block):
                page = pages[p * width : (p + 1) * width]
                for i, t0 in enumerate(starts):
                    tile = _product(page[t0 : t0 + part], queries, sims[: min(part, width - t0)])
                    torch.amax(tile, dim=0, keepdim=True, out=part_max[i : i + 1])
                torch.amax(part_max, dim=0, keepdim=True, out=token_max[column + p : column + p + 1, rows])
        column += n_block
    scores = torch.empty((n_batch, n_items), device=device)
    if blocks:
        positions = torch.cat([positions for positions, _ in blocks])
        scores[:, positions] = token_max.view(n_columns, n_batch, query_tokens).sum(dim=2).T
    return scores


def _tile_steps(
    n_queries: int, query_tokens: int, n_pages: int, width: int, tile_scores: int | None
) -> tuple[int, int, int]:
    """(queries, pages, page tokens) per product of a block of ``n_pages`` pages of ``width``
    tokens: the whole block without a budget. Else every query, unless their tokens times
    :data:`MIN_TILE_PAGE_TOKENS` exceed the budget (then as many as fit), by as many whole pages as
    fit, or by one page in as few parts as fit; each split evenly (two tiles of 16 queries rather
    than 21 and 11, parts of 384 tokens rather than 512 and 256)."""
    if not tile_scores:
        return n_queries, n_pages, width
    query_step = n_queries
    if n_queries * query_tokens * MIN_TILE_PAGE_TOKENS > tile_scores:
        per_tile = max(tile_scores // (query_tokens * MIN_TILE_PAGE_TOKENS), 1)
        query_step = -(-n_queries // -(-n_queries // per_tile))
    page_rows = max(tile_scores // (query_step * query_tokens), 1)
    if width <= page_rows:
        per_tile = page_rows // width
        return query_step, -(-n_pages // -(-n_pages // per_tile)), width
    return query_step, 1, -(-width // -(-width // page_rows))


@contextmanager
def _scoring_threads(n_threads: int, device: torch.device) -> Iterator[Callable]:
    """``run(task, items)``: ``task(item, buffers)`` for every item, on ``n_threads`` threads of one
    torch thread each (inline when 1), each thread with its own :class:`_Buffers`; returns when all
    are done and raises the first failure.

    ``torch.set_num_threads`` is per thread for OpenMP and MKL, but it also sets the default of
    threads started later; the caller's own count is put back on exit.
    """
    if n_threads <= 1:
        buffers = _Buffers(device)
        yield lambda task, items: [task(item, buffers) for item in items]
        return
    local = threading.local()

    def start() -> None:
        torch.set_num_threads(1)
        local.buffers = _Buffers(device)

    def run_one(task, item) -> None:
        with torch.inference_mode():  # grad mode is per thread
            task(item, local.buffers)

    saved = torch.get_num_threads()
    pool = ThreadPoolExecutor(n_threads, thread_name_prefix="maxsim", initializer=start)
    try:
        yield lambda task, items: list(pool.map(lambda item: run_one(task, item), items))
    finally:
        pool.shutdown()
        torch.set_num_threads(saved)


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
    precision: str = "auto",
    total_items: int | None = None,
    progress: bool = True,
    cpu_tile_scores: int | None = None,
) -> TopN:
    """MaxSim (sum over query tokens of the max dot product over page tokens), top ``depth`` per query.

    With ``context``, an item's score is its MaxSim plus the MaxSim of the query against its
    group's context vectors (document-context scoring, paper Eq. 8), still exact: the group term
    is computed for every item, shard by shard.

    On CPU, query batches are scored on ``torch.get_num_threads()`` threads (see the module notes).

    Args:
        queries: the query token vectors (any float dtype; upcast to fp32).
        shards: the corpus in order, each a :class:`RaggedVectors` whose ``first_index`` places it;
            items with no tokens (pages skipped as undecodable) are never returned.
        depth: N, the number of items kept per query.
        query_batch_size: queries scored together, the unit of work of a scoring thread (memory
            and speed only; results do not change).
        page_block_tokens: page tokens per block (memory and speed only); on CPU a block's product
            is computed in tiles of at most :data:`CPU_TILE_SCORES` scores.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``.
        precision: the products' operands, one of :data:`PRECISIONS`: ``auto`` (``tf32`` on CUDA,
            ``fp32`` elsewhere), ``fp32``, ``tf32`` or ``bf16`` (module notes). Scores are always
            accumulated, maxed and summed in fp32.
        total_items: corpus size, for the progress bar.
        cpu_tile_scores: on CPU, the most scores one product writes (default
            :data:`CPU_TILE_SCORES`; speed only, perf/bench_maxsim.py ``--tile-scores`` compares).

    Raises:
        NonFiniteVectorsError: a shard (or the queries, or a context) holds NaN or Inf; it names
            the vectors' ``source``. Such a page is never silently left out of the ranking.
    """
    target = resolve_device(device)
    precision = resolve_precision(precision, target)
    n_queries = len(queries)
    # Queries of similar length share a batch, so zero padding wastes little arithmetic.
    order = np.argsort(queries.lengths, kind="stable")
    batches = [order[i : i + query_batch_size] for i in range(0, n_queries, query_batch_size)]
    query_tensors = [
        _as_operand(queries.padded_fp32(batch, target, pad="zero").reshape(-1, queries.dim), precision)
        for batch in batches
    ]
    _check_finite(query_tensors, queries)
    best = [
        (
            torch.full((len(b), 0), float("-inf"), device=target),
            torch.zeros((len(b), 0), dtype=torch.int64, device=target),
        )
        for b in batches
    ]
    on_cpu = target.type == "cpu"
    tile_scores = (cpu_tile_scores or CPU_TILE_SCORES) if on_cpu else None
    shard_buffers, context_buffers = _Buffers(target), _Buffers(target)

    def score_batch(b: int, buffers: _Buffers, *, shard: _ShardBlocks, group: _ShardBlocks | None) -> None:
        """Query batch ``b`` against one shard's blocks (and its groups'), merged into ``best[b]``."""
        n_batch = len(batches[b])
        scores = _maxsim(query_tensors[b], n_batch, shard.blocks, shard.n_items, buffers, tile_scores)
        if group is not None:
            scores += _maxsim(query_tensors[b], n_batch, group.blocks, group.n_items, buffers, tile_scores)[
                :, group.of_item
            ]
        scores[:, shard.empty] = float("-inf")
        best[b] = _merge(best[b][0], best[b][1], scores, shard.indices[None, :], depth)

    bar = tqdm(total=total_items, desc="exact search", unit="page", disable=not progress)
    with (
        torch.inference_mode(),
        _matmul_precision(precision),
        _scoring_threads(torch.get_num_threads() if on_cpu else 1, target) as pool,
    ):
        for shard in shards:
            n_items = len(shard)
            if n_items == 0:
                continue
            shard_blocks = _ShardBlocks(
                blocks=_page_blocks(shard, page_block_tokens, target, shard_buffers, precision),
                n_items=n_items,
                empty=torch.from_numpy(shard.lengths == 0).to(target),
                indices=torch.arange(n_items, device=target, dtype=torch.int64) + shard.first_index,
            )
            group_blocks = None
            if context is not None:
                groups, group_of_item = context(shard)
                group_blocks = _ShardBlocks(
                    blocks=_page_blocks(groups, page_block_tokens, target, context_buffers, precision),
                    n_items=len(groups),
                    of_item=torch.from_numpy(np.asarray(group_of_item, dtype=np.int64)).to(target),
                )
            # the shard's blocks are bound now; pool() returns once every batch is scored
            pool(partial(score_batch, shard=shard_blocks, group=group_blocks), range(len(batches)))
            bar.update(n_items)
    bar.close()

    indices = np.full((n_queries, depth), -1, dtype=np.int64)
    values = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    for batch, (scores, idx) in zip(batches, best, strict=True):
        scores, idx = scores.cpu().numpy(), idx.cpu().numpy()
        valid = np.isfinite(scores)
        idx = np.where(valid, idx, -1)
        width = scores.shape[1]
        indices[batch, :width] = idx
        values[batch, :width] = scores
    return TopN(indices, values)
