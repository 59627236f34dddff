"""Exact search against colpali-engine's own scoring, and its invariances."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

from vldocir.retrieval.embeddings import to_storage
from vldocir.retrieval.search import exact_search
from vldocir.retrieval.vectors import RaggedVectors

score_multi_vector = BaseVisualRetrieverProcessor.score_multi_vector
score_single_vector = BaseVisualRetrieverProcessor.score_single_vector


def random_items(rng, n, lengths, dim=24):
    return [
        rng.standard_normal((int(rng.integers(*lengths)) if isinstance(lengths, tuple) else lengths, dim)).astype(
            np.float32
        )
        for _ in range(n)
    ]


def shard(items, size, dtype="float16"):
    """Split fp32 items into RaggedVectors shards of ``size`` items, stored in 16 bits."""
    out = []
    for start in range(0, len(items), size):
        packed = RaggedVectors.from_list(items[start : start + size], first_index=start)
        packed.vectors = to_storage(packed.vectors, dtype)
        packed.bfloat16 = dtype == "bfloat16"
        out.append(packed)
    return out


def stored_fp32(items, dtype):
    """What the 16-bit store gives back, as fp32 tensors (the oracle sees the same numbers)."""
    out = []
    for x in items:
        stored = torch.from_numpy(to_storage(x, dtype))
        out.append((stored.view(torch.bfloat16) if dtype == "bfloat16" else stored).float())
    return out


def reference_top(scores: torch.Tensor, depth: int):
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :depth]
    return order.numpy(), scores.gather(1, order).numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_maxsim_equals_colpali_engine_on_equal_length_pages(dtype):
    rng = np.random.default_rng(1)
    queries = random_items(rng, 45, (3, 30))
    pages = random_items(rng, 300, 40)  # equal lengths: colpali-engine's zero padding is inert
    top = exact_search(
        RaggedVectors.from_list(queries),
        shard(pages, 64, dtype),
        depth=20,
        query_batch_size=7,
        page_block_tokens=333,
        device="cpu",
        progress=False,
    )
    reference = score_multi_vector([torch.from_numpy(q) for q in queries], stored_fp32(pages, dtype), device="cpu")
    ref_idx, ref_scores = reference_top(reference, 20)
    np.testing.assert_array_equal(top.indices, ref_idx)
    # fp32 accumulation over 24-d products in different orders: agree to ~1e-6 relative.
    np.testing.assert_allclose(top.scores, ref_scores, rtol=1e-5, atol=1e-4)


def test_variable_length_pages_match_per_page_maxsim():
    """With ragged pages colpali-engine must be called one page at a time (its batch padding adds
    zero vectors, which raise scores); our padding repeats a real token and needs no such care."""
    rng = np.random.default_rng(2)
    queries = random_items(rng, 20, (2, 12))
    pages = random_items(rng, 90, (1, 50))
    top = exact_search(
        RaggedVectors.from_list(queries),
        shard(pages, 32, "float16"),
        depth=90,
        query_batch_size=6,
        page_block_tokens=64,
        device="cpu",
        progress=False,
    )
    qs = [torch.from_numpy(q) for q in queries]
    ps = stored_fp32(pages, "float16")
    reference = torch.cat([score_multi_vector(qs, [p], batch_size=1, device="cpu") for p in ps], dim=1)
    ref_idx, ref_scores = reference_top(reference, 90)
    np.testing.assert_array_equal(top.indices, ref_idx)
    np.testing.assert_allclose(top.scores, ref_scores, rtol=1e-5, atol=1e-4)
    padded = score_multi_vector(qs, ps, batch_size=90, device="cpu")
    assert (padded >= reference - 1e-4).all() and (padded > reference + 1e-3).any(), (
        "zero padding should inflate some scores"
    )


def test_single_vector_is_the_dot_product():
    rng = np.random.default_rng(3)
    queries = random_items(rng, 30, 1, dim=64)
    pages = random_items(rng, 500, 1, dim=64)
    top = exact_search(RaggedVectors.from_list(queries), shard(pages, 128), depth=50, device="cpu", progress=False)
    reference = score_single_vector(
        [torch.from_numpy(q[0]) for q in queries], [p[0] for p in stored_fp32(pages, "float16")], device="cpu"
    )
    ref_idx, ref_scores = reference_top(reference, 50)
    np.testing.assert_array_equal(top.indices, ref_idx)
    np.testing.assert_allclose(top.scores, ref_scores, rtol=1e-5, atol=1e-5)


def test_rankings_do_not_depend_on_batch_sizes_or_shard_size():
    rng = np.random.default_rng(4)
    queries = RaggedVectors.from_list(random_items(rng, 70, (4, 20)))
    pages = random_items(rng, 257, (10, 30))
    a = exact_search(
        queries, shard(pages, 100), depth=25, query_batch_size=3, page_block_tokens=50, device="cpu", progress=False
    )
    b = exact_search(
        queries,
        shard(pages, 257),
        depth=25,
        query_batch_size=64,
        page_block_tokens=100_000,
        device="cpu",
        progress=False,
    )
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-5)


def test_ties_are_broken_by_page_index_across_shards():
    page = np.ones((3, 8), np.float32) / 8
    pages = [page.copy() for _ in range(40)]  # every page scores the same
    queries = RaggedVectors.from_list([np.ones((2, 8), np.float32)])
    for size in (1, 7, 40):
        top = exact_search(queries, shard(pages, size), depth=10, device="cpu", progress=False)
        np.testing.assert_array_equal(top.indices[0], np.arange(10))


def test_pages_without_tokens_are_never_returned_and_short_corpora_pad_with_minus_one():
    rng = np.random.default_rng(5)
    pages = random_items(rng, 6, 5)
    pages[2] = np.zeros((0, 24), np.float32)  # a skipped (undecodable) page
    queries = RaggedVectors.from_list(random_items(rng, 4, 3))
    top = exact_search(queries, shard(pages, 4), depth=8, device="cpu", progress=False)
    assert not (top.indices == 2).any()
    assert (top.indices[:, 5:] == -1).all() and np.isneginf(top.scores[:, 5:]).all()
    assert sorted(top.indices[0, :5]) == [0, 1, 3, 4, 5]


@pytest.mark.gpu
def test_gpu_search_equals_cpu_search():
    rng = np.random.default_rng(6)
    queries = RaggedVectors.from_list(random_items(rng, 50, (5, 20), dim=128))
    pages = random_items(rng, 400, (100, 140), dim=128)
    cpu = exact_search(queries, shard(pages, 128), depth=30, device="cpu", progress=False)
    # fp32 on CUDA too: its default, TF32, would round these fp32 queries (not 16-bit stored ones) to 11 bits
    gpu = exact_search(queries, shard(pages, 128), depth=30, device="cuda", precision="fp32", progress=False)
    np.testing.assert_array_equal(cpu.indices, gpu.indices)
    np.testing.assert_allclose(cpu.scores, gpu.scores, rtol=1e-4, atol=1e-3)


def test_tiles_and_threads_do_not_change_rankings(monkeypatch):
    """Tiny tiles (several per block, split over queries, over pages and within pages) and two scoring threads
    give the rankings of whole-block products on one thread; the caller's thread count is kept."""
    from vldocir.retrieval import search

    rng = np.random.default_rng(7)
    queries = RaggedVectors.from_list(random_items(rng, 40, (3, 15)))
    pages = random_items(rng, 150, (5, 40))
    kwargs = dict(depth=30, query_batch_size=9, page_block_tokens=200, device="cpu", progress=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(search, "CPU_TILE_SCORES", 10**9)
        whole = exact_search(queries, shard(pages, 64), **kwargs)
        monkeypatch.setattr(search, "CPU_TILE_SCORES", 4000)  # every query; long pages in parts
        parts = exact_search(queries, shard(pages, 64), **kwargs)
        monkeypatch.setattr(search, "CPU_TILE_SCORES", 300)  # one query a tile, pages in parts
        tiled = exact_search(queries, shard(pages, 64), **kwargs)
        torch.set_num_threads(2)
        threaded = exact_search(queries, shard(pages, 64), **kwargs)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for other in (parts, tiled, threaded):
        np.testing.assert_array_equal(other.indices, whole.indices)
        np.testing.assert_allclose(other.scores, whole.scores, rtol=1e-6, atol=1e-5)


def test_tile_steps_by_hand():
    from vldocir.retrieval.search import _tile_steps

    assert _tile_steps(32, 32, 5, 768, None) == (32, 5, 768)  # no budget (CUDA): the whole block
    assert _tile_steps(32, 32, 5, 768, 1 << 17) == (32, 1, 128)  # 128 page tokens x 1,024 query tokens
    assert _tile_steps(32, 32, 5, 768, 1 << 16) == (32, 1, 64)
    assert _tile_steps(32, 32, 5, 700, 1 << 17) == (32, 1, 117)  # six even parts, not five of 128 + 60
    assert _tile_steps(32, 32, 5, 768, 1 << 20) == (32, 1, 768)  # one whole page: 786,432 scores
    assert _tile_steps(4, 8, 10, 10, 1000) == (4, 3, 10)  # 320 scores a page: 3 pages a tile
    assert _tile_steps(4, 8, 8, 10, 1600) == (4, 4, 10)  # 5 would fit: two tiles of 4, not 5 + 3
    assert _tile_steps(32, 32, 5, 768, 1 << 13) == (16, 1, 16)  # 16 x 1,024 > 2^13: 16 queries a tile
    assert _tile_steps(3, 10, 7, 1000, 5) == (1, 1, 1)  # never less than one query by one page token


def test_huge_finite_vectors_are_not_taken_for_non_finite_ones():
    """The finiteness check sums each shard; an overflowing sum is settled elementwise (no error),
    while one NaN anywhere still raises."""
    from vldocir.retrieval.search import NonFiniteVectorsError

    pages = [np.full((4, 8), 1e37, np.float32) for _ in range(10)]  # the shard's sum overflows to inf
    queries = RaggedVectors.from_list([np.full((2, 8), 1e-30, np.float32)])
    top = exact_search(queries, [RaggedVectors.from_list(pages)], depth=3, device="cpu", progress=False)
    np.testing.assert_array_equal(top.indices[0], [0, 1, 2])
    pages[6] = pages[6].copy()
    pages[6][2, 3] = np.nan
    with pytest.raises(NonFiniteVectorsError):
        exact_search(queries, [RaggedVectors.from_list(pages)], depth=3, device="cpu", progress=False)


def test_rows_of_a_read_only_map_upcast_without_a_warning(tmp_path):
    """Shards are memory-mapped read-only: their rows upcast to fp32 as they are, and no
    non-writable-array warning reaches the user (the rows are copied, never written through)."""
    import warnings

    data = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float16)
    np.save(tmp_path / "v.npy", data)
    mapped = RaggedVectors(np.load(tmp_path / "v.npy", mmap_mode="r"), np.array([0, 2, 6]), False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        block = mapped.fp32(slice(2, 6))
    np.testing.assert_array_equal(block.numpy(), data[2:6].astype(np.float32))


def test_concatenated_ranges_equal_the_loop():
    from vldocir.retrieval.vectors import concatenated_ranges

    starts, lengths = np.array([5, 0, 9, 2]), np.array([3, 0, 1, 4])
    want = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    np.testing.assert_array_equal(concatenated_ranges(starts, lengths), want)
    assert concatenated_ranges(np.zeros(0, int), np.zeros(0, int)).shape == (0,)
