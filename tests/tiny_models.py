"""Tiny, randomly initialised, offline checkpoints of every model family the configs name.

Each `build_tiny_<name>(directory)` writes a complete checkpoint (config, safetensors weights,
tokenizer, image/video processor and processor configs) with `save_pretrained` and returns the
directory, so tests load it through exactly the `from_pretrained` path a real Hub checkpoint takes.
Nothing is downloaded: the tokenizers are trained here on a small in-code corpus, and the weights
are the models' own random initialisation under a fixed seed, so every build is byte-for-byte
reproducible. Sizes are chosen to be valid for the architectures (head dims, rotary sections,
window attention, patch merging, pixel shuffle) while keeping each checkpoint around 1 MB and each
build well under a second (importing transformers takes far longer).

The BPE tokenizers are trained with `train_new_from_iterator` on an instance of the real tokenizer
class, so they keep that class's normalizer, pre-tokenizer and decoder (Qwen's regex + byte-level
BPE, Gemma's space-as-"▁" BPE, GPT-2's byte-level BPE) and only the vocabulary is tiny;
XLM-RoBERTa's Unigram tokenizer gets a vocabulary written out by rule (`_unigram_vocab`).

Models whose real checkpoints run code from their hub repository (jina-embeddings-v4, Tomoro
ColQwen3, jina-reranker-m0) get stand-ins for that code, written here to the interface the callers
use (tests/fixtures/hub_code/), shipped inside the checkpoint and named by its `auto_map`, so that
`trust_remote_code=True` loading runs for real. `RETRIEVERS` and `RERANKERS` say which checkpoint
stands in for each config in conf/retriever/ and conf/reranker/.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

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
from tokenizers import AddedToken
from transformers import (
    GemmaConfig,
    GemmaTokenizerFast,
    GPT2TokenizerFast,
    Idefics3Config,
    Idefics3ImageProcessor,
    ModernVBertConfig,
    PaliGemmaConfig,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2TokenizerFast,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLVideoProcessor,
    SiglipImageProcessor,
    SiglipVisionConfig,
    XLMRobertaConfig,
    XLMRobertaModel,
    XLMRobertaTokenizerFast,
)

SEED = 0

#: Training text for the tiny tokenizers: every printable ASCII character (so Gemma's BPE, which has
#: no byte-level alphabet, never needs `<unk>` for ASCII), plus words of the prompts, queries and
#: pages the tests use, repeated so that BPE learns whole-word merges for them.
CORPUS = [
    string.ascii_lowercase,
    string.ascii_uppercase,
    string.digits,
    string.punctuation + " \n\t",
    *(
        [
            "What is the revenue in 2021? What was the total revenue in 2020 and 2022?",
            "Describe the image. You are a helpful assistant.",
            "system user assistant",
            "The quarterly report shows net income, operating costs, assets and liabilities.",
            "Table 3: Results of the experiment. Figure 2: Accuracy per year.",
            "The patient cohort was followed for twelve months after treatment.",
            "Find the page that answers the question about the document.",
        ]
        * 3
    ),
]

#: Upper bound on the trained vocabulary (the byte-level alphabet alone is 256 tokens); the merge
#: floor below stops Qwen's at 454 tokens and Gemma's at 366 (before PaliGemma's 1152 added ones).
MAX_VOCAB_SIZE = 512

#: BPE merges must be seen at least twice: without this floor the trainer, short of frequent pairs,
#: merges whole sentences of the tiny corpus into single tokens.
MIN_MERGE_FREQUENCY = 2

#: Qwen2-VL / Qwen2.5-VL chat and vision special tokens (`<|endoftext|>` comes with the base class).
QWEN_SPECIAL_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

#: Qwen vision geometry of the real checkpoints: 14-pixel patches, 2x2 patches merged into one LLM
#: token (28 pixels per token side) and 2 frames per temporal patch (an image is one repeated frame).
QWEN_PATCH_SIZE = 14
QWEN_MERGE_SIZE = 2
QWEN_TEMPORAL_PATCH_SIZE = 2
QWEN_PIXELS_PER_TOKEN = (QWEN_PATCH_SIZE * QWEN_MERGE_SIZE) ** 2

#: Image-size bounds saved with the Qwen processors, in visual tokens. The floor (4 tokens) lets small
#: crops through without upscaling; the ceiling keeps an uncapped 400x800 page at a couple of hundred
#: tokens so the vision tower stays cheap on CPU. Callers cap further, e.g. ColQwen2.5's
#: `max_num_visual_tokens`.
QWEN_MIN_TOKENS = 4
QWEN_MAX_TOKENS = 256

#: Tiny Qwen text tower shared by (1) and (3): head_dim = 64 / 4 = 16, so the multimodal rotary
#: sections (temporal, height, width) must sum to head_dim / 2 = 8. Two KV heads keep the grouped-query
#: attention path of the real models.
QWEN_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]},
}

#: ColPali's SigLIP input side: 56x56 pixels in 14-pixel patches, i.e. a 4x4 grid of 16 image tokens
#: (the real checkpoint uses 448x448 -> 1024 tokens).
SIGLIP_IMAGE_SIZE = 56
SIGLIP_PATCH_SIZE = 14
SIGLIP_IMAGE_TOKENS = (SIGLIP_IMAGE_SIZE // SIGLIP_PATCH_SIZE) ** 2


def _train_tokenizer(base, special_tokens: list[str]):
    """A tokenizer of `base`'s class and pipeline, retrained on `CORPUS` with `special_tokens` added."""
    return base.train_new_from_iterator(
        [CORPUS],
        vocab_size=MAX_VOCAB_SIZE,
        new_special_tokens=[AddedToken(token, special=True, normalized=False) for token in special_tokens],
        min_frequency=MIN_MERGE_FREQUENCY,
        show_progress=False,
    )


def _qwen_tokenizer() -> Qwen2TokenizerFast:
    """Byte-level BPE with Qwen's pre-tokenizer and special tokens.

    As in the Qwen2-VL instruct tokenizers, `<|endoftext|>` pads (ColQwen's query augmentation token)
    and `<|im_end|>` ends turns; the byte-level alphabet means any text, not just the corpus, encodes.
    """
    return _train_tokenizer(Qwen2TokenizerFast(eos_token="<|im_end|>"), QWEN_SPECIAL_TOKENS)


def _qwen_image_and_video_processors(
    max_tokens: int = QWEN_MAX_TOKENS,
) -> tuple[Qwen2VLImageProcessor, Qwen2VLVideoProcessor]:
    """Qwen2-VL image and video processors with the real patch geometry and CLIP mean/std, with
    `QWEN_MIN_TOKENS`..`max_tokens` visual tokens per image."""
    geometry = {
        "patch_size": QWEN_PATCH_SIZE,
        "merge_size": QWEN_MERGE_SIZE,
        "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
        "min_pixels": QWEN_MIN_TOKENS * QWEN_PIXELS_PER_TOKEN,
        "max_pixels": max_tokens * QWEN_PIXELS_PER_TOKEN,
    }
    return Qwen2VLImageProcessor(**geometry), Qwen2VLVideoProcessor(**geometry)


def _qwen_token_ids(tokenizer) -> dict[str, int]:
    """The special-token ids a Qwen-VL config records, read from the tiny tokenizer."""
    return {
        "image_token_id": tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
    }


def _qwen_text_config(tokenizer) -> dict:
    """`QWEN_TEXT` sized to the tokenizer, with its bos/eos/pad ids."""
    return {
        **QWEN_TEXT,
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _tiny_qwen2vl_config(tokenizer) -> Qwen2VLConfig:
    """A tiny Qwen2-VL configuration (2 vision blocks, 32-d patches) on ``tokenizer``'s vocabulary."""
    return Qwen2VLConfig(
        text_config=_qwen_text_config(tokenizer),
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": QWEN_TEXT["hidden_size"],
            "mlp_ratio": 2,
            "num_heads": 2,
            "patch_size": QWEN_PATCH_SIZE,
            "spatial_merge_size": QWEN_MERGE_SIZE,
            "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
        },
        tie_word_embeddings=True,
        **_qwen_token_ids(tokenizer),
    )


def _tiny_qwen25vl_config(tokenizer) -> Qwen2_5_VLConfig:
    """A tiny Qwen2.5-VL configuration on ``tokenizer``'s vocabulary: two vision blocks, the first with
    windowed attention (112-pixel windows = 4x4 merged tokens, as in the real models) and the second
    with full attention (`fullatt_block_indexes=[1]`), so both attention paths run; the vision output
    width is the text hidden size, as the patch merger requires."""
    return Qwen2_5_VLConfig(
        text_config=_qwen_text_config(tokenizer),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": QWEN_TEXT["hidden_size"],
            "patch_size": QWEN_PATCH_SIZE,
            "spatial_merge_size": QWEN_MERGE_SIZE,
            "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        **_qwen_token_ids(tokenizer),
    )


def build_tiny_colqwen25(directory: Path) -> Path:
    """A tiny ColQwen2.5 checkpoint (Qwen2.5-VL backbone + 128-d `custom_text_proj`).

    Loads with `ColQwen2_5.from_pretrained(directory, torch_dtype=torch.float32)` and
    `ColQwen2_5_Processor.from_pretrained(directory, max_num_visual_tokens=N)`; the backbone is
    `_tiny_qwen25vl_config`'s.
    """
    directory = Path(directory)
    tokenizer = _qwen_tokenizer()
    image_processor, video_processor = _qwen_image_and_video_processors()
    processor = ColQwen2_5_Processor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor
    )
    torch.manual_seed(SEED)
    ColQwen2_5(_tiny_qwen25vl_config(tokenizer)).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def build_tiny_colpali(directory: Path) -> Path:
    """A tiny ColPali checkpoint (PaliGemma = SigLIP vision + Gemma text, + 128-d `custom_text_proj`).

    Loads with `ColPali.from_pretrained(directory, torch_dtype=torch.float32)` and
    `ColPaliProcessor.from_pretrained(directory)`. The processor is built before the config because
    `PaliGemmaProcessor` adds its 1152 `<locNNNN>`/`<segNNN>` tokens to the tokenizer (the real
    tokenizer already has them, so loading the saved one adds nothing); the vocabulary size and
    `image_token_index` are read afterwards so the embedding table covers every id it can emit. The
    SigLIP tower sees `SIGLIP_IMAGE_SIZE`-pixel squares, and `image_seq_length` on the image
    processor (which `PaliGemmaProcessor` requires) matches its patch grid.
    """
    directory = Path(directory)
    tokenizer = _train_tokenizer(GemmaTokenizerFast(), ["<image>"])
    image_processor = SiglipImageProcessor(
        size={"height": SIGLIP_IMAGE_SIZE, "width": SIGLIP_IMAGE_SIZE},
        image_seq_length=SIGLIP_IMAGE_TOKENS,
    )
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)
    hidden_size = 64
    vocab_size = len(processor.tokenizer)
    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=SIGLIP_IMAGE_SIZE,
            patch_size=SIGLIP_PATCH_SIZE,
            vision_use_head=False,
        ),
        text_config=GemmaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            pad_token_id=processor.tokenizer.pad_token_id,
            bos_token_id=processor.tokenizer.bos_token_id,
            eos_token_id=processor.tokenizer.eos_token_id,
        ),
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        projection_dim=hidden_size,
        image_token_index=processor.image_token_id,
    )
    torch.manual_seed(SEED)
    ColPali(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def build_tiny_qwen2vl_embedder(directory: Path) -> Path:
    """A tiny generative Qwen2-VL (not 2.5) checkpoint, the backbone of GME-style single-vector
    embedders (which pool the last token's final hidden state).

    Loads with `AutoModelForImageTextToText.from_pretrained(directory)` (->
    `Qwen2VLForConditionalGeneration`) and `AutoProcessor.from_pretrained(directory)` (->
    `Qwen2VLProcessor`). The vision tower's `embed_dim` is its width and `hidden_size` its merged
    output, which must equal the text hidden size. Word embeddings are tied to the LM head, as in
    Qwen2-VL-2B, which GME builds on.
    """
    directory = Path(directory)
    tokenizer = _qwen_tokenizer()
    image_processor, video_processor = _qwen_image_and_video_processors()
    processor = Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)
    config = _tiny_qwen2vl_config(tokenizer)
    torch.manual_seed(SEED)
    Qwen2VLForConditionalGeneration(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


# -- hub code written here (tests/fixtures/hub_code/), loaded only through `trust_remote_code` ----------
HUB_CODE_DIR = Path(__file__).resolve().parent / "fixtures" / "hub_code"


def _hub_code(directory: Path, module: str):
    """Ship ``HUB_CODE_DIR/<module>.py`` inside the checkpoint ``directory`` (where a hub repository keeps
    its modeling code and config.json's ``auto_map`` finds it) and import that copy, to build the weights."""
    import importlib.util
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    code = directory / f"{module}.py"
    shutil.copyfile(HUB_CODE_DIR / code.name, code)
    spec = importlib.util.spec_from_file_location(f"_tiny_hub_code_{module}", code)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _map_auto_processor(directory: Path, class_path: str) -> None:
    """Name the hub code's processor class in processor_config.json's ``auto_map``, as a repository
    with its own processor does (``save_pretrained`` writes it only for a class imported by module name)."""
    path = directory / "processor_config.json"
    config = json.loads(path.read_text())
    config["auto_map"] = {"AutoProcessor": class_path}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


TINY_JINA_RERANKER_MODULE = "tiny_jina_reranker_m0"


def build_tiny_jina_reranker_m0(directory: Path) -> Path:
    """A tiny jina-reranker-m0 stand-in: a Qwen2-VL backbone plus a score head, behind hub code.

    Loads as the real checkpoint does, through remote code only: `AutoModel.from_pretrained(directory,
    trust_remote_code=True)` finds `JinaVLForRanking` via config.json's `auto_map` in the module
    `TINY_JINA_RERANKER_MODULE` shipped beside the weights (tests/fixtures/hub_code/), and scores with
    `model.compute_score(pairs, max_length=..., doc_type="image")`. `AutoProcessor.from_pretrained`
    gives a `Qwen2VLProcessor` whose tokenizer pads on the left (the score is read at the last
    position). The score token id (100) lies inside the tiny vocabulary.
    """
    directory = Path(directory)
    module = _hub_code(directory, TINY_JINA_RERANKER_MODULE)
    tokenizer = _qwen_tokenizer()
    tokenizer.padding_side = "left"
    image_processor, video_processor = _qwen_image_and_video_processors()
    processor = Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)
    config = _tiny_qwen2vl_config(tokenizer)
    config.architectures = ["JinaVLForRanking"]
    config.auto_map = {"AutoModel": f"{TINY_JINA_RERANKER_MODULE}.JinaVLForRanking"}
    torch.manual_seed(SEED)
    module.JinaVLForRanking(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


#: The tasks of jina-embeddings-v4's adapters, which `encode_text` / `encode_image` select by name.
JINA_V4_TASKS = ["retrieval", "text-matching", "code"]
JINA_V4_MULTI_VECTOR_DIM = 128
#: Visual tokens per page the saved processor allows (the encoder passes none; the real one's is 768).
JINA_V4_MAX_TOKENS = 64
TINY_JINA_V4_MODULE = "tiny_jina_embeddings_v4"


def build_tiny_jina_embeddings_v4(directory: Path) -> Path:
    """A tiny jina-embeddings-v4 stand-in: a Qwen2.5-VL backbone (ColQwen2.5's tiny one) with per-task
    adapters and a 128-d multi-vector projector, behind hub code written to the model's interface.

    Loads through remote code only, as the real checkpoint: `AutoModel.from_pretrained(directory,
    trust_remote_code=True)` finds `JinaEmbeddingsV4Model` via config.json's `auto_map` in the module
    `TINY_JINA_V4_MODULE` shipped beside the weights; it embeds with `encode_image(images, task=...)`
    and `encode_text(texts, task=..., prompt_name="query")`, single-vector (the backbone's 64-d mean
    pooling) or multi-vector (`return_multivector=True`, 128-d tokens). The tasks are `JINA_V4_TASKS`,
    stored in the config as `task_names`. The saved `Qwen2_5_VLProcessor` allows up to
    `JINA_V4_MAX_TOKENS` visual tokens per page.
    """
    directory = Path(directory)
    module = _hub_code(directory, TINY_JINA_V4_MODULE)
    tokenizer = _qwen_tokenizer()
    image_processor, video_processor = _qwen_image_and_video_processors(JINA_V4_MAX_TOKENS)
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor
    )
    config = _tiny_qwen25vl_config(tokenizer)
    config.task_names = JINA_V4_TASKS
    config.multi_vector_projector_dim = JINA_V4_MULTI_VECTOR_DIM
    config.architectures = ["JinaEmbeddingsV4Model"]
    config.auto_map = {"AutoModel": f"{TINY_JINA_V4_MODULE}.JinaEmbeddingsV4Model"}
    torch.manual_seed(SEED)
    module.JinaEmbeddingsV4Model(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


#: Qwen3-VL vision geometry: 16-pixel patches, 2x2 merged (32 pixels per visual token side), and a
#: learned position table interpolated to each image's grid (a square number of entries; 2304 in the
#: real model). The first vision block also feeds the text tower (deepstack).
QWEN3_PATCH_SIZE = 16
QWEN3_PIXELS_PER_TOKEN = (QWEN3_PATCH_SIZE * QWEN_MERGE_SIZE) ** 2
QWEN3_POSITION_EMBEDDINGS = 16
TINY_COLQWEN3_MODULE = "tiny_colqwen3"


def build_tiny_colqwen3(directory: Path) -> Path:
    """A tiny Tomoro ColQwen3 stand-in: a Qwen3-VL backbone plus a 320-d `custom_text_proj`, behind hub
    code written to that repository's interface (model and processor are both remote code).

    Loads with `AutoModel.from_pretrained(directory, trust_remote_code=True)` and
    `AutoProcessor.from_pretrained(directory, trust_remote_code=True, max_num_visual_tokens=N)`, both
    found through `auto_map` in the module `TINY_COLQWEN3_MODULE` shipped beside the weights. The
    processor has `process_images` and `process_texts` (no `process_queries`), and the model returns
    an output whose `embeddings` are the token vectors. The text tower's rotary sections interleave
    (Qwen3-VL's `mrope_interleaved`).
    """
    directory = Path(directory)
    module = _hub_code(directory, TINY_COLQWEN3_MODULE)
    tokenizer = _qwen_tokenizer()
    geometry = {
        "patch_size": QWEN3_PATCH_SIZE,
        "merge_size": QWEN_MERGE_SIZE,
        "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
        "min_pixels": QWEN_MIN_TOKENS * QWEN3_PIXELS_PER_TOKEN,
        "max_pixels": QWEN_MAX_TOKENS * QWEN3_PIXELS_PER_TOKEN,
    }
    processor = module.ColQwen3Processor(
        image_processor=Qwen2VLImageProcessor(**geometry),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(**geometry),
    )
    text = _qwen_text_config(tokenizer)
    text["head_dim"] = text["hidden_size"] // text["num_attention_heads"]
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": QWEN_TEXT["hidden_size"],
            "patch_size": QWEN3_PATCH_SIZE,
            "spatial_merge_size": QWEN_MERGE_SIZE,
            "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
            "num_position_embeddings": QWEN3_POSITION_EMBEDDINGS,
            "deepstack_visual_indexes": [0],
        },
        **_qwen_token_ids(tokenizer),
    )
    config.architectures = ["ColQwen3"]
    config.auto_map = {"AutoModel": f"{TINY_COLQWEN3_MODULE}.ColQwen3"}
    torch.manual_seed(SEED)
    module.ColQwen3(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    _map_auto_processor(directory, f"{TINY_COLQWEN3_MODULE}.ColQwen3Processor")
    return directory


# -- the Idefics3 family: ColIdefics3 (ColSmol) and ColModernVBert -----------------------------------
#: Idefics3 image tokens as the real tokenizers carry them: the tile grid's row/column tags and the
#: global-image tag (`Idefics3Processor` adds `<fake_token_around_image>`, `<image>` and
#: `<end_of_utterance>` itself).
IDEFICS3_GRID_TOKENS = ["<global-img>", *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]

#: Page geometry, scaled down from the real 512-pixel tiles of 64 tokens: the longest edge is resized to
#: 64 pixels and cut into 32-pixel tiles (plus the whole page at tile size); a tile is a 4x4 grid of
#: 8-pixel patches, pixel-shuffled 2x2 into 4 image tokens. A 2000x4000 page becomes 2 tiles + 1.
IDEFICS3_LONGEST_EDGE = 64
IDEFICS3_TILE = 32
IDEFICS3_PATCH = 8
IDEFICS3_SHUFFLE = 2
IDEFICS3_TILE_TOKENS = (IDEFICS3_TILE // IDEFICS3_PATCH) ** 2 // IDEFICS3_SHUFFLE**2

#: The tiny vision tower of both families (SigLIP-style: Idefics3's own, or `siglip_vision_model`).
IDEFICS3_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": IDEFICS3_TILE,
    "patch_size": IDEFICS3_PATCH,
}


def _idefics3_image_processor() -> Idefics3ImageProcessor:
    return Idefics3ImageProcessor(
        size={"longest_edge": IDEFICS3_LONGEST_EDGE}, max_image_size={"longest_edge": IDEFICS3_TILE}
    )


def _byte_level_tokenizer(bos: str, eos: str, pad: str, special_tokens: list[str]) -> GPT2TokenizerFast:
    """Byte-level BPE (GPT-2's pre-tokenizer and decoder) with these bos/eos/pad and special tokens."""
    base = GPT2TokenizerFast(bos_token=bos, eos_token=eos, pad_token=pad)
    return _train_tokenizer(base, [bos, eos, pad, *special_tokens, *IDEFICS3_GRID_TOKENS])


def build_tiny_colidefics3(directory: Path) -> Path:
    """A tiny ColSmol checkpoint: colpali-engine's `ColIdefics3` (Idefics3 = SigLIP-style vision +
    pixel shuffle + Llama text, + a 128-d `linear`) and `ColIdefics3Processor`.

    Loads with `ColIdefics3.from_pretrained(directory, dtype=torch.float32)` and
    `ColIdefics3Processor.from_pretrained(directory)`. The tokenizer is byte-level BPE as SmolVLM's,
    `<|im_start|>` begins and `<end_of_utterance>` (the query augmentation token) ends a turn. The
    text tower's padding row is left random (`pad_token_id` is kept out of the Llama config): a zero
    row, what a fresh `padding_idx` gives, would make padded positions' projections 0/0 in the
    unclamped normalisation, which a trained checkpoint never meets.
    """
    directory = Path(directory)
    tokenizer = _byte_level_tokenizer("<|im_start|>", "<end_of_utterance>", "<|im_end|>", [])
    processor = ColIdefics3Processor(
        image_processor=_idefics3_image_processor(), tokenizer=tokenizer, image_seq_len=IDEFICS3_TILE_TOKENS
    )
    tokenizer = processor.tokenizer
    config = Idefics3Config(
        vision_config=IDEFICS3_VISION,
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": QWEN_TEXT["hidden_size"],
            "intermediate_size": QWEN_TEXT["intermediate_size"],
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        scale_factor=IDEFICS3_SHUFFLE,
        image_token_id=processor.image_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    ColIdefics3(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def build_tiny_colmodernvbert(directory: Path) -> Path:
    """A tiny ColModernVBert checkpoint: colpali-engine's `ColModernVBert` (ModernVBERT = SigLIP vision +
    pixel shuffle + ModernBERT text, + a 128-d `custom_text_proj`) and `ColModernVBertProcessor`.

    Loads with `ColModernVBert.from_pretrained(directory, dtype=torch.float32)` and
    `ColModernVBertProcessor.from_pretrained(directory)`. ModernBERT alternates global and local
    attention; with `global_attn_every_n_layers=2` and a 16-token window, the two layers run one of
    each on page inputs longer than the window. The tokenizer is byte-level BPE, as ModernBERT's, with
    the `<|begin_of_text|>` the processor's page prompt starts with.
    """
    directory = Path(directory)
    tokenizer = _byte_level_tokenizer("<|begin_of_text|>", "<end_of_utterance>", "[PAD]", ["[CLS]", "[SEP]", "[MASK]"])
    processor = ColModernVBertProcessor(
        image_processor=_idefics3_image_processor(), tokenizer=tokenizer, image_seq_len=IDEFICS3_TILE_TOKENS
    )
    tokenizer = processor.tokenizer
    config = ModernVBertConfig(
        vision_config={"model_type": "siglip_vision_model", **IDEFICS3_VISION},
        text_config={
            "model_type": "modernbert",
            "vocab_size": len(tokenizer),
            "hidden_size": QWEN_TEXT["hidden_size"],
            "intermediate_size": QWEN_TEXT["intermediate_size"],
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "global_attn_every_n_layers": 2,
            "local_attention": 16,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "cls_token_id": tokenizer.convert_tokens_to_ids("[CLS]"),
            "sep_token_id": tokenizer.convert_tokens_to_ids("[SEP]"),
        },
        pixel_shuffle_factor=IDEFICS3_SHUFFLE,
        image_token_id=processor.image_token_id,
    )
    torch.manual_seed(SEED)
    ColModernVBert(config).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def _unigram_vocab() -> list[tuple[str, float]]:
    """Unigram pieces with log-probability scores, made from `CORPUS` by rule: every word after "▁" (the
    word-start mark) scored above its characters, and every character alone and after "▁", so any
    ASCII text segments. Written out rather than trained: the Unigram trainer's vocabulary differs from
    run to run, which would break the byte-for-byte reproducible builds."""
    words = sorted({word for text in CORPUS for word in text.split()})
    chars = sorted({char for text in CORPUS for char in text if not char.isspace()})
    pieces = {"▁": -8.0, **dict.fromkeys(chars, -10.0), **{f"▁{char}": -10.0 for char in chars}}
    pieces.update({f"▁{word}": -5.0 for word in words})
    return list(pieces.items())


def build_tiny_sentence_transformer(directory: Path) -> Path:
    """A tiny BGE-M3-shaped sentence-transformers model: XLM-RoBERTa, CLS pooling, L2 normalisation.

    Loads with `SentenceTransformer(directory)`. The tokenizer is XLM-RoBERTa's SentencePiece-style
    Unigram model (its "▁" pre-tokenizer and decoder) over `_unigram_vocab()`; the backbone allows
    512 positions.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    directory = Path(directory)
    backbone = directory / "_backbone"
    specials = [(token, 0.0) for token in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]  # XLM-R's ids 0-4
    tokenizer = XLMRobertaTokenizerFast(vocab=specials + _unigram_vocab())
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=QWEN_TEXT["hidden_size"],
        intermediate_size=QWEN_TEXT["intermediate_size"],
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512 + 2,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(SEED)
    XLMRobertaModel(config).save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    modules = [
        Transformer(str(backbone), max_seq_length=512),
        Pooling(QWEN_TEXT["hidden_size"], pooling_mode="cls"),
        Normalize(),
    ]
    SentenceTransformer(modules=modules, device="cpu").save(str(directory))
    import shutil

    shutil.rmtree(backbone)
    return directory


# -- which tiny checkpoint stands in for which config ---------------------------------------------------
@dataclass(frozen=True)
class TinyCheckpoint:
    """The tiny checkpoint of a config's model family and the overrides that point the config at it.

    ``overrides`` are what a user with a local copy of the real checkpoint would add besides its
    ``checkpoint.local_path`` (the remote-code opt-in) plus CPU-friendly sizes, relative to the config
    node that holds ``checkpoint`` (``{key}``: ``retriever.model.encoder``, ``reranker.model``, ...)."""

    build: Callable[[Path], Path]
    overrides: tuple[str, ...] = ()


TORCH_CPU = ("{key}.dtype=float32",)
REMOTE_CODE = ("{key}.checkpoint.trust_remote_code=true",)
COLQWEN = TinyCheckpoint(build_tiny_colqwen25, (*TORCH_CPU, "{key}.processor_kwargs.max_num_visual_tokens=64"))
JINA_V4 = TinyCheckpoint(build_tiny_jina_embeddings_v4, (*TORCH_CPU, *REMOTE_CODE))

#: conf/retriever/<name>.yaml -> its family's tiny checkpoint, for every retriever config with a model
#: (`model.encoder`); tests/retrieval/test_every_config.py checks the two lists agree.
RETRIEVERS: dict[str, TinyCheckpoint] = {
    "colqwen25": COLQWEN,
    "colnomic7b": COLQWEN,  # the ColQwen2.5 architecture
    "colpali13": TinyCheckpoint(build_tiny_colpali, TORCH_CPU),
    "colsmol500": TinyCheckpoint(build_tiny_colidefics3, TORCH_CPU),
    "colmodernvbert": TinyCheckpoint(build_tiny_colmodernvbert, TORCH_CPU),
    "colqwen3": TinyCheckpoint(
        build_tiny_colqwen3, (*TORCH_CPU, *REMOTE_CODE, "{key}.processor_kwargs.max_num_visual_tokens=64")
    ),
    "gme_qwen2vl": TinyCheckpoint(
        build_tiny_qwen2vl_embedder, (*TORCH_CPU, "{key}.min_visual_tokens=4", "{key}.max_visual_tokens=64")
    ),
    "jina_v4_mv": JINA_V4,
    "jina_v4_sv": JINA_V4,
    "ocr_dense": TinyCheckpoint(build_tiny_sentence_transformer),
    # mteb's registry entry of ColQwen2.5, loaded by mteb's own wrapper (ColQwen2_5Wrapper) from the local copy
    "mteb": TinyCheckpoint(
        build_tiny_colqwen25,
        ("retriever.model.name=vidore/colqwen2.5-v0.2", "+{key}.loader_kwargs.torch_dtype=float32"),
    ),
}

#: Further models of conf/retriever/mteb.yaml (`retriever.model.name`) -> their tiny checkpoints: mteb's
#: ColPali wrapper runs a PaliGemma, whose attention differs from the Qwen family of the default.
MTEB_MODELS: dict[str, TinyCheckpoint] = {
    "vidore/colpali-v1.3": TinyCheckpoint(
        build_tiny_colpali,
        ("retriever.model.name=vidore/colpali-v1.3", "+{key}.loader_kwargs.torch_dtype=float32"),
    ),
}

#: conf/reranker/<name>.yaml -> its model's tiny checkpoint.
RERANKERS: dict[str, TinyCheckpoint] = {
    "colqwen25": COLQWEN,
    "jina_m0": TinyCheckpoint(build_tiny_jina_reranker_m0, (*TORCH_CPU, *REMOTE_CODE, "{key}.max_visual_tokens=64")),
}


class TinyCheckpoints(Mapping):
    """Config name -> the directory of its tiny checkpoint (``table``: `RETRIEVERS` or `RERANKERS`),
    each built on first use, once, and shared by the configs of one family (colqwen25, colnomic7b)."""

    def __init__(self, root: Path, table: dict[str, TinyCheckpoint] = RETRIEVERS):
        self.root, self.table, self._built = Path(root), table, {}

    def __getitem__(self, name: str) -> Path:
        return self.built(self.table[name])

    def built(self, tiny: TinyCheckpoint) -> Path:
        """The directory of ``tiny``'s checkpoint, built on first use (shared with the configs of its family)."""
        build = tiny.build
        if build not in self._built:
            self._built[build] = build(self.root / build.__name__.removeprefix("build_tiny_"))
        return self._built[build]

    def __iter__(self):
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


def overrides_for(tiny: TinyCheckpoint, key: str, directory: Path) -> list[str]:
    """The overrides pointing the config node ``key`` (the one holding ``checkpoint``) at ``directory``,
    the tiny checkpoint ``tiny`` built."""
    return [f"{key}.checkpoint.local_path={directory}", *(override.format(key=key) for override in tiny.overrides)]
