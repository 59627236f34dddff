"""Compressed and indexed late-interaction search (vldocir.retrieval.compressed) against exact search
and hand-computed centroid interaction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import SUBSET_PAGES, evaluate, tiny_overrides
from vldocir.retrieval.compressed import CompressedSearch
from vldocir.retrieval.compressed.build import build_compressed, pool_pages
from vldocir.retrieval.compressed.codecs import AffineCodec
from vldocir.retrieval.compressed.pages import CompressedPages
from vldocir.retrieval.compressed.search import _candidates, _centroid_interaction, compressed_search
from vldocir.retrieval.search import exact_search
from vldocir.retrieval.vectors import RaggedVectors

DIM = 16


def clustered_pages(rng, n_pages, tokens=(2, 12), n_topics=12):
    """Unit token vectors around a few shared topics (so centroids mean something), with an empty
    page and a page of one token."""
    topics = rng.standard_normal((n_topics, DIM)).astype(np.float32)
    pages = []
    for _ in range(n_pages):
        n = int(rng.integers(*tokens))
        x = topics[rng.integers(n_topics, size=n)] + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
        pages.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    pages[3] = np.zeros((0, DIM), np.float32)
    pages[5] = pages[5][:1]
    return pages


def shards_of(pages, size=16):
    from vldocir.retrieval.embeddings import to_storage

    out = []
    for start in range(0, len(pages), size):
        packed = RaggedVectors.from_list(pages[start : start + size], first_index=start)
        packed.vectors = to_storage(packed.vectors, "float16")
        out.append(packed)
    return out


def queries_of(rng, pages, n=9):
    items = []
    for page in rng.choice([i for i, p in enumerate(pages) if len(p)], size=n):
        picked = pages[page][rng.integers(len(pages[page]), size=4)]
        items.append(picked + 0.1 * rng.standard_normal(picked.shape).astype(np.float32))
    return RaggedVectors.from_list(items)


def built(tmp_path, pages, **settings) -> tuple[CompressedPages, CompressedSearch]:
    search = CompressedSearch(train_tokens=4096, **settings)
    out = tmp_path / "compressed"
    out.mkdir(parents=True)
    build_compressed(shards_of(pages), len(pages), out, search, progress=False)
    return CompressedPages.open(out), search


def test_float16_without_index_is_exact_search(tmp_path):
    rng = np.random.default_rng(0)
    pages = clustered_pages(rng, 40)
    queries = queries_of(rng, pages)
    compressed, search = built(tmp_path, pages)
    top = search.search(queries, compressed, 12, progress=False)
    want = exact_search(queries, shards_of(pages), 12, device="cpu", progress=False)
    np.testing.assert_array_equal(top.indices, want.indices)
    np.testing.assert_allclose(top.scores, want.scores, rtol=1e-6)


def test_index_with_every_page_a_candidate_is_exact_and_never_returns_an_empty_page(tmp_path):
    """Candidates covering the corpus: the rescoring alone decides, and must equal exact MaxSim
    (ties by page index); the empty page is never returned."""
    rng = np.random.default_rng(1)
    pages = clustered_pages(rng, 40)
    pages[7] = pages[8].copy()  # a tie: the lower page index comes first in both
    queries = queries_of(rng, pages)
    compressed, search = built(tmp_path, pages, n_centroids=8, candidates=40)
    assert compressed.meta["n_centroids"] == 8
    top = search.search(queries, compressed, 39, progress=False)
    want = exact_search(queries, shards_of(pages), 39, device="cpu", progress=False)
    np.testing.assert_array_equal(top.indices, want.indices)
    np.testing.assert_allclose(top.scores, want.scores, rtol=1e-5)
    assert not (top.indices == 3).any()


def test_candidates_are_the_best_pages_by_centroid_interaction(tmp_path):
    """The candidate pool equals a direct computation: a page's score is the sum over query tokens
    of the best score of a centroid among its tokens' nearest centroids; with nprobe, of the best
    among the query token's nprobe best centroids, or the best score of a centroid not probed when
    the page holds none of them."""
    rng = np.random.default_rng(2)
    pages = clustered_pages(rng, 60)
    compressed, _ = built(tmp_path, pages, n_centroids=10)
    centroids = compressed.centroids
    stored = [p.astype(np.float16).astype(np.float32) for p in pages]
    bags = [set(np.argmax(p @ centroids.T, axis=1)) if len(p) else set() for p in stored]
    for p, bag in enumerate(bags):  # the stored bags are the nearest centroids of the page's tokens
        assert set(compressed.bag_centroids[compressed.bag_offsets[p] : compressed.bag_offsets[p + 1]]) == bag
    query = queries_of(rng, pages, 1).fp32()
    scores = query.numpy() @ centroids.T
    direct = {p: sum(max(row[c] for c in bag) for row in scores) for p, bag in enumerate(bags) if bag}
    has_bag = np.diff(compressed.bag_offsets) > 0
    pool = _candidates(query, compressed, 0, 7, has_bag)
    assert list(pool) == sorted(sorted(direct, key=lambda p: -direct[p])[:7])
    probed = [set(np.argsort(-row)[:2]) for row in scores]
    bound = [np.sort(row)[-3] for row in scores]  # the best centroid not probed
    by_probe = {
        p: sum(max([row[c] for c in bag & best] + [b]) for row, best, b in zip(scores, probed, bound, strict=True))
        for p, bag in enumerate(bags)
        if bag
    }
    scored, approximate = _centroid_interaction(query, compressed, 2, has_bag)
    assert list(scored) == sorted(by_probe)
    np.testing.assert_allclose(approximate, [by_probe[p] for p in scored], rtol=1e-5)
    reached = [p for p, bag in enumerate(bags) if any(bag & best for best in probed)]
    assert 7 < len(reached) < len(direct)  # some pages hold no probed centroid: ranked below the rest
    pool = _candidates(query, compressed, 2, 7, has_bag)
    assert list(pool) == sorted(sorted(by_probe, key=lambda p: -by_probe[p])[:7])
    assert set(pool) <= set(reached)


def test_codecs_store_fewer_bytes_and_decode_close(tmp_path):
    rng = np.random.default_rng(3)
    pages = clustered_pages(rng, 40, tokens=(8, 16))
    sq8, search = built(tmp_path, pages, codec="SQ8")
    n_vectors = sum(len(p) for p in pages)
    assert sq8.codes.dtype == np.uint8 and sq8.codes.shape == (n_vectors, DIM)
    original = np.concatenate(pages)
    np.testing.assert_allclose(sq8.decode(np.arange(n_vectors)).numpy(), original, atol=0.01)
    queries = queries_of(rng, pages)
    top = search.search(queries, sq8, 10, progress=False)
    want = exact_search(queries, shards_of(pages), 10, device="cpu", progress=False)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top.indices, want.indices, strict=True)]) >= 0.9
    indexed, search = built(tmp_path / "indexed", pages, codec="SQ8", n_centroids=8, candidates=40)
    top = search.search(queries, indexed, 10, progress=False)  # rescored over the codes' levels, not decoded
    want = exact_search(queries, indexed.decoded_shards(), 10, device="cpu", progress=False)
    np.testing.assert_array_equal(top.indices, want.indices)
    np.testing.assert_allclose(top.scores, want.scores, rtol=1e-5)


def test_residuals_code_offsets_from_bag_means_and_decode_closer_than_the_codec_alone(tmp_path):
    """With residuals, a stored token is its bag mean (the mean of its page's tokens that share
    its nearest centroid, coded SQ8) plus its coded offset from that mean, the page's tokens in
    bag order: the decoded vectors equal that computation by hand (with the artifact's codecs),
    the entries' token counts are the hand-counted ones, the tokens come back closer than the
    same 4-bit codec coding the tokens themselves, and the search rescores the decoded vectors."""
    rng = np.random.default_rng(6)
    pages = clustered_pages(rng, 96, tokens=(8, 16))
    residual, search = built(tmp_path / "r", pages, codec="SQ4", n_centroids=24, coded="residuals", candidates=96)
    plain, _ = built(tmp_path / "p", pages, codec="SQ4")
    assert residual.meta["coded"] == "residuals" and residual.meta["mean_code_bytes"] == DIM
    stored = [p.astype(np.float16).astype(np.float32) for p in pages]
    decoded = residual.decode(np.arange(residual.meta["n_vectors"])).numpy()
    codec, mean_codec = residual.codec, residual.mean_codec
    errors = []
    for page, tokens in enumerate(stored):
        first, last = residual.offsets[page], residual.offsets[page + 1]
        entries = slice(residual.bag_offsets[page], residual.bag_offsets[page + 1])
        nearest = np.argmax(tokens @ residual.centroids.T, axis=1) if len(tokens) else np.zeros(0, int)
        bag = residual.bag_centroids[entries]
        counts = np.diff(residual.bag_token_offsets[entries.start : entries.stop + 1])
        assert list(counts) == [int((nearest == c).sum()) for c in bag]
        if not len(tokens):
            continue
        means = np.stack([tokens[nearest == c].mean(axis=0) for c in bag]).astype(np.float32)
        means = mean_codec.sa_decode(mean_codec.sa_encode(means))
        in_bag_order = tokens[np.argsort(nearest, kind="stable")]
        mean_of_token = np.repeat(means, counts, axis=0)
        by_hand = mean_of_token + codec.sa_decode(codec.sa_encode(in_bag_order - mean_of_token))
        np.testing.assert_allclose(decoded[first:last], by_hand, atol=1e-5)
        errors.append(((decoded[first:last] - in_bag_order) ** 2).reshape(-1))
    plain_error = (plain.decode(np.arange(plain.meta["n_vectors"])).numpy() - np.concatenate(stored)) ** 2
    assert np.concatenate(errors).mean() < 0.8 * plain_error.mean()
    queries = queries_of(rng, pages)
    top = search.search(queries, residual, 20, progress=False)
    want = exact_search(queries, residual.decoded_shards(), 20, device="cpu", progress=False)
    np.testing.assert_array_equal(top.indices, want.indices)  # every page a candidate: the rescoring decides
    np.testing.assert_allclose(top.scores, want.scores, rtol=1e-5)


@pytest.mark.parametrize(
    ("qtype", "dim"),
    [("QT_8bit", 16), ("QT_4bit", 16), ("QT_4bit", 15), ("QT_8bit_uniform", 15), ("QT_4bit_uniform", 16)],
)
def test_affine_reading_of_a_scalar_quantizer_equals_its_decoded_products(qtype, dim):
    """Products over the codes' levels (no decoding) equal products with faiss's decoded vectors,
    for 8- and 4-bit codes, per-dimension and uniform ranges, and an odd dimension (a 4-bit code's
    last byte half used)."""
    import faiss

    rng = np.random.default_rng(7)
    data = (rng.standard_normal((500, dim)) * rng.uniform(0.1, 2, dim)).astype(np.float32)
    codec = faiss.IndexScalarQuantizer(dim, getattr(faiss.ScalarQuantizer, qtype))
    codec.train(data)
    codes = codec.sa_encode(data[:37])
    affine = AffineCodec.of(codec)
    assert affine is not None and affine.code_bytes == codes.shape[1]
    tokens = torch.from_numpy(rng.standard_normal((5, dim)).astype(np.float32))
    want = tokens.numpy() @ codec.sa_decode(codes).T
    np.testing.assert_allclose(affine.products(tokens, torch.from_numpy(codes)).numpy(), want, rtol=1e-4, atol=1e-4)
    assert AffineCodec.of(faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_6bit)) is None  # decoded instead


@pytest.mark.parametrize("codec", ["SQ4", "PQ8x4"])  # offsets scored on their levels, or decoded
def test_rescore_keeps_the_candidates_best_by_bag_means(tmp_path, codec):
    """With rescore, MaxSim rescores only the candidates whose MaxSim over their bag means (every
    token replaced by its bag's decoded mean) is among the rescore best, computed here by hand;
    rescore at least the candidates changes nothing."""
    rng = np.random.default_rng(8)
    pages = clustered_pages(rng, 96, tokens=(8, 16))
    residual, _ = built(tmp_path, pages, codec=codec, n_centroids=24, coded="residuals")
    assert (residual.levels is None) == (codec != "SQ4")
    queries = queries_of(rng, pages, 4)
    decoded = residual.decode(np.arange(residual.meta["n_vectors"])).numpy()
    means = residual.mean_codec.sa_decode(residual.mean_codes)
    has_bag = np.diff(residual.bag_offsets) > 0
    stats: dict = {}
    top = compressed_search(queries, residual, 10, candidates=40, rescore=10, progress=False, stats=stats)
    rescored_rows = []
    for q in range(len(queries)):
        tokens = queries.fp32(slice(int(queries.offsets[q]), int(queries.offsets[q + 1])))
        pool = _candidates(tokens, residual, 0, 40, has_bag)
        q_np = tokens.numpy()
        by_means = {
            p: (q_np @ means[residual.bag_offsets[p] : residual.bag_offsets[p + 1]].T).max(1).sum() for p in pool
        }
        kept = sorted(by_means, key=lambda p: -by_means[p])[:10]
        maxsim = {p: (q_np @ decoded[residual.offsets[p] : residual.offsets[p + 1]].T).max(1).sum() for p in kept}
        want = sorted(maxsim, key=lambda p: (-maxsim[p], p))[:10]
        assert list(top.indices[q]) == want
        np.testing.assert_allclose(top.scores[q], [maxsim[p] for p in want], rtol=1e-5)
        rescored_rows.append(sum(residual.offsets[p + 1] - residual.offsets[p] for p in kept))
        rescored_rows[-1] += sum(residual.bag_offsets[p + 1] - residual.bag_offsets[p] for p in pool)
    assert stats["scored_vectors"] == pytest.approx(np.mean(rescored_rows))
    every = compressed_search(queries, residual, 10, candidates=40, progress=False)
    same = compressed_search(queries, residual, 10, candidates=40, rescore=40, progress=False)
    np.testing.assert_array_equal(every.indices, same.indices)
    assert not np.array_equal(every.indices, top.indices)  # the bag means alone are not MaxSim


def test_token_pooling_keeps_at_most_a_factor_of_the_tokens():
    rng = np.random.default_rng(4)
    pages = clustered_pages(rng, 8, tokens=(6, 14))
    pooled = pool_pages(pages, 3)
    for page, out in zip(pages, pooled, strict=True):
        if len(page) <= 1:
            np.testing.assert_array_equal(out, page)  # one token (or none) is kept as it is
        else:
            assert 1 <= len(out) <= max(len(page) // 3, 1)
            np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1, rtol=1e-5)
    assert pool_pages(pages, 1) is pages


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="codec 'SQ9' is not a faiss index_factory codec"):
        CompressedSearch(codec="SQ9")
    with pytest.raises(ValueError, match="pool_factor must be an integer >= 1"):
        CompressedSearch(pool_factor=0)
    with pytest.raises(ValueError, match="nprobe must be an integer >= 0"):
        CompressedSearch(nprobe=-1)
    with pytest.raises(ValueError, match=r"coded=residuals .* needs an index"):
        CompressedSearch(codec="SQ4", coded="residuals")
    with pytest.raises(ValueError, match="and a faiss codec"):
        CompressedSearch(n_centroids=8, coded="residuals")
    # coded=tokens leaves the artifact's key as it was before the knob; on, it is another artifact
    assert "coded" not in CompressedSearch(codec="SQ4", n_centroids=8).build_params()
    assert CompressedSearch(codec="SQ4", n_centroids=8, coded="residuals").build_params()["coded"] == "residuals"
    with pytest.raises(ValueError, match="coded must be one of tokens, residuals"):
        CompressedSearch(coded="offsets")
    with pytest.raises(ValueError, match="rescore=50 ranks the candidates by their bag means"):
        CompressedSearch(codec="SQ4", n_centroids=8, rescore=50)
    # the search knobs key the run, not the artifact
    a, b = CompressedSearch(n_centroids=8, candidates=10), CompressedSearch(n_centroids=8, candidates=20)
    assert a.build_params() == b.build_params() and a.cache_params() != b.cache_params()
    residual = dict(codec="SQ4", n_centroids=8, coded="residuals")
    plain, rescored = CompressedSearch(**residual), CompressedSearch(**residual, nprobe=4, rescore=50)
    assert plain.build_params() == rescored.build_params()
    assert "rescore" not in plain.cache_params() and "probe" not in plain.cache_params()  # runs filed before stay
    assert rescored.cache_params()["rescore"] == 50 and rescored.cache_params()["probe"] == "probed-centroid-scores"


def test_a_codec_for_another_dimension_fails_before_the_training(tmp_path):
    pages = clustered_pages(np.random.default_rng(9), 20)
    with pytest.raises(ValueError, match=r"codec 'PQ32x4' cannot code the pages' 16-dimensional vectors .*multiple"):
        built(tmp_path, pages, codec="PQ32x4", n_centroids=4, coded="residuals")


def test_queries_without_tokens_get_no_pages(tmp_path):
    rng = np.random.default_rng(5)
    pages = clustered_pages(rng, 20)
    compressed, _ = built(tmp_path, pages, n_centroids=4)
    queries = RaggedVectors.from_list([np.zeros((0, DIM), np.float32), pages[0]])
    with torch.inference_mode():
        top = compressed_search(queries, compressed, 5, candidates=10, threads=2, progress=False)
    assert (top.indices[0] == -1).all() and top.indices[1, 0] == 0
    with pytest.raises(ValueError, match="rescore=3 needs bag means"):
        compressed_search(queries, compressed, 5, candidates=10, rescore=3, progress=False)


@pytest.mark.slow
def test_setting_compressed_end_to_end(subset_dir, tiny, isolated_paths):
    """setting=compressed through the pipeline: its own run directory, the artifact built once and
    reused by another search knob, and with every page a candidate (fp16) exact search's ranking."""
    import pyarrow.parquet as pq

    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}"]
    exhaustive = evaluate(*common)
    knobs = [
        "setting=compressed",
        "retriever.model.compressed.codec=float16",
        "retriever.model.compressed.coded=tokens",
        "retriever.model.compressed.rescore=0",
        "retriever.model.compressed.n_centroids=4",
        "retriever.model.compressed.train_tokens=4096",
    ]
    full = evaluate(
        *common, *knobs, "retriever.model.compressed.nprobe=0", f"retriever.model.compressed.candidates={SUBSET_PAGES}"
    )
    assert full.entry.parent.name == f"cmp-float16-tokens-pool1-K4-np0-c{SUBSET_PAGES}-r0"
    assert ("compressed-pages", "miss") in [(e["kind"], e["status"]) for e in full.manifest["cache"]]
    ranked = lambda result: pq.read_table(result.entry / "run.parquet").to_pandas()  # noqa: E731
    a, b = ranked(exhaustive), ranked(full)
    assert (a["page_id"].tolist(), a["query_id"].tolist()) == (b["page_id"].tolist(), b["query_id"].tolist())
    probed = evaluate(*common, *knobs, "retriever.model.compressed.nprobe=1")  # another search knob, same artifact
    assert probed.entry.parent.name == "cmp-float16-tokens-pool1-K4-np1-c4000-r0"
    assert ("compressed-pages", "hit") in [(e["kind"], e["status"]) for e in probed.manifest["cache"]]
    assert probed.metrics["n_queries"] == exhaustive.metrics["n_queries"]
