"""What the renderer draws and what it records must agree (issue #23, defects 1, 2 and 9), on pages
written for the tests (tests/fixtures/render/defect_*.html):

- a ``<noscript>`` is not drawn as raw markup once the document's scripts are switched off; with
  ``javascript=false`` its content is markup, drawn and recorded;
- MathML ``<mfenced>`` is drawn with its fences and separators (pixel for pixel like the same
  formula written with ``<mo>``), and they are in the formula's text and the DOM text;
- layout tables (figure-panel grids, image grids, ``role=presentation``, spacers) are no ``table``
  elements: their content is recorded as what it is; data tables stay tables;
- the alt text of an image that failed to load is drawn, so it is in the DOM text; video, audio and
  frames are listed (``image`` for a video showing its poster, ``media``, ``embed``), and every
  drawn pixel of the page lies in some element's box.

Each document is rendered once (module fixture). The browser tests are ``slow`` and are skipped,
saying why, where no Chromium is found.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
import pytest

from helpers import CHROMIUM, NO_CHROMIUM_REASON
from vldocir.construction.render import ELEMENT_TYPES, RenderConfig, Renderer

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "render"
DOCS = ("defect_noscript", "defect_mfenced", "defect_layout_tables", "defect_media")
MAGENTA = (255, 0, 255)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM_REASON or "")]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    out = tmp_path_factory.mktemp("defects")
    with Renderer(RenderConfig(timeout_s=60)) as renderer:
        rendered = {name: renderer.render(name, "generic", DATA / f"{name}.html", out) for name in DOCS}
    with Renderer(RenderConfig(timeout_s=60, javascript=False)) as renderer:
        rendered["noscript_off"] = renderer.render("noscript_off", "generic", DATA / "defect_noscript.html", out)
    return rendered


# --- helpers -----------------------------------------------------------------------------------


def _pixels(doc, page_index: int = 0) -> np.ndarray:
    from PIL import Image

    with Image.open(doc.directory / doc.pages[page_index].image) as im:
        return np.asarray(im.convert("RGB")).astype(int)


def _element(doc, fact: str):
    found = [e for e in doc.elements if e.fact == fact]
    assert len(found) == 1, f"{fact}: {[(e.element_id, e.element_type) for e in found]}"
    return found[0]


def _crop(doc, e) -> np.ndarray:
    x0, y0, x1, y1 = (round(v) for v in e.bbox)
    return _pixels(doc, e.page_index)[y0:y1, x0:x1]


def _dom_text(doc) -> str:
    return "\n".join(p.dom_text for p in doc.pages)


def _plain(text: str) -> str:
    """Text with MathML's mathematical italic letters folded to plain ones and no spaces."""
    return "".join(unicodedata.normalize("NFKC", text).split())


def _uncovered(doc, page_index: int = 0, margin: int = 4) -> np.ndarray:
    """``(n, 2)`` rows, columns of the page's drawn pixels (away from the background) that lie in
    no recorded element's box (grown by ``margin``)."""
    px = _pixels(doc, page_index)
    drawn = (np.abs(px - np.array(doc.background)) > 40).any(axis=-1)
    covered = np.zeros_like(drawn)
    for e in doc.elements:
        if e.page_index == page_index:
            x0, y0, x1, y1 = (round(v) for v in e.bbox)
            covered[max(0, y0 - margin) : y1 + margin, max(0, x0 - margin) : x1 + margin] = True
    return np.argwhere(drawn & ~covered)


# --- defect 1: noscript --------------------------------------------------------------------------


def test_noscript_is_not_drawn_as_raw_markup(docs):
    doc = docs["defect_noscript"]
    magenta = (np.abs(_pixels(doc) - np.array(MAGENTA)) <= 12).all(axis=-1)
    assert magenta.sum() == 0, f"{magenta.sum()} magenta pixels: the noscript's text is drawn"
    text = _dom_text(doc)
    assert "The article's last paragraph." in text and "After the noscript." in text
    assert "CentralAutoLogin" not in text and not [e for e in doc.elements if e.fact == "ns-p"]
    assert len(_uncovered(doc)) == 0


def test_noscript_content_is_content_when_javascript_is_off(docs):
    doc = docs["noscript_off"]
    p = _element(doc, "ns-p")
    assert p.element_type == "text" and p.text == "This page works best with JavaScript switched on."
    assert p.text in _dom_text(doc).split("\n")
    assert (np.abs(_crop(doc, p) - np.array(MAGENTA)) <= 12).all(axis=-1).sum() > 50  # drawn where recorded
    assert "CentralAutoLogin" not in _dom_text(doc)


# --- defect 2: mfenced ---------------------------------------------------------------------------


def test_mfenced_is_drawn_like_its_written_out_form(docs):
    doc = docs["defect_mfenced"]
    fenced, written = _element(doc, "mf-fenced"), _element(doc, "mf-written")
    a, b = _crop(doc, fenced), _crop(doc, written)
    assert a.shape == b.shape, (fenced.bbox, written.bbox)  # before the fix: no fences, narrower
    assert np.abs(a - b).max() <= 8
    assert fenced.text == written.text == "f[a;b;c]"


def test_mfenced_fences_and_separators_are_in_the_text(docs):
    doc = docs["defect_mfenced"]
    assert _element(doc, "mf-math").text == "d(X,Y)=12∑|Xi−Yi|"
    paragraph = _element(doc, "mf-inline")
    assert "d(X,Y)=12∑|Xi−Yi|" in _plain(paragraph.text), paragraph.text
    assert "d(X,Y)=12∑|Xi−Yi|" in _plain(_dom_text(doc))
    assert _element(doc, "mf-alttext").text == "g(u,v)"  # a source is kept as it is
    assert _element(doc, "mf-nosep").text == "{pq}"  # separators="": none


# --- defect 9: layout tables, alt text, media ----------------------------------------------------


def test_layout_tables_are_recorded_as_their_content(docs):
    doc = docs["defect_layout_tables"]
    facts = {e.fact for e in doc.elements}
    for layout in ("grid", "grid-row", "img-grid", "img-grid-row", "pres", "pres-row", "spacer"):
        assert layout not in facts, layout
    assert not [e for e in doc.elements if e.element_type in ("table", "table_row") and not e.text.strip()]
    for panel in ("panel-a", "panel-b", "thumb-1", "thumb-2"):
        e = _element(doc, panel)
        assert e.element_type == "image" and not e.nested, panel
    assert _element(doc, "cap-a").element_type == "caption" and _element(doc, "cap-a").text == "(a) left panel"
    assert _element(doc, "cap-b").text == "(b)"
    assert _element(doc, "pres-left").element_type == "text"
    lines = _dom_text(doc).split("\n")
    for line in ("(a) left panel", "Left column of the layout.", "Right column of the layout."):
        assert line in lines, line
    # data tables stay tables, with their rows
    assert _element(doc, "data").element_type == "table" and _element(doc, "data-images").element_type == "table"
    assert [_element(doc, f).text for f in ("data-row-1", "data-row-2")] == ["Revenue 12.5", "Cost 3.1"]
    # a row that draws no text is no text unit: its images are recorded on their own
    assert "data-images-row" not in facts
    assert len([e for e in doc.elements if e.element_type == "image" and not e.nested]) == 4 + 2
    assert len(_uncovered(doc)) == 0


def test_failed_images_alt_text_is_in_the_dom_text(docs):
    doc = docs["defect_media"]
    lines = _dom_text(doc).split("\n")
    assert "Logo: ACME Corporation logo follows." in lines
    assert "See the annual report online." in lines
    assert "Quarterly revenue chart" in lines  # a block image on its own: its text is its alt
    block = _element(doc, "alt-block")
    assert block.element_type == "image" and block.text == "Quarterly revenue chart" and not block.nested
    assert (np.abs(_crop(doc, block) - np.array(doc.background)) > 100).any(axis=-1).sum() > 100  # drawn
    nested = _element(doc, "alt-inline")
    assert nested.text == "Logo: ACME Corporation logo follows."
    assert _element(doc, "loaded").text == "" and "an orange square" not in _dom_text(doc)  # not drawn
    failed = {f["element_id"]: f["alt"] for f in doc.images["failed"]}
    assert failed[block.element_id] == "Quarterly revenue chart"


def test_video_audio_and_frames_are_listed(docs):
    doc = docs["defect_media"]
    expected = {
        "video-poster": "image",  # its poster (a local file) is drawn
        "video-blank": "media",
        "audio": "media",
        "audio-inline": "media",
        "frame": "embed",
    }
    for fact, etype in expected.items():
        e = _element(doc, fact)
        assert e.element_type == etype and e.atomic and e.text == "", (fact, e)
    assert _element(doc, "audio-inline").nested
    assert _element(doc, "audio-in-text").text == "Listen here."
    assert {e.element_type for e in doc.elements} <= set(ELEMENT_TYPES)
    orange = (np.abs(_crop(doc, _element(doc, "video-poster")) - np.array((250, 140, 20))) <= 12).all(axis=-1)
    assert orange.mean() > 0.5  # its poster, pixel.png (square, letterboxed in the 16:9 player)
    uncovered = _uncovered(doc)
    assert len(uncovered) == 0, f"{len(uncovered)} drawn pixels in no element, e.g. (row, col) {uncovered[:3].tolist()}"
