"""MMDocIR (Dong et al., 2025), evaluation set: page retrieval in long documents.

The source (``hf://MMDocIR/MMDocIR_Evaluation_Dataset`` or a local folder) holds:

- ``MMDocIR_annotations.jsonl``: one line per document: ``doc_name`` (``.pdf`` included), ``domain``,
  ``page_indices`` ``[start, end]`` (**row indices into the pages Parquet**, end included, not page
  numbers), ``layout_indices`` (the same into the layouts Parquet; the dataset card spells it
  ``layout_indinces``) and ``questions``: ``Q``, ``A``, ``type`` (a string holding a Python list,
  ``"['Chart']"``), ``page_id`` (the evidence pages, **0-indexed**: the question MMLongBench-Doc
  gives as pages ``[19, 20]`` is ``[18, 19]`` here) and ``layout_mapping`` (the evidence boxes:
  ``page``, ``page_size``, ``bbox``; a list, or a string holding one);
- ``MMDocIR_pages.parquet``: one row per page, ``doc_name, domain, passage_id, image_path,
  image_binary`` (JPEG), ``ocr_text`` (OCR), ``vlm_text`` (a VLM's transcription). It is read in
  row batches (never whole: it is 2.5 GB); page ``r - start`` of a document is row ``r``.
- Without the Parquet, ``page_content/<doc_name less .pdf>_page.jsonl`` (one line per page:
  ``page``, ``image_path``, ``ocr_text``, ``vlm_text``, as the dataset's GitHub repository ships
  them) stands in: pages are then text only unless the images are under the source at their
  ``image_path``.

What the import makes of them: ``doc_id`` is ``doc_name`` less ``.pdf``; page ids are
``<doc_id>-p<page, 0-based, 3 digits>``; ``dom_text`` is the page's ``vlm_text`` (option
``dom_text``: ``vlm_text`` | ``ocr_text`` | ``none``; the pages have no text layer of their own:
MMDocIR rendered them from the PDFs), ``ocr_text`` its ``ocr_text``. ``type`` (a list in a string,
a bare DocBench label such as ``text-only``, or ``[]``) becomes ``evidence_types`` through
:data:`QUESTION_TYPES`; an unknown label is counted. A question whose ``page_id`` cannot be read, or
falls outside its document, is left out and named in the notes. Evidence pages before the
first or past a document's last page leave the question out, counted by reason; repeated pages
count once. A question with one evidence page holding two or more of its layout boxes is
``page_multi``. MMDocIR's own protocol ranks pages within the query's document: run the
document-scoped setting beside the corpus-wide one to report both.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pandas as pd

from vldocir.construction.ocr import OcrConfig
from vldocir.data.evidence import page_id
from vldocir.importers.base import ImportedData, ImporterError, fetch
from vldocir.importers.long_documents import (
    UNPARSEABLE_PAGES,
    LongDocumentImporter,
    NamedDrops,
    answer_text,
    evidence_pages,
    parse_list,
)
from vldocir.importers.source_files import batches, inside, json_lines, parquet_file, source_file

QUESTION_TYPES: dict[str, str | None] = {
    # MMLongBench-Doc's labels, as a string holding a Python list ("['Chart', 'Table']")
    "pure-text (plain-text)": "text",
    "generalized-text (layout)": "layout",
    "layout": "layout",
    "chart": "chart",
    "table": "table",
    "figure": "image",
    # DocBench's labels, as a bare string (864 of the 1,658 questions)
    "text-only": "text",
    "multimodal-t": "table",  # multimodal, a table
    "multimodal-f": "image",  # multimodal, a figure
    "meta-data": "metadata",  # the document's metadata (page count, author, ...)
    "una-web": None,  # DocBench's unanswerable ("una") family: names no modality
}
"""MMDocIR question ``type`` labels (lower-cased) -> evidence type; ``[]`` (17 questions) gives none."""
TEXT_FIELDS = ("vlm_text", "ocr_text", "none")
BATCH_ROWS = 256
"""Pages Parquet rows read at once (each holds a page image: about 120 kB)."""


def read_annotations(path: Path) -> list[dict]:
    documents = []
    for line_number, record in json_lines(path):
        try:
            if not isinstance(record.get("questions", []), list):
                raise TypeError("questions is not a list")
            if not all(isinstance(q, dict) for q in record.get("questions", [])):
                raise TypeError("a question is not an object")
            start, end = (int(i) for i in record["page_indices"])
            missing = [key for key in ("doc_name", "questions") if not record.get(key) and record.get(key) != []]
            if missing:
                raise KeyError(", ".join(missing))
        except (ValueError, KeyError, TypeError, RecursionError) as error:
            raise ImporterError(f"{path}:{line_number}: not an MMDocIR annotation record ({error!r})") from error
        if end < start:
            raise ImporterError(f"{path}:{line_number}: page_indices [{start}, {end}] ends before it starts")
        documents.append(record)
    if not documents:
        raise ImporterError(f"{path}: no annotation records (an empty file)")
    return documents


def _layouts(value) -> list[dict]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return []
    return [m for m in (value or []) if isinstance(m, dict)]


@dataclass
class MMDocIR(LongDocumentImporter):
    """MMDocIR (module doc)."""

    annotations: str = "MMDocIR_annotations.jsonl"
    pages: str | None = None
    """The pages Parquet, relative to the source; None: ``MMDocIR_pages.parquet`` if present, else
    the ``page_content/`` folder."""
    dom_text: str = "vlm_text"
    """Which provided text is the page's ``dom_text``: ``vlm_text`` | ``ocr_text`` | ``none``."""
    ocr: OcrConfig | None = field(default=None)
    """None: the dataset's own ``ocr_text`` (set an OcrConfig to OCR the images with Tesseract instead)."""
    license: str = "CC BY-NC 4.0 per the GitHub README (MMDocRAG/MMDocIR; the hub card says Apache-2.0)"

    format: ClassVar[str] = "mmdocir"
    SOURCE: ClassVar[str] = "mmdocir"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dom_text not in TEXT_FIELDS:
            raise ImporterError(
                f"dataset.importer.dom_text must be one of {', '.join(TEXT_FIELDS)}, got {self.dom_text!r}"
            )

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        annotations_path = root / self.annotations
        if not annotations_path.is_file():
            raise ImporterError(f"{root}: no annotations file {self.annotations}")
        documents = read_annotations(source_file(root, annotations_path))
        parquet = root / (self.pages or "MMDocIR_pages.parquet")
        if self.pages and not parquet.is_file():
            raise ImporterError(f"{root}: no pages file {self.pages}")
        page_source = "parquet" if parquet.is_file() else "page_content"
        if page_source == "parquet":
            source_file(root, parquet)
        if page_source == "page_content" and not (root / "page_content").is_dir():
            raise ImporterError(f"{root}: neither MMDocIR_pages.parquet nor a page_content/ folder")

        data = ImportedData(
            pages=[], queries=pd.DataFrame(), qrels=pd.DataFrame(), source=self.SOURCE, qrels_file=annotations_path
        )
        data.pages = (
            self._parquet_pages(parquet, documents, data)
            if page_source == "parquet"
            else self._page_content(root, documents, data)
        )
        named = NamedDrops(data)
        queries, qrels = [], []
        number = 0
        for doc in documents:
            doc_id = str(doc["doc_name"]).removesuffix(".pdf")
            start, end = (int(i) for i in doc["page_indices"])
            for question in doc["questions"]:
                query_id, number = f"q{number:05d}", number + 1
                if question.get("A") is None:
                    data.drop("queries", "unanswerable")
                    continue
                where = f"question {number - 1} ({doc['doc_name']}): page_id {question.get('page_id')!r}"
                try:
                    numbers = parse_list(question.get("page_id"), f"{query_id} page_id")
                except ValueError:
                    named.add(UNPARSEABLE_PAGES, where)
                    continue
                evidence = evidence_pages(numbers, end - start + 1, first=0)
                if evidence.problem:
                    named.add(evidence.problem, where)
                    continue
                data.drop("qrels", "repeated_page_number", evidence.repeated)
                boxes = _layouts(question.get("layout_mapping"))
                try:
                    labels = parse_list(question.get("type"), f"{query_id} type")
                except ValueError:
                    labels = [question.get("type")]
                for p in evidence.pages:
                    on_page = sum(1 for m in boxes if _int(m.get("page")) == p)
                    qrels.append((query_id, page_id(doc_id, p), 1, max(on_page, 1)))
                queries.append(
                    {
                        "query_id": query_id,
                        "text": question.get("Q"),
                        "answer": answer_text(question["A"]),
                        "domain": doc.get("domain"),
                        "language": "en",
                        "evidence_types": data.evidence_types(labels, QUESTION_TYPES),
                        "question_type": str(question.get("type")),
                    }
                )
        named.note()
        data.queries = pd.DataFrame(
            queries, columns=["query_id", "text", "answer", "domain", "language", "evidence_types", "question_type"]
        )
        data.qrels = pd.DataFrame(qrels, columns=["query_id", "page_id", "grade", "n_elements"])
        data.documents = pd.DataFrame(
            [
                {
                    "doc_id": str(d["doc_name"]).removesuffix(".pdf"),
                    "source": self.SOURCE,
                    "domain": d.get("domain"),
                    "title": d["doc_name"],
                    "license": self.license,
                }
                for d in documents
            ]
        )
        data.info = {
            **self.provenance(),
            "pages_from": page_source,
            "dom_text": self.dom_text,
            "documents_in_file": len(documents),
            "questions_in_file": number,
        }
        return data

    def _texts(self, row: dict) -> tuple[str | None, str | None]:
        dom = None if self.dom_text == "none" else row.get(self.dom_text)
        return dom, row.get("ocr_text")

    def _parquet_pages(self, path: Path, documents: list[dict], data: ImportedData) -> Iterator[pd.DataFrame]:
        """Pages in row batches: each row's document is the annotation whose ``page_indices`` hold it."""

        ranges = sorted(
            ((int(d["page_indices"][0]), int(d["page_indices"][1]), d) for d in documents), key=lambda r: r[0]
        )
        starts = [r[0] for r in ranges]
        names = parquet_file(path).schema_arrow.names
        columns = [c for c in ("doc_name", "image_binary", "ocr_text", "vlm_text") if c in names]
        row_number = 0
        for batch in batches(path, BATCH_ROWS, columns):
            rows = []
            for row in batch.to_pylist():
                r, row_number = row_number, row_number + 1
                at = bisect.bisect_right(starts, r) - 1
                if at < 0 or r > ranges[at][1]:
                    data.drop("pages", "row_of_no_annotated_document")
                    continue
                start, _, doc = ranges[at]
                if "doc_name" in row and row["doc_name"] != doc["doc_name"]:
                    raise ImporterError(
                        f"{path}: row {r} is a page of {row['doc_name']!r}, but the annotations "
                        f"place rows {start}..{ranges[at][1]} in {doc['doc_name']!r}"
                    )
                doc_id = str(doc["doc_name"]).removesuffix(".pdf")
                dom, ocr = self._texts(row)
                rows.append(
                    {
                        "page_id": page_id(doc_id, r - start),
                        "doc_id": doc_id,
                        "page_number": r - start,
                        "image": row.get("image_binary"),
                        "dom_text": dom,
                        "ocr_text": ocr,
                    }
                )
            frame = pd.DataFrame(rows, columns=["page_id", "doc_id", "page_number", "image", "dom_text", "ocr_text"])
            if self.ocr is not None:
                frame["ocr_text"] = self._ocr_bytes(frame["image"])
            yield frame

    def _ocr_bytes(self, images: pd.Series) -> list[str | None]:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, image in enumerate(images):
                path = Path(tmp) / f"{i}.img"
                path.write_bytes(image or b"")
                paths.append(str(path))
            return self.ocr_texts(paths)

    def _page_content(self, root: Path, documents: list[dict], data: ImportedData) -> pd.DataFrame:
        rows = []
        for doc in documents:
            doc_id = str(doc["doc_name"]).removesuffix(".pdf")
            path = root / "page_content" / f"{doc_id}_page.jsonl"
            if not path.is_file():
                data.notes.append(f"no page file {path.relative_to(root)}: the document's pages are left out")
                continue
            for line_number, record in json_lines(source_file(root, path)):
                number = _int(record.get("page"))
                if number is None:
                    data.drop("pages", "no_page_number")
                    continue
                image = root / str(record.get("image_path") or "")
                if record.get("image_path") and (image.exists() or image.is_symlink()) and not inside(root, image):
                    raise ImporterError(
                        f"{path}:{line_number}: image_path {record['image_path']!r} resolves outside the "
                        f"source folder {root}; refusing to read it"
                    )
                dom, ocr = self._texts(record)
                rows.append(
                    {
                        "page_id": page_id(doc_id, number),
                        "doc_id": doc_id,
                        "page_number": number,
                        "image_file": str(image) if record.get("image_path") and image.is_file() else None,
                        "dom_text": dom,
                        "ocr_text": ocr,
                    }
                )
        pages = pd.DataFrame(rows, columns=["page_id", "doc_id", "page_number", "image_file", "dom_text", "ocr_text"])
        if self.ocr is not None and pages["image_file"].notna().any():
            with_image = pages["image_file"].notna()
            pages.loc[with_image, "ocr_text"] = self.ocr_texts(list(pages.loc[with_image, "image_file"]))
        return pages


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
