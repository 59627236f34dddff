"""Load, validate, fingerprint and write benchmarks (DESIGN.md §2).

A benchmark is immutable once written: every cache key downstream starts from its fingerprint,
a hash of the five tables' contents.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.data.schema import TABLES, TableSpec
from vldocir.data.validation import validate_tables
from vldocir.io import atomic_write_json, atomic_write_parquet

log = logging.getLogger(__name__)

INFO_FILE = "benchmark.json"
HUB_PREFIX = "hf://"


class BenchmarkError(ValueError):
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
        return all(
            f.name in found_fields and _types_compatible(found_fields[f.name], f.type) for f in wanted
        )
    return False


def _check_schema(spec: TableSpec, schema: pa.Schema) -> None:
    for wanted in spec.schema:
        index = schema.get_field_index(wanted.name)
        if index < 0:
            raise BenchmarkError(spec.name, None, f"required column '{wanted.name}' is missing")
        found = schema.field(index).type
        if not _types_compatible(found, wanted.type):
            raise BenchmarkError(
                spec.name, None, f"column '{wanted.name}' has type {found}, expected {wanted.type}"
            )


def table_location(root: Path, name: str) -> Path:
    """``<name>.parquet``, or a folder ``<name>/`` of Parquet shards (the Hugging Face layout)."""
    single = root / f"{name}.parquet"
    if single.is_file():
        return single
    folder = root / name
    if folder.is_dir() and any(folder.rglob("*.parquet")):
        return folder
    raise BenchmarkError(name, None, f"table file {single} (or a folder {folder}/ of Parquet files) not found")


def _read(location: Path, columns: Iterable[str] | None = None) -> pa.Table:
    table = pq.read_table(location, columns=list(columns) if columns is not None else None)
    # Cast to the canonical types (e.g. large_string -> string, int64 -> int32) so that downstream
    # code and the fingerprint see one representation whatever wrote the file.
    spec = TABLES[location.stem if location.is_file() else location.name]
    fields = []
    for i, name in enumerate(table.column_names):
        idx = spec.schema.get_field_index(name)
        fields.append(spec.schema.field(idx) if idx >= 0 else table.schema.field(i))
    return table.cast(pa.schema(fields))


def _sort_canonically(spec: TableSpec, table: pa.Table) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in spec.key])


@dataclass
class Benchmark:
    """A validated benchmark directory. Tables are read lazily and kept once read."""

    root: Path
    info: dict
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.info["name"]

    @cached_property
    def fingerprint(self) -> str:
        return compute_fingerprint(self.root)

    def arrow(self, name: str, columns: Iterable[str] | None = None) -> pa.Table:
        return _read(table_location(self.root, name), columns)

    def table(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            self._tables[name] = self.arrow(name).to_pandas()
        return self._tables[name]

    @property
    def documents(self) -> pd.DataFrame:
        return self.table("documents")

    @property
    def pages(self) -> pd.DataFrame:
        return self.table("pages")

    @property
    def elements(self) -> pd.DataFrame:
        return self.table("elements")

    @property
    def queries(self) -> pd.DataFrame:
        return self.table("queries")

    @property
    def qrels(self) -> pd.DataFrame:
        return self.table("qrels")

    def summary(self) -> dict:
        return {"name": self.name, "fingerprint": self.fingerprint, **self.info.get("counts", {})}


def compute_fingerprint(root: Path) -> str:
    """Hash of the five tables' contents (canonical row order and column types, all columns).

    Independent of how the files were written (row order, row groups, compression, int widths).
    """
    digest = hashlib.blake2b(digest_size=16)
    for name, spec in TABLES.items():
        table = _sort_canonically(spec, _read(table_location(root, name)))
        if name == "pages":
            table = table.append_column("image_file_size", _image_file_sizes(root, table))
        table = table.select(sorted(table.column_names)).combine_chunks()
        digest.update(name.encode())
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1 << 20)
        digest.update(sink.getvalue())
    return digest.hexdigest()


def _image_file_sizes(root: Path, pages: pa.Table) -> pa.Array:
    """Byte size of each page's image file (-1 where the image is inline or absent).

    Images referenced by path are not hashed (a full benchmark has hundreds of GB of them); their
    sizes make a re-encoded or re-rendered image set change the fingerprint all the same.
    """
    paths = pages.column("image").combine_chunks().field("path").to_pylist()
    sizes = []
    for relative in paths:
        try:
            sizes.append((root / relative).stat().st_size if relative else -1)
        except OSError:
            sizes.append(-1)
    return pa.array(sizes, pa.int64())


def resolve_source(source: str | Path, revision: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """A local benchmark directory, downloading it first when ``source`` is ``hf://<org>/<name>``."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        from huggingface_hub import snapshot_download

        repo_id = text[len(HUB_PREFIX) :]
        try:
            local = snapshot_download(
                repo_id=repo_id, repo_type="dataset", revision=revision, cache_dir=cache_dir
            )
        except Exception as error:  # offline, gated, missing: say which dataset and how to fix it
            raise BenchmarkError(
                "benchmark.json",
                None,
                f"could not fetch dataset '{repo_id}' (revision {revision or 'main'}) from the Hugging "
                f"Face hub: {error}. Download it once with network access, or point dataset.source "
                "at a local benchmark directory.",
            ) from error
        return Path(local)
    path = Path(text).expanduser()
    if not path.is_dir():
        raise BenchmarkError("benchmark.json", None, f"benchmark directory {path} does not exist")
    return path


def load_benchmark(
    source: str | Path, *, validate: bool = True, revision: str | None = None, cache_dir: str | Path | None = None
) -> Benchmark:
    """Open a benchmark from a directory or ``hf://<org>/<name>`` and validate it.

    Raises :class:`BenchmarkError` naming the table, row and rule of the first problem found.
    """
    root = resolve_source(source, revision=revision, cache_dir=cache_dir)
    info_path = root / INFO_FILE
    if not info_path.is_file():
        raise BenchmarkError(INFO_FILE, None, f"{info_path} not found: not a benchmark directory")
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as error:
        raise BenchmarkError(INFO_FILE, None, f"invalid JSON: {error}") from error
    if not isinstance(info, dict) or not info.get("name"):
        raise BenchmarkError(INFO_FILE, None, "must be an object with a non-empty 'name'")
    for spec in TABLES.values():
        _check_schema(spec, pq.read_schema(_schema_file(table_location(root, spec.name))))
    bench = Benchmark(root=root, info=info)
    if validate:
        validate_tables(bench, BenchmarkError)
    return bench


def _schema_file(location: Path) -> Path:
    return location if location.is_file() else min(location.rglob("*.parquet"))


def write_benchmark(root: str | Path, tables: Mapping[str, pd.DataFrame | pa.Table], info: Mapping) -> Benchmark:
    """Write the five tables (cast to the canonical schema, sorted by key) and ``benchmark.json``.

    ``info`` must name the benchmark; counts and the fingerprint are added here.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, spec in TABLES.items():
        data = tables[name]
        table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        missing = [f.name for f in spec.schema if f.name not in table.column_names]
        if missing:
            raise BenchmarkError(name, None, f"required columns missing: {missing}")
        extra = [c for c in table.column_names if c not in spec.schema.names]
        table = table.select([*spec.schema.names, *extra])
        table = table.cast(pa.schema([*spec.schema, *[table.schema.field(c) for c in extra]]))
        atomic_write_parquet(_sort_canonically(spec, table), root / spec.file_name)
        counts[name] = table.num_rows
    full_info = {**dict(info), "counts": counts, "fingerprint": compute_fingerprint(root)}
    atomic_write_json(full_info, root / INFO_FILE)
    return load_benchmark(root)
