"""Reranking (paper §4.2): the top pages of an input run reordered by a reranker's scores.

``setting=rerank`` takes one input run (by default the job's retriever's own ``base`` run), scores
the first ``top_n`` pages of each query with a :class:`Reranker`, which reads the query and the page
image together, orders those pages by score (ties by page_id) and keeps the rest of the input run
after them in its own order. The paper reranks the top 25 pages of a multi-vector retriever with
Jina Reranker M0 (:class:`JinaRerankerM0`); :class:`ColEngineReranker` turns any colpali-engine
checkpoint into a reranker (exact fp32 MaxSim from the model's output).

Score cache. Scores are kept per (query text, page, reranker) on disk, in
``<cache>/rerank-scores/<key>/`` (:class:`ScoreCache`), the key hashing the benchmark fingerprint
and the reranker's :meth:`Reranker.cache_params`. Every batch is appended as it is scored, so an
interrupted rerank resumes where it stopped, and another ``top_n``, another input run or another
query set reuses every pair already scored. A score is taken to be independent of which pairs
shared its batch: Jina's inputs are padded on the left behind an attention mask, and
:class:`ColEngineReranker` scores each pair alone (padding may still move the last float bits).
Each line carries a checksum of the cache key, query, page and score, so a line damaged on disk, or
copied from another reranker's or benchmark's cache, is reported and scored again, never read.

Pages whose image does not decode: ``on_bad_page=fail`` (the default, as for the retrievers) stops
with an error naming them, keeping every score written so far; ``skip`` leaves them out of the
ranking (the rest of the run moves up) and records them in the manifest (``skipped_pages``).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm.auto import tqdm

from vldocir.cache import ArtifactCache, CorruptArtifactError, content_key, read_json
from vldocir.data.benchmark import Benchmark
from vldocir.errors import VldocirError
from vldocir.io import atomic_write_json
from vldocir.retrieval.checkpoints import Checkpoint, ModelLoadError, RevisionError, as_checkpoint
from vldocir.retrieval.embeddings import PageInputs
from vldocir.retrieval.encoders import Encoder, _torch_dtype
from vldocir.retrieval.fusion import ordered_run, ranked_lists
from vldocir.retrieval.settings import RunJob, RunSpec, Setting

log = logging.getLogger(__name__)

SCORES_KIND = "rerank-scores"
BAD_PAGE_POLICIES = ("fail", "skip")


# -- rerankers ---------------------------------------------------------------------------------------
class Reranker(ABC):
    """Scores (query, page image) pairs; a higher score is more relevant.

    Attributes:
        batch_size: pairs per :meth:`score` call (memory only; not part of the cache key).
    """

    batch_size: int = 8

    @abstractmethod
    def cache_params(self) -> dict[str, Any]:
        """Everything that changes the scores: model, resolved commit, input resolution, dtype."""

    @abstractmethod
    def score(self, queries: Sequence[str], images: Sequence[Any]) -> list[float]:
        """One float per pair ``(queries[i], images[i])`` (RGB ``PIL.Image``); a batch may mix queries."""

    def prepare(self) -> None:  # a hook, not abstract: a reranker without a model has nothing to load
        """Load the model now (before the first batch); a fully cached rerank never calls it. By default:
        nothing to do."""
        return

    def describe(self) -> dict[str, Any]:
        """Facts for the manifest; never loads the model."""
        return {"class": type(self).__name__, **self.cache_params()}


# Checkpoint's messages name the keys of a retriever's checkpoint; a reranker's live under the setting.
_RETRIEVER_KEYS = "retriever.model.encoder.checkpoint."


@contextmanager
def _keys_of(prefix: str) -> Iterator[None]:
    """Re-raise checkpoint errors with ``prefix`` as the override keys they tell the user to set."""
    try:
        yield
    except (ModelLoadError, RevisionError) as error:
        raise type(error)(str(error).replace(_RETRIEVER_KEYS, prefix)) from error


def _as_scores(output: Any, expected: int, source: str) -> list[float]:
    """A reranker's output as ``expected`` finite floats (a bare number counts as a list of one)."""
    values = [output] if isinstance(output, numbers.Real) else list(output)
    values = [float(v) for v in values]
    if len(values) != expected or not all(math.isfinite(v) for v in values):
        raise ValueError(
            f"{source} returned {values[:5]}{'...' if len(values) > 5 else ''} for {expected} pair(s): "
            "expected one finite score per pair"
        )
    return values


class JinaRerankerM0(Reranker):
    """jina-reranker-m0 (Qwen2-VL-2B + a score head) through its own hub code, scored with
    ``model.compute_score(pairs, max_length=..., doc_type="image")`` as its model card shows.

    The model is hub code (``JinaVLForRanking`` in the repository's ``modeling.py``), so it loads only
    with the user's opt-in ``checkpoint.trust_remote_code=true``, for the pinned commit.
    ``compute_score`` returns ``sigmoid(logit - 2.65)`` per pair: many near-equal scores round to
    one float, and such ties are broken by page_id.

    Args:
        checkpoint: see :class:`~vldocir.retrieval.checkpoints.Checkpoint` (``remote_code: true``).
        max_length: tokens per (page, query) input, ``compute_score``'s ``max_length``.
        min_visual_tokens, max_visual_tokens: page resolution bounds, in 28x28-pixel tokens.
            ``compute_score`` would load its own processor on first use from ``model.name_or_path``
            without a revision (the hub's current ``main``), with 4..768 tokens; the processor is
            loaded here instead, at the checkpoint's commit, with these bounds (part of the cache key).
        dtype, attn_implementation: model loading; part of the cache key.
        batch_size: pairs per forward pass. device: ``auto`` (CUDA when available), ``cpu``, ``cuda:0``.
    """

    keys = "reranker.model.checkpoint."

    def __init__(
        self,
        checkpoint: Checkpoint | dict,
        max_length: int = 2048,
        min_visual_tokens: int = 4,
        max_visual_tokens: int = 768,
        dtype: str = "bfloat16",
        attn_implementation: str | None = None,
        batch_size: int = 8,
        device: str = "auto",
    ):
        for name, value in (
            ("max_length", max_length),
            ("min_visual_tokens", min_visual_tokens),
            ("max_visual_tokens", max_visual_tokens),
            ("batch_size", batch_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if min_visual_tokens > max_visual_tokens:
            raise ValueError(f"min_visual_tokens ({min_visual_tokens}) exceeds max_visual_tokens ({max_visual_tokens})")
        self.checkpoint = as_checkpoint(checkpoint)
        self.max_length, self.min_visual_tokens, self.max_visual_tokens = (
            max_length,
            min_visual_tokens,
            max_visual_tokens,
        )
        self.dtype, self.attn_implementation = dtype, attn_implementation
        self.batch_size, self.device_name = batch_size, device
        self.model = None

    @property
    def device(self):
        from vldocir.retrieval.vectors import resolve_device

        return resolve_device(self.device_name)

    def cache_params(self) -> dict[str, Any]:
        with _keys_of(self.keys):  # a floating revision is resolved (or refused) here, before any key
            checkpoint = self.checkpoint.cache_params()
        return {
            "reranker": type(self).__name__,
            **checkpoint,
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
            "max_length": self.max_length,
            "min_visual_tokens": self.min_visual_tokens,
            "max_visual_tokens": self.max_visual_tokens,
        }

    def prepare(self) -> None:
        if self.model is not None:
            return
        from transformers import AutoModel, AutoProcessor

        kwargs: dict[str, Any] = {"dtype": _torch_dtype(self.dtype), "device_map": str(self.device)}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        with _keys_of(self.keys):
            model = self.checkpoint.load(AutoModel.from_pretrained, "reranker", **kwargs).eval()
            processor = self.checkpoint.load(
                AutoProcessor.from_pretrained,
                "reranker's processor",
                min_pixels=self.min_visual_tokens * 28 * 28,
                max_pixels=self.max_visual_tokens * 28 * 28,
            )
        if not callable(getattr(model, "compute_score", None)):
            raise ModelLoadError(
                f"{self.checkpoint.source} loaded as {type(model).__name__}, which has no compute_score: "
                "not a jina-reranker-m0 checkpoint"
            )
        model._processor = processor  # compute_score uses it instead of loading its own (see the class docstring)
        self.model = model

    def score(self, queries: Sequence[str], images: Sequence[Any]) -> list[float]:
        self.prepare()
        pairs = [[query, image] for query, image in zip(queries, images, strict=True)]
        output = self.model.compute_score(pairs, batch_size=len(pairs), max_length=self.max_length, doc_type="image")
        return _as_scores(output, len(pairs), f"{self.checkpoint.hub_id} compute_score")

    def describe(self) -> dict[str, Any]:
        import torch

        device = self.device
        return {
            "class": type(self).__name__,
            **self.checkpoint.describe(),
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
            "max_length": self.max_length,
            "min_visual_tokens": self.min_visual_tokens,
            "max_visual_tokens": self.max_visual_tokens,
            "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        }


class ColEngineReranker(Reranker):
    """A multi-vector encoder (any colpali-engine model through
    :class:`~vldocir.retrieval.encoders.ColEngineEncoder`) as a reranker: MaxSim of the query's and
    the page's token vectors, in fp32 straight from the model (no 16-bit storage as in the
    embedding store), by colpali-engine's ``score_multi_vector``.

    Each pair is scored on its own: ``score_multi_vector`` pads the pages of a batch with zero
    vectors, which would lift a page's MaxSim to 0 wherever all its true similarities are negative,
    making a score depend on its batch.

    Args:
        encoder: a multi-vector encoder of page images (its ``batch_size`` is unused here).
        batch_size: pairs per call (pages encoded in one forward pass).
    """

    keys = "reranker.model.encoder.checkpoint."

    def __init__(self, encoder: Encoder, batch_size: int = 8):
        if getattr(encoder, "kind", None) != "multi_vector" or getattr(encoder, "page_input", None) != "image":
            raise ValueError(
                f"ColEngineReranker needs a multi-vector encoder of page images, got {type(encoder).__name__} "
                f"(kind={getattr(encoder, 'kind', None)!r}, page_input={getattr(encoder, 'page_input', None)!r})"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.encoder, self.batch_size = encoder, batch_size

    def cache_params(self) -> dict[str, Any]:
        with _keys_of(self.keys):
            return {"reranker": type(self).__name__, "encoder": self.encoder.cache_params(), "score": "maxsim_fp32"}

    def prepare(self) -> None:
        with _keys_of(self.keys):
            self.encoder.prepare()

    def score(self, queries: Sequence[str], images: Sequence[Any]) -> list[float]:
        import torch
        from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

        self.prepare()
        pages = self.encoder.encode_pages(list(images))  # (n_tokens, dim) float32 per page
        distinct = list(dict.fromkeys(queries))
        vectors = dict(zip(distinct, self.encoder.encode_queries(distinct), strict=True))
        device = getattr(self.encoder, "device", "cpu")
        scores = [
            BaseVisualRetrieverProcessor.score_multi_vector(
                [torch.from_numpy(vectors[q])], [torch.from_numpy(p)], device=device
            )[0, 0].item()
            for q, p in zip(queries, pages, strict=True)
        ]
        return _as_scores(scores, len(queries), f"{type(self.encoder).__name__} MaxSim")

    def describe(self) -> dict[str, Any]:
        return {"class": type(self).__name__, "encoder": self.encoder.describe(), "score": "maxsim_fp32"}


# -- the score cache ---------------------------------------------------------------------------------
def query_key(text: str) -> str:
    """What the score cache knows a query by: a hash of its text (the same text shares its scores)."""
    return content_key({"query": text})


def line_checksum(key: str, query: str, page_id: str, score: float) -> str:
    """What a score-cache line vouches for: its cache's key, query key, page and score (as JSON
    writes a float, which reads back to the same value)."""
    return content_key([key, query, page_id, float(score)])


def score_cache_problems(directory: Path, integrity: str = "full") -> list[str]:
    """What is wrong with a score cache on disk (``python -m vldocir.store --verify``): its
    ``scores.json``, and per segment the lines that would be skipped (the last line of a segment cut
    short by a kill is no damage: it is scored again)."""
    try:
        record = read_json(directory / "scores.json")
        if not isinstance(record, dict) or record.get("key") != directory.name:
            raise CorruptArtifactError(directory / "scores.json", "does not describe this cache")
    except CorruptArtifactError as error:
        return [str(error)]
    found = []
    for segment in sorted((directory / "segments").glob("*.jsonl")):
        lines = segment.read_text(encoding="utf-8", errors="replace").split("\n")
        bad = 0
        for line in lines[:-1]:  # after the last newline: a line in flight, if anything
            try:
                row = json.loads(line)
                if row.get("h") != line_checksum(directory.name, str(row["q"]), str(row["p"]), float(row["s"])):
                    raise ValueError(line)
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
        if bad:
            found.append(f"{segment}: {bad} line(s) unreadable or damaged")
    return found


class ScoreCache:
    """One reranker's scores on one benchmark, by (query text, page): ``<cache>/rerank-scores/<key>/``.

    ``scores.json`` records what the key covers. ``segments/*.jsonl`` hold one line per scored pair,
    ``{"q": <query_key>, "p": <page_id>, "s": <score>, "h": <checksum>}`` (:func:`line_checksum`),
    appended and fsynced after every batch; each
    writer (process) appends to a segment of its own, named by its start time, host and pid, so an
    interrupted job loses at most the batch in flight and parallel jobs never share a file. Reading
    takes every segment in name (start-time) order, a later line winning; a line that does not parse
    (a writer killed mid-line) or whose checksum does not hold (damaged, or another cache's) is
    skipped, with one warning per segment naming it. Under ``cache_policy=overwrite`` the stored
    scores are not read, and the new segment's scores win in later reads.
    """

    def __init__(self, cache: ArtifactCache, key: str, description: dict):
        self.key = key
        self.directory = cache.directory(SCORES_KIND, key)
        (self.directory / "segments").mkdir(parents=True, exist_ok=True)
        record = {"kind": SCORES_KIND, "key": key, "description": json.loads(json.dumps(description, default=str))}
        try:
            if read_json(self.directory / "scores.json") != record:
                raise CorruptArtifactError(self.directory / "scores.json", "does not describe this cache")
        except CorruptArtifactError as error:
            if (self.directory / "scores.json").exists():
                log.warning("damaged rerank score cache file, writing it anew: %s", error)
            atomic_write_json(record, self.directory / "scores.json")
        self.scores: dict[tuple[str, str], float] = {} if cache.policy == "overwrite" else self._read()
        self._segment = None

    def _read(self) -> dict[tuple[str, str], float]:
        scores: dict[tuple[str, str], float] = {}
        for segment in sorted((self.directory / "segments").glob("*.jsonl")):
            skipped = 0
            with open(segment, encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    try:
                        row = json.loads(line)
                        query, page, value = str(row["q"]), str(row["p"]), float(row["s"])
                        if not math.isfinite(value) or row.get("h") != line_checksum(self.key, query, page, value):
                            raise ValueError(value)
                        scores[(query, page)] = value
                    except (ValueError, KeyError, TypeError, AttributeError):
                        skipped += 1
            if skipped:
                log.warning(
                    "%s: skipped %d unreadable or damaged line(s) (a writer stopped mid-line, bytes changed, "
                    "or lines of another cache); those pairs are scored again",
                    segment,
                    skipped,
                )
        return scores

    def get(self, query: str, page_id: str) -> float | None:
        return self.scores.get((query, page_id))

    def add(self, rows: Sequence[tuple[str, str, float]]) -> None:
        """Append ``(query_key, page_id, score)`` rows, on disk before this returns."""
        if self._segment is None:
            host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "unknown"
            name = f"{time.time_ns():020d}-{host}-{os.getpid()}.jsonl"
            # one append handle for the store's lifetime (every add() fsyncs it); close() closes it
            self._segment = open(self.directory / "segments" / name, "a", encoding="utf-8")  # noqa: SIM115
        self._segment.write(
            "".join(
                json.dumps({"q": q, "p": p, "s": s, "h": line_checksum(self.key, q, p, s)}) + "\n" for q, p, s in rows
            )
        )
        self._segment.flush()
        os.fsync(self._segment.fileno())
        self.scores.update(((q, p), s) for q, p, s in rows)

    def close(self) -> None:
        if self._segment is not None:
            self._segment.close()
            self._segment = None


# -- page images -------------------------------------------------------------------------------------
class UnknownPageError(VldocirError, LookupError):
    """The input run names a page the benchmark does not have."""


class PageImages:
    """Decoded page images by page_id, read through the embedding store's :class:`PageInputs`."""

    def __init__(self, bench: Benchmark):
        self.inputs = PageInputs(bench, "image")
        self.position = {page_id: i for i, page_id in enumerate(self.inputs.page_ids)}
        self.bench = bench

    def load(self, page_id: str):
        """The RGB image of ``page_id``; raises what the decoder raises for a broken image."""
        if page_id not in self.position:
            raise UnknownPageError(
                f"the input run names page {page_id!r}, which benchmark {self.bench.name} does not have"
            )
        i = self.position[page_id]
        (value,) = self.inputs.raw(i, i + 1)
        return self.inputs.decode(value)


class BadRerankPagesError(VldocirError, RuntimeError):
    """Candidate pages whose image could not be decoded; the scores written so far are kept."""

    def __init__(self, bad: Sequence[dict], scores_dir: Path):
        self.bad = list(bad)
        listing = "; ".join(f"{b['page_id']} ({b['error']})" for b in self.bad[:5])  # one line; all are in self.bad
        more = f"; and {len(self.bad) - 5} more" if len(self.bad) > 5 else ""
        super().__init__(
            f"{len(self.bad)} candidate page(s) could not be decoded for reranking: {listing}{more}. "
            f"The scores computed so far are kept in {scores_dir}. Fix the images, or rerun with "
            "setting.method.on_bad_page=skip to leave such pages out of the ranking (recorded in the manifest)."
        )


# -- the setting -------------------------------------------------------------------------------------
def rerank_list(items: Sequence[str], scores: Mapping[str, float], top_n: int, depth: int) -> list[str]:
    """``items`` (an input ranking) with its first ``top_n`` ordered by ``scores`` (descending, ties
    by page_id), then the rest in input order; top ``depth``. A page of the first ``top_n`` without a
    score (a skipped bad page) is left out."""
    head = sorted((p for p in items[:top_n] if p in scores), key=lambda p: (-scores[p], p))
    return (head + list(items[top_n:]))[:depth]


class Rerank(Setting):
    """Rerank the top ``top_n`` pages of one input run with ``reranker`` (paper: top 25, Jina Reranker M0).

    Args:
        reranker: a :class:`Reranker`.
        top_n: pages per query that are reranked; the input's later pages follow in their order.
        input: the run to rerank (:meth:`RunSpec.parse`): ``base`` is the job's retriever's own run.
        on_bad_page: ``fail`` or ``skip`` (see the module docstring).
        decode_workers: threads decoding the next batch's page images while the reranker scores.
        progress: show a progress bar over queries.
    """

    uses_retriever = False  # the input run's key covers the retriever

    def __init__(
        self,
        reranker: Reranker,
        top_n: int = 25,
        input: Any = "base",
        on_bad_page: str = "fail",
        decode_workers: int = 4,
        progress: bool = True,
    ):
        for name, value in (("top_n", top_n), ("decode_workers", decode_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if on_bad_page not in BAD_PAGE_POLICIES:
            raise ValueError(f"on_bad_page must be one of {BAD_PAGE_POLICIES}, got {on_bad_page!r}")
        if not isinstance(reranker, Reranker):
            raise ValueError(f"reranker must be a vldocir.retrieval.rerank.Reranker, got {type(reranker).__name__}")
        self.reranker, self.top_n, self.run = reranker, top_n, RunSpec.parse(input)
        self.on_bad_page, self.decode_workers, self.progress = on_bad_page, decode_workers, progress

    def inputs(self) -> tuple[RunSpec, ...]:
        return (self.run,)

    def cache_params(self) -> dict[str, Any]:
        return {
            "setting": "rerank",
            "top_n": self.top_n,
            "on_bad_page": self.on_bad_page,
            "reranker": self.reranker.cache_params(),
        }

    def make_run(self, job: RunJob) -> pa.Table:
        if len(job.inputs) != 1:
            raise ValueError(f"rerank takes one input run, got {len(job.inputs)}")
        lists = ranked_lists(job.inputs[0])
        query_ids = list(job.queries)
        scores, skipped = self.pair_scores(job, {q: lists.get(q, [])[: self.top_n] for q in query_ids})
        reranked = []
        for q in query_ids:
            key = query_key(job.queries[q])
            mine = {p: scores[(key, p)] for p in lists.get(q, [])[: self.top_n] if (key, p) in scores}
            reranked.append(rerank_list(lists.get(q, []), mine, self.top_n, job.depth))
        if skipped:
            job.stats["rerank"]["skipped_pages"] = skipped
        return ordered_run(query_ids, reranked)

    def pair_scores(
        self, job: RunJob, candidates: dict[str, list[str]]
    ) -> tuple[dict[tuple[str, str], float], list[dict]]:
        """The reranker's score of every (query, candidate) pair, keyed ``(query_key, page_id)``:
        read from the score cache, the missing ones computed (and appended to it) batch by batch.
        Returns the scores and the pages skipped as undecodable."""
        description = {"benchmark": job.bench.fingerprint, "reranker": self.reranker.cache_params()}
        key = job.cache.key_for(SCORES_KIND, **description)
        store = ScoreCache(job.cache, key, description)
        needed: dict[tuple[str, str], str] = {}  # (query_key, page) -> query text, in query then rank order
        last_pair: list[int] = []  # per query, how many pending pairs must be scored before it is done
        pending: list[tuple[str, str]] = []
        for q, pages in candidates.items():
            text = job.queries[q]
            for p in pages:
                pair = (query_key(text), p)
                if pair not in needed:
                    needed[pair] = text
                    if store.get(*pair) is None:
                        pending.append(pair)
            last_pair.append(len(pending))
        job.cache.record(
            SCORES_KIND, key, "hit" if not pending else ("overwrite" if job.cache.policy == "overwrite" else "miss")
        )
        stats = {
            "top_n": self.top_n,
            "queries": len(candidates),
            "pairs": len(needed),
            "pairs_cached": len(needed) - len(pending),
            "pairs_scored": 0,
            "score_s": 0.0,
            "scores_dir": str(store.directory),
        }
        job.stats["rerank"] = stats
        skipped: list[dict] = []
        try:
            if pending:
                skipped = self._score_pending(job, store, pending, needed, last_pair, stats)
        finally:
            store.close()
            stats["score_s"] = round(stats["score_s"], 3)
            stats["reranker"] = self.reranker.describe()
        return {pair: value for pair in needed if (value := store.get(*pair)) is not None}, skipped

    def _score_pending(
        self,
        job: RunJob,
        store: ScoreCache,
        pending: list[tuple[str, str]],
        texts: dict[tuple[str, str], str],
        last_pair: list[int],
        stats: dict,
    ) -> list[dict]:
        images = PageImages(job.bench)
        self.reranker.prepare()
        size = self.reranker.batch_size
        batches = [pending[i : i + size] for i in range(0, len(pending), size)]
        skipped: list[dict] = []
        with (
            tqdm(total=len(last_pair), desc="rerank", unit="query", disable=not self.progress) as bar,
            ThreadPoolExecutor(max_workers=self.decode_workers) as pool,
        ):
            bar.update(sum(1 for end in last_pair if end == 0))
            decode = lambda batch: [pool.submit(images.load, p) for _, p in batch]  # noqa: E731
            upcoming = decode(batches[0])
            for n, batch in enumerate(batches):
                current, upcoming = upcoming, (decode(batches[n + 1]) if n + 1 < len(batches) else [])
                good, bad = [], []
                for pair, future in zip(batch, current, strict=True):
                    try:
                        good.append((pair, future.result()))
                    except UnknownPageError:
                        raise
                    except Exception as error:  # any decoder failure: report the page
                        bad.append({"page_id": pair[1], "error": f"{type(error).__name__}: {error}"})
                if bad and self.on_bad_page == "fail":
                    raise BadRerankPagesError(bad, store.directory)
                if bad:
                    log.warning(
                        "skipping %d undecodable candidate page(s): %s", len(bad), ", ".join(b["page_id"] for b in bad)
                    )
                    skipped += [b for b in bad if b["page_id"] not in {s["page_id"] for s in skipped}]
                if good:
                    tick = time.perf_counter()
                    values = self.reranker.score([texts[pair] for pair, _ in good], [image for _, image in good])
                    stats["score_s"] += time.perf_counter() - tick
                    store.add([(q, p, v) for ((q, p), _), v in zip(good, values, strict=True)])
                    stats["pairs_scored"] += len(good)
                finished = n * size + len(batch)
                bar.update(sum(1 for end in last_pair if n * size < end <= finished))
        return skipped
