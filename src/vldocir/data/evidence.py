"""Where evidence lands and what structure it makes: the grounding rules every query path shares.

Template queries (:mod:`vldocir.queries.template_queries`), VLM-generated ones
(:mod:`vldocir.queries.vlm_generation`), evidence configurations
(:mod:`vldocir.queries.evidence_configs`), user-supplied queries and imported benchmarks
(:mod:`vldocir.importers.base`) resolve evidence to pages and label their structure through these
functions, so every benchmark is grounded one way. They are rules about the data, not steps of a
build: they live with the tables they read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


def evidence_types(element_types: Iterable[str]) -> list[str]:
    """The ``evidence_types`` of a query from its evidence elements' types (sorted, distinct); a
    figure is always read with its caption text, so evidence with an image is ``[image, text]``."""
    types = sorted(set(element_types))
    return ["image", "text"] if "image" in types else types


def page_id(doc_id: str, page_index: int) -> str:
    """The page id convention of generated benchmarks."""
    return f"{doc_id}-p{page_index:03d}"


def resolve_element_pages(elements: pd.DataFrame, doc_id: str, element_ids: Sequence[str]) -> dict[str, int]:
    """Map cited element ids of one document to the page each was rendered on.

    ``elements`` is the benchmark's elements table (``doc_id, element_id, page_index``). An element
    that spans pages belongs to the page where its box starts. Unknown ids raise ``KeyError``
    naming them (a generation output citing them is discarded).
    """
    doc = elements[elements["doc_id"] == doc_id].set_index("element_id")["page_index"]
    missing = [e for e in element_ids if e not in doc.index]
    if missing:
        raise KeyError(f"document {doc_id} has no element(s) {', '.join(missing)}")
    return {e: int(doc[e]) for e in element_ids}


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
