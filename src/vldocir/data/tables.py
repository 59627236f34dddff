"""A benchmark's table files on disk: where each table is (one Parquet file or a folder of
shards), reading it in the canonical column types, and one-line :class:`BenchmarkError`s naming
the table and file when a file is missing, damaged or of the wrong schema.

Used by the loader (:mod:`vldocir.data.benchmark`) and the fingerprint
(:mod:`vldocir.data.fingerprint`), which both read the same tables the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.data.schema import TABLES, TableSpec
from vldocir.errors import VldocirError


class BenchmarkError(VldocirError, ValueError):
    """A benchmark that cannot be used: names the table, the offending row and the broken rule."""

    def __init__(self, table: str, row: str | None, rule: str):
        self.table, self.row, self.rule = table, row, rule
        where = f"{table}[{row}]" if row is not None else table
        super().__init__(f"{where}: {rule}")


def _types_compatible(found: pa.DataType, wanted: pa.DataType) -> bool:
    if found.equals(wanted):
        return True
    if pa.types.is_integer(wanted):
        return pa.types.is_integer(found)
    if pa.types.is_floating(wanted):
        return pa.types.is_floating(found) or pa.types.is_integer(found)
    if pa.types.is_string(wanted):
        return pa.types.is_string(found) or pa.types.is_large_string(found) or pa.types.is_dictionary(found)
    if pa.types.is_binary(wanted):
        return pa.types.is_binary(found) or pa.types.is_large_binary(found)
    if pa.types.is_list(wanted) or pa.types.is_fixed_size_list(wanted):
        is_list = pa.types.is_list(found) or pa.types.is_large_list(found) or pa.types.is_fixed_size_list(found)
        return is_list and _types_compatible(found.value_type, wanted.value_type)
    if pa.types.is_struct(wanted):
        if not pa.types.is_struct(found):
            return False
        found_fields = {found.field(i).name: found.field(i).type for i in range(found.num_fields)}
        return all(f.name in found_fields and _types_compatible(found_fields[f.name], f.type) for f in wanted)
    return False


def check_schema(spec: TableSpec, schema: pa.Schema) -> None:
    for wanted in spec.schema:
        index = schema.get_field_index(wanted.name)
        if index < 0:
            raise BenchmarkError(spec.name, None, f"required column '{wanted.name}' is missing")
        found = schema.field(index).type
        if not _types_compatible(found, wanted.type):
            raise BenchmarkError(spec.name, None, f"column '{wanted.name}' has type {found}, expected {wanted.type}")


def table_location(root: Path, name: str) -> Path:
    """``<name>.parquet``, or a folder ``<name>/`` of Parquet shards (the Hugging Face layout)."""
    single = root / f"{name}.parquet"
    if single.is_file():
        return single
    folder = root / name
    if folder.is_dir() and any(folder.rglob("*.parquet")):
        return folder
    raise BenchmarkError(name, None, f"table file {single} (or a folder {folder}/ of Parquet files) not found")


def table_files(location: Path) -> list[Path]:
    """The Parquet files of a table: the file itself, or a folder's shards in name order."""
    return [location] if location.is_file() else sorted(location.rglob("*.parquet"))


def _table_name(location: Path) -> str:
    return location.stem if location.is_file() else location.name


def _unreadable(table: str, file: Path, error: Exception) -> BenchmarkError:
    """The error for a file pyarrow cannot read (truncated, overwritten, not Parquet at all)."""
    detail = " ".join(str(error).split())  # pyarrow messages can span lines; errors here are one line
    return BenchmarkError(
        table,
        None,
        f"cannot read {file}: not a valid Parquet file (truncated or corrupt?): {type(error).__name__}: {detail}",
    )


# What pyarrow raises on a damaged file: ArrowInvalid for a bad footer or page header, OSError for
# corrupt compressed data, ArrowException subclasses for the rest.
_READ_ERRORS = (pa.ArrowException, OSError)


def _has_columns(location: Path, columns: list[str]) -> bool:
    """Whether the table's first file declares these (top-level) columns."""
    try:
        names = set(pq.read_schema(table_files(location)[0]).names)
    except _READ_ERRORS:
        return True  # the footer itself is damaged
    return all(column.split(".")[0] in names for column in columns)


def _culprit(location: Path, columns: list[str] | None) -> Path:
    """The shard of a folder-table that fails to read (pyarrow's message does not name it)."""
    for file in table_files(location):
        try:
            pq.read_table(file, columns=columns)
        except _READ_ERRORS:
            return file
    return location


def read_schema(location: Path) -> pa.Schema:
    """The table's schema from its first file; every shard's footer is read, so a truncated shard
    fails here, at load, naming its file, and so does a shard that lacks a column of the first
    (pyarrow would fill it with nulls)."""
    name, schemas = _table_name(location), []
    files = table_files(location)
    for file in files:
        try:
            schemas.append(pq.read_schema(file))
        except _READ_ERRORS as error:
            raise _unreadable(name, file, error) from error
    for file, schema in zip(files[1:], schemas[1:], strict=True):
        missing = [column for column in schemas[0].names if column not in schema.names]
        if missing:
            raise BenchmarkError(name, None, f"{file} lacks the column(s) {missing} that {files[0]} has")
    return schemas[0]


def read_table(location: Path, columns: Iterable[str] | None = None) -> pa.Table:
    columns = list(columns) if columns is not None else None
    name = _table_name(location)
    try:
        table = pq.read_table(location, columns=columns)
    except MemoryError:
        raise
    except _READ_ERRORS as error:
        if columns is not None and not _has_columns(location, columns):
            raise  # the caller asked for a column the table lacks: not a damaged file
        raise _unreadable(name, _culprit(location, columns), error) from error
    # Cast to the canonical types (e.g. large_string -> string, int64 -> int32) so that downstream
    # code and the fingerprint see one representation whatever wrote the file.
    spec = TABLES[name]
    fields = []
    for i, column in enumerate(table.column_names):
        idx = spec.schema.get_field_index(column)
        fields.append(spec.schema.field(idx) if idx >= 0 else table.schema.field(i))
    try:
        return table.cast(pa.schema(fields))
    except _CAST_ERRORS:
        raise _uncastable(location, table, fields) from None


# What a cast raises for a value the canonical type cannot hold (an int64 beyond int32, a list of
# three numbers for a four-number box).
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def _uncastable(location: Path, table: pa.Table, fields: list[pa.Field]) -> BenchmarkError:
    """The error naming the first column and row whose value the canonical type cannot hold."""
    name = _table_name(location)
    for field in fields:
        column = table.column(field.name)
        if column.type.equals(field.type):
            continue
        try:
            column.cast(field.type)
            continue
        except _CAST_ERRORS as error:
            detail = " ".join(str(error).split())
        # The first row that fails: casts of growing prefixes fail from that row on (log2(n) casts).
        low, high = 0, len(column) - 1
        while low < high:
            middle = (low + high) // 2
            try:
                column.slice(0, middle + 1).cast(field.type)
                low = middle + 1
            except _CAST_ERRORS:
                high = middle
        value = column[low].as_py()
        return BenchmarkError(
            name,
            _row_label(location, table, low),
            f"column '{field.name}' holds {value!r}, which does not fit {field.type} ({detail})",
        )
    raise AssertionError(f"{name}: the cast failed but no column fails on its own")  # pragma: no cover


def _row_label(location: Path, table: pa.Table, row: int) -> str:
    """A row named by its key columns, as validation names rows (read from the file when the caller
    read other columns), e.g. ``doc_id=d1, element_id=e7``."""
    key = TABLES[_table_name(location)].key
    if not set(key) <= set(table.column_names):
        try:
            table = pq.read_table(location, columns=list(key))
        except _READ_ERRORS:
            return f"row {row}"
    values = [table.column(k)[row].as_py() for k in key]
    return str(values[0]) if len(key) == 1 else ", ".join(f"{k}={v}" for k, v in zip(key, values, strict=True))


def read_image_refs(location: Path) -> pa.Table:
    """``page_id``, image ``path`` and ``has_bytes`` of every page, without reading inline bytes
    where the Parquet statistics already tell whether they are there (a benchmark may hold
    hundreds of GB of inline images; validation must not read them)."""
    parts = [
        pa.table(
            {
                "page_id": pa.array([], pa.string()),
                "path": pa.array([], pa.string()),
                "has_bytes": pa.array([], pa.bool_()),
            }
        )
    ]
    for file in table_files(location):
        try:  # (only reads here: what fails inside is the file)
            parquet = pq.ParquetFile(file)
            groups = [
                (parquet.read_row_group(g, columns=["page_id", "image.path"]), _read_bytes_if_needed(parquet, g))
                for g in range(parquet.num_row_groups)
            ]
        except _READ_ERRORS as error:
            raise _unreadable("pages", file, error) from error
        for refs, image_bytes in groups:
            has_bytes = (
                pa.array(np.zeros(refs.num_rows, dtype=bool))
                if image_bytes is None
                else pc.fill_null(pc.greater(pc.binary_length(_leaf(image_bytes, "bytes")), 0), False)
            )
            parts.append(
                pa.table(
                    {
                        "page_id": refs.column(0).cast(pa.string()),
                        "path": _leaf(refs.column(1), "path").cast(pa.string()),
                        "has_bytes": has_bytes,
                    }
                )
            )
    return pa.concat_tables(parts)


def _read_bytes_if_needed(parquet: pq.ParquetFile, group: int) -> pa.ChunkedArray | None:
    """One row group's inline image bytes, or None when its statistics say they are all null
    (text-only or path-only pages: nothing to read)."""
    meta = parquet.metadata.row_group(group)
    column = next(i for i in range(meta.num_columns) if meta.column(i).path_in_schema == "image.bytes")
    stats = meta.column(column).statistics
    if stats is not None and stats.has_null_count and stats.null_count == meta.num_rows:
        return None
    return parquet.read_row_group(group, columns=["image.bytes"]).column(0)


def _leaf(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """``read_row_group(columns=["image.path"])`` keeps the parent struct; take the child out."""
    return pc.struct_field(column, name) if pa.types.is_struct(column.type) else column


def sort_canonically(spec: TableSpec, table: pa.Table) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in spec.key])
