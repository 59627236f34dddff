"""The elements table's optional ``fragments`` column (issue #37): the boxes of an element split over
CSS columns or pages, each on its page. Benchmarks without it (the shipped mini) load as they are and
keep their fingerprint; one with it is written in the canonical type, hashed alike streamed or in
memory, and read back as the elements' evidence boxes and pages (``vldocir.data.evidence``)."""

from __future__ import annotations

import hashlib

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import MINI_DIR, SUBSET_DOCS, mini_subset
from vldocir.data.benchmark import compute_fingerprint, load_benchmark, write_benchmark
from vldocir.data.evidence import element_boxes, resolve_element_pages
from vldocir.data.fingerprint import table_stream
from vldocir.data.schema import FRAGMENTS_TYPE, TABLES
from vldocir.data.tables import read_table, sort_canonically


def test_a_benchmark_without_fragments_loads_unchanged():
    mini = load_benchmark(MINI_DIR)
    assert "fragments" not in pq.read_schema(MINI_DIR / "elements.parquet").names
    assert compute_fingerprint(MINI_DIR) == mini.info["fingerprint"]
    read = mini.arrow("elements", ["element_id", "page_index", "bbox", "fragments"])
    assert read.schema.field("fragments").type == FRAGMENTS_TYPE and read.column("fragments").null_count == len(read)
    row = read.slice(0, 1).to_pylist()[0]
    assert element_boxes(row["page_index"], row["bbox"], row["fragments"]) == [
        (row["page_index"], [float(v) for v in row["bbox"]])
    ]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """The mini subset again, with two elements split: one over two columns of its page, one over
    two pages (``fragments`` as the rendered builds write it: lists of dicts, None elsewhere)."""
    base = load_benchmark(mini_subset(tmp_path_factory.mktemp("subset") / "b", SUBSET_DOCS))
    elements = base.elements.copy()
    doc = SUBSET_DOCS[1]
    mine = elements.index[(elements["doc_id"] == doc) & (elements["page_index"] == 0)][:2]
    fragments = [None] * len(elements)
    fragments[mine[0]] = [
        {"page_index": 0, "bbox": [100.0, 3000.0, 980.0, 3990.0]},
        {"page_index": 0, "bbox": [1020.0, 200.0, 1900.0, 400.0]},
    ]
    fragments[mine[1]] = [
        {"page_index": 0, "bbox": [100.0, 3800.0, 1900.0, 4000.0]},
        {"page_index": 1, "bbox": [100.0, 0.0, 1900.0, 120.0]},
    ]
    elements["fragments"] = fragments
    ids = list(elements.loc[mine, "element_id"])
    # the other documents' rows lack the column (as PDFs' do when an input folder mixes them with HTML)
    ours = elements["doc_id"] == doc
    elements = pd.concat([elements[ours], elements[~ours].drop(columns="fragments")], ignore_index=True)
    tables = {n: base.arrow(n) for n in ("documents", "pages", "queries", "qrels")}
    root = tmp_path_factory.mktemp("split") / "b"
    bench = write_benchmark(root, {**tables, "elements": elements}, {"name": "split", "version": "test"})
    return bench, doc, ids


def test_fragments_are_written_in_their_type_and_hashed_alike_streamed_or_not(split):
    bench, _, _ = split
    path = bench.root / "elements.parquet"
    assert pq.read_schema(path).field("fragments").type == FRAGMENTS_TYPE
    assert bench.arrow("elements", ["fragments"]).column("fragments").null_count == len(bench.elements) - 2
    streamed = table_stream.SortedTableFile.open(TABLES["elements"], path, batch_rows=7)
    assert streamed is not None
    digest = hashlib.blake2b(digest_size=16)
    streamed.hash_stream(digest)
    in_memory = table_stream.ipc_stream(sort_canonically(TABLES["elements"], read_table(path)))
    assert digest.hexdigest() == hashlib.blake2b(in_memory, digest_size=16).hexdigest()
    assert compute_fingerprint(bench.root) == bench.info["fingerprint"]


def test_evidence_boxes_and_pages_come_from_the_fragments(split):
    bench, doc, (columns, pages) = split
    elements = bench.elements
    rows = elements[elements["doc_id"] == doc].set_index("element_id")
    by_column = rows.loc[columns]
    assert element_boxes(by_column["page_index"], by_column["bbox"], by_column["fragments"]) == [
        (0, [100.0, 3000.0, 980.0, 3990.0]),
        (0, [1020.0, 200.0, 1900.0, 400.0]),
    ]
    by_page = rows.loc[pages]
    assert [p for p, _ in element_boxes(by_page["page_index"], by_page["bbox"], by_page["fragments"])] == [0, 1]
    # its page: where it starts, or the page of its fragments the evidence was read from
    assert resolve_element_pages(elements, doc, [pages, columns]) == {pages: 0, columns: 0}
    assert resolve_element_pages(elements, doc, [pages, columns], pages={1}) == {pages: 1, columns: 0}
    assert resolve_element_pages(elements, doc, [pages], pages={2, 3}) == {pages: 0}
    # frames without the column, or holding NaN where one without it was concatenated
    assert resolve_element_pages(elements.drop(columns="fragments"), doc, [pages], pages={1}) == {pages: 0}
    mixed = pd.concat([elements.drop(columns="fragments"), elements.head(0)], ignore_index=True)
    assert resolve_element_pages(mixed, doc, [pages], pages={1}) == {pages: 0}
    assert element_boxes(0, [1, 2, 3, 4], float("nan")) == [(0, [1.0, 2.0, 3.0, 4.0])]
    with pytest.raises(KeyError, match="no element"):
        resolve_element_pages(elements, doc, ["nope"])


def test_the_fragments_column_type():
    assert pa.list_(pa.struct([("page_index", pa.int32()), ("bbox", pa.list_(pa.float32(), 4))])) == FRAGMENTS_TYPE
    assert TABLES["elements"].optional_column("fragments").default is None
