"""What a rendering records about a document: its elements (ids, types, boxes, texts, facts), its
pages, and the ``layout.json`` they are written to; the extraction of the elements from the live
page (step 3) and their placement on the pages once the cuts are known.

``layout.json`` (``"version": 6``; a layout of another version is not read: the batch renders its
document again, :func:`load_layout` names the file)::

    {
      "version": 6, "doc_id": str, "source": str, "html_path": str,
      "html_sha256": str,                 # the HTML file rendered
      "render_key": str,                  # RenderConfig.output_key(): the settings that shape the pages
      "files": {"page-000.png": {"bytes": int, "sha256": str}, ...},   # every page image
      "sha256": str,                      # of this JSON (keys sorted, compact) without this field
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
                    "text": str, "fact": str | null,
                    "fragments": [{"page_index": int, "bbox": [x0, y0, x1, y1]}] | null}],
                                          # an element drawn in two or more boxes (split over CSS
                                          # columns or pages): each box on its page, page pixels,
                                          # in flow order; null for one box (bbox is then all of it)
      "warnings": [str],                  # e.g. images still loading after image_wait_timeout_s
      "timings": {step: seconds},         # load, settle, extract, cut, pages, paginate, total
      "blocked_requests": [url],          # requests aborted (outside the document's folder)
      "cleanup": [{"rule", "source", "kind", "removed", "kept_formula", "changed", "content"}],
                                          # what each clean-up rule removed (cleanup.py, clean_page)
      "fit": {"opened": int, "scaled": [...]},   # wide content laid out (cleanup.py, fit_wide)
      "overflow": [{"element_id", "element_type", "box", "reach", "beyond_px", "dropped"}],
                                          # content still reaching past the page's sides (overflow_elements)
      "images": {"count", "resolved_lazy", "failed": [{"url", "status", "element_id", "alt"}]}
                                          # images that show nothing (images.py, image_report)
    }

Element types: ``text`` (p, blockquote, dd, dt, li, pre, address, and the own text of any other
block, e.g. a leaf ``div``), ``headline`` (h1-h6), ``list`` (ul, ol, dl, menu), ``table``,
``table_row`` (tr), ``image`` (img, svg, canvas, picture, and a video showing a picture: its poster
loaded, or a frame), ``media`` (audio, and a video showing no picture: a player whose content is not
on the page), ``embed`` (iframe, frame, object, embed: a frame whose document is not read),
``caption`` (figcaption, caption), ``formula`` (math, mjx-container, or a class starting with
formula / equation / katex / mathjax / mjx- / ltx_equation / mwe-math-element, or ltx_Math /
ltx_DisplayMath: ``formula.js``; its text is its renderings' sources, e.g. MathML alttext or
MathJax's TeX, and any other text in it such as an equation number; a formula with neither text nor
drawing, empty in the source, is not recorded). ``table`` and ``list`` are containers: not atomic
for cutting and not part of ``dom_text`` (a table contributes through its rows, a list through its
items). A text element holding blocks (an ``li`` with a nested list, a blockquote of paragraphs)
records its own inline text only; a table row holding a nested table or taller than
``max_row_height_fraction`` of a page (a layout row) records its cells' contents instead. A layout
table (``tables.js``: role presentation or none, or no header cells, caption, thead, tfoot or
class wikitable and every cell that holds anything holding a picture, a frame or a nested table, as
LaTeXML's grids of figure panels) gives no ``table`` or ``table_row`` element: its cells' contents are recorded
as what they are (images, captions, text). A text unit that draws no text (a row of images) is not
recorded; what it holds is.
``nested`` marks images, formulas, media and frames inside another text unit (their text is already
in it). ``dom_text`` of a page is the text of its non-container, non-nested elements with text whose
top lies on the page, in reading order (by ``(y0, x0)``), joined by newlines. Texts are what is
drawn: an ``img`` that shows its picture has no text (its alt text is not drawn); one that failed
to load draws its alt text, which is its text and part of the text of the unit it stands in; the
text of an inline ``svg`` is its ``<text>`` content; ``media`` and ``embed`` have none. Step 1
(``prepare.js``) makes the page draw what its markup means where Chromium would not: a
``<noscript>`` goes when the document's scripts ran (``javascript=True``: its content was parsed as
text, never shown; Chromium would draw it as raw markup once scripts are off) and is content
otherwise; MathML ``<mfenced>``, which MathML Core dropped, becomes the ``<mrow>`` of ``<mo>`` fences
and separators MathML 3 defines it as, so both are drawn and in the text.

What a rendering vouches for, and when it is checked (:func:`check_rendered`): the layout's own
checksum and every page image's size whenever it is read (:func:`load_layout`); the document id, the
HTML file's digest and the render settings' key, and every page image's SHA-256, before the batch
skips a document as already rendered (:func:`~vldocir.construction.render.batch.render_batch`,
``verify="full"``, the builds' policy: the assembly reads every image next anyway). A rendering that
does not verify is rendered again; one read outside the batch raises
:class:`~vldocir.cache.CorruptArtifactError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vldocir.cache import CorruptArtifactError
from vldocir.construction.paginate import assign_elements, split_over_pages
from vldocir.construction.render.browser import page_script
from vldocir.construction.render.config import RenderConfig
from vldocir.io import file_digest

LAYOUT_FILE = "layout.json"
LAYOUT_VERSION = 6
CONTAINER_TYPES = frozenset({"table", "list"})
ELEMENT_TYPES = ("text", "headline", "list", "table", "table_row", "image", "caption", "formula", "media", "embed")

_JS_METRICS = page_script("metrics.js")
_JS_EXTRACT = page_script("extract.js")
_JS_OVERFLOW = page_script("overflow.js")


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
    fragments: list[dict[str, Any]] | None = None
    """The boxes the element is drawn in when it is split (over CSS columns, over pages): ``[{"page_index":
    int, "bbox": [x0, y0, x1, y1]}, ...]`` in page pixels, in flow order; ``None`` when it is one box
    (``bbox``, on ``page_index``). ``bbox`` stays the box around all of it on its page."""


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
    cleanup: list[dict[str, Any]] = field(default_factory=list)
    """The clean-up's removal record, one entry per rule (:func:`.cleanup.clean_page`)."""
    fit: dict[str, Any] = field(default_factory=dict)
    """Wide content laid out: scroll containers opened, elements scaled (:func:`.cleanup.fit_wide`)."""
    overflow: list[dict[str, Any]] = field(default_factory=list)
    """Content elements still reaching past the page's left or right side (:func:`overflow_elements`)."""
    images: dict[str, Any] = field(default_factory=dict)
    """Images that show nothing, with their URLs (:func:`.images.image_report`)."""
    html_sha256: str = ""
    """SHA-256 of the HTML file rendered."""
    render_key: str = ""
    """:meth:`RenderConfig.output_key` of the settings it was rendered with."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Page image name -> ``{"bytes", "sha256"}``."""

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
            "cleanup": list(self.cleanup),
            "fit": dict(self.fit),
            "overflow": list(self.overflow),
            "images": dict(self.images),
            "html_sha256": self.html_sha256,
            "render_key": self.render_key,
            "files": {name: dict(record) for name, record in self.files.items()},
        }

    def sealed_json(self) -> dict[str, Any]:
        """:meth:`to_json` with its own checksum (``sha256``): what ``layout.json`` holds."""
        obj = json.loads(json.dumps(self.to_json()))
        return {**obj, "sha256": layout_digest(obj)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], directory: Path) -> RenderedDocument:
        if obj.get("version") != LAYOUT_VERSION:
            raise CorruptArtifactError(
                directory / LAYOUT_FILE,
                f"is layout version {obj.get('version')!r}; this "
                f"code reads version {LAYOUT_VERSION}: render the document again",
            )
        if obj.get("sha256") != layout_digest(obj):
            raise CorruptArtifactError(
                directory / LAYOUT_FILE, "does not match its checksum: render the document again"
            )
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
            warnings=list(obj["warnings"]),
            timings=dict(obj["timings"]),
            blocked_requests=list(obj["blocked_requests"]),
            cleanup=list(obj["cleanup"]),
            fit=dict(obj["fit"]),
            overflow=list(obj["overflow"]),
            images=dict(obj["images"]),
            html_sha256=str(obj["html_sha256"]),
            render_key=str(obj["render_key"]),
            files={str(name): dict(record) for name, record in obj["files"].items()},
        )


def layout_digest(obj: dict[str, Any]) -> str:
    """SHA-256 of a layout's JSON (keys sorted, compact) without its ``sha256`` field."""
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    """What a layout vouches for about a page image: its size and SHA-256."""
    return {"bytes": path.stat().st_size, "sha256": file_digest(path)}


def load_layout(doc_dir: str | Path, full: bool = False) -> RenderedDocument:
    """Read ``doc_dir/layout.json`` back into a :class:`RenderedDocument`, checking its checksum and
    that every page image it vouches for is there with its size (``full``: and its SHA-256). A file of
    another layout version, a damaged one or a damaged page image raises
    :class:`~vldocir.cache.CorruptArtifactError` naming the file."""
    doc_dir = Path(doc_dir)
    path = doc_dir / LAYOUT_FILE
    try:
        doc = RenderedDocument.from_json(json.loads(path.read_text()), doc_dir)
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # (CorruptArtifactError is none of these)
        raise CorruptArtifactError(path, f"is unreadable ({type(error).__name__}: {error})") from None
    for page in doc.pages:
        image, vouched = doc_dir / page.image, doc.files.get(page.image)
        if vouched is None:
            raise CorruptArtifactError(path, f"does not vouch for {page.image}: render the document again")
        if not image.is_file():
            raise CorruptArtifactError(image, "is missing: render the document again")
        if image.stat().st_size != vouched["bytes"]:
            raise CorruptArtifactError(
                image, f"has {image.stat().st_size} bytes, {path} vouches for {vouched['bytes']}: render it again"
            )
        if full and file_digest(image) != vouched["sha256"]:
            raise CorruptArtifactError(image, f"does not match its checksum in {path}: render the document again")
    return doc


def check_rendered(
    doc_dir: Path, doc_id: str, html_sha256: str | None, render_key: str, full: bool = True
) -> tuple[RenderedDocument | None, str | None]:
    """``(the rendering in doc_dir, None)`` when it is that of ``doc_id`` from HTML of digest
    ``html_sha256`` with settings ``render_key`` and passes :func:`load_layout`'s checks (``full``:
    page images hashed); else ``(None, why not)``, or ``(None, None)`` when there is no ``layout.json``."""
    path = doc_dir / LAYOUT_FILE
    if not path.is_file():
        return None, None
    try:
        doc = load_layout(doc_dir, full=full)
    except CorruptArtifactError as error:
        return None, str(error)
    if doc.doc_id != doc_id:
        return None, f"{path} is the rendering of {doc.doc_id!r}"
    if doc.html_sha256 != html_sha256:
        return None, f"{path} was rendered from other HTML than the file it names now"
    if doc.render_key != render_key:
        return None, f"{path} was rendered with other settings (key {doc.render_key}, not {render_key})"
    return doc, None


def extract_elements(
    page: Any, cfg: RenderConfig
) -> tuple[list[dict[str, Any]], np.ndarray, int, list[int], list[dict[str, Any]]]:
    """Tag and measure the content elements of a loaded, cleaned page (step 3).

    Returns ``(elems, boxes, doc_h, background, overflow)``: the element records in document order
    (``id``, ``type``, ``box``, ``text``, ``fact``, ``atomic``, ``nested``, ``fragments``) with ``box``
    in document device pixels, clipped to the document (elements left with no area are dropped), and
    ``fragments`` the boxes of an element drawn in two or more places (one per CSS column), clipped
    likewise, or ``None``; ``boxes``,
    their boxes as a float64 array of shape ``(n, 4)``, ``[x0, y0, x1, y1]``; the document's height
    in device pixels; its background colour ``[r, g, b]``; the elements reaching past the page's
    sides (:func:`overflow_elements`, dropped ones included).
    """
    dsf = float(cfg.device_scale_factor)
    page_w, page_h = cfg.page_width, cfg.page_height
    metrics = page.evaluate(_JS_METRICS)
    max_row_css = cfg.max_row_height_fraction * page_h / dsf
    raw = page.evaluate(_JS_EXTRACT, [cfg.fact_attribute, cfg.id_attribute, max_row_css])

    doc_h = max(1, math.ceil(float(metrics["height"]) * dsf - 1e-6))
    background = [int(c) for c in metrics["background"]]

    # Elements in document pixels, clipped to the document; drop those left with no area.
    def clipped(box: list[float]) -> list[float] | None:
        x0, y0, x1, y1 = (float(v) * dsf for v in box)
        x0, x1 = max(0.0, x0), min(float(page_w), x1)
        y0, y1 = max(0.0, y0), min(float(doc_h), y1)
        return [x0, y0, x1, y1] if x1 - x0 > 0 and y1 - y0 > 0 else None

    elems = []
    for r in raw:
        box = clipped(r["box"])
        if box is None:
            continue
        fragments = [f for f in map(clipped, r.get("fragments") or []) if f is not None]
        elems.append({**r, "box": box, "fragments": fragments if len(fragments) > 1 else None})
    boxes = np.array([e["box"] for e in elems], dtype=np.float64).reshape(-1, 4)
    spill = page.evaluate(_JS_OVERFLOW, [cfg.id_attribute, 0.5])
    return elems, boxes, doc_h, background, overflow_elements(spill, raw, elems, dsf, page_w)


def overflow_elements(
    spill: list[dict[str, Any]], raw: list[dict[str, Any]], elems: list[dict[str, Any]], dsf: float, page_width: int
) -> list[dict[str, Any]]:
    """The recorded elements reaching past the page's left or right side (``spill``, from
    ``overflow.js``: by their box or by content spilling out of it; outermost only), in document
    device pixels::

        {"element_id": str, "element_type": str,
         "box": [x0, y0, x1, y1],   # the element's box, unclipped
         "reach": float,            # the rightmost point of its content
         "beyond_px": float,        # how far it reaches past the sides (the larger of left, right)
         "dropped": bool}           # no part of it is on the page: not among the elements
    """
    types = {r["id"]: r["type"] for r in raw}
    kept = {e["id"] for e in elems}
    out = []
    for s in spill:
        box = [round(float(v) * dsf, 2) for v in s["box"]]
        reach = round(float(s["reach"]) * dsf, 2)
        out.append(
            {
                "element_id": s["id"],
                "element_type": types.get(s["id"], ""),
                "box": box,
                "reach": reach,
                "beyond_px": round(max(-box[0], reach - page_width), 2),
                "dropped": s["id"] not in kept,
            }
        )
    return out


def place_elements(
    elems: list[dict[str, Any]],
    boxes: np.ndarray,
    cuts: list[int],
    pages: list[RenderedPage],
    page_width: int,
    slack: float = 0.0,
) -> list[RenderedElement]:
    """The element records on their pages, given the page boundaries ``cuts`` (``[0, cut1, ...,
    end]``) and the cuts' ``slack`` (:func:`~vldocir.construction.paginate.assign_elements`); fills
    in each page's ``dom_text`` (see the module docstring). An element's ``fragments`` are its boxes
    (its column fragments, else its box) cut at the page boundaries
    (:func:`~vldocir.construction.paginate.split_over_pages`), when that makes two or more."""
    assignment = assign_elements(boxes, cuts, page_width=page_width, slack=slack)
    elements: list[RenderedElement] = []
    for i, e in enumerate(elems):
        parts = split_over_pages(e.get("fragments") or [e["box"]], cuts, page_width=page_width, slack=slack)
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
                fragments=[{"page_index": p, "bbox": [round(float(v), 2) for v in b]} for p, b in parts]
                if len(parts) > 1
                else None,
            )
        )
    by_page: dict[int, list[RenderedElement]] = {}
    for e in elements:
        if e.text and not e.nested and e.element_type not in CONTAINER_TYPES:
            by_page.setdefault(e.page_index, []).append(e)
    for p in pages:
        units = sorted(by_page.get(p.page_index, []), key=lambda e: (e.doc_bbox[1], e.doc_bbox[0]))
        p.dom_text = "\n".join(e.text for e in units)
    return elements
