"""Searching the compressed pages (:func:`compressed_search`): every page by MaxSim over its stored
vectors, or, with a centroid index, the candidates of PLAID's centroid interaction
(:func:`_centroid_interaction`, probed through the inverted lists with ``nprobe``), optionally cut to
the best by their bag means, rescored by MaxSim.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from tqdm.auto import tqdm

from vldocir.retrieval.compressed.pages import CompressedPages
from vldocir.retrieval.search import TopN, exact_search
from vldocir.retrieval.vectors import RaggedVectors, concatenated_ranges

CANDIDATE_LOOKUPS = 1 << 20
"""Centroid-interaction lookups (query tokens x bag entries) per step: 4 MB of fp32 in cache."""


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
    index, else the ``candidates`` best of the centroid index (:mod:`vldocir.retrieval.compressed`), of which,
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
