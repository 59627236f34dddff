"""Rendering HTML documents into pages with headless Chromium (the hand-written fixtures of
tests/fixtures/render/ and a long generated document).

The browser tests are ``slow`` and are skipped, saying why, where no Chromium is found.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import socket
import threading
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from vldocir.construction.paginate import crossing_rows
from vldocir.construction.render import (
    CHROMIUM_ARGS,
    FAILURES_FILE,
    LAYOUT_FILE,
    LAYOUT_VERSION,
    NO_WEBRTC_ARGS,
    ChromiumNotFoundError,
    RenderConfig,
    Renderer,
    find_chromium,
    load_layout,
    render_batch,
)
from vldocir.construction.render import browser as browser_mod
from vldocir.construction.render import capture as capture_mod

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "render"
PAGE_W, PAGE_H = 2000, 4000
CUT_WINDOW = RenderConfig().cut_window
SLACK = RenderConfig().cut_slack

FIXTURES = {  # doc_id -> (source, file)
    "table_tall": ("generic", "table_tall.html"),
    "figure_straddle": ("generic", "figure_straddle.html"),
    "text_only": ("generic", "text_only.html"),
    # a document in the folder above: the next one (rendered in the same page) must not inherit
    # its wider file access
    "outer": ("generic", "../outer.html"),
    "broken_images": ("generic", "broken_images.html"),
    "malformed": ("generic", "malformed.html"),
    "clutter": ("wikipedia", "clutter.html"),
    "types": ("generic", "types.html"),
    "lazy": ("generic", "lazy.html"),
    "no_scroll_hooks": ("generic", "no_scroll_hooks.html"),
}


from helpers import CHROMIUM, NO_CHROMIUM_REASON, needs_chromium  # noqa: E402

# --- find_chromium (no browser needed) ---------------------------------------------------------


class _FakePlaywright:
    class chromium:
        executable_path = "/nonexistent/ms-playwright/chrome"


def test_find_chromium_order(tmp_path, monkeypatch):
    exe = tmp_path / "my-chrome"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    other = tmp_path / "env-chrome"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("VLDOCIR_CHROMIUM", str(other))
    assert find_chromium(str(exe), playwright=_FakePlaywright) == str(exe)  # configured wins
    assert find_chromium(None, playwright=_FakePlaywright) == str(other)  # then the environment
    monkeypatch.delenv("VLDOCIR_CHROMIUM")
    managed = type("P", (), {"chromium": type("C", (), {"executable_path": str(exe)})})
    assert find_chromium(None, playwright=managed) == str(exe)  # then Playwright's own
    monkeypatch.setattr(browser_mod, "SYSTEM_CHROMIUM_PATHS", (str(other),))
    assert find_chromium(None, playwright=_FakePlaywright) == str(other)  # then the system's


def test_find_chromium_errors_name_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.delenv("VLDOCIR_CHROMIUM", raising=False)
    monkeypatch.setattr(browser_mod, "SYSTEM_CHROMIUM_PATHS", (str(tmp_path / "no-chromium"),))
    monkeypatch.setattr(browser_mod, "SYSTEM_CHROMIUM_NAMES", ("no-such-chromium-xyz",))
    with pytest.raises(ChromiumNotFoundError) as err:
        find_chromium(None, playwright=_FakePlaywright)
    msg = str(err.value)
    assert "no-chromium" in msg and "no-such-chromium-xyz on PATH" in msg and "Playwright" in msg
    assert "apt-get install chromium" in msg
    with pytest.raises(ChromiumNotFoundError, match="configured Chromium"):
        find_chromium(str(tmp_path / "missing"), playwright=_FakePlaywright)
    monkeypatch.setenv("VLDOCIR_CHROMIUM", str(tmp_path / "missing"))
    with pytest.raises(ChromiumNotFoundError, match="VLDOCIR_CHROMIUM"):
        find_chromium(None, playwright=_FakePlaywright)


def test_config_validation():
    assert RenderConfig().page_width == 2000
    with pytest.raises(ValueError, match="image_format must be 'png' or 'jpeg', got 'gif'"):
        RenderConfig(image_format="gif")
    with pytest.raises(ValueError, match="cut_window must be in"):
        RenderConfig(cut_window=5000)
    cfg = RenderConfig()
    assert "nav" in cfg.selectors_for("wikipedia") and ".mw-editsection" in cfg.selectors_for("wikipedia")
    assert ".mw-editsection" not in cfg.selectors_for("arxiv")


# --- helpers -----------------------------------------------------------------------------------


def _image(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _element(doc, fact: str):
    found = [e for e in doc.elements if e.fact == fact]
    assert len(found) == 1, f"{fact}: {found}"
    return found[0]


def _near(pixels: np.ndarray, colour, tol: int = 6) -> np.ndarray:
    return (np.abs(pixels.astype(int) - np.array(colour)) <= tol).all(axis=-1)


class _Paragraphs(HTMLParser):
    """The text of every <p> of an HTML file, whitespace-normalised (an independent reading)."""

    def __init__(self):
        super().__init__()
        self.texts: list[str] = []
        self._buf: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self._buf = []

    def handle_endtag(self, tag):
        if tag == "p" and self._buf is not None:
            self.texts.append(" ".join("".join(self._buf).split()))
            self._buf = None

    def handle_data(self, data):
        if self._buf is not None:
            self._buf.append(data)


# --- rendering the fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory) -> Path:
    """The fixtures copied into docs/render/, with a real image *outside* that folder (which
    broken_images.html references as ../outside.png and which must be blocked)."""
    root = tmp_path_factory.mktemp("docs")
    shutil.copytree(DATA, root / "render")
    from PIL import Image

    Image.new("RGB", (20, 10), (255, 0, 0)).save(root / "outside.png")
    shutil.copy(DATA / "malformed.html", root / "outer.html")
    return root / "render"


@pytest.fixture(scope="module")
def rendered(docs_dir, tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM_REASON)
    out = tmp_path_factory.mktemp("rendered")
    docs = [(doc_id, source, docs_dir / name) for doc_id, (source, name) in FIXTURES.items()]
    t0 = time.monotonic()
    report = render_batch(docs, out, RenderConfig(timeout_s=60), progress=False)
    wall = time.monotonic() - t0
    return out, report, wall, {doc_id: load_layout(out / doc_id) for doc_id in report.rendered}


@pytest.mark.slow
@needs_chromium
def test_batch_renders_every_fixture(rendered):
    out, report, _wall, docs = rendered
    assert report.failed == [], report.errors
    assert sorted(report.rendered) == sorted(FIXTURES)
    assert report.pages_rendered == sum(len(d.pages) for d in docs.values())
    assert report.workers == min(2, os.cpu_count() or 1) or report.workers == 1  # cores, memory
    assert report.browser_launches == report.workers  # one browser per worker
    assert not [p for p in out.rglob("*") if ".staging-" in p.name]
    assert not (out / FAILURES_FILE).exists()
    for doc_id, doc in docs.items():
        layout = json.loads((out / doc_id / LAYOUT_FILE).read_text())
        assert layout["version"] == LAYOUT_VERSION and layout["n_pages"] == len(doc.pages)
        ids = [e.element_id for e in doc.elements]
        assert len(set(ids)) == len(ids) and all(re.fullmatch(r"e\d{5}", i) for i in ids)
        assert ids == sorted(ids)


@pytest.mark.slow
@needs_chromium
def test_every_page_image_is_2000x4000(rendered):
    _out, _, _, docs = rendered
    for doc in docs.values():
        files = sorted(p.name for p in doc.directory.glob("page-*.png"))
        assert files == [p.image for p in doc.pages]
        for p in doc.pages:
            px = _image(doc.directory / p.image)
            assert px.shape == (PAGE_H, PAGE_W, 3), (doc.doc_id, p.image)
            assert (p.width, p.height) == (PAGE_W, PAGE_H)
            # below the page's content: white padding
            assert (px[p.content_height :] == 255).all(), (doc.doc_id, p.page_index)


@pytest.mark.slow
@needs_chromium
def test_no_cut_crosses_an_atomic_element_when_a_box_free_cut_existed(rendered):
    _, _, _, docs = rendered
    checked = 0
    for doc in docs.values():
        atomic = np.array([e.doc_bbox for e in doc.elements if e.atomic], dtype=float).reshape(-1, 4)
        for p in doc.pages[:-1]:
            cut = p.top + p.content_height
            nominal = p.top + PAGE_H
            band_free = ~crossing_rows(atomic, nominal - CUT_WINDOW, nominal)
            # a cut may lie in an element's padding, within SLACK of its edge (pixels: clean)
            crossing = [b for b in atomic if b[1] + SLACK < cut < b[3] - SLACK]
            if band_free.any():
                checked += 1
                assert not crossing, (doc.doc_id, p.page_index, p.cut_reason, crossing)
                assert p.cut_reason in ("blank", "box_free")
            spanning = [e for e in doc.elements if e.page_index == p.page_index and e.spans_pages and e.atomic]
            if p.cut_reason != "through":
                assert not spanning, (doc.doc_id, p.page_index, spanning)
    assert checked >= 7  # six cuts of text_only, one of table_tall


@pytest.mark.slow
@needs_chromium
def test_tall_table_is_cut_between_rows(rendered):
    doc = rendered[3]["table_tall"]
    assert len(doc.pages) == 2
    first = doc.pages[0]
    assert first.cut_reason == "box_free"  # the table's rules leave no blank row
    assert first.content_height > PAGE_H - CUT_WINDOW
    rows = [e for e in doc.elements if e.element_type == "table_row"]
    assert len(rows) == 36 and [e.fact for e in rows] == [f"row-{i}" for i in range(36)]
    assert not any(e.spans_pages for e in rows)
    table = next(e for e in doc.elements if e.element_type == "table")
    assert table.spans_pages and not table.atomic  # a container may span pages
    assert {e.page_index for e in rows} == {0, 1}
    # the first row of page 1 starts at the very top of that page
    assert min(e.bbox[1] for e in rows if e.page_index == 1) < 8


@pytest.mark.slow
@needs_chromium
def test_figure_boxes_match_the_pixels(rendered):
    doc = rendered[3]["figure_straddle"]
    red, green, blue = (200, 30, 60), (30, 140, 70), (40, 60, 200)
    # The red figure covered the whole cut band of page 0: pushed to page 1, cut just above it
    # (one blank row above its first row: the cut's margin).
    assert doc.pages[0].cut_reason == "push" and doc.pages[0].content_height == 3099
    fig = _element(doc, "red-figure")
    assert fig.element_type == "image" and fig.page_index == 1 and not fig.spans_pages
    assert fig.bbox == [100.0, 1.0, 1500.0, 1201.0]
    for fact, colour in (("red-figure", red), ("green-svg", green), ("blue-giant", blue)):
        e = _element(doc, fact)
        px = _image(doc.directory / doc.pages[e.page_index].image)
        x0, y0, x1, y1 = (round(v) for v in e.bbox)
        assert _near(px[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2], colour).all(), fact
        # just outside the box the colour is gone
        assert not _near(px[y0:y1, x1 + 2], colour).any(), fact
        assert not _near(px[y0:y1, max(x0 - 3, 0)], colour).any() or x0 < 3, fact
        if y0 >= 3:
            assert not _near(px[y0 - 3, x0:x1], colour).any(), fact
        if y1 + 3 < PAGE_H:
            assert not _near(px[y1 + 2, x0:x1], colour).any(), fact
    # The giant (4800 px) cannot fit a page: pushed to the top of page 2, cut through at nominal,
    # continued at the top of page 3.
    giant = _element(doc, "blue-giant")
    assert giant.spans_pages and giant.page_index == 2 and giant.bbox[1] == 1.0
    assert doc.pages[1].cut_reason == "push" and doc.pages[2].cut_reason == "through"
    assert doc.pages[2].content_height == PAGE_H and giant.bbox[3] == PAGE_H
    rest = _image(doc.directory / doc.pages[3].image)
    overflow = round(giant.doc_bbox[3] - doc.pages[3].top)
    assert _near(rest[2 : overflow - 2, 200:1500], blue).all()
    assert not _near(rest[overflow + 2, 200:1500], blue).any()


@pytest.mark.slow
@needs_chromium
def test_page_text_is_exactly_its_elements_text(rendered, docs_dir):
    _, _, _, docs = rendered
    for doc in docs.values():
        for p in doc.pages:
            units = [
                e
                for e in doc.elements
                if e.page_index == p.page_index and e.text and not e.nested and e.element_type not in ("table", "list")
            ]
            units.sort(key=lambda e: (e.doc_bbox[1], e.doc_bbox[0]))
            assert p.dom_text == "\n".join(e.text for e in units), (doc.doc_id, p.page_index)
    # independently: every paragraph of the pure-text document is on exactly one page, in order
    doc = docs["text_only"]
    parser = _Paragraphs()
    parser.feed((docs_dir / "text_only.html").read_text())
    assert len(parser.texts) == 60
    where = []
    for text in parser.texts:
        pages = [p.page_index for p in doc.pages if text in p.dom_text.split("\n")]
        assert len(pages) == 1, (text[:40], pages)
        where.append(pages[0])
    assert where == sorted(where) and where[-1] == len(doc.pages) - 1
    assert all(p.cut_reason in ("blank", "end") for p in doc.pages)
    # and each paragraph's box lies on its page's content
    for e in doc.elements:
        assert 0 <= e.bbox[1] < e.bbox[3] <= doc.pages[e.page_index].content_height


@pytest.mark.slow
@needs_chromium
def test_element_types_and_facts(rendered):
    doc = rendered[3]["types"]
    expected = {
        "f-headline": "headline",
        "f-text": "text",
        "f-div": "text",
        "f-list": "list",
        "f-item": "text",
        "f-table": "table",
        "f-row": "table_row",
        "f-img": "image",
        "f-caption": "caption",
        "f-svg": "image",
        "f-math": "formula",
        "f-eq": "formula",
    }
    for fact, etype in expected.items():
        assert _element(doc, fact).element_type == etype, fact
    assert _element(doc, "f-svg").text == "Chart label"
    assert _element(doc, "f-img").text == ""
    assert _element(doc, "f-math").nested  # inside a paragraph, whose text holds it
    assert not _element(doc, "f-list").atomic and not _element(doc, "f-table").atomic
    assert _element(doc, "f-row").text == "Name Value"
    texts = [e.text for e in doc.elements]
    assert "Second item" in texts and "Nested item" in texts and "Table caption" in texts
    # the local image loaded: its box is orange
    img = _element(doc, "f-img")
    px = _image(doc.directory / doc.pages[0].image)
    x0, y0, x1, y1 = (round(v) for v in img.bbox)
    assert _near(px[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2], (250, 140, 20)).all()


@pytest.mark.slow
@needs_chromium
def test_clutter_and_invisible_content_are_removed(rendered):
    doc = rendered[3]["clutter"]
    text = "\n".join(p.dom_text for p in doc.pages) + "\n".join(e.text for e in doc.elements)
    assert "CLUTTER" not in text, [t for t in text.split("\n") if "CLUTTER" in t]
    dom = doc.pages[0].dom_text.split("\n")
    assert dom == [
        "River Article",
        "Sticky subtitle",
        "Visible paragraph one.",
        "Visible paragraph two.",
        "Visible paragraph three.",
    ]


@pytest.mark.slow
@needs_chromium
def test_malformed_html_still_renders(rendered):
    doc = rendered[3]["malformed"]
    types = [e.element_type for e in doc.elements]
    assert types.count("table_row") == 2 and types.count("headline") == 1
    dom = doc.pages[0].dom_text.split("\n")
    assert dom[0] == "Unclosed heading"
    assert {"item one", "item two", "item three", "cell a cell b", "cell c cell d"} <= set(dom)
    assert dom[-1] == "Last paragraph & an unclosed span"


@pytest.mark.slow
@needs_chromium
def test_unreachable_images_are_blocked_and_do_not_hang(rendered):
    doc = rendered[3]["broken_images"]
    assert doc.timings["total"] < 10, doc.timings
    # every image settled (failed) before the wait bound, and each is listed with its URL and why
    assert not any("still loading" in w for w in doc.warnings), doc.warnings
    assert doc.warnings == ["4 image(s) show nothing: blocked 3, missing 1"], doc.warnings
    failed = {f["url"].rsplit("/", 1)[-1]: f["status"] for f in doc.images["failed"]}
    assert failed == {
        "does-not-exist.png": "missing",
        "remote.png": "blocked",
        "never.png": "blocked",
        "outside.png": "blocked",
    }, doc.images
    assert all(f["element_id"] for f in doc.images["failed"])  # each is a recorded image element
    blocked = doc.blocked_requests
    for url in (
        "http://example.com/remote.png",
        "https://192.0.2.1/never.png",
        "http://example.com/analytics.js",
        "https://fonts.googleapis.com/css?family=Roboto",
        "https://example.org/beacon",
    ):
        assert url in blocked, (url, blocked)
    assert any(u.startswith("file://") and u.endswith("/outside.png") for u in blocked), blocked
    assert not any("does-not-exist.png" in u for u in blocked)  # local: allowed, simply missing
    # documents rendered before and after in the same page saw none of these requests
    assert rendered[3]["outer"].blocked_requests == [] and rendered[3]["malformed"].blocked_requests == []
    # the red image outside the document's folder was not drawn
    px = _image(doc.directory / doc.pages[0].image)
    assert not _near(px, (255, 0, 0), tol=30).any()


class _Listeners:
    """A UDP socket and a TCP listener on 127.0.0.1 (ephemeral ports) that count what reaches them:
    the first two bytes of each datagram (a STUN message type: 0001 binding request, 0003 TURN
    allocate; QUIC long headers start with c0-cf) and the TCP connections accepted."""

    def __init__(self):
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.udp_port, self.tcp_port = self.udp.getsockname()[1], self.tcp.getsockname()[1]
        self.datagrams: list[str] = []
        self.connections = 0

    def page(self, folder: Path) -> Path:
        """tests/fixtures/render/webrtc.html aimed at these listeners, as folder/webrtc.html."""
        folder.mkdir(parents=True, exist_ok=True)
        html = (DATA / "webrtc.html").read_text()
        html = html.replace("__UDP_PORT__", str(self.udp_port)).replace("__TCP_PORT__", str(self.tcp_port))
        (folder / "webrtc.html").write_text(html)
        return folder / "webrtc.html"

    def listen(self, seconds: float, until=None) -> None:
        """Collect for ``seconds`` at most (less once ``until(self)`` holds)."""
        end = time.monotonic() + seconds
        while not (until and until(self)):
            left = end - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.udp, self.tcp], [], [], left)
            if self.udp in ready:
                data, _ = self.udp.recvfrom(65535)
                self.datagrams.append(data[:2].hex())
            if self.tcp in ready:
                conn, _ = self.tcp.accept()
                conn.close()
                self.connections += 1

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()


@pytest.mark.slow
@needs_chromium
def test_webrtc_and_other_udp_cannot_leave_the_browser(tmp_path):
    """A page that tries STUN and TURN (UDP and TCP) through RTCPeerConnection, from its own realm
    and an iframe's, and WebTransport (QUIC) from the page and a worker, sends nothing: neither with
    the launch flags alone nor in the renderer (flags and init script). The control, the same
    browser launched without NO_WEBRTC_ARGS, does send STUN and TURN packets to the listener."""
    control = _Listeners()
    flags_only = _Listeners()
    rendered_ = _Listeners()
    try:
        with Renderer(RenderConfig(timeout_s=60)) as r:
            # Control: proves that the page and the listener work (and that the flags are needed).
            args = [a for a in CHROMIUM_ARGS if a not in NO_WEBRTC_ARGS]
            if os.geteuid() == 0:
                args.append("--no-sandbox")
            bare = r._pw.chromium.launch(executable_path=r._executable, headless=True, args=args)
            try:
                page = bare.new_page()
                page.goto(control.page(tmp_path / "control").as_uri())
                control.listen(60, until=lambda c: {"0001", "0003"} <= set(c.datagrams))  # a bound against hanging
                state = page.evaluate("window.__webrtc")
            finally:
                bare.close()
            assert {"0001", "0003"} <= set(control.datagrams), (control.datagrams, state)
            assert state["started"] > 0 and state["candidates"], state

            # The renderer's browser with its launch flags only (a plain context: no init script).
            ctx = r._browser.new_context()
            try:
                page = ctx.new_page()
                page.goto(flags_only.page(tmp_path / "flags").as_uri())
                page.wait_for_function("window.__webrtc && window.__webrtc.done", timeout=60_000)
                flags_only.listen(1.5)
                state = page.evaluate("window.__webrtc")
            finally:
                ctx.close()
            assert state["started"] >= 10 and state["candidates"] == [], state  # tried, gathered nothing
            assert state["worker"] == "started", state
            assert flags_only.datagrams == [] and flags_only.connections == 0, (flags_only.datagrams, state)

            # The renderer proper: the document renders, and nothing reaches the listeners while it
            # is loaded and after (its page stays open until the renderer closes).
            t0 = time.monotonic()
            doc = r.render("webrtc", "generic", rendered_.page(tmp_path / "rendered"), tmp_path / "out")
            rendered_.listen(max(1.5, 3.5 - (time.monotonic() - t0)))
        assert doc.pages[0].dom_text.split("\n")[0] == "WebRTC egress probe"
        assert rendered_.datagrams == [] and rendered_.connections == 0, rendered_.datagrams
    finally:
        for listeners in (control, flags_only, rendered_):
            listeners.close()


@pytest.mark.slow
@needs_chromium
def test_lazy_content_is_loaded_before_measuring(rendered):
    doc = rendered[3]["lazy"]
    text = "\n".join(p.dom_text for p in doc.pages)
    for i in "abc":
        assert f"LAZY-LOADED {i}" in text, text
    assert "placeholder" not in text
    assert "content-visibility section." in text and "Its second line." in text
    img = _element(doc, "lazy-img")
    px = _image(doc.directory / doc.pages[img.page_index].image)
    x0, y0, x1, y1 = (round(v) for v in img.bbox)
    assert (x1 - x0, y1 - y0) == (600, 400)
    assert _near(px[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2], (250, 140, 20)).all()
    # the filled placeholders (300 CSS px tall) are measured as filled
    filled = [e for e in doc.elements if e.text.startswith("LAZY-LOADED")]
    assert len(filled) == 3 and all(abs((e.doc_bbox[3] - e.doc_bbox[1]) - 600) < 1 for e in filled)


@pytest.mark.slow
@needs_chromium
def test_documents_whose_scripts_ignore_scrolling_are_not_scrolled(rendered):
    doc = rendered[3]["no_scroll_hooks"]
    assert _element(doc, "max-scroll").text == "max scroll 0"
    # the lazy document (an IntersectionObserver) was scrolled through: see the test above


@pytest.mark.slow
@needs_chromium
def test_capture_matches_playwright_screenshot(rendered, docs_dir, tmp_path):
    """The renderer's CDP captures give the same pixels as Playwright's own screenshot."""
    import io

    from PIL import Image

    doc = rendered[3]["types"]
    with Renderer(RenderConfig()) as r:
        ctx = r._browser.new_context(viewport={"width": 1000, "height": 2001}, device_scale_factor=2)
        page = ctx.new_page()
        page.goto((docs_dir / "types.html").as_uri())
        page.wait_for_function("Array.from(document.images).every(i => i.complete)")
        h = doc.pages[0].content_height
        shot = page.screenshot(clip={"x": 0, "y": 0, "width": 1000, "height": h / 2}, full_page=True)
        ctx.close()
    ref = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"))
    ours = _image(doc.directory / doc.pages[0].image)[:h]
    assert ref.shape == ours.shape
    assert (np.abs(ref.astype(int) - ours.astype(int)) > 8).mean() < 0.001


# --- failures, timeouts, resuming --------------------------------------------------------------


class _BoundsPerDocument(Renderer):
    """A Renderer that renders the documents named in ``bounds`` under their own config (one that differs
    from its own in timeouts only: speed-only settings, so the same output key) and the others under its
    own. The document a test wants to time out gets a short bound and never finishes; the ordinary ones get
    a generous bound, so that no load on the machine can make one of them time out."""

    def __init__(self, config: RenderConfig, bounds: dict[str, RenderConfig]):
        super().__init__(config)
        self._own, self._bounds = config, bounds

    def render(self, doc_id, source, html_path, out_dir):
        self.config = self._bounds.get(doc_id, self._own)
        try:
            return super().render(doc_id, source, html_path, out_dir)
        finally:
            self.config = self._own


@pytest.mark.slow
@needs_chromium
def test_timeout_is_reported_and_the_batch_goes_on_then_resumes(docs_dir, tmp_path):
    """A document that loads and then never lets go ("hang": a script spins for ever after its load
    event, so only the watchdog can end it) fails on its bound, the browser is killed and relaunched, and
    the batch goes on; the ordinary documents have the default bound (120 s)."""
    out = tmp_path / "out"
    docs = [
        ("clutter", "wikipedia", docs_dir / "clutter.html"),
        ("hang", "generic", docs_dir / "hang_after_load.html"),
        ("missing", "generic", docs_dir / "no-such-file.html"),
        ("malformed", "generic", docs_dir / "malformed.html"),
    ]
    cfg = RenderConfig()
    renderer = _BoundsPerDocument(cfg, {"hang": RenderConfig(timeout_s=2.0)})
    with renderer:  # in this process
        report = render_batch(docs, out, progress=False, renderer=renderer)
    assert report.rendered == ["clutter", "malformed"], report.errors
    assert report.failed == ["hang", "missing"]
    assert report.errors["hang"].startswith("DocumentTimeout")
    assert report.browser_launches == 1 and renderer.launches == 2  # relaunched after the kill
    failures = [json.loads(line) for line in (out / FAILURES_FILE).read_text().splitlines()]
    assert [f["doc_id"] for f in failures] == ["hang", "missing"]
    assert failures[0]["error_type"] == "DocumentTimeout" and "timeout_s=2" in failures[0]["error"]
    assert failures[0]["elapsed_s"] >= 2.0
    assert not (out / "hang").exists()

    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*") if p.parent.name in ("clutter", "malformed")}
    again = render_batch([d for d in docs if d[0] != "hang"], out, RenderConfig(workers=1), progress=False)
    assert again.skipped == ["clutter", "malformed"] and again.rendered == []
    assert again.failed == ["missing"]
    assert again.pages == {"clutter": report.pages["clutter"], "malformed": report.pages["malformed"]}
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing re-rendered


def test_the_bound_grows_with_height():
    """A measured document's bound: timeout_s plus timeout_per_page_s per page of its height (rounded
    up, at least one page)."""
    cfg = RenderConfig(timeout_s=6.0, timeout_per_page_s=0.5)  # page_height 4000
    assert [cfg.height_pages(h) for h in (1, 3999, 4000, 4001, 8000, 113150)] == [1, 1, 1, 2, 2, 29]
    assert cfg.document_bound_s(1) == 6.5 and cfg.document_bound_s(4001) == 7.0
    assert cfg.document_bound_s(113150) == pytest.approx(6.0 + 0.5 * 29)
    assert RenderConfig(timeout_s=6.0, timeout_per_page_s=0.5, page_height=2000).height_pages(4001) == 3
    assert RenderConfig().document_bound_s(113150) == 120.0 + 5.0 * 29  # the defaults


@pytest.mark.slow
@needs_chromium
def test_a_document_past_its_measured_bound_is_killed_in_its_worker_and_leaves_no_pages(tmp_path, monkeypatch):
    """In worker processes, beside a short document: a multi-page document is measured, its first page
    written, and then never finishes (the stand-in worker is the real one with the capture of any later
    page of "long" replaced by a script that spins for ever, so only the watchdog's kill ends it). It
    fails on the bound its height gave it, reported with its id and reason, and leaves no file; a
    rerun renders it. The base bound (20 s) is generous, so that no load can make the document time
    out before it is measured; the test's outcome depends on no speed."""
    from vldocir.construction.render import batch as batch_mod

    html = tmp_path / "long" / "index.html"
    html.parent.mkdir()
    html.write_text(long_document(8))  # 5 pages
    stand_in = tmp_path / "hanging_worker.py"
    stand_in.write_text(
        "import runpy, sys\n"
        "from vldocir.construction.render import capture\n"
        "original = capture.Shooter.page_image\n"
        "def page_image(self, start, cut):\n"
        "    if start > 0 and '/long/' in self.page.url:\n"
        "        self.page.evaluate('() => { for (;;) {} }')  # ended only by the watchdog killing the browser\n"
        "    return original(self, start, cut)\n"
        "capture.Shooter.page_image = page_image\n"
        "runpy.run_module('vldocir.construction.render._worker', run_name='__main__')\n"
    )
    monkeypatch.setattr(batch_mod._Worker, "COMMAND", (str(stand_in),))
    monkeypatch.setattr(batch_mod, "available_cores", lambda: 2)
    docs = [("long", "generic", html), ("short", "generic", DATA / "malformed.html")]
    out = tmp_path / "out"
    cfg = RenderConfig(timeout_s=20.0, timeout_per_page_s=0.2, workers=2)
    report = render_batch(docs, out, cfg, progress=False)
    assert report.workers == 2
    assert report.failed == ["long"] and report.rendered == ["short"], report.errors
    error = report.errors["long"]
    measured = re.fullmatch(
        r"DocumentTimeout: long: rendering took longer than ([\d.]+) s \(timeout_s=20 \+ "
        r"timeout_per_page_s=0\.2 x (\d+) pages of its height; browser killed\)",
        error,
    )
    assert measured, error  # killed on the bound its height gave it, not the base bound
    failure = json.loads((out / FAILURES_FILE).read_text().splitlines()[0])
    assert failure["doc_id"] == "long" and failure["error_type"] == "DocumentTimeout"
    assert failure["elapsed_s"] >= float(measured.group(1))
    assert not (out / "long").exists()
    assert sorted(p.name for p in out.rglob("*.png")) == ["page-000.png"]  # the short one's only
    assert not [p for p in out.iterdir() if ".staging-" in p.name]

    monkeypatch.undo()  # the real worker: the same document renders
    again = render_batch(docs, out, RenderConfig(workers=2), progress=False)
    assert again.rendered == ["long"] and again.skipped == ["short"], again.errors
    doc = load_layout(out / "long")
    assert int(measured.group(2)) == cfg.height_pages(doc.document_height) > 1  # the same layout, measured again
    assert float(measured.group(1)) == pytest.approx(cfg.document_bound_s(doc.document_height))
    assert sorted(p.name for p in (out / "long").iterdir()) == sorted([p.image for p in doc.pages] + [LAYOUT_FILE])


@pytest.mark.slow  # starts Python interpreters (the stand-in workers)
def test_a_worker_that_dies_fails_its_document_and_is_replaced(tmp_path, monkeypatch):
    """The batch's side of the worker protocol, with a stand-in worker (no browser) that writes a
    page and a layout for each document and dies on the document named "crash". The documents after
    the first two wait until the crash happened and a third worker started, so the crash is always seen
    while documents remain (a replacement is due), whatever the machine's load."""
    from vldocir.construction.render import batch as batch_mod

    fake = tmp_path / "fake_worker.py"
    marks = tmp_path / "marks"
    marks.mkdir()
    fake.write_text(
        "import json, os, sys, time\n"
        "from vldocir.construction.render import RenderConfig, RenderedDocument, RenderedElement\n"
        "from vldocir.io import file_digest\n"
        f"marks = {str(marks)!r}\n"
        "open(os.path.join(marks, f'started-{os.getpid()}'), 'w').close()\n"
        "out = sys.argv[1]\n"
        "config = RenderConfig(**json.loads(sys.stdin.readline()))\n"
        "for line in sys.stdin:\n"
        "    task = json.loads(line)\n"
        "    if task is None:\n"
        "        break\n"
        "    doc_id = task[0]\n"
        "    if doc_id == 'crash':\n"
        "        open(os.path.join(marks, 'crashed'), 'w').close()\n"
        "        os._exit(3)\n"
        "    deadline = time.monotonic() + 120  # a bound against hanging, not a timing assumption\n"
        "    while doc_id not in ('d0', 'd1') and time.monotonic() < deadline and not (\n"
        "        'crashed' in os.listdir(marks) and sum(m.startswith('started-') for m in os.listdir(marks)) >= 3\n"
        "    ):\n"
        "        time.sleep(0.01)\n"
        "    if doc_id != 'bad':\n"
        "        os.makedirs(os.path.join(out, doc_id))\n"
        "        text = RenderedElement('e0', 'text', 0, [0, 0, 9, 9], False, 'x', None, True, False, [0, 0, 9, 9])\n"
        "        doc = RenderedDocument(doc_id, task[1], out, task[2], 2000, 4000, 2.0, 10, [255] * 3, [], [text],\n"
        "                               html_sha256=file_digest(task[2]), render_key=config.output_key())\n"
        "        open(os.path.join(out, doc_id, 'layout.json'), 'w').write(json.dumps(doc.sealed_json()))\n"
        "    print(json.dumps({'doc_id': doc_id, 'ok': doc_id != 'bad', 'n_pages': 2, 'error_type': 'RenderError',\n"
        "                      'error': 'bad document', 'elapsed_s': 0.1, 'launches': 1}), flush=True)\n"
        "print(json.dumps({'launches': 1}), flush=True)\n"
    )
    monkeypatch.setattr(batch_mod._Worker, "COMMAND", (str(fake),))
    monkeypatch.setattr(batch_mod, "available_cores", lambda: 2)
    docs = [(f"d{i}", "generic", tmp_path / f"d{i}.html") for i in range(5)]
    docs.insert(2, ("crash", "generic", tmp_path / "crash.html"))
    docs.insert(4, ("bad", "generic", tmp_path / "bad.html"))
    # Longest HTML first: d0 and d1 go to the two workers, then the crash to the first of them that
    # answers (after it reported its browser launch), while four documents remain for a replacement.
    repeats = {"d0": 10, "d1": 9, "crash": 8}
    for doc_id, _, path in docs:
        path.write_text("<p>x</p>" * repeats.get(doc_id, 1))
    report = render_batch(docs, tmp_path / "out", RenderConfig(workers=2), progress=False)
    assert report.workers == 2
    assert report.rendered == ["d0", "d1", "d2", "d3", "d4"]  # in the order given
    assert report.failed == ["crash", "bad"]
    assert "exited with code 3" in report.errors["crash"] and report.errors["bad"] == "RenderError: bad document"
    assert report.pages_rendered == 10 and report.browser_launches == 3  # the replacement launched its own
    lines = [json.loads(x) for x in (tmp_path / "out" / FAILURES_FILE).read_text().splitlines()]
    assert sorted(x["doc_id"] for x in lines) == ["bad", "crash"]
    again = render_batch(docs, tmp_path / "out", RenderConfig(workers=2), progress=False)
    assert again.skipped == ["d0", "d1", "d2", "d3", "d4"] and sorted(again.failed) == ["bad", "crash"]


@pytest.mark.slow
@needs_chromium
def test_navigation_timeout_and_browser_crash_are_recorded(docs_dir, tmp_path, monkeypatch):
    """A document that never finishes loading fails on the navigation bound (the browser lives
    on); Chromium dying in the middle of a document (here: killed while its first page is
    captured) fails that document and is relaunched for the next."""
    original = capture_mod.Shooter.page_image
    # Only "loop" has the short navigation bound (2 s; its own bound, 120 s, stays far off); the others
    # keep the defaults, so that no load can make them time out.
    renderer = _BoundsPerDocument(RenderConfig(), {"loop": RenderConfig(navigation_timeout_s=2.0)})

    def crashing(self, start, cut):
        if "crash" in str(self.page.url):
            renderer._kill_browser()
        return original(self, start, cut)

    monkeypatch.setattr(capture_mod.Shooter, "page_image", crashing)
    crash_html = docs_dir.parent / "crash" / "crash.html"
    crash_html.parent.mkdir(exist_ok=True)
    shutil.copy(docs_dir / "clutter.html", crash_html)
    docs = [
        ("loop", "generic", docs_dir / "infinite_loop.html"),
        ("before", "generic", docs_dir / "malformed.html"),
        ("crash", "generic", crash_html),
        ("after", "generic", docs_dir / "malformed.html"),
        ("bad/id", "generic", docs_dir / "malformed.html"),
    ]
    with renderer:
        report = render_batch(docs, tmp_path, progress=False, renderer=renderer)
    assert report.failed == ["loop", "crash", "bad/id"] and report.rendered == ["before", "after"]
    assert report.errors["loop"].startswith("TimeoutError")
    assert report.browser_launches == 1  # not after the navigation timeout; after the crash
    assert "cannot name a directory" in report.errors["bad/id"]
    lines = [json.loads(x) for x in (tmp_path / FAILURES_FILE).read_text().splitlines()]
    assert [x["doc_id"] for x in lines] == ["loop", "crash", "bad/id"] and all(x["error"] for x in lines)


# --- a long document: memory does not grow with its length ------------------------------------


def long_document(n_sections: int = 120, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    words = (
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt "
        "ut labore et dolore magna aliqua"
    ).split()
    parts = []
    for s in range(n_sections):
        parts.append(f"<h2>Section {s}</h2>")
        for _k in range(4):
            parts.append("<p>" + " ".join(rng.choice(words, size=int(rng.integers(60, 130)))) + ".</p>")
        if s % 3 == 0:
            rows = "".join(
                f"<tr><td>r{r}</td><td>{rng.random():.4f}</td><td>{' '.join(rng.choice(words, size=5))}</td></tr>"
                for r in range(14)
            )
            parts.append(f'<table border="1" style="border-collapse:collapse;width:860px">{rows}</table>')
        if s % 4 == 0:
            parts.append(
                f'<svg width="600" height="280"><rect width="600" height="280" fill="rgb({(s * 37) % 256},120,200)"/>'
                f'<circle cx="300" cy="140" r="90" fill="#fc3"/><text x="20" y="30">Figure {s}</text></svg>'
            )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{margin:0;padding:10px 60px;"
        "font:18px/28px 'DejaVu Serif',serif}p{margin:0 0 14px}</style></head><body>"
        + "".join(parts)
        + "</body></html>"
    )


class _MemorySampler:
    """Samples, every 50 ms, the resident memory (RSS) of this process and the proportional memory
    (PSS: shared pages split between their users, so that the many Chromium processes are not
    counted several times over) of its children: Playwright's driver and Chromium's processes.
    Each sample also notes how many page images of ``watch`` exist, to tell early from late."""

    def __init__(self, watch: Path):
        import psutil

        self._me = psutil.Process()
        self._watch = watch
        self.samples: list[tuple[int, int, int]] = []  # (pages written, python RSS, children PSS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int]:
        py = self._me.memory_info().rss
        ch = 0
        for c in self._me.children(recursive=True):
            with contextlib.suppress(Exception):
                ch += c.memory_full_info().pss
        return py, ch

    def _run(self):
        while not self._stop.is_set():
            py, ch = self.sample()
            # pages are written into a staging directory beside the document's, then moved there
            pages = (
                sum(len(list(d.glob("page-*"))) for d in self._watch.parent.glob(f".{self._watch.name}.staging-*"))
                if self._watch.parent.exists()
                else 0
            )
            pages += len(list(self._watch.glob("page-*"))) if self._watch.exists() else 0
            self.samples.append((pages, py, ch))
            self._stop.wait(0.05)

    def peak(self, lo: int = 0, hi: int = 10**9) -> tuple[int, int]:
        """Peak python RSS and children PSS over the samples taken with lo <= pages written <= hi."""
        sel = [s for s in self.samples if lo <= s[0] <= hi]
        return max(s[1] for s in sel), max(s[2] for s in sel)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
@needs_chromium
def test_long_document_memory_stays_bounded(tmp_path):
    html = tmp_path / "long" / "index.html"
    html.parent.mkdir()
    html.write_text(long_document(100))
    out = tmp_path / "out"
    with Renderer(RenderConfig(timeout_s=300)) as r:
        r.render("warmup", "generic", DATA / "malformed.html", out)
        with _MemorySampler(out / "long") as mem:
            base_py, base_ch = mem.sample()
            t0 = time.monotonic()
            doc = r.render("long", "generic", html, out)
            wall = time.monotonic() - t0
    n = len(doc.pages)
    mib = 2**20
    peak_py, peak_ch = mem.peak()
    early_py, early_ch = mem.peak(0, 10)
    late_py, late_ch = mem.peak(11)
    print(
        f"\nlong document: {n} pages, {doc.document_height} px tall, {wall:.1f} s ({n / wall:.2f} pages/s); "
        f"python RSS {base_py / mib:.0f} -> peak {peak_py / mib:.0f} MiB; "
        f"driver + Chromium PSS {base_ch / mib:.0f} -> peak {peak_ch / mib:.0f} MiB "
        f"(pages 0-10: {early_ch / mib:.0f}, pages 11-{n}: {late_ch / mib:.0f})"
    )
    assert 50 <= n <= 75
    assert all(p.height == PAGE_H for p in doc.pages)
    # A naive full-page capture of this document holds a 2000 x ~230,000 px RGBA bitmap (about
    # 1.8 GB) in Chromium, and as much again decoded in Python. Window by window:
    assert peak_py - base_py < 250 * mib  # Python holds one page image and a strip at a time
    assert peak_ch < 1536 * mib  # all of Chromium, with the whole document loaded
    # and nothing grows with the number of pages already cut (a naive capture: ~30 MB per page)
    assert late_ch - early_ch < 150 * mib, (early_ch / mib, late_ch / mib)
    assert late_py - early_py < 50 * mib, (early_py / mib, late_py / mib)
