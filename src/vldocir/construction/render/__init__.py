"""Render HTML-born documents into fixed-size page images with every element's box known.

One headless Chromium (driven by Playwright) renders many documents, one after the other in one
page (its browser context is replaced every ``context_reuse`` documents and after any failure);
every request outside the current document's own folder (symbolic links resolved; a document file
that links out of its folder is not loaded) is aborted, and nothing else leaves the
browser: no host name resolves (which also stops WebTransport and TURN over TCP), WebRTC may not
use UDP (launch flags) and its interfaces are removed from every document (an init script).
:func:`render_batch` runs several such renderers at once, one per worker process (``workers``,
bounded by cores and memory). Per document:

1. load the file (bounded by ``navigation_timeout_s``), finish CSS animations, make lazy images
   eager and point lazy ``data-src`` / ``srcset`` images at the document's own files
   (:mod:`.images`), scroll through the document a viewport at a time (lazy content), wait for
   images and web fonts (bounded by ``image_wait_timeout_s``: a missing or blocked image never hangs);
2. switch the document's scripts off (nothing can move after measuring), then clean up
   (:mod:`.cleanup`, rules per source in :mod:`.rules`): the clutter selectors and page rules of its
   source, ``position: fixed`` elements and invisible elements (display none, visibility hidden,
   opacity 0, clipped "visually hidden", moved out of sight), never a formula, each rule's removals
   recorded; then lay out content wider than the viewport (scaled to fit, never dropped);
3. walk the DOM in document order: tag every content element with ``data-vldocir-id="e00042"``
   and record its type, box (CSS px x device_scale_factor, document coordinates), text
   (``innerText``, whitespace-normalised; a formula's source, e.g. its TeX) and fact attribute;
   list what still reaches past the page's sides and every image that shows nothing;
4. paginate *one window at a time*, never capturing the whole document: for the window starting
   at ``top``, capture (PNG, via the DevTools ``Page.captureScreenshot`` of a clip inside a
   viewport one page tall) the few rows needed to choose the cut (:mod:`vldocir.construction.paginate`),
   then capture ``[top, top + page_height]`` with a white overlay over everything below the cut
   and write Chromium's encoded bytes as the page image; the next window starts at the cut. Cuts
   are checked in pixels (no text line or rule split), never leave a heading at a page's bottom
   and split list items only where nothing else is possible. Peak memory is one page, whatever
   the document's length.

Pages are captured as clips of the viewport, not as full-page screenshots: see :mod:`.capture` for why.

Output per document, in ``out_dir/<doc_id>/`` (written in a staging directory beside it and moved
into place when complete: a failed or killed document leaves nothing)::

    page-000.png, page-001.png, ...   # page_width x page_height (default 2000 x 4000), white padding
    layout.json                       # its presence marks the document done

The package, in the order a document meets it: :mod:`.config` (:class:`RenderConfig`, every knob,
and the errors), :mod:`.rules` (the clean-up rules per source, each with the page feature it
targets), :mod:`.browser` (finding and launching Chromium, its flags, the per-context network
isolation), :mod:`.renderer` (:class:`Renderer`: steps 1-4 for one document), :mod:`.images` (lazy
images, failed images), :mod:`.cleanup` (step 2), :mod:`.layout` (step 3 and the ``layout.json``
records, :func:`load_layout`), :mod:`.capture` (the viewport-clip captures of step 4), :mod:`.batch`
(:func:`render_batch`: many documents, resumable, failures recorded, in worker processes:
:mod:`._worker`), :mod:`.report` (:func:`render_report`: the records of many documents, for a build
report). The JavaScript that runs inside the documents lives in ``*.js`` files beside these modules.
``python -m vldocir.construction.render OUT_DIR FILE.html ...`` renders files from the command line.
"""

from vldocir.construction.render.batch import FAILURES_FILE, BatchReport, render_batch
from vldocir.construction.render.browser import (
    CHROMIUM_ARGS,
    NO_WEBRTC_ARGS,
    NO_WEBRTC_SCRIPT,
    ChromiumNotFoundError,
    find_chromium,
)
from vldocir.construction.render.config import (
    DEFAULT_CLUTTER_SELECTORS,
    DocumentTimeout,
    RenderConfig,
    RenderError,
)
from vldocir.construction.render.layout import (
    ELEMENT_TYPES,
    LAYOUT_FILE,
    LAYOUT_VERSION,
    RenderedDocument,
    RenderedElement,
    RenderedPage,
    load_layout,
)
from vldocir.construction.render.records import render_report
from vldocir.construction.render.renderer import Renderer
from vldocir.construction.render.rules import CLUTTER_RULES, PAGE_RULES

# The names other code imports; the modules above hold the rest.
__all__ = [
    "CHROMIUM_ARGS",
    "CLUTTER_RULES",
    "DEFAULT_CLUTTER_SELECTORS",
    "ELEMENT_TYPES",
    "FAILURES_FILE",
    "LAYOUT_FILE",
    "LAYOUT_VERSION",
    "NO_WEBRTC_ARGS",
    "NO_WEBRTC_SCRIPT",
    "PAGE_RULES",
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
    "render_report",
]
