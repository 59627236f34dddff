"""Documents and corpora: the writer of each source (:data:`_KINDS`), one document
(:func:`write_document`), and a seeded corpus with its ``corpus.json`` manifest (:func:`write_corpus`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from vldocir.construction.html_docs.arxiv import _ARXIV_CSS, _arxiv
from vldocir.construction.html_docs.document import (
    _QUIRKS_HEIGHT,
    CLUTTER_SELECTORS,
    DEVICE_SCALE,
    PAGE_CSS_HEIGHT,
    PAGE_CSS_WIDTH,
    SyntheticDocument,
    _Doc,
    _quirk_set,
)
from vldocir.construction.html_docs.pubmed import _PUBMED_CSS, _pubmed
from vldocir.construction.html_docs.sec import _SEC_CSS, _sec
from vldocir.construction.html_docs.wikipedia import _WIKI_CSS, _wikipedia
from vldocir.construction.synthetic import SOURCE_DOMAINS, _entity_name

log = logging.getLogger(__name__)

DEFAULT_PAGES: dict[str, tuple[int, int]] = {"wikipedia": (1, 10), "arxiv": (5, 25), "pubmed": (5, 25), "sec": (20, 60)}


@dataclass
class HtmlCorpusSpec:
    """What :func:`write_corpus` writes: documents per source, page ranges per source, the seed."""

    seed: int = 0
    documents: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCE_DOMAINS, 2))
    pages: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_PAGES))
    quirks: bool | Iterable[str] = False
    facts_per_page: int = 6


# A new source is a module with its stylesheet and writer, an entry here, and its rows in the
# per-source tables of document.py (_METRICS, _QUALIFIERS) and text.py (_FACT_FORMS, _SENTENCES).
_KINDS: dict[str, tuple[Callable[[_Doc, float], str], str]] = {
    "wikipedia": (_wikipedia, _WIKI_CSS),
    "arxiv": (_arxiv, _ARXIV_CSS),
    "pubmed": (_pubmed, _PUBMED_CSS),
    "sec": (_sec, _SEC_CSS),
}


def write_document(
    rng: np.random.Generator,
    doc_id: str,
    source: str,
    domain: str,
    target_pages: int,
    out_dir: str | Path,
    *,
    quirks: bool | Iterable[str] = False,
    facts_per_page: int = 6,
) -> SyntheticDocument:
    """Write ``out_dir/<doc_id>/index.html`` (and its images) and return the document and its facts.

    ``target_pages`` is the approximate number of 2000-CSS-px pages the document renders to.
    """
    if source not in _KINDS:
        raise ValueError(f"unknown source {source!r}; known: {sorted(_KINDS)}")
    quirk_set = _quirk_set(quirks)
    directory = Path(out_dir) / doc_id
    directory.mkdir(parents=True, exist_ok=True)
    entity = _entity_name(rng)
    doc = _Doc(rng, doc_id, source, domain, entity, directory, facts_per_page, quirk_set)
    build, css = _KINDS[source]
    # Aim a little short of the last page's end: the estimate runs ~3 % high and fill overshoots by
    # up to one block, and a few stray pixels would otherwise make an (almost) empty extra page.
    height = (max(1, target_pages) - 0.05) * PAGE_CSS_HEIGHT - (_QUIRKS_HEIGHT if quirk_set else 0)
    title = build(doc, height)
    doc.clear()
    html_path = directory / "index.html"
    html_path.write_text(doc.html(title, css), encoding="utf-8")
    pages = {f: int(y // PAGE_CSS_HEIGHT) for f, y in doc.fact_y.items()}
    return SyntheticDocument(
        doc_id,
        source,
        domain,
        title,
        entity,
        html_path,
        doc.facts,
        target_pages,
        round(doc.height / PAGE_CSS_HEIGHT, 3),
        pages,
    )


def write_corpus(spec: HtmlCorpusSpec, out_dir: str | Path) -> list[SyntheticDocument]:
    """Write every document of ``spec`` under ``out_dir`` plus a ``corpus.json`` manifest.

    Each document has its own generator, seeded by (seed, source, index), so the same spec gives
    byte-identical files and adding documents of one source leaves the others unchanged.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages = {**DEFAULT_PAGES, **dict(getattr(spec, "pages", {}) or {})}
    quirks = getattr(spec, "quirks", False)
    facts_per_page = getattr(spec, "facts_per_page", 6)
    sources = list(SOURCE_DOMAINS)
    documents: list[SyntheticDocument] = []
    for source, n_docs in spec.documents.items():
        lo, hi = pages[source]
        domains = SOURCE_DOMAINS[source]
        for d in range(n_docs):
            rng = np.random.default_rng([spec.seed, sources.index(source), d])
            target = int(rng.integers(lo, hi + 1))
            doc = write_document(
                rng,
                f"{source}-{d:05d}",
                source,
                domains[d % len(domains)],
                target,
                out,
                quirks=quirks,
                facts_per_page=facts_per_page,
            )
            documents.append(doc)
    manifest = {
        "generator": "vldocir.construction.html_docs",
        "seed": spec.seed,
        "page_css": {"width": PAGE_CSS_WIDTH, "height": PAGE_CSS_HEIGHT, "device_scale": DEVICE_SCALE},
        "clutter_selectors": {s: list(v) for s, v in CLUTTER_SELECTORS.items()},
        "quirks": sorted(_quirk_set(quirks)),
        "documents": [
            {
                "doc_id": d.doc_id,
                "source": d.source,
                "domain": d.domain,
                "title": d.title,
                "entity": d.entity,
                "html": d.html_path.relative_to(out).as_posix(),
                "target_pages": d.target_pages,
                "estimated_pages": d.estimated_pages,
                "facts": [asdict(f) for f in d.facts],
            }
            for d in documents
        ],
    }
    (out / "corpus.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote %d synthetic HTML documents to %s", len(documents), out)
    return documents
