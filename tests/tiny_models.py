"""Tiny, randomly initialised, offline checkpoints of the vision-language retrievers.

Each `build_tiny_<name>(directory)` writes a complete checkpoint (config, safetensors weights,
tokenizer, image/video processor and processor configs) with `save_pretrained` and returns the
directory, so tests load it through exactly the `from_pretrained` path a real Hub checkpoint takes.
Nothing is downloaded: the tokenizers are trained here on a small in-code corpus, and the weights
are the models' own random initialisation under a fixed seed, so every build is byte-for-byte
reproducible. Sizes are chosen to be valid for the architectures (head dims, rotary sections,
window attention, patch merging) while keeping each checkpoint under ~1 MB and each build well
under a second (importing transformers takes far longer).

The tokenizers are trained with `train_new_from_iterator` on an instance of the real tokenizer
class, so they keep that class's normalizer, pre-tokenizer and decoder (Qwen's regex + byte-level
BPE, Gemma's space-as-"▁" BPE) and only the vocabulary is tiny.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from colpali_engine.models import ColPali, ColPaliProcessor, ColQwen2_5, ColQwen2_5_Processor
from tokenizers import AddedToken
from transformers import (
    GemmaConfig,
    GemmaTokenizerFast,
    PaliGemmaConfig,
    Qwen2_5_VLConfig,
    Qwen2TokenizerFast,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    SiglipImageProcessor,
    SiglipVisionConfig,
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


def _qwen_image_and_video_processors() -> tuple[Qwen2VLImageProcessor, Qwen2VLVideoProcessor]:
    """Qwen2-VL image and video processors with the real patch geometry and CLIP mean/std, with
    `QWEN_MIN_TOKENS`..`QWEN_MAX_TOKENS` visual tokens per image."""
    geometry = {
        "patch_size": QWEN_PATCH_SIZE,
        "merge_size": QWEN_MERGE_SIZE,
        "temporal_patch_size": QWEN_TEMPORAL_PATCH_SIZE,
        "min_pixels": QWEN_MIN_TOKENS * QWEN_PIXELS_PER_TOKEN,
        "max_pixels": QWEN_MAX_TOKENS * QWEN_PIXELS_PER_TOKEN,
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


def build_tiny_colqwen25(directory: Path) -> Path:
    """A tiny ColQwen2.5 checkpoint (Qwen2.5-VL backbone + 128-d `custom_text_proj`).

    Loads with `ColQwen2_5.from_pretrained(directory, torch_dtype=torch.float32)` and
    `ColQwen2_5_Processor.from_pretrained(directory, max_num_visual_tokens=N)`. The vision tower has
    two blocks, the first with windowed attention (112-pixel windows = 4x4 merged tokens, as in the
    real model) and the second with full attention (`fullatt_block_indexes=[1]`), so both attention
    paths run; its output width is the text hidden size, as the patch merger requires.
    """
    directory = Path(directory)
    tokenizer = _qwen_tokenizer()
    image_processor, video_processor = _qwen_image_and_video_processors()
    processor = ColQwen2_5_Processor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor
    )
    config = Qwen2_5_VLConfig(
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
    torch.manual_seed(SEED)
    ColQwen2_5(config).save_pretrained(directory)
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


#: The hub code of the tiny jina-reranker-m0 stand-in (written into the checkpoint as
#: `modeling_tiny_jina_reranker.py` and named by config.json's `auto_map`, as the real repository names
#: its `modeling.py`). Written here, not copied: it keeps what callers rely on, namely the class name,
#: the `compute_score` signature, its return convention (a bare float for one pair, else a list), the
#: prompt layout (document first, then query) and the appended score token read by an MLP head whose
#: output is squashed by sigmoid(logit - 2.65) into (0, 1).
TINY_JINA_RERANKER_CODE = '''\
"""Tiny offline stand-in for the hub code of jinaai/jina-reranker-m0 (vldocir tests)."""

from __future__ import annotations

import torch
from PIL import Image
from torch import nn
from transformers import Qwen2VLForConditionalGeneration

LOGIT_BIAS = 2.65
SCORE_TOKEN_ID = 100


def _prompt(query: str, doc: str, query_type: str, doc_type: str) -> str:
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    document = vision if doc_type == "image" else doc
    question = vision if query_type == "image" else query
    return f"**Document**:\\n{document}\\n**Query**:\\n{question}"


class JinaVLForRanking(Qwen2VLForConditionalGeneration):
    def __init__(self, config):
        super().__init__(config)
        hidden = config.text_config.hidden_size
        self.score = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, pixel_values=None, image_grid_thw=None,
                mm_token_type_ids=None, **kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                            image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids,
                            use_cache=False).last_hidden_state
        # left padding: the last position is every row's score token
        return torch.sigmoid(self.score(hidden[:, -1]).squeeze(-1) - LOGIT_BIAS)

    @torch.no_grad()
    def compute_score(self, pairs, batch_size=8, max_length=10240, max_query_length=512, max_doc_length=None,
                      query_type="text", doc_type="text", normalize_scores=True, show_progress=False):
        if not hasattr(self, "_processor"):
            from transformers import AutoProcessor

            self._processor = AutoProcessor.from_pretrained(self.name_or_path, max_pixels=602112, min_pixels=3136)
        assert isinstance(pairs, list)
        if isinstance(pairs[0], str):
            pairs = [pairs]
        device = next(self.parameters()).device
        scores = []
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            texts = [_prompt(q, d, query_type, doc_type) for q, d in chunk]
            images = None
            if doc_type == "image":
                images = [d if isinstance(d, Image.Image) else Image.open(d) for _, d in chunk]
            batch = self._processor(text=texts, images=images, return_tensors="pt", padding=True, truncation=True,
                                    max_length=max_length - 1)
            rows = batch["input_ids"].shape[0]
            batch["input_ids"] = torch.cat([batch["input_ids"], torch.full((rows, 1), SCORE_TOKEN_ID)], dim=1)
            ones = torch.ones((rows, 1), dtype=batch["attention_mask"].dtype)
            batch["attention_mask"] = torch.cat([batch["attention_mask"], ones], dim=1)
            if "mm_token_type_ids" in batch:
                extra = torch.zeros((rows, 1), dtype=batch["mm_token_type_ids"].dtype)
                batch["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], extra], dim=1)
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            scores.extend(self.forward(**batch).view(-1).float().cpu().numpy().tolist())
        return scores[0] if len(scores) == 1 else scores
'''

TINY_JINA_RERANKER_MODULE = "modeling_tiny_jina_reranker"


def build_tiny_jina_reranker_m0(directory: Path) -> Path:
    """A tiny jina-reranker-m0 stand-in: a Qwen2-VL backbone plus a score head, behind hub code.

    Loads as the real checkpoint does, through remote code only: `AutoModel.from_pretrained(directory,
    trust_remote_code=True)` finds `JinaVLForRanking` via config.json's `auto_map` in the module
    `TINY_JINA_RERANKER_MODULE` written beside the weights, and scores with
    `model.compute_score(pairs, max_length=..., doc_type="image")`. `AutoProcessor.from_pretrained`
    gives a `Qwen2VLProcessor` whose tokenizer pads on the left (the score is read at the last
    position). The score token id (100) lies inside the tiny vocabulary.
    """
    import importlib.util

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    code = directory / f"{TINY_JINA_RERANKER_MODULE}.py"
    code.write_text(TINY_JINA_RERANKER_CODE)
    spec = importlib.util.spec_from_file_location(f"_tiny_{TINY_JINA_RERANKER_MODULE}", code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

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
