"""Where evidence lands and what structure it makes: the grounding rules every query path shares.

Template queries (:mod:`vldocir.queries.template_queries`), VLM-generated ones
(:mod:`vldocir.queries.vlm_generation`), evidence configurations
(:mod:`vldocir.queries.evidence_configs`), user-supplied queries and imported benchmarks
(:mod:`vldocir.importers.base`) resolve evidence to pages and label their structure through these
functions, so every benchmark is grounded one way. They are rules about the data, not steps of a
build: they live with the tables they read.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import pandas as pd

from vldocir.data.schema import UNKNOWN_DOCUMENTS_STRUCTURE

NEAR_MAX_GAP = 4
"""Default largest page distance of a Doc-Near pair (Doc-Far: larger). A built benchmark records the
value it used in ``benchmark.json`` (``built_by.near_max_gap`` or ``built_by.spec.near_max_gap``)."""


STRUCTURE_RULES: dict[str, object] = {
    "documents": "evidence pages in two or more documents: cross_doc; a source without document ids "
    f"(each page its own document): {UNKNOWN_DOCUMENTS_STRUCTURE} for two or more pages",
    "within_document": "largest gap between consecutive evidence pages (sorted, distinct page numbers): "
    "1 doc_adjacent, 2..near_max_gap doc_near, more doc_far",
    "near_max_gap": NEAR_MAX_GAP,
    "page_multi": "two or more evidence elements (boxes) on the query's one page; else page_single",
}
"""The rules :func:`evidence_structures` labels queries by, as recorded in an import's
``benchmark.json`` (``built_by.structure_rules``, with the ``near_max_gap`` it used) and printed
beside its structure counts."""


def structure_rules(near_max_gap: int = NEAR_MAX_GAP) -> dict[str, object]:
    """:data:`STRUCTURE_RULES` with the ``near_max_gap`` a benchmark was labelled with."""
    return {**STRUCTURE_RULES, "near_max_gap": int(near_max_gap)}


def pair_structure(gap: int, near_max_gap: int) -> str | None:
    """The within-document structure of two evidence pages ``gap`` pages apart (``gap`` >= 0):
    doc_adjacent (1), doc_near (2..near_max_gap), doc_far (more); ``None`` for the same page."""
    if gap < 1:
        return None
    if gap == 1:
        return "doc_adjacent"
    return "doc_near" if gap <= near_max_gap else "doc_far"


def within_document_structure(page_numbers: Iterable[int], near_max_gap: int) -> str | None:
    """The structure of evidence pages in one document: :func:`pair_structure` of the largest gap
    between consecutive distinct pages (:data:`STRUCTURE_RULES`); ``None`` for fewer than two
    distinct pages."""
    numbers = sorted(set(page_numbers))
    if len(numbers) < 2:
        return None
    return pair_structure(max(b - a for a, b in itertools.pairwise(numbers)), near_max_gap)


def evidence_types(element_types: Iterable[str]) -> list[str]:
    """The ``evidence_types`` of a query from its evidence elements' types (sorted, distinct); a
    figure is always read with its caption text, so evidence with an image is ``[image, text]``."""
    types = sorted(set(element_types))
    return ["image", "text"] if "image" in types else types


def page_id(doc_id: str, page_index: int) -> str:
    """The page id convention of generated benchmarks."""
    return f"{doc_id}-p{page_index:03d}"


def _fragments(value: Any) -> list:
    """An element's recorded fragments, ``[]`` for none (null; NaN where a frame without the column
    was concatenated with one holding it)."""
    return [] if value is None or isinstance(value, float) else list(value)


def element_boxes(page_index: int, bbox: Sequence[float], fragments: Any = None) -> list[tuple[int, list[float]]]:
    """``[(page_index, [x0, y0, x1, y1]), ...]``: each box an element is drawn in, on its page, in page
    pixels: the ``fragments`` of an element split over CSS columns or pages (the elements table's
    optional column: ``[{page_index, bbox}]``), else its one box ``bbox`` on ``page_index``. These are
    its evidence boxes: its union ``bbox`` would cover what lies between its parts (the notes beside a
    note broken across two columns)."""
    split = _fragments(fragments)
    if split:
        return [(int(f["page_index"]), [float(v) for v in f["bbox"]]) for f in split]
    return [(int(page_index), [float(v) for v in bbox])]


def resolve_element_pages(
    elements: pd.DataFrame, doc_id: str, element_ids: Sequence[str], pages: Collection[int] | None = None
) -> dict[str, int]:
    """Map cited element ids of one document to the page each was rendered on.

    ``elements`` is the benchmark's elements table (``doc_id, element_id, page_index``, optionally
    ``fragments``). An element drawn on several pages (its fragments) belongs to the page where its
    box starts; given ``pages`` (the pages the evidence was read from, e.g. a configuration's), to the
    first page of its fragments among them when that one is not. Unknown ids raise ``KeyError``
    naming them (a generation output citing them is discarded).
    """
    doc = elements[elements["doc_id"] == doc_id].set_index("element_id")
    missing = [e for e in element_ids if e not in doc.index]
    if missing:
        raise KeyError(f"document {doc_id} has no element(s) {', '.join(missing)}")
    out = {e: int(doc.at[e, "page_index"]) for e in element_ids}
    if pages is not None and "fragments" in doc.columns:
        for e, page in out.items():
            shown = [int(f["page_index"]) for f in _fragments(doc.at[e, "fragments"]) if int(f["page_index"]) in pages]
            if page not in pages and shown:
                out[e] = shown[0]
    return out


def evidence_structures(
    evidence: pd.DataFrame, near_max_gap: int = NEAR_MAX_GAP, *, documents_known: bool = True
) -> pd.Series:
    """The evidence structure of each query from its evidence pages, the rule of every query path
    (:data:`STRUCTURE_RULES`):

    - pages in two or more documents: ``cross_doc``;
    - two or more pages of one document: :func:`pair_structure` of the **largest gap between
      consecutive evidence pages** (sorted, distinct page numbers), so a run of consecutive pages is
      ``doc_adjacent`` however long, and one far page makes the set ``doc_far``; for two pages this
      is their distance (the rule generated benchmarks are built with);
    - one page: ``page_multi`` when two or more evidence elements lie on it, else ``page_single``;
    - ``documents_known=False`` (a source without document ids: each page was made its own
      document): two or more pages are ``multi_page_docs_unknown``
      (:data:`~vldocir.data.schema.UNKNOWN_DOCUMENTS_STRUCTURE`): nothing says whether they lie in
      one document or several.

    ``evidence``: one row per (query, evidence page) with ``query_id``, ``doc_id``, ``page_number``
    (the page's position in its document, as the source numbers its pages: distances are measured
    on it) and optionally ``n_elements`` (evidence elements on that page; absent: 1). Returns a
    Series of structure names indexed by ``query_id`` (sorted).
    """
    frame = evidence.assign(n_elements=evidence.get("n_elements", 1))
    grouped = frame.groupby("query_id", sort=True)
    stats = grouped.agg(
        n_docs=("doc_id", "nunique"),
        n_pages=("page_number", "size"),
        n_elements=("n_elements", "max"),
    )
    pages = frame[["query_id", "page_number"]].drop_duplicates().sort_values(["query_id", "page_number"])
    gaps = pages["page_number"].diff().where(pages["query_id"].eq(pages["query_id"].shift()))
    stats["largest_gap"] = gaps.groupby(pages["query_id"]).max().reindex(stats.index).fillna(0)
    structure = pd.Series("page_single", index=stats.index, dtype=object, name="evidence_structure")
    structure[(stats["n_pages"] == 1) & (stats["n_elements"] >= 2)] = "page_multi"
    within = (stats["n_docs"] == 1) & (stats["n_pages"] >= 2)
    structure[within] = [pair_structure(int(gap), near_max_gap) for gap in stats["largest_gap"][within]]
    structure[stats["n_docs"] >= 2] = "cross_doc"
    if not documents_known:
        structure[stats["n_pages"] >= 2] = UNKNOWN_DOCUMENTS_STRUCTURE
    return structure
