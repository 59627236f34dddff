"""The tiny offline checkpoints load through the real `from_pretrained` paths and run the real
colpali-engine / transformers inference paths on page-sized images, reproducibly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from colpali_engine.models import ColPali, ColPaliProcessor, ColQwen2_5, ColQwen2_5_Processor
from PIL import Image, ImageDraw
from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
from tiny_models import build_tiny_colpali, build_tiny_colqwen25, build_tiny_qwen2vl_embedder

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


@pytest.mark.parametrize("build", [build_tiny_colqwen25, build_tiny_colpali, build_tiny_qwen2vl_embedder])
def test_tiny_checkpoints_are_small(tmp_path, build):
    directory = build(tmp_path / "model")
    assert sum(path.stat().st_size for path in directory.iterdir()) < 5_000_000
