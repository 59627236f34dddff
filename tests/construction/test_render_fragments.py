"""Elements split over CSS columns or pages are recorded as their fragments (issue #37, defect 3), on
pages written for the tests (tests/fixtures/render/):

- ``references_column_break``: a two-column reference list whose long note 5 starts at the bottom of
  the first column and ends at the top of the second. Its union box spans both columns and covers
  the other notes; its fragments are one box per column, overlapping no other note;
- ``paragraph_page_break``: a paragraph taller than a page, recorded with one fragment per page.

Splitting boxes at the page boundaries is checked without a browser. The browser tests are
``slow`` and are skipped, saying why, where no Chromium is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import CHROMIUM, NO_CHROMIUM_REASON
from vldocir.construction.render import RenderConfig, load_layout, render_batch

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "render"
DOCS = ("references_column_break", "paragraph_page_break")


def _area(a, b) -> float:
    """Area of the intersection of two ``[x0, y0, x1, y1]`` boxes."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _boxes(e) -> list[tuple[int, list[float]]]:
    """``(page_index, box)`` of each box an element is drawn in: its fragments, else its box."""
    fragments = getattr(e, "fragments", None)
    return [(f["page_index"], f["bbox"]) for f in fragments] if fragments else [(e.page_index, e.bbox)]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM_REASON)
    out = tmp_path_factory.mktemp("fragments")
    report = render_batch(
        [(n, "generic", DATA / f"{n}.html") for n in DOCS], out, RenderConfig(timeout_s=60), progress=False
    )
    assert report.failed == [], report.errors
    return {n: load_layout(out / n) for n in DOCS}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM_REASON or "")
def test_a_note_broken_across_columns_is_recorded_as_one_box_per_column(docs):
    doc = docs["references_column_break"]
    notes = {e.fact: e for e in doc.elements if (e.fact or "").startswith("note-")}
    assert len(notes) == 11
    # no note's boxes overlap another note's (its union box would cover the notes beside it)
    overlaps = [
        (a, b)
        for a in notes
        for b in notes
        if a < b and any(p == q and _area(x, y) > 0 for p, x in _boxes(notes[a]) for q, y in _boxes(notes[b]))
    ]
    assert overlaps == []
    broken = notes["note-5"]
    assert sum(_area(broken.bbox, e.bbox) > 0 for e in notes.values() if e is not broken) >= 5  # the union box
    # two fragments, one in each column: the left edges of the notes that are one box
    lefts = sorted({round(e.bbox[0]) for e in notes.values() if e.fragments is None})
    assert len(lefts) == 2
    first, second = (f["bbox"] for f in broken.fragments)
    assert len(broken.fragments) == 2 and {f["page_index"] for f in broken.fragments} == {broken.page_index}
    assert round(first[0]) == lefts[0] and first[2] < lefts[1]  # the first column, at its bottom
    assert round(second[0]) == lefts[1] and second[1] < first[1]  # the second column, at its top
    for x0, y0, x1, y1 in (first, second):  # within the union box
        assert broken.bbox[0] <= x0 < x1 <= broken.bbox[2] and broken.bbox[1] <= y0 < y1 <= broken.bbox[3]
    # every other note is one box in one column
    assert [e.fact for e in notes.values() if e.fragments] == ["note-5"]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM_REASON or "")
def test_a_paragraph_over_two_pages_has_a_fragment_on_each(docs):
    doc = docs["paragraph_page_break"]
    assert len(doc.pages) == 2
    long = next(e for e in doc.elements if e.fact == "long")
    assert long.spans_pages and long.page_index == 0
    assert [f["page_index"] for f in long.fragments] == [0, 1]
    on_first, on_second = (f["bbox"] for f in long.fragments)
    assert on_first == long.bbox  # the part on its page
    cut = doc.pages[1].top
    assert on_second[1] == 0 and on_second[3] == pytest.approx(long.doc_bbox[3] - cut, abs=0.01)
    assert on_second[3] <= doc.pages[1].content_height
    assert all(e.fragments is None for e in doc.elements if e.fact in ("before", "after"))


# --- without a browser ----------------------------------------------------------------------------


def test_boxes_are_split_at_page_boundaries_as_elements_are_placed():
    from vldocir.construction.paginate import split_over_pages

    cuts = [0, 100, 200, 300]
    assert split_over_pages([[0, 10, 50, 40]], cuts) == [(0, [0, 10, 50, 40])]
    # over three pages, in page order, each relative to its page
    assert split_over_pages([[5, 50, 60, 250]], cuts) == [
        (0, [5, 50, 60, 100]),
        (1, [5, 0, 60, 100]),
        (2, [5, 0, 60, 50]),
    ]
    # within slack of a cut: the sliver goes, as assign_elements places the element on one page
    assert split_over_pages([[0, 97, 10, 150], [0, 50, 10, 103]], cuts, slack=4) == [
        (1, [0, 0, 10, 50]),
        (0, [0, 50, 10, 100]),
    ]
    # column fragments keep their order; x clipped to the page
    assert split_over_pages([[-5, 80, 40, 120], [60, 10, 130, 30]], cuts, page_width=100) == [
        (0, [0, 80, 40, 100]),
        (1, [0, 0, 40, 20]),
        (0, [60, 10, 100, 30]),
    ]
    with pytest.raises(ValueError, match="strictly increasing"):
        split_over_pages([[0, 0, 1, 1]], [0])


def test_elements_get_fragments_only_when_split():
    import numpy as np

    from vldocir.construction.render.layout import RenderedPage, place_elements

    elems = [
        {
            "id": "e0",
            "type": "text",
            "box": [0, 10, 100, 40],
            "text": "one",
            "fact": None,
            "atomic": True,
            "nested": False,
            "fragments": None,
        },
        {
            "id": "e1",
            "type": "text",
            "box": [0, 60, 100, 150],
            "text": "two",
            "fact": None,
            "atomic": True,
            "nested": False,
            "fragments": None,
        },
        {
            "id": "e2",
            "type": "text",
            "box": [0, 20, 200, 90],
            "text": "three",
            "fact": None,
            "atomic": True,
            "nested": False,
            "fragments": [[0, 70, 90, 90], [110, 20, 200, 40]],
        },
    ]
    pages = [RenderedPage(i, f"page-{i:03d}.png", 200, 100, 100 * i, 100, "blank", "") for i in range(2)]
    boxes = np.array([e["box"] for e in elems], dtype=np.float64)
    placed = place_elements(elems, boxes, [0, 100, 200], pages, page_width=200)
    assert placed[0].fragments is None
    assert placed[1].fragments == [
        {"page_index": 0, "bbox": [0, 60, 100, 100]},
        {"page_index": 1, "bbox": [0, 0, 100, 50]},
    ]
    assert placed[2].fragments == [
        {"page_index": 0, "bbox": [0, 70, 90, 90]},
        {"page_index": 0, "bbox": [110, 20, 200, 40]},
    ]
    assert placed[2].bbox == [0, 20, 200, 90]  # the box around all of it
