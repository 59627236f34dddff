"""The :class:`Renderer`: one headless Chromium for many documents, each taken through steps 1-4
of :mod:`vldocir.construction.render` (load and settle, clean, extract, paginate window by window),
with a watchdog that kills the browser when a document runs past its bound (``timeout_s``, plus
``timeout_per_page_s`` per page once its height is known). A document's files are written into a
staging directory and moved into place only once complete: a failed document leaves nothing."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vldocir.cache import staging_path
from vldocir.construction.paginate import CutDecision, box_free_runs, choose_cut, keep_with_next
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
    file_record,
    place_elements,
)
from vldocir.construction.render.records import fidelity_warnings
from vldocir.io import atomic_write_json, file_digest

log = logging.getLogger(__name__)

_JS_PREPARE = page_script("prepare.js")
_JS_LAZY_SCROLL = page_script("lazy_scroll.js")
_JS_IMAGES_READY = page_script("images_ready.js")
_JS_LIST_ITEMS = page_script("list_items.js")
# Atomic elements that a cut through elements avoids (with the list items): they are not text
# that reads on across a page break.
_FRAGILE_TYPES = frozenset({"headline", "table_row", "image", "formula", "media", "embed"})


class _Watchdog:
    """Calls ``action`` from a helper thread once ``seconds`` have passed since ``started``, unless
    cancelled; ``seconds`` may be changed while it runs (the document's bound, once measured)."""

    def __init__(self, seconds: float, action, started: float):
        self.fired = False
        self.seconds = float(seconds)
        self._started = started
        self._action = action
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="render-watchdog", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(max(0.0, self._started + self.seconds - time.monotonic())):
            if time.monotonic() >= self._started + self.seconds:
                self.fired = True
                try:
                    self._action()
                except Exception:  # pragma: no cover - best effort
                    log.exception("watchdog action failed")
                return

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


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

    def __enter__(self) -> Renderer:
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

    # -- one document ------------------------------------------------------------------------

    def render(self, doc_id: str, source: str, html_path: str | Path, out_dir: str | Path) -> RenderedDocument:
        """Render one document into ``out_dir/doc_id/`` (page images, then ``layout.json``).

        The files are written into a staging directory beside it, which replaces ``out_dir/doc_id/``
        (and whatever an earlier rendering left there) only when the document is complete; on any
        failure it is removed, so a failed document leaves no page behind.

        Raises :class:`DocumentTimeout` past its bound (``timeout_s``, plus ``timeout_per_page_s``
        per page once measured; the browser is then relaunched) and :class:`RenderError` (or a
        Playwright error) on other failures.
        """
        if not doc_id or doc_id in (".", "..") or "/" in doc_id or "\\" in doc_id or "\0" in doc_id:
            raise RenderError(f"doc_id {doc_id!r} cannot name a directory")
        self._ensure_browser()
        cfg = self.config
        html_path = document_path(doc_id, html_path)
        doc_dir = Path(out_dir) / doc_id
        doc_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_path(doc_dir)
        started = time.monotonic()
        watchdog = _Watchdog(cfg.timeout_s, self._kill_browser, started)
        self._bound = f"timeout_s={cfg.timeout_s:g} s, before the document was measured"
        try:
            with watchdog:
                try:
                    session = self._session_for(html_path.parent)
                    doc = self._render_in(session, doc_id, source, html_path, staging, started, watchdog)
                except BaseException:
                    self._drop_session()  # never reuse a page that failed
                    raise
                session.documents += 1
                if session.documents >= max(1, cfg.context_reuse):
                    self._drop_session()
            _publish(staging, doc_dir)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if watchdog.fired:
                self._browser = None  # killed: relaunch on the next document
                self._session = None
                if isinstance(exc, Exception):
                    raise DocumentTimeout(
                        f"{doc_id}: rendering took longer than {watchdog.seconds:g} s ({self._bound}; browser killed)"
                    ) from exc
            elif self._browser is not None and not self._browser.is_connected():
                self._browser = None
                self._session = None
            raise
        if watchdog.fired:  # finished at the last moment; the browser was killed anyway
            self._browser = None
            self._session = None
        doc.directory = doc_dir
        return doc

    def _session_for(self, root: Path) -> Session:
        """The browser context and page to render in, allowed to read files under ``root``."""
        session = self._session
        if session is None:
            session = self._session = new_session(self._browser, self.config)
        else:
            # Nothing of the previous document may reach the next one (context_reuse is a speed-only
            # setting). Loaded straight after another file:// document, a document is laid out
            # differently: wikipedia-a's bold and italic runs sat 1 px lower on their lines, its text
            # 1-2 px taller, after arxiv-1707.08043 had been paginated in the same page; its scripts
            # would also read the storage the earlier ones wrote (file:// is one origin). Unloading it
            # into about:blank first, in the same renderer process, gives the rendering of a fresh
            # context (tests/construction/test_render_reuse.py) for ~0.06 s instead of ~1 CPU-s.
            try:
                session.page.goto("about:blank", wait_until="load", timeout=self.config.navigation_timeout_s * 1000)
                session.cdp.send("Storage.clearDataForOrigin", {"origin": "file://", "storageTypes": "all"})
                # The previous document's scripts were switched off; the next one's must run.
                session.cdp.send("Emulation.setScriptExecutionDisabled", {"value": False})
            except Exception as error:  # the page could not be unloaded (its renderer crashed): a fresh one
                log.info("reused page not unloaded (%s); a fresh browser context for the next document", error)
                self._drop_session()
                self._ensure_browser()
                session = self._session = new_session(self._browser, self.config)
        session.root = root.resolve()
        session.blocked = []
        return session

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with suppress(Exception):
                session.context.close()

    def _render_in(
        self,
        session: Session,
        doc_id: str,
        source: str,
        html_path: Path,
        doc_dir: Path,
        started: float,
        watchdog: _Watchdog,
    ) -> RenderedDocument:
        cfg = self.config
        prep = self._prepare(session, source, html_path, started)
        # Measured: the bound grows with the document's height.
        n_pages = cfg.height_pages(prep.doc_h)
        watchdog.seconds = cfg.document_bound_s(prep.doc_h)
        self._bound = (
            f"timeout_s={cfg.timeout_s:g} + timeout_per_page_s={cfg.timeout_per_page_s:g} x "
            f"{n_pages} pages of its height"
        )
        doc_dir.mkdir(parents=True)
        t = time.monotonic()
        pages, cuts = self._paginate(prep, doc_dir)
        prep.timings["paginate"] = round(time.monotonic() - t, 4)
        return self._finish(prep, doc_id, source, html_path, doc_dir, pages, cuts, started, session.blocked)

    def _prepare(self, session: Session, source: str, html_path: Path, started: float) -> _Prepared:
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

        page, cdp, js = session.page, session.cdp, session.scripts
        t = time.monotonic()
        page.goto(html_path.as_uri(), wait_until="load", timeout=remaining_ms(cfg.navigation_timeout_s))
        t = lap("load", t)

        may_load_lazily = js.evaluate(_JS_PREPARE, [cfg.javascript])
        resolved = resolve_lazy_images(page, html_path.parent) if cfg.resolve_lazy_images else 0
        if cfg.lazy_scroll and cfg.javascript and may_load_lazily:
            js.evaluate(_JS_LAZY_SCROLL, [cfg.max_scroll_steps])
        # Bounded inside the page (a plain evaluate: cheaper than wait_for_function's machinery).
        if not js.evaluate(_JS_IMAGES_READY, [remaining_ms(cfg.image_wait_timeout_s)]):
            warnings.append(f"images, fonts or video posters still loading after {cfg.image_wait_timeout_s:g} s")
        t = lap("settle", t)

        # From here on the document's own scripts cannot change what was measured.
        cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        cleanup, bad = clean_page(page, cfg, source)
        if bad:
            warnings.append(f"unparsable clutter selectors or unknown page rules ignored: {bad}")
        fit = fit_wide(page, cfg)
        elems, boxes, doc_h, background, overflow = extract_elements(js, cfg)  # js: a page's evaluate, cheaper
        images = image_report(page, html_path.parent, cfg.id_attribute, resolved)
        fidelity = {"cleanup": cleanup, "fit": fit, "overflow": overflow, "images": images}
        warnings += fidelity_warnings(fidelity)
        items = set(js.evaluate(_JS_LIST_ITEMS, [cfg.id_attribute]))
        lap("extract", t)
        atomic = np.array([e["atomic"] for e in elems], dtype=bool)
        kinds = [(e["type"], e["id"] in items) for e in elems if e["atomic"]]
        fragile = np.array([t in _FRAGILE_TYPES or li for t, li in kinds], dtype=bool)
        keep = np.zeros((0, 4))
        if cfg.keep_headings_with_next:
            heads = np.array([t == "headline" for t, _ in kinds], dtype=bool)
            keep = keep_with_next(boxes[atomic], heads, max_gap=cfg.cut_window, slack=cfg.cut_slack)
        return _Prepared(
            page, cdp, elems, boxes, boxes[atomic], doc_h, background, timings, warnings, fidelity, fragile, keep
        )

    def _paginate(self, prep: _Prepared, doc_dir: Path) -> tuple[list[RenderedPage], list[int]]:
        """Cut the document window by window, writing each page image (into the staging directory) as it goes.

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
            decision = self._decide_cut(shooter, start, prep)
            t1 = time.monotonic()
            cut = decision.cut
            data = shooter.page_image(start, cut)
            index = len(pages)
            name = f"page-{index:03d}{cfg.image_suffix}"
            (doc_dir / name).write_bytes(data)  # doc_dir is the staging directory
            del data
            pages.append(
                RenderedPage(
                    index, name, cfg.page_width, cfg.page_height, int(start), int(cut - start), decision.reason, ""
                )
            )
            cuts.append(cut)
            start = cut
            t2 = time.monotonic()
            t_cut += t1 - t0
            t_shot += t2 - t1
        prep.timings["cut"] = round(t_cut, 4)
        prep.timings["pages"] = round(t_shot, 4)
        return pages, cuts

    def _finish(
        self,
        prep: _Prepared,
        doc_id: str,
        source: str,
        html_path: Path,
        doc_dir: Path,
        pages: list[RenderedPage],
        cuts: list[int],
        started: float,
        blocked: list[str],
    ) -> RenderedDocument:
        """Place the elements on the pages, fill in the pages' text, write layout.json (last)."""
        cfg = self.config
        elements = place_elements(prep.elems, prep.boxes, cuts, pages, cfg.page_width, slack=cfg.cut_slack)
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
            html_sha256=file_digest(html_path),
            render_key=cfg.output_key(),
            # read back from the staging directory: what the layout vouches for is what is on disk
            files={p.image: file_record(doc_dir / p.image) for p in pages},
        )
        atomic_write_json(doc.sealed_json(), doc_dir / LAYOUT_FILE)
        return doc

    def _decide_cut(self, shooter: Shooter, start: int, prep: _Prepared) -> CutDecision:
        """:func:`choose_cut` for the window at ``start``, capturing as few pixels as it can.

        Most cuts fall in the gap between two paragraphs: the ``cut_probes`` runs of box-free rows
        nearest the nominal cut are captured alone first (a few rows each); a blank cut there is
        the one :func:`choose_cut` would choose from the whole window. Failing that, the cut band
        is captured; and only when the band holds no clean cut (push, through, a table whose rules
        leave no clean row) the window from ``min_fill`` down.
        """
        cfg = self.config
        nominal = start + cfg.page_height
        kw = dict(
            page_height=cfg.page_height,
            doc_height=prep.doc_h,
            cut_window=cfg.cut_window,
            min_fill=cfg.min_fill,
            background=prep.background,
            tolerance=cfg.blank_tolerance,
            margin=cfg.cut_margin,
            slack=cfg.cut_slack,
        )
        if prep.doc_h <= nominal:
            return choose_cut(None, 0, start, np.zeros((0, 4)), **kw)
        boxes = prep.atomic_boxes
        sel = (boxes[:, 3] > start) & (boxes[:, 1] < nominal)
        near, fragile = boxes[sel], prep.fragile[sel]
        keep = prep.keep_boxes[(prep.keep_boxes[:, 3] > start) & (prep.keep_boxes[:, 1] < nominal)]
        kw.update(keep_boxes=keep, fragile=fragile)
        m = cfg.cut_margin
        lo = max(start + 1, nominal - cfg.cut_window)
        last_row = min(nominal + m + 1, prep.doc_h)  # rows below nominal seen by the margin

        def strip(first: int) -> tuple[np.ndarray, int]:
            return shooter.strip(max(start, first - 2 - m), last_row, scroll_top=start)

        runs = box_free_runs(np.concatenate([near, keep]), lo, nominal)
        for first, last in runs[: cfg.cut_probes]:
            pixels, top = shooter.strip(max(start, first - 2 - m), min(last + m + 1, prep.doc_h), scroll_top=start)
            decision = choose_cut(pixels, top, start, near, **kw)
            if decision.reason == "blank" and first <= decision.cut <= last:
                return decision  # blank and box-free in the run nearest nominal: nothing beats it
        if runs:
            decision = choose_cut(*strip(lo), start, near, **kw)
            if decision.clean and decision.reason in ("blank", "box_free"):
                return decision
        min_cut = start + int(np.ceil(cfg.min_fill * cfg.page_height))
        return choose_cut(*strip(min(lo, max(start + 1, min_cut))), start, near, **kw)


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
    fragile: np.ndarray
    """``(n_atomic,)`` bool: list items, headings, table rows, images, formulas (see choose_cut)."""
    keep_boxes: np.ndarray
    """``(K, 4)``: headings kept with what follows them (:func:`keep_with_next`)."""


def document_path(doc_id: str, html_path: str | Path) -> Path:
    """The HTML file to load, its folder resolved (the folder its requests may read from, see
    :func:`~vldocir.construction.render.browser.file_allowed`) and its own name kept. Raises
    :class:`RenderError` when there is no such file, or when it is a symbolic link that leads out of
    that folder (``evil.html -> /etc/passwd``: never loaded, so never read)."""
    given = Path(html_path)
    folder = given.parent.resolve()
    path = folder / given.name
    real = path.resolve()
    if real != folder and folder not in real.parents:
        raise RenderError(f"{doc_id}: {given} is a symbolic link to {real}, outside the document's folder; not read")
    if not path.is_file():
        raise RenderError(f"{doc_id}: no such file {path}")
    return path


def _publish(staging: Path, doc_dir: Path) -> None:
    """Put the complete rendering in ``staging`` at ``doc_dir``, replacing what was there."""
    old = None
    if doc_dir.exists():
        old = staging_path(doc_dir)
        os.replace(doc_dir, old)
    os.replace(staging, doc_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
