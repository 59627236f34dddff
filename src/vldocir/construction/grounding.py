"""Where evidence lands and what structure it makes: the grounding rules every query path shares.

Template queries (:mod:`vldocir.construction.template_queries`), VLM-generated ones
(:mod:`vldocir.construction.vlm_generation`), evidence configurations
(:mod:`vldocir.construction.evidence_configs`) and user-supplied queries resolve evidence to pages
and label their structure through these functions, so every benchmark is grounded one way.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pandas as pd

NEAR_MAX_GAP = 4
"""Default largest page distance of a Doc-Near pair (Doc-Far: larger). A built benchmark records the
value it used in ``benchmark.json`` (``built_by.near_max_gap`` or ``built_by.spec.near_max_gap``)."""


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
