"""MMLongBench-Doc (Ma et al., 2024): long PDFs and questions over them, imported through the PDF renderer.

The source (``hf://yubo2333/MMLongBench-Doc`` or a local copy of the GitHub repository's ``data/``) holds:

- the questions: ``samples.json`` (GitHub: ``data/samples.json``; a JSON list) or the hub's
  ``data/train-*.parquet``, one record per question with ``doc_id`` (the PDF's file name, ``.pdf``
  included), ``doc_type`` (the domain), ``question``, ``answer``, ``evidence_pages`` (a **string**
  such as ``"[19, 20]"``, **1-indexed**), ``evidence_sources`` (a string too: ``"['Chart', 'Table']"``)
  and ``answer_format`` (``"None"``: the question is unanswerable);
- the PDFs: ``documents/<doc_id>`` (GitHub: ``data/documents/``).

What the import makes of them: every page of every PDF a question names is a page of the corpus
(:mod:`vldocir.construction.pdf`: an image at ``pdf.width``, the text layer as ``dom_text``, OCR);
``doc_id`` is the file name less ``.pdf``; page ids are ``<doc_id>-p<page, 0-based, 3 digits>``.
Left out and counted by reason: unanswerable questions (``unanswerable``), those with no evidence
page (``"[]"`` of an answerable question: ``no_evidence``), an evidence page 0 of the 1-indexed list
(``evidence_page_zero``: 3 answerable questions cite ``[0]``; MMDocIR's re-annotation maps two of
them to the first page and not the third, so no rule reproduces it: they are left out and named) or
past the PDF's end (``evidence_page_past_document_end``), an unreadable list
(``unparseable_evidence_pages``), each of those named in the notes (question number, document, the
value), and the questions of a PDF that is missing or damaged (``pdf_unavailable``; the PDF is named
in the notes). A source without its documents folder, or a question without a ``doc_id``, is refused
in one line before any PDF is read. A page number given twice counts once
(``qrels: repeated_page_number``).

``evidence_sources`` becomes ``evidence_types`` through :data:`EVIDENCE_SOURCES`. Those labels name
the question's modalities, not counted elements, so a one-page question is ``page_single`` however
many it lists; ``page_multi_from_labels: true`` makes two or more labels on one page ``page_multi``
(the rule before: 70 of the 597 one-page questions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
from vldocir.importers.source_files import read_parquet, read_text, source_file

SAMPLE_FILES = ("samples.json", "data/samples.json", "data/train-*.parquet", "*.parquet")
DOCUMENT_FOLDERS = ("documents", "data/documents")
EVIDENCE_SOURCES: dict[str, str | None] = {
    "pure-text (plain-text)": "text",
    "generalized-text (layout)": "layout",
    "chart": "chart",
    "table": "table",
    "figure": "image",
}
"""MMLongBench-Doc ``evidence_sources`` labels (lower-cased) -> evidence type."""
COLUMNS = ("doc_id", "doc_type", "question", "answer", "evidence_pages", "evidence_sources", "answer_format")


def read_samples(path: Path) -> pd.DataFrame:
    """The question records of ``samples.json`` or the hub's Parquet, all columns as the file has them:
    a file that is not JSON (named by line), not a list of records, or a record without one of
    :data:`COLUMNS` (named by number) is refused in one line."""
    if path.suffix == ".parquet":
        samples = read_parquet(path).to_pandas()
    else:
        text = read_text(path)
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise ImporterError(f"{path}:{error.lineno}: not JSON ({error.msg})") from error
        except RecursionError:
            raise ImporterError(f"{path}: not JSON (nested too deeply)") from None
        if not isinstance(records, list) or not records:
            what = "an empty list" if isinstance(records, list) else f"a JSON {type(records).__name__}"
            raise ImporterError(f"{path}: {what}, not a list of MMLongBench-Doc question records")
        for number, record in enumerate(records):
            if not isinstance(record, dict):
                raise ImporterError(f"{path}: record {number} is a JSON {type(record).__name__}, not an object")
            lacking = [c for c in COLUMNS if c not in record]
            if lacking:
                raise ImporterError(f"{path}: record {number} lacks {', '.join(lacking)}")
        samples = pd.DataFrame.from_records(records)
    missing = [c for c in COLUMNS if c not in samples.columns]
    if missing:
        raise ImporterError(f"{path}: the questions lack the column(s) {', '.join(missing)}")
    return samples


@dataclass
class MMLongBenchDoc(LongDocumentImporter):
    """MMLongBench-Doc (module doc)."""

    samples: str | None = None
    """The questions file, relative to the source; None: the first of :data:`SAMPLE_FILES` found."""
    documents: str | None = None
    """The folder of PDFs, relative to the source; None: the first of :data:`DOCUMENT_FOLDERS` found."""
    license: str = "CC BY-NC 4.0 (data, research use only; code Apache-2.0), per the GitHub README"
    page_multi_from_labels: bool = False
    """A one-page question listing two or more ``evidence_sources`` is ``page_multi`` (off: those labels
    name modalities, not counted elements)."""

    format: ClassVar[str] = "mmlongbench_doc"
    SOURCE: ClassVar[str] = "mmlongbench_doc"

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        samples_path = find_file(root, [self.samples] if self.samples else SAMPLE_FILES, "questions file")
        samples = read_samples(samples_path)
        folders = [self.documents] if self.documents else DOCUMENT_FOLDERS
        pdf_dir = next((root / f for f in folders if (root / f).is_dir()), None)
        if pdf_dir is None:
            raise ImporterError(
                f"{root}: no documents folder ({' or '.join(f + '/' for f in folders)}) holding the PDFs the "
                "questions name; download it with the questions, or set dataset.importer.documents"
            )
        null = samples["doc_id"].isna() | (samples["doc_id"].astype(str).str.strip() == "")
        if null.any():
            first = int(null.to_numpy().nonzero()[0][0])
            raise ImporterError(
                f"{samples_path}: question {first} ({samples['question'].iloc[first]!r}) has no doc_id"
                + (f" ({int(null.sum())} questions have none)" if null.sum() > 1 else "")
            )
        names = list(dict.fromkeys(str(name) for name in samples["doc_id"]))
        doc_ids = {name: name.removesuffix(".pdf") for name in names}
        pdfs = [(doc_ids[name], pdf_dir / name) for name in names]
        for _, pdf in pdfs:  # (a link out of the source, or a doc_id with '..', is never opened)
            if pdf.exists() or pdf.is_symlink():
                source_file(root, pdf)
        pages, report = self.rasterize(pdfs)
        if not report.documents:
            raise ImporterError(f"{pdf_dir}: none of the {len(names)} PDFs the questions name can be read")
        n_pages = {doc_id: doc.n_pages for doc_id, doc in report.documents.items()}

        data = ImportedData(
            pages=pages, queries=pd.DataFrame(), qrels=pd.DataFrame(), source=self.SOURCE, notes=pdf_notes(report)
        )
        data.qrels_file = samples_path  # (the evidence pages are the questions')
        named = NamedDrops(data)
        queries, qrels = [], []
        for number, row in enumerate(samples.to_dict("records")):
            name = str(row["doc_id"])
            query_id, doc_id = f"q{number:05d}", doc_ids[name]
            if str(row["answer_format"]).strip() == "None":
                data.drop("queries", "unanswerable")
                continue
            if doc_id not in n_pages:
                data.drop("queries", "pdf_unavailable")
                continue
            where = f"question {number} ({name}): evidence_pages {row['evidence_pages']!r}"
            try:
                numbers = parse_list(row["evidence_pages"], f"question {number} evidence_pages")
            except ValueError:
                named.add(UNPARSEABLE_PAGES, where)
                continue
            evidence = evidence_pages(numbers, n_pages[doc_id], first=1)
            if evidence.problem:
                named.add(evidence.problem, where)
                continue
            data.drop("qrels", "repeated_page_number", evidence.repeated)
            try:
                labels = parse_list(row["evidence_sources"], f"question {number} evidence_sources")
            except ValueError:
                labels = [row["evidence_sources"]]  # (counted as an unmapped label)
            n_labels = len({str(label) for label in labels})
            n_elements = n_labels if self.page_multi_from_labels and len(evidence.pages) == 1 else 1
            qrels += [(query_id, page_id(doc_id, p), 1, max(n_elements, 1)) for p in evidence.pages]
            queries.append(
                {
                    "query_id": query_id,
                    "text": row["question"],
                    "answer": answer_text(row["answer"]),
                    "domain": row["doc_type"],
                    "language": "en",
                    "evidence_types": data.evidence_types(labels, EVIDENCE_SOURCES),
                    "answer_format": row["answer_format"],
                    "evidence_sources": str(row["evidence_sources"]),
                }
            )
        named.note()
        data.queries = pd.DataFrame(
            queries,
            columns=[
                "query_id",
                "text",
                "answer",
                "domain",
                "language",
                "evidence_types",
                "answer_format",
                "evidence_sources",
            ],
        )
        data.qrels = pd.DataFrame(qrels, columns=["query_id", "page_id", "grade", "n_elements"])
        domains = samples.drop_duplicates("doc_id").set_index("doc_id")["doc_type"]
        data.documents = pd.DataFrame(
            [
                {
                    "doc_id": doc_ids[name],
                    "source": self.SOURCE,
                    "domain": domains[name],
                    "title": name,
                    "license": self.license,
                }
                for name in names
                if doc_ids[name] in n_pages
            ]
        )
        data.info = {
            **self.provenance(),
            "questions_file": str(samples_path.relative_to(root)),
            "questions_in_file": len(samples),
            "pdf": {**report.summary(), "settings": self.pdf.page_settings()},
        }
        return data
