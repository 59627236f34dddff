"""The tiny offline checkpoints load through the real `from_pretrained` paths and run the real
colpali-engine / transformers / sentence-transformers inference paths on page-sized images,
reproducibly; the hub-code stand-ins load only with `trust_remote_code` and keep the interface our
encoders call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from colpali_engine.models import (
    ColIdefics3,
    ColIdefics3Processor,
    ColModernVBert,
    ColModernVBertProcessor,
    ColPali,
    ColPaliProcessor,
    ColQwen2_5,
    ColQwen2_5_Processor,
)
from PIL import Image, ImageDraw
from transformers import (
    AutoModel,
    AutoModelForImageTextToText,
    AutoProcessor,
    Qwen2VLForConditionalGeneration,
    Qwen2VLProcessor,
)

from tiny_models import (
    IDEFICS3_TILE_TOKENS,
    JINA_V4_MULTI_VECTOR_DIM,
    JINA_V4_TASKS,
    QWEN_TEXT,
    RERANKERS,
    RETRIEVERS,
    build_tiny_colidefics3,
    build_tiny_colmodernvbert,
    build_tiny_colpali,
    build_tiny_colqwen3,
    build_tiny_colqwen25,
    build_tiny_jina_embeddings_v4,
    build_tiny_qwen2vl_embedder,
    build_tiny_sentence_transformer,
)

QUERY = "what is the revenue in 2021?"
EMBEDDING_DIM = 128

#: A GME-style document prompt: the page image as the user turn, and `<|endoftext|>` as the last
#: token, whose final hidden state is the embedding.
EMBEDDER_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
    "<|im_start|>assistant\n<|endoftext|>"
)


def _pages() -> list[Image.Image]:
    """Two different 400x800 RGB 'pages' with a title bar, text lines and a table-like grid."""
    pages = []
    for colour, title in (("navy", "Annual report 2021"), ("darkgreen", "Results")):
        page = Image.new("RGB", (400, 800), "white")
        draw = ImageDraw.Draw(page)
        draw.rectangle((20, 20, 380, 80), fill=colour)
        draw.text((30, 40), title, fill="white")
        for line in range(12):
            draw.text((30, 120 + 24 * line), f"Revenue {2010 + line}: {line * 1.7:.1f}M", fill="black")
        for x in range(40, 400, 80):
            draw.line((x, 450, x, 700), fill="gray", width=2)
        pages.append(page)
    return pages


def _assert_unit_tokens(embeddings: torch.Tensor, attention_mask: torch.Tensor, batch_size: int) -> None:
    """(batch, tokens, 128), finite, and of unit L2 norm on every attended token."""
    assert embeddings.shape == (batch_size, attention_mask.shape[1], EMBEDDING_DIM)
    assert torch.isfinite(embeddings).all()
    norms = embeddings.norm(dim=-1)
    attended = attention_mask.bool()
    torch.testing.assert_close(norms[attended], torch.ones_like(norms[attended]))


def _load(model_cls, directory: Path, **kwargs):
    """Load with `from_pretrained`, asserting every saved weight was used and none was re-initialised."""
    model, info = model_cls.from_pretrained(directory, output_loading_info=True, **kwargs)
    assert not any(info.values()), info
    return model.eval()


def _check_col_model(model_cls, directory: Path, rebuilt: Path, processor) -> torch.Tensor:
    """Embed pages and a query with the real processor and model; check shapes, norms, and that two
    loads of `directory` and one of an independent rebuild give identical embeddings. Returns the
    image batch's input ids."""
    images = processor.process_images(_pages())
    queries = processor.process_queries([QUERY])
    outputs = []
    for path in (directory, directory, rebuilt):
        model = _load(model_cls, path, torch_dtype=torch.float32)
        with torch.inference_mode():
            outputs.append((model(**images), model(**queries)))
    image_embeddings, query_embeddings = outputs[0]
    _assert_unit_tokens(image_embeddings, images["attention_mask"], batch_size=2)
    _assert_unit_tokens(query_embeddings, queries["attention_mask"], batch_size=1)
    for other_images, other_queries in outputs[1:]:
        assert torch.equal(other_images, image_embeddings)
        assert torch.equal(other_queries, query_embeddings)
    return images["input_ids"]


def test_tiny_colqwen25_runs_the_colpali_engine_path(tmp_path):
    directory = build_tiny_colqwen25(tmp_path / "colqwen25")
    processor = ColQwen2_5_Processor.from_pretrained(directory, max_num_visual_tokens=64)
    input_ids = _check_col_model(ColQwen2_5, directory, build_tiny_colqwen25(tmp_path / "rebuilt"), processor)

    image_tokens = (input_ids == processor.image_token_id).sum(dim=1)
    assert ((image_tokens > 0) & (image_tokens <= 64)).all()
    smaller = ColQwen2_5_Processor.from_pretrained(directory, max_num_visual_tokens=16)
    smaller_ids = smaller.process_images(_pages())["input_ids"]
    smaller_tokens = (smaller_ids == smaller.image_token_id).sum(dim=1)
    assert (smaller_tokens <= 16).all() and (smaller_tokens < image_tokens).all()


def test_tiny_colpali_runs_the_colpali_engine_path(tmp_path):
    directory = build_tiny_colpali(tmp_path / "colpali")
    processor = ColPaliProcessor.from_pretrained(directory)
    input_ids = _check_col_model(ColPali, directory, build_tiny_colpali(tmp_path / "rebuilt"), processor)

    image_tokens = (input_ids == processor.image_token_id).sum(dim=1)
    assert (image_tokens == processor.image_seq_length).all()


def test_tiny_qwen2vl_embedder_pools_the_last_hidden_state(tmp_path):
    directory = build_tiny_qwen2vl_embedder(tmp_path / "qwen2vl")
    processor = AutoProcessor.from_pretrained(directory)
    assert type(processor) is Qwen2VLProcessor
    inputs = processor(text=[EMBEDDER_PROMPT], images=_pages()[:1], return_tensors="pt")
    assert inputs["input_ids"][0, -1] == processor.tokenizer.convert_tokens_to_ids("<|endoftext|>")

    pooled = []
    for path in (directory, directory, build_tiny_qwen2vl_embedder(tmp_path / "rebuilt")):
        model = _load(AutoModelForImageTextToText, path)
        assert type(model) is Qwen2VLForConditionalGeneration
        with torch.inference_mode():
            hidden = model.model(**inputs, use_cache=False).last_hidden_state
            via_lm = model(**inputs, output_hidden_states=True, use_cache=False).hidden_states[-1]
        assert hidden.shape == (1, inputs["input_ids"].shape[1], model.config.text_config.hidden_size)
        assert torch.equal(hidden, via_lm)
        pooled.append(torch.nn.functional.normalize(hidden[:, -1], dim=-1))
    assert torch.isfinite(pooled[0]).all()
    for other in pooled[1:]:
        assert torch.equal(other, pooled[0])


@pytest.mark.parametrize(
    ("model_cls", "processor_cls", "build"),
    [
        (ColIdefics3, ColIdefics3Processor, build_tiny_colidefics3),
        (ColModernVBert, ColModernVBertProcessor, build_tiny_colmodernvbert),
    ],
    ids=["colidefics3", "colmodernvbert"],
)
def test_tiny_idefics3_family_runs_the_colpali_engine_path(tmp_path, model_cls, processor_cls, build):
    directory = build(tmp_path / "model")
    processor = processor_cls.from_pretrained(directory)
    input_ids = _check_col_model(model_cls, directory, build(tmp_path / "rebuilt"), processor)

    # A 400x800 page: longest edge to 64 px -> 32x64 -> two 32-px tiles plus the whole page, 4 tokens each.
    image_tokens = (input_ids == processor.image_token_id).sum(dim=1)
    assert (image_tokens == 3 * IDEFICS3_TILE_TOKENS).all()


def _from_hub_code(obj) -> bool:
    return type(obj).__module__.startswith("transformers_modules.")


def _remote(loader, directory: Path, **kwargs):
    """``loader.from_pretrained`` with the opt-in, whose class comes from the checkpoint's own code;
    without the opt-in that code never runs (transformers refuses, or falls back to its own class)."""
    refusal = None
    try:
        assert not _from_hub_code(loader.from_pretrained(directory, trust_remote_code=False, **kwargs))
    except ValueError as refused:
        refusal = str(refused)
    assert refusal is None or "trust_remote_code" in refusal, refusal
    loaded = loader.from_pretrained(directory, trust_remote_code=True, **kwargs)
    assert _from_hub_code(loaded), "the class comes from the checkpoint's code"
    return loaded


def test_tiny_colqwen3_is_hub_code_with_tomoros_interface(tmp_path):
    directory = build_tiny_colqwen3(tmp_path / "colqwen3")
    processor = _remote(AutoProcessor, directory, max_num_visual_tokens=64)
    assert not hasattr(processor, "process_queries"), "the interface has process_texts only"
    images = processor.process_images(_pages())
    image_tokens = (images["input_ids"] == processor.image_token_id).sum(dim=1)
    assert ((image_tokens > 0) & (image_tokens <= 64)).all()
    queries = processor.process_texts([QUERY])
    pad = processor.tokenizer.pad_token_id
    assert (queries["input_ids"][0, -10:] == pad).all(), "ten query augmentation tokens end a query"

    outputs = []
    for path in (directory, directory, build_tiny_colqwen3(tmp_path / "rebuilt")):
        model = _remote(AutoModel, path, dtype=torch.float32).eval()
        with torch.inference_mode():
            outputs.append((model(**images).embeddings, model(**queries).embeddings))
    page_vectors, query_vectors = outputs[0]
    assert page_vectors.shape == (2, images["input_ids"].shape[1], 320)
    norms = page_vectors.norm(dim=-1)
    attended = images["attention_mask"].bool()
    torch.testing.assert_close(norms[attended], torch.ones_like(norms[attended]))
    assert (norms[~attended] == 0).all()
    for other_pages, other_queries in outputs[1:]:
        assert torch.equal(other_pages, page_vectors) and torch.equal(other_queries, query_vectors)


def test_tiny_jina_v4_is_hub_code_with_the_models_encode_interface(tmp_path):
    directory = build_tiny_jina_embeddings_v4(tmp_path / "jina")
    models = [
        _remote(AutoModel, path, dtype=torch.float32).eval()
        for path in (directory, build_tiny_jina_embeddings_v4(tmp_path / "rebuilt"))
    ]
    pages = _pages()
    results = []
    for model in models:
        multi = model.encode_image(images=pages, task="retrieval", batch_size=1, return_multivector=True)
        single = model.encode_image(images=pages, task="retrieval", batch_size=2, return_multivector=False)
        query = model.encode_text(texts=[QUERY], task="retrieval", prompt_name="query", return_multivector=True)
        results.append((multi, single, query))
    multi, single, query = results[0]
    assert [m.shape[1] for m in multi] == [JINA_V4_MULTI_VECTOR_DIM] * 2 and all(m.shape[0] > 4 for m in multi)
    assert [v.shape for v in single] == [(QWEN_TEXT["hidden_size"],)] * 2
    for vectors in (*multi, *query, torch.stack(single)):
        torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(vectors.shape[0]))
    for other in results[1:]:
        assert all(
            torch.equal(a, b)
            for got, want in zip(other, results[0], strict=True)
            for a, b in zip(got, want, strict=True)
        )

    model = models[0]
    tasks = {t: model.encode_text(texts=[QUERY], task=t)[0] for t in JINA_V4_TASKS}
    assert len({tuple(v.tolist()) for v in tasks.values()}) == len(JINA_V4_TASKS), "each task has its own adapter"
    passage = model.encode_text(texts=[QUERY], task="retrieval", prompt_name="passage")[0]
    assert not torch.equal(passage, tasks["retrieval"]), "query and passage prompts differ"
    arrays = model.encode_image(images=pages[:1], task="retrieval", return_numpy=True)
    assert arrays[0].shape == (QWEN_TEXT["hidden_size"],) and arrays[0].dtype.name == "float32"
    with pytest.raises(ValueError, match="retrieval"):
        model.encode_text(texts=[QUERY], task="summarise")


def test_tiny_sentence_transformer_is_bge_m3_shaped(tmp_path):
    from sentence_transformers import SentenceTransformer

    directory = build_tiny_sentence_transformer(tmp_path / "st")
    texts = [QUERY, "The quarterly report shows net income."]
    vectors = []
    for path in (directory, build_tiny_sentence_transformer(tmp_path / "rebuilt")):
        model = SentenceTransformer(str(path), device="cpu")
        backbone, pooling, _ = model
        assert type(backbone.auto_model).__name__ == "XLMRobertaModel"
        assert pooling.get_config_dict()["pooling_mode"] == "cls"
        vectors.append(model.encode(texts, normalize_embeddings=False))
    assert vectors[0].shape == (2, QWEN_TEXT["hidden_size"])
    torch.testing.assert_close(torch.from_numpy(vectors[0]).norm(dim=-1), torch.ones(2))  # the Normalize module
    assert (vectors[0] == vectors[1]).all()


def _builders():
    """Every builder the config tables use, once."""
    found = {tiny.build: None for tiny in (*RETRIEVERS.values(), *RERANKERS.values())}
    return list(found)


@pytest.mark.parametrize("build", _builders(), ids=lambda b: b.__name__.removeprefix("build_tiny_"))
def test_tiny_checkpoints_are_small_and_rebuild_byte_for_byte(tmp_path, build):
    first, second = build(tmp_path / "a"), build(tmp_path / "b")
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert files == sorted(path.relative_to(second) for path in second.rglob("*") if path.is_file())
    assert [f for f in files if (first / f).read_bytes() != (second / f).read_bytes()] == []
    assert sum((first / f).stat().st_size for f in files) < 5_000_000
