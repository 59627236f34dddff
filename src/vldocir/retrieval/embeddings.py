"""The embedding store: page embeddings in fixed-size shards, query embeddings beside them.

Layout of one page-embedding artifact (``<cache>/page-embeddings/<key>/``)::

    store.json            what the key covers, page count, shard size, storage dtype, the
                          blake2b of page_ids.json
    page_ids.json         the page order (the benchmark's pages sorted by page_id)
    shards/00000/         pages [0, shard_size): vectors.npy (n_tokens, dim) 16-bit,
                          offsets.npy (n_pages + 1,) int64, shard.json (bad pages, timings,
                          integrity facts)
    shards/00001/ ...
    artifact.json         written once every shard exists: the artifact is complete

Each shard is written into a hidden staging directory and renamed into place, so a shard either
exists whole or not at all. Encoding resumes at the missing shards; separate processes (a SLURM
job array) can each encode their own subset of shards into the same directory. Vectors are
memory-mapped on read, so searching a 76 GB store never loads it whole.

Integrity. ``shard.json`` records, when the shard is written, each file's byte size and sha256,
n_items, n_tokens, dim and ``finite: true`` (every value was checked to be neither NaN nor Inf).
:func:`verify_ragged` checks a shard against it at two levels:

- cheap (every open): shard.json holds every one of those facts (a shard without them is damaged),
  file sizes, the ``.npy`` headers (shape, dtype, bytes promised), the offsets (start at 0, never
  decrease, end at n_tokens). A few small reads, whatever the shard's size.
- full: also the sha256 of both files (all bytes read once, ~1.5 GB/s on a core with SHA
  extensions). Query-embedding and document-context artifacts, which are small, are verified in
  full on every read; page shards are verified in full as the search streams them, each in a
  worker thread while the previous shard is searched (``EmbeddingRetriever(verify="cheap")`` skips
  it). The search also checks every block it upcasts for NaN/Inf, whatever the level.

Placement. Each shard's ``shard.json`` also records its ``first_page`` and the store it belongs
to; :meth:`PageEmbeddingStore.check_shard` checks both, and the page count, against the shard's
place (a shard copied over another, or from another store, is damaged). ``page_ids.json`` is checked
against the benchmark's page order whenever the store is opened (:func:`open_page_store`): the key
covers the benchmark, so the order is known, and a damaged map (or ``store.json``) is written anew.

A damaged shard is reported by path and dropped (the store's ``artifact.json`` first), so the next
encode writes it anew and keeps every good shard: :meth:`PageEmbeddingStore.repair`.
The same query-embedding and document-context files are written by :func:`write_ragged`, or piece
by piece by :class:`RaggedWriter` (document-context vectors, which can outgrow memory).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
from tqdm.auto import tqdm

from vldocir.cache import (
    DIGEST,
    DONE_FILE,
    ArtifactCache,
    CorruptArtifactError,
    read_json,
    remove_stale_staging,
    staging_path,
)
from vldocir.data.benchmark import Benchmark, table_location
from vldocir.errors import ConfigError, VldocirError
from vldocir.io import atomic_write_json, file_digest, naming_path
from vldocir.leases import Leases
from vldocir.retrieval.vectors import RaggedVectors

log = logging.getLogger(__name__)

STORE_FILE = "store.json"
PAGE_IDS_FILE = "page_ids.json"
SHARD_FILE = "shard.json"
STORAGE_DTYPES = ("float16", "bfloat16")
RAGGED_FILES = ("vectors.npy", "offsets.npy")
CHECKSUM = "sha256"  # with SHA extensions (x86 since ~2017, ARMv8) faster than blake2b


class BadPagesError(VldocirError, RuntimeError):
    """Pages whose input could not be read; the encoded shards are kept."""

    def __init__(self, bad: Sequence[dict], store: Path):
        self.bad = list(bad)
        listing = "; ".join(f"{b['page_id']} ({b['error']})" for b in self.bad[:5])  # one line; all are in self.bad
        more = f"; and {len(self.bad) - 5} more" if len(self.bad) > 5 else ""
        super().__init__(
            f"{len(self.bad)} page(s) could not be decoded, stopping before search: {listing}{more}. "
            f"The other pages' embeddings are kept in {store}. Fix the images (the benchmark's "
            "fingerprint then changes and they are encoded anew), or rerun with "
            "retriever.model.on_bad_page=skip to leave them out (recorded in the manifest)."
        )


def to_storage(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 -> 16-bit storage: float16, or bfloat16 bits kept in uint16 (round to nearest even)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):  # |x| > 65504 becomes Inf: write_ragged reports it, naming the page
            return vectors.astype(np.float16)
    import torch

    return torch.from_numpy(vectors).to(torch.bfloat16).view(torch.uint16).numpy()


def _nonfinite_row(vectors: np.ndarray, bfloat16: bool, step: int = 1 << 16) -> int | None:
    """The first row of ``vectors`` (n_tokens, dim) holding NaN or Inf, or ``None``.

    Streamed ``step`` rows at a time, so a memory-mapped shard is never loaded whole. bfloat16 is
    stored as uint16 bits: a value is non-finite exactly when its 8 exponent bits are all ones.
    """
    for start in range(0, len(vectors), step):
        chunk = np.asarray(vectors[start : start + step])
        bad = (chunk & 0x7F80) == 0x7F80 if bfloat16 else ~np.isfinite(chunk)
        rows = np.flatnonzero(bad.any(axis=1))
        if len(rows):
            return start + int(rows[0])
    return None


def write_ragged(
    directory: Path, items: Sequence[np.ndarray], dtype: str, extra: dict, names: Sequence[str] | None = None
) -> dict:
    """Write ``items`` (each (n_i, dim) fp32) as vectors.npy + offsets.npy + shard.json; returns shard.json.

    The values are checked finite after the 16-bit conversion (float16 overflows to Inf beyond
    65504); a failure names the item (``names[i]`` when given) and writes no vectors. shard.json
    records the integrity facts :func:`verify_ragged` checks later. All at once; see
    :class:`RaggedWriter` for the same files written piece by piece.
    """
    stored = _checked_storage(items, dtype, names)  # before any file exists
    lengths = np.array([len(x) for x in items], dtype=np.int64)
    writer = RaggedWriter(directory, lengths, stored.shape[1], dtype)
    writer._write_stored(0, len(items), stored)
    return writer.finish(extra)


def _checked_storage(
    items: Sequence[np.ndarray],
    dtype: str,
    names: Sequence[str] | None = None,
    first_item: int = 0,
    dim: int | None = None,
) -> np.ndarray:
    """``items`` (each (n_i, dim) fp32) packed and converted to ``dtype``'s storage, (sum n_i, dim);
    raises ValueError naming the first item that holds NaN or Inf after the conversion."""
    packed = RaggedVectors.from_list(items)
    vectors = packed.vectors if len(packed.vectors) or dim is None else np.zeros((0, dim), np.float32)
    stored = np.ascontiguousarray(to_storage(vectors, dtype))
    row = _nonfinite_row(stored, dtype == "bfloat16")
    if row is not None:
        item = int(np.searchsorted(packed.offsets, row, side="right")) - 1
        label = names[item] if names is not None else f"item {first_item + item}"
        raise ValueError(
            f"{label}: non-finite values after conversion to {dtype} (float16 overflows beyond "
            "+-65504); nothing was written"
        )
    return stored


class RaggedWriter:
    """The files of :func:`write_ragged` written a block of items at a time, in any order.

    The item lengths are known up front: ``offsets.npy`` is written at once and ``vectors.npy`` is
    preallocated at its final size (a sparse file, header as ``np.save`` writes it). :meth:`write`
    puts items in their rows with plain file writes (rows written through a memory map would stay
    in the writer's resident memory until unmapped); :meth:`finish` checksums both files and
    writes ``shard.json``, so the result is byte for byte what :func:`write_ragged` writes.

    A directory that already holds the same layout (same offsets, same vectors.npy header) is kept
    as it is (``resumed``): a build killed midway continues where it stopped. Which blocks were
    finished is the caller's record; :meth:`digest` reads a block back to check it.

    Args:
        directory: an existing directory.
        lengths: (n_items,) int64, the rows of each item.
        dim: the vectors' dimension.
        dtype: storage dtype, ``float16`` or ``bfloat16`` (stored as uint16 bits).
    """

    def __init__(self, directory: Path, lengths: np.ndarray, dim: int, dtype: str):
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"storage dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")
        self.directory, self.dim, self.dtype = Path(directory), int(dim), dtype
        self.offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.stored = np.dtype(np.uint16 if dtype == "bfloat16" else np.float16)
        self.path = self.directory / "vectors.npy"
        shape = (int(self.offsets[-1]), self.dim)
        data_bytes = shape[0] * shape[1] * self.stored.itemsize
        self.resumed = self._holds(shape)
        if not self.resumed:
            (self.directory / SHARD_FILE).unlink(missing_ok=True)
            np.save(self.directory / "offsets.npy", self.offsets)
            header = {"descr": np.lib.format.dtype_to_descr(self.stored), "fortran_order": False, "shape": shape}
            with open(self.path, "wb") as handle:
                np.lib.format.write_array_header_1_0(handle, header)
                handle.truncate(handle.tell() + data_bytes)
        self.data_start = self.path.stat().st_size - data_bytes

    def _holds(self, shape: tuple[int, int]) -> bool:
        """Whether the directory already holds this layout (a build being resumed)."""
        try:
            found = _npy_header(self.path, None)
            offsets = np.load(self.directory / "offsets.npy")
        except (CorruptArtifactError, OSError, ValueError):
            return False
        return found == (shape, self.stored) and np.array_equal(offsets, self.offsets)

    def _span(self, first_item: int, stop_item: int) -> tuple[int, int]:
        """(byte position in vectors.npy, byte count) of items ``first_item:stop_item``."""
        row_bytes = self.dim * self.stored.itemsize
        first, stop = int(self.offsets[first_item]), int(self.offsets[stop_item])
        return self.data_start + first * row_bytes, (stop - first) * row_bytes

    def write(self, first_item: int, items: Sequence[np.ndarray], names: Sequence[str] | None = None) -> str:
        """Write ``items`` (each (n_i, dim) fp32) as items ``first_item, first_item + 1, ...``.

        Each item must have the length given up front. The values are checked finite after the
        16-bit conversion (float16 overflows to Inf beyond 65504); a failure names the item
        (``names[i]`` when given) and writes none of them. Returns the sha256 of the rows written.
        """
        stop_item = first_item + len(items)
        expected = np.diff(self.offsets[first_item : stop_item + 1])
        if stop_item > len(self.offsets) - 1 or [len(x) for x in items] != expected.tolist():
            raise ValueError(f"items {first_item}..{stop_item - 1} do not have the lengths given up front")
        if any(x.shape[1:] != (self.dim,) for x in items if len(x)):
            raise ValueError(f"items {first_item}..{stop_item - 1} are not all of dimension {self.dim}")
        return self._write_stored(
            first_item, stop_item, _checked_storage(items, self.dtype, names, first_item, self.dim)
        )

    def _write_stored(self, first_item: int, stop_item: int, stored: np.ndarray) -> str:
        position, size = self._span(first_item, stop_item)
        assert stored.nbytes == size and stored.flags.c_contiguous
        with open(self.path, "r+b") as handle:
            handle.seek(position)
            handle.write(stored.data)
        return hashlib.new(CHECKSUM, stored.data).hexdigest()

    def digest(self, first_item: int, stop_item: int) -> str:
        """The sha256 of the stored rows of items ``first_item:stop_item``, read back from vectors.npy."""
        position, size = self._span(first_item, stop_item)
        digest = hashlib.new(CHECKSUM)
        with open(self.path, "rb") as handle:
            handle.seek(position)
            while size > 0 and (block := handle.read(min(size, 8 << 20))):
                digest.update(block)
                size -= len(block)
        return digest.hexdigest()

    def finish(self, extra: dict) -> dict:
        """Checksum both files and write shard.json (every item must have been written); returns it."""
        files = {
            name: {
                "bytes": (self.directory / name).stat().st_size,
                CHECKSUM: file_digest(self.directory / name, CHECKSUM),
            }
            for name in RAGGED_FILES
        }
        meta = {
            "dtype": self.dtype,
            "n_items": len(self.offsets) - 1,
            "n_tokens": int(self.offsets[-1]),
            "dim": self.dim,
            "finite": True,
            "files": files,
            **extra,
        }
        atomic_write_json(meta, self.directory / SHARD_FILE)
        return meta


def _npy_header(path: Path, recorded: dict | None) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from a .npy file's header, after checking the file holds exactly those bytes
    (``recorded``: its facts in shard.json; ``None`` while a writer checks a file of its own)."""
    if not path.is_file():
        raise CorruptArtifactError(path, "is missing")
    size = path.stat().st_size
    if recorded is not None and size != recorded["bytes"]:
        raise CorruptArtifactError(
            path,
            f"is {size} bytes; {SHARD_FILE} recorded {recorded.get('bytes')} "
            "when it was written (truncated or overwritten)",
        )
    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}[version]
            shape, fortran, dtype = read(handle)
            data_start = handle.tell()
    except (OSError, ValueError, KeyError, SyntaxError) as error:
        raise CorruptArtifactError(path, f"has no readable .npy header ({type(error).__name__}: {error})") from None
    promised = data_start + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if fortran or size != promised:
        raise CorruptArtifactError(
            path,
            f"is {size} bytes; its header describes {promised} ({shape} {dtype}{', Fortran order' if fortran else ''})",
        )
    return shape, dtype


def verify_ragged(directory: Path, full: bool = False) -> dict:
    """Check vectors.npy / offsets.npy against shard.json; returns shard.json's content.

    Cheap checks (always): shard.json readable and holding every integrity fact (a shard without
    them is damaged); each file's size as recorded; the headers' shape and dtype agree with
    shard.json and promise exactly the file's bytes; offsets (n_items + 1,) int64 start at 0, never
    decrease and end at n_tokens. ``full`` also reads every byte: the sha256 of each file against
    shard.json. Raises :class:`CorruptArtifactError` naming the damaged file.
    """
    meta_file = directory / SHARD_FILE
    meta = read_json(meta_file)
    if not isinstance(meta, dict) or not {"dtype", "n_items", "n_tokens", "dim", "files"} <= meta.keys():
        raise CorruptArtifactError(meta_file, "lacks dtype / n_items / n_tokens / dim / files")
    if meta.get("finite") is not True:
        raise CorruptArtifactError(meta_file, "does not record that every value was checked finite")
    recorded = meta["files"]
    for name in RAGGED_FILES:
        facts = recorded.get(name) if isinstance(recorded, dict) else None
        if not isinstance(facts, dict) or not isinstance(facts.get("bytes"), int) or not facts.get(CHECKSUM):
            raise CorruptArtifactError(meta_file, f"records no byte size and {CHECKSUM} of {name}")
    n_items, n_tokens, dim = meta["n_items"], meta["n_tokens"], meta["dim"]
    vectors_file, offsets_file = (directory / name for name in RAGGED_FILES)
    shape, dtype = _npy_header(vectors_file, recorded["vectors.npy"])
    want = np.dtype(np.uint16 if meta["dtype"] == "bfloat16" else np.float16)
    if dtype != want or len(shape) != 2 or shape[0] != n_tokens or shape[1] != dim:
        raise CorruptArtifactError(vectors_file, f"holds {shape} {dtype}; {SHARD_FILE} says ({n_tokens}, {dim}) {want}")
    shape, dtype = _npy_header(offsets_file, recorded["offsets.npy"])
    if dtype != np.int64 or shape != (n_items + 1,):
        raise CorruptArtifactError(offsets_file, f"holds {shape} {dtype}; {SHARD_FILE} says ({n_items + 1},) int64")
    offsets = np.load(offsets_file)
    if offsets[0] != 0 or offsets[-1] != n_tokens or (np.diff(offsets) < 0).any():
        raise CorruptArtifactError(
            offsets_file, f"offsets must start at 0, never decrease and end at n_tokens={n_tokens}"
        )
    if full:
        for name in RAGGED_FILES:
            if file_digest(directory / name, CHECKSUM) != recorded[name][CHECKSUM]:
                raise CorruptArtifactError(
                    directory / name,
                    f"its {CHECKSUM} differs from the one recorded "
                    f"in {SHARD_FILE} when it was written: its bytes have changed",
                )
    return meta


def _open_ragged(directory: Path, meta: dict, first_index: int) -> RaggedVectors:
    vectors = np.load(directory / "vectors.npy", mmap_mode="r")
    offsets = np.load(directory / "offsets.npy")
    return RaggedVectors(vectors, offsets, meta["dtype"] == "bfloat16", first_index, source=str(directory))


def read_ragged(directory: Path, first_index: int = 0, full: bool = False) -> RaggedVectors:
    """The vectors of a directory written by :func:`write_ragged`, memory-mapped, after :func:`verify_ragged`."""
    return _open_ragged(directory, verify_ragged(directory, full), first_index)


def _write_atomically(final: Path, fill: Callable[[Path], None]) -> None:
    """Fill a staging directory and rename it to ``final`` (if another writer got there first, keep theirs)."""
    staging = staging_path(final)
    staging.mkdir(parents=True)
    try:
        with naming_path(final):  # numpy's short write ("60053 requested and 2016 written") names no file
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
                for page_id, future in zip(ids[a:b], current, strict=True):
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
    ids: list[str] | None = field(default=None, repr=False)
    """The page order, once :func:`open_page_store` has checked it against the benchmark."""

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

    def shards(self, full: bool = False) -> Iterator[RaggedVectors]:
        """Every shard in order, memory-mapped, each verified (:func:`verify_ragged`) before it is yielded.

        Shard ``i + 1`` is verified in a worker thread while the caller works on shard ``i``
        (hashlib and numpy release the GIL), so with ``full`` the checksums mostly overlap the
        search instead of adding to it. A damaged shard raises :class:`CorruptArtifactError`.
        """
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            check = lambda s: pool.submit(self.check_shard, s, full)  # noqa: E731
            pending = check(0)
            for shard in range(self.n_shards):
                meta = pending.result()
                if shard + 1 < self.n_shards:
                    pending = check(shard + 1)
                yield _open_ragged(self.shard_dir(shard), meta, self.shard_range(shard)[0])

    def shard_of(self, path: Path) -> int | None:
        """The number of the shard at ``path`` if it is one of this store's shard directories."""
        path = Path(path)
        return int(path.name) if path.parent == self.directory / "shards" and path.name.isdigit() else None

    def check_shard(self, shard: int, full: bool = False) -> dict:
        """:func:`verify_ragged` of one shard, then its place: ``first_page``, page count and store
        as its ``shard.json`` records them must be this shard's. Returns shard.json's content."""
        meta = read_json(self.shard_dir(shard) / SHARD_FILE)  # its place first: a misplaced shard.json is named
        start, stop = self.shard_range(shard)
        if not isinstance(meta, dict):
            meta = {"first_page": start, "n_items": stop - start}  # verify_ragged names what it lacks
        if meta.get("first_page") != start or meta.get("n_items") != stop - start:
            raise CorruptArtifactError(
                self.shard_dir(shard) / SHARD_FILE,
                f"describes {meta.get('n_items')} pages from page {meta.get('first_page')}; shard {shard} holds "
                f"{stop - start} from page {start} (a shard copied over another?)",
            )
        if meta.get("store", self.directory.name) != self.directory.name:  # recorded since placement checks
            raise CorruptArtifactError(
                self.shard_dir(shard) / SHARD_FILE, f"belongs to page store {meta['store']}, not {self.directory.name}"
            )
        return verify_ragged(self.shard_dir(shard), full)

    def verify(self, full: bool = False) -> dict[int, str]:
        """What is wrong with each damaged shard on disk, by shard number (missing shards are not listed).

        ``full=False`` costs a few small reads per shard; ``full=True`` reads every byte.
        """
        found = {}
        for shard in range(self.n_shards):
            if self.shard_dir(shard).exists():
                try:
                    self.check_shard(shard, full)
                except CorruptArtifactError as error:
                    found[shard] = str(error)
        return found

    def discard_shard(self, shard: int, reason: str) -> None:
        """Drop a damaged shard so that the next encode writes it anew; logs a warning naming it.

        ``artifact.json`` goes first, so that a crash in between still leaves the store
        incomplete. The shard is renamed to a staging name before it is deleted: a crash midway
        leaves debris that :func:`~vldocir.cache.remove_stale_staging` removes, never a half shard.
        """
        path = self.shard_dir(shard)
        log.warning(
            "damaged embedding shard %s (%s): removing it; it is encoded again, other shards are kept", path, reason
        )
        (self.directory / DONE_FILE).unlink(missing_ok=True)
        aside = staging_path(path)
        try:
            path.rename(aside)
        except FileNotFoundError:  # another job dropped it already
            return
        shutil.rmtree(aside, ignore_errors=True)

    def repair(self, full: bool = False) -> dict[int, str]:
        """Verify every shard present and drop the damaged ones (see :meth:`discard_shard`); returns them."""
        found = self.verify(full)
        for shard, reason in found.items():
            self.discard_shard(shard, reason)
        return found

    def shard_meta(self) -> list[dict]:
        return [
            json.loads((self.shard_dir(s) / SHARD_FILE).read_text()) for s in range(self.n_shards) if self.has_shard(s)
        ]

    def bad_pages(self) -> list[dict]:
        return [bad for meta in self.shard_meta() for bad in meta.get("bad_pages", [])]

    def page_ids(self) -> list[str]:
        return self.ids if self.ids is not None else read_json(self.directory / PAGE_IDS_FILE)

    def problems(self, full: bool = True) -> list[str]:
        """What is wrong with the store on disk, without the benchmark (``python -m vldocir.store
        --verify``): store.json, page_ids.json against the digest store.json records, every shard
        present (:meth:`check_shard`), and a store marked complete that lacks shards."""
        try:
            spec = read_json(self.directory / STORE_FILE)
            recorded = spec.get("page_ids") if isinstance(spec, dict) else None
            if recorded is not None and _ids_digest(read_json(self.directory / PAGE_IDS_FILE)) != recorded:
                raise CorruptArtifactError(
                    self.directory / PAGE_IDS_FILE, f"its {DIGEST} differs from the one {STORE_FILE} records"
                )
        except CorruptArtifactError as error:
            return [str(error)]
        found = list(self.verify(full).values())
        if self.complete and self.missing_shards():
            found.append(
                f"{self.directory / DONE_FILE}: marks the store complete, shards {self.missing_shards()} are missing"
            )
        return found


def store_problems(directory: Path, integrity: str = "full") -> list[str]:
    """What is wrong with the page-embedding store at ``directory`` (:meth:`PageEmbeddingStore.problems`;
    ``integrity`` ``cheap`` skips the shards' checksums); a store never finished is no damage."""
    try:
        spec = read_json(directory / STORE_FILE)
        store = PageEmbeddingStore(directory, int(spec["n_pages"]), int(spec["shard_size"]), str(spec["dtype"]))
    except CorruptArtifactError as error:
        return [str(error)]
    except (KeyError, TypeError, ValueError):
        return [f"{directory / STORE_FILE}: lacks n_pages / shard_size / dtype"]
    return store.problems(full=integrity != "cheap")


def _ids_digest(page_ids: list[str]) -> str:
    return hashlib.new(DIGEST, json.dumps(page_ids).encode()).hexdigest()


def open_page_store(
    cache: ArtifactCache, key: str, description: dict, page_ids: list[str], shard_size: int, dtype: str
) -> PageEmbeddingStore:
    """Open (creating if needed) the store for ``key``; checks an existing one was made the same way.

    ``page_ids`` is the benchmark's page order, which the key determines: a ``page_ids.json`` that
    differs, or a ``store.json`` that does not describe this key, is damaged; it is reported in
    one warning naming it and written anew (the shards are then checked against their places).
    Only another shard size is the caller's doing, and refused.
    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"embedding storage dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")
    directory = cache.directory("page-embeddings", key)
    spec = {
        "key": key,
        "n_pages": len(page_ids),
        "shard_size": shard_size,
        "dtype": dtype,
        "description": description,
        "page_ids": _ids_digest(page_ids),
    }
    spec = json.loads(json.dumps(spec, default=str))  # as written, so that it compares with what is read
    spec_file, ids_file = directory / STORE_FILE, directory / PAGE_IDS_FILE
    if not spec_file.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(page_ids, ids_file)
        atomic_write_json(spec, spec_file)
        return PageEmbeddingStore(directory, len(page_ids), shard_size, dtype, page_ids)
    try:
        if read_json(ids_file) != page_ids:
            raise CorruptArtifactError(ids_file, "is not the benchmark's page order")
    except CorruptArtifactError as error:
        log.warning("damaged page-embedding store file, writing it anew: %s", error)
        atomic_write_json(page_ids, ids_file)
    try:
        stored = read_json(spec_file)
        if not isinstance(stored, dict):
            raise CorruptArtifactError(spec_file, "is not a JSON object")
        found = {**stored, "page_ids": stored.get("page_ids", spec["page_ids"])}  # older stores lack it
        if found.get("shard_size") != shard_size and {**found, "shard_size": shard_size} == spec:
            raise ConfigError(
                f"{spec_file}: the store was started with shard_size={found['shard_size']}; this run asks for "
                f"{shard_size}. Shard size must stay the same for one store: keep it, or run with "
                "cache_policy=overwrite."
            )
        if found != spec:
            differ = sorted(k for k in spec.keys() | found.keys() if found.get(k) != spec.get(k))
            raise CorruptArtifactError(spec_file, f"does not describe this store ({', '.join(differ)} differ)")
        if "page_ids" not in stored:
            atomic_write_json(spec, spec_file)
    except CorruptArtifactError as error:
        log.warning("damaged page-embedding store file, writing it anew: %s", error)
        atomic_write_json(spec, spec_file)
    return PageEmbeddingStore(directory, len(page_ids), shard_size, dtype, page_ids)


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
    leases: Leases | None = None,
) -> dict:
    """Encode the given shards (skipping finished ones unless ``overwrite``); returns timing facts.

    A page whose image does not decode gets zero tokens and is listed in its shard's
    ``bad_pages``. ``encode`` maps a batch of inputs to one (n_tokens, dim) array per input;
    ``decode_workers`` threads prepare the next batch meanwhile (:meth:`PageInputs.batches`).
    With ``leases``, each shard is encoded under its claim (:func:`shard_unit`): shards other jobs
    hold are left to them and waited for, taken over if their claim lapses (:meth:`Leases.each`),
    and count as reused.
    """
    todo = [s for s in shards if overwrite or not store.has_shard(s)]
    n_pages = sum(store.shard_range(s)[1] - store.shard_range(s)[0] for s in todo)
    stats = {"shards_encoded": 0, "shards_reused": len(shards), "pages_encoded": 0, "encode_s": 0.0}
    if not todo:
        return stats
    remove_stale_staging(store.directory / "shards")  # debris of killed writers (dead pid, or a day old)
    bar = tqdm(total=n_pages, desc="encode pages", unit="page", disable=not progress)

    def encode_shard(shard: int) -> None:
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
        meta = {"first_page": start, "store": store.directory.name, "bad_pages": bad, "encode_s": round(elapsed, 3)}
        final = store.shard_dir(shard)
        if overwrite and final.exists():
            shutil.rmtree(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        names = inputs.page_ids[start:stop]
        _write_atomically(final, lambda d: write_ragged(d, vectors, store.dtype, meta, names=names))
        stats["pages_encoded"] += stop - start
        stats["encode_s"] += elapsed
        stats["shards_encoded"] += 1
        stats["shards_reused"] -= 1

    if leases is None:
        for shard in todo:
            encode_shard(shard)
    else:
        leases.each(todo, lambda s: shard_unit(store, s), lambda s: not overwrite and store.has_shard(s), encode_shard)
    bar.close()
    return stats


def shard_unit(store: PageEmbeddingStore, shard: int) -> str:
    """The unit of work (:mod:`vldocir.leases`) of encoding one shard of ``store``."""
    return f"page-embeddings/{store.directory.name}/shard-{shard:05d}"


def finish_if_complete(store: PageEmbeddingStore, description: dict) -> None:
    """Mark the store done (``artifact.json``) once every shard exists."""
    if not store.complete and not store.missing_shards():
        atomic_write_json(
            {"kind": "page-embeddings", "key": store.directory.name, "description": description},
            store.directory / DONE_FILE,
        )
