"""Any model of mteb's registry as an embedding retriever (``retriever=mteb retriever.model.name=<name>``).

mteb does the model half: ``mteb.get_model_meta(name)`` gives the loader (its wrapper class or function),
the loader's keyword arguments and the pinned revision; the wrapper encodes queries and pages from the
DataLoaders mteb's retrieval evaluator builds (``mteb._create_dataloaders.create_dataloader`` with the
task's metadata and ``PromptType.query`` / ``PromptType.document``), so the model reads exactly what it
reads in an mteb evaluation, prompts and instructions included. The project does the rest, as for every
other model (:mod:`vldocir.retrieval.dense`): the cached sharded page store, exact MaxSim or dot-product
search, runs and evaluation.

The run key (:meth:`MtebEncoder.cache_params`) holds the mteb name, the commit loaded, the loader's
qualified name and keyword arguments, the mteb version (a wrapper's code can change the vectors), the
kind (single- or multi-vector) and the PaliGemma attention fix applied to the loaded model
(:func:`vldocir.retrieval.encoders.paligemma_attends_bidirectionally`). mteb is a dev dependency,
imported on use.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vldocir.errors import ConfigError, MissingDependencyError, VldocirError
from vldocir.retrieval.checkpoints import Checkpoint
from vldocir.retrieval.dense import EmbeddingRetriever
from vldocir.retrieval.encoders import PALIGEMMA_ATTENTION, Encoder, paligemma_attends_bidirectionally

INSTALL_HINT = "retriever=mteb needs mteb (pip install 'mteb>=2.26', or uv sync for the dev group)"

#: mteb's similarity functions (ScoringFunction values) -> the kind of search that ranks as they do.
#: Cosine becomes a dot product of L2-normalised vectors; Euclidean and Manhattan rankings have no
#: dot-product equivalent, so those models are refused.
KIND_OF_SIMILARITY = {"MaxSim": "multi_vector", "cosine": "single_vector", "dot": "single_vector"}

#: The task metadata the wrappers see when no mteb task is named (``task: null``): mteb's own shape of a
#: page-retrieval task (ViDoRe v1/v2's: DocumentUnderstanding, text queries to page images), or its
#: text retrieval shape when pages are read as text.
PAGE_TASK = {
    "name": "vldocir-page-retrieval",
    "description": "Retrieve the document pages that answer a question (vldocir).",
    "dataset": {"path": "vldocir", "revision": "none"},
    "eval_splits": ["test"],
    "eval_langs": ["eng-Latn"],
    "main_score": "ndcg_at_5",
}
PAGE_TASK_SHAPE = {
    "image": {"type": "DocumentUnderstanding", "category": "t2i", "modalities": ["text", "image"]},
    "text": {"type": "Retrieval", "category": "t2t", "modalities": ["text"]},
}
HF_SPLIT, HF_SUBSET = "test", "default"  # what the evaluator passes a single-split, single-subset task


class MtebModelError(VldocirError, RuntimeError):
    """An mteb wrapper's output that is not one vector, or one matrix, per input."""


def _mteb():
    try:
        import mteb
    except ImportError as error:
        raise MissingDependencyError(INSTALL_HINT) from error
    return mteb


def qualified_name(loader: Any) -> str:
    """``module.QualName`` of a loader (a wrapper class or function); a ``functools.partial`` keeps its
    bound arguments, which change what it loads."""
    if isinstance(loader, functools.partial):
        bound = [repr(a) for a in loader.args] + [f"{k}={_plain(v)!r}" for k, v in sorted(loader.keywords.items())]
        return f"{qualified_name(loader.func)}({', '.join(bound)})"
    return f"{getattr(loader, '__module__', '?')}.{getattr(loader, '__qualname__', repr(loader))}"


def _plain(value: Any) -> Any:
    """A JSON-able copy of a loader argument (enums by value, classes and dtypes by name)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, int, float, type(None))):
        return value
    if isinstance(value, str):
        return str(value)  # a str enum (mteb's OutputDType) by its value
    if isinstance(value, type) or callable(value):
        return qualified_name(value)
    return str(value)


def _container(value: Any) -> Any:
    """A plain dict/list of a Hydra node (the encoder's mapping arrives as a DictConfig)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def model_meta(name: str):
    """mteb's ModelMeta of ``name``; an unknown name is one line (with mteb's close matches)."""
    mteb = _mteb()
    try:
        return mteb.get_model_meta(name)  # the registry only: never the hub
    except (KeyError, ValueError) as error:
        reason = " ".join(str(error.args[0] if error.args else error).split())
        raise ConfigError(reason) from error


class MtebEncoder(Encoder):
    """An mteb model, loaded and run by mteb's own loader and wrapper (see the module docstring).

    Args:
        name: an mteb model name (``mteb.get_model_meta``), e.g. ``vidore/colqwen2.5-v0.2``.
        checkpoint: :class:`Checkpoint` options. ``hub_id`` defaults to ``name`` and ``revision`` to
            the commit mteb pins for it (ModelMeta.revision). With ``local_path`` the loader gets that
            directory in place of the hub id (mteb's loaders call ``from_pretrained`` on it), for nodes
            without network access. A loader that runs hub code (``trust_remote_code`` in its kwargs)
            needs the same explicit opt-in as any retriever (``checkpoint.trust_remote_code=true``).
        loader_kwargs: merged over ModelMeta.loader_kwargs (as ``ModelMeta.load_model`` merges), e.g.
            ``torch_dtype: float32`` on a CPU, ``attn_implementation`` where the wrapper passes it on.
        page_input: ``image``, or a text column of the pages table (``ocr_text``, ``dom_text``) for a
            text model; checked against the model's modalities.
        task: an mteb task name whose metadata the wrapper sees (its task-specific prompts), or
            ``None`` for the generic page-retrieval metadata (:data:`PAGE_TASK`).
        batch_size, query_batch_size: pages and queries per DataLoader batch.
        device: ``auto`` (CUDA when available), ``cpu``, ``cuda:0``.
    """

    def __init__(
        self,
        name: str | None,
        checkpoint: Mapping[str, Any] | None = None,
        loader_kwargs: Mapping[str, Any] | None = None,
        page_input: str = "image",
        task: str | None = None,
        batch_size: int = 8,
        query_batch_size: int = 64,
        device: str = "auto",
    ):
        if not name:
            raise ConfigError("no mteb model named: set retriever.model.name, e.g. vidore/colqwen2.5-v0.2")
        self.name, self.meta = name, model_meta(name)
        if self.meta.loader is None:
            raise ConfigError(
                f"mteb model {name}: mteb has no implementation to load it "
                "(an API model, or metadata only); pick a model mteb can load"
            )
        if "cross-encoder" in (self.meta.model_type or []):
            raise ConfigError(
                f"mteb model {name} is a cross-encoder: it scores (query, page) pairs and has no vectors to store; "
                "pick an embedding model (dense or late-interaction)"
            )
        similarity = str(getattr(self.meta.similarity_fn_name, "value", self.meta.similarity_fn_name))
        if similarity not in KIND_OF_SIMILARITY:
            raise ConfigError(
                f"mteb model {name}: mteb scores it with {similarity!r}, which no dot-product or MaxSim "
                f"search reproduces (supported: {', '.join(KIND_OF_SIMILARITY)})"
            )
        self.similarity, self.kind = similarity, KIND_OF_SIMILARITY[similarity]
        modality = "image" if page_input == "image" else "text"
        if modality not in self.meta.modalities:
            hint = "set retriever.model.encoder.page_input=ocr_text (or dom_text)" if modality == "image" else ""
            raise ConfigError(
                f"mteb model {name} reads {'/'.join(self.meta.modalities)}, not page "
                f"{'images' if modality == 'image' else 'text'} (page_input={page_input}){'; ' + hint if hint else ''}"
            )
        self.page_input, self.task = page_input, task
        self.loader_kwargs = {**self.meta.loader_kwargs, **dict(_container(loader_kwargs) or {})}
        options = dict(_container(checkpoint) or {})
        options["hub_id"] = options.get("hub_id") or name
        if not options.get("revision") and options["hub_id"] == self.meta.name:
            options["revision"] = self.meta.revision  # the commit mteb pins for this name
        options["remote_code"] = bool(options.get("remote_code") or self.loader_kwargs.get("trust_remote_code"))
        self.checkpoint = Checkpoint(**options)
        self.batch_size, self.query_batch_size, self.device_name = batch_size, query_batch_size, device
        self.task_metadata = self._task_metadata(modality)
        self.model = None

    def _task_metadata(self, modality: str):
        if self.task is None:
            from mteb.abstasks.task_metadata import TaskMetadata

            return TaskMetadata(**PAGE_TASK, **PAGE_TASK_SHAPE[modality])
        try:
            metadata = _mteb().get_task(self.task).metadata
        except (KeyError, ValueError) as error:
            reason = " ".join(str(error.args[0] if error.args else error).split())
            raise ConfigError(f"retriever.model.encoder.task={self.task}: {reason}") from error
        from mteb.types import PromptType

        pages = metadata.get_modalities(PromptType.document)
        if pages != [modality]:
            raise ConfigError(
                f"retriever.model.encoder.task={self.task}: its documents are {'+'.join(pages)}, but pages are read as "
                f"{modality} (page_input={self.page_input}); name a task whose documents are {modality} only"
            )
        return metadata

    # -- identity ------------------------------------------------------------------------------------
    def _mteb_facts(self) -> dict[str, Any]:
        return {
            "mteb_model": self.name,
            "mteb_revision": self.meta.revision,
            "mteb_version": _mteb().__version__,
            "loader": qualified_name(self.meta.loader),
            "loader_kwargs": _plain(self.loader_kwargs),
            "kind": self.kind,
            "similarity": self.similarity,
            "page_input": self.page_input,
            "task": self.task_metadata.name,
            # any PaliGemma the loader builds (mteb's ColPali wrappers) attends as the project's own ColPali does;
            # mteb's loaders are not known to build one before they run, so every mteb key carries it
            **PALIGEMMA_ATTENTION,
        }

    def cache_params(self) -> dict[str, Any]:
        return {"encoder": type(self).__name__, **self.checkpoint.cache_params(), **self._mteb_facts()}

    def describe(self) -> dict[str, Any]:
        from vldocir.retrieval.vectors import resolve_device

        return {
            "class": type(self).__name__,
            **self.checkpoint.describe(),
            **self._mteb_facts(),
            "device": str(resolve_device(self.device_name)),
        }

    # -- model ---------------------------------------------------------------------------------------
    def prepare(self) -> None:
        if self.model is not None:
            return
        from vldocir.retrieval.vectors import resolve_device

        def load(source: str, revision: str | None = None, **kwargs):
            # ModelMeta.load_model with the checkpoint's source (a hub id, or a local copy) and commit
            return self.meta.model_copy(update={"name": source, "revision": revision}).load_model(**kwargs)

        kwargs = dict(self.loader_kwargs)
        if self.checkpoint.remote_code:
            kwargs.pop("trust_remote_code", None)  # the checkpoint passes it, once opted in
        try:
            self.model = self.checkpoint.load(load, "model", device=str(resolve_device(self.device_name)), **kwargs)
        except ImportError as error:  # a wrapper's own requirement (mteb's requires_package: open_clip, ...)
            if isinstance(error, MissingDependencyError):
                raise
            raise MissingDependencyError(f"mteb model {self.name}: {' '.join(str(error).split())}") from error
        for module in _torch_modules(self.model):
            paligemma_attends_bidirectionally(module)

    def _encode(self, columns: dict[str, list], prompt_type, batch_size: int) -> list[np.ndarray]:
        """The wrapper's ``encode`` over mteb's DataLoader of ``columns``; one float32 (n_tokens, dim) per row."""
        from mteb._create_dataloaders import create_dataloader

        self.prepare()
        dataset = _dataset(columns)
        loader = create_dataloader(
            dataset, task_metadata=self.task_metadata, prompt_type=prompt_type, batch_size=batch_size
        )
        output = self.model.encode(
            loader,
            task_metadata=self.task_metadata,
            hf_split=HF_SPLIT,
            hf_subset=HF_SUBSET,
            prompt_type=prompt_type,
            batch_size=batch_size,
            show_progress_bar=False,  # mteb's EncodeKwargs; the page store shows its own progress
        )
        return self._vectors(output, len(dataset))

    def _vectors(self, output: Any, n: int) -> list[np.ndarray]:
        """(n, dim) single vectors, or (n, L, dim) multi-vectors padded to the longest item (or a list of
        per-item arrays) -> n float32 arrays (n_tokens, dim); cosine models' vectors are L2-normalised."""
        items = [_as_float32(item) for item in output] if isinstance(output, (list, tuple)) else _as_float32(output)
        want = 1 if self.kind == "single_vector" else 2
        if len(items) != n or any(np.ndim(item) != want for item in items):
            shape = getattr(output, "shape", f"{len(items)} items")
            raise MtebModelError(
                f"mteb model {self.name} ({qualified_name(self.meta.loader)}) returned {shape} for {n} inputs; "
                f"a {self.kind.replace('_', '-')} model should give {'one vector' if want == 1 else 'token vectors'} "
                "per input"
            )
        if self.kind == "single_vector":
            vectors = [np.asarray(item)[None, :] for item in items]
            if self.similarity == "cosine":
                vectors = [v / max(float(np.linalg.norm(v)), 1e-12) for v in vectors]
            return vectors
        return [_strip_padding(item) for item in items]

    def encode_pages(self, pages: Sequence[Any]) -> list[np.ndarray]:
        from mteb.types import PromptType

        ids = [str(i) for i in range(len(pages))]
        if self.page_input == "image":
            columns = {"id": ids, "image": [_lossless_bytes(page) for page in pages]}
        else:
            columns = {"id": ids, "text": [str(page or "") for page in pages]}
        return self._encode(columns, PromptType.document, self.batch_size)

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        from mteb.types import PromptType

        return self._encode(
            {"id": [str(i) for i in range(len(texts))], "text": list(texts)}, PromptType.query, self.query_batch_size
        )


def _torch_modules(wrapper: Any) -> list:
    """The torch modules an mteb wrapper holds as attributes (its model: ``mdl``, ``model``, ...), or the
    wrapper itself when it is one."""
    import torch

    if isinstance(wrapper, torch.nn.Module):
        return [wrapper]
    return [value for value in vars(wrapper).values() if isinstance(value, torch.nn.Module)]


def _strip_padding(item: np.ndarray) -> np.ndarray:
    """One item's (L, dim) token vectors without its padding rows, so that they do not depend on its batch.

    mteb's multi-vector wrappers return each batch's model output (padding positions multiplied by the
    attention mask) zero-padded across batches (``pad_sequence``), without the mask. Padding is then the
    all-zero rows, plus a leading run of non-finite rows: left padding (Qwen), whose fully masked attention
    rows come out NaN on some attention kernels (sdpa on a CPU), and NaN times a zero mask stays NaN. A
    non-finite row among the real tokens is kept, so that the store refuses it.
    """
    finite = np.isfinite(item).all(axis=1)
    first = int(np.argmax(finite)) if finite.any() else len(item)
    keep = np.zeros(len(item), dtype=bool)
    keep[first:] = True
    keep &= np.any(item != 0, axis=1)
    return np.ascontiguousarray(item[keep])


def _as_float32(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):  # a torch tensor (any dtype, any device)
        array = array.detach().float().cpu().numpy()
    return np.asarray(array, dtype=np.float32)


def _lossless_bytes(image) -> dict[str, Any]:
    """A decoded page as a ``datasets.Image`` value: uncompressed BMP bytes, so the wrapper decodes the
    very pixels (``datasets`` would otherwise PNG-compress each page, about 1 s for a 2000x4000 page)."""
    buffer = io.BytesIO()
    image.save(buffer, format="BMP")
    return {"bytes": buffer.getvalue(), "path": None}


def _dataset(columns: dict[str, list]):
    from datasets import Dataset, Features, Image, Value

    features = {"id": Value("string")}
    features.update({"image": Image()} if "image" in columns else {"text": Value("string")})
    return Dataset.from_dict(columns, features=Features(features))


class MtebRetriever(EmbeddingRetriever):
    """The embedding retriever (store, search, settings) over an :class:`MtebEncoder`.

    ``name`` sits on the retriever so that ``retriever.model.name=<mteb model name>`` picks the model;
    the encoder node reads it by interpolation (``name: ${..name}`` in conf/retriever/mteb.yaml), so
    it stays an encoder Hydra instantiates like any other. The rest is :class:`EmbeddingRetriever`'s.
    """

    def __init__(self, name: str | None, encoder: MtebEncoder, **kwargs):
        if encoder.name != name:
            raise ConfigError(
                f"encoder.name={encoder.name} differs from name={name}: set the model with retriever.model.name "
                "(the encoder reads it)"
            )
        super().__init__(encoder, **kwargs)
