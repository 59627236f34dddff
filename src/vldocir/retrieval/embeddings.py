"""The embedding store: page embeddings in fixed-size shards, query embeddings beside them.

Layout of one page-embedding artifact (``<cache>/page-embeddings/<key>/``)::

    store.json            what the key covers, page count, shard size, storage dtype
    page_ids.json         the page order (the benchmark's pages sorted by page_id)
    shards/00000/         pages [0, shard_size): vectors.npy (n_tokens, dim) 16-bit,
                          offsets.npy (n_pages + 1,) int64, shard.json (bad pages, timings)
    shards/00001/ ...
    artifact.json         written once every shard exists: the artifact is complete

Each shard is written into a hidden staging directory and renamed into place, so a shard either
exists whole or not at all. Encoding resumes at the missing shards; separate processes (a SLURM
job array) can each encode their own subset of shards into the same directory. Vectors are
memory-mapped on read, so searching a 76 GB store never loads it whole.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow.dataset as ds
from tqdm.auto import tqdm

from vldocir.cache import DONE_FILE, ArtifactCache
from vldocir.data.benchmark import Benchmark, table_location
from vldocir.io import atomic_write_json
from vldocir.retrieval.search import RaggedVectors

log = logging.getLogger(__name__)

STORE_FILE = "store.json"
SHARD_FILE = "shard.json"
STORAGE_DTYPES = ("float16", "bfloat16")


class BadPagesError(RuntimeError):
    """Pages whose input could not be read; the encoded shards are kept."""

    def __init__(self, bad: Sequence[dict], store: Path):
        self.bad = list(bad)
        listing = "\n".join(f"  {b['page_id']}: {b['error']}" for b in self.bad[:50])
        more = f"\n  ... and {len(self.bad) - 50} more" if len(self.bad) > 50 else ""
        super().__init__(
            f"{len(self.bad)} page(s) could not be decoded; stopping before search.\n{listing}{more}\n"
            f"The other pages' embeddings are kept in {store}. Fix the images (the benchmark's "
            "fingerprint then changes and they are encoded anew), or rerun with "
            "retriever.model.on_bad_page=skip to leave them out (recorded in the manifest)."
        )


def to_storage(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 -> 16-bit storage: float16, or bfloat16 bits kept in uint16 (round to nearest even)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if dtype == "float16":
        return vectors.astype(np.float16)
    import torch

    return torch.from_numpy(vectors).to(torch.bfloat16).view(torch.uint16).numpy()


def write_ragged(directory: Path, items: Sequence[np.ndarray], dtype: str, extra: dict) -> None:
    """Write ``items`` (each (n_i, dim) fp32) as vectors.npy + offsets.npy + shard.json."""
    packed = RaggedVectors.from_list(items)
    np.save(directory / "vectors.npy", to_storage(packed.vectors, dtype))
    np.save(directory / "offsets.npy", packed.offsets)
    atomic_write_json({"dtype": dtype, "n_items": len(items), "n_tokens": int(packed.offsets[-1]), **extra}, directory / SHARD_FILE)


def read_ragged(directory: Path, first_index: int = 0) -> RaggedVectors:
    meta = json.loads((directory / SHARD_FILE).read_text())
    vectors = np.load(directory / "vectors.npy", mmap_mode="r")
    offsets = np.load(directory / "offsets.npy")
    return RaggedVectors(vectors, offsets, meta["dtype"] == "bfloat16", first_index)


def _write_atomically(final: Path, fill: Callable[[Path], None]) -> None:
    """Fill a staging directory and rename it to ``final`` (if another writer got there first, keep theirs)."""
    staging = final.with_name(f".{final.name}.staging-{os.getpid()}-{time.time_ns()}")
    staging.mkdir(parents=True)
    try:
        fill(staging)
        try:
            staging.rename(final)
        except OSError:
            if not (final / SHARD_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass
class PageInputs:
    """Reads what an encoder consumes for a range of pages, in the store's page order."""

    bench: Benchmark
    column: str  # "image" or a text column of the pages table
    page_ids: list[str] = field(init=False)
    _rows: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        ids = self.bench.arrow("pages", ["page_id"]).column("page_id").to_numpy(zero_copy_only=False)
        self._rows = np.argsort(ids, kind="stable")
        self.page_ids = [str(x) for x in ids[self._rows]]

    def raw(self, start: int, stop: int) -> list[Any]:
        """The stored values of pages ``start:stop``: texts, or image structs (bytes or a path)."""
        dataset = ds.dataset(table_location(self.bench.root, "pages"), format="parquet")
        return dataset.take(self._rows[start:stop], columns=[self.column]).column(self.column).to_pylist()

    def decode(self, value: Any) -> Any:
        """A page's encoder input: the text, or the decoded RGB image (raises on a broken image)."""
        if self.column != "image":
            return value or ""
        return _decode_image(self.bench.root, value)

    def batches(self, start: int, stop: int, batch_size: int, workers: int) -> Iterator[tuple[list[Any], list[dict]]]:
        """Decoded inputs of pages ``start:stop`` in batches (``None`` for a bad page), plus the bad pages.

        Images are decoded by ``workers`` threads (Pillow releases the GIL while decoding), one
        batch ahead of the one being encoded: the model never waits for decoding when decoding
        keeps up, and at most two batches of decoded pages are in memory (a 2000x4000 RGB page
        is 24 MB; a whole shard would not fit).
        """
        from concurrent.futures import ThreadPoolExecutor

        values = self.raw(start, stop)
        ids = self.page_ids[start:stop]
        spans = [(i, min(i + batch_size, len(values))) for i in range(0, len(values), batch_size)]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            submit = lambda a, b: [pool.submit(self.decode, v) for v in values[a:b]]  # noqa: E731
            pending = submit(*spans[0]) if spans else []
            for n, (a, b) in enumerate(spans):
                current, pending = pending, (submit(*spans[n + 1]) if n + 1 < len(spans) else [])
                inputs, bad = [], []
                for page_id, future in zip(ids[a:b], current):
                    try:
                        inputs.append(future.result())
                    except Exception as error:  # any decoder failure: report the page, keep going
                        inputs.append(None)
                        bad.append({"page_id": page_id, "error": f"{type(error).__name__}: {error}"})
                yield inputs, bad


def _decode_image(root: Path, value: dict | None):
    from PIL import Image

    if not value or not (value.get("bytes") or value.get("path")):
        raise ValueError("no image bytes or path")
    source = io.BytesIO(value["bytes"]) if value.get("bytes") else root / value["path"]
    with Image.open(source) as image:
        image.load()  # decode now, so that a truncated file fails here and not inside the model
        return image.convert("RGB")


@dataclass
class PageEmbeddingStore:
    """One page-embedding artifact: a directory of shards, keyed by everything that changes them."""

    directory: Path
    n_pages: int
    shard_size: int
    dtype: str

    @property
    def n_shards(self) -> int:
        return max(1, -(-self.n_pages // self.shard_size))

    def shard_dir(self, shard: int) -> Path:
        return self.directory / "shards" / f"{shard:05d}"

    def shard_range(self, shard: int) -> tuple[int, int]:
        return shard * self.shard_size, min((shard + 1) * self.shard_size, self.n_pages)

    def has_shard(self, shard: int) -> bool:
        return (self.shard_dir(shard) / SHARD_FILE).is_file()

    def missing_shards(self) -> list[int]:
        return [s for s in range(self.n_shards) if not self.has_shard(s)]

    @property
    def complete(self) -> bool:
        return (self.directory / DONE_FILE).is_file()

    def shards(self) -> Iterator[RaggedVectors]:
        for shard in range(self.n_shards):
            yield read_ragged(self.shard_dir(shard), first_index=self.shard_range(shard)[0])

    def shard_meta(self) -> list[dict]:
        return [json.loads((self.shard_dir(s) / SHARD_FILE).read_text()) for s in range(self.n_shards) if self.has_shard(s)]

    def bad_pages(self) -> list[dict]:
        return [bad for meta in self.shard_meta() for bad in meta.get("bad_pages", [])]

    def page_ids(self) -> list[str]:
        return json.loads((self.directory / "page_ids.json").read_text())


def open_page_store(
    cache: ArtifactCache, key: str, description: dict, page_ids: list[str], shard_size: int, dtype: str
) -> PageEmbeddingStore:
    """Open (creating if needed) the store for ``key``; checks an existing one was made the same way."""
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"embedding storage dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")
    directory = cache.directory("page-embeddings", key)
    spec = {"key": key, "n_pages": len(page_ids), "shard_size": shard_size, "dtype": dtype, "description": description}
    spec_file = directory / STORE_FILE
    if spec_file.is_file():
        found = json.loads(spec_file.read_text())
        if (found["n_pages"], found["shard_size"], found["dtype"]) != (len(page_ids), shard_size, dtype):
            raise ValueError(
                f"{directory} was started with n_pages={found['n_pages']}, shard_size={found['shard_size']}, "
                f"dtype={found['dtype']}; this run asks for {len(page_ids)}, {shard_size}, {dtype}. "
                "Shard size and storage dtype must stay the same for one store: keep them, or run "
                "with cache_policy=overwrite."
            )
    else:
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(page_ids, directory / "page_ids.json")
        atomic_write_json(spec, spec_file)
    return PageEmbeddingStore(directory, len(page_ids), shard_size, dtype)


def encode_shards(
    store: PageEmbeddingStore,
    inputs: PageInputs,
    encode: Callable[[list[Any]], list[np.ndarray]],
    shards: Sequence[int],
    *,
    overwrite: bool = False,
    batch_size: int = 8,
    decode_workers: int = 4,
    progress: bool = True,
) -> dict:
    """Encode the given shards (skipping finished ones unless ``overwrite``); returns timing facts.

    A page whose image does not decode gets zero tokens and is listed in its shard's
    ``bad_pages``. ``encode`` maps a batch of inputs to one (n_tokens, dim) array per input;
    ``decode_workers`` threads prepare the next batch meanwhile (:meth:`PageInputs.batches`).
    """
    todo = [s for s in shards if overwrite or not store.has_shard(s)]
    n_pages = sum(store.shard_range(s)[1] - store.shard_range(s)[0] for s in todo)
    stats = {"shards_encoded": len(todo), "shards_reused": len(shards) - len(todo), "pages_encoded": 0, "encode_s": 0.0}
    if not todo:
        return stats
    bar = tqdm(total=n_pages, desc="encode pages", unit="page", disable=not progress)
    for shard in todo:
        tick = time.perf_counter()
        start, stop = store.shard_range(shard)
        vectors: list[np.ndarray | None] = []
        bad: list[dict] = []
        dim = None
        for batch, batch_bad in inputs.batches(start, stop, batch_size, decode_workers):
            bad += batch_bad
            good = [x for x in batch if x is not None]
            encoded = iter(encode(good) if good else [])
            for item in batch:
                if item is None:
                    vectors.append(None)
                    continue
                array = np.asarray(next(encoded), dtype=np.float32)
                if array.ndim != 2 or not np.isfinite(array).all():
                    raise ValueError(
                        f"the encoder returned {'non-finite values' if array.ndim == 2 else f'shape {array.shape}'} "
                        f"for page {inputs.page_ids[start + len(vectors)]}: expected finite (n_tokens, dim)"
                    )
                dim = array.shape[1]
                vectors.append(array)
            bar.update(len(batch))
        dim = dim or 1
        vectors = [v if v is not None else np.zeros((0, dim), np.float32) for v in vectors]
        elapsed = time.perf_counter() - tick
        meta = {"first_page": start, "bad_pages": bad, "encode_s": round(elapsed, 3)}
        final = store.shard_dir(shard)
        if overwrite and final.exists():
            shutil.rmtree(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(final, lambda d: write_ragged(d, vectors, store.dtype, meta))
        stats["pages_encoded"] += stop - start
        stats["encode_s"] += elapsed
    bar.close()
    return stats


def finish_if_complete(store: PageEmbeddingStore, description: dict) -> None:
    """Mark the store done (``artifact.json``) once every shard exists."""
    if not store.complete and not store.missing_shards():
        atomic_write_json({"kind": "page-embeddings", "key": store.directory.name, "description": description},
                          store.directory / DONE_FILE)
