"""GPU costs of the visual retrievers, on full-size random models: page and query encoding, exact
MaxSim search, document-context k-means, and what the paper's benchmark would take on one H200.

    .venv/bin/python perf/bench_gpu.py --json gpu.json              # one H200, about 8 minutes
    .venv/bin/python perf/bench_gpu.py --model colpali13            # measure ColPali instead of ColQwen2.5
    .venv/bin/python perf/bench_gpu.py --cpu-smoke --json smoke.json  # the same code, tiny sizes, on CPU

No weights are downloaded. The measured model (``--model``, a file of ``conf/retriever/``) is built
from its published configuration with random weights, in bf16, directly on the GPU, and saved with
an offline processor (the tokenizers of ``tests/tiny_models.py``: tiny vocabularies, real
pre-tokenizers; the image processors have the real geometry) to a temporary directory. The
retriever is then composed from ``conf/`` (``retriever=<model>``, ``checkpoint.local_path`` set to
that directory) and instantiated as ``run.py`` does, so the model loads through the encoder's
``from_pretrained`` path and pages go through the project's store, decode workers and encoder.
Random weights do not change the cost of a forward pass; the tiny tokenizers change the query and
prompt token counts slightly (the token counts measured are printed).

What it measures, in one process:

1. **Page encoding** (``EmbeddingRetriever.encode_pages``: decode threads, encoder, shard writing)
   on generated 2000x4000 pages (text lines and boxes drawn with PIL, half PNG, half JPEG files of
   a benchmark written with ``write_benchmark``), for each batch size x decode workers of the grid:
   pages/s, achieved TFLOP/s, MFU against ``--peak-tflops`` (H200 SXM dense bf16, 989.4), GPU peak
   memory. Beside it, for the bottleneck: decoding alone (``PageInputs.batches``), the encoder on
   preloaded images, the processor alone (CPU, main thread) and the model's forward alone; and
   ``encode_flops`` checked against torch's ``FlopCounterMode`` on one batch.
2. **Query encoding** (``EmbeddingRetriever.query_vectors``): queries/s for ~25-token queries.
3. **Exact MaxSim search** (``exact_search``, the retriever's configured search settings) over a
   synthetic store of random unit fp16 vectors held in host memory (as a warm page cache would hold
   the memory-mapped shards), against a plain fp32 ``torch.matmul`` of the shape one search block
   multiplies, measured in the same run. One shard is also searched at each ``precision`` (fp32,
   tf32, bf16): rate, and top-10 overlap and largest score change against fp32. ``exact_search``
   takes host-memory shards only, so the comparison with a store kept on the GPU is done here with
   its own block, operand and merge functions (``_page_blocks``, ``_maxsim``, ``_merge``) at the
   configured precision: same arithmetic, blocks uploaded once. A
   ``--search-budget-s`` caps the main search: if one shard says the full store would take longer,
   the search runs on fewer pages (said in the output).
4. **Document-context k-means** at n_ctx 256: the project builds it with faiss on CPU
   (``vldocir.retrieval.context``, no GPU path), so the GPU figure is a torch spherical k-means
   written here (labelled so); the project's faiss k-means is timed on a few documents beside it.
5. **Projection**: H200-hours for the paper's benchmark (388,548 pages, 271,760 queries, 29,641
   documents) per model, split into encode / search / context, beside the paper's ~100 GPU-hours per
   model. Models not measured are projected by FLOP ratio from the measured one.

FLOPs are counted by :func:`encode_flops` (see its docstring) and, for search, as
2 x query tokens x page tokens x dim per query-page pair.

Configurations (checked against the published config.json files; copies as indexed):
- ColQwen2.5 = Qwen2.5-VL-3B-Instruct, https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json
  (as mirrored at https://huggingface.co/zyoNoob/Qwen2.5-VL-3B-Instruct-AWQ/blob/main/config.json);
  vision depth, intermediate size, heads, window and full-attention blocks are the transformers
  ``Qwen2_5_VLVisionConfig`` defaults.
- ColNomic-7B = Qwen2.5-VL-7B-Instruct, https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct-AWQ/blame/main/config.json
  (the official AWQ copy: same architecture, quantisation aside).
- ColPali = PaliGemma-3B-pt-448, https://huggingface.co/vidore/colpaligemma-3b-pt-448-base/blob/12c59eb7e23bc4c26876f7be7c17760d5d3a1ffa/config.json
  (Gemma head_dim 256 is the ``GemmaConfig`` default).
- H200 SXM dense BF16 989.4 TFLOP/s, FP32 (non-tensor) 66.9 TFLOP/s: https://glennklockwood.com/garden/processors/h100
  (H100 and H200 share the GH100 compute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]

H200_BF16_DENSE_TFLOPS = 989.4
PAPER = {"pages": 388_548, "queries": 271_760, "documents": 29_641, "gpu_hours_per_model": 100}
PAGES_PER_DOC = 13  # the paper's average is 13.1
EMBED_DIM = 128  # colpali-engine's custom_text_proj
DEPTH = 100  # pages kept per query (run.py's default)
QUERY_TOKENS = 25

# Published architectures, by conf/retriever file. `prompt_tokens`: the page prompt's non-image tokens
# with the real tokenizers (ColQwen2.5: <|im_start|>user\n<|vision_start|>...<|vision_end|>Describe the
# image.<|im_end|><|endoftext|>; ColPali: <bos>Describe the image.\n), used only for the projection.
QWEN25_VL_VISION = {
    "hidden_size": 1280,
    "depth": 32,
    "intermediate_size": 3420,
    "num_heads": 16,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
}  # the 3B and the 7B share the vision tower's shape
PUBLISHED = {
    "colqwen25": {
        "family": "qwen2_5_vl",
        "visual_tokens": 768,
        "prompt_tokens": 11,
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "mrope_section": [16, 24, 24],
            "tie_word_embeddings": True,
        },
        "vision": {**QWEN25_VL_VISION, "out_hidden_size": 2048},
    },
    "colnomic7b": {
        "family": "qwen2_5_vl",
        "visual_tokens": 768,
        "prompt_tokens": 11,
        "text": {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "mrope_section": [16, 24, 24],
            "tie_word_embeddings": False,
        },
        "vision": {**QWEN25_VL_VISION, "out_hidden_size": 3584},
    },
    "colpali13": {
        "family": "paligemma",
        "visual_tokens": 1024,
        "prompt_tokens": 6,
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 257216,
        },
        "vision": {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "image_size": 448,
            "patch_size": 14,
        },
    },
}
# The same families at test size (as tests/tiny_models.py builds them), for --cpu-smoke.
TINY = {
    "qwen2_5_vl": {
        "family": "qwen2_5_vl",
        "visual_tokens": 64,
        "prompt_tokens": 11,
        "text": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 512,
            "mrope_section": [2, 3, 3],
            "tie_word_embeddings": True,
        },
        "vision": {
            "hidden_size": 32,
            "out_hidden_size": 64,
            "depth": 2,
            "intermediate_size": 64,
            "num_heads": 2,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
    },
    "paligemma": {
        "family": "paligemma",
        "visual_tokens": 16,
        "prompt_tokens": 6,
        "text": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "vocab_size": 1536,
        },
        "vision": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 56,
            "patch_size": 14,
        },
    },
}

# Sizes: the full run on one H200, and --cpu-smoke (well under a minute on 2 CPU cores).
SIZES = {
    "full": {
        "page_size": (2000, 4000),
        "distinct_pages": 32,
        "encode_pages": 128,
        "batch_sizes": "4,8,16",
        "decode_workers": "2,4,8",
        "encode_queries": 1024,
        "search_pages": 50_000,
        "search_queries": 10_000,
        "page_tokens": 768,
        "stream_queries": 256,
        "stream_calls": 2,
        "context_docs": 40,
        "context_cpu_docs": 4,
        "search_budget_s": 90.0,
    },
    "smoke": {
        "page_size": (400, 800),
        "distinct_pages": 2,
        "encode_pages": 8,
        "batch_sizes": "2,4",
        "decode_workers": "1,2",
        "encode_queries": 16,
        "search_pages": 300,
        "search_queries": 40,
        "page_tokens": 64,
        "stream_queries": 16,
        "stream_calls": 2,
        "context_docs": 3,
        "context_cpu_docs": 1,
        "search_budget_s": 30.0,
    },
}


# -- FLOPs ---------------------------------------------------------------------------------------
def encode_flops_parts(config, n_visual_tokens: int, n_text_tokens: int) -> dict[str, float]:
    """:func:`encode_flops` split into ``vision_dense``, ``vision_attention``, ``lm_dense``,
    ``lm_attention`` and ``head`` (custom_text_proj)."""
    if config.model_type == "qwen2_5_vl":
        v, t = config.vision_config, config.text_config
        merge = v.spatial_merge_size**2
        patches, d = n_visual_tokens * merge, v.hidden_size
        window = (v.window_size // v.patch_size) ** 2  # patches of one full window (8x8)
        keys = [patches if i in v.fullatt_block_indexes else min(window, patches) for i in range(v.depth)]
        patch_in = v.in_channels * v.temporal_patch_size * v.patch_size**2
        vision_dense = (
            2 * patches * patch_in * d  # Conv3d patch embedding
            + v.depth * 2 * patches * (4 * d * d + 3 * d * v.intermediate_size)  # qkv + proj, gated MLP
            + 2 * n_visual_tokens * (merge * d * merge * d + merge * d * v.out_hidden_size)
        )  # merger
        vision_attention = sum(4 * patches * k * d for k in keys)
        head = 0.0
    elif config.model_type == "paligemma":
        v, t = config.vision_config, config.text_config
        patches, d = n_visual_tokens, v.hidden_size  # SigLIP: one LM token per patch
        vision_dense = (
            2 * patches * v.num_channels * v.patch_size**2 * d  # Conv2d patch embedding
            + v.num_hidden_layers * 2 * patches * (4 * d * d + 2 * d * v.intermediate_size)  # q,k,v,o + MLP
            + 2 * patches * d * config.projection_dim
        )  # multi-modal projector
        vision_attention = v.num_hidden_layers * 4 * patches * patches * d
        head = 0.0  # no LM head: the encoder runs ColPali without it (encoders.colpali_embeddings)
    else:
        raise ValueError(f"no FLOP count for model_type {config.model_type!r} (qwen2_5_vl and paligemma are counted)")
    n, h = n_visual_tokens + n_text_tokens, t.hidden_size
    head_dim = getattr(t, "head_dim", None) or h // t.num_attention_heads
    q, kv = t.num_attention_heads * head_dim, t.num_key_value_heads * head_dim
    lm_dense = t.num_hidden_layers * 2 * n * (h * q + 2 * h * kv + q * h + 3 * h * t.intermediate_size)
    lm_attention = t.num_hidden_layers * 4 * n * n * q
    head += 2 * n * h * EMBED_DIM
    return {
        "vision_dense": float(vision_dense),
        "vision_attention": float(vision_attention),
        "lm_dense": float(lm_dense),
        "lm_attention": float(lm_attention),
        "head": float(head),
    }


def encode_flops(config, n_visual_tokens: int, n_text_tokens: int) -> float:
    """FLOPs of one forward pass of a ColQwen2.5-family (``qwen2_5_vl``) or ColPali (``paligemma``)
    model over one input: ``n_visual_tokens`` image tokens in the language model's sequence (after
    the 2x2 merge for Qwen; one per SigLIP patch for PaliGemma) and ``n_text_tokens`` other tokens
    (prompt or query). A query is ``n_visual_tokens=0``.

    Counted (2 FLOPs per multiply-add; biases, norms, activations, rotary embeddings and softmax
    are not):

    - vision tower: the patch embedding (a matrix product over each patch's pixels), per block the
      attention projections (4 d^2 per patch) and the MLP (gated, 3 d i, for Qwen; 2 d i for SigLIP),
      attention scores and weighted sum (4 x patches x keys x d), then the merger (Qwen: two linear
      layers on 4 d-wide merged tokens) or the multi-modal projector (PaliGemma). Qwen's windowed
      blocks attend within 112-pixel windows (64 patches; edge windows, smaller, are counted full),
      its ``fullatt_block_indexes`` blocks to the whole image;
    - language model: per token 2 x the parameters of the layers' linear maps (q, k, v with grouped
      KV heads, o, gated MLP), plus 4 x n^2 x heads x head_dim per layer for the attention scores
      (full n^2 as the PaLM MFU convention counts it, although Qwen's is causal);
    - heads: the 128-d ``custom_text_proj`` on every token. ColPali's own forward also computes the
      LM head's logits over the vocabulary and drops them (2 x tokens x hidden x vocab, 1.09 TFLOP
      of a 1,030-token page); the encoder does not run it (``ColEngineEncoder.embed``), so it is not
      counted.
    """
    return sum(encode_flops_parts(config, n_visual_tokens, n_text_tokens).values())


def maxsim_flops(n_queries: int, query_tokens: float, n_pages: int, page_tokens: float, dim: int) -> float:
    """Exhaustive MaxSim: 2 x query tokens x page tokens x dim for every (query, page) pair."""
    return 2.0 * n_queries * query_tokens * n_pages * page_tokens * dim


def project_hours(
    s_per_page: float,
    s_per_query: float,
    search_tflops: float,
    page_tokens: float,
    query_tokens: float,
    context_s_per_doc: float,
    dim: int = EMBED_DIM,
    scale: dict = PAPER,
) -> dict:
    """GPU-hours for ``scale`` (pages, queries, documents): encoding every page and query at the given
    seconds per item, exhaustive search at ``search_tflops``, and the context vectors of every document."""
    encode = scale["pages"] * s_per_page + scale["queries"] * s_per_query
    search = maxsim_flops(scale["queries"], query_tokens, scale["pages"], page_tokens, dim) / (search_tflops * 1e12)
    context = scale["documents"] * context_s_per_doc
    hours = {"encode_h": encode / 3600, "search_h": search / 3600, "context_h": context / 3600}
    return {**hours, "total_h": sum(hours.values())}


# -- models --------------------------------------------------------------------------------------
def model_config(spec: dict, token_ids: dict | None = None):
    """The transformers config of ``spec`` (a ``PUBLISHED`` or ``TINY`` entry); ``token_ids`` from
    the offline tokenizer (bos/eos/pad and the image token), else the classes' defaults."""
    ids = token_ids or {}
    text, vision = dict(spec["text"]), dict(spec["vision"])
    if spec["family"] == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        mrope, tie = text.pop("mrope_section"), text.pop("tie_word_embeddings")
        text.update(
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope},
            max_position_embeddings=128_000,
            rms_norm_eps=1e-6,
            **{k: ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in ids},
        )
        vision.update(patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
        special = {
            k: ids[k]
            for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
            if k in ids
        }
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **special)
    from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig

    text["vocab_size"] = max(text["vocab_size"], ids.get("vocab_size", 0))
    text_config = GemmaConfig(
        **text, **{k: ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in ids}
    )
    extra = {"image_token_index": ids["image_token_id"]} if "image_token_id" in ids else {}
    return PaliGemmaConfig(
        vision_config=SiglipVisionConfig(**vision, vision_use_head=False),
        text_config=text_config,
        vocab_size=text["vocab_size"],
        hidden_size=text["hidden_size"],
        projection_dim=text["hidden_size"],
        **extra,
    )


def offline_processor(spec: dict):
    """A processor of the family with the offline tokenizer of tests/tiny_models.py; (processor, token ids)."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from tiny_models import _qwen_image_and_video_processors, _qwen_token_ids, _qwen_tokenizer, _train_tokenizer

    if spec["family"] == "qwen2_5_vl":
        from colpali_engine.models import ColQwen2_5_Processor

        tokenizer = _qwen_tokenizer()
        image_processor, video_processor = _qwen_image_and_video_processors()
        processor = ColQwen2_5_Processor(
            image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor
        )
        ids = {
            **_qwen_token_ids(tokenizer),
            "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
        return processor, ids
    from colpali_engine.models import ColPaliProcessor
    from transformers import GemmaTokenizerFast, SiglipImageProcessor

    size, patch = spec["vision"]["image_size"], spec["vision"]["patch_size"]
    image_processor = SiglipImageProcessor(size={"height": size, "width": size}, image_seq_length=(size // patch) ** 2)
    processor = ColPaliProcessor(
        image_processor=image_processor, tokenizer=_train_tokenizer(GemmaTokenizerFast(), ["<image>"])
    )
    tok = processor.tokenizer
    return processor, {
        "vocab_size": len(tok),
        "image_token_id": processor.image_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


def build_checkpoint(model_class: str, spec: dict, directory: Path, device, dtype: str) -> dict:
    """Random ``model_class`` of ``spec`` in ``dtype``, initialised on ``device``, saved with its processor."""
    import torch
    from hydra.utils import get_class

    tick = time.perf_counter()
    processor, ids = offline_processor(spec)
    config = model_config(spec, ids)
    torch.manual_seed(0)
    with torch.device(device):
        model = get_class(model_class)._from_config(config, dtype=getattr(torch, dtype))
    _sync(device)
    built = time.perf_counter()
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters())
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "params": params,
        "build_s": built - tick,
        "save_s": time.perf_counter() - built,
        "bytes_saved": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
    }


def compose_retriever(name: str, checkpoint_dir: Path, device, smoke: bool):
    """The retriever of conf/retriever/<name>.yaml as run.py instantiates it, loading ``checkpoint_dir``."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    overrides = [
        f"retriever={name}",
        f"retriever.model.encoder.checkpoint.local_path={checkpoint_dir}",
        f"retriever.model.encoder.device={device}",
        f"retriever.model.search.device={device}",
        "retriever.model.progress=false",
    ]
    if smoke and PUBLISHED[name]["family"] == "qwen2_5_vl":
        overrides.append(
            f"retriever.model.encoder.processor_kwargs.max_num_visual_tokens={TINY['qwen2_5_vl']['visual_tokens']}"
        )
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides)
    return instantiate(cfg.retriever.model), cfg.retriever.model


# -- pages ---------------------------------------------------------------------------------------
WORDS = (
    "the revenue total report income assets liabilities table figure results patient cohort treatment "
    "quarterly operating costs year accuracy experiment document question answer page section model data"
).split()


def draw_page(path: Path, size: tuple[int, int], seed: int) -> None:
    """A document page: a title, lines of text in two widths, a figure box and a table grid."""
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(seed)
    width, height = size
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    line = max(8, height // 120)
    font, title = ImageFont.load_default(size=line), ImageFont.load_default(size=2 * line)
    margin = width // 20
    draw.text((margin, margin), " ".join(rng.choices(WORDS, k=6)).title(), fill="black", font=title)
    figure = (margin, height // 3, width - margin, height // 3 + height // 8)
    table = (margin, 2 * height // 3, width - margin, 2 * height // 3 + height // 10)
    y = margin + 3 * line
    while y < height - margin:
        box = next((b for b in (figure, table) if b[1] <= y <= b[3]), None)
        if box is not None:
            y = box[3] + line
            continue
        draw.text((margin, y), " ".join(rng.choices(WORDS, k=rng.randint(8, 14))), fill="black", font=font)
        y += int(line * 1.4)
    draw.rectangle(figure, outline="black", width=3, fill=(225, 232, 245))
    draw.ellipse(
        (figure[0] + width // 10, figure[1] + line, figure[0] + width // 3, figure[3] - line), outline="navy", width=4
    )
    draw.rectangle(table, outline="black", width=2)
    x0, y0, x1, y1 = table
    for i in range(1, 5):
        draw.line((x0, y0 + i * (y1 - y0) // 5, x1, y0 + i * (y1 - y0) // 5), fill="black")
        draw.line((x0 + i * (x1 - x0) // 5, y0, x0 + i * (x1 - x0) // 5, y1), fill="black")
    image.save(path, **({"quality": 90} if path.suffix == ".jpg" else {}))


def build_benchmark(root: Path, n_pages: int, distinct: int, size: tuple[int, int]):
    """A valid benchmark of ``n_pages`` pages (documents of 13), images by path: ``distinct`` drawn
    pages, alternately PNG and JPEG, each page file a hard link to one of them."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    from vldocir.data.benchmark import write_benchmark
    from vldocir.data.schema import TABLES

    sources = [root / "drawn" / f"page-{i:03d}.{'png' if i % 2 == 0 else 'jpg'}" for i in range(distinct)]
    sources[0].parent.mkdir(parents=True)
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(lambda i: draw_page(sources[i], size, i), range(distinct)))
    docs = [f"d{d:05d}" for d in range(-(-n_pages // PAGES_PER_DOC))]
    page_ids, paths = [], []
    for page in range(n_pages):
        doc, index = docs[page // PAGES_PER_DOC], page % PAGES_PER_DOC
        source = sources[page % distinct]
        relative = f"pages/{doc}/p{index:03d}{source.suffix}"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        os.link(source, root / relative)
        page_ids.append(f"{doc}-p{index:03d}")
        paths.append(relative)
    n_docs = len(docs)
    counts = np.bincount(np.arange(n_pages) // PAGES_PER_DOC, minlength=n_docs).astype(np.int32)
    tables = {
        "documents": pa.table(
            {
                "doc_id": docs,
                "source": ["wikipedia"] * n_docs,
                "domain": ["history"] * n_docs,
                "title": docs,
                "n_pages": counts,
                "url": [None] * n_docs,
                "license": ["CC-BY-4.0"] * n_docs,
            }
        ),
        "pages": pa.table(
            {
                "page_id": page_ids,
                "doc_id": [p.split("-")[0] for p in page_ids],
                "page_index": np.arange(n_pages, dtype=np.int32) % PAGES_PER_DOC,
                "image": [{"bytes": None, "path": p} for p in paths],
                "width": np.full(n_pages, size[0], np.int32),
                "height": np.full(n_pages, size[1], np.int32),
                "dom_text": page_ids,
                "ocr_text": [None] * n_pages,
            }
        ),
        "elements": TABLES["elements"].schema.empty_table(),
        "queries": pa.table(
            {
                "query_id": [f"q{d}" for d in docs],
                "text": [f"what is on {d}?" for d in docs],
                "answer": ["x"] * n_docs,
                "evidence_structure": ["page_single"] * n_docs,
                "source": ["wikipedia"] * n_docs,
                "domain": ["history"] * n_docs,
                "generator": ["bench"] * n_docs,
                "evidence_types": [["text"]] * n_docs,
            }
        ),
        "qrels": pa.table(
            {
                "query_id": [f"q{d}" for d in docs],
                "page_id": [f"{d}-p000" for d in docs],
                "doc_id": docs,
                "element_ids": [[] for _ in docs],
            }
        ),
    }
    return write_benchmark(root, tables, {"name": "bench-gpu", "version": "bench"})


# -- timing helpers ------------------------------------------------------------------------------
def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _timed(device, fn, *args, **kwargs):
    _sync(device)
    tick = time.perf_counter()
    out = fn(*args, **kwargs)
    _sync(device)
    return time.perf_counter() - tick, out


def _reset_peak(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device) -> float | None:
    if device.type != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**30


def gemm_tflops(m: int, k: int, n: int, dtype, device, seconds: float = 1.0) -> float:
    """TFLOP/s of ``(m, k) @ (k, n)`` in ``dtype``, repeated for about ``seconds``."""
    import torch

    a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
    once, _ = _timed(device, lambda: [a @ b for _ in range(3)])
    repeats = max(3, int(seconds / max(once / 3, 1e-6)))
    elapsed, _ = _timed(device, lambda: [a @ b for _ in range(repeats)])
    return 2.0 * m * k * n * repeats / elapsed / 1e12


# -- 1. page encoding ----------------------------------------------------------------------------
def page_tokens(encoder, image) -> tuple[int, int]:
    """(image tokens, other tokens) of one page as the encoder's processor prepares it."""
    batch = encoder.processor.process_images([image])
    visual = int((batch["input_ids"] == encoder.processor.image_token_id).sum())
    return visual, int(batch["attention_mask"].sum()) - visual


def measure_encode(args, retriever, bench, config, device, tmp: Path) -> dict:
    import torch

    from vldocir.cache import ArtifactCache
    from vldocir.retrieval.embeddings import PageInputs

    encoder = retriever.encoder
    inputs = PageInputs(bench, "image")
    n = len(inputs.page_ids)
    preloaded = [image for batch, _ in inputs.batches(0, n, 8, os.cpu_count()) for image in batch]
    visual, text = page_tokens(encoder, preloaded[0])
    flops_page = encode_flops(config, visual, text)
    peak = args.peak_tflops * 1e12

    def rate(pages, seconds):
        return {
            "pages_per_s": pages / seconds,
            "tflops": pages * flops_page / seconds / 1e12,
            "mfu": pages * flops_page / seconds / peak,
        }

    batch_sizes, workers_grid = _ints(args.batch_sizes), _ints(args.decode_workers)
    result = {
        "pages": n,
        "visual_tokens": visual,
        "other_tokens": text,
        "flops_per_page": flops_page,
        "flops_parts": encode_flops_parts(config, visual, text),
        "decode": {},
        "preloaded": {},
        "processor": {},
        "forward": {},
        "sweep": [],
    }
    for workers in workers_grid:  # decoding alone, as the store's decode threads do it
        seconds, _ = _timed(
            device, lambda workers=workers: [None for _ in inputs.batches(0, n, max(batch_sizes), workers)]
        )
        result["decode"][workers] = n / seconds
    for size in batch_sizes:
        batches = [preloaded[i : i + size] for i in range(0, n, size)]
        encoder.encode_pages(batches[0])  # warm-up at this shape
        _reset_peak(device)
        seconds, _ = _timed(device, lambda batches=batches: [encoder.encode_pages(b) for b in batches])
        result["preloaded"][size] = {**rate(n, seconds), "peak_gb": _peak_gb(device)}
        seconds, prepared = _timed(
            device, lambda batches=batches: [encoder.processor.process_images(b) for b in batches]
        )
        result["processor"][size] = n / seconds
        prepared = [b.to(encoder.model.device) for b in prepared]
        with torch.inference_mode():
            seconds, _ = _timed(device, lambda prepared=prepared: [encoder.model(**b) for b in prepared])
        result["forward"][size] = rate(n, seconds)
        del prepared
    for size in batch_sizes:  # end to end: EmbeddingRetriever.encode_pages into a fresh store
        for workers in workers_grid:
            encoder.batch_size, retriever.decode_workers = size, workers
            _reset_peak(device)
            seconds, _ = _timed(device, retriever.encode_pages, bench, ArtifactCache(tmp / f"cache-b{size}-w{workers}"))
            result["sweep"].append(
                {"batch_size": size, "decode_workers": workers, **rate(n, seconds), "peak_gb": _peak_gb(device)}
            )
            print(f"  encode b={size:>2} w={workers}: {n / seconds:7.2f} pages/s", flush=True)
    best = max(result["sweep"], key=lambda r: r["pages_per_s"])
    result["best"] = best
    result["bottleneck"] = bottleneck(result, best)
    result["flop_check"] = flop_check(encoder, preloaded[: min(2, n)], config)
    return result


def bottleneck(result: dict, best: dict) -> dict:
    """Which stage limits the best cell: decoding (threads), the processor (CPU, main thread) or the forward.

    Decoding runs one batch ahead of the encoder, in threads; the processor and the forward run one
    after the other in the main thread. So the pipeline's rate is about the lower of the decode rate
    and the encoder's, 1 / (1 / processor + 1 / forward).
    """
    size, workers = best["batch_size"], best["decode_workers"]
    stages = {
        "decode": result["decode"][workers],
        "processor": result["processor"][size],
        "forward": result["forward"][size]["pages_per_s"],
    }
    encoder_rate = 1 / (1 / stages["processor"] + 1 / stages["forward"])
    if stages["decode"] < encoder_rate:
        stage = "decoding"
        verdict = f"{workers} decode threads give {stages['decode']:.1f} pages/s, the encoder {encoder_rate:.1f}"
    elif stages["processor"] < stages["forward"]:
        stage, verdict = (
            "processor (CPU)",
            (
                f"the processor alone is {stages['processor']:.1f} pages/s, the forward "
                f"{stages['forward']:.1f}: CPU preprocessing in the main thread"
            ),
        )
    else:
        stage, verdict = (
            "model forward",
            (
                f"the forward alone is {stages['forward']:.1f} pages/s, the processor "
                f"{stages['processor']:.1f}, decoding {stages['decode']:.1f}"
            ),
        )
    return {
        "stages_pages_per_s": stages,
        "encoder_pages_per_s": encoder_rate,
        "end_to_end_pages_per_s": best["pages_per_s"],
        "stage": stage,
        "verdict": verdict,
    }


def flop_check(encoder, images, config) -> dict:
    """encode_flops against torch's FlopCounterMode on one batch: the dense part (matrix products and
    convolutions) should agree; attention kernels are counted by the counter only where it knows them
    (on CPU the fused attention is not)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    batch = encoder.processor.process_images(images).to(encoder.model.device)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        encoder.embed(batch)  # what encode_pages runs
    counts = {str(op): v for op, v in counter.get_flop_counts().get("Global", {}).items()}
    dense = sum(
        v
        for op, v in counts.items()
        if op in ("aten.mm", "aten.addmm", "aten.convolution", "aten._convolution", "aten.cudnn_convolution")
    )
    visual = int((batch["input_ids"] == encoder.processor.image_token_id).sum()) // len(images)
    text = int(batch["attention_mask"].sum()) // len(images) - visual
    parts = encode_flops_parts(config, visual, text)
    formula_dense = len(images) * (parts["vision_dense"] + parts["lm_dense"] + parts["head"])
    return {
        "counter_by_op": counts,
        "counter_total": float(sum(counts.values())),
        "counter_dense": float(dense),
        "formula_total": len(images) * sum(parts.values()),
        "formula_dense": formula_dense,
        "dense_ratio": formula_dense / dense if dense else None,
    }


# -- 2. query encoding ---------------------------------------------------------------------------
def make_queries(encoder, n: int, target: int = QUERY_TOKENS) -> dict[str, str]:
    """``n`` query texts of random words, of the word count whose processed length (prefix and
    augmentation tokens included, mean over the first 64) is closest to ``target`` tokens."""

    def texts(words: int) -> list[str]:
        rng = random.Random(words)
        return [" ".join(rng.choices(WORDS, k=words)) + "?" for _ in range(n)]

    def error(words: int) -> float:
        lengths = encoder.processor.process_queries(texts(words)[:64])["attention_mask"].sum(dim=1)
        return abs(float(lengths.float().mean()) - target)

    words = min(range(1, 2 * target), key=error)
    return {f"q{i:06d}": text for i, text in enumerate(texts(words))}


def measure_queries(args, retriever, bench, config, device, tmp: Path) -> dict:
    from vldocir.cache import ArtifactCache

    encoder = retriever.encoder
    queries = make_queries(encoder, args.encode_queries)
    encoder.encode_queries(list(queries.values())[: encoder.query_batch_size])  # warm-up
    _reset_peak(device)
    seconds, vectors = _timed(device, retriever.query_vectors, bench, queries, ArtifactCache(tmp / "cache-queries"))
    mean_tokens = float(vectors.lengths.mean())
    flops = encode_flops(config, 0, mean_tokens) * len(queries)
    return {
        "queries": len(queries),
        "batch_size": encoder.query_batch_size,
        "mean_tokens": mean_tokens,
        "queries_per_s": len(queries) / seconds,
        "tflops": flops / seconds / 1e12,
        "mfu": flops / seconds / (args.peak_tflops * 1e12),
        "peak_gb": _peak_gb(device),
    }


# -- 3. search -----------------------------------------------------------------------------------
def synthetic_store(n_pages: int, tokens: int, dim: int, shard_size: int, device, seed: int = 0):
    """Random unit fp16 page vectors in host memory, cut into shards as the store holds them."""
    import torch

    from vldocir.retrieval.vectors import RaggedVectors

    host = np.empty((n_pages * tokens, dim), dtype=np.float16)
    generator = torch.Generator(device=device).manual_seed(seed)
    for start in range(0, n_pages, shard_size):
        stop = min(start + shard_size, n_pages)
        block = torch.randn((stop - start) * tokens, dim, device=device, generator=generator)
        host[start * tokens : stop * tokens] = torch.nn.functional.normalize(block, dim=1).half().cpu().numpy()
    offsets = np.arange(shard_size + 1, dtype=np.int64) * tokens
    shards = [
        RaggedVectors(
            host[a * tokens : min(a + shard_size, n_pages) * tokens],
            offsets[: min(shard_size, n_pages - a) + 1],
            first_index=a,
        )
        for a in range(0, n_pages, shard_size)
    ]
    return host, shards


def synthetic_queries(n: int, tokens: int, dim: int, seed: int = 1):
    """Random unit query vectors in fp16, as the retriever's query store holds them (TF32 holds them exactly)."""
    from vldocir.retrieval.vectors import RaggedVectors

    vectors = np.random.default_rng(seed).standard_normal((n * tokens, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return RaggedVectors(vectors.astype(np.float16), np.arange(n + 1, dtype=np.int64) * tokens)


def resident_search(queries, resident, depth: int, query_batch_size: int, device, precision: str):
    """``exact_search``'s loop (its own block, operand and merge functions, at a resolved
    ``precision``) over page blocks already on the GPU."""
    import torch

    from vldocir.retrieval.search import _as_operand, _matmul_precision, _maxsim, _merge

    order = np.argsort(queries.lengths, kind="stable")
    batches = [order[i : i + query_batch_size] for i in range(0, len(queries), query_batch_size)]
    flat = [
        _as_operand(queries.padded_fp32(b, device, pad="zero").reshape(-1, queries.dim), precision) for b in batches
    ]
    best = [
        (
            torch.full((len(b), 0), float("-inf"), device=device),
            torch.zeros((len(b), 0), dtype=torch.int64, device=device),
        )
        for b in batches
    ]
    with torch.inference_mode(), _matmul_precision(precision):
        for blocks, indices, n_items in resident:
            for b, queries_flat in enumerate(flat):
                scores = _maxsim(queries_flat, len(batches[b]), blocks, n_items)
                best[b] = _merge(best[b][0], best[b][1], scores, indices[None, :], depth)
    top = np.full((len(queries), depth), -1, dtype=np.int64)
    for batch, (_, idx) in zip(batches, best, strict=True):
        top[batch, : idx.shape[1]] = idx.cpu().numpy()
    return top


def measure_search(args, search_cfg: dict, device) -> tuple[dict, list, object, np.ndarray]:
    """exact_search over the synthetic store at the retriever's search settings; returns the figures,
    the shards searched, the queries (for :func:`measure_residency`) and the store's vectors."""
    import torch

    from vldocir.retrieval.search import resolve_precision

    qbs, pbt = int(search_cfg["query_batch_size"]), int(search_cfg["page_block_tokens"])
    precision = resolve_precision(search_cfg.get("precision", "auto"), device)
    tokens, dim = args.page_tokens, EMBED_DIM
    tick = time.perf_counter()
    host, shards = synthetic_store(args.search_pages, tokens, dim, args.shard_size, device)
    queries = synthetic_queries(args.search_queries, QUERY_TOKENS, dim)
    store_s = time.perf_counter() - tick
    search = _searcher(device, qbs, pbt, precision)
    search(queries.subset(np.arange(min(qbs, len(queries)))), shards[:1])  # warm-up
    one_shard = []  # all queries against the first shard, at the configured and at larger batch sizes
    for q_bs, p_bt in dict.fromkeys([(qbs, pbt), (8 * qbs, pbt), (8 * qbs, 8 * pbt)]):
        seconds, _ = _timed(device, search, queries, shards[:1], qbs=q_bs, pbt=p_bt)
        flops = maxsim_flops(len(queries), QUERY_TOKENS, len(shards[0]), tokens, dim)
        one_shard.append(
            {"query_batch_size": q_bs, "page_block_tokens": p_bt, "seconds": seconds, "tflops": flops / seconds / 1e12}
        )
    precisions = measure_precisions(search, queries, shards[0], tokens, dim, device)
    used = shards[: max(1, min(len(shards), int(args.search_budget_s / one_shard[0]["seconds"])))]
    n_pages = sum(len(s) for s in used)
    _reset_peak(device)
    seconds, _ = _timed(device, search, queries, used)
    tflops = maxsim_flops(len(queries), QUERY_TOKENS, n_pages, tokens, dim) / seconds / 1e12
    # one block's product in _maxsim: page tokens x query tokens
    shape = (max(pbt // tokens, 1) * tokens, dim, qbs * QUERY_TOKENS)
    matmul = gemm_tflops(*shape, torch.float32, device)
    square = 4096 if device.type == "cuda" else 512  # the device's fp32 and bf16 rates, for reference
    result = {
        "store_pages": args.search_pages,
        "pages_searched": n_pages,
        "queries": len(queries),
        "query_tokens": QUERY_TOKENS,
        "page_tokens": tokens,
        "dim": dim,
        "depth": DEPTH,
        "query_batch_size": qbs,
        "page_block_tokens": pbt,
        "store_build_s": store_s,
        "seconds": seconds,
        "tflops": tflops,
        "peak_gb": _peak_gb(device),
        "one_shard": one_shard,
        "precision": precision,
        "precisions": precisions,
        "matmul_shape": list(shape),
        "matmul_tflops": matmul,
        "matmul_ratio": tflops / matmul,
        "square_matmul_size": square,
        "fp32_square_matmul_tflops": gemm_tflops(square, square, square, torch.float32, device),
        "bf16_square_matmul_tflops": gemm_tflops(4096, 4096, 4096, torch.bfloat16, device)
        if device.type == "cuda"
        else None,
        "fp32_precision": torch.backends.cuda.matmul.fp32_precision,  # the process's setting (a search sets its own)
    }
    return result, used, queries, host


def measure_precisions(search, queries, shard, tokens: int, dim: int, device) -> list[dict]:
    """All queries against one shard at each of exact_search's precisions: seconds, TFLOP/s, and
    against fp32 the top-10 overlap (mean over queries) and the largest change of a ranked score."""
    flops = maxsim_flops(len(queries), QUERY_TOKENS, len(shard), tokens, dim)
    rows, reference = [], None
    for precision in ("fp32", "tf32", "bf16"):
        search(queries.subset(np.arange(min(32, len(queries)))), [shard], precision=precision)  # warm-up
        seconds, top = _timed(device, search, queries, [shard], precision=precision)
        if reference is None:
            reference = top
        finite = np.isfinite(reference.scores)
        rows.append(
            {
                "precision": precision,
                "seconds": seconds,
                "tflops": flops / seconds / 1e12,
                "top10_overlap_with_fp32": float(
                    np.mean(
                        [
                            len(set(a[:10]) & set(b[:10])) / 10
                            for a, b in zip(top.indices, reference.indices, strict=True)
                        ]
                    )
                ),
                "max_score_change": float(np.abs(top.scores[finite] - reference.scores[finite]).max()),
            }
        )
    return rows


def _searcher(device, qbs: int, pbt: int, precision: str = "auto"):
    from vldocir.retrieval.search import exact_search

    def search(queries, shards, qbs=qbs, pbt=pbt, precision=precision):
        return exact_search(
            queries,
            iter(shards),
            DEPTH,
            query_batch_size=qbs,
            page_block_tokens=pbt,
            device=str(device),
            precision=precision,
            progress=False,
        )

    return search


def measure_residency(args, search_cfg: dict, shards: list, queries, device) -> dict:
    """Batches of queries, one exact_search call each (the store streamed from host memory at every
    call), against the same arithmetic over page blocks uploaded once and kept on the device."""
    import torch

    from vldocir.retrieval.search import _page_blocks, resolve_precision

    qbs, pbt = int(search_cfg["query_batch_size"]), int(search_cfg["page_block_tokens"])
    precision = resolve_precision(search_cfg.get("precision", "auto"), device)
    if device.type == "cuda":  # fp32 blocks take twice the fp16 store: keep to half the free memory
        free = torch.cuda.mem_get_info(device)[0]
        shards = shards[: max(1, min(len(shards), int(free / 2 / (len(shards[0].vectors) * EMBED_DIM * 4))))]
    n_pages = sum(len(s) for s in shards)
    calls = [
        queries.subset(np.arange(i * args.stream_queries, (i + 1) * args.stream_queries) % len(queries))
        for i in range(args.stream_calls)
    ]
    search = _searcher(device, qbs, pbt, precision)
    streamed = [_timed(device, search, q, shards) for q in calls]
    upload_s, resident = _timed(
        device,
        lambda: [
            (
                _page_blocks(s, pbt, device, precision=precision),
                torch.arange(len(s), device=device) + s.first_index,
                len(s),
            )
            for s in shards
        ],
    )
    kept = [_timed(device, resident_search, q, resident, DEPTH, qbs, device, precision) for q in calls]
    resident_gb = sum(block.numel() * block.element_size() for blocks, _, _ in resident for _, block in blocks) / 2**30
    del resident
    flops = maxsim_flops(args.stream_queries, QUERY_TOKENS, n_pages, args.page_tokens, EMBED_DIM)
    streamed_s, resident_s = [s for s, _ in streamed], [s for s, _ in kept]
    return {
        "queries_per_call": args.stream_queries,
        "calls": args.stream_calls,
        "pages": n_pages,
        "streamed_s": streamed_s,
        "resident_s": resident_s,
        "upload_s": upload_s,
        "precision": precision,
        "resident_gb": resident_gb,
        "streamed_tflops": flops / np.median(streamed_s) / 1e12,
        "resident_tflops": flops / np.median(resident_s) / 1e12,
        "speedup": float(np.median(streamed_s) / np.median(resident_s)),
        "same_top": bool(all(np.array_equal(s.indices, r) for (_, s), (_, r) in zip(streamed, kept, strict=True))),
    }


# -- 4. document context -------------------------------------------------------------------------
def torch_spherical_kmeans(x, k: int, iterations: int, seed: int):
    """(n, d) -> (min(k, n), d) unit centroids: Lloyd's iterations on cosine similarity, seeded
    initial centroids drawn from the points, an empty cluster keeps its centroid. Written for this
    benchmark (the project's build is faiss on CPU); not bit-compatible with faiss."""
    import torch

    x = torch.nn.functional.normalize(x, dim=1)
    if len(x) <= k:
        return x
    generator = torch.Generator(device=x.device).manual_seed(seed)
    centroids = x[torch.randperm(len(x), generator=generator, device=x.device)[:k]]
    for _ in range(iterations):
        assign = (x @ centroids.T).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k)[:, None]
        centroids = torch.where(counts > 0, torch.nn.functional.normalize(sums, dim=1), centroids)
    return centroids


def measure_context(args, host: np.ndarray, device) -> dict:
    import faiss
    import torch

    from vldocir.retrieval.context import spherical_kmeans

    doc_rows = PAGES_PER_DOC * args.page_tokens
    n_docs = min(args.context_docs, len(host) // doc_rows)
    docs = [host[i * doc_rows : (i + 1) * doc_rows] for i in range(n_docs)]
    torch_spherical_kmeans(torch.from_numpy(docs[0]).to(device).float(), args.n_ctx, 20, 0)  # warm-up
    seconds, _ = _timed(
        device,
        lambda: [
            torch_spherical_kmeans(torch.from_numpy(d).to(device).float(), args.n_ctx, 20, i)
            for i, d in enumerate(docs)
        ],
    )
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # as the project's build runs it, one thread per worker
    try:
        cpu_docs = docs[: args.context_cpu_docs]
        tick = time.perf_counter()
        for i, d in enumerate(cpu_docs):
            spherical_kmeans(d.astype(np.float32), args.n_ctx, 20, i)
        cpu_s = (time.perf_counter() - tick) / max(len(cpu_docs), 1)
    finally:
        faiss.omp_set_num_threads(threads)
    return {
        "n_ctx": args.n_ctx,
        "iterations": 20,
        "docs": n_docs,
        "tokens_per_doc": doc_rows,
        "s_per_doc": seconds / n_docs,
        "method": "torch spherical k-means written in perf/bench_gpu.py (not the project's)",
        "faiss_cpu_1_thread_s_per_doc": cpu_s,
        "faiss_cpu_docs": len(cpu_docs),
    }


# -- 5. projection -------------------------------------------------------------------------------
def projection(
    measured_name: str, measured_config, encode: dict, queries: dict, search: dict, context: dict, smoke: bool
) -> list[dict]:
    """H200-hours per model at the paper's scale; models other than the measured one by FLOP ratio."""
    best = encode["best"]
    s_page = 1 / best["pages_per_s"]
    s_query = 1 / queries["queries_per_s"]
    page_flops = encode_flops(measured_config, encode["visual_tokens"], encode["other_tokens"])
    query_flops = encode_flops(measured_config, 0, queries["mean_tokens"])
    rows = []
    for name, spec in PUBLISHED.items():
        config = model_config(spec)
        tokens = spec["visual_tokens"] + spec["prompt_tokens"]
        ratio_page = encode_flops(config, spec["visual_tokens"], spec["prompt_tokens"]) / page_flops
        ratio_query = encode_flops(config, 0, QUERY_TOKENS) / query_flops
        is_measured = name == measured_name and not smoke
        hours = project_hours(
            s_page * (1 if is_measured else ratio_page),
            s_query * (1 if is_measured else ratio_query),
            search["tflops"],
            tokens,
            QUERY_TOKENS,
            context["s_per_doc"] * tokens / search["page_tokens"],
        )
        basis = "measured" if is_measured else f"FLOP ratio from {measured_name}{' (tiny, smoke)' if smoke else ''}"
        rows.append(
            {
                "model": name,
                "basis": basis,
                "page_tokens": tokens,
                "encode_flop_ratio": ratio_page,
                **hours,
                "paper_gpu_hours": PAPER["gpu_hours_per_model"],
            }
        )
    return rows


# -- main ----------------------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x]


def _versions() -> dict:
    from importlib.metadata import version

    import torch

    return {
        "python": platform.python_version(),
        **{name: version(name) for name in ("torch", "transformers", "colpali-engine")},
        "cuda": torch.version.cuda,
    }


def print_summary(out: dict) -> None:
    e, q, s, r, c = out["encode"], out["queries"], out["search"], out["residency"], out["context"]
    best, stages, peak = e["best"], e["bottleneck"]["stages_pages_per_s"], out["config"]["peak_tflops"]
    memory = f"{best['peak_gb']:.1f} GiB" if best["peak_gb"] is not None else "n/a on CPU"
    smoke = " (CPU smoke: the figures say nothing about a GPU)" if out["config"]["cpu_smoke"] else ""
    print(f"\nSummary: {out['config']['model']} on {out['device']}{smoke}")
    rows = [
        (
            "page encode (best cell)",
            f"{best['pages_per_s']:.2f} pages/s",
            f"batch {best['batch_size']}, {best['decode_workers']} "
            f"decode workers; {best['tflops']:.1f} TFLOP/s, MFU {best['mfu']:.1%} of {peak:g}; peak memory {memory}",
        ),
        (
            "  a page",
            f"{e['flops_per_page'] / 1e12:.3f} TFLOP",
            f"{e['visual_tokens']} image + {e['other_tokens']} other tokens; "
            f"formula / FlopCounterMode on matrix products: {e['flop_check']['dense_ratio']:.3f}",
        ),
        ("  stages alone", " / ".join(f"{v:.1f}" for v in stages.values()), "pages/s: decode / processor / forward"),
        ("  bottleneck", e["bottleneck"]["stage"], e["bottleneck"]["verdict"]),
        (
            "query encode",
            f"{q['queries_per_s']:.1f} queries/s",
            f"{q['mean_tokens']:.1f} tokens, batch {q['batch_size']}; {q['tflops']:.2f} TFLOP/s, MFU {q['mfu']:.1%}",
        ),
        (
            "exact_search",
            f"{s['tflops']:.2f} TFLOP/s",
            f"{s['queries']:,} queries x {s['pages_searched']:,} pages, "
            f"{s['seconds']:.1f} s at precision {s['precision']}; "
            f"fp32 matmul of one block's shape {s['matmul_tflops']:.2f} TFLOP/s, "
            f"ratio {s['matmul_ratio']:.2f}",
        ),
        (
            "  one shard by precision",
            " / ".join(f"{row['tflops']:.1f}" for row in s["precisions"]),
            "TFLOP/s at "
            + " / ".join(row["precision"] for row in s["precisions"])
            + "; against fp32: top-10 overlap "
            + " / ".join(f"{row['top10_overlap_with_fp32']:.3f}" for row in s["precisions"])
            + ", largest score change "
            + " / ".join(f"{row['max_score_change']:.1e}" for row in s["precisions"]),
        ),
        (
            "  store resident vs streamed",
            f"{r['speedup']:.2f}x",
            f"{r['resident_tflops']:.2f} vs {r['streamed_tflops']:.2f} TFLOP/s per call of "
            f"{r['queries_per_call']} queries; "
            f"same top-{DEPTH}: {r['same_top']}; upload {r['upload_s']:.1f} s",
        ),
        (
            "device matmul, square",
            f"{s['fp32_square_matmul_tflops']:.2f} TFLOP/s",
            f"fp32, {s['square_matmul_size']}^3"
            + (
                f"; bf16 4096^3: {s['bf16_square_matmul_tflops']:.0f} TFLOP/s, "
                f"{s['bf16_square_matmul_tflops'] / peak:.0%} "
                "of the peak"
                if s["bf16_square_matmul_tflops"]
                else ""
            )
            + f"; process fp32_precision: {s['fp32_precision']}",
        ),
        (
            "context k-means (torch)",
            f"{c['s_per_doc'] * 1e3:.2f} ms/doc",
            f"n_ctx {c['n_ctx']}, {c['tokens_per_doc']} tokens a "
            f"document; the project's faiss on one CPU thread: {c['faiss_cpu_1_thread_s_per_doc'] * 1e3:.1f} ms/doc",
        ),
    ]
    for name, figure, note in rows:
        print(f"{name:<29} {figure:>18}   {note}")
    print(
        f"\nProjection, H200-hours for {PAPER['pages']:,} pages, {PAPER['queries']:,} queries, "
        f"{PAPER['documents']:,} documents:"
    )
    print(f"{'model':<11} {'basis':<40} {'encode h':>9} {'search h':>9} {'context h':>10} {'total h':>8} {'paper':>6}")
    for row in out["projection"]:
        print(
            f"{row['model']:<11} {row['basis']:<40} {row['encode_h']:>9.1f} {row['search_h']:>9.1f} "
            f"{row['context_h']:>10.2f} {row['total_h']:>8.1f} {row['paper_gpu_hours']:>6}"
        )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="colqwen25", choices=sorted(PUBLISHED), help="conf/retriever file to measure"
    )
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="tiny model and sizes on CPU: checks the code path only"
    )
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS, help="dense bf16 peak for MFU")
    for key, value in SIZES["full"].items():
        if key != "page_size":
            parser.add_argument(
                f"--{key.replace('_', '-')}",
                type=type(value),
                default=None,
                help=f"default {value} ({SIZES['smoke'][key]} with --cpu-smoke)",
            )
    parser.add_argument("--shard-size", type=int, default=1024, help="pages per shard of the synthetic search store")
    parser.add_argument("--n-ctx", type=int, default=256, help="context vectors per document")
    parser.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where checkpoint, pages and stores go")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    preset = SIZES["smoke" if args.cpu_smoke else "full"]
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)

    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        sys.exit("bench_gpu.py: no CUDA device is visible; pass --cpu-smoke to run the CPU smoke mode")
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    if args.cpu_smoke:
        torch.set_num_threads(1)  # a second thread stalls on a shared 2-core machine (see bench_settings)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings(
        "ignore", category=FutureWarning, module="transformers"
    )  # the Qwen processor's min/max_pixels
    started = time.perf_counter()
    spec = TINY[PUBLISHED[args.model]["family"]] if args.cpu_smoke else PUBLISHED[args.model]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"bench_gpu: {args.model}{' (tiny)' if args.cpu_smoke else ''} on {device_name}", flush=True)
    out: dict = {
        "device": device_name,
        "versions": _versions(),
        "phases_s": {},
        "config": {
            "model": args.model,
            "cpu_smoke": args.cpu_smoke,
            "peak_tflops": args.peak_tflops,
            **{k: getattr(args, k) for k in (*preset, "shard_size", "n_ctx")},
        },
    }

    def phase(name: str, tick: float) -> None:
        out["phases_s"][name] = time.perf_counter() - tick
        print(f"{name}: {out['phases_s'][name]:.1f} s", flush=True)

    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-gpu-") as tmp:
        tmp, tick = Path(tmp), time.perf_counter()
        bench = build_benchmark(tmp / "bench", args.encode_pages, args.distinct_pages, tuple(args.page_size))
        phase(
            f"pages ({args.encode_pages} of {args.page_size[0]}x{args.page_size[1]}, {args.distinct_pages} drawn)", tick
        )
        tick = time.perf_counter()
        retriever, retriever_cfg = compose_retriever(args.model, tmp / "checkpoint", device.type, args.cpu_smoke)
        encoder = retriever.encoder
        out["model"] = build_checkpoint(encoder.model_class, spec, tmp / "checkpoint", device, encoder.dtype)
        out["model"]["load_s"], _ = _timed(device, encoder.prepare)
        config = encoder.model.config
        phase(
            f"model ({out['model']['params'] / 1e9:.2f} B parameters: built {out['model']['build_s']:.1f} s, "
            f"saved {out['model']['save_s']:.1f} s, loaded {out['model']['load_s']:.1f} s)",
            tick,
        )
        tick = time.perf_counter()
        out["encode"] = measure_encode(args, retriever, bench, config, device, tmp)
        phase("page encoding", tick)
        tick = time.perf_counter()
        out["queries"] = measure_queries(args, retriever, bench, config, device, tmp)
        phase("query encoding", tick)
        del retriever, encoder
        if device.type == "cuda":
            torch.cuda.empty_cache()
        tick = time.perf_counter()
        search_cfg = dict(retriever_cfg.search)
        out["search"], shards, queries, host = measure_search(args, search_cfg, device)
        phase("exact search", tick)
        tick = time.perf_counter()
        out["residency"] = measure_residency(args, search_cfg, shards, queries, device)
        phase("resident vs streamed", tick)
        del shards, queries
        tick = time.perf_counter()
        out["context"] = measure_context(args, host, device)
        phase("document context", tick)
        del host
    out["projection"] = projection(
        args.model, config, out["encode"], out["queries"], out["search"], out["context"], args.cpu_smoke
    )
    out["cuda_initialized"] = torch.cuda.is_initialized()
    out["wall_s"] = time.perf_counter() - started
    print_summary(out)
    print(f"\nwall time {out['wall_s']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=float) + "\n")
    return out


if __name__ == "__main__":
    main()
