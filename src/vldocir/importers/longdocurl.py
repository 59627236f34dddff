"""LongDocURL (Deng et al., 2024): long PDFs with understanding, reasoning and locating questions.

The source (``hf://dengchao/LongDocURL``, or a local copy of the GitHub repository ``dengc2023/LongDocURL``)
holds a questions file (``LongDocURL_public.jsonl`` on the hub, ``data/LongDocURL.jsonl`` on GitHub:
one JSON record per line) and the documents, as PDFs (``<doc_no>.pdf``: the hub's ``pdf_files.tar.gz``)
and/or page images (``<doc_no>_<i>.png``: the hub's ``png_files_p*.tar.gz`` or GitHub's
``data/pdf_pngs/``), found anywhere under the source, or in its ``archives`` (extracted once into
``cache_dir/extracted/``), by file name: the records' ``pdf_path`` and ``images`` are paths on the
authors' machine. A record holds ``question_id``, ``doc_no`` (a string),
``total_pages``, ``question``, ``answer`` (an int, a string or a list, per ``answer_format``),
``evidence_pages`` (**1-indexed**: page ``p`` is PNG ``<doc_no>_<p-1>.png``, the ``images`` list
being 0-indexed), ``evidence_sources`` (``["Table", "Figure"]``), ``detailed_evidences`` (may embed
``<box>(x1, y1, x2, y2)</box>`` boxes), ``question_type``, ``task_tag``, ``start_end_idx``.

``pages`` picks the page source per document: ``pdf`` (:mod:`vldocir.construction.pdf`: images at
``pdf.width``, the text layer as ``dom_text``), ``png`` (the shipped images as they are: no text
layer, so ``dom_text`` is empty and the document is reported as having none; OCR gives
``ocr_text``) or ``auto`` (the PDF where there is one, else the PNGs). Every page found is in the
corpus. Left out and counted by reason: unanswerable questions (no answer), evidence page 0
(``evidence_page_zero``) or past the document's ``total_pages``, an unreadable ``evidence_pages``
(each of those named in the notes: question id, document, the value), the questions of a document
with neither PDF nor PNGs (``document_unavailable``) and those whose evidence page has no image
(``evidence_not_in_corpus``, counted by the writer). A record without ``doc_no`` is refused in one
line naming it. ``evidence_sources`` becomes ``evidence_types`` through :data:`EVIDENCE_SOURCES`.
A question with one evidence page on which ``detailed_evidences`` draws two or more boxes is
``page_multi``; two or more ``evidence_sources`` (modalities, not counted elements) count only with
``page_multi_from_labels: true``.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pandas as pd

from vldocir.data.evidence import page_id
from vldocir.importers.base import ImportedData, ImporterError, fetch
from vldocir.importers.long_documents import (
    UNPARSEABLE_PAGES,
    LongDocumentImporter,
    NamedDrops,
    answer_text,
    evidence_pages,
    find_file,
    parse_list,
    pdf_notes,
)
from vldocir.importers.source_files import json_lines, source_file

EVIDENCE_SOURCES: dict[str, str | None] = {
    "text": "text",
    "layout": "layout",
    "table": "table",
    "figure": "image",
    "chart": "chart",
}
"""LongDocURL ``evidence_sources`` labels (lower-cased) -> evidence type."""
QUESTION_FILES = ("LongDocURL_public.jsonl", "data/LongDocURL.jsonl", "LongDocURL.jsonl", "*.jsonl")
PAGE_SOURCES = ("auto", "pdf", "png")
_PNG_NAME = re.compile(r"^(\d+)_(\d+)\.png$")
_BOX = re.compile(r"<box>\s*\(([^)]*)\)\s*</box>")


def read_questions(path: Path) -> list[dict]:
    """The question records of a JSON-lines file, each refused in one line naming its line when it is
    not a JSON object with ``doc_no``, ``question`` and ``evidence_pages``, and the file when it has none."""
    records = []
    for line_number, record in json_lines(path):
        missing = [k for k in ("doc_no", "question", "evidence_pages") if k not in record]
        if missing:
            raise ImporterError(f"{path}:{line_number}: the record lacks {', '.join(missing)}")
        if record["doc_no"] is None or not str(record["doc_no"]).strip():
            raise ImporterError(f"{path}:{line_number}: the record ({record.get('question_id')}) has no doc_no")
        records.append(record)
    if not records:
        raise ImporterError(f"{path}: no question records (an empty file)")
    return records


@dataclass
class LongDocURL(LongDocumentImporter):
    """LongDocURL (module doc)."""

    questions: str | None = None
    """The questions file, relative to the source; None: the first of :data:`QUESTION_FILES` found."""
    pages: str = "auto"
    """Where each document's pages come from: ``auto`` | ``pdf`` | ``png`` (module doc)."""
    archives: list[str] = field(default_factory=lambda: ["pdf_files.tar.gz"])
    """Archives in the source (paths or glob patterns) holding documents, extracted once into
    ``cache_dir/extracted/`` and searched like the source (e.g. ``png_files_p*.tar.gz``)."""
    license: str = "Apache-2.0 per the hub card (the GitHub repository states none)"
    page_multi_from_labels: bool = False
    """A one-page question listing two or more ``evidence_sources`` is ``page_multi`` (off: those labels
    name modalities, not counted elements; boxes count either way)."""

    format: ClassVar[str] = "longdocurl"
    SOURCE: ClassVar[str] = "longdocurl"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pages not in PAGE_SOURCES:
            raise ImporterError(f"dataset.importer.pages must be one of {', '.join(PAGE_SOURCES)}, got {self.pages!r}")

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        questions_path = find_file(root, [self.questions] if self.questions else QUESTION_FILES, "questions file")
        records = read_questions(questions_path)
        doc_ids = list(dict.fromkeys(str(r["doc_no"]) for r in records))
        roots = [root, *self._extracted(root)]
        pdfs = {}  # (a file that resolves outside the folder it was found in is refused, never read)
        if self.pages != "png":
            pdfs = {p.stem: source_file(r, p) for r in roots for p in sorted(r.rglob("*.pdf"))}
        pngs: dict[str, list[tuple[int, Path]]] = defaultdict(list)
        if self.pages != "pdf":
            for r in roots:
                for path in sorted(r.rglob("*.png")):
                    found = _PNG_NAME.match(path.name)
                    if found and found.group(1) in doc_ids:
                        pngs[found.group(1)].append((int(found.group(2)), source_file(r, path)))

        from_pdf = [d for d in doc_ids if d in pdfs]
        pdf_pages, report = self.rasterize([(d, pdfs[d]) for d in from_pdf])
        png_rows = [
            {
                "page_id": page_id(d, number),
                "doc_id": d,
                "page_number": number,
                "image_file": str(path),
                "dom_text": None,
            }
            for d in doc_ids
            if d not in report.documents
            for number, path in sorted(pngs.get(d, []), key=lambda item: (item[0], str(item[1])))
        ]
        png_pages = pd.DataFrame(png_rows, columns=["page_id", "doc_id", "page_number", "image_file", "dom_text"])
        png_pages["ocr_text"] = self.ocr_texts(list(png_pages["image_file"]))
        pages = pd.concat([pdf_pages, png_pages], ignore_index=True)
        available = set(pages["doc_id"])
        total = {d: doc.n_pages for d, doc in report.documents.items()}
        for record in records:  # documents from PNGs: the records' page count
            d = str(record["doc_no"])
            if d not in total and record.get("total_pages") is not None:
                total.setdefault(d, int(record["total_pages"]))

        data = ImportedData(
            pages=pages, queries=pd.DataFrame(), qrels=pd.DataFrame(), source=self.SOURCE, notes=pdf_notes(report)
        )
        data.qrels_file = questions_path  # (the evidence pages are the questions')
        named = NamedDrops(data)
        queries, qrels = [], []
        for number, record in enumerate(records):
            doc_id = str(record["doc_no"])
            query_id = str(record.get("question_id") or f"q{number:05d}")
            if record.get("answer") is None or str(record.get("answer_format", "")).strip() == "None":
                data.drop("queries", "unanswerable")
                continue
            if doc_id not in available:
                data.drop("queries", "document_unavailable")
                continue
            where = f"{query_id} ({doc_id}): evidence_pages {record['evidence_pages']!r}"
            try:
                numbers = parse_list(record["evidence_pages"], f"{query_id} evidence_pages")
            except ValueError:
                named.add(UNPARSEABLE_PAGES, where)
                continue
            evidence = evidence_pages(numbers, total.get(doc_id), first=1)
            if evidence.problem:
                named.add(evidence.problem, where)
                continue
            data.drop("qrels", "repeated_page_number", evidence.repeated)
            try:
                labels = parse_list(record.get("evidence_sources"), f"{query_id} evidence_sources")
            except ValueError:
                labels = [record.get("evidence_sources")]  # (counted as an unmapped label)
            boxes = len(_BOX.findall(str(record.get("detailed_evidences") or "")))
            n_labels = len(set(map(str, labels))) if self.page_multi_from_labels else 1
            n_elements = max(n_labels, boxes, 1) if len(evidence.pages) == 1 else 1
            qrels += [(query_id, page_id(doc_id, p), 1, n_elements) for p in evidence.pages]
            queries.append(
                {
                    "query_id": query_id,
                    "text": record["question"],
                    "answer": answer_text(record["answer"]),
                    "language": "en",
                    "evidence_types": data.evidence_types(labels, EVIDENCE_SOURCES),
                    "question_type": record.get("question_type"),
                    "task_tag": record.get("task_tag"),
                    "answer_format": record.get("answer_format"),
                }
            )
        named.note()
        data.queries = pd.DataFrame(
            queries,
            columns=[
                "query_id",
                "text",
                "answer",
                "language",
                "evidence_types",
                "question_type",
                "task_tag",
                "answer_format",
            ],
        )
        data.qrels = pd.DataFrame(qrels, columns=["query_id", "page_id", "grade", "n_elements"])
        data.documents = pd.DataFrame(
            [
                {"doc_id": d, "source": self.SOURCE, "title": d, "license": self.license}
                for d in doc_ids
                if d in available
            ]
        )
        data.info = {
            **self.provenance(),
            "questions_file": str(questions_path.relative_to(root)),
            "questions_in_file": len(records),
            "documents_from": {"pdf": sorted(report.documents), "png": sorted(set(png_pages["doc_id"]))},
            "pdf": {**report.summary(), "settings": self.pdf.page_settings()},
        }
        return data

    def _extracted(self, root: Path) -> list[Path]:
        """The folders the source's archives were extracted into (each once, staged, then renamed)."""
        import tarfile

        from vldocir.cache import content_key, staging_path

        folders = []
        for pattern in self.archives:
            for archive in sorted(root.glob(pattern)):
                if not archive.is_file():
                    continue
                source_file(root, archive)
                stat = archive.stat()
                folder = self.work_dir / "extracted" / f"{archive.name}-{content_key([str(archive), stat.st_size])}"
                if not folder.is_dir():
                    staging = staging_path(folder)
                    staging.mkdir(parents=True)
                    try:
                        with tarfile.open(archive) as tar:
                            tar.extractall(staging, filter="data")
                        staging.rename(folder)
                    except (tarfile.TarError, OSError) as error:
                        raise ImporterError(f"{archive}: cannot be extracted ({error})") from error
                    finally:
                        shutil.rmtree(staging, ignore_errors=True)
                folders.append(folder)
        return folders
