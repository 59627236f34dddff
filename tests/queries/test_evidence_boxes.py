"""A generated query's evidence boxes (queries/vlm_generation.py, issue #37): the boxes of each cited
element, each on its page: the fragments of an element split over CSS columns or pages (the elements
table's ``fragments``), never its union box, which covers what lies between its parts."""

from __future__ import annotations

import pandas as pd

from vldocir.data.evidence import element_boxes
from vldocir.queries.vlm_generation import ConfigInput, _resolve

NOTE = [
    {"page_index": 3, "bbox": [100.0, 3000.0, 980.0, 3990.0]},
    {"page_index": 3, "bbox": [1020.0, 200.0, 1900.0, 400.0]},
]
LONG = [
    {"page_index": 3, "bbox": [100.0, 3800.0, 1900.0, 4000.0]},
    {"page_index": 4, "bbox": [100.0, 0.0, 1900.0, 120.0]},
]
ELEMENTS = pd.DataFrame(
    [
        ("d", "e1", 3, [100.0, 200.0, 1900.0, 3990.0], "text", NOTE),  # a note broken across two columns
        ("d", "e2", 3, [100.0, 3800.0, 1900.0, 4000.0], "text", LONG),  # a paragraph over pages 3 and 4
        ("d", "e3", 4, [100.0, 500.0, 900.0, 560.0], "text", None),
        ("d", "e4", 3, [1020.0, 420.0, 1900.0, 480.0], "text", None),
    ],
    columns=["doc_id", "element_id", "page_index", "bbox", "element_type", "fragments"],
)


def _query(structure: str, pages: list[int], evidence: list[str]) -> dict:
    item = ConfigInput(
        config={"config_id": 7, "structure": structure},
        pages=[("d", p) for p in pages],
        labels={"d": ""},
        known={e: ("d", e) for e in ("e1", "e2", "e3", "e4")},
    )
    boxes = {
        ("d", e): element_boxes(p, b, f)
        for e, p, b, f in ELEMENTS[["element_id", "page_index", "bbox", "fragments"]].itertuples(index=False)
    }
    types = {("d", e): "text" for e in ELEMENTS["element_id"]}
    query = {"question": "q?", "answer": "a", "evidence": evidence}
    return _resolve(item, 0, query, {"d": ELEMENTS}, boxes, types, 4)


def test_a_note_broken_across_columns_gives_one_box_per_column():
    resolved = _query("page_multi", [3], ["e1", "e4"])
    assert resolved["pages"] == {("d", 3): ["e1", "e4"]}
    assert resolved["boxes"] == {"d-p003": [NOTE[0]["bbox"], NOTE[1]["bbox"], [1020.0, 420.0, 1900.0, 480.0]]}
    assert resolved["structure"] == "page_multi"


def test_an_element_over_two_pages_has_a_box_on_each_and_its_page_from_the_configuration():
    first = _query("page_single", [3], ["e2"])
    assert first["pages"] == {("d", 3): ["e2"]}
    assert first["boxes"] == {"d-p003": [LONG[0]["bbox"]], "d-p004": [LONG[1]["bbox"]]}
    # shown the page it continues on, it is evidence there
    second = _query("doc_adjacent", [4, 6], ["e2", "e3"])
    assert second["pages"] == {("d", 4): ["e2", "e3"]}
    assert second["discard"] == "evidence_on_one_page"
