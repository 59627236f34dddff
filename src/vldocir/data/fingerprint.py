"""The benchmark fingerprint: a content hash of the five tables and of the page image files.

Every cache key downstream starts from it, so it must change whenever anything a retriever sees
changes, an image file's bytes included, and it must stay cheap to recompute at paper scale
(388,548 image files). Both parts are therefore memoized outside the benchmark directory (which may
be read-only), in ``$VLDOCIR_CACHE_DIR/fingerprints/`` or else
``${XDG_CACHE_HOME:-~/.cache}/vldocir/fingerprints/``, one Parquet file per benchmark directory:

- the tables' digest, keyed by the table files' (path, size, mtime_ns, inode, device);
- each image file's digest, keyed by its (path, size, mtime_ns, inode, device).

The first fingerprint reads every image byte once; a rerun costs one ``stat`` per file. Like make
and git, this trusts file metadata: a file rewritten with the same size and mtime in the same inode
is not seen. Files modified within :data:`RACY_WINDOW_NS` of being hashed are not memoized (their
mtime may not have ticked yet; git calls them "racily clean"), so they are hashed again next time.
A missing or unreadable memo only costs time (it is rebuilt); it never changes the fingerprint.

The memo also remembers that validation passed (:func:`vldocir.data.benchmark.load_benchmark`), so
that loading an unchanged benchmark again neither validates nor hashes: :class:`BenchmarkFiles`
records the *identity* of everything validation looked at (the table files, the image files and
the directories holding them, each by :data:`file_identity`, plus the rules' own digest) once
validation has passed, and reports a later load whose identity is the same. Any change to a table,
an image file or an image directory (a file added, removed, renamed or replaced by a link changes
its directory's mtime) means "validate again". A memo never turns an invalid benchmark into a valid
one: it is written only after validation passed, and not at all while any of those files is racily
recent (it may have changed during validation).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from vldocir.data.schema import TABLES
from vldocir.data.tables import read_table, sort_canonically, table_files, table_location
from vldocir.io import atomic_write_parquet

log = logging.getLogger(__name__)

MEMO_VERSION = 2
"""Bumped whenever what a memo holds, or how a digest is computed, changes."""

RACY_WINDOW_NS = 2_000_000_000
"""Files modified less than this before being hashed are not memoized (coarse-mtime filesystems)."""

PROGRESS_MIN_FILES = 1000
"""Show a progress bar when at least this many image files must be hashed."""

HASH_THREADS = 8
"""Image files are hashed by a few threads: hashlib and file reads release the GIL, and on network
filesystems the latency of many small reads dominates."""

DIGEST_SIZE = 16
"""blake2b-128 per file: collisions are out of reach, and the memo stays small (16 bytes a file)."""

MISSING = hashlib.blake2b(b"vldocir: image file missing or unreadable", digest_size=DIGEST_SIZE).digest()
"""The digest of an image file that cannot be read (possible only with ``validate=False``)."""

IDENTITY_FIELDS = ("size", "mtime_ns", "ino", "dev")
file_identity = attrgetter("st_size", "st_mtime_ns", "st_ino", "st_dev")
"""The one rule by which the memo recognises an unchanged file (table, image or directory): these
fields of its ``os.stat`` (links followed). ``IDENTITY_FIELDS`` names them, in the memo's columns."""


def memo_dir() -> Path:
    """Where fingerprint memos live: outside the benchmark, which may be read-only or shared."""
    cache = os.environ.get("VLDOCIR_CACHE_DIR")
    if cache:
        return Path(cache).expanduser() / "fingerprints"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg).expanduser() / "vldocir" / "fingerprints"


def memo_path(real_root: Path) -> Path:
    """One memo per benchmark directory, named by a hash of its resolved path."""
    return memo_dir() / f"{hashlib.blake2b(str(real_root).encode(), digest_size=16).hexdigest()}.parquet"


def compute_fingerprint(root: str | Path) -> str:
    """Hash of the five tables' contents (canonical row order and column types, all columns) and of
    the bytes of every page image stored as a file (a page whose image is inline is covered by the
    pages table itself).

    Independent of how the tables were written (row order, row groups, compression, int widths). A
    benchmark without image files has the tables' digest for its fingerprint.
    """
    return BenchmarkFiles(root).fingerprint()


class BenchmarkFiles:
    """One look at a benchmark directory's files through its memo (see the module docstring).

    Made before validation: it loads the memo and stats the table files. :meth:`validated` says
    whether the memo vouches that these very files passed validation; :meth:`fingerprint` computes
    the fingerprint, reading only what changed since the memo was written, and updates the memo,
    recording a validation that has just passed.
    """

    def __init__(self, root: str | Path):
        self.real_root = Path(os.path.realpath(root))
        self.memo = _Memo.load(memo_path(self.real_root), self.real_root)
        self.table_stats = _stat_tables(self.real_root)
        self.tables_known = self.memo is not None and self.memo.table_stats == self.table_stats
        """Whether the memo's tables digest (and the image paths the tables list) are today's."""
        self.from_memo: bool | None = None
        """After :meth:`fingerprint`: True when no table and no image byte had to be read."""
        self._image_stats: np.ndarray | None = None  # taken by validated(), reused by fingerprint()

    def validated(self, rules: str) -> bool:
        """Whether the memo records that validation under ``rules`` (a digest of the validation
        code) passed with exactly these table files, image files and image directories."""
        memo = self.memo
        if not self.tables_known or memo.validated is None:
            return False
        self._image_stats = _stat_paths(self.real_root, memo.paths)
        return memo.validated == self._identity(rules, memo.paths, self._image_stats)

    def fingerprint(self, passed: tuple[str, int] | None = None) -> str:
        """The fingerprint (:func:`compute_fingerprint`). ``passed=(rules, started_ns)``: validation
        under ``rules``, started at ``started_ns`` (``time.time_ns()``), has just passed; the memo
        records it unless a file it covers was modified since (or just before) it started."""
        memo = self.memo
        if self.tables_known:
            tables_digest, paths = memo.tables_digest, memo.paths
        else:
            tables_digest, paths = _hash_tables(self.real_root)
        known_stats = self._image_stats if self.tables_known else None
        stats, digests, memoizable, n_hashed = _image_digests(self.real_root, paths, memo, known_stats)
        self.from_memo = self.tables_known and n_hashed == 0
        racy_tables = any(mtime_ns > time.time_ns() - RACY_WINDOW_NS for _, _, mtime_ns, _, _ in self.table_stats)
        validated = memo.validated if memo is not None else None  # (harmless if stale: it names exact files)
        if passed is not None:
            rules, started_ns = passed
            validated = self._identity(rules, paths, stats, not_after_ns=started_ns - RACY_WINDOW_NS) or validated
        updated = _Memo(
            None if racy_tables else self.table_stats, tables_digest, paths, stats, digests, memoizable, validated
        )
        if memo != updated:
            updated.save(memo_path(self.real_root), self.real_root)
        if not paths:
            return tables_digest
        return hashlib.blake2b(
            b"tables" + bytes.fromhex(tables_digest) + b"images" + digests.tobytes(), digest_size=16
        ).hexdigest()

    def _identity(
        self, rules: str, paths: list[str], image_stats: np.ndarray, not_after_ns: int | None = None
    ) -> str | None:
        """A digest of ``rules`` and of the identity of the table files, the image files
        (``image_stats``, in ``paths`` order) and every directory on the way to an image file.
        With ``not_after_ns``: None when any of them was modified after it, or is missing."""
        dirs = _image_dirs(paths)
        dir_stats = _stat_paths(self.real_root, dirs)
        if not_after_ns is not None:
            mtimes = chain((s[2] for s in self.table_stats), image_stats[:, 1].tolist(), dir_stats[:, 1].tolist())
            missing = (image_stats[:, 0] < 0).any() or (dir_stats[:, 0] < 0).any()
            if missing or any(mtime_ns > not_after_ns for mtime_ns in mtimes):
                return None
        digest = hashlib.blake2b(json.dumps([rules, self.table_stats]).encode(), digest_size=16)
        digest.update(np.ascontiguousarray(image_stats, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(dir_stats, dtype=np.int64).tobytes())
        return digest.hexdigest()


# ----------------------------------------------------------------------------------------------
# The tables
# ----------------------------------------------------------------------------------------------


def _stat_tables(real_root: Path) -> list[tuple]:
    """(relative path, size, mtime_ns, inode, device) of every table file, in a fixed order."""
    stats = []
    for name in TABLES:
        for file in table_files(table_location(real_root, name)):
            st = file.stat()
            stats.append((str(file.relative_to(real_root)), *file_identity(st)))
    return stats


def _hash_tables(real_root: Path) -> tuple[str, list[str]]:
    """The five tables' digest, and the image files the pages reference, in canonical page order.

    Each table is hashed as the Arrow IPC stream of its canonical form (:func:`_ipc_stream`). A
    table file already in canonical row order, as :func:`~vldocir.data.benchmark.write_benchmark`
    writes them, is hashed as a stream (:class:`_SortedTableFile`: the same bytes, never the whole
    table in memory); any other table is read whole and sorted."""
    digest = hashlib.blake2b(digest_size=16)
    paths: list[str] = []
    for name, spec in TABLES.items():
        location = table_location(real_root, name)
        digest.update(name.encode())
        streamed = _SortedTableFile.open(spec, location)
        if streamed is not None:
            attempt = digest.copy()
            try:
                streamed.hash_stream(attempt)
                if name == "pages":
                    paths = streamed.image_files()
                digest = attempt
                continue
            except _READ_ERRORS:  # damaged, or a value its canonical type cannot hold: read_table names it
                pass
        table = sort_canonically(spec, read_table(location))
        if name == "pages":
            paths = _image_files(table)
        digest.update(_ipc_stream(table))
    return digest.hexdigest(), paths


def _ipc_stream(table: pa.Table) -> pa.Buffer:
    """What a table (in canonical row order and types) hashes as: the Arrow IPC stream of its
    columns sorted by name, each combined into one chunk, :data:`IPC_CHUNK_ROWS` rows a batch."""
    table = table.select(sorted(table.column_names)).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=IPC_CHUNK_ROWS)
    return sink.getvalue()


def _image_files(pages: pa.Table | pa.RecordBatch) -> list[str]:
    """Paths of the images read from files: those with a path and no inline bytes (as decoders and
    the viewer do, inline bytes win over the path)."""
    image = pages.column("image")
    if isinstance(image, pa.ChunkedArray):
        image = image.combine_chunks()
    bytes_, path = image.flatten()  # flatten applies struct nulls
    has_bytes = pc.fill_null(pc.greater(pc.binary_length(bytes_), 0), False)
    has_path = pc.fill_null(pc.greater(pc.utf8_length(path), 0), False)
    return path.filter(pc.and_(pc.invert(has_bytes), has_path)).to_pylist()


# ----------------------------------------------------------------------------------------------
# A sorted table file, hashed as a stream
# ----------------------------------------------------------------------------------------------
#
# The IPC stream of a table of 1..IPC_CHUNK_ROWS rows is: the schema message; one record batch
# message, its metadata (the row count, per array node its length and null count, per buffer its
# offset and length in the body, the body's length) then its body (every buffer in turn, padded with
# zeros to 8 bytes, node by node depth first, column by column); the end-of-stream marker. The
# metadata's layout depends on the schema alone, so pyarrow writes it for a one-row table of the same
# schema and the numbers are set into it (_Skeleton); the body is concatenated here, each buffer in one
# pass over the file's row batches. The buffers are those pyarrow's writer emits for a combined
# column: a validity bitmap only where the node has nulls, offsets from 0, the values or bytes they
# span. tests/data/test_fingerprint_stream.py holds this to _ipc_stream on every column type the
# benchmarks use, with nulls, empty lists and batch boundaries anywhere.

IPC_CHUNK_ROWS = 1 << 20
"""Rows per record batch of the IPC stream a table is hashed as: part of the fingerprint's
definition. (A larger table makes several batches and is hashed from memory.)"""

STREAM_BATCH_ROWS = 4096
"""Rows read at a time while a table file is hashed as a stream."""

_READ_ERRORS = (pa.ArrowException, OSError)

_VALIDITY, _BITS, _FIXED, _OFFSETS, _DATA = "validity", "bits", "fixed", "offsets", "data"


class _Unsupported(Exception):
    """A column type the stream does not reproduce: the table is hashed from memory. So is a table
    with a boolean column that may hold nulls: the in-memory stream hashes the value bits under its
    nulls too, which differ between one Parquet read and another."""


@dataclass(frozen=True)
class _Node:
    """One array node of a column, in IPC order. ``read``: the column path read for it (struct
    fields alone, a list whole), ``read_type`` the canonical type there; ``steps`` lead from the
    column to the node (``("field", name)``, ``("list", None)``, ``("fixed_size_list", None)``)."""

    steps: tuple
    type: pa.DataType
    read: tuple[str, ...]
    read_type: pa.DataType
    buffers: tuple[str, ...]


def _column_nodes(field: pa.Field) -> list[_Node]:
    """A column's array nodes, depth first. A struct's own validity is read through its first plain
    field (any field's definition levels carry it), so a struct of inline image bytes and a path is
    read bytes-free but for the bytes' own buffers."""
    nodes: list[_Node] = []

    def visit(steps: tuple, type_: pa.DataType, read: tuple[str, ...], read_type: pa.DataType, alone: bool) -> None:
        validity = () if pa.types.is_null(type_) else (_VALIDITY,)
        if pa.types.is_struct(type_):
            children = [type_.field(i) for i in range(type_.num_fields)]
            plain = [c for c in children if alone and not pa.types.is_nested(c.type)]
            own = (*read, plain[0].name) if plain else read
            nodes.append(_Node(steps, type_, own, plain[0].type if plain else read_type, validity))
            for child in children:
                child_read = ((*read, child.name), child.type) if alone else (read, read_type)
                visit((*steps, ("field", child.name)), child.type, *child_read, alone)
            return
        if pa.types.is_list(type_) or pa.types.is_large_list(type_):
            buffers, kind = (*validity, _OFFSETS), "list"
        elif pa.types.is_fixed_size_list(type_):
            buffers, kind = validity, "fixed_size_list"
        elif any(is_(type_) for is_ in _VARIABLE_BINARY):
            buffers, kind = (*validity, _OFFSETS, _DATA), None
        elif pa.types.is_boolean(type_) and alone:  # (read alone: its Parquet statistics tell its nulls)
            buffers, kind = (*validity, _BITS), None
        elif pa.types.is_null(type_):
            buffers, kind = (), None
        elif pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_temporal(type_):
            buffers, kind = (*validity, _FIXED), None
        else:
            raise _Unsupported(str(type_))
        nodes.append(_Node(steps, type_, read, read_type, buffers))
        if kind is not None:
            visit((*steps, (kind, None)), type_.value_type, read, read_type, False)

    visit((), field.type, (field.name,), field.type, True)
    return nodes


def _descend(array: pa.Array, steps: tuple) -> pa.Array:
    """The node ``steps`` below ``array``, sliced to the rows of ``array`` (as the IPC writer slices)."""
    for kind, name in steps:
        if kind == "field":
            array = array.field(name)  # (sliced to the struct's rows; its own validity, not the parent's)
        elif kind == "list":
            offsets = _offsets(array)
            array = array.values.slice(offsets[0], offsets[-1] - offsets[0])
        else:
            size = array.type.list_size
            array = array.values.slice(array.offset * size, len(array) * size)
    return array


_VARIABLE_BINARY = (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary)


def _offset_width(type_: pa.DataType) -> int:
    large = pa.types.is_large_string(type_) or pa.types.is_large_binary(type_) or pa.types.is_large_list(type_)
    return 8 if large else 4


def _offsets(array: pa.Array) -> np.ndarray:
    """A string, binary or list array's len + 1 offsets (into its unsliced data or values), int64."""
    buffer = array.buffers()[1]
    if buffer is None:  # (an empty array may have none)
        return np.zeros(1, dtype=np.int64)
    dtype = f"<i{_offset_width(array.type)}"
    offsets = np.frombuffer(buffer, dtype=dtype)[array.offset : array.offset + len(array) + 1]
    return offsets.astype(np.int64)


def _bits(array: pa.Array, kind: str) -> np.ndarray:
    """The validity, or a boolean array's values, one bool per row."""
    if kind == _VALIDITY:
        return np.asarray(array.is_valid(), dtype=bool)
    if not len(array):
        return np.zeros(0, dtype=bool)
    packed = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little")[array.offset : array.offset + len(array)].astype(bool)


def _never_null(parquet: pq.ParquetFile, paths: list[str]) -> bool:
    """Whether the Parquet statistics show no null in these columns (dotted paths)."""
    metadata = parquet.metadata
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for i in range(row_group.num_columns):
            column = row_group.column(i)
            if column.path_in_schema in paths:
                stats = column.statistics
                if stats is None or not stats.has_null_count or stats.null_count:
                    return False
    return True


def _buffer_size(node: _Node, kind: str, length: int, nulls: int, data: int) -> int:
    """The length of one buffer of a combined node, as the IPC writer records it."""
    if kind == _VALIDITY:
        return -(-length // 8) if nulls else 0  # (no nulls: an empty placeholder)
    if kind == _BITS:
        return -(-length // 8)
    if kind == _FIXED:
        return length * (node.type.bit_width // 8)
    if kind == _OFFSETS:
        return _offset_width(node.type) * (length + 1)
    return data


class _Padded:
    """Feeds one body buffer to the digest, then its zero padding to 8 bytes."""

    def __init__(self, digest):
        self.digest, self.size = digest, 0

    def write(self, data) -> None:
        self.digest.update(data)
        self.size += len(data)

    def close(self) -> None:
        self.digest.update(bytes(-self.size % 8))


class _SortedTableFile:
    """A single-file table of 1..:data:`IPC_CHUNK_ROWS` rows, stored in canonical order with no
    two rows sharing a key (so the file's order is the only canonical one), of column types the
    stream reproduces. :meth:`hash_stream` feeds a digest the bytes of :func:`_ipc_stream` of the
    canonical table, reading :data:`STREAM_BATCH_ROWS` rows of one column at a time."""

    def __init__(self, parquet: pq.ParquetFile, schema: pa.Schema, batch_rows: int):
        self.parquet, self.schema, self.batch_rows = parquet, schema, batch_rows
        self.n_rows = parquet.metadata.num_rows

    @classmethod
    def open(cls, spec, location: Path, batch_rows: int = STREAM_BATCH_ROWS) -> "_SortedTableFile | None":
        """The table at ``location`` if it can be streamed, else None."""
        if not location.is_file():
            return None  # (a folder of shards: read whole)
        try:
            parquet = pq.ParquetFile(location)
            if not 0 < parquet.metadata.num_rows <= IPC_CHUNK_ROWS:
                return None
            fields = []
            for field in parquet.schema_arrow:  # the canonical types, as read_table casts them
                index = spec.schema.get_field_index(field.name)
                fields.append(spec.schema.field(index) if index >= 0 else field)
            schema = pa.schema(sorted(fields, key=lambda f: f.name))
            booleans = [".".join(n.read) for f in schema for n in _column_nodes(f) if _BITS in n.buffers]
            if booleans and not _never_null(parquet, booleans):
                return None
            keys = parquet.read(columns=list(spec.key), use_threads=False)
            if not strictly_sorted([keys.column(k).cast(spec.schema.field(k).type) for k in spec.key]):
                return None
        except (_Unsupported, *_READ_ERRORS):
            return None
        return cls(parquet, schema, batch_rows)

    def _arrays(self, node: _Node):
        """The node's array per row batch, in its canonical type (a struct read through one field:
        its validity and length only)."""
        depth = len(node.read) - 1  # struct fields below the column that the read selects
        for batch in self.parquet.iter_batches(
            batch_size=self.batch_rows, columns=[".".join(node.read)], use_threads=False
        ):
            array = batch.column(0)
            if depth > len(node.steps):
                yield _descend(array, node.steps)
                continue
            array = _descend(array, node.steps[:depth]).cast(node.read_type)
            yield _descend(array, node.steps[depth:])

    def hash_stream(self, digest) -> None:
        nodes = [node for field in self.schema for node in _column_nodes(field)]
        stats = []  # per node: length, null count, bytes of its data
        for node in nodes:
            length = nulls = data = 0
            for array in self._arrays(node):
                length, nulls = length + len(array), nulls + array.null_count
                if _DATA in node.buffers:
                    offsets = _offsets(array)
                    data += int(offsets[-1] - offsets[0])
            if not node.steps and length != self.n_rows:
                raise pa.ArrowInvalid(f"column {node.read[0]} has {length} rows, the file {self.n_rows}")
            stats.append((length, nulls, data))
        buffers, body = [], 0
        for node, (length, nulls, data) in zip(nodes, stats):
            for kind in node.buffers:
                size = _buffer_size(node, kind, length, nulls, data)
                buffers.append((body, size))
                body += size + (-size % 8)
        skeleton = _Skeleton(self._one_row_stream())
        digest.update(skeleton.prefix)
        digest.update(skeleton.batch_metadata(self.n_rows, [(n, k) for n, k, _ in stats], buffers, body))
        for node, (_, nulls, _) in zip(nodes, stats):
            for kind in node.buffers:
                self._hash_buffer(digest, node, kind, nulls)
        digest.update(skeleton.suffix)

    def _hash_buffer(self, digest, node: _Node, kind: str, nulls: int) -> None:
        out = _Padded(digest)
        if kind == _VALIDITY and not nulls:
            pass
        elif kind in (_VALIDITY, _BITS):
            pending = np.zeros(0, dtype=bool)
            for array in self._arrays(node):
                pending = np.concatenate([pending, _bits(array, kind)])
                whole = len(pending) // 8 * 8
                out.write(np.packbits(pending[:whole], bitorder="little").tobytes())
                pending = pending[whole:]
            if len(pending):
                out.write(np.packbits(pending, bitorder="little").tobytes())
        elif kind == _OFFSETS:
            total, width = 0, _offset_width(node.type)
            dtype = f"<i{width}"
            for array in self._arrays(node):
                offsets = _offsets(array)
                out.write((offsets[:-1] - offsets[0] + total).astype(dtype).tobytes())
                total += int(offsets[-1] - offsets[0])
            if total >= 1 << (8 * width - 1):
                raise pa.ArrowInvalid("a column's data exceeds its offsets' range")
            out.write(np.array([total], dtype=dtype).tobytes())
        elif kind == _DATA:
            for array in self._arrays(node):
                offsets = _offsets(array)
                if offsets[-1] > offsets[0]:
                    out.write(memoryview(array.buffers()[2])[offsets[0] : offsets[-1]])
        else:  # fixed-width values
            width = node.type.bit_width // 8
            for array in self._arrays(node):
                if not len(array):
                    continue
                start = array.offset * width
                values = np.frombuffer(array.buffers()[1], dtype=np.uint8)[start : start + len(array) * width]
                if array.null_count:
                    # Under a null lies whatever the Parquet decoder left; the sort's take writes zeros there.
                    values = values.reshape(len(array), width).copy()
                    values[np.asarray(array.is_null(), dtype=bool)] = 0
                out.write(values.tobytes())
        out.close()

    def _one_row_stream(self) -> bytes:
        """:func:`_ipc_stream` of the table's first row: the messages whose layout the table shares."""
        first = next(self.parquet.iter_batches(batch_size=1, use_threads=False)).slice(0, 1)
        table = pa.Table.from_batches([first])
        return _ipc_stream(table.cast(pa.schema([self.schema.field(name) for name in table.column_names])))

    def image_files(self) -> list[str]:
        paths: list[str] = []
        image = self.schema.field("image")
        for batch in self.parquet.iter_batches(batch_size=self.batch_rows, columns=["image"], use_threads=False):
            paths += _image_files(pa.table({"image": batch.column(0).cast(image.type)}))
        return paths


def strictly_sorted(keys: list[pa.Array]) -> bool:
    """Whether rows (given by their key columns) are in strictly increasing order, no key null:
    then sorting by key (what the in-memory path does) leaves them where they are."""
    if any(k.null_count for k in keys):
        return False
    if len(keys[0]) < 2:
        return True
    before, after = [k.slice(0, len(k) - 1) for k in keys], [k.slice(1) for k in keys]
    less = np.zeros(len(before[0]), dtype=bool)
    equal = np.ones(len(before[0]), dtype=bool)
    for a, b in zip(before, after):
        less |= equal & np.asarray(pc.less(a, b), dtype=bool)
        equal &= np.asarray(pc.equal(a, b), dtype=bool)
    return bool(less.all())


class _Skeleton:
    """The IPC stream of a one-row table, split where a stream of any table of that schema differs:
    the schema message (``prefix``), the record batch's metadata, the end-of-stream marker
    (``suffix``). :meth:`batch_metadata` is that metadata with another table's numbers set in."""

    def __init__(self, stream: bytes):
        stream = bytes(stream)
        schema_end = 8 + int.from_bytes(stream[4:8], "little")
        metadata_size = int.from_bytes(stream[schema_end + 4 : schema_end + 8], "little")
        self.prefix = stream[:schema_end]
        self.header = stream[schema_end : schema_end + 8]
        self.metadata = stream[schema_end + 8 : schema_end + 8 + metadata_size]
        self.suffix = stream[-8:]
        if stream[:4] != b"\xff\xff\xff\xff" or self.suffix != b"\xff\xff\xff\xff\x00\x00\x00\x00":
            raise pa.ArrowInvalid("unexpected IPC stream framing")

    def batch_metadata(self, n_rows: int, nodes: list[tuple[int, int]], buffers: list[tuple[int, int]], body: int):
        """The record batch message's header and flatbuffer metadata for these numbers."""
        meta = bytearray(self.metadata)

        def u32(at: int) -> int:
            return struct.unpack_from("<I", meta, at)[0]

        def fields(table: int) -> list[int]:
            vtable = table - struct.unpack_from("<i", meta, table)[0]
            n_fields = (struct.unpack_from("<H", meta, vtable)[0] - 4) // 2
            return [struct.unpack_from("<H", meta, vtable + 4 + 2 * i)[0] for i in range(n_fields)]

        message = u32(0)
        # Message: version, header_type, header, bodyLength; RecordBatch: length, nodes, buffers.
        version, header_type, header, body_length = (fields(message) + [0] * 4)[:4]
        if not (header_type and header and body_length) or meta[message + header_type] != 3:
            raise pa.ArrowInvalid("the one-row stream's batch metadata lacks a field")
        batch = message + header + u32(message + header)
        length, nodes_at, buffers_at = (fields(batch) + [0] * 3)[:3]
        if not (length and nodes_at and buffers_at):
            raise pa.ArrowInvalid("the one-row stream's batch metadata lacks a field")
        struct.pack_into("<q", meta, message + body_length, body)
        struct.pack_into("<q", meta, batch + length, n_rows)
        for at, values in ((batch + nodes_at, nodes), (batch + buffers_at, buffers)):
            vector = at + u32(at)
            if u32(vector) != len(values):
                raise pa.ArrowInvalid("the one-row stream has another number of nodes or buffers")
            for i, pair in enumerate(values):
                struct.pack_into("<qq", meta, vector + 4 + 16 * i, *pair)
        return self.header + bytes(meta)


# ----------------------------------------------------------------------------------------------
# The image files
# ----------------------------------------------------------------------------------------------


def _stat_paths(real_root: Path, paths: list[str]) -> np.ndarray:
    """:data:`file_identity` per path (relative to the root), -1 where it cannot be stat'ed: the only
    per-file cost of a rerun, so kept to a comprehension around ``os.stat``. (n, 4) int64."""
    prefix = str(real_root) + os.sep
    stat, fields = os.stat, file_identity
    try:
        rows = [fields(stat(prefix + relative)) for relative in paths]
    except (OSError, ValueError):  # some file is missing (validate=False): one at a time
        rows = [_stat_or_missing(prefix + relative) for relative in paths]
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=len(paths) * len(IDENTITY_FIELDS))
    return flat.reshape(len(paths), len(IDENTITY_FIELDS))


def _stat_or_missing(path: str) -> tuple[int, int, int, int]:
    try:
        return file_identity(os.stat(path))
    except (OSError, ValueError):
        return -1, -1, -1, -1


def _image_dirs(paths: list[str]) -> list[str]:
    """Every directory on the way to an image file, the root (``""``) included, sorted; none when
    there is no image file. A file added, removed, renamed or replaced by a link changes its
    directory's mtime."""
    dirs: set[str] = set()
    for head in {relative.rpartition("/")[0] for relative in paths}:
        while head not in dirs:
            dirs.add(head)
            if not head:
                break
            head = head.rpartition("/")[0]
    return sorted(dirs)


def _image_digests(
    real_root: Path, paths: list[str], memo: "_Memo | None", stats: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per image file: its stat (``stats`` if already taken), its digest (from the memo where the
    stat matches, else hashed now) as an (n, 16) array, and whether the digest may be memoized;
    and how many files were hashed."""
    stats = _stat_paths(real_root, paths) if stats is None else stats.copy()
    digests = np.zeros((len(paths), DIGEST_SIZE), dtype=np.uint8)
    memoizable = np.zeros(len(paths), dtype=bool)
    if memo is not None and len(memo.paths):
        hits, rows = _memo_matches(paths, stats, memo)
        digests[hits] = memo.digests[rows]
        memoizable[hits] = True
    todo = np.flatnonzero(~memoizable)
    if len(todo):
        started = time.time_ns()
        for i, (digest, st) in zip(todo.tolist(), _hash_files(real_root, [paths[i] for i in todo])):
            digests[i] = np.frombuffer(digest, dtype=np.uint8)
            # Missing, or modified too recently to trust its mtime: hash it again next time.
            if st is not None and st[1] <= started - RACY_WINDOW_NS:
                memoizable[i] = True
                stats[i] = st  # the identity of the bytes actually read (fstat of the open file)
    return stats, digests, memoizable, len(todo)


def _memo_matches(paths: list[str], stats: np.ndarray, memo: "_Memo") -> tuple[np.ndarray, np.ndarray]:
    """Indices (in ``paths``, in the memo) of files whose memoized stat equals today's."""
    if memo.paths == paths:
        aligned = np.arange(len(paths))
    else:  # the tables changed: look files up by path
        where = {p: j for j, p in enumerate(memo.paths)}
        aligned = np.array([where.get(p, -1) for p in paths], dtype=np.int64)
    known = np.flatnonzero(aligned >= 0)
    rows = aligned[known]
    same = (memo.stats[rows] == stats[known]).all(axis=1) & memo.memoizable[rows] & (stats[known, 0] >= 0)
    return known[same], rows[same]


def _hash_file(path: str) -> tuple[bytes, tuple[int, int, int, int]]:
    """blake2b-128 of a file's bytes, and the (size, mtime_ns, inode, device) of what was read."""
    digest = hashlib.blake2b(digest_size=DIGEST_SIZE)
    with open(path, "rb", buffering=0) as file:
        st = os.fstat(file.fileno())
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.digest(), file_identity(st)


def _hash_batch(prefix: str, paths: list[str]) -> list[tuple[bytes, tuple | None]]:
    out = []
    for relative in paths:
        try:
            out.append(_hash_file(prefix + relative))
        except (OSError, ValueError):
            out.append((MISSING, None))
    return out


def _hash_files(real_root: Path, paths: list[str]) -> list[tuple[bytes, tuple | None]]:
    """Hash files in batches on a few threads, with a progress bar when there are many."""
    prefix = str(real_root) + os.sep
    batch = 256
    batches = [paths[i : i + batch] for i in range(0, len(paths), batch)]
    results: list[tuple[bytes, tuple | None]] = []
    with (
        ThreadPoolExecutor(max_workers=HASH_THREADS) as pool,
        tqdm(
            total=len(paths),
            desc="fingerprint: hashing page images",
            unit="file",
            disable=len(paths) < PROGRESS_MIN_FILES,
        ) as progress,
    ):
        for done in pool.map(lambda part: _hash_batch(prefix, part), batches):
            results.extend(done)
            progress.update(len(done))
    return results


# ----------------------------------------------------------------------------------------------
# The memo
# ----------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Memo:
    """What one benchmark directory's memo file holds."""

    table_stats: list[tuple] | None
    """The table files' stats when ``tables_digest`` was computed; None: never trust it."""
    tables_digest: str
    paths: list[str]
    """Image files in canonical page order (what the tables reference)."""
    stats: np.ndarray
    """(size, mtime_ns, inode, device) per path."""
    digests: np.ndarray
    """(n, 16) uint8: each file's blake2b-128."""
    memoizable: np.ndarray
    """Per path: may the digest be reused (False: missing, or modified too recently)?"""
    validated: str | None = None
    """The identity (:meth:`BenchmarkFiles._identity`) of files that passed validation, if any."""

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, _Memo)
            and self.table_stats == other.table_stats
            and self.tables_digest == other.tables_digest
            and self.paths == other.paths
            and np.array_equal(self.stats, other.stats)
            and np.array_equal(self.digests[self.memoizable], other.digests[other.memoizable])
            and np.array_equal(self.memoizable, other.memoizable)
            and self.validated == other.validated
        )

    @classmethod
    def load(cls, path: Path, real_root: Path) -> "_Memo | None":
        """The memo, or None when there is none or it cannot be used (then it is rebuilt)."""
        if not path.is_file():
            return None
        try:
            table = pq.read_table(path)
            header = json.loads(table.schema.metadata[b"vldocir.fingerprint"])
            if header["version"] != MEMO_VERSION or header["root"] != str(real_root):
                return None  # another format, or (improbably) another directory's hash
            table_stats = None if header["table_stats"] is None else [tuple(s) for s in header["table_stats"]]
            n = table.num_rows
            stats = (
                np.stack([table.column(f).to_numpy().astype(np.int64) for f in IDENTITY_FIELDS], axis=1)
                if n
                else np.zeros((0, len(IDENTITY_FIELDS)), np.int64)
            )
            digest = table.column("digest").combine_chunks()
            if digest.type != pa.binary(DIGEST_SIZE):
                raise ValueError(f"digest column of type {digest.type}")
            memoizable = digest.is_valid().to_numpy(zero_copy_only=False)
            digests = np.frombuffer(pc.fill_null(digest, bytes(DIGEST_SIZE)).buffers()[1], dtype=np.uint8)
            digests = digests[: n * DIGEST_SIZE].reshape(n, DIGEST_SIZE)
            validated = header["validated"]
            if validated is not None and not isinstance(validated, str):
                raise ValueError(f"validated is {type(validated).__name__}")
            return cls(
                table_stats,
                str(header["tables_digest"]),
                table.column("path").to_pylist(),
                stats,
                digests,
                memoizable,
                validated,
            )
        except Exception as error:  # a memo is only a shortcut: any damage means "rebuild it"
            log.warning("fingerprint memo %s is unreadable (%s: %s); rebuilding it", path, type(error).__name__, error)
            return None

    def save(self, path: Path, real_root: Path) -> None:
        """Write atomically; a cache directory that cannot be written only costs the next run time."""
        header = {
            "version": MEMO_VERSION,
            "root": str(real_root),
            "table_stats": self.table_stats,
            "tables_digest": self.tables_digest,
            "validated": self.validated,
        }
        columns = {"path": pa.array(self.paths, pa.string())}
        for k, name in enumerate(IDENTITY_FIELDS):
            columns[name] = pa.array(self.stats[:, k], pa.int64())
        values = pa.py_buffer(np.ascontiguousarray(self.digests).tobytes())
        validity = pa.array(self.memoizable).buffers()[1] if not self.memoizable.all() else None
        columns["digest"] = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(DIGEST_SIZE), len(self.paths), [validity, values]
        )
        table = pa.table(columns).replace_schema_metadata({"vldocir.fingerprint": json.dumps(header)})
        try:
            atomic_write_parquet(table, path)
        except OSError as error:
            log.warning("cannot write the fingerprint memo %s (%s); the next fingerprint will hash again", path, error)
