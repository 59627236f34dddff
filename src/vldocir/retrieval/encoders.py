"""Encoders: the model half of an embedding retriever (STYLE.md #7).

An encoder turns page inputs (images, or a text column of the pages table) and query texts into
vectors: one (n_tokens, dim) array per input. Multi-vector models return many tokens,
single-vector models one. Everything else (sharding, caching, exact search, runs) lives in
:mod:`vldocir.retrieval.dense`, shared by every model.

A new model is one ``Encoder`` subclass (often not even that: any colpali-engine model works
with :class:`ColEngineEncoder`) plus one YAML file in ``conf/retriever/``.

Models load lazily, on the first encode: a run whose embeddings are all cached loads no model.
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from vldocir.retrieval.checkpoints import Checkpoint, as_checkpoint

log = logging.getLogger(__name__)


def _import(dotted: str):
    from hydra.utils import get_class

    return get_class(dotted)


def _torch_dtype(name: str):
    import torch

    try:
        return getattr(torch, name)
    except AttributeError:
        raise ValueError(f"unknown torch dtype {name!r} (use float32, float16 or bfloat16)") from None


class Encoder(ABC):
    """Turns page inputs and queries into vectors.

    Attributes:
        kind: ``multi_vector`` (MaxSim) or ``single_vector`` (dot product).
        page_input: ``image``, or the pages-table text column the model reads (``ocr_text``).
        batch_size, query_batch_size: inputs per forward pass; the callers batch, the encoder
            encodes what it is given in one pass (memory only; results do not depend on it).
    """

    kind: str = "multi_vector"
    page_input: str = "image"
    batch_size: int = 8
    query_batch_size: int = 64
    device_name: str = "auto"

    @abstractmethod
    def cache_params(self) -> dict[str, Any]:
        """Everything that changes the vectors: model, revision, processor settings, dtype."""

    @abstractmethod
    def encode_pages(self, pages: Sequence[Any]) -> list[np.ndarray]:
        """One float32 array (n_tokens, dim) per page input."""

    @abstractmethod
    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 array (n_tokens, dim) per query."""

    def prepare(self) -> None:  # a hook, not abstract: an encoder without a model has nothing to load
        """Load the model now (called before encoding starts, so that a missing checkpoint fails
        before any progress bar); models otherwise load on first use. By default: nothing to do."""
        return

    def describe(self) -> dict[str, Any]:
        """Facts for the manifest (resolved revision, visual-token cap, device): after loading."""
        return {"class": type(self).__name__, **self.cache_params()}


class TorchEncoder(Encoder):
    """Shared plumbing of encoders that run a torch model: device, dtype, lazy loading."""

    def __init__(
        self,
        checkpoint: Checkpoint | dict,
        dtype: str = "bfloat16",
        attn_implementation: str | None = "sdpa",
        batch_size: int = 8,
        query_batch_size: int = 64,
        device: str = "auto",
    ):
        self.checkpoint = as_checkpoint(checkpoint)
        self.dtype, self.attn_implementation = dtype, attn_implementation
        self.batch_size, self.query_batch_size = batch_size, query_batch_size
        self.device_name = device
        self._loaded = False

    @property
    def device(self):
        from vldocir.retrieval.vectors import resolve_device

        return resolve_device(self.device_name)

    def model_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"dtype": _torch_dtype(self.dtype)}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        return kwargs

    def load_model(self, model_class: str):
        """``model_class.from_pretrained`` on this encoder's device, dtype and attention, in eval mode."""
        return self.checkpoint.load(
            _import(model_class).from_pretrained, "model", device_map=str(self.device), **self.model_kwargs()
        ).eval()

    def ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()
            self._loaded = True

    def prepare(self) -> None:
        self.ensure_loaded()

    @abstractmethod
    def load(self) -> None: ...

    def cache_params(self) -> dict[str, Any]:
        return {
            "encoder": type(self).__name__,
            **self.checkpoint.cache_params(),
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
        }

    def describe(self) -> dict[str, Any]:
        import torch

        device = self.device
        return {
            "class": type(self).__name__,
            **self.checkpoint.describe(),
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
            "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        }


#: The cache-key entry of an encoder whose model may be a PaliGemma (ColPali), which
#: :func:`paligemma_attends_bidirectionally` fixes: its vectors from before the fix (queries of a padded
#: batch attended causally) are not reused.
PALIGEMMA_ATTENTION = {"paligemma_attention": "bidirectional"}


def paligemma_attends_bidirectionally(model) -> None:
    """Make every PaliGemma in ``model`` attend bidirectionally whatever its batch and attention implementation.

    PaliGemma 1 and 2 (ColPali's backbone) attend bidirectionally over the prompt (transformers 4.x at
    inference: the full mask, padding masked). transformers 5 keeps that as
    ``text_config.use_bidirectional_attention`` (True by default), which makes the Gemma attention layers
    non-causal, and marks the prompt a bidirectional block from ``token_type_ids``. A batch without them
    (ColPali's queries) gets the causal mask whenever a mask is built (a padded batch under ``sdpa``, every
    batch under ``eager``) but none for an unpadded batch under ``sdpa``, where the non-causal layers then
    attend bidirectionally: a query's vectors depended on the other queries in its batch (0.24 on a tiny
    checkpoint), and ``eager`` encoded every query causally. A text config marked ``is_causal=False`` gets
    the bidirectional mask with padding masked (``create_causal_mask``) under every implementation: queries
    as encoded alone under ``sdpa``, pages (all prompt, with ``token_type_ids``) unchanged.
    """
    for module in model.modules():
        config = getattr(module, "config", None)
        if getattr(config, "model_type", None) != "paligemma":
            continue
        text = config.get_text_config()
        if getattr(text, "use_bidirectional_attention", None):
            text.is_causal = False


@functools.cache
def _is_paligemma_class(model_class: str) -> bool:
    from transformers import PaliGemmaPreTrainedModel

    cls = _import(model_class)
    return isinstance(cls, type) and issubclass(cls, PaliGemmaPreTrainedModel)


def _split_by_mask(embeddings, mask) -> list[np.ndarray]:
    """(B, L, D) tensor + (B, L) attention mask -> B float32 arrays of the unmasked tokens.

    Padding positions are dropped rather than kept as zero vectors, so a page's vectors do not
    depend on which other pages shared its batch.
    """
    embeddings = embeddings.float().cpu().numpy()
    mask = mask.bool().cpu().numpy()
    return [e[m] for e, m in zip(embeddings, mask, strict=True)]


class ColEngineEncoder(TorchEncoder):
    """Any colpali-engine late-interaction model (ColPali, ColQwen2.5, ColIdefics3, ColModernVBert, ...).

    Each model's own forward, except ColPali's, which computes vocabulary logits it discards:
    :func:`colpali_embeddings` gives its output without them. The others run a base model with no
    LM head (ColQwen2.5 a ``Qwen2_5_VLModel``, ColIdefics3 an ``Idefics3Model``, ColModernVBert a
    ``ModernVBertModel``). Tomoro's ColQwen3 is hub code, not checked here (a public copy of it
    calls ``vlm.model``, the base model, too).

    Args:
        model_class, processor_class: dotted class paths, e.g. ``colpali_engine.models.ColQwen2_5``.
        checkpoint: see :class:`Checkpoint`.
        processor_kwargs: passed to ``processor_class.from_pretrained``; this is where the visual
            token cap lives (``max_num_visual_tokens`` for the Qwen family). Part of the cache key.
        dtype, attn_implementation: model loading; part of the cache key.
    """

    def __init__(
        self,
        model_class: str,
        processor_class: str,
        checkpoint: Checkpoint | dict,
        processor_kwargs: dict | None = None,
        **kwargs,
    ):
        super().__init__(checkpoint, **kwargs)
        self.model_class, self.processor_class = model_class, processor_class
        self.processor_kwargs = dict(processor_kwargs or {})
        self.visual_tokens: list[int] = []

    def cache_params(self) -> dict[str, Any]:
        return {
            **super().cache_params(),
            "model_class": self.model_class,
            "processor_class": self.processor_class,
            "processor_kwargs": self.processor_kwargs,
            **(PALIGEMMA_ATTENTION if _is_paligemma_class(self.model_class) else {}),
        }

    def load(self) -> None:
        self.model = self.load_model(self.model_class)
        paligemma_attends_bidirectionally(self.model)
        self.processor = self.checkpoint.load(
            _import(self.processor_class).from_pretrained, "processor", **self.processor_kwargs
        )

    def embed(self, batch):
        """(B, L, dim) token embeddings of a processed batch on the model's device, zero where
        ``attention_mask`` is 0: the model's own forward, or :func:`colpali_embeddings` for ColPali."""
        if _is_colpali(self.model):
            return colpali_embeddings(self.model, batch)
        output = self.model(**batch)
        return output if not hasattr(output, "embeddings") else output.embeddings

    def _forward(self, batch) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            batch = batch.to(self.model.device)
            embeddings = self.embed(batch)
        return _split_by_mask(embeddings, batch["attention_mask"])

    def encode_pages(self, pages):
        self.ensure_loaded()
        batch = self.processor.process_images(list(pages))
        image_token = getattr(self.processor, "image_token_id", None)
        if image_token is not None:
            self.visual_tokens.extend((batch["input_ids"] == image_token).sum(dim=1).tolist())
        return self._forward(batch)

    def encode_queries(self, texts):
        self.ensure_loaded()
        # colpali-engine's processors add the query augmentation tokens in process_queries; processors
        # shipped as hub code (Tomoro ColQwen3) have only process_texts, which adds them itself.
        process = getattr(self.processor, "process_queries", None) or self.processor.process_texts
        return self._forward(process(list(texts)))

    def describe(self) -> dict[str, Any]:
        facts = {
            **super().describe(),
            "model_class": self.model_class,
            "processor_class": self.processor_class,
            "processor_kwargs": self.processor_kwargs,
        }
        if self._loaded:
            image_processor = getattr(self.processor, "image_processor", None)
            facts["image_processor_max_pixels"] = getattr(image_processor, "max_pixels", None)
        if self.visual_tokens:
            facts["visual_tokens_per_page"] = {
                "max": int(max(self.visual_tokens)),
                "mean": float(np.mean(self.visual_tokens)),
            }
        return facts


def _is_colpali(model) -> bool:
    """``model`` is colpali-engine's ColPali with ColPali's own forward (a subclass that overrides it keeps its own)."""
    if not type(model).__module__.startswith("colpali_engine."):
        return False  # imports colpali-engine only for its own models
    from colpali_engine.models import ColPali

    return isinstance(model, ColPali) and type(model).forward is ColPali.forward


def colpali_embeddings(model, batch):
    """``ColPali.forward`` (colpali-engine 0.3.18) without the language-model head: same (B, L, 128) output.

    ColPali runs the whole ``PaliGemmaForConditionalGeneration`` for ``hidden_states[-1]``, so the LM
    head's logits over the 257,216-token vocabulary are computed on every token and dropped (1.09
    of a 1,030-token page's 6.30 TFLOP, and a (B, L, 257,216) tensor), and for pages, whose
    processor adds ``labels``, a cross-entropy loss over them too. The base ``PaliGemmaModel``
    (``model.model.model``) gives the same last hidden state, which the projection, L2
    normalisation and masks below then treat exactly as ``ColPali.forward`` does;
    tests/retrieval/test_gpu_paths.py holds the two equal on the installed version.
    """
    inputs = {key: value for key, value in batch.items() if key != "labels"}  # they only feed the loss
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype=model.dtype)
    hidden = model.model.model(**inputs, use_cache=False).last_hidden_state  # (B, L, hidden)
    proj = model.custom_text_proj(hidden)  # (B, L, 128)
    proj = proj / proj.norm(dim=-1, keepdim=True)
    proj = proj * inputs["attention_mask"].unsqueeze(-1)
    if "pixel_values" in inputs and model.mask_non_image_embeddings:
        proj = proj * (inputs["input_ids"] == model.config.image_token_index).unsqueeze(-1)
    return proj


class LastTokenEncoder(TorchEncoder):
    """Single-vector embedder on a generative VLM: the last token's final hidden state, L2-normalised.

    This is how GME (Qwen2-VL) embeds: each input is wrapped in a chat turn with a system
    instruction, the turn ends with ``<|endoftext|>``, and that token's hidden state is the vector.

    Args:
        model_class, processor_class: dotted classes (``transformers.AutoModelForImageTextToText``).
        min_visual_tokens, max_visual_tokens: the image resolution bounds, in merged 28x28 tokens.
        query_instruction, page_instruction: system prompts for queries and pages.
        template: the chat turn, with ``{instruction}`` and ``{content}``.
        image_placeholder: the content of a page turn (the vision tokens).
    """

    kind = "single_vector"

    def __init__(
        self,
        checkpoint: Checkpoint | dict,
        model_class: str = "transformers.AutoModelForImageTextToText",
        processor_class: str = "transformers.AutoProcessor",
        min_visual_tokens: int = 256,
        max_visual_tokens: int = 1280,
        query_instruction: str = "",
        page_instruction: str = "",
        template: str = "",
        image_placeholder: str = "",
        max_length: int = 1800,
        **kwargs,
    ):
        super().__init__(checkpoint, **kwargs)
        self.model_class, self.processor_class = model_class, processor_class
        self.min_visual_tokens, self.max_visual_tokens = min_visual_tokens, max_visual_tokens
        self.query_instruction, self.page_instruction = query_instruction, page_instruction
        self.template, self.image_placeholder, self.max_length = template, image_placeholder, max_length

    def cache_params(self) -> dict[str, Any]:
        return {
            **super().cache_params(),
            "model_class": self.model_class,
            "min_visual_tokens": self.min_visual_tokens,
            "max_visual_tokens": self.max_visual_tokens,
            "query_instruction": self.query_instruction,
            "page_instruction": self.page_instruction,
            "template": self.template,
            "image_placeholder": self.image_placeholder,
            "max_length": self.max_length,
        }

    def load(self) -> None:
        self.model = self.load_model(self.model_class)
        self.processor = self.checkpoint.load(
            _import(self.processor_class).from_pretrained,
            "processor",
            min_pixels=self.min_visual_tokens * 28 * 28,
            max_pixels=self.max_visual_tokens * 28 * 28,
        )
        self.processor.tokenizer.padding_side = "right"

    def _embed(self, texts: list[str], images: list | None) -> list[np.ndarray]:
        import torch

        inputs = self.processor(
            text=texts,
            images=images,
            padding=True,
            truncation=images is None,
            max_length=self.max_length if images is None else None,
            return_tensors="pt",
        )
        inputs = inputs.to(self.model.device)
        with torch.inference_mode():
            hidden = self.model.model(**inputs, use_cache=False).last_hidden_state  # (B, L, D)
        last = inputs["attention_mask"].sum(dim=1) - 1  # right padding: the last real token
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        pooled = torch.nn.functional.normalize(pooled.float(), p=2, dim=-1)
        return [row[None, :] for row in pooled.cpu().numpy()]

    def encode_pages(self, pages):
        self.ensure_loaded()
        prompt = self.template.format(instruction=self.page_instruction, content=self.image_placeholder)
        return self._embed([prompt] * len(pages), list(pages))

    def encode_queries(self, texts):
        self.ensure_loaded()
        return self._embed([self.template.format(instruction=self.query_instruction, content=t) for t in texts], None)


class JinaV4Encoder(TorchEncoder):
    """jina-embeddings-v4 through its own hub code (``encode_image`` / ``encode_text``).

    Args:
        multivector: late-interaction mode (128-d per token) instead of the 2048-d single vector.
    """

    def __init__(self, checkpoint: Checkpoint | dict, multivector: bool, task: str = "retrieval", **kwargs):
        super().__init__(checkpoint, **kwargs)
        self.multivector, self.task = multivector, task
        self.kind = "multi_vector" if multivector else "single_vector"

    def cache_params(self) -> dict[str, Any]:
        return {**super().cache_params(), "multivector": self.multivector, "task": self.task}

    def load(self) -> None:
        self.model = self.load_model("transformers.AutoModel")

    def _as_arrays(self, output) -> list[np.ndarray]:
        rows = output if isinstance(output, (list, tuple)) else list(output)
        arrays = [np.asarray(r.float().cpu() if hasattr(r, "float") else r, dtype=np.float32) for r in rows]
        return [a if a.ndim == 2 else a[None, :] for a in arrays]

    def encode_pages(self, pages):
        self.ensure_loaded()
        return self._as_arrays(
            self.model.encode_image(
                images=list(pages),
                task=self.task,
                batch_size=self.batch_size,
                return_multivector=self.multivector,
                return_numpy=False,
            )
        )

    def encode_queries(self, texts):
        self.ensure_loaded()
        return self._as_arrays(
            self.model.encode_text(
                texts=list(texts),
                task=self.task,
                prompt_name="query",
                batch_size=self.query_batch_size,
                return_multivector=self.multivector,
                return_numpy=False,
            )
        )


class SentenceTransformerEncoder(Encoder):
    """Single-vector text embedder over a text column of the pages (OCR-dense: BGE-M3 on Tesseract text).

    Args:
        checkpoint: any sentence-transformers model (hub id or local directory).
        page_input: the pages-table column to embed (``ocr_text`` or ``dom_text``).
        query_prompt, page_prompt: prefixes some models expect (empty for BGE-M3).
        max_seq_length: truncation length in tokens; part of the cache key.
    """

    kind = "single_vector"

    def __init__(
        self,
        checkpoint: Checkpoint | dict,
        page_input: str = "ocr_text",
        query_prompt: str = "",
        page_prompt: str = "",
        max_seq_length: int | None = 8192,
        normalize: bool = True,
        batch_size: int = 32,
        query_batch_size: int = 64,
        device: str = "auto",
    ):
        self.checkpoint, self.page_input = as_checkpoint(checkpoint), page_input
        self.query_prompt, self.page_prompt = query_prompt, page_prompt
        self.max_seq_length, self.normalize = max_seq_length, normalize
        self.batch_size, self.query_batch_size, self.device_name = batch_size, query_batch_size, device
        self.model = None

    def cache_params(self) -> dict[str, Any]:
        return {
            "encoder": type(self).__name__,
            **self.checkpoint.cache_params(),
            "page_input": self.page_input,
            "query_prompt": self.query_prompt,
            "page_prompt": self.page_prompt,
            "max_seq_length": self.max_seq_length,
            "normalize": self.normalize,
        }

    def _model(self):
        if self.model is None:
            from sentence_transformers import SentenceTransformer

            from vldocir.retrieval.vectors import resolve_device

            self.model = self.checkpoint.load(
                SentenceTransformer, "model", device=str(resolve_device(self.device_name))
            )
            if self.max_seq_length:
                self.model.max_seq_length = min(self.max_seq_length, self.model.max_seq_length or self.max_seq_length)
        return self.model

    def prepare(self) -> None:
        self._model()

    def _encode(self, texts, prompt, batch_size):
        vectors = self._model().encode(
            [prompt + t for t in texts],
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=self.normalize,
            show_progress_bar=False,
        )
        return [v[None, :].astype(np.float32) for v in vectors]

    def encode_pages(self, pages):
        return self._encode(pages, self.page_prompt, self.batch_size)

    def encode_queries(self, texts):
        return self._encode(texts, self.query_prompt, self.query_batch_size)

    def describe(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            **self.checkpoint.describe(),
            "page_input": self.page_input,
            "max_seq_length": self.max_seq_length,
        }
