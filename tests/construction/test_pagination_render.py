"""Where rendered documents are cut, checked on their pixels: the hand-written fixtures of
tests/fixtures/render/ (a table whose rules fall on row boundaries, a long two-column reference list,
a heading right above a page boundary) and the real pages of ``../shared/real-html/``.

A cut is clean when the page's last row, one row above it and the next page's first row hold no
ink, or when the five rows around it hold the same ink (vertical strokes only: the side rules of a
table between two of its rows). Then no text line and no horizontal rule is split between pages.
Browser tests are ``slow``; they skip, saying why, without Chromium or without the real pages.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from helpers import CHROMIUM, NO_CHROMIUM_REASON, REPO_ROOT, needs_chromium
from vldocir.construction.render import RenderConfig, load_layout, render_batch

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "render"
REAL_HTML = Path(os.environ.get("VLDOCIR_REAL_HTML", REPO_ROOT.parent / "shared" / "real-html"))
REAL_SOURCES = {
    "wikipedia-a": "wikipedia",
    "wikipedia-b": "wikipedia",
    "arxiv-1708.00137": "arxiv",
    "arxiv-1707.08043": "arxiv",
    "sec-def14a-893739": "sec",
}
SLACK = RenderConfig().cut_slack


NO_CHROMIUM = None if CHROMIUM else NO_CHROMIUM_REASON


def _image(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def cut_problems(doc) -> list[str]:
    """Every cut of ``doc`` whose rows are not clean, and every non-final page that ends with a
    heading, described; ``[]`` when all is well."""
    problems = []
    bg = np.array(doc.background, dtype=np.int16)
    for p, q in pairwise(doc.pages):
        a, b = _image(doc.directory / p.image), _image(doc.directory / q.image)
        rows = np.concatenate([a[p.content_height - 3 : p.content_height], b[:2]]).astype(np.int16)
        ink = (np.abs(rows - bg) > 8).any(axis=2)  # rows cut-3 .. cut+1
        blank = not ink[1:4].any()
        vertical = all((ink[i] == ink[0]).all() for i in range(1, 5))
        if not (blank or vertical):
            problems.append(
                f"{doc.doc_id}: cut {p.page_index}/{q.page_index} at {q.top} ({p.cut_reason}) has ink "
                f"{ink.sum(axis=1).tolist()} in rows {q.top - 3}..{q.top + 1}"
            )
        last = [e for e in doc.elements if e.page_index == p.page_index and e.atomic and not e.nested]
        if last and max(last, key=lambda e: e.doc_bbox[3]).element_type == "headline":
            problems.append(f"{doc.doc_id}: page {p.page_index} ends with a heading")
    return problems


def crossing(doc, page_index: int, slack: float = SLACK) -> list:
    """Atomic elements the cut below page ``page_index`` passes through by more than ``slack``."""
    cut = doc.pages[page_index + 1].top
    return [e for e in doc.elements if e.atomic and e.doc_bbox[1] + slack < cut < e.doc_bbox[3] - slack]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    if NO_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    out = tmp_path_factory.mktemp("pagination")
    names = ("table_rules", "references_two_column", "heading_boundary")
    report = render_batch(
        [(n, "generic", DATA / f"{n}.html") for n in names], out, RenderConfig(timeout_s=120), progress=False
    )
    assert report.failed == [], report.errors
    return {n: load_layout(out / n) for n in names}


@pytest.mark.slow
@needs_chromium
def test_a_table_rule_never_lands_on_both_pages(fixtures):
    doc = fixtures["table_rules"]
    assert len(doc.pages) >= 2
    assert cut_problems(doc) == []
    rows = [e for e in doc.elements if e.element_type == "table_row"]
    assert len(rows) == 71 and not any(e.spans_pages for e in rows)
    # the first cut falls inside the table, between two rows: their shared rule on one page only
    first = doc.pages[1].top
    assert min(e.doc_bbox[1] for e in rows) < first < max(e.doc_bbox[3] for e in rows)
    assert crossing(doc, 0) == []
    below = _image(doc.page_path(1))[:12].astype(np.int16)
    above = _image(doc.page_path(0))[doc.pages[0].content_height - 12 : doc.pages[0].content_height].astype(np.int16)

    def rule(px):  # a row across the table
        return (np.abs(px - np.array(doc.background)) > 8).sum(axis=1) > 1000

    assert rule(above).any() != rule(below).any(), (rule(above), rule(below))  # the rule on exactly one side


@pytest.mark.slow
@needs_chromium
def test_a_long_two_column_reference_list_is_cut_between_items(fixtures):
    doc = fixtures["references_two_column"]
    items = [e for e in doc.elements if (e.fact or "").startswith("ref-")]
    assert len(items) == 260 and len(doc.pages) >= 4
    # the two columns: items side by side
    assert len({round(e.doc_bbox[0]) for e in items}) == 2
    assert cut_problems(doc) == []
    for i, p in enumerate(doc.pages[:-1]):
        assert p.cut_reason in ("blank", "box_free", "push"), (i, p.cut_reason)
        assert crossing(doc, i) == [], (i, [e.fact for e in crossing(doc, i)])
    assert not any(e.spans_pages for e in items)


@pytest.mark.slow
@needs_chromium
def test_a_heading_moves_with_the_block_that_follows(fixtures):
    doc = fixtures["heading_boundary"]
    heading = next(e for e in doc.elements if e.fact == "kept-heading")
    paragraph = next(e for e in doc.elements if e.fact == "long-paragraph")
    assert heading.page_index == 1 and heading.bbox[1] < 10  # at the top of the next page
    assert paragraph.page_index == 1
    assert doc.pages[0].content_height <= 3700  # above the heading (device y 3700)
    assert cut_problems(doc) == []


@pytest.mark.slow
@needs_chromium
@pytest.mark.skipif(not REAL_HTML.is_dir(), reason=f"no real pages at {REAL_HTML} (set VLDOCIR_REAL_HTML)")
def test_real_pages_are_cut_only_at_clean_rows(tmp_path):
    """Every cut of every real document: clean rows, no heading alone at a page bottom, no list
    item cut, and no element cut when a cut between elements existed."""
    docs = [(d, s, REAL_HTML / d / "index.html") for d, s in REAL_SOURCES.items() if (REAL_HTML / d).is_dir()]
    assert docs
    report = render_batch(docs, tmp_path, RenderConfig(timeout_s=300), progress=False)
    assert report.failed == [], report.errors
    problems, cuts = [], 0
    for doc_id in report.rendered:
        doc = load_layout(tmp_path / doc_id)
        problems += cut_problems(doc)
        cuts += len(doc.pages) - 1
        for i, p in enumerate(doc.pages[:-1]):
            if p.cut_reason != "through":
                problems += [f"{doc_id}: cut {i} crosses {e.element_type} {e.text[:40]!r}" for e in crossing(doc, i)]
        problems += [
            f"{doc_id}: {e.element_type} {e.text[:40]!r} spans pages"
            for e in doc.elements
            if e.spans_pages and e.atomic and doc.pages[e.page_index].cut_reason != "through"
        ]
    assert cuts >= 20
    assert problems == []
