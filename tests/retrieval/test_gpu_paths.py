"""The GPU-minded paths, checked on CPU against today's: exact search's ``precision`` option, and
ColPali embedded without its language-model head.

``bf16`` on CPU computes what it computes on CUDA (the same bf16-rounded operands, products and
sums in fp32; see vldocir.retrieval.search), so its rounding is checked here against an fp64
oracle of the rounded operands and against fp32 within a worst-case bound. The CUDA kernels
themselves (``out_dtype`` products, TF32) run only in the ``gpu`` tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from PIL import Image, ImageDraw

from helpers import compose_cfg, tiny_overrides
from test_search import random_items, shard
from vldocir.retrieval import search
from vldocir.retrieval.search import NonFiniteVectorsError, exact_search
from vldocir.retrieval.vectors import RaggedVectors

BF16_UNIT_ROUNDOFF = 2.0**-8  # 8 significant bits, round to nearest

# -- exact search precision ----------------------------------------------------------------------


def unit_items(rng, n, lengths, dim=128):
    return [x / np.linalg.norm(x, axis=1, keepdims=True) for x in random_items(rng, n, lengths, dim)]


def as_stored(items):
    """What the fp16 store gives back, as float64 (the oracles see the searched numbers)."""
    return [x.astype(np.float16).astype(np.float64) for x in items]


def bf16_rounded(items):
    return [torch.from_numpy(x).to(torch.bfloat16).double().numpy() for x in items]


def maxsim_matrix(queries, pages, chunk=100):
    """(n_queries, n_pages) float64 MaxSim: every query token against ``chunk`` pages' tokens at once."""
    flat, query_starts = np.concatenate(queries), np.cumsum([0, *map(len, queries)])[:-1]
    out = np.empty((len(queries), len(pages)))
    for start in range(0, len(pages), chunk):
        group = pages[start : start + chunk]
        best = np.maximum.reduceat(flat @ np.concatenate(group).T, np.cumsum([0, *map(len, group)])[:-1], axis=1)
        out[:, start : start + len(group)] = np.add.reduceat(best, query_starts, axis=0)
    return out


@pytest.fixture(scope="module")
def corpus():
    """Unit vectors as the store gives them back (fp16 values), queries too, as the pipeline's are."""
    rng = np.random.default_rng(11)
    queries = [x.astype(np.float16).astype(np.float32) for x in unit_items(rng, 40, (8, 33))]
    return queries, unit_items(rng, 400, (20, 90))


def search_at(precision, corpus, **kwargs):
    queries, pages = corpus
    return exact_search(
        RaggedVectors.from_list(queries),
        shard(pages, 256, "float16"),
        depth=10,
        query_batch_size=8,
        page_block_tokens=900,
        device="cpu",
        precision=precision,
        progress=False,
        **kwargs,
    )


def test_fp32_is_the_cpu_default_and_tf32_on_cpu_computes_fp32_bit_for_bit(corpus):
    """The fp32 path keeps today's arithmetic (checked bit for bit against the search before the
    option existed when it was added); on CPU ``auto`` and ``tf32`` are that path."""
    fp32 = search_at("fp32", corpus)
    for other in ("auto", "tf32"):
        top = search_at(other, corpus)
        np.testing.assert_array_equal(top.indices, fp32.indices)
        np.testing.assert_array_equal(top.scores, fp32.scores)  # exact, not close
    oracle = maxsim_matrix(as_stored(corpus[0]), as_stored(corpus[1]))
    np.testing.assert_allclose(fp32.scores, np.take_along_axis(oracle, fp32.indices, 1), rtol=1e-5)


def test_bf16_rounds_the_operands_only_and_keeps_the_fp32_rankings(corpus):
    queries, pages = (as_stored(x) for x in corpus)
    exact = maxsim_matrix(queries, pages)
    # distinct scores: every query's 11 best pages are separated (else "overlap" would test ties)
    best = -np.sort(-exact, axis=1)[:, :11]
    assert (np.diff(best, axis=1) < 0).all()
    fp32, bf16 = search_at("fp32", corpus), search_at("bf16", corpus)

    # 1. it is the MaxSim of the bf16-rounded operands, summed in fp32 (fp64 oracle, tight)
    rounded = maxsim_matrix(bf16_rounded(queries), bf16_rounded(pages))
    np.testing.assert_allclose(bf16.scores, np.take_along_axis(rounded, bf16.indices, 1), rtol=2e-6, atol=1e-6)
    # ... which is not fp32's: the option really rounds (fp16 pages lose 3 bits)
    assert np.abs(bf16.scores - fp32.scores).max() > 1e-4

    # 2. worst case against fp32: each product moves by at most (2u + u^2) |q_t| |p|, a max by at
    # most its largest move, a sum by the sum of its terms' (u = 2^-8, bf16's unit roundoff)
    u = BF16_UNIT_ROUNDOFF
    page_norm = max(np.linalg.norm(p, axis=1).max() for p in pages)
    bound = (2 * u + u * u) * np.array([np.linalg.norm(q, axis=1).sum() for q in queries]) * page_norm
    moved = np.abs(bf16.scores - np.take_along_axis(exact, bf16.indices, 1))
    assert (moved <= bound[:, None] + 1e-5).all()
    assert moved.max() < bound.min() / 10  # the roundings' signs vary: moves stay far below the worst case

    # 3. the rankings: top-10 overlap with fp32 of at least 0.99 over all queries
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(fp32.indices, bf16.indices, strict=True)])
    assert overlap >= 0.99, overlap


def test_bf16_keeps_ties_by_page_index_and_rounds_document_context_vectors_too():
    page = np.ones((3, 8), np.float32) / 8
    queries = RaggedVectors.from_list([np.ones((2, 8), np.float32)])
    top = exact_search(queries, shard([page] * 30, 7), depth=10, device="cpu", precision="bf16", progress=False)
    np.testing.assert_array_equal(top.indices[0], np.arange(10))

    rng = np.random.default_rng(12)
    items, groups = unit_items(rng, 40, (4, 12), dim=16), unit_items(rng, 4, 6, dim=16)
    queries = unit_items(rng, 5, 3, dim=16)
    group_of_item = np.arange(40) // 10

    def context(part):
        return RaggedVectors.from_list(groups), group_of_item[part.first_index : part.first_index + len(part)]

    top = exact_search(
        RaggedVectors.from_list(queries),
        shard(items, 16),
        depth=40,
        device="cpu",
        precision="bf16",
        progress=False,
        context=context,
    )
    rounded_queries = bf16_rounded([q.astype(np.float64) for q in queries])
    oracle = maxsim_matrix(rounded_queries, bf16_rounded(as_stored(items)))
    oracle += maxsim_matrix(rounded_queries, bf16_rounded([g.astype(np.float64) for g in groups]))[:, group_of_item]
    np.testing.assert_array_equal(top.indices, np.argsort(-oracle, axis=1, kind="stable"))
    np.testing.assert_allclose(top.scores, -np.sort(-oracle, axis=1), rtol=2e-6, atol=1e-6)


def test_cudas_fp32_switch_is_set_for_the_search_only(monkeypatch, corpus):
    """tf32 allows TF32 and fp32 forbids it while products run, bf16 leaves it; torch's own
    setting (unset, or TF32 set by the caller) is back afterwards, also when the search fails."""
    matmul = torch.backends.cuda.matmul
    seen = []
    real_maxsim = search._maxsim

    def recording_maxsim(*args, **kwargs):
        seen.append(matmul.fp32_precision)
        return real_maxsim(*args, **kwargs)

    monkeypatch.setattr(search, "_maxsim", recording_maxsim)
    small = (corpus[0][:4], corpus[1][:40])
    before = matmul.fp32_precision
    try:
        for caller in ("none", "tf32"):
            matmul.fp32_precision = caller
            for precision, during in (("tf32", "tf32"), ("fp32", "ieee"), ("auto", "ieee"), ("bf16", caller)):
                seen.clear()
                search_at(precision, small)
                assert seen and set(seen) == {during}, precision
                assert matmul.fp32_precision == caller
        matmul.fp32_precision = "none"
        nan_page = np.full((4, 128), np.nan, np.float32)
        with pytest.raises(NonFiniteVectorsError):
            search_at("tf32", (small[0], [nan_page]))
        assert matmul.fp32_precision == "none"
    finally:
        matmul.fp32_precision = before


def test_an_unknown_precision_is_refused_naming_the_choices(corpus):
    with pytest.raises(ValueError, match="auto, fp32, tf32, bf16"):
        search_at("fp16", corpus)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_gpu_precisions_against_their_cpu_arithmetic(precision):
    """On CUDA: tf32 over 16-bit stored vectors is fp32 but for the order of additions (TF32 holds
    fp16 exactly); bf16 is the CPU emulation's arithmetic (rounded operands, fp32 products). Rankings
    are compared as top-10 sets, since an order of additions may swap two pages within 1e-6."""
    rng = np.random.default_rng(13)
    queries = RaggedVectors.from_list([x.astype(np.float16).astype(np.float32) for x in unit_items(rng, 64, (10, 33))])
    pages = unit_items(rng, 700, (60, 140))
    gpu = exact_search(queries, shard(pages, 256), 10, device="cuda", precision=precision, progress=False)
    cpu = exact_search(
        queries,
        shard(pages, 256),
        10,
        device="cpu",
        precision="fp32" if precision == "tf32" else "bf16",
        progress=False,
    )
    np.testing.assert_allclose(gpu.scores, cpu.scores, rtol=1e-5, atol=1e-5)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(gpu.indices, cpu.indices, strict=True)]) >= 0.99


# -- ColPali without its LM head -----------------------------------------------------------------


def pages_and_queries():
    pages = []
    for colour in ("navy", "darkgreen"):
        page = Image.new("RGB", (300, 600), "white")
        draw = ImageDraw.Draw(page)
        draw.rectangle((10, 10, 290, 60), fill=colour)
        for line in range(10):
            draw.text((20, 90 + 30 * line), f"Revenue {2010 + line}: {line * 1.7:.1f}M", fill="black")
        pages.append(page)
    return pages, ["what is the revenue in 2021?", "Find the page", "total revenue in 2020 and 2022"]


def encoder_of(name, tiny):
    encoder = instantiate(compose_cfg(*tiny_overrides(name, tiny)).retriever.model).encoder
    encoder.ensure_loaded()
    return encoder


def vocabulary_heads(model) -> list[torch.nn.Module]:
    """Every linear map onto the text vocabulary (an LM head, tied or not)."""
    vocab = model.config.get_text_config().vocab_size
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == vocab]


def count_calls(modules) -> list[int]:
    calls = [0]
    for module in modules:
        module.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_colpali_pages_and_queries_equal_colpali_engines_forward_without_the_lm_head(tiny):
    encoder = encoder_of("colpali13", tiny)
    model = encoder.model
    (head,) = vocabulary_heads(model)
    assert head is model.model.lm_head
    calls = count_calls([head])
    pages, texts = pages_and_queries()
    for batch in (encoder.processor.process_images(pages), encoder.processor.process_queries(texts)):
        for mask_non_image in (False, True):
            model.mask_non_image_embeddings = mask_non_image
            with torch.inference_mode():
                before = calls[0]
                theirs = model(**batch)
                assert calls[0] == before + 1  # colpali-engine's forward runs the head (the hook sees it)
                ours = encoder.embed(batch)
                assert calls[0] == before + 1  # ours does not
            # padded query positions are NaN in both (fully masked attention); the encoder drops them
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6, equal_nan=True)
    model.mask_non_image_embeddings = False
    before = calls[0]
    encoder.encode_pages(pages), encoder.encode_queries(texts)
    assert calls[0] == before


@pytest.mark.parametrize("name", ["colpali13", "colqwen25", "colsmol500", "colmodernvbert"])
def test_no_colpali_engine_encoder_computes_vocabulary_logits(name, tiny):
    encoder = encoder_of(name, tiny)
    calls = count_calls(vocabulary_heads(encoder.model))
    pages, texts = pages_and_queries()
    page_vectors, query_vectors = encoder.encode_pages(pages), encoder.encode_queries(texts)
    assert calls == [0]
    assert len(page_vectors) == 2 and len(query_vectors) == 3
    assert all(v.shape[1] == 128 and np.isfinite(v).all() for v in page_vectors + query_vectors)
