"""Deterministic synthetic HTML documents in the look of the four VL-DocIR sources.

The text-only generator (:mod:`vldocir.construction.synthetic`) invents facts about invented entities and
places them on nominal pages. This package writes the same kind of facts into real, self-contained
HTML documents that a headless browser renders into page images: a Wikipedia article, an arXiv
paper, a PubMed case report and an SEC proxy statement, each styled after its source as seen at
1000 CSS px wide (a rendered page is 2000 CSS px tall; device scale 2 gives 2000x4000 px pages).

Facts
    Every fact is stated in exactly one element that carries ``data-fact="<fact_id>"``; that
    element's own text holds the attribute phrase and the value, e.g.
    ``<p data-fact="f0007">The population of Varnolith is 12,345.</p>`` or
    ``<tr data-fact="f0012"><th>Population</th><td>12,345</td>...</tr>``. The element type of a fact
    (:data:`ELEMENT_TYPES`) says how it is shown: running ``text`` (``<p>``), a ``table_row``
    (``<tr>``), an ``image`` (the inline ``<svg>`` of a ``<figure>``: its title names the attribute
    and a plotted label or dimension gives the value, which the caption does not repeat), a
    ``caption`` (the ``<figcaption>`` of a picture), a ``formula`` (``<div class="equation">``) or
    a ``list`` item (``<li>``). These are elements a renderer records by themselves (a bare
    ``<figure>`` would not be). Attributes are unique within a document: when one comes back it is
    qualified ("population of the Kalo district"), so that a question about it has one answer.

Length
    ``target_pages`` is met with a running height estimate (CSS px) of every element, from each
    source's text metrics (:class:`.document._Metrics`, measured with Chromium and the Liberation
    fonts). Clutter that the renderer removes (:data:`CLUTTER_SELECTORS`) counts as zero height. Facts are
    spaced by the same estimate, about ``facts_per_page`` per page, so every page carries several.

Similarity
    Documents of one source share their section names, table headers, sentence banks and the
    numbers of their distractor rows (near-duplicates drawn around a base fixed per source and row
    label, :func:`.text._base`), so the right page is not given away by layout or rare words.

Quirks
    ``quirks`` adds, for renderer robustness tests, a lazy-loaded image, an image whose file is
    missing, an external image (``http://example.invalid/x.png``, to be blocked) and an unclosed
    ``<p>``; each such element carries ``data-quirk``. Without quirks no document names any URL.

The package: :mod:`.document` (facts, text metrics, the writer every source shares, quirks),
:mod:`.text` (escaping, shared numbers and sentence banks), :mod:`.drawings` (PNGs and SVG plots),
one module per source (:mod:`.wikipedia`, :mod:`.arxiv`, :mod:`.pubmed`, :mod:`.sec`) and
:mod:`.corpus` (the source registry, :func:`write_document`, :func:`write_corpus`).
"""

from vldocir.construction.html_docs.corpus import DEFAULT_PAGES, HtmlCorpusSpec, write_corpus, write_document
from vldocir.construction.html_docs.document import (
    CLUTTER_SELECTORS,
    DEVICE_SCALE,
    ELEMENT_TYPES,
    EXTERNAL_IMAGE_URL,
    PAGE_CSS_HEIGHT,
    PAGE_CSS_WIDTH,
    QUIRKS,
    Fact,
    SyntheticDocument,
)

__all__ = [
    "CLUTTER_SELECTORS",
    "DEFAULT_PAGES",
    "DEVICE_SCALE",
    "ELEMENT_TYPES",
    "EXTERNAL_IMAGE_URL",
    "PAGE_CSS_HEIGHT",
    "PAGE_CSS_WIDTH",
    "QUIRKS",
    "Fact",
    "HtmlCorpusSpec",
    "SyntheticDocument",
    "write_corpus",
    "write_document",
]
