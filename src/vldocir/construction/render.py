"""Render HTML-born documents into fixed-size page images with every element's box known.

One headless Chromium (driven by Playwright) renders many documents, one after the other in one
page (its browser context is replaced every ``context_reuse`` documents and after any failure);
every request outside the current document's own folder is aborted, and nothing else leaves the
browser: no host name resolves (which also stops WebTransport and TURN over TCP), WebRTC may not
use UDP (launch flags) and its interfaces are removed from every document (an init script). Per
document:

1. load the file (bounded by ``navigation_timeout_s``), finish CSS animations, make lazy images
   eager, scroll through the document a viewport at a time (lazy content), wait for images and web
   fonts (bounded by ``image_wait_timeout_s``: a missing or blocked image never hangs);
2. switch the document's scripts off (nothing can move after measuring), remove the clutter
   selectors of its source, ``position: fixed`` elements and invisible elements (display none,
   visibility hidden, opacity 0, clipped "visually hidden", off-screen);
3. walk the DOM in document order: tag every content element with ``data-vldocir-id="e00042"``
   and record its type, box (CSS px x device_scale_factor, document coordinates), text
   (``innerText``, whitespace-normalised) and fact attribute;
4. paginate *one window at a time*, never capturing the whole document: for the window starting
   at ``top``, capture (PNG, via the DevTools ``Page.captureScreenshot`` of a clip inside a
   viewport one page tall) the few rows needed to choose the cut (:mod:`vldocir.construction.paginate`),
   then capture ``[top, top + page_height]`` with a white overlay over everything below the cut
   and write Chromium's encoded bytes as the page image (atomically); the next window starts at
   the cut. Peak memory is one page, whatever the document's length.

Compared with Playwright's ``page.screenshot(clip=..., full_page=True)``, which captures with
``captureBeyondViewport`` (3-4x slower per window here) and without ``optimizeForSpeed`` PNG
encoding, the viewport-clip capture gives the same pixels (tested) at a fraction of the cost.

Output per document, in ``out_dir/<doc_id>/``::

    page-000.png, page-001.png, ...   # page_width x page_height (default 2000 x 4000), white padding
    layout.json                       # written atomically last: its presence marks the document done

``layout.json`` (``"version": 2``)::

    {
      "version": 2, "doc_id": str, "source": str, "html_path": str,
      "page_width": int, "page_height": int, "device_scale_factor": float,
      "document_height": int,             # device pixels of the whole document
      "background": [r, g, b],            # the document's background colour (for blank rows)
      "n_pages": int,
      "pages": [{"page_index": int, "image": "page-000.png", "width": int, "height": int,
                 "top": int,              # document row where the page starts
                 "content_height": int,   # rows of document on the page; below it is white padding
                 "cut_reason": str,       # end | blank | box_free | push | through (paginate.py)
                 "dom_text": str}],       # "\\n"-joined texts of the page's text units, by (y0, x0)
      "elements": [{"element_id": "e00042", "element_type": str, "page_index": int,
                    "bbox": [x0, y0, x1, y1],      # page pixels, clipped to the page's content
                    "doc_bbox": [x0, y0, x1, y1],  # document pixels
                    "spans_pages": bool, "atomic": bool, "nested": bool,
                    "text": str, "fact": str | null}],
      "warnings": [str],                  # e.g. images still loading after image_wait_timeout_s
      "timings": {step: seconds},         # load, settle, extract, cut, pages, paginate, total
      "blocked_requests": [url]           # requests aborted (outside the document's folder)
    }

Element types: ``text`` (p, blockquote, dd, dt, li, pre, address, and the own text of any other
block, e.g. a leaf ``div``), ``headline`` (h1-h6), ``list`` (ul, ol, dl, menu), ``table``,
``table_row`` (tr), ``image`` (img, svg, canvas, picture, video), ``caption`` (figcaption,
caption), ``formula`` (math, mjx-container, or a class starting with formula / equation / katex /
mathjax / mjx- / ltx_equation / mwe-math-element). ``table`` and ``list`` are containers: not
atomic for cutting and not part of ``dom_text`` (a table contributes through its rows, a list
through its items). A text element holding blocks (an ``li`` with a nested list, a blockquote of
paragraphs) records its own inline text only; a table row holding a nested table or taller than
``max_row_height_fraction`` of a page (a layout table) records its cells' contents instead.
``nested`` marks images and formulas inside another text unit (their text is already in it).
``dom_text`` of a page is the text of its non-container, non-nested elements with text whose top
lies on the page, in reading order (by ``(y0, x0)``), joined by newlines. The text of an ``img`` is
empty (alt text is not drawn); the text of an inline ``svg`` is its ``<text>`` content.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import math
import os
import shutil
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import unquote, urlparse

import numpy as np

from vldocir.construction.paginate import CutDecision, assign_elements, box_free_runs, choose_cut
from vldocir.io import atomic_path, atomic_write_json

log = logging.getLogger(__name__)

__all__ = [
    "BatchReport",
    "ChromiumNotFoundError",
    "DocumentTimeout",
    "RenderConfig",
    "RenderError",
    "RenderedDocument",
    "RenderedElement",
    "RenderedPage",
    "Renderer",
    "find_chromium",
    "load_layout",
    "render_batch",
]

LAYOUT_FILE = "layout.json"
FAILURES_FILE = "failures.jsonl"
LAYOUT_VERSION = 2
MAX_BLOCKED_LOGGED = 100
CONTAINER_TYPES = frozenset({"table", "list"})
ELEMENT_TYPES = ("text", "headline", "list", "table", "table_row", "image", "caption", "formula")

NO_WEBRTC_ARGS: tuple[str, ...] = (
    # WebRTC's UDP sockets (STUN binding requests, TURN allocations, host candidates) bypass both
    # the request interception and the resolver rules, even to IP literals: a page could send
    # packets anywhere. UDP only through a proxy, and there is none: no candidate, no packet.
    # (``--force-webrtc-ip-handling-policy`` has no effect on Chromium 156: packets still go out.)
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--no-proxy-server",
)
"""Flags that keep WebRTC from sending anything (part of :data:`CHROMIUM_ARGS`); the WebRTC
interfaces are also removed from every document by :data:`NO_WEBRTC_SCRIPT`."""

NO_WEBRTC_SCRIPT = r"""
(() => {
  // Installed in every frame before the document's own scripts: no way to open a peer connection
  // (or a WebTransport session) from a page. The launch flags (NO_WEBRTC_ARGS) hold even without it.
  for (const name of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCRtpSender',
                      'RTCRtpReceiver', 'RTCRtpTransceiver', 'RTCIceCandidate', 'RTCIceTransport',
                      'RTCDtlsTransport', 'RTCSctpTransport', 'RTCSessionDescription', 'RTCCertificate',
                      'RTCRtpScriptTransform', 'RTCEncodedAudioFrame', 'RTCEncodedVideoFrame', 'WebTransport']) {
    try { delete globalThis[name]; } catch (e) {}
  }
})();
"""
"""Init script of every browser context: removes the WebRTC and WebTransport interfaces."""

CHROMIUM_ARGS: tuple[str, ...] = (
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    # Defence in depth behind the request interception: no host name resolves. It also stops the
    # connections that the interception never sees, even to IP literals: WebTransport (QUIC over
    # UDP, from pages and workers alike) and TURN over TCP.
    "--host-resolver-rules=MAP * ~NOTFOUND",
) + NO_WEBRTC_ARGS
"""Flags for every launch (``--no-sandbox`` is added when running as root, see RenderConfig)."""

SYSTEM_CHROMIUM_PATHS: tuple[str, ...] = ("/usr/bin/chromium",)
SYSTEM_CHROMIUM_NAMES: tuple[str, ...] = ("chromium", "chromium-browser", "google-chrome")

DEFAULT_CLUTTER_SELECTORS: dict[str, list[str]] = {
    # Applied to every document, whatever its source.
    "*": [
        "nav",
        "[role=navigation]",
        "header[role=banner]",
        ".cookie-banner",
        "#cookie-notice",
        # Hidden from assistive technology: decorative icons, duplicated widgets. Formula
        # renderers (KaTeX, MathJax) mark their *visible* rendering aria-hidden, so keep those.
        '[aria-hidden="true"]:not(.katex *, .katex-display *, mjx-container *, .MathJax *, svg *)',
    ],
    "wikipedia": [
        ".mw-editsection",
        "#mw-navigation",
        ".navbox",
        ".mw-jump-link",
        "#siteNotice",
        "#mw-head",
        "#mw-panel",
        "#catlinks",
        "#footer",
        ".mw-footer",
        ".noprint",
    ],
    "arxiv": [".ltx_page_header", ".ltx_page_footer", ".ar5iv-footer", ".package-alerts"],
    "pubmed": [".usa-banner", ".ncbi-header", ".pmc-sidenav", ".page-footer", ".pmc-header"],
    "sec": [],
}
"""Clutter removed before measuring, per source; ``"*"`` applies to all sources. Selectors that a
browser cannot parse are ignored."""


def _default_clutter() -> dict[str, list[str]]:
    return {k: list(v) for k, v in DEFAULT_CLUTTER_SELECTORS.items()}


@dataclass
class RenderConfig:
    """Every knob of the renderer. Sizes in pixels are device pixels unless named ``_css``."""

    viewport_width_css: int = 1000
    """Layout width in CSS pixels; the page width is ``viewport_width_css * device_scale_factor``."""
    device_scale_factor: float = 2.0
    """Device pixels per CSS pixel (2 gives 2000 px wide pages)."""
    page_height: int = 4000
    """Page height in device pixels; every page image is padded with white to this height."""
    cut_window: int = 800
    """How far above the nominal cut (``page top + page_height``) a clean cut is searched for."""
    min_fill: float = 0.25
    """A page may be ended early (to push a straddling element to the next page) only if at least
    this fraction of ``page_height`` stays on it."""
    blank_tolerance: int = 8
    """A pixel row is blank when every channel of every pixel is within this of the background."""
    image_format: str = "png"
    """``png`` or ``jpeg``."""
    jpeg_quality: int = 92
    navigation_timeout_s: float = 30.0
    """Bound on loading the HTML file (until the ``load`` event)."""
    image_wait_timeout_s: float = 10.0
    """Bound on waiting for images (``img.complete``) and web fonts; rendering goes on after it."""
    timeout_s: float = 120.0
    """Bound on one document from start to its last page; past it the browser is killed and
    relaunched and the document is recorded as failed."""
    launch_timeout_s: float = 60.0
    lazy_scroll: bool = True
    """Scroll through the document in viewport steps first, to trigger lazily loaded content
    (only where the document has scripts: ``loading=lazy`` is turned into ``eager`` and
    ``content-visibility`` forced ``visible`` anyway, so nothing else can load lazily)."""
    max_scroll_steps: int = 400
    """At most this many scroll steps (a bound for endlessly growing documents)."""
    remove_fixed: bool = True
    """Remove ``position: fixed`` elements (overlays, toolbars, banners); ``sticky`` ones are made
    ``static`` in any case, so that they are drawn once, where they belong."""
    javascript: bool = True
    """Run the documents' scripts while loading (scripts are switched off before measuring)."""
    context_reuse: int = 20
    """Documents rendered one after the other in one browser context and page (one renderer
    process) before it is replaced by a fresh one; it is also replaced after any failure. A fresh
    context (and renderer process) costs 0.5-1 CPU-s per document here; 1 gives every document a fresh context (full isolation:
    storage of earlier documents, e.g. ``localStorage`` of ``file://``, is then never visible)."""
    clutter_selectors: dict[str, list[str]] = field(default_factory=_default_clutter)
    """CSS selectors of elements removed before measuring, per source; key ``"*"``: all sources.
    Defaults: :data:`DEFAULT_CLUTTER_SELECTORS`."""
    fact_attribute: str | None = "data-fact"
    """Attribute whose value is carried into each element record (``fact``); None: none."""
    id_attribute: str = "data-vldocir-id"
    """Attribute injected into every recorded element, holding its element_id."""
    max_row_height_fraction: float = 0.5
    """A table row taller than this fraction of a page, or holding a nested table, is a layout row:
    its cells' contents are recorded instead of the row."""
    cut_probes: int = 1
    """Box-free row runs nearest the nominal cut whose pixels are captured alone (cheap) before
    the whole cut band is captured; 0: always capture the whole band."""
    chromium_path: str | None = None
    """Chromium executable; None: see :func:`find_chromium`."""
    no_sandbox: bool | None = None
    """Pass ``--no-sandbox``; None: when running as root."""
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format must be 'png' or 'jpeg', got {self.image_format!r}")
        if self.cut_window <= 0 or self.cut_window >= self.page_height:
            raise ValueError("cut_window must be in (0, page_height)")
        if not 0.0 < self.min_fill < 1.0:
            raise ValueError("min_fill must be in (0, 1)")

    @property
    def page_width(self) -> int:
        return int(round(self.viewport_width_css * self.device_scale_factor))

    @property
    def image_suffix(self) -> str:
        return ".png" if self.image_format == "png" else ".jpg"

    def selectors_for(self, source: str) -> list[str]:
        return list(self.clutter_selectors.get("*", [])) + list(self.clutter_selectors.get(source, []))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ChromiumNotFoundError(RuntimeError):
    """No Chromium executable was found; the message names what was tried."""


class RenderError(RuntimeError):
    """A document could not be rendered."""


class DocumentTimeout(RenderError):
    """A document took longer than ``RenderConfig.timeout_s``."""


def find_chromium(configured: str | None = None, playwright: Any = None) -> str:
    """The Chromium executable to launch.

    In order: ``configured``; ``$VLDOCIR_CHROMIUM``; Playwright's own Chromium when that file exists
    (asked from ``playwright``, a started Playwright instance, or from a short-lived one);
    ``/usr/bin/chromium``; ``chromium``, ``chromium-browser``, ``google-chrome`` on ``PATH``.

    A configured path or ``$VLDOCIR_CHROMIUM`` that is not an executable is an error (it is not
    silently replaced by another browser). Raises :class:`ChromiumNotFoundError` naming every place
    tried and how to install Chromium.
    """
    tried: list[str] = []
    hint = (
        "Install one with `apt-get install chromium` (Debian/Ubuntu), or set $VLDOCIR_CHROMIUM or "
        "RenderConfig.chromium_path to a Chromium executable."
    )

    def ok(path: str | None) -> bool:
        return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)

    # An explicit choice that does not work is an error, not a reason to pick another browser.
    if configured:
        found = configured if ok(configured) else shutil.which(configured)
        if found:
            return found
        raise ChromiumNotFoundError(f"configured Chromium {configured!r} is not an executable file. {hint}")
    env = os.environ.get("VLDOCIR_CHROMIUM")
    if env:
        found = env if ok(env) else shutil.which(env)
        if found:
            return found
        raise ChromiumNotFoundError(f"$VLDOCIR_CHROMIUM={env!r} is not an executable file. {hint}")
    tried.append("RenderConfig.chromium_path (unset)")
    tried.append("$VLDOCIR_CHROMIUM (unset)")
    managed = None
    try:
        if playwright is not None:
            managed = playwright.chromium.executable_path
        else:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                managed = p.chromium.executable_path
    except Exception as exc:  # Playwright missing or its driver unusable: try the system ones
        log.debug("cannot ask Playwright for its Chromium: %s", exc)
    if ok(managed):
        return str(managed)
    tried.append(f"Playwright-managed Chromium {managed!r}" if managed else "Playwright-managed Chromium")
    for path in SYSTEM_CHROMIUM_PATHS:
        if ok(path):
            return path
        tried.append(path)
    for name in SYSTEM_CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
        tried.append(f"{name} on PATH")
    raise ChromiumNotFoundError("no Chromium executable found; tried: " + "; ".join(tried) + ". " + hint)


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class RenderedPage:
    page_index: int
    image: str
    """File name of the page image, relative to the document's directory."""
    width: int
    height: int
    top: int
    """Document row (device pixels) where the page starts."""
    content_height: int
    """Rows of the document on the page; the rest, below, is white padding."""
    cut_reason: str
    dom_text: str


@dataclass
class RenderedElement:
    element_id: str
    element_type: str
    page_index: int
    bbox: list[float]
    """``[x0, y0, x1, y1]`` in page pixels, clipped to the page's content."""
    spans_pages: bool
    text: str
    fact: str | None
    atomic: bool
    nested: bool
    doc_bbox: list[float]
    """``[x0, y0, x1, y1]`` in document pixels."""


@dataclass
class RenderedDocument:
    doc_id: str
    source: str
    directory: Path
    html_path: str
    page_width: int
    page_height: int
    device_scale_factor: float
    document_height: int
    background: list[int]
    pages: list[RenderedPage]
    elements: list[RenderedElement]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    blocked_requests: list[str] = field(default_factory=list)
    """URLs of requests that were blocked (the first MAX_BLOCKED_LOGGED)."""

    def page_path(self, page_index: int) -> Path:
        return self.directory / self.pages[page_index].image

    def to_json(self) -> dict[str, Any]:
        return {
            "version": LAYOUT_VERSION,
            "doc_id": self.doc_id,
            "source": self.source,
            "html_path": self.html_path,
            "page_width": self.page_width,
            "page_height": self.page_height,
            "device_scale_factor": self.device_scale_factor,
            "document_height": self.document_height,
            "background": list(self.background),
            "n_pages": len(self.pages),
            "pages": [asdict(p) for p in self.pages],
            "elements": [asdict(e) for e in self.elements],
            "warnings": list(self.warnings),
            "timings": dict(self.timings),
            "blocked_requests": list(self.blocked_requests),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any], directory: Path) -> "RenderedDocument":
        if obj.get("version") != LAYOUT_VERSION:
            raise ValueError(f"{directory / LAYOUT_FILE}: unsupported layout version {obj.get('version')!r}")
        return cls(
            doc_id=obj["doc_id"],
            source=obj["source"],
            directory=Path(directory),
            html_path=obj["html_path"],
            page_width=int(obj["page_width"]),
            page_height=int(obj["page_height"]),
            device_scale_factor=float(obj["device_scale_factor"]),
            document_height=int(obj["document_height"]),
            background=list(obj["background"]),
            pages=[RenderedPage(**p) for p in obj["pages"]],
            elements=[RenderedElement(**e) for e in obj["elements"]],
            warnings=list(obj.get("warnings", [])),
            timings=dict(obj.get("timings", {})),
            blocked_requests=list(obj.get("blocked_requests", [])),
        )


def load_layout(doc_dir: str | Path) -> RenderedDocument:
    """Read ``doc_dir/layout.json`` back into a :class:`RenderedDocument`."""
    doc_dir = Path(doc_dir)
    return RenderedDocument.from_json(json.loads((doc_dir / LAYOUT_FILE).read_text()), doc_dir)


# --------------------------------------------------------------------------------------------
# In-page scripts

_JS_PREPARE = r"""
() => {
  const style = document.createElement('style');
  style.setAttribute('data-vldocir', 'style');
  style.textContent = 'html{scroll-behavior:auto !important}' +
    '*,*::before,*::after{transition:none !important;caret-color:transparent !important;' +
    'content-visibility:visible !important}';
  (document.head || document.documentElement).appendChild(style);
  if (document.getAnimations) {
    for (const a of document.getAnimations()) {
      try {
        const t = a.effect && a.effect.getComputedTiming();
        if (t && isFinite(t.endTime)) a.finish(); else a.cancel();
      } catch (e) {}
    }
  }
  for (const e of document.querySelectorAll('img[loading="lazy"], iframe[loading="lazy"]')) e.loading = 'eager';
  // Whether anything could load lazily on scrolling: only the document's scripts can (lazy
  // attributes were just turned off, content-visibility forced visible).
  const code = Array.from(document.scripts).some(sc => !sc.type || /(java|ecma)script|module/i.test(sc.type));
  return code || !!document.querySelector('[onscroll]');
}
"""

_JS_LAZY_SCROLL = r"""
async ([maxSteps]) => {
  const frame = () => new Promise(r => { requestAnimationFrame(() => r()); setTimeout(r, 100); });
  const se = document.scrollingElement || document.documentElement;
  let y = 0, steps = 0;
  while (steps < maxSteps) {
    window.scrollTo(0, y);
    await frame();
    steps++;
    if (y + window.innerHeight >= se.scrollHeight) break;
    y += window.innerHeight;
  }
  window.scrollTo(0, 0);
  await frame();
  return steps;
}
"""

_JS_IMAGES_READY = r"""
async ([timeoutMs]) => {
  const ready = () => Array.from(document.images).every(i => i.complete) &&
                      (!document.fonts || document.fonts.status === 'loaded');
  const end = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > end) return false;
    await new Promise(r => setTimeout(r, 50));
  }
  return true;
}
"""

_JS_CLEAN = r"""
([selectors, removeFixed]) => {
  const removed = {clutter: 0, fixed: 0, invisible: 0, bad_selectors: []};
  const root = document.body || document.documentElement;
  const protectedEl = el => el === document.body || el === document.documentElement || el === document.head;
  for (const sel of selectors) {
    let els;
    try { els = document.querySelectorAll(sel); } catch (e) { removed.bad_selectors.push(sel); continue; }
    for (const el of els) if (el.isConnected && !protectedEl(el)) { el.remove(); removed.clutter++; }
  }
  for (const el of Array.from(root.querySelectorAll('*'))) {
    if (!el.isConnected) continue;
    const pos = getComputedStyle(el).position;
    if (pos === 'fixed' && removeFixed) { el.remove(); removed.fixed++; }
    else if (pos === 'sticky' || pos === 'fixed') el.style.setProperty('position', pos === 'sticky' ? 'static' : 'absolute', 'important');
  }
  // Invisible elements, children first. The insides of replaced / foreign content are left alone.
  const OPAQUE = new Set(['svg', 'math', 'mjx-container', 'picture', 'video', 'audio', 'canvas',
                          'object', 'iframe', 'select', 'head']);
  const width = document.documentElement.clientWidth;
  const sx = window.scrollX, sy = window.scrollY;
  function visibleInside(el) {
    for (const d of el.querySelectorAll('*')) if (getComputedStyle(d).visibility === 'visible') return true;
    return false;
  }
  function prune(el) {
    const cs = getComputedStyle(el);
    if (cs.display === 'none') { el.remove(); removed.invisible++; return; }
    if (cs.opacity === '0') { el.remove(); removed.invisible++; return; }
    if (!OPAQUE.has(el.localName)) for (const c of Array.from(el.children)) prune(c);
    if (cs.visibility !== 'visible' && !visibleInside(el)) { el.remove(); removed.invisible++; return; }
    if (cs.display === 'contents' || el.localName === 'br' || el.localName === 'wbr') return;
    const r = el.getBoundingClientRect();
    // Empty zero-size elements are left alone (they show nothing, but may hold margins); those that
    // hold text clipped away (zero or one pixel with overflow hidden: "visually hidden") go.
    const clipped = /hidden|clip/.test(cs.overflow);
    if (clipped && (r.width <= 1 || r.height <= 1) && (el.textContent || '').trim()) {
      el.remove(); removed.invisible++; return;
    }
    if (r.width > 0 && r.height > 0 && (r.right + sx <= 0 || r.bottom + sy <= 0 || r.left + sx >= width)) {
      el.remove(); removed.invisible++; return;
    }
  }
  for (const c of Array.from(root.children)) prune(c);
  return removed;
}
"""

_JS_METRICS = r"""
() => {
  // The content's height, not the viewport's (the root scroller, and a quirks-mode body, are at
  // least as tall as the viewport): the bottom of everything in the body plus the body's bottom
  // padding, border and margin, within what the document can scroll to.
  const de = document.documentElement, body = document.body || de;
  const px = v => parseFloat(v) || 0;
  const bcs = getComputedStyle(body);
  const range = document.createRange();
  range.selectNodeContents(body);
  const content = range.getBoundingClientRect();
  const bottom = content.bottom + window.scrollY + px(bcs.paddingBottom) + px(bcs.borderBottomWidth) + px(bcs.marginBottom);
  const height = Math.max(1, Math.min(de.scrollHeight, bottom));
  function colour(el) {
    if (!el) return null;
    const m = getComputedStyle(el).backgroundColor.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(s => s).map(Number);
    const a = p.length > 3 ? p[3] : 1;
    if (!(a > 0)) return null;
    return [0, 1, 2].map(i => Math.round(p[i] * a + 255 * (1 - a)));
  }
  return {height: height, background: colour(de) || colour(body) || [255, 255, 255]};
}
"""

_JS_EXTRACT = r"""
([factAttr, idAttr, maxRowHeight]) => {
  const HEAD = /^h[1-6]$/;
  const TEXT = new Set(['p', 'blockquote', 'dd', 'dt', 'li', 'pre', 'address']);
  const LIST = new Set(['ul', 'ol', 'dl', 'menu']);
  const IMAGE = new Set(['img', 'svg', 'canvas', 'picture', 'video']);
  const CAPTION = new Set(['figcaption', 'caption']);
  const SKIP = new Set(['script', 'style', 'noscript', 'template', 'head', 'meta', 'link', 'title',
    'iframe', 'frame', 'frameset', 'object', 'embed', 'audio', 'select', 'option', 'optgroup',
    'datalist', 'br', 'wbr', 'area', 'map', 'source', 'track', 'input', 'textarea', 'button']);
  const FORMULA_CLASS = /^(formula|equation|katex|mathjax|mjx-|ltx_equation|mwe-math-element)/i;
  const BLOCK_SEL = 'p,h1,h2,h3,h4,h5,h6,ul,ol,dl,table,blockquote,pre,li,dd,dt,figure,div,section,' +
    'article,aside,header,footer,main,figcaption,address,form,fieldset,details,hr';
  const sx = window.scrollX, sy = window.scrollY;
  const out = [];
  const norm = s => (s || '').replace(/\s+/g, ' ').trim();
  const textOf = el => norm(el.innerText !== undefined ? el.innerText : el.textContent);
  const isInline = el => getComputedStyle(el).display.startsWith('inline');
  // Inline content proper: an inline element that holds no block (the parser puts blocks inside
  // unclosed <b>, <a>, ... of malformed HTML) and is no image.
  const inlineLeaf = el => isInline(el) && !IMAGE.has(el.localName) && !hasBlockContent(el);
  const docBox = r => [r.left + sx, r.top + sy, r.right + sx, r.bottom + sy];

  function isFormula(el) {
    const t = el.localName;
    if (t === 'math' || t === 'mjx-container') return true;
    if (!el.classList) return false;
    for (const c of el.classList) if (FORMULA_CLASS.test(c)) return true;
    return false;
  }
  function kind(el) {
    const t = el.localName;
    if (isFormula(el)) return 'formula';
    if (IMAGE.has(t)) return 'image';
    if (HEAD.test(t)) return 'headline';
    if (t === 'table') return 'table';
    if (t === 'tr') return 'table_row';
    if (LIST.has(t)) return 'list';
    if (CAPTION.has(t)) return 'caption';
    if (TEXT.has(t)) return 'text';
    return null;
  }
  function hasBlockContent(el) {
    for (const d of el.querySelectorAll(BLOCK_SEL)) if (!isInline(d)) return true;
    return false;
  }
  function record(el, k, box, text, atomic, nested) {
    if (!(box[2] - box[0] > 0 && box[3] - box[1] > 0)) return false;
    const id = 'e' + String(out.length).padStart(5, '0');
    el.setAttribute(idAttr, id);
    out.push({id: id, type: k, box: box, text: text, fact: factAttr ? el.getAttribute(factAttr) : null,
              atomic: atomic, nested: nested});
    return true;
  }
  // The element's own inline content (text nodes and inline children), as one text unit.
  function recordOwn(el, k) {
    const parts = [];
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    const add = r => {
      if (r.width <= 0 && r.height <= 0) return;
      x0 = Math.min(x0, r.left); y0 = Math.min(y0, r.top); x1 = Math.max(x1, r.right); y1 = Math.max(y1, r.bottom);
    };
    for (const n of el.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) {
        if (!n.data.trim()) { parts.push(' '); continue; }
        const range = document.createRange();
        range.selectNodeContents(n);
        add(range.getBoundingClientRect());
        parts.push(n.data);
      } else if (n.nodeType === Node.ELEMENT_NODE) {
        if (SKIP.has(n.localName) || !inlineLeaf(n)) { parts.push(' '); continue; }
        const t = n.innerText !== undefined ? n.innerText : n.textContent;
        if (!norm(t)) continue;
        add(n.getBoundingClientRect());
        parts.push(t);
      }
    }
    const text = norm(parts.join(''));
    if (!text || x0 === Infinity) return false;
    return record(el, k, [x0 + sx, y0 + sy, x1 + sx, y1 + sy], text, true, false);
  }
  function visit(el, inUnit) {
    const t = el.localName;
    if (SKIP.has(t)) return;
    const k = kind(el);
    if (k === 'image' || k === 'formula') {
      const text = k === 'formula' ? textOf(el) : (t === 'svg' ? norm(el.textContent) : '');
      record(el, k, docBox(el.getBoundingClientRect()), text, true, inUnit);
      return;
    }
    if (inUnit) { for (const c of el.children) visit(c, true); return; }
    if (k === 'table' || k === 'list') {
      record(el, k, docBox(el.getBoundingClientRect()), textOf(el), false, false);
      for (const c of el.children) visit(c, false);
      return;
    }
    if (k !== null) {
      const r = el.getBoundingClientRect();
      const container = k === 'table_row' ? (!!el.querySelector('table') || r.height > maxRowHeight)
                                          : hasBlockContent(el);
      if (!container) {
        const text = textOf(el);
        if (text) record(el, k, docBox(r), text, true, false);
        for (const c of el.children) visit(c, true);
        return;
      }
    }
    // A generic block (or a text unit holding blocks): its own inline content, then its children.
    const own = (k === 'table_row') ? false : recordOwn(el, k === null ? 'text' : k);
    for (const c of el.children) visit(c, own && inlineLeaf(c));
  }
  visit(document.body || document.documentElement, false);
  return out;
}
"""

_JS_POSITION = r"""
([overlayTop, overlayHeight, overlayWidth, scrollY]) => {
  let ov = document.getElementById('__vldocir_pad');
  if (overlayHeight > 0) {
    if (!ov) {
      ov = document.createElement('div');
      ov.id = '__vldocir_pad';
      document.documentElement.appendChild(ov);
    }
    ov.setAttribute('style', 'position:absolute !important;left:0 !important;margin:0 !important;' +
      'padding:0 !important;border:0 !important;background:#ffffff !important;display:block !important;' +
      'z-index:2147483647 !important;pointer-events:none !important;transform:none !important;' +
      'opacity:1 !important;visibility:visible !important;box-sizing:border-box !important;' +
      'top:' + overlayTop + 'px !important;height:' + overlayHeight + 'px !important;' +
      'width:' + overlayWidth + 'px !important');
  } else if (ov) {
    ov.style.setProperty('display', 'none', 'important');
  }
  window.scrollTo(0, scrollY);
  return [window.scrollY, window.innerHeight];
}
"""


# --------------------------------------------------------------------------------------------
# The renderer


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return None


def _image_size(data: bytes) -> tuple[int, int]:
    size = _png_size(data)
    if size is not None:
        return size
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.size


def _decode_rgb(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


class _Watchdog:
    """Calls ``action`` from a helper thread once ``seconds`` have passed, unless cancelled."""

    def __init__(self, seconds: float, action):
        self.fired = False
        self._action = action
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        try:
            self._action()
        except Exception:  # pragma: no cover - best effort
            log.exception("watchdog action failed")

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


class Renderer:
    """One headless Chromium for many documents; use as a context manager.

    >>> with Renderer(RenderConfig()) as r:                                   # doctest: +SKIP
    ...     doc = r.render("wiki-1", "wikipedia", Path("wiki-1/index.html"), Path("out"))
    """

    def __init__(self, config: RenderConfig | None = None):
        self.config = config or RenderConfig()
        self._pw = None
        self._browser = None
        self._driver_pids: set[int] = set()
        self._browser_pid: int | None = None
        self._executable: str | None = None
        self._session: _Session | None = None
        self.launches = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "Renderer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self._pw is not None:
            return
        import psutil
        from playwright.sync_api import sync_playwright

        me = psutil.Process()
        before = {c.pid for c in me.children()}
        self._pw = sync_playwright().start()
        self._driver_pids = {c.pid for c in me.children()} - before
        self._executable = find_chromium(self.config.chromium_path, playwright=self._pw)
        self._launch()

    def _launch(self) -> None:
        import psutil

        cfg = self.config
        args = list(CHROMIUM_ARGS)
        no_sandbox = cfg.no_sandbox if cfg.no_sandbox is not None else (hasattr(os, "geteuid") and os.geteuid() == 0)
        if no_sandbox:
            args.append("--no-sandbox")
        args += list(cfg.extra_args)
        drivers = [psutil.Process(p) for p in self._driver_pids if psutil.pid_exists(p)]
        before = {c.pid for d in drivers for c in d.children()}
        self._browser = self._pw.chromium.launch(
            executable_path=self._executable,
            headless=True,
            args=args,
            timeout=cfg.launch_timeout_s * 1000,
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )
        after = [c for d in drivers for c in d.children() if c.pid not in before]
        self._browser_pid = after[0].pid if after else None
        self.launches += 1
        log.debug("launched %s (pid %s)", self._executable, self._browser_pid)

    def _kill_browser(self) -> None:
        """Kill this renderer's browser process and its descendants, by id (from any thread)."""
        import psutil

        if self._browser_pid is None:
            log.warning("cannot kill the browser: its process id is unknown")
            return
        try:
            proc = psutil.Process(self._browser_pid)
            family = proc.children(recursive=True)
            proc.kill()
        except psutil.NoSuchProcess:
            return
        for child in family:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass

    def restart_browser(self) -> None:
        """Close (or kill) the browser and launch a fresh one."""
        self._session = None
        if self._browser is not None:
            try:
                if self._browser.is_connected():
                    self._browser.close()
            except Exception:
                self._kill_browser()
        self._browser = None
        self._launch()

    def _ensure_browser(self) -> None:
        if self._pw is None:
            self.start()
        if self._browser is None or not self._browser.is_connected():
            self.restart_browser()

    def close(self) -> None:
        self._session = None
        try:
            if self._browser is not None and self._browser.is_connected():
                self._browser.close()
        except Exception:
            self._kill_browser()
        finally:
            self._browser = None
            if self._pw is not None:
                try:
                    self._pw.stop()
                finally:
                    self._pw = None

    @property
    def browser_pid(self) -> int | None:
        return self._browser_pid

    # -- one document ------------------------------------------------------------------------

    def render(self, doc_id: str, source: str, html_path: str | Path, out_dir: str | Path) -> RenderedDocument:
        """Render one document into ``out_dir/doc_id/`` (page images, then ``layout.json``).

        Raises :class:`DocumentTimeout` past ``timeout_s`` (the browser is then relaunched) and
        :class:`RenderError` (or a Playwright error) on other failures.
        """
        if not doc_id or doc_id in (".", "..") or "/" in doc_id or "\\" in doc_id or "\0" in doc_id:
            raise RenderError(f"doc_id {doc_id!r} cannot name a directory")
        self._ensure_browser()
        cfg = self.config
        html_path = Path(html_path).resolve()
        if not html_path.is_file():
            raise RenderError(f"{doc_id}: no such file {html_path}")
        doc_dir = Path(out_dir) / doc_id
        started = time.monotonic()
        watchdog = _Watchdog(cfg.timeout_s, self._kill_browser)
        try:
            with watchdog:
                session = self._session_for(html_path.parent)
                try:
                    doc = self._render_in(session, doc_id, source, html_path, doc_dir, started)
                except BaseException:
                    self._drop_session()  # never reuse a page that failed
                    raise
                session.documents += 1
                if session.documents >= max(1, cfg.context_reuse):
                    self._drop_session()
        except Exception as exc:
            if watchdog.fired:
                self._browser = None  # killed: relaunch on the next document
                self._session = None
                raise DocumentTimeout(
                    f"{doc_id}: rendering took longer than timeout_s={cfg.timeout_s:g} s (browser killed)"
                ) from exc
            if self._browser is not None and not self._browser.is_connected():
                self._browser = None
                self._session = None
            raise
        if watchdog.fired:  # finished at the last moment; the browser was killed anyway
            self._browser = None
            self._session = None
        return doc

    def _session_for(self, root: Path) -> "_Session":
        """The browser context and page to render in, allowed to read files under ``root``."""
        session = self._session
        if session is None:
            session = self._session = self._new_session()
        else:
            # The previous document's scripts were switched off; the next one's must run.
            session.cdp.send("Emulation.setScriptExecutionDisabled", {"value": False})
        session.root = root.resolve()
        session.blocked = []
        return session

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.context.close()
            except Exception:
                pass

    def _new_session(self) -> "_Session":
        cfg = self.config
        context = self._browser.new_context(
            viewport={
                "width": int(cfg.viewport_width_css),
                "height": int(math.ceil(cfg.page_height / cfg.device_scale_factor)) + 1,
            },
            device_scale_factor=cfg.device_scale_factor,
            service_workers="block",
            accept_downloads=False,
            java_script_enabled=cfg.javascript,
        )
        session = _Session(context)

        def handle(route) -> None:
            # Only files under the current document's folder; everything else is aborted.
            url, root = route.request.url, session.root
            if url.startswith("file://") and root is not None:
                try:
                    path = Path(unquote(urlparse(url).path)).resolve()
                except (OSError, RuntimeError, ValueError):
                    path = None
                if path is not None and (path == root or root in path.parents):
                    route.continue_()
                    return
            if len(session.blocked) < MAX_BLOCKED_LOGGED:
                session.blocked.append(url)
            route.abort("blockedbyclient")

        context.add_init_script(script=NO_WEBRTC_SCRIPT)
        context.route("**/*", handle)
        try:
            context.route_web_socket("**/*", lambda ws: ws.close())
        except Exception:  # older Playwright: websockets are still stopped by the resolver rules
            pass
        session.page = context.new_page()
        session.page.on("dialog", lambda d: d.dismiss())
        session.cdp = context.new_cdp_session(session.page)
        return session

    def _render_in(self, session: "_Session", doc_id: str, source: str, html_path: Path, doc_dir: Path,
                   started: float) -> RenderedDocument:
        prep = self._prepare(session, source, html_path, started)
        doc_dir.mkdir(parents=True, exist_ok=True)
        (doc_dir / LAYOUT_FILE).unlink(missing_ok=True)
        t = time.monotonic()
        pages, cuts = self._paginate(prep, doc_dir)
        prep.timings["paginate"] = round(time.monotonic() - t, 4)
        return self._finish(prep, doc_id, source, html_path, doc_dir, pages, cuts, started, session.blocked)

    def _prepare(self, session: "_Session", source: str, html_path: Path, started: float) -> "_Prepared":
        """Load, settle, clean and measure the document; returns the live page and its elements."""
        cfg = self.config
        dsf = float(cfg.device_scale_factor)
        page_w, page_h = cfg.page_width, cfg.page_height
        timings: dict[str, float] = {}
        warnings: list[str] = []

        def remaining_ms(bound_s: float) -> float:
            left = cfg.timeout_s - (time.monotonic() - started)
            return max(1.0, min(bound_s, left)) * 1000

        def lap(name: str, t0: float) -> float:
            now = time.monotonic()
            timings[name] = round(now - t0, 4)
            return now

        page, cdp = session.page, session.cdp
        t = time.monotonic()
        page.goto(html_path.as_uri(), wait_until="load", timeout=remaining_ms(cfg.navigation_timeout_s))
        t = lap("load", t)

        has_scripts = page.evaluate(_JS_PREPARE)
        if cfg.lazy_scroll and cfg.javascript and has_scripts:
            page.evaluate(_JS_LAZY_SCROLL, [cfg.max_scroll_steps])
        # Bounded inside the page (a plain evaluate: cheaper than wait_for_function's machinery).
        if not page.evaluate(_JS_IMAGES_READY, [remaining_ms(cfg.image_wait_timeout_s)]):
            warnings.append(f"images or fonts still loading after {cfg.image_wait_timeout_s:g} s")
        t = lap("settle", t)

        # From here on the document's own scripts cannot change what was measured.
        cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        removed = page.evaluate(_JS_CLEAN, [cfg.selectors_for(source), cfg.remove_fixed])
        if removed.get("bad_selectors"):
            warnings.append(f"unparsable clutter selectors ignored: {removed['bad_selectors']}")
        metrics = page.evaluate(_JS_METRICS)
        max_row_css = cfg.max_row_height_fraction * page_h / dsf
        raw = page.evaluate(_JS_EXTRACT, [cfg.fact_attribute, cfg.id_attribute, max_row_css])
        lap("extract", t)

        doc_h = max(1, int(math.ceil(float(metrics["height"]) * dsf - 1e-6)))
        background = [int(c) for c in metrics["background"]]
        # Elements in document pixels, clipped to the document; drop those left with no area.
        elems = []
        for r in raw:
            x0, y0, x1, y1 = (float(v) * dsf for v in r["box"])
            x0, x1 = max(0.0, x0), min(float(page_w), x1)
            y0, y1 = max(0.0, y0), min(float(doc_h), y1)
            if x1 - x0 <= 0 or y1 - y0 <= 0:
                continue
            elems.append({**r, "box": [x0, y0, x1, y1]})
        boxes = np.array([e["box"] for e in elems], dtype=np.float64).reshape(-1, 4)
        atomic = np.array([e["atomic"] for e in elems], dtype=bool)
        return _Prepared(page, cdp, elems, boxes, boxes[atomic], doc_h, background, timings, warnings)

    def _paginate(self, prep: "_Prepared", doc_dir: Path) -> tuple[list[RenderedPage], list[int]]:
        """Cut the document window by window, writing each page image (atomically) as it goes.

        Returns the pages (``dom_text`` still empty) and the page boundaries ``[0, cut1, ..., end]``.
        """
        cfg = self.config
        shooter = _Shooter(prep.cdp, prep.page, cfg)
        cuts = [0]
        pages: list[RenderedPage] = []
        start = 0
        t_cut = t_shot = 0.0
        # Below the last recorded element there is only margin: it does not get a page of its own.
        content_end = int(np.ceil(prep.boxes[:, 3].max())) if len(prep.boxes) else prep.doc_h
        while start < min(prep.doc_h, content_end) or not pages:
            t0 = time.monotonic()
            decision = self._decide_cut(shooter, start, prep.atomic_boxes, prep.doc_h, prep.background)
            t1 = time.monotonic()
            cut = decision.cut
            data = shooter.page_image(start, cut)
            index = len(pages)
            name = f"page-{index:03d}{cfg.image_suffix}"
            with atomic_path(doc_dir / name) as tmp:
                tmp.write_bytes(data)
            del data
            pages.append(RenderedPage(index, name, cfg.page_width, cfg.page_height, int(start), int(cut - start),
                                      decision.reason, ""))
            cuts.append(cut)
            start = cut
            t2 = time.monotonic()
            t_cut += t1 - t0
            t_shot += t2 - t1
        prep.timings["cut"] = round(t_cut, 4)
        prep.timings["pages"] = round(t_shot, 4)
        return pages, cuts

    def _finish(self, prep: "_Prepared", doc_id: str, source: str, html_path: Path, doc_dir: Path,
                pages: list[RenderedPage], cuts: list[int], started: float, blocked: list[str]) -> RenderedDocument:
        """Place the elements on the pages, fill in the pages' text, write layout.json (last)."""
        cfg = self.config
        assignment = assign_elements(prep.boxes, cuts, page_width=cfg.page_width)
        elements: list[RenderedElement] = []
        for i, e in enumerate(prep.elems):
            elements.append(
                RenderedElement(
                    element_id=e["id"],
                    element_type=e["type"],
                    page_index=int(assignment.page_index[i]),
                    bbox=[round(float(v), 2) for v in assignment.bbox[i]],
                    spans_pages=bool(assignment.spans_pages[i]),
                    text=e["text"] or "",
                    fact=e["fact"],
                    atomic=bool(e["atomic"]),
                    nested=bool(e["nested"]),
                    doc_bbox=[round(float(v), 2) for v in e["box"]],
                )
            )
        by_page: dict[int, list[RenderedElement]] = {}
        for e in elements:
            if e.text and not e.nested and e.element_type not in CONTAINER_TYPES:
                by_page.setdefault(e.page_index, []).append(e)
        for p in pages:
            units = sorted(by_page.get(p.page_index, []), key=lambda e: (e.doc_bbox[1], e.doc_bbox[0]))
            p.dom_text = "\n".join(e.text for e in units)

        # Page images of an earlier, longer rendering of this document would be stale.
        keep = {p.image for p in pages}
        for old in doc_dir.glob("page-*"):
            if old.name not in keep and old.suffix in (".png", ".jpg"):
                old.unlink(missing_ok=True)
        prep.timings["total"] = round(time.monotonic() - started, 4)
        doc = RenderedDocument(
            doc_id=doc_id,
            source=source,
            directory=doc_dir,
            html_path=str(html_path),
            page_width=cfg.page_width,
            page_height=cfg.page_height,
            device_scale_factor=float(cfg.device_scale_factor),
            document_height=prep.doc_h,
            background=prep.background,
            pages=pages,
            elements=elements,
            warnings=prep.warnings,
            timings=prep.timings,
            blocked_requests=list(blocked),
        )
        atomic_write_json(doc.to_json(), doc_dir / LAYOUT_FILE)
        return doc

    def _decide_cut(self, shooter: "_Shooter", start: int, atomic_boxes: np.ndarray, doc_h: int,
                    background: list[int]) -> CutDecision:
        """:func:`choose_cut` for the window at ``start``, capturing as few pixels as it can.

        The pixels of the whole cut band are only needed when the nearest box-free run(s) hold no
        blank row, or when no box-free row exists and the cut must go through an element. Before
        that, the ``cut_probes`` runs of box-free rows nearest the nominal cut are captured alone
        (a few rows each, typically the gap between two paragraphs).
        """
        cfg = self.config
        nominal = start + cfg.page_height
        kw = dict(
            page_height=cfg.page_height,
            doc_height=doc_h,
            cut_window=cfg.cut_window,
            min_fill=cfg.min_fill,
            background=background,
            tolerance=cfg.blank_tolerance,
        )
        if doc_h <= nominal:
            return choose_cut(None, 0, start, atomic_boxes, **kw)
        lo = max(start + 1, nominal - cfg.cut_window)
        near = atomic_boxes[(atomic_boxes[:, 3] > start) & (atomic_boxes[:, 1] < nominal)]
        runs = box_free_runs(near, lo, nominal)
        for first, last in runs[: cfg.cut_probes]:
            pixels, top = shooter.strip(first - 1, last, scroll_top=start)
            decision = choose_cut(pixels, top, start, near, **kw)
            if decision.reason == "blank":
                return decision
        if runs and len(runs) <= cfg.cut_probes:
            return decision  # every box-free run probed, none blank: "box_free"
        if not runs:
            decision = choose_cut(None, 0, start, near, **kw)
            if decision.reason == "push":
                return decision
        pixels, top = shooter.strip(lo - 1, nominal, scroll_top=start)
        return choose_cut(pixels, top, start, near, **kw)


@dataclass
class _Session:
    """A browser context with one page, reused for up to ``context_reuse`` documents (internal)."""

    context: Any
    page: Any = None
    cdp: Any = None
    root: Path | None = None
    blocked: list[str] = field(default_factory=list)
    documents: int = 0


@dataclass
class _Prepared:
    """A loaded, cleaned and measured document (internal; boxes in document device pixels)."""

    page: Any
    cdp: Any
    elems: list[dict[str, Any]]
    boxes: np.ndarray
    atomic_boxes: np.ndarray
    doc_h: int
    background: list[int]
    timings: dict[str, float]
    warnings: list[str]


class _Shooter:
    """Clipped captures of the live page through the Chrome DevTools Protocol.

    ``Page.captureScreenshot`` of a region inside the viewport (the viewport is one page tall, and
    the page is scrolled to the region) with ``optimizeForSpeed``: several times faster than a
    ``captureBeyondViewport`` (``page.screenshot(full_page=True)``) capture, and the memory of one
    capture is bounded by the viewport, not the document.
    """

    def __init__(self, cdp, page, cfg: RenderConfig):
        self.cdp = cdp
        self.cfg = cfg
        self.dsf = float(cfg.device_scale_factor)
        self.width_css = float(cfg.viewport_width_css)
        self.page = page
        self.viewport_height_css = float(page.viewport_size["height"])
        # The CDP clip scale is relative to the scale this session believes in; calibrate it once
        # so that one CSS pixel gives device_scale_factor output pixels.
        probe = self._capture(0.0, 10.0, "png", scale=1.0, width_css=10.0)
        self.scale = self.dsf * 10.0 / _png_size(probe)[0]
        self._view: tuple[float, float] | None = None  # (scrollY, innerHeight), CSS px
        self._overlay: tuple[float, float] = (0.0, 0.0)

    def _position(self, top_css: float, height_css: float, overlay: tuple[float, float] | None,
                  scroll_css: float | None = None) -> None:
        """Scroll (to ``scroll_css``, default ``top_css``) so that the rows are in the viewport and
        show or hide the white overlay; no round trip when nothing needs to change."""
        overlay = overlay or (0.0, 0.0)

        def fits(view) -> bool:
            return view is not None and view[0] <= top_css + 1e-6 and top_css + height_css <= view[0] + view[1] + 1e-6

        if overlay == self._overlay and fits(self._view):
            return
        scroll_to = math.floor(top_css if scroll_css is None else min(scroll_css, top_css))
        sy, vh = self.page.evaluate(_JS_POSITION, [overlay[0], overlay[1], self.width_css, scroll_to])
        self._view, self._overlay = (float(sy), float(vh)), overlay
        if not fits(self._view):
            raise RenderError(
                f"cannot bring rows [{top_css}, {top_css + height_css}) CSS into view "
                f"(scrolled to {sy}, viewport height {vh})"
            )

    def _capture(self, top_css: float, height_css: float, fmt: str, scale: float | None = None,
                 width_css: float | None = None) -> bytes:
        params: dict[str, Any] = {
            "format": fmt,
            "clip": {"x": 0, "y": top_css, "width": width_css or self.width_css, "height": height_css,
                     "scale": self.scale if scale is None else scale},
            "captureBeyondViewport": False,
            "optimizeForSpeed": True,
        }
        if fmt == "jpeg":
            params["quality"] = int(self.cfg.jpeg_quality)
        return base64.b64decode(self.cdp.send("Page.captureScreenshot", params)["data"])

    def strip(self, row0: int, row1: int, scroll_top: int | None = None) -> tuple[np.ndarray, int]:
        """The pixels of document rows covering ``[row0, row1)``: ``(array, its first row)``.

        ``scroll_top`` (device px): scroll there rather than to ``row0`` when it keeps the rows in
        view (the window's top, so that the page capture that follows needs no scrolling)."""
        top_css = math.floor(row0 / self.dsf)
        bottom_css = max(math.ceil(row1 / self.dsf), top_css + 1)
        scroll_css = None
        if scroll_top is not None and bottom_css - scroll_top / self.dsf <= self.viewport_height_css:
            scroll_css = scroll_top / self.dsf
        self._position(top_css, bottom_css - top_css, None, scroll_css)
        data = self._capture(top_css, bottom_css - top_css, "png")
        pixels = _decode_rgb(data)
        return pixels, int(round(top_css * self.dsf))

    def page_image(self, start: int, cut: int) -> bytes:
        """The encoded page image: document rows ``[start, cut)``, white below, page_height tall."""
        cfg = self.cfg
        top_css = start / self.dsf
        height_css = cfg.page_height / self.dsf
        pad = (start + cfg.page_height - cut) / self.dsf
        self._position(top_css, height_css, (cut / self.dsf, pad) if pad > 0 else None)
        data = self._capture(top_css, height_css, cfg.image_format)
        size = _image_size(data)
        if size != (cfg.page_width, cfg.page_height):
            raise RenderError(f"page capture is {size[0]}x{size[1]}, expected {cfg.page_width}x{cfg.page_height}")
        return data


# --------------------------------------------------------------------------------------------
# Batches


@dataclass
class BatchReport:
    """What one :func:`render_batch` call did."""

    rendered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Documents whose ``layout.json`` already existed (not rendered again)."""
    failed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """doc_id -> ``"ErrorType: message"`` for the failed documents (also in failures.jsonl)."""
    pages: dict[str, int] = field(default_factory=dict)
    """doc_id -> number of pages, for rendered and skipped documents."""
    pages_rendered: int = 0
    wall_s: float = 0.0
    browser_launches: int = 0

    @property
    def n_pages(self) -> int:
        return sum(self.pages.values())


def _record_failure(out_dir: Path, doc_id: str, source: str, html_path: Path, exc: BaseException, elapsed: float) -> None:
    entry = {
        "doc_id": doc_id,
        "source": source,
        "html_path": str(html_path),
        "error_type": type(exc).__name__,
        "error": str(exc).strip().splitlines()[0][:2000] if str(exc).strip() else repr(exc),
        "elapsed_s": round(elapsed, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / FAILURES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def render_batch(
    docs: Iterable[tuple[str, str, str | Path]],
    out_dir: str | Path,
    config: RenderConfig | None = None,
    *,
    progress: bool = True,
    renderer: Renderer | None = None,
) -> BatchReport:
    """Render ``(doc_id, source, html_path)`` documents into ``out_dir`` with one browser.

    Resumable: a document whose ``out_dir/<doc_id>/layout.json`` exists is skipped. A document that
    fails (timeout, navigation error, browser crash, ...) is appended to ``out_dir/failures.jsonl``
    (one JSON object per line: doc_id, source, html_path, error_type, error, elapsed_s, time) and
    the batch goes on; a crashed or killed browser is relaunched. Pass ``renderer`` to reuse an open
    :class:`Renderer` (its config is then used).
    """
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = list(docs)
    report = BatchReport()
    t0 = time.monotonic()
    own = renderer is None
    renderer = renderer or Renderer(config)
    doc_bar = tqdm(total=len(docs), desc="documents", unit="doc", disable=not progress, position=0)
    page_bar = tqdm(desc="pages", unit="page", disable=not progress, position=1)
    launches0 = renderer.launches
    try:
        for doc_id, source, html_path in docs:
            html_path = Path(html_path)
            layout = out_dir / doc_id / LAYOUT_FILE
            if layout.exists():
                try:
                    report.pages[doc_id] = int(json.loads(layout.read_text())["n_pages"])
                    report.skipped.append(doc_id)
                    doc_bar.update(1)
                    continue
                except (ValueError, KeyError, OSError) as exc:
                    log.warning("%s: unreadable %s (%s); rendering again", doc_id, layout, exc)
            started = time.monotonic()
            try:
                doc = renderer.render(doc_id, source, html_path, out_dir)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                elapsed = time.monotonic() - started
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log.warning("%s failed after %.1f s: %s: %s", doc_id, elapsed, type(exc).__name__, msg)
                log.debug("%s", traceback.format_exc())
                _record_failure(out_dir, doc_id, source, html_path, exc, elapsed)
                report.failed.append(doc_id)
                report.errors[doc_id] = f"{type(exc).__name__}: {msg}"
            else:
                report.rendered.append(doc_id)
                report.pages[doc_id] = len(doc.pages)
                report.pages_rendered += len(doc.pages)
                page_bar.update(len(doc.pages))
            doc_bar.update(1)
            doc_bar.set_postfix(failed=len(report.failed), refresh=False)
    finally:
        doc_bar.close()
        page_bar.close()
        report.browser_launches = renderer.launches - launches0
        if own:
            renderer.close()
    report.wall_s = round(time.monotonic() - t0, 3)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vldocir.construction.render OUT_DIR FILE.html ... [--source S]``: doc_id = file stem."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("html", nargs="+", type=Path)
    ap.add_argument("--source", default="generic")
    ap.add_argument("--timeout-s", type=float, default=RenderConfig.timeout_s)
    ap.add_argument("--format", choices=("png", "jpeg"), default="png")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = RenderConfig(timeout_s=args.timeout_s, image_format=args.format)
    report = render_batch([(p.stem, args.source, p) for p in args.html], args.out_dir, cfg)
    print(json.dumps({k: v for k, v in asdict(report).items() if k != "pages"}, indent=2))
    return 1 if report.failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
