"""The documents of a folder without a document index (``python -m vldocir.apps.build input=<folder>``).

A folder is enough: each of its entries that is a document becomes one, the rest is left alone.

- ``a.html`` (or ``.htm``): an HTML document, its local files (``a_files/``, images) beside it;
- ``b/index.html``: a folder holding a document and its local files (the collectors' layout);
- ``c.pdf``: a PDF (pages rasterized by :mod:`vldocir.construction.pdf`, text layer as DOM text);
- ``sec/``, ``wikipedia/``, ``arxiv/``, ``pubmed/`` (a folder named after one of
  :data:`~vldocir.data.schema.SOURCES` that holds no ``index.html``): its documents, found by the
  same three rules, are of that source; every other document is of the ``source`` given
  (``folder.source`` in ``conf/build.yaml``).

Anything else (other files, folders without ``index.html``, names starting with ``.``) is not a
document and is skipped, listed in the log. A document's id is its file name without the suffix, or
its folder's name (:func:`document_id`); ids must be unique (:func:`unique_document_ids`, also used by
``python -m vldocir.construction.render``). Its title is the HTML's ``<title>`` (else its id), its
domain the ``domain`` given (``None``: its source). The source picks the renderer's clean-up rules
(:mod:`vldocir.construction.render.rules`) and the query prompts.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vldocir.construction.collect.index import DOC_ID
from vldocir.construction.documents import DocumentRecord
from vldocir.data.schema import SOURCES
from vldocir.errors import ConfigError

log = logging.getLogger(__name__)

HTML_SUFFIXES = (".html", ".htm")
PDF_SUFFIX = ".pdf"
FOLDER_DOCUMENT = "index.html"
"""The file a document folder holds (its other files are the document's assets)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class InputDocument:
    """One document of an ``input=`` build: its ``documents`` row and the file to render."""

    record: DocumentRecord
    html_path: Path  # the HTML file to render (a folder's index.html), or the PDF
    problem: str | None = None  # why it cannot be rendered (reported, the batch goes on)

    @property
    def is_pdf(self) -> bool:
        return self.html_path.suffix.lower() == PDF_SUFFIX


def safe_id(name: str) -> str:
    """``name`` as a document id (letters, digits, ``.``, ``_``, ``-``; it names folders and page ids):
    accents dropped (``Zürich`` -> ``Zurich``), every run of other characters made one ``_``, leading
    and trailing ``.``/``_``/``-`` removed, at most 200 characters. A name with nothing left becomes
    ``doc-`` and 8 hex digits of its SHA-256. Deterministic: the same name, the same id."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _UNSAFE.sub("_", ascii_name).strip("._-")[:200].rstrip("._-")
    if not text:
        return "doc-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    assert DOC_ID.match(text), text
    return text


def document_id(path: str | Path) -> str:
    """The id of the document at ``path``: a folder's (or its ``index.html``'s folder's) name, or the
    file's name without its suffix, through :func:`safe_id`."""
    path = Path(path)
    if path.name.lower() == FOLDER_DOCUMENT or path.is_dir():
        path = path.parent if path.name.lower() == FOLDER_DOCUMENT else path
        return safe_id(path.resolve().name if path.name in ("", ".", "..") else path.name)
    return safe_id(path.stem)


def unique_document_ids(paths: Sequence[str | Path]) -> list[str]:
    """:func:`document_id` of each path, in order; two documents that would share an id raise
    :class:`ConfigError` naming both files (rename one)."""
    ids: list[str] = []
    seen: dict[str, Path] = {}
    for path in map(Path, paths):
        doc_id = document_id(path)
        if doc_id in seen:
            raise ConfigError(f"{seen[doc_id]} and {path} would both be document {doc_id!r}: rename one of them")
        seen[doc_id] = path
        ids.append(doc_id)
    return ids


def _document_file(entry: Path) -> Path | None:
    """The file to render if ``entry`` is a document (module doc), else ``None``."""
    if entry.is_file() and entry.suffix.lower() in (*HTML_SUFFIXES, PDF_SUFFIX):
        return entry
    if entry.is_dir() and (entry / FOLDER_DOCUMENT).is_file():
        return entry / FOLDER_DOCUMENT
    return None


def _entries(folder: Path) -> list[Path]:
    return sorted(e for e in folder.iterdir() if not e.name.startswith("."))


def find_documents(folder: str | Path, source: str) -> list[tuple[Path, str]]:
    """``(file to render, source)`` of every document in ``folder`` (module doc), in name order."""
    folder = Path(folder)
    found: list[tuple[Path, str]] = []
    skipped: list[str] = []

    def collect(entries: Iterable[Path], entry_source: str) -> None:
        for entry in entries:
            file = _document_file(entry)
            if file is not None:
                found.append((file, entry_source))
            else:
                skipped.append(str(entry.relative_to(folder)))

    for entry in _entries(folder):
        if entry.is_dir() and entry.name in SOURCES and not (entry / FOLDER_DOCUMENT).is_file():
            collect(_entries(entry), entry.name)
        else:
            collect([entry], source)
    if skipped:
        log.info("input=%s: %d entries are not documents and are skipped: %s", folder, len(skipped), skipped[:20])
    return found


def html_title(path: Path) -> str | None:
    """The text of an HTML file's ``<title>`` (whitespace collapsed, entities decoded), if any."""
    head = path.read_bytes()[:65536].decode("utf-8", errors="replace")
    found = _TITLE.search(head)
    title = " ".join(html.unescape(found.group(1)).split()) if found else ""
    return title or None


def folder_documents(path: str | Path, source: str, domain: str | None = None) -> list[InputDocument]:
    """The documents of a folder without an index (module doc), or the one document ``path`` names
    (an HTML or PDF file), as :func:`vldocir.construction.ingest.load_documents` returns an index's.
    ``source``: of the documents outside a source-named subfolder; ``domain``: of every document
    (``None``: its source). Raises :class:`ConfigError` for an unknown source, a folder without
    documents, or two documents that would share an id."""
    folder = Path(path)
    if source not in SOURCES:
        raise ConfigError(f"folder.source={source!r} is not a source; valid sources: {', '.join(SOURCES)}")
    found = find_documents(folder, source) if folder.is_dir() else [(folder, source)]
    if not found:
        raise ConfigError(
            f"input={folder}: no document index in this folder (index.jsonl, index.csv or index.parquet) and no "
            f"documents in it (*.html, *.htm, *.pdf, folders holding index.html)"
        )
    ids = unique_document_ids([file for file, _ in found])
    documents = []
    for doc_id, (file, doc_source) in zip(ids, found, strict=True):
        title = None if file.suffix.lower() == PDF_SUFFIX else html_title(file)
        record = DocumentRecord(doc_id, doc_source, domain or doc_source, title or doc_id)
        documents.append(InputDocument(record, file))
    return documents


def listing_digest(documents: Sequence[InputDocument]) -> str:
    """SHA-256 of what a folder build read: each document's id, source, domain and file path, in
    order (the files' bytes key the renders themselves)."""
    rows = [f"{d.record.doc_id}\t{d.record.source}\t{d.record.domain}\t{d.html_path}" for d in documents]
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()
