"""The :class:`Renderer`: one headless Chromium for many documents, each taken through steps 1-4
of :mod:`vldocir.construction.render` (load and settle, clean, extract, paginate window by window),
with a watchdog that kills the browser when a document runs past ``timeout_s``."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vldocir.construction.paginate import CutDecision, box_free_runs, choose_cut
from vldocir.construction.render.browser import (
    Session,
    find_chromium,
    kill_process_tree,
    launch,
    new_session,
    page_script,
    start_playwright,
)
from vldocir.construction.render.capture import Shooter
from vldocir.construction.render.cleanup import clean_page, fit_wide
from vldocir.construction.render.config import DocumentTimeout, RenderConfig, RenderError
from vldocir.construction.render.images import image_report, resolve_lazy_images
from vldocir.construction.render.layout import (
    LAYOUT_FILE,
    RenderedDocument,
    RenderedPage,
    extract_elements,
    place_elements,
)
from vldocir.construction.render.report import fidelity_warnings
from vldocir.io import atomic_path, atomic_write_json

log = logging.getLogger(__name__)

_JS_PREPARE = page_script("prepare.js")
_JS_LAZY_SCROLL = page_script("lazy_scroll.js")
_JS_IMAGES_READY = page_script("images_ready.js")


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
        self._session: Session | None = None
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
        self._pw, self._driver_pids = start_playwright()
        self._executable = find_chromium(self.config.chromium_path, playwright=self._pw)
        self._launch()

    def _launch(self) -> None:
        self._browser, self._browser_pid = launch(self._pw, self._executable, self.config, self._driver_pids)
        self.launches += 1
        log.debug("launched %s (pid %s)", self._executable, self._browser_pid)

    def _kill_browser(self) -> None:
        """Kill this renderer's browser process and its descendants, by id (from any thread)."""
        if self._browser_pid is None:
            log.warning("cannot kill the browser: its process id is unknown")
            return
        kill_process_tree(self._browser_pid)

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

    def _session_for(self, root: Path) -> Session:
        """The browser context and page to render in, allowed to read files under ``root``."""
        session = self._session
        if session is None:
            session = self._session = new_session(self._browser, self.config)
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

    def _render_in(self, session: Session, doc_id: str, source: str, html_path: Path, doc_dir: Path,
                   started: float) -> RenderedDocument:
        prep = self._prepare(session, source, html_path, started)
        doc_dir.mkdir(parents=True, exist_ok=True)
        (doc_dir / LAYOUT_FILE).unlink(missing_ok=True)
        t = time.monotonic()
        pages, cuts = self._paginate(prep, doc_dir)
        prep.timings["paginate"] = round(time.monotonic() - t, 4)
        return self._finish(prep, doc_id, source, html_path, doc_dir, pages, cuts, started, session.blocked)

    def _prepare(self, session: Session, source: str, html_path: Path, started: float) -> "_Prepared":
        """Load, settle, clean and measure the document; returns the live page and its elements."""
        cfg = self.config
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
        resolved = resolve_lazy_images(page, html_path.parent) if cfg.resolve_lazy_images else 0
        if cfg.lazy_scroll and cfg.javascript and has_scripts:
            page.evaluate(_JS_LAZY_SCROLL, [cfg.max_scroll_steps])
        # Bounded inside the page (a plain evaluate: cheaper than wait_for_function's machinery).
        if not page.evaluate(_JS_IMAGES_READY, [remaining_ms(cfg.image_wait_timeout_s)]):
            warnings.append(f"images or fonts still loading after {cfg.image_wait_timeout_s:g} s")
        t = lap("settle", t)

        # From here on the document's own scripts cannot change what was measured.
        cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        cleanup, bad = clean_page(page, cfg, source)
        if bad:
            warnings.append(f"unparsable clutter selectors or unknown page rules ignored: {bad}")
        fit = fit_wide(page, cfg)
        elems, boxes, doc_h, background, overflow = extract_elements(page, cfg)
        images = image_report(page, html_path.parent, cfg.id_attribute, resolved)
        fidelity = {"cleanup": cleanup, "fit": fit, "overflow": overflow, "images": images}
        warnings += fidelity_warnings(fidelity)
        lap("extract", t)
        atomic = np.array([e["atomic"] for e in elems], dtype=bool)
        return _Prepared(page, cdp, elems, boxes, boxes[atomic], doc_h, background, timings, warnings, fidelity)

    def _paginate(self, prep: "_Prepared", doc_dir: Path) -> tuple[list[RenderedPage], list[int]]:
        """Cut the document window by window, writing each page image (atomically) as it goes.

        Returns the pages (``dom_text`` still empty) and the page boundaries ``[0, cut1, ..., end]``.
        """
        cfg = self.config
        shooter = Shooter(prep.cdp, prep.page, cfg)
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
        elements = place_elements(prep.elems, prep.boxes, cuts, pages, cfg.page_width)

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
            **prep.fidelity,
        )
        atomic_write_json(doc.to_json(), doc_dir / LAYOUT_FILE)
        return doc

    def _decide_cut(self, shooter: Shooter, start: int, atomic_boxes: np.ndarray, doc_h: int,
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
    fidelity: dict[str, Any]
    """The records of the clean-up, the wide-content layout, the overflow and the images."""
