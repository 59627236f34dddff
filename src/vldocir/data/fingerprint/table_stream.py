"""The tables' part of the fingerprint: each table hashed as the Arrow IPC stream of its canonical
form (:func:`ipc_stream`), streamed from the file where the file already is in canonical order
(:class:`SortedTableFile`: the same bytes, never the whole table in memory).

The IPC stream of a table of 1..IPC_CHUNK_ROWS rows is: the schema message; one record batch
message, its metadata (the row count, per array node its length and null count, per buffer its
offset and length in the body, the body's length) then its body (every buffer in turn, padded with
zeros to 8 bytes, node by node depth first, column by column); the end-of-stream marker. The
metadata's layout depends on the schema alone, so pyarrow writes it for a one-row table of the same
schema and the numbers are set into it (_Skeleton); the body is concatenated here, each buffer in one
pass over the file's row batches. The buffers are those pyarrow's writer emits for a combined
column: a validity bitmap only where the node has nulls, offsets from 0, the values or bytes they
span. tests/data/test_fingerprint_stream.py holds this to ipc_stream on every column type the
benchmarks use, with nulls, empty lists and batch boundaries anywhere.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.data.fingerprint.images import image_file_paths

IPC_CHUNK_ROWS = 1 << 20
"""Rows per record batch of the IPC stream a table is hashed as: part of the fingerprint's
definition. (A larger table makes several batches and is hashed from memory.)"""

STREAM_BATCH_ROWS = 4096
"""Rows read at a time while a table file is hashed as a stream."""

READ_ERRORS = (pa.ArrowException, OSError)
"""What streaming a table file raises when the file is damaged or holds a value its canonical type
cannot hold: the table is then read whole, and read_table names the problem."""


def ipc_stream(table: pa.Table) -> pa.Buffer:
    """What a table (in canonical row order and types) hashes as: the Arrow IPC stream of its
    columns sorted by name, each combined into one chunk, :data:`IPC_CHUNK_ROWS` rows a batch."""
    table = table.select(sorted(table.column_names)).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=IPC_CHUNK_ROWS)
    return sink.getvalue()


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


class SortedTableFile:
    """A single-file table of 1..:data:`IPC_CHUNK_ROWS` rows, stored in canonical order with no
    two rows sharing a key (so the file's order is the only canonical one), of column types the
    stream reproduces. :meth:`hash_stream` feeds a digest the bytes of :func:`ipc_stream` of the
    canonical table, reading :data:`STREAM_BATCH_ROWS` rows of one column at a time."""

    def __init__(self, parquet: pq.ParquetFile, schema: pa.Schema, batch_rows: int):
        self.parquet, self.schema, self.batch_rows = parquet, schema, batch_rows
        self.n_rows = parquet.metadata.num_rows

    @classmethod
    def open(cls, spec, location: Path, batch_rows: int = STREAM_BATCH_ROWS) -> SortedTableFile | None:
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
        except (_Unsupported, *READ_ERRORS):
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
        for node, (length, nulls, data) in zip(nodes, stats, strict=True):
            for kind in node.buffers:
                size = _buffer_size(node, kind, length, nulls, data)
                buffers.append((body, size))
                body += size + (-size % 8)
        skeleton = _Skeleton(self._one_row_stream())
        digest.update(skeleton.prefix)
        digest.update(skeleton.batch_metadata(self.n_rows, [(n, k) for n, k, _ in stats], buffers, body))
        for node, (_, nulls, _) in zip(nodes, stats, strict=True):
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
        """:func:`ipc_stream` of the table's first row: the messages whose layout the table shares."""
        first = next(self.parquet.iter_batches(batch_size=1, use_threads=False)).slice(0, 1)
        table = pa.Table.from_batches([first])
        return ipc_stream(table.cast(pa.schema([self.schema.field(name) for name in table.column_names])))

    def image_files(self) -> list[str]:
        paths: list[str] = []
        image = self.schema.field("image")
        for batch in self.parquet.iter_batches(batch_size=self.batch_rows, columns=["image"], use_threads=False):
            paths += image_file_paths(pa.table({"image": batch.column(0).cast(image.type)}))
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
    for a, b in zip(before, after, strict=True):
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
        _version, header_type, header, body_length = (fields(message) + [0] * 4)[:4]
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
