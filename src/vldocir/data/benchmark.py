"""Load, validate, fingerprint and write benchmarks (DESIGN.md §2).

A benchmark is immutable once written: every cache key downstream starts from its fingerprint,
a hash of the five tables' contents and of the page image files they reference
(:mod:`vldocir.data.fingerprint`). The table files themselves are located and read by
:mod:`vldocir.data.tables`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.data.fingerprint import BenchmarkFiles, compute_fingerprint
from vldocir.data.fingerprint.table_stream import strictly_sorted
from vldocir.data.schema import DECLARED_SOURCES_KEY, TABLES
from vldocir.data.tables import (
    BenchmarkError,
    check_schema,
    read_image_refs,
    read_schema,
    read_table,
    sort_canonically,
    table_location,
)
from vldocir.data.validation import rules_digest, validate_tables
from vldocir.io import atomic_path, atomic_write_json, atomic_write_parquet

log = logging.getLogger(__name__)

INFO_FILE = "benchmark.json"
HUB_PREFIX = "hf://"
NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
"""What a benchmark's name may hold: it becomes a directory of the results store and of caches."""


@dataclass
class Benchmark:
    """A validated benchmark directory. Tables are read lazily and kept once read."""

    root: Path
    info: dict
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    load_timings: dict[str, float | bool | None] = field(default_factory=dict)
    """What :func:`load_benchmark` spent: ``validate_s`` and ``fingerprint_s``, and whether each
    came from the memo (``validate_from_memo``, ``fingerprint_from_memo``)."""

    @property
    def name(self) -> str:
        return self.info["name"]

    @cached_property
    def fingerprint(self) -> str:
        return compute_fingerprint(self.root)

    def arrow(self, name: str, columns: Iterable[str] | None = None) -> pa.Table:
        """Table ``name`` (the columns of its files, or ``columns``). An optional column
        (:class:`~vldocir.data.schema.OptionalColumn`) asked for by name but absent from the files
        comes back filled with its default."""
        location = table_location(self.root, name)
        if columns is None:
            return read_table(location)
        columns = list(columns)
        absent = [c for c in columns if TABLES[name].optional_column(c) and c not in read_schema(location).names]
        present = [c for c in columns if c not in absent]
        table = read_table(location, present or list(TABLES[name].key[:1]))  # (a key column: the row count)
        table = table.select(present)
        for column in absent:
            spec = TABLES[name].optional_column(column)
            filled = pa.array([spec.default] * table.num_rows, spec.field.type)
            table = table.add_column(columns.index(column), spec.field, filled)
        return table

    def image_refs(self) -> pa.Table:
        """Per page: ``page_id``, image ``path`` and ``has_bytes`` (see :func:`read_image_refs`)."""
        return read_image_refs(table_location(self.root, "pages"))

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


def resolve_source(source: str | Path, revision: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """A local benchmark directory, downloading it first when ``source`` is ``hf://<org>/<name>``."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        from huggingface_hub import snapshot_download

        repo_id = text[len(HUB_PREFIX) :]
        try:
            local = snapshot_download(repo_id=repo_id, repo_type="dataset", revision=revision, cache_dir=cache_dir)
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
    source: str | Path,
    *,
    validate: bool = True,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    memo: bool = True,
) -> Benchmark:
    """Open a benchmark from a directory or ``hf://<org>/<name>``, validate it and fingerprint it.

    Raises :class:`BenchmarkError` naming the table, row and rule of the first problem found.

    A benchmark whose table files, image files and image directories are exactly those of a past
    load that validated (by path, size, mtime, inode and device; see
    :mod:`vldocir.data.fingerprint`) is not validated again; ``memo=False`` validates anyway. With
    ``validate=False`` the fingerprint is computed when first asked for (image paths unchecked).
    """
    root = resolve_source(source, revision=revision, cache_dir=cache_dir)
    info_path = root / INFO_FILE
    if not info_path.is_file():
        raise BenchmarkError(INFO_FILE, None, f"{info_path} not found: not a benchmark directory")
    try:
        info = json.loads(info_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:  # (JSON is UTF-8)
        raise BenchmarkError(INFO_FILE, None, f"invalid JSON: {error}") from error
    check_info(info)
    for spec in TABLES.values():
        check_schema(spec, read_schema(table_location(root, spec.name)))
    bench = Benchmark(root=root, info=info)
    if not validate:
        return bench
    tick = time.perf_counter()
    files = BenchmarkFiles(root)
    passed = None
    # The declared sources are rules of their own (benchmark.json is no table file the memo watches).
    rules = rules_digest() + (f":{json.dumps(info[DECLARED_SOURCES_KEY])}" if DECLARED_SOURCES_KEY in info else "")
    from_memo = memo and files.validated(rules)
    if not from_memo:
        started_ns = time.time_ns()
        validate_tables(bench, BenchmarkError)
        passed = (rules, started_ns) if memo else None
    validate_s = time.perf_counter() - tick
    # After validation: the fingerprint opens the image paths that validation vouched for.
    tick = time.perf_counter()
    bench.__dict__["fingerprint"] = files.fingerprint(passed)  # (the cached_property's slot)
    bench.load_timings = {
        "validate_s": validate_s,
        "validate_from_memo": from_memo,
        "fingerprint_s": time.perf_counter() - tick,
        "fingerprint_from_memo": files.from_memo,
    }
    return bench


def check_info(info) -> None:
    """``benchmark.json`` must be an object whose name is safe as one directory name: the results
    store and caches write under ``<dir>/<name>/``, so ``../x`` or ``/x`` would write elsewhere."""
    if not isinstance(info, dict) or not info.get("name"):
        raise BenchmarkError(INFO_FILE, None, "must be an object with a non-empty 'name'")
    name = info["name"]
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        raise BenchmarkError(
            INFO_FILE,
            None,
            f"'name' {name!r} must match [A-Za-z0-9._-]+ and not be '.' or '..' "
            "(it names a directory of the results store)",
        )


@dataclass(frozen=True)
class _AsIs:
    field: pa.Field


@dataclass
class SortedBatches:
    """A table given as record batches already in canonical order (sorted by its key, no key
    twice), so that :func:`write_benchmark` writes it batch by batch and never holds it whole: an
    import's pages, whose texts grow with the corpus. Consumed once."""

    schema: pa.Schema
    batches: Iterable[pa.RecordBatch | pa.Table]


def _file_schema(spec, schema: pa.Schema) -> pa.Schema:
    """The canonical columns in their order and types, then the extra ones (optional columns, such as
    qrels ``grade`` or queries ``language``, in their declared type when given)."""
    missing = [f.name for f in spec.schema if f.name not in schema.names]
    if missing:
        raise BenchmarkError(spec.name, None, f"required columns missing: {missing}")
    extra = [c for c in schema.names if c not in spec.schema.names]
    return pa.schema([*spec.schema, *[(spec.optional_column(c) or _AsIs(schema.field(c))).field for c in extra]])


def _write_sorted_batches(spec, data: SortedBatches, target: Path) -> int:
    """Write ``data`` batch by batch (a row group or more each), checking that keys only increase;
    the number of rows written."""
    schema = _file_schema(spec, data.schema)
    n_rows, last = 0, None
    with atomic_path(target) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for batch in data.batches:
            table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
            table = table.select(schema.names).cast(schema)
            if not table.num_rows:
                continue
            keys = [table.column(k).combine_chunks() for k in spec.key]
            with_last = keys if last is None else [pa.concat_arrays([p, k]) for p, k in zip(last, keys, strict=True)]
            if not strictly_sorted(with_last):
                raise BenchmarkError(spec.name, None, "rows given as sorted are not in strictly increasing key order")
            last = [k.slice(len(k) - 1) for k in keys]
            writer.write_table(table)
            n_rows += table.num_rows
    return n_rows


def write_benchmark(
    root: str | Path, tables: Mapping[str, pd.DataFrame | pa.Table | SortedBatches], info: Mapping
) -> Benchmark:
    """Write the five tables (cast to the canonical schema, sorted by key) and ``benchmark.json``.

    A table may be given as :class:`SortedBatches` (already sorted; written as it streams by).
    ``info`` must name the benchmark; counts and the fingerprint are added here.
    """
    check_info(dict(info))  # before anything is written
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, spec in TABLES.items():
        data = tables[name]
        if isinstance(data, SortedBatches):
            counts[name] = _write_sorted_batches(spec, data, root / spec.file_name)
            continue
        table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        schema = _file_schema(spec, table.schema)
        table = table.select(schema.names).cast(schema)
        atomic_write_parquet(sort_canonically(spec, table), root / spec.file_name)
        counts[name] = table.num_rows
    full_info = {**dict(info), "counts": counts, "fingerprint": compute_fingerprint(root)}
    atomic_write_json(full_info, root / INFO_FILE)
    return load_benchmark(root)
