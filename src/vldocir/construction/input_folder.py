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
document and is skipped, listed in the log; a hidden name that looks like a document (``..html``,
``.draft/index.html``) is named in a warning.

**Symbolic links** that leave the input folder (``evil.html -> /etc/passwd``, ``img.png -> ~/.ssh/id_rsa``,
a linked folder) are never read: ``folder.links=refuse`` (the default) refuses the folder in one line
naming the first such link; ``folder.links=skip`` leaves them out: a linked document is reported as a
left-out document (``built_by.failed_documents``) and a linked asset is named in a warning (the
renderer cannot read it: it reads only files inside the document's own folder,
:func:`vldocir.construction.render.browser.file_allowed`). Links that stay inside the folder are
followed. A document's id is its file name without the suffix, or
its folder's name (:func:`document_id`); ids must be unique (:func:`unique_document_ids`, also used by
``python -m vldocir.construction.render``). Its title is the HTML's ``<title>`` (else its id), its
domain the ``domain`` given (``None``: its source). The source picks the renderer's clean-up rules
(:mod:`vldocir.construction.render.rules`) and the query prompts.
"""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vldocir.construction.collect.index import DOC_ID
from vldocir.construction.documents import DocumentRecord
from vldocir.data.schema import SOURCES
from vldocir.data.validation import outside_target
from vldocir.errors import ConfigError

log = logging.getLogger(__name__)

HTML_SUFFIXES = (".html", ".htm")
PDF_SUFFIX = ".pdf"
FOLDER_DOCUMENT = "index.html"
"""The file a document folder holds (its other files are the document's assets)."""
LINK_POLICIES = ("refuse", "skip")
"""What a folder build does with a symbolic link leaving the input folder (``folder.links``)."""
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


def outside_links(folder: str | Path) -> list[tuple[Path, str]]:
    """``(link, where it leads)`` for every symbolic link under ``folder`` that resolves outside it
    (dangling or not), in path order. The tree is walked without following any link (one
    directory listing per folder, whose entry types need no ``stat``); nothing is opened."""
    folder = Path(folder)
    found: list[tuple[Path, str]] = []
    pending = [str(folder)]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue  # unreadable: nothing in it can be rendered either
        for entry in listed:
            if entry.is_symlink():
                target = outside_target(entry.path, folder)
                if target is not None:
                    found.append((Path(entry.path), target))
            elif entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return sorted(found)


def _link_text(link: Path, target: str, folder: Path) -> str:
    return f"{link} is a symbolic link to {target}, outside the input folder {folder}"


def _entries(folder: Path) -> list[Path]:
    return sorted(e for e in folder.iterdir() if not e.name.startswith("."))


def _hidden_documents(folder: Path) -> list[str]:
    """Entries of ``folder`` whose names start with ``.`` and that would otherwise be documents."""
    return sorted(e.name for e in folder.iterdir() if e.name.startswith(".") and _document_file(e) is not None)


def check_link_policy(links: str) -> None:
    """``folder.links`` is one of :data:`LINK_POLICIES`, else one line (a typo must not mean skip)."""
    if links not in LINK_POLICIES:
        raise ConfigError(f"folder.links={links!r}: must be one of {', '.join(LINK_POLICIES)}")


def find_documents(folder: str | Path, source: str, links: str = "refuse") -> list[tuple[Path, str, str | None]]:
    """``(file to render, source, problem)`` of every document in ``folder`` (module doc), in name
    order; ``problem``: why it is left out (``links=skip``: a symbolic link leaving the folder).
    Raises :class:`ConfigError` naming the first link that leaves the folder (``links=refuse``)."""
    folder = Path(folder)
    leaving = outside_links(folder)
    if leaving and links == "refuse":
        link, target = leaving[0]
        more = f" ({len(leaving)} such links)" if len(leaving) > 1 else ""
        raise ConfigError(
            f"input={folder}: {_link_text(link, target, folder)}{more}; it is not read: remove it, "
            f"or set folder.links=skip to leave such links out"
        )
    found: list[tuple[Path, str, str | None]] = []
    skipped: list[str] = []
    hidden: list[str] = _hidden_documents(folder)

    def problem(file: Path) -> str | None:
        target = outside_target(file, folder)
        return None if target is None else f"{_link_text(file, target, folder)}: left out, not read (folder.links=skip)"

    def collect(entries: Iterable[Path], entry_source: str) -> None:
        for entry in entries:
            file = _document_file(entry)
            if file is not None:
                found.append((file, entry_source, problem(file)))
            else:
                skipped.append(str(entry.relative_to(folder)))

    for entry in _entries(folder):
        if entry.is_dir() and entry.name in SOURCES and not (entry / FOLDER_DOCUMENT).is_file():
            if outside_target(entry, folder) is not None:
                skipped.append(entry.name)  # a linked source folder: none of its entries is looked at
                continue
            hidden += [f"{entry.name}/{name}" for name in _hidden_documents(entry)]
            collect(_entries(entry), entry.name)
        else:
            collect([entry], source)
    if skipped:
        log.info("input=%s: %d entries are not documents and are skipped: %s", folder, len(skipped), skipped[:20])
    if hidden:
        log.warning(
            "input=%s: %d hidden entries (names starting with '.') are not documents and are skipped: %s "
            "(rename them to build them)",
            folder,
            len(hidden),
            hidden[:20],
        )
    documents = {file for file, _, _ in found}
    assets = [(link, target) for link, target in leaving if link not in documents]
    if assets:
        log.warning(
            "input=%s: %d symbolic links leave the folder and are not read (folder.links=skip): %s",
            folder,
            len(assets),
            [f"{link} -> {target}" for link, target in assets[:20]],
        )
    return found


def html_title(path: Path) -> str | None:
    """The text of an HTML file's ``<title>`` (whitespace collapsed, entities decoded), if any."""
    head = path.read_bytes()[:65536].decode("utf-8", errors="replace")
    found = _TITLE.search(head)
    title = " ".join(html.unescape(found.group(1)).split()) if found else ""
    return title or None


def folder_documents(
    path: str | Path, source: str, domain: str | None = None, links: str = "refuse"
) -> list[InputDocument]:
    """The documents of a folder without an index (module doc), or the one document ``path`` names
    (an HTML or PDF file), as :func:`vldocir.construction.ingest.load_documents` returns an index's.
    ``source``: of the documents outside a source-named subfolder; ``domain``: of every document
    (``None``: its source); ``links``: what to do with a symbolic link leaving the folder (one of
    :data:`LINK_POLICIES`, module doc). Raises :class:`ConfigError` for an unknown source, a folder
    without documents, two documents that would share an id, or a link leaving the folder
    (``links=refuse``)."""
    folder = Path(path)
    check_link_policy(links)
    if source not in SOURCES:
        raise ConfigError(f"folder.source={source!r} is not a source; valid sources: {', '.join(SOURCES)}")
    if folder.is_dir():
        found = find_documents(folder, source, links)
    else:  # one file: it may not lead out of its own folder either
        target = outside_target(folder, folder.parent)
        text = None if target is None else _link_text(folder, target, folder.parent)
        if text and links == "refuse":
            raise ConfigError(f"input={folder}: {text}; it is not read")
        found = [(folder, source, text and f"{text}: left out, not read (folder.links=skip)")]
    if not found:
        raise ConfigError(
            f"input={folder}: no document index in this folder (index.jsonl, index.csv or index.parquet) and no "
            f"documents in it (*.html, *.htm, *.pdf, folders holding index.html)"
        )
    ids = unique_document_ids([file for file, _, _ in found])
    documents = []
    for doc_id, (file, doc_source, problem) in zip(ids, found, strict=True):
        # (a left-out link is never opened, not even for its title)
        title = None if file.suffix.lower() == PDF_SUFFIX or problem else html_title(file)
        record = DocumentRecord(doc_id, doc_source, domain or doc_source, title or doc_id)
        documents.append(InputDocument(record, file, problem))
    return documents


def listing_digest(documents: Sequence[InputDocument]) -> str:
    """SHA-256 of what a folder build read: each document's id, source, domain and file path, in
    order (the files' bytes key the renders themselves)."""
    rows = [f"{d.record.doc_id}\t{d.record.source}\t{d.record.domain}\t{d.html_path}" for d in documents]
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()
