"""Malformed benchmarks end in ONE line naming the table (and the column and row where there is one).

Each case copies the small synthetic benchmark, breaks one thing the way a hand-made or converted
benchmark breaks (a file, a column's type, a value a canonical type cannot hold, a rule), and loads
it inside the apps' error wrapper (``vldocir.apps.app.one_line_errors``), as ``run.py`` and every
app that opens a benchmark do: the wrapper must exit with status 2 after printing exactly one
stderr line, ``run error: <table>...``, that names what it should.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vldocir.apps.app import ERROR_STATUS, one_line_errors
from vldocir.data.benchmark import BenchmarkError, load_benchmark
from vldocir.data.schema import TABLES


@dataclass
class Bench:
    """One copy of the benchmark, its tables read and rewritten with pyarrow."""

    root: Path

    def path(self, table: str) -> Path:
        return self.root / f"{table}.parquet"

    def read(self, table: str) -> pa.Table:
        return pq.read_table(self.path(table))

    def write(self, table: str, data: pa.Table) -> None:
        pq.write_table(data, self.path(table))

    def set_column(self, table: str, column: str, values: list, type_: pa.DataType | None = None) -> None:
        data = self.read(table)
        index = data.schema.get_field_index(column)
        type_ = type_ or data.schema.field(index).type
        self.write(table, data.set_column(index, column, pa.array(values, type_)))

    def edit(self, table: str, column: str, row: int, value, type_: pa.DataType | None = None) -> None:
        values = self.read(table).column(column).to_pylist()
        values[row] = value
        self.set_column(table, column, values, type_)

    def key(self, table: str, row: int) -> str:
        """How errors name a row: its key value, or ``k1=v1, k2=v2`` for a two-column key."""
        data = self.read(table)
        key = TABLES[table].key
        values = [data.column(k)[row].as_py() for k in key]
        return str(values[0]) if len(key) == 1 else ", ".join(f"{k}={v}" for k, v in zip(key, values, strict=True))

    def info(self, **changes) -> None:
        info = json.loads((self.root / "benchmark.json").read_text())
        info.update(changes)
        (self.root / "benchmark.json").write_text(json.dumps(info))

    def with_image_files(self) -> None:
        """Give every page an image file under ``pages/`` (the synthetic benchmark is text-only)."""
        (self.root / "pages").mkdir()
        ids = self.read("pages").column("page_id").to_pylist()
        for page_id in ids:
            (self.root / "pages" / f"{page_id}.png").write_bytes(page_id.encode())
        self.set_column("pages", "image", [{"bytes": None, "path": f"pages/{p}.png"} for p in ids])


@dataclass
class Expect:
    table: str
    """The line starts with ``run error: <table>``."""
    names: tuple[str, ...]
    """Further text the line must hold: the column, the row, the file, the rule."""


Case = Callable[[Bench], Expect]
CASES: list[Case] = []


def case(function: Case) -> Case:
    CASES.append(function)
    return function


# -- benchmark.json ------------------------------------------------------------------------------


@case
def info_missing(b: Bench) -> Expect:
    (b.root / "benchmark.json").unlink()
    return Expect("benchmark.json", ("not a benchmark directory", str(b.root)))


@case
def info_is_a_directory(b: Bench) -> Expect:
    (b.root / "benchmark.json").unlink()
    (b.root / "benchmark.json").mkdir()
    return Expect("benchmark.json", ("not found",))


@case
def info_truncated_json(b: Bench) -> Expect:
    (b.root / "benchmark.json").write_text('{"name": "x", "counts": {')
    return Expect("benchmark.json", ("invalid JSON",))


@case
def info_not_utf8(b: Bench) -> Expect:
    (b.root / "benchmark.json").write_bytes(b'\xff\xfe{"name": "x"}')
    return Expect("benchmark.json", ("invalid JSON", "utf-8"))


@case
def info_is_a_list(b: Bench) -> Expect:
    (b.root / "benchmark.json").write_text('["test-small"]')
    return Expect("benchmark.json", ("non-empty 'name'",))


@case
def info_name_is_a_number(b: Bench) -> Expect:
    b.info(name=7)
    return Expect("benchmark.json", ("'name' 7 must match",))


@case
def info_name_escapes(b: Bench) -> Expect:
    b.info(name="../elsewhere")
    return Expect("benchmark.json", ("'name' '../elsewhere' must match",))


# -- table files ----------------------------------------------------------------------------------


@case
def table_missing(b: Bench) -> Expect:
    b.path("qrels").unlink()
    return Expect("qrels", (str(b.path("qrels")), "not found"))


@case
def table_folder_without_parquet(b: Bench) -> Expect:
    b.path("pages").unlink()
    (b.root / "pages").mkdir()
    (b.root / "pages" / "README.md").write_text("shards go here\n")
    return Expect("pages", ("not found",))


@case
def table_zero_bytes(b: Bench) -> Expect:
    b.path("qrels").write_bytes(b"")
    return Expect("qrels", (f"cannot read {b.path('qrels')}", "0 bytes"))


@case
def table_truncated(b: Bench) -> Expect:
    data = b.path("elements").read_bytes()
    b.path("elements").write_bytes(data[: len(data) * 2 // 3])
    return Expect("elements", (f"cannot read {b.path('elements')}", "not a valid Parquet file"))


@case
def table_is_text(b: Bench) -> Expect:
    b.path("documents").write_text("doc_id,source\nd1,wikipedia\n")
    return Expect("documents", (f"cannot read {b.path('documents')}",))


@case
def table_is_random_bytes(b: Bench) -> Expect:
    b.path("queries").write_bytes(np.random.default_rng(3).bytes(4096))
    return Expect("queries", (f"cannot read {b.path('queries')}",))


@case
def table_data_page_zeroed(b: Bench) -> Expect:
    """An intact footer over a damaged column chunk: found when the column is read."""
    meta = pq.ParquetFile(b.path("qrels")).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "query_id")
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(b.path("qrels").read_bytes())
    middle = start + chunk.total_compressed_size // 2
    data[middle - 16 : middle + 16] = bytes(32)
    b.path("qrels").write_bytes(bytes(data))
    return Expect("qrels", (f"cannot read {b.path('qrels')}",))


@case
def table_of_another_table(b: Bench) -> Expect:
    shutil.copyfile(b.path("queries"), b.path("documents"))
    return Expect("documents", ("required column 'doc_id' is missing",))


@case
def shard_truncated(b: Bench) -> Expect:
    data = b.read("queries")
    b.path("queries").unlink()
    (b.root / "queries").mkdir()
    pq.write_table(data.slice(0, 100), b.root / "queries" / "part-0.parquet")
    pq.write_table(data.slice(100), b.root / "queries" / "part-1.parquet")
    second = b.root / "queries" / "part-1.parquet"
    second.write_bytes(second.read_bytes()[:-40])
    return Expect("queries", (f"cannot read {second}",))


@case
def shard_lacks_a_column(b: Bench) -> Expect:
    data = b.read("queries")
    b.path("queries").unlink()
    (b.root / "queries").mkdir()
    pq.write_table(data.slice(0, 100), b.root / "queries" / "part-0.parquet")
    pq.write_table(data.slice(100).drop_columns(["answer"]), b.root / "queries" / "part-1.parquet")
    return Expect("queries", (str(b.root / "queries" / "part-1.parquet"), "['answer']"))


# -- columns and types ----------------------------------------------------------------------------


@case
def column_missing(b: Bench) -> Expect:
    b.write("pages", b.read("pages").drop_columns(["width"]))
    return Expect("pages", ("required column 'width' is missing",))


@case
def list_column_missing(b: Bench) -> Expect:
    b.write("queries", b.read("queries").drop_columns(["evidence_types"]))
    return Expect("queries", ("required column 'evidence_types' is missing",))


@case
def page_index_as_text(b: Bench) -> Expect:
    b.set_column("pages", "page_index", [str(v) for v in b.read("pages").column("page_index").to_pylist()], pa.string())
    return Expect("pages", ("column 'page_index' has type string, expected int32",))


@case
def n_pages_as_float(b: Bench) -> Expect:
    b.set_column(
        "documents", "n_pages", [float(v) for v in b.read("documents").column("n_pages").to_pylist()], pa.float64()
    )
    return Expect("documents", ("column 'n_pages' has type double, expected int32",))


@case
def element_ids_as_text(b: Bench) -> Expect:
    b.set_column(
        "qrels", "element_ids", [",".join(v) for v in b.read("qrels").column("element_ids").to_pylist()], pa.string()
    )
    return Expect("qrels", ("column 'element_ids' has type string",))


@case
def bbox_of_strings(b: Bench) -> Expect:
    b.set_column(
        "elements",
        "bbox",
        [[str(x) for x in box] for box in b.read("elements").column("bbox").to_pylist()],
        pa.list_(pa.string()),
    )
    return Expect("elements", ("column 'bbox' has type list<", "string>"))


@case
def image_without_path_field(b: Bench) -> Expect:
    rows = b.read("pages").num_rows
    b.set_column("pages", "image", [{"bytes": None}] * rows, pa.struct([("bytes", pa.binary())]))
    return Expect("pages", ("column 'image' has type struct<bytes: binary>",))


def _bbox_of_length(n: int) -> Case:
    def bbox_of_length(b: Bench) -> Expect:
        boxes = b.read("elements").column("bbox").to_pylist()
        boxes[5] = [float(v) for v in range(n)]
        b.set_column("elements", "bbox", boxes, pa.list_(pa.float64()))
        return Expect("elements", (f"[{b.key('elements', 5)}]", "column 'bbox'", "fixed_size_list"))

    bbox_of_length.__name__ = f"bbox_of_length_{n}"
    return bbox_of_length


CASES += [_bbox_of_length(3), _bbox_of_length(5), _bbox_of_length(0)]


def _beyond_int32(table: str, column: str, row: int) -> Case:
    def beyond_int32(b: Bench) -> Expect:
        b.edit(table, column, row, 2**32, pa.int64())
        return Expect(table, (f"[{b.key(table, row)}]", f"column '{column}' holds 4294967296", "int32"))

    beyond_int32.__name__ = f"{table}_{column}_beyond_int32"
    return beyond_int32


CASES += [
    _beyond_int32("pages", "page_index", 9),
    _beyond_int32("pages", "width", 2),
    _beyond_int32("documents", "n_pages", 4),
    _beyond_int32("elements", "page_index", 12),
]


# -- keys and nulls -------------------------------------------------------------------------------


def _duplicate(table: str, row: int) -> Case:
    def duplicate(b: Bench) -> Expect:
        data = b.read(table)
        b.write(table, pa.concat_tables([data, data.slice(row, 1)]))
        return Expect(table, (f"[{b.key(table, row)}]", "duplicate id"))

    duplicate.__name__ = f"duplicate_{table}"
    return duplicate


CASES += [
    _duplicate(t, r) for t, r in (("documents", 1), ("pages", 30), ("elements", 200), ("queries", 7), ("qrels", 11))
]


@case
def empty_doc_id(b: Bench) -> Expect:
    b.edit("documents", "doc_id", 3, "")
    return Expect("documents", ("[row 3]", "key column 'doc_id' is empty"))


@case
def null_page_id(b: Bench) -> Expect:
    b.edit("pages", "page_id", 8, None)
    return Expect("pages", ("[row 8]", "key column 'page_id' is empty"))


@case
def null_doc_id_of_a_page(b: Bench) -> Expect:
    b.edit("pages", "doc_id", 6, None)
    return Expect("pages", (f"[{b.key('pages', 6)}]", "column 'doc_id' is null"))


@case
def null_structure(b: Bench) -> Expect:
    b.edit("queries", "evidence_structure", 2, None)
    return Expect("queries", (f"[{b.key('queries', 2)}]", "column 'evidence_structure' is null"))


@case
def blank_query_text(b: Bench) -> Expect:
    b.edit("queries", "text", 5, "   ")
    return Expect("queries", (f"[{b.key('queries', 5)}]", "query text is null, empty or whitespace only"))


@case
def empty_queries_table(b: Bench) -> Expect:
    b.write("queries", b.read("queries").slice(0, 0))
    return Expect("queries", ("the table has no rows",))


# -- rules ----------------------------------------------------------------------------------------


@case
def unknown_structure(b: Bench) -> Expect:
    b.edit("queries", "evidence_structure", 4, "page_triple")
    return Expect("queries", (f"[{b.key('queries', 4)}]", "evidence_structure must be one of"))


@case
def document_without_pages(b: Bench) -> Expect:
    b.edit("documents", "n_pages", 0, 0)
    return Expect("documents", (f"[{b.key('documents', 0)}]", "n_pages >= 1"))


@case
def n_pages_off_by_one(b: Bench) -> Expect:
    count = b.read("documents").column("n_pages")[2].as_py()
    b.edit("documents", "n_pages", 2, count + 1)
    return Expect("documents", (f"[{b.key('documents', 2)}]", "n_pages differs"))


@case
def page_of_unknown_document(b: Bench) -> Expect:
    b.edit("pages", "doc_id", 10, "nowhere-00000")
    return Expect("pages", (f"[{b.key('pages', 10)}]", "missing from 'documents'"))


@case
def page_index_negative(b: Bench) -> Expect:
    b.edit("pages", "page_index", 3, -1)
    return Expect("pages", (f"[{b.key('pages', 3)}]", "page_index outside 0..n_pages-1"))


@case
def page_index_repeated(b: Bench) -> Expect:
    pages = b.read("pages")
    row = next(i for i in range(1, pages.num_rows) if pages.column("doc_id")[i] == pages.column("doc_id")[i - 1])
    b.edit("pages", "page_index", row, pages.column("page_index")[row - 1].as_py())
    return Expect("pages", ("two pages of one document share a page_index",))


@case
def element_of_unknown_document(b: Bench) -> Expect:
    b.edit("elements", "doc_id", 40, "nowhere-00000")
    return Expect("elements", ("doc_id=nowhere-00000", "missing from 'documents'"))


@case
def element_page_out_of_range(b: Bench) -> Expect:
    b.edit("elements", "page_index", 41, 10_000)
    return Expect("elements", (f"[{b.key('elements', 41)}]", "page_index outside 0..n_pages-1"))


@case
def qrel_to_unknown_page(b: Bench) -> Expect:
    b.edit("qrels", "page_id", 9, "nowhere-00000-p000")
    return Expect("qrels", ("page_id=nowhere-00000-p000", "qrel refers to a page missing from 'pages'"))


@case
def qrel_to_unknown_query(b: Bench) -> Expect:
    b.edit("qrels", "query_id", 9, "q-nowhere")
    return Expect("qrels", ("query_id=q-nowhere", "qrel refers to a query missing from 'queries'"))


@case
def qrel_of_the_wrong_document(b: Bench) -> Expect:
    qrels = b.read("qrels")
    other = next(d for d in b.read("documents").column("doc_id").to_pylist() if d != qrels.column("doc_id")[0].as_py())
    b.edit("qrels", "doc_id", 0, other)
    return Expect("qrels", (f"[{b.key('qrels', 0)}]", "qrel doc_id differs from its page's doc_id"))


@case
def query_without_evidence(b: Bench) -> Expect:
    qrels = b.read("qrels")
    query = qrels.column("query_id")[0].as_py()
    b.write("qrels", qrels.filter(pa.compute.not_equal(qrels.column("query_id"), query)))
    return Expect("queries", (f"[{query}]", "query has no evidence page in 'qrels'"))


@case
def unknown_element_id(b: Bench) -> Expect:
    ids = b.read("qrels").column("element_ids").to_pylist()
    ids[3] = [*ids[3], "e-nowhere"]
    b.set_column("qrels", "element_ids", ids)
    return Expect("qrels", (f"[{b.key('qrels', 3)}]", "element id 'e-nowhere' is not in 'elements'"))


@case
def missing_image_file(b: Bench) -> Expect:
    b.with_image_files()
    page_id = b.read("pages").column("page_id")[14].as_py()
    (b.root / "pages" / f"{page_id}.png").unlink()
    return Expect("pages", (f"[{page_id}]", f"image path 'pages/{page_id}.png' does not exist"))


@case
def image_path_outside(b: Bench) -> Expect:
    b.with_image_files()
    b.edit("pages", "image", 15, {"bytes": None, "path": "../../etc/hostname"})
    return Expect("pages", (f"[{b.key('pages', 15)}]", "resolves outside the benchmark directory"))


@case
def image_path_absolute(b: Bench) -> Expect:
    b.with_image_files()
    b.edit("pages", "image", 16, {"bytes": None, "path": "/etc/hostname"})
    return Expect("pages", (f"[{b.key('pages', 16)}]", "is absolute"))


def test_there_are_enough_cases():
    assert len(CASES) >= 46
    assert len({c.__name__ for c in CASES}) == len(CASES)


@pytest.fixture
def bench(small_bench_dir, tmp_path) -> Bench:
    root = tmp_path / "bench"
    shutil.copytree(small_bench_dir, root)
    return Bench(root)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_malformed_benchmark_is_one_line(bench, case, capsys):
    expect = case(bench)
    with pytest.raises(SystemExit) as stopped, one_line_errors("run"):
        load_benchmark(bench.root, memo=False)
    assert stopped.value.code == ERROR_STATUS
    assert isinstance(stopped.value.__context__, BenchmarkError), stopped.value.__context__
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    (line,) = lines
    assert line.startswith(f"run error: {expect.table}"), line
    for name in expect.names:
        assert name in line, f"{name!r} not in {line!r}"
    assert "Traceback" not in captured.err and captured.out == ""


def test_a_valid_copy_loads(bench):
    """The cases break a benchmark that loads: what fails is what each case broke."""
    assert load_benchmark(bench.root, memo=False).name == "test-small"


def test_a_cast_error_names_the_row_even_when_validation_reads_other_columns(bench):
    """Validation reads only the key columns of ``elements`` (not ``bbox``): the fingerprint reads
    ``bbox``, and the row is named from the file's key columns all the same."""
    boxes = bench.read("elements").column("bbox").to_pylist()
    boxes[-1] = [1.0, 2.0, 3.0]
    bench.set_column("elements", "bbox", boxes, pa.list_(pa.float64()))
    with pytest.raises(BenchmarkError) as raised:
        load_benchmark(bench.root, memo=False)
    assert raised.value.table == "elements" and raised.value.row == bench.key("elements", len(boxes) - 1)
    assert "[1.0, 2.0, 3.0]" in raised.value.rule


def test_an_unreadable_table_file_is_one_line(bench, capsys):
    """Permissions (a file the user may not read): an OSError naming the file, not a BenchmarkError."""
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their permissions")
    bench.path("queries").chmod(0)
    with pytest.raises(SystemExit), one_line_errors("run"):
        load_benchmark(bench.root, memo=False)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("run error: ") and str(bench.path("queries")) in line
