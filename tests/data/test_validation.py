"""Benchmark loading and validation: every schema check and every rule of ``data/validation.py``.

Each case copies the small synthetic benchmark, breaks exactly one thing by rewriting one Parquet
table (or ``benchmark.json``), and checks that ``load_benchmark`` names the table, the offending row
and the rule. The fingerprint tests check it ignores how the tables were written but not what
they hold.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vldocir.data.benchmark import BenchmarkError, compute_fingerprint, load_benchmark


@dataclass
class Tables:
    """Read and rewrite the Parquet tables of one benchmark copy."""

    root: Path

    def path(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def arrow(self, name: str) -> pa.Table:
        return pq.read_table(self.path(name))

    def read(self, name: str) -> pd.DataFrame:
        return self.arrow(name).to_pandas()

    def write(self, name: str, frame: pd.DataFrame, schema: pa.Schema | None = None) -> None:
        """Write ``frame`` back in its row order, with the file's own schema unless told otherwise."""
        schema = self.arrow(name).schema if schema is None else schema
        table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        pq.write_table(table, self.path(name))

    # Views used by several cases -----------------------------------------------------------------

    def evidence(self) -> pd.DataFrame:
        """qrels joined with each query's structure and each page's page_index."""
        qrels = self.read("qrels").reset_index(names="row")
        structures = self.read("queries")[["query_id", "evidence_structure"]]
        pages = self.read("pages")[["page_id", "page_index"]]
        return qrels.merge(structures, on="query_id").merge(pages, on="page_id")

    def n_pages(self) -> pd.Series:
        return self.read("documents").set_index("doc_id")["n_pages"]


@dataclass
class Expect:
    table: str
    row: str | None
    rule: str
    """A substring of the error message naming the rule."""


Case = Callable[[Tables], Expect]


# ----------------------------------------------------------------------------------------------
# benchmark.json and schema checks (benchmark.py)
# ----------------------------------------------------------------------------------------------


def missing_info(t: Tables) -> Expect:
    (t.root / "benchmark.json").unlink()
    return Expect("benchmark.json", None, "not a benchmark directory")


def invalid_json(t: Tables) -> Expect:
    (t.root / "benchmark.json").write_text('{"name": "broken",')
    return Expect("benchmark.json", None, "invalid JSON")


def missing_name(t: Tables) -> Expect:
    info = json.loads((t.root / "benchmark.json").read_text())
    del info["name"]
    (t.root / "benchmark.json").write_text(json.dumps(info))
    return Expect("benchmark.json", None, "non-empty 'name'")


def empty_name(t: Tables) -> Expect:
    info = json.loads((t.root / "benchmark.json").read_text())
    info["name"] = ""
    (t.root / "benchmark.json").write_text(json.dumps(info))
    return Expect("benchmark.json", None, "non-empty 'name'")


def info_not_object(t: Tables) -> Expect:
    (t.root / "benchmark.json").write_text('["name"]')
    return Expect("benchmark.json", None, "non-empty 'name'")


def missing_table_file(t: Tables) -> Expect:
    t.path("elements").unlink()
    return Expect("elements", None, "elements.parquet")


def missing_column(t: Tables) -> Expect:
    t.write("pages", t.read("pages").drop(columns=["page_index"]), t.arrow("pages").drop_columns(["page_index"]).schema)
    return Expect("pages", None, "required column 'page_index' is missing")


def missing_list_column(t: Tables) -> Expect:
    t.write(
        "qrels", t.read("qrels").drop(columns=["element_ids"]), t.arrow("qrels").drop_columns(["element_ids"]).schema
    )
    return Expect("qrels", None, "required column 'element_ids' is missing")


def wrong_column_type(t: Tables) -> Expect:
    frame = t.read("documents")
    frame["n_pages"] = frame["n_pages"].astype(str)
    schema = t.arrow("documents").schema
    schema = schema.set(schema.get_field_index("n_pages"), pa.field("n_pages", pa.string()))
    t.write("documents", frame, schema)
    return Expect("documents", None, "column 'n_pages' has type string, expected int32")


def wrong_list_item_type(t: Tables) -> Expect:
    frame = t.read("qrels")
    frame["element_ids"] = [[len(ids)] for ids in frame["element_ids"]]
    schema = t.arrow("qrels").schema
    schema = schema.set(schema.get_field_index("element_ids"), pa.field("element_ids", pa.list_(pa.int64())))
    t.write("qrels", frame, schema)
    # (the item field's name, "element" or "item", depends on the Parquet writer)
    return Expect("qrels", None, "column 'element_ids' has type list<")


# ----------------------------------------------------------------------------------------------
# Key columns: empty and duplicate ids
# ----------------------------------------------------------------------------------------------


def empty_key(t: Tables) -> Expect:
    frame = t.read("queries")
    frame.loc[5, "query_id"] = ""
    t.write("queries", frame)
    return Expect("queries", "row 5", "key column 'query_id' is empty")


def null_key(t: Tables) -> Expect:
    frame = t.read("elements")
    frame.loc[3, "element_id"] = None
    t.write("elements", frame)
    return Expect("elements", "row 3", "key column 'element_id' is empty")


def _duplicate_row(table: str, position: int) -> Case:
    def case(t: Tables) -> Expect:
        frame = t.read(table)
        row = frame.iloc[[position]]
        t.write(table, pd.concat([frame, row], ignore_index=True))
        key = {
            "documents": ("doc_id",),
            "pages": ("page_id",),
            "elements": ("doc_id", "element_id"),
            "queries": ("query_id",),
            "qrels": ("query_id", "page_id"),
        }[table]
        values = row.iloc[0]
        name = str(values[key[0]]) if len(key) == 1 else ", ".join(f"{k}={values[k]}" for k in key)
        return Expect(table, name, f"duplicate id {key}")

    case.__name__ = f"duplicate_{table}"
    return case


# ----------------------------------------------------------------------------------------------
# Documents and pages
# ----------------------------------------------------------------------------------------------


def n_pages_below_one(t: Tables) -> Expect:
    frame = t.read("documents")
    frame.loc[2, "n_pages"] = 0
    t.write("documents", frame)
    return Expect("documents", frame.loc[2, "doc_id"], "at least one page (n_pages >= 1)")


def page_missing_doc(t: Tables) -> Expect:
    frame = t.read("pages")
    frame.loc[10, "doc_id"] = "ghost-document"
    t.write("pages", frame)
    return Expect("pages", frame.loc[10, "page_id"], "page refers to a document missing from 'documents'")


def page_index_too_large(t: Tables) -> Expect:
    frame = t.read("pages")
    doc = frame.loc[7, "doc_id"]
    frame.loc[7, "page_index"] = int(t.n_pages()[doc])  # one past the last page
    t.write("pages", frame)
    return Expect("pages", frame.loc[7, "page_id"], "page_index outside 0..n_pages-1")


def page_index_negative(t: Tables) -> Expect:
    frame = t.read("pages")
    frame.loc[12, "page_index"] = -1
    t.write("pages", frame)
    return Expect("pages", frame.loc[12, "page_id"], "page_index outside 0..n_pages-1")


def duplicate_page_index(t: Tables) -> Expect:
    frame = t.read("pages")
    # The first document with two pages: give its second page (p001) the index of its first (p000).
    doc = t.n_pages()[t.n_pages() >= 2].index[0]
    second = frame.index[(frame["doc_id"] == doc) & (frame["page_index"] == 1)][0]
    frame.loc[second, "page_index"] = 0
    t.write("pages", frame)
    return Expect("pages", frame.loc[second, "page_id"], "two pages of one document share a page_index")


def n_pages_mismatch(t: Tables) -> Expect:
    frame = t.read("documents")
    frame.loc[4, "n_pages"] += 1
    t.write("documents", frame)
    return Expect("documents", frame.loc[4, "doc_id"], "n_pages differs from the number of pages")


# ----------------------------------------------------------------------------------------------
# Elements
# ----------------------------------------------------------------------------------------------


def element_missing_doc(t: Tables) -> Expect:
    frame = t.read("elements")
    frame.loc[20, "doc_id"] = "ghost-document"
    t.write("elements", frame)
    row = f"doc_id=ghost-document, element_id={frame.loc[20, 'element_id']}"
    return Expect("elements", row, "element refers to a document missing from 'documents'")


def element_page_out_of_range(t: Tables) -> Expect:
    frame = t.read("elements")
    frame.loc[30, "page_index"] = 999
    t.write("elements", frame)
    row = f"doc_id={frame.loc[30, 'doc_id']}, element_id={frame.loc[30, 'element_id']}"
    return Expect("elements", row, "page_index outside 0..n_pages-1")


# ----------------------------------------------------------------------------------------------
# Queries and qrels
# ----------------------------------------------------------------------------------------------


def bad_structure(t: Tables) -> Expect:
    frame = t.read("queries")
    frame.loc[9, "evidence_structure"] = "page_double"
    t.write("queries", frame)
    return Expect("queries", frame.loc[9, "query_id"], "evidence_structure must be one of page_single")


def qrel_missing_query(t: Tables) -> Expect:
    frame = t.read("qrels")
    frame.loc[0, "query_id"] = "q-ghost"
    t.write("qrels", frame)
    return Expect("qrels", f"query_id=q-ghost, page_id={frame.loc[0, 'page_id']}", "qrel refers to a query missing")


def qrel_missing_page(t: Tables) -> Expect:
    frame = t.read("qrels")
    frame.loc[3, "page_id"] = "ghost-page"
    t.write("qrels", frame)
    return Expect("qrels", f"query_id={frame.loc[3, 'query_id']}, page_id=ghost-page", "qrel refers to a page missing")


def qrel_doc_mismatch(t: Tables) -> Expect:
    frame = t.read("qrels")
    other = next(d for d in t.n_pages().index if d != frame.loc[1, "doc_id"])
    frame.loc[1, "doc_id"] = other
    t.write("qrels", frame)
    row = f"query_id={frame.loc[1, 'query_id']}, page_id={frame.loc[1, 'page_id']}"
    return Expect("qrels", row, "qrel doc_id differs from its page's doc_id")


def query_without_qrels(t: Tables) -> Expect:
    frame = t.read("qrels")
    query = t.evidence().query("evidence_structure == 'doc_far'")["query_id"].iloc[0]
    t.write("qrels", frame[frame["query_id"] != query])
    return Expect("queries", query, "query has no evidence page in 'qrels'")


def single_page_with_two_pages(t: Tables) -> Expect:
    evidence = t.evidence()
    pages = t.read("pages")
    # A page_single query in a document with at least two pages: add a second evidence page.
    candidates = evidence[(evidence["evidence_structure"] == "page_single") & evidence["doc_id"].map(t.n_pages() >= 2)]
    qrel = candidates.iloc[0]
    extra_page = pages[(pages["doc_id"] == qrel["doc_id"]) & (pages["page_id"] != qrel["page_id"])]["page_id"].iloc[0]
    frame = t.read("qrels")
    added = pd.DataFrame(
        [{"query_id": qrel["query_id"], "page_id": extra_page, "doc_id": qrel["doc_id"], "element_ids": []}]
    )
    t.write("qrels", pd.concat([frame, added], ignore_index=True))
    return Expect("queries", qrel["query_id"], "page_single/page_multi queries must have evidence on exactly one page")


def multi_page_with_one_page(t: Tables) -> Expect:
    evidence = t.evidence()
    qrel = evidence[evidence["evidence_structure"] == "doc_near"].iloc[0]
    frame = t.read("qrels")
    t.write("qrels", frame.drop(index=qrel["row"]))
    return Expect("queries", qrel["query_id"], "multi-page structures must have evidence on at least two pages")


def documents_unknown_with_one_page(t: Tables) -> Expect:
    """``multi_page_docs_unknown`` (a source without document ids) needs two or more evidence pages."""
    frame = t.read("queries")
    single = t.evidence().query("evidence_structure == 'page_single'")["query_id"].iloc[0]
    frame.loc[frame["query_id"] == single, "evidence_structure"] = "multi_page_docs_unknown"
    t.write("queries", frame)
    return Expect("queries", single, "multi-page structures must have evidence on at least two pages")


def within_doc_in_two_docs(t: Tables) -> Expect:
    evidence = t.evidence()
    pages = t.read("pages")
    qrel = evidence[evidence["evidence_structure"] == "doc_far"].iloc[1]  # the query's second evidence page
    other = pages[pages["doc_id"] != qrel["doc_id"]].iloc[0]
    frame = t.read("qrels")
    frame.loc[qrel["row"], ["page_id", "doc_id"]] = [other["page_id"], other["doc_id"]]
    frame.at[qrel["row"], "element_ids"] = []
    t.write("qrels", frame)
    return Expect("queries", qrel["query_id"], "doc_adjacent/doc_near/doc_far evidence must lie in one document")


def adjacent_not_consecutive(t: Tables) -> Expect:
    evidence = t.evidence()
    pages = t.read("pages")
    n_pages = t.n_pages()
    adjacent = evidence[(evidence["evidence_structure"] == "doc_adjacent") & evidence["doc_id"].map(n_pages >= 3)]
    query = adjacent["query_id"].iloc[0]
    rows = adjacent[adjacent["query_id"] == query].sort_values("page_index")
    assert len(rows) == 2
    first, second = rows.iloc[0], rows.iloc[1]
    # Move the later page one further away (or the earlier one back) so the pages are 2 apart.
    if second["page_index"] + 1 < n_pages[second["doc_id"]]:
        row, target = second["row"], second["page_index"] + 1
    else:
        row, target = first["row"], first["page_index"] - 1
    new_page = pages[(pages["doc_id"] == first["doc_id"]) & (pages["page_index"] == target)]["page_id"].iloc[0]
    frame = t.read("qrels")
    frame.loc[row, "page_id"] = new_page
    frame.at[row, "element_ids"] = []
    t.write("qrels", frame)
    return Expect("queries", query, "doc_adjacent evidence pages must be consecutive")


def cross_doc_in_one_doc(t: Tables) -> Expect:
    evidence = t.evidence()
    pages = t.read("pages")
    cross = evidence[(evidence["evidence_structure"] == "cross_doc")]
    # A cross_doc query whose first evidence document has a page other than its evidence page.
    for _, rows in cross.groupby("query_id", sort=True):
        first, second = rows.iloc[0], rows.iloc[1]
        spare = pages[(pages["doc_id"] == first["doc_id"]) & (pages["page_id"] != first["page_id"])]
        if len(rows) == 2 and len(spare):
            break
    else:  # pragma: no cover - the synthetic benchmark always has one
        pytest.fail("no cross_doc query to corrupt")
    frame = t.read("qrels")
    frame.loc[second["row"], ["page_id", "doc_id"]] = [spare["page_id"].iloc[0], first["doc_id"]]
    frame.at[second["row"], "element_ids"] = []
    t.write("qrels", frame)
    return Expect("queries", first["query_id"], "cross_doc evidence must lie in at least two documents")


def unknown_element(t: Tables) -> Expect:
    frame = t.read("qrels")
    frame.at[6, "element_ids"] = [*frame.at[6, "element_ids"], "e99999"]
    t.write("qrels", frame)
    row = f"query_id={frame.loc[6, 'query_id']}, page_id={frame.loc[6, 'page_id']}"
    return Expect("qrels", row, f"element id 'e99999' is not in 'elements' for document {frame.loc[6, 'doc_id']}")


# ----------------------------------------------------------------------------------------------
# Empty tables, unreadable files, null values
# ----------------------------------------------------------------------------------------------


def empty_queries_and_qrels(t: Tables) -> Expect:
    for name in ("queries", "qrels"):
        pq.write_table(t.arrow(name).slice(0, 0), t.path(name))
    return Expect("queries", None, "the table has no rows")


def empty_elements_but_cited(t: Tables) -> Expect:
    pq.write_table(t.arrow("elements").slice(0, 0), t.path("elements"))
    qrels = t.read("qrels")
    first = qrels[qrels["element_ids"].map(len) > 0].iloc[0]
    row = f"query_id={first['query_id']}, page_id={first['page_id']}"
    return Expect("qrels", row, f"cites element id '{first['element_ids'][0]}' but the 'elements' table has no rows")


def truncated_queries(t: Tables) -> Expect:
    data = t.path("queries").read_bytes()
    t.path("queries").write_bytes(data[: len(data) // 2])
    return Expect("queries", None, f"cannot read {t.path('queries')}: not a valid Parquet file")


def garbage_pages(t: Tables) -> Expect:
    t.path("pages").write_bytes(np.random.default_rng(0).bytes(5000))
    return Expect("pages", None, f"cannot read {t.path('pages')}: not a valid Parquet file")


def corrupt_key_column(t: Tables) -> Expect:
    """A valid footer over a damaged data page of a column validation reads."""
    corrupt_column(t.path("qrels"), "page_id")
    return Expect("qrels", None, f"cannot read {t.path('qrels')}: not a valid Parquet file")


def _null_value(table: str, column: str, position: int, rule: str, value=None) -> Case:
    def case(t: Tables) -> Expect:
        frame = t.read(table)
        frame[column] = frame[column].astype(object)
        frame.loc[position, column] = value
        t.write(table, frame)
        key = {"documents": "doc_id", "pages": "page_id", "queries": "query_id"}.get(table)
        row = (
            str(frame.loc[position, key])
            if key
            else (
                f"query_id={frame.loc[position, 'query_id']}, page_id={frame.loc[position, 'page_id']}"
                if table == "qrels"
                else f"doc_id={frame.loc[position, 'doc_id']}, element_id={frame.loc[position, 'element_id']}"
            )
        )
        return Expect(table, row, rule)

    case.__name__ = f"null_{table}_{column}" if value is None else f"blank_{table}_{column}_{value!r}"
    return case


NULL_CASES: list[Case] = [
    _null_value("queries", "text", 3, "query text is null, empty or whitespace only"),
    _null_value("queries", "text", 8, "query text is null, empty or whitespace only", ""),
    _null_value("queries", "text", 13, "query text is null, empty or whitespace only", " \t\n "),
    _null_value("queries", "evidence_structure", 2, "column 'evidence_structure' is null"),
    _null_value("documents", "n_pages", 1, "column 'n_pages' is null"),
    _null_value("pages", "page_index", 9, "column 'page_index' is null"),
    _null_value("pages", "doc_id", 11, "column 'doc_id' is null"),
    _null_value("elements", "page_index", 5, "column 'page_index' is null"),
    _null_value("qrels", "doc_id", 4, "column 'doc_id' is null"),
]


# ----------------------------------------------------------------------------------------------
# benchmark.json name and page image paths
# ----------------------------------------------------------------------------------------------


def _bad_name(name: str) -> Case:
    def case(t: Tables) -> Expect:
        info = json.loads((t.root / "benchmark.json").read_text())
        info["name"] = name
        (t.root / "benchmark.json").write_text(json.dumps(info))
        return Expect("benchmark.json", None, f"'name' {name!r} must match [A-Za-z0-9._-]+ and not be '.' or '..'")

    case.__name__ = f"name_{name}"
    return case


def give_pages_image_files(t: Tables) -> pd.DataFrame:
    """Store every page's image as a small file under ``pages/`` (the synthetic benchmark has none)."""
    frame = t.read("pages")
    (t.root / "pages").mkdir()
    images = []
    for page_id in frame["page_id"]:
        (t.root / "pages" / f"{page_id}.png").write_bytes(page_id.encode() * 10)
        images.append({"bytes": None, "path": f"pages/{page_id}.png"})
    frame["image"] = images
    t.write("pages", frame)
    return frame


def _image_path(position: int, path: Callable[[Tables], str], rule: str) -> Case:
    def case(t: Tables) -> Expect:
        frame = give_pages_image_files(t)
        value = path(t)
        frame.at[position, "image"] = {"bytes": None, "path": value}
        t.write("pages", frame)
        return Expect("pages", frame.loc[position, "page_id"], f"image path {value!r} {rule}")

    case.__name__ = f"image_path_{rule.split(':')[0].replace(' ', '_')}_{position}"
    return case


def _symlink_outside(t: Tables) -> str:
    outside = t.root.parent / "outside.png"
    outside.write_bytes(b"not part of the benchmark")
    (t.root / "pages" / "link.png").symlink_to(outside)
    return "pages/link.png"


def _directory_link_outside(t: Tables) -> str:
    (t.root.parent / "elsewhere").mkdir()
    (t.root.parent / "elsewhere" / "x.png").write_bytes(b"x")
    (t.root / "pages" / "dir").symlink_to(t.root.parent / "elsewhere")
    return "pages/dir/x.png"


IMAGE_CASES: list[Case] = [
    _image_path(17, lambda t: str((t.root / "pages" / "p.png").resolve()), "is absolute"),
    _image_path(18, lambda t: "C:\\images\\p.png", "is absolute"),
    _image_path(19, lambda t: "../outside.png", "resolves outside the benchmark directory"),
    _image_path(20, lambda t: "pages/../../bench/pages/../../x.png", "resolves outside the benchmark directory"),
    _image_path(21, _symlink_outside, "resolves outside the benchmark directory"),
    _image_path(22, _directory_link_outside, "resolves outside the benchmark directory"),
    _image_path(23, lambda t: "pages/no-such-page.png", "does not exist"),
    _image_path(24, lambda t: "pages", "is not a regular file"),
]


def page_without_image(t: Tables) -> Expect:
    frame = give_pages_image_files(t)
    frame.at[30, "image"] = {"bytes": None, "path": None}
    t.write("pages", frame)
    return Expect(
        "pages", frame.loc[30, "page_id"], "page has no image (neither bytes nor a path) while other pages have one"
    )


def page_with_null_image(t: Tables) -> Expect:
    frame = give_pages_image_files(t)
    frame.at[31, "image"] = None
    t.write("pages", frame)
    return Expect(
        "pages", frame.loc[31, "page_id"], "page has no image (neither bytes nor a path) while other pages have one"
    )


def corrupt_column(path: Path, column: str) -> None:
    """Overwrite the middle of one column chunk with zeros, leaving the footer intact."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    middle = start + chunk.total_compressed_size // 2
    data[middle - 20 : middle + 20] = bytes(40)
    path.write_bytes(bytes(data))


CASES: list[Case] = [
    missing_info,
    invalid_json,
    missing_name,
    empty_name,
    info_not_object,
    missing_table_file,
    missing_column,
    missing_list_column,
    wrong_column_type,
    wrong_list_item_type,
    empty_key,
    null_key,
    *(
        _duplicate_row(table, position)
        for table, position in (
            ("documents", 3),
            ("pages", 50),
            ("elements", 100),
            ("queries", 40),
            ("qrels", 60),
        )
    ),
    n_pages_below_one,
    page_missing_doc,
    page_index_too_large,
    page_index_negative,
    duplicate_page_index,
    n_pages_mismatch,
    element_missing_doc,
    element_page_out_of_range,
    bad_structure,
    qrel_missing_query,
    qrel_missing_page,
    qrel_doc_mismatch,
    query_without_qrels,
    single_page_with_two_pages,
    multi_page_with_one_page,
    documents_unknown_with_one_page,
    within_doc_in_two_docs,
    adjacent_not_consecutive,
    cross_doc_in_one_doc,
    unknown_element,
    empty_queries_and_qrels,
    empty_elements_but_cited,
    truncated_queries,
    garbage_pages,
    corrupt_key_column,
    *NULL_CASES,
    *(_bad_name(name) for name in ("../../x", "/abs/olute", ".", "..", "a b", "x/y")),
    *IMAGE_CASES,
    page_without_image,
    page_with_null_image,
]


@pytest.fixture
def bench_copy(small_bench_dir, tmp_path) -> Path:
    root = tmp_path / "bench"
    shutil.copytree(small_bench_dir, root)
    return root


def test_valid_benchmark_loads(bench_copy):
    bench = load_benchmark(bench_copy)
    assert bench.name == "test-small"
    info = json.loads((bench_copy / "benchmark.json").read_text())
    assert bench.fingerprint == info["fingerprint"]
    for name, count in info["counts"].items():
        assert len(bench.table(name)) == count
    assert set(bench.queries["evidence_structure"]) == {
        "page_single",
        "page_multi",
        "doc_adjacent",
        "doc_near",
        "doc_far",
        "cross_doc",
    }


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_broken_benchmark_is_rejected(bench_copy, case: Case):
    expect = case(Tables(bench_copy))
    with pytest.raises(BenchmarkError) as raised:
        load_benchmark(bench_copy)
    error = raised.value
    assert error.table == expect.table, str(error)
    assert error.row == expect.row, str(error)
    assert expect.rule in error.rule, str(error)
    message = str(error)
    assert message.startswith(expect.table if expect.row is None else f"{expect.table}[{expect.row}]: ")
    assert expect.rule in message


def test_documents_unknown_is_accepted_on_two_or_more_pages(bench_copy):
    """The label of a multi-page query whose documents are not known loads wherever the evidence has
    two or more pages, in one document or several."""
    t = Tables(bench_copy)
    frame = t.read("queries")
    relabelled = frame["evidence_structure"].isin(["doc_near", "cross_doc"])
    frame.loc[relabelled, "evidence_structure"] = "multi_page_docs_unknown"
    t.write("queries", frame)
    bench = load_benchmark(bench_copy, memo=False)
    assert (bench.queries["evidence_structure"] == "multi_page_docs_unknown").sum() == relabelled.sum() > 0


def test_error_counts_every_offending_row(bench_copy):
    """The first offending row is named, and the message says how many rows break the rule."""
    t = Tables(bench_copy)
    frame = t.read("queries")
    frame.loc[[4, 11, 17], "evidence_structure"] = "nonsense"
    t.write("queries", frame)
    with pytest.raises(BenchmarkError) as raised:
        load_benchmark(bench_copy)
    assert raised.value.row == frame.loc[4, "query_id"]
    assert "(3 rows break this rule)" in str(raised.value)


def test_validate_false_skips_the_rules(bench_copy):
    unknown_element(Tables(bench_copy))
    bench = load_benchmark(bench_copy, validate=False)
    assert len(bench.qrels) > 0


def test_missing_directory(tmp_path):
    with pytest.raises(BenchmarkError, match="does not exist"):
        load_benchmark(tmp_path / "nowhere")


# ----------------------------------------------------------------------------------------------
# Fingerprint
# ----------------------------------------------------------------------------------------------


def test_fingerprint_ignores_row_order_and_layout(small_bench_dir, bench_copy):
    original = compute_fingerprint(small_bench_dir)
    rng = np.random.default_rng(0)
    for name in ("documents", "pages", "elements", "queries", "qrels"):
        table = pq.read_table(bench_copy / f"{name}.parquet")
        shuffled = table.take(pa.array(rng.permutation(table.num_rows)))
        if name == "documents":  # a wider integer type is cast back to int32 on read
            shuffled = shuffled.set_column(
                shuffled.schema.get_field_index("n_pages"), "n_pages", shuffled["n_pages"].cast(pa.int64())
            )
        pq.write_table(shuffled, bench_copy / f"{name}.parquet", row_group_size=7, compression="gzip")
    assert pq.ParquetFile(bench_copy / "pages.parquet").metadata.num_row_groups > 1
    assert not pq.read_table(bench_copy / "pages.parquet").equals(pq.read_table(small_bench_dir / "pages.parquet"))
    assert compute_fingerprint(bench_copy) == original
    assert load_benchmark(bench_copy).fingerprint == original


def test_fingerprint_changes_with_one_page_text(small_bench_dir, bench_copy):
    t = Tables(bench_copy)
    frame = t.read("pages")
    frame.loc[42, "dom_text"] = frame.loc[42, "dom_text"] + " one more word"
    t.write("pages", frame)
    assert compute_fingerprint(bench_copy) != compute_fingerprint(small_bench_dir)
    assert load_benchmark(bench_copy).fingerprint != compute_fingerprint(small_bench_dir)


# ----------------------------------------------------------------------------------------------
# What stays legal, and errors found after load
# ----------------------------------------------------------------------------------------------


def test_empty_elements_table_is_legal_when_no_qrel_cites_an_element(bench_copy):
    t = Tables(bench_copy)
    pq.write_table(t.arrow("elements").slice(0, 0), t.path("elements"))
    qrels = t.read("qrels")
    qrels["element_ids"] = [[] for _ in range(len(qrels))]
    t.write("qrels", qrels)
    bench = load_benchmark(bench_copy)
    assert len(bench.elements) == 0 and len(bench.queries) > 0


def test_image_paths_inside_the_benchmark_are_accepted(bench_copy):
    """'..' that stays inside, a symlink to a file inside, inline bytes beside a path that is not
    opened (Hugging Face keeps the original file name there)."""
    t = Tables(bench_copy)
    frame = give_pages_image_files(t)
    first = frame.loc[0, "page_id"]
    (bench_copy / "pages" / "alias.png").symlink_to(bench_copy / "pages" / f"{first}.png")
    frame.at[0, "image"] = {"bytes": None, "path": f"pages/../pages/{first}.png"}
    frame.at[1, "image"] = {"bytes": None, "path": "pages/alias.png"}
    frame.at[2, "image"] = {"bytes": b"\x89PNG inline", "path": "/original/location/page.png"}
    t.write("pages", frame)
    bench = load_benchmark(bench_copy)
    assert len(bench.pages) == len(frame)


def test_unreadable_column_found_after_load_names_table_and_file(bench_copy):
    """Validation reads key columns only; a damaged text column fails when it is read, naming it:
    at load by the fingerprint (which reads every column), else when the column is read."""
    t = Tables(bench_copy)
    corrupt_column(t.path("pages"), "dom_text")
    with pytest.raises(BenchmarkError, match=f"cannot read {t.path('pages')}: not a valid Parquet file"):
        load_benchmark(bench_copy)
    bench = load_benchmark(bench_copy, validate=False)
    with pytest.raises(BenchmarkError) as raised:
        _ = bench.pages
    assert raised.value.table == "pages" and raised.value.row is None
    assert f"cannot read {t.path('pages')}: not a valid Parquet file" in str(raised.value)
    with pytest.raises(BenchmarkError, match=r"cannot read .*pages\.parquet"):
        bench.arrow("pages", ["page_id", "dom_text"])


def test_damaged_shard_of_a_folder_table_is_named(small_bench_dir, tmp_path):
    root = tmp_path / "sharded"
    shutil.copytree(small_bench_dir, root)
    table = pq.read_table(root / "queries.parquet")
    (root / "queries.parquet").unlink()
    (root / "queries").mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), root / "queries" / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(half), root / "queries" / "train-00001-of-00002.parquet")
    second = root / "queries" / "train-00001-of-00002.parquet"
    load_benchmark(root)  # (both shards fine)
    corrupt_column(second, "query_id")
    with pytest.raises(BenchmarkError, match=f"^queries: cannot read {second}: not a valid Parquet file"):
        load_benchmark(root)
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])
    with pytest.raises(BenchmarkError, match=f"^queries: cannot read {second}: not a valid Parquet file"):
        load_benchmark(root)


def test_write_benchmark_refuses_an_unsafe_name_before_writing(small_bench, tmp_path):
    from vldocir.data.benchmark import write_benchmark

    tables = {name: small_bench.arrow(name) for name in ("documents", "pages", "elements", "queries", "qrels")}
    with pytest.raises(BenchmarkError, match=r"^benchmark.json: 'name' '\.\./escape' must match"):
        write_benchmark(tmp_path / "out", tables, {"name": "../escape"})
    assert not (tmp_path / "out").exists()


def test_hub_snapshot_images_may_link_into_the_repository_blob_store(small_bench_dir, tmp_path):
    """``snapshot_download`` stores files in ``blobs/`` and links to them from ``snapshots/<rev>/``."""
    repo = tmp_path / "hub" / "datasets--org--bench"
    root = repo / "snapshots" / "0123abcd"
    shutil.copytree(small_bench_dir, root)
    (repo / "blobs").mkdir()
    t = Tables(root)
    frame = t.read("pages")
    (root / "pages").mkdir()
    images = []
    for page_id in frame["page_id"]:
        blob = repo / "blobs" / f"blob-{page_id}"
        blob.write_bytes(page_id.encode())
        (root / "pages" / f"{page_id}.png").symlink_to(Path("../../../blobs") / blob.name)
        images.append({"bytes": None, "path": f"pages/{page_id}.png"})
    frame["image"] = images
    t.write("pages", frame)
    load_benchmark(root)
    # ... but not anywhere else.
    (tmp_path / "secret").write_bytes(b"x")
    (root / "pages" / "leak.png").symlink_to(tmp_path / "secret")
    frame.at[0, "image"] = {"bytes": None, "path": "pages/leak.png"}
    t.write("pages", frame)
    with pytest.raises(BenchmarkError, match=r"image path 'pages/leak.png' resolves outside the benchmark directory"):
        load_benchmark(root)
