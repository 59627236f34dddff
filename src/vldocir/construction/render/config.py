"""What a rendering is asked for (:class:`RenderConfig`, with the clutter removed per source by
default) and how one fails (:class:`RenderError`, :class:`DocumentTimeout`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vldocir.cache import content_key
from vldocir.construction.render.rules import DEFAULT_CLUTTER_SELECTORS, DEFAULT_PAGE_RULES
from vldocir.errors import VldocirError


def _default_clutter() -> dict[str, list[str]]:
    return {k: list(v) for k, v in DEFAULT_CLUTTER_SELECTORS.items()}


def _default_page_rules() -> dict[str, list[str]]:
    return {k: list(v) for k, v in DEFAULT_PAGE_RULES.items()}


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
    cut_margin: int = 1
    """A clean cut has clean pixel rows around it: the page's last row and this many on either side
    (blank, or vertical strokes only: a table rule or a text line is never split between pages)."""
    cut_slack: int = 4
    """A clean cut may lie this many pixels inside an element's top or bottom edge (the padding of
    a table row around its rule); the element is then placed wholly on one page."""
    keep_headings_with_next: bool = True
    """A heading never ends a page: the cut goes above it or below the start of what follows."""
    image_format: str = "png"
    """``png`` or ``jpeg``."""
    jpeg_quality: int = 92
    navigation_timeout_s: float = 30.0
    """Bound on loading the HTML file (until the ``load`` event)."""
    image_wait_timeout_s: float = 10.0
    """Bound on waiting for images (``img.complete``) and web fonts; rendering goes on after it."""
    timeout_s: float = 120.0
    """Bound on one document until it is measured (load, settle, clean, extract); then the bound
    grows by ``timeout_per_page_s`` per page of its height. Past it the browser is killed and
    relaunched, the document's pages are removed and it is recorded as failed."""
    timeout_per_page_s: float = 5.0
    """Seconds added to ``timeout_s`` per page of the measured document (height / page_height)."""
    launch_timeout_s: float = 60.0
    lazy_scroll: bool = True
    """Scroll through the document in viewport steps first, to trigger lazily loaded content
    (only where the document's scripts listen to scrolling or observe intersections:
    ``loading=lazy`` is turned into ``eager`` and ``content-visibility`` forced ``visible`` anyway,
    so nothing else can load lazily)."""
    max_scroll_steps: int = 400
    """At most this many scroll steps (a bound for endlessly growing documents)."""
    remove_fixed: bool = True
    """Remove ``position: fixed`` elements (overlays, toolbars, banners); ``sticky`` ones are made
    ``static`` in any case, so that they are drawn once, where they belong."""
    javascript: bool = True
    """Run the documents' scripts while loading (scripts are switched off before measuring)."""
    context_reuse: int = 20
    """Documents rendered one after the other in one browser context and page (one renderer
    process) before it is replaced by a fresh one; it is also replaced after any failure. Between
    two documents the page is unloaded into ``about:blank`` and the storage of ``file://``
    (``localStorage``, ``sessionStorage``, IndexedDB, ...) is cleared: measured on the real pages of
    ``../shared/real-html`` in every order, a document then renders as in a fresh context, to the
    bytes of its page images (``tests/construction/test_render_reuse.py``; hence speed-only). That costs ~0.06 s
    per document; a fresh context (and renderer process) costs 0.5-1 CPU-s per document here."""
    clutter_selectors: dict[str, list[str]] = field(default_factory=_default_clutter)
    """CSS selectors of elements removed before measuring, per source; key ``"*"``: all sources.
    Defaults: :data:`DEFAULT_CLUTTER_SELECTORS` (:mod:`.rules` names the page feature of each)."""
    page_rules: dict[str, list[str]] = field(default_factory=_default_page_rules)
    """Page rules (``page_rules.js``: clean-up a selector cannot express) run per source after the
    selectors; key ``"*"``: all sources. Defaults: :data:`DEFAULT_PAGE_RULES` (see :mod:`.rules`)."""
    fit_wide: bool = True
    """Lay out content wider than the viewport (``fit.js``: long words wrap, scroll containers open,
    wide elements are scaled with CSS ``zoom`` to the width left of them); whatever still overflows
    is listed in ``layout.json`` (``overflow``)."""
    fit_min_text_scale: float = 0.4
    """The smallest scale for a wide element holding text (images, SVG, canvas, video: no bound)."""
    resolve_lazy_images: bool = True
    """Point lazy images (``data-src``, ``data-srcset``, ...) and ``srcset`` candidates at the
    document's own files where those exist, before waiting for images."""
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
    workers: int | None = None
    """Documents rendered at once by :func:`~vldocir.construction.render.render_batch`, each worker
    a process with its own Chromium; None: one per core this process may use. Always bounded by
    the cores and by available memory / ``worker_memory_mb``."""
    worker_memory_mb: int = 1536
    """Memory one worker (Python, driver and Chromium) is allowed for when bounding ``workers``."""
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
        if not 0.0 < self.fit_min_text_scale <= 1.0:
            raise ValueError("fit_min_text_scale must be in (0, 1]")
        if self.cut_margin < 0 or self.cut_slack < 0:
            raise ValueError("cut_margin and cut_slack must be >= 0")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be >= 1 (or None: one per core)")

    @property
    def page_width(self) -> int:
        return round(self.viewport_width_css * self.device_scale_factor)

    @property
    def image_suffix(self) -> str:
        return ".png" if self.image_format == "png" else ".jpg"

    def selectors_for(self, source: str) -> list[str]:
        return list(self.clutter_selectors.get("*", [])) + list(self.clutter_selectors.get(source, []))

    def clutter_rules_for(self, source: str) -> list[tuple[str, str]]:
        """``(selector, group)`` pairs for ``source``; group is ``"*"`` or the source."""
        return [(s, "*") for s in self.clutter_selectors.get("*", [])] + [
            (s, source) for s in self.clutter_selectors.get(source, []) if source != "*"
        ]

    def page_rules_for(self, source: str) -> list[tuple[str, str]]:
        """``(page rule, group)`` pairs for ``source``."""
        return [(r, "*") for r in self.page_rules.get("*", [])] + [
            (r, source) for r in self.page_rules.get(source, []) if source != "*"
        ]

    def height_pages(self, document_height: int) -> int:
        """The pages of a document measured ``document_height`` device pixels tall, as its bound counts
        them: ``document_height / page_height`` rounded up, at least one."""
        return max(1, int(-(-document_height // self.page_height)))

    def document_bound_s(self, document_height: int) -> float:
        """A measured document's bound in seconds: ``timeout_s`` plus ``timeout_per_page_s`` per page of
        its height (:meth:`height_pages`)."""
        return self.timeout_s + self.timeout_per_page_s * self.height_pages(document_height)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_params(self) -> dict[str, Any]:
        """The settings that change the pages (all but :data:`SPEED_ONLY`): what a rendering is keyed by."""
        return {k: v for k, v in self.to_dict().items() if k not in SPEED_ONLY}

    def output_key(self) -> str:
        """:func:`~vldocir.cache.content_key` of :meth:`output_params`, recorded in each ``layout.json``."""
        return content_key(self.output_params())


SPEED_ONLY = (
    "chromium_path",
    "extra_args",
    "no_sandbox",
    "context_reuse",
    "cut_probes",
    "timeout_s",
    "timeout_per_page_s",
    "workers",
    "worker_memory_mb",
)
"""Render settings that change how fast pages are made, not the pages."""


class RenderError(VldocirError, RuntimeError):
    """A document could not be rendered."""


class DocumentTimeout(RenderError):
    """A document took longer than its bound (``RenderConfig.timeout_s`` + ``timeout_per_page_s``
    per page)."""
