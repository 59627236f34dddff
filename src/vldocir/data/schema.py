"""The benchmark's tables: their columns, Arrow types and key columns (DESIGN.md §2).

A benchmark is a directory holding one Parquet file per table plus ``benchmark.json``. Columns
listed in a table's schema are required; its optional columns (:class:`OptionalColumn`: qrels
``grade``, queries ``language``) may be absent, and a reader that asks for one then gets its default
(:meth:`vldocir.data.benchmark.Benchmark.arrow`); the fingerprint covers the columns the files
hold. A table may carry further columns, which are kept and ignored.

Units: ``pages.width``/``height`` are pixels of the stored page image; a page without an image
(text-only benchmarks) gives the pixels of the layout it was cut from (2000x4000 for rendered HTML)
or null where there is none (BEIR's passages). ``elements.bbox`` is in those same page pixels; so
are the boxes of the optional ``elements.fragments`` (an element split over columns or pages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

EVIDENCE_STRUCTURES: tuple[str, ...] = (
    "page_single",
    "page_multi",
    "doc_adjacent",
    "doc_near",
    "doc_far",
    "cross_doc",
)
"""The six evidence structures, in the paper's order (which is also the order of every report)."""

UNKNOWN_DOCUMENTS_STRUCTURE = "multi_page_docs_unknown"
"""The label of a query with evidence on two or more pages whose documents are not known (an imported
source without document ids, where each page was made its own document): neither ``cross_doc`` nor
within one document. Not one of :data:`EVIDENCE_STRUCTURES`, so structure Macro leaves it out."""

STRUCTURE_LABELS: tuple[str, ...] = (*EVIDENCE_STRUCTURES, UNKNOWN_DOCUMENTS_STRUCTURE)
"""Every ``evidence_structure`` a query may carry."""

SOURCES: tuple[str, ...] = ("wikipedia", "arxiv", "pubmed", "sec")
"""The document sources of the paper: each has its renderer clean-up rules and query prompts."""

DECLARED_SOURCES_KEY = "sources"
"""The ``benchmark.json`` key listing the document sources a benchmark declares (imported benchmarks
declare their own, e.g. ``["vidore_v3_hr"]``); documents and queries must name one of them. A
benchmark that declares none is held to :data:`SOURCES`."""

CORPUS_ONLY_METHOD = "none"
"""``built_by.queries.method`` of a benchmark built without queries (``queries=none``): a corpus,
whose ``queries`` and ``qrels`` tables may then have no rows."""

SINGLE_PAGE_STRUCTURES = frozenset({"page_single", "page_multi"})
"""Evidence on exactly one page (Page-Multi means several elements of that one page)."""

WITHIN_DOC_STRUCTURES = frozenset({"doc_adjacent", "doc_near", "doc_far"})
"""Evidence on two or more pages of one document."""

MULTI_PAGE_STRUCTURES = WITHIN_DOC_STRUCTURES | {"cross_doc"}
"""Evidence on two or more pages: the distributed-evidence structures."""

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
"""A page image as Hugging Face ``datasets.Image`` stores it: encoded bytes, or a path relative to
the benchmark directory, or both."""

BBOX_TYPE = pa.list_(pa.float32(), 4)
"""An element's box on its page, ``[x0, y0, x1, y1]`` in page pixels."""

FRAGMENTS_TYPE = pa.list_(pa.struct([("page_index", pa.int32()), ("bbox", BBOX_TYPE)]))
"""The boxes of an element drawn in several places, each on its page (``elements.fragments``)."""


@dataclass(frozen=True)
class OptionalColumn:
    """A column a table may lack: readers that ask for it get ``default`` in every row."""

    field: pa.Field
    default: Any
    doc: str = ""


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    key: tuple[str, ...]
    """Columns that identify a row; unique within the table, and used to name a row in errors."""
    not_null: tuple[str, ...] = ()
    """Further columns that every row must fill (key columns must be filled and non-empty too)."""
    may_be_empty: bool = False
    """Whether the table may have no rows at all."""
    optional: tuple[OptionalColumn, ...] = ()
    """Columns that may be absent (see the module docstring); present, they must have this type."""

    def optional_column(self, name: str) -> OptionalColumn | None:
        return next((c for c in self.optional if c.field.name == name), None)

    @property
    def file_name(self) -> str:
        return f"{self.name}.parquet"


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            "documents",
            pa.schema(
                [
                    ("doc_id", pa.string()),
                    ("source", pa.string()),
                    ("domain", pa.string()),
                    ("title", pa.string()),
                    ("n_pages", pa.int32()),
                    ("url", pa.string()),
                    ("license", pa.string()),
                ]
            ),
            key=("doc_id",),
            not_null=("n_pages",),
        ),
        TableSpec(
            "pages",
            pa.schema(
                [
                    ("page_id", pa.string()),
                    ("doc_id", pa.string()),
                    ("page_index", pa.int32()),
                    ("image", IMAGE_TYPE),
                    ("width", pa.int32()),
                    ("height", pa.int32()),
                    ("dom_text", pa.string()),
                    ("ocr_text", pa.string()),
                ]
            ),
            key=("page_id",),
            not_null=("doc_id", "page_index"),
        ),
        TableSpec(
            "elements",
            pa.schema(
                [
                    ("doc_id", pa.string()),
                    ("element_id", pa.string()),
                    ("page_index", pa.int32()),
                    ("bbox", BBOX_TYPE),
                    ("element_type", pa.string()),
                ]
            ),
            key=("doc_id", "element_id"),
            not_null=("page_index",),
            may_be_empty=True,  # a benchmark whose qrels cite no element ids needs none
            optional=(
                OptionalColumn(
                    pa.field("fragments", FRAGMENTS_TYPE),
                    None,
                    "the boxes of an element drawn in two or more places (a note broken across CSS "
                    "columns, a paragraph split over pages): [{page_index, bbox}] in page pixels, in flow "
                    "order; null: one box, bbox on page_index (bbox stays the box around all of it on "
                    "page_index); absent (benchmarks built before it, PDFs, imports): every element is its "
                    "one box",
                ),
            ),
        ),
        TableSpec(
            "queries",
            pa.schema(
                [
                    ("query_id", pa.string()),
                    ("text", pa.string()),
                    ("answer", pa.string()),
                    ("evidence_structure", pa.string()),
                    ("source", pa.string()),
                    ("domain", pa.string()),
                    ("generator", pa.string()),
                    ("evidence_types", pa.list_(pa.string())),
                ]
            ),
            key=("query_id",),
            not_null=("evidence_structure",),  # (text has its own rule: not null, not blank)
            optional=(
                OptionalColumn(
                    pa.field("language", pa.string()),
                    None,
                    "the query's language (BCP 47 / ISO 639-1, e.g. 'en', 'fr'); null: not stated",
                ),
            ),
        ),
        TableSpec(
            "qrels",
            pa.schema(
                [
                    ("query_id", pa.string()),
                    ("page_id", pa.string()),
                    ("doc_id", pa.string()),
                    ("element_ids", pa.list_(pa.string())),
                ]
            ),
            key=("query_id", "page_id"),
            not_null=("doc_id",),
            optional=(
                OptionalColumn(
                    pa.field("grade", pa.int32()),
                    1,
                    "graded relevance (trec_eval's gain for nDCG); every qrel with grade > 0 is "
                    "evidence for RecallAll/nDCGAll; absent: 1 (binary benchmarks)",
                ),
            ),
        ),
    )
}

RUN_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("page_id", pa.string()),
        ("rank", pa.int32()),
        ("score", pa.float32()),
    ]
)
"""A run: the top-N pages per query, ``rank`` 1-based, sorted by query then rank."""
