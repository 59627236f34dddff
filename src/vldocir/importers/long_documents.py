"""What the long-document importers share (MMLongBench-Doc, LongDocURL, MMDocIR): their options
for PDF pages and OCR, evidence page lists as the sources spell them, and evidence types.

- :class:`LongDocumentImporter`: an :class:`~vldocir.importers.base.Importer` with ``pdf`` (how PDF
  pages become images: :class:`~vldocir.construction.pdf.PdfConfig`), ``ocr`` (Tesseract on the page
  images; null: none) and ``cache_dir`` (rasterized PDFs and OCR, reused by later imports). Where
  the cache lives, how many workers run and where Tesseract is do not change the data, so they are
  left out of the spec that ``benchmark.json`` records and a reuse compares.
- :func:`evidence_pages`: a source's list of evidence page numbers (1-indexed in MMLongBench-Doc and
  LongDocURL, 0-indexed in MMDocIR) as 0-based pages of the document: repeated numbers collapse
  (counted), a page 0 in a 1-indexed list (:data:`PAGE_ZERO`), a number before the first page or
  past the document's end makes the question unusable, with that reason; :class:`NamedDrops`
  names those questions in the notes.
- :func:`parse_list`: the lists the sources store as strings (``"[19, 20]"``, ``"['Chart']"``).

Each importer maps its source's modality labels to evidence types through a table of its own
(:meth:`~vldocir.importers.base.ImportedData.evidence_types`).
"""

from __future__ import annotations

import ast
import json
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from vldocir.construction.ocr import OcrConfig, ocr_pages
from vldocir.construction.pdf import PdfBatchReport, PdfConfig, page_rows, rasterize_pdfs
from vldocir.data.evidence import page_id
from vldocir.importers.base import ImportedData, Importer, ImporterError
from vldocir.importers.source_files import source_file

PAGE_ZERO = "evidence_page_zero"
"""Drop reason: page 0 in a 1-indexed list (MMLongBench-Doc cites ``[0]`` for 3 answerable questions;
whether it means the cover or is a slip is not said, so the question is left out and named)."""
BEFORE_FIRST_PAGE = "evidence_page_before_first_page"
"""Drop reason: an evidence page numbered below the list's first page (page 0 in a 1-indexed list)."""
PAST_DOCUMENT_END = "evidence_page_past_document_end"
"""Drop reason: an evidence page past the document's last page."""
UNPARSEABLE_PAGES = "unparseable_evidence_pages"
NAMED_REASONS = (UNPARSEABLE_PAGES, PAGE_ZERO, BEFORE_FIRST_PAGE, PAST_DOCUMENT_END)
"""Drop reasons whose questions the notes name (a few a source has, each worth a look)."""


def parse_list(value: Any, what: str) -> list:
    """``value`` as a list: a list or array as it is; a string holding a JSON list or a Python
    literal list (``"['Chart', 'Table']"``) parsed; None, NaN or a blank string: ``[]``. Raises
    ValueError naming ``what`` for anything else."""
    if value is None or (isinstance(value, float) and value != value):
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist"):  # a numpy array (a list column read from Parquet)
        return list(value.tolist())
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, (list, tuple)):
                return list(parsed)
            if isinstance(parsed, (int, float, str)):
                return [parsed]
    raise ValueError(f"{what}: {value!r} is not a list")


@dataclass(frozen=True)
class EvidencePages:
    pages: tuple[int, ...]
    """0-based pages, sorted, each once (empty when ``problem`` is set)."""
    repeated: int = 0
    """Numbers given more than once (collapsed)."""
    problem: str | None = None
    """Why the question cannot be used (a drop reason), or None."""


def evidence_pages(numbers: Iterable[Any], n_pages: int | None, first: int) -> EvidencePages:
    """Evidence page ``numbers`` of a document of ``n_pages`` pages (None: unknown), where ``first``
    is the number of its first page in the list (1: 1-indexed, 0: 0-indexed); module doc."""
    try:
        values = [int(n) for n in numbers]
        if any(float(n) != int(n) for n in numbers):
            raise ValueError
    except (TypeError, ValueError):
        return EvidencePages((), 0, UNPARSEABLE_PAGES)
    pages = sorted({n - first for n in values})
    repeated = len(values) - len(pages)
    if first == 1 and 0 in values:
        return EvidencePages((), repeated, PAGE_ZERO)
    if pages and pages[0] < 0:
        return EvidencePages((), repeated, BEFORE_FIRST_PAGE)
    if pages and n_pages is not None and pages[-1] >= n_pages:
        return EvidencePages((), repeated, PAST_DOCUMENT_END)
    return EvidencePages(tuple(pages), repeated)


class NamedDrops:
    """The questions an importer left out for one of :data:`NAMED_REASONS`, named in the notes:
    ``add(reason, "question 17 (report.pdf): 'page six'")`` counts the drop, :meth:`note` writes
    one note per reason (at most ten named, then how many more)."""

    def __init__(self, data: ImportedData):
        self.data, self.named = data, {reason: [] for reason in NAMED_REASONS}

    def add(self, reason: str, name: str) -> None:
        self.data.drop("queries", reason)
        if reason in self.named:
            self.named[reason].append(name)

    def note(self) -> None:
        for reason, names in self.named.items():
            self.data.name_rows(f"queries left out, {reason}", names)


def answer_text(value: Any) -> str | None:
    """An answer as text: strings as they are, lists as JSON, numbers as written."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _coerce(value: Any, cls: type) -> Any:
    if isinstance(value, dict):
        return cls(**{k: v for k, v in value.items() if k != "_target_"})
    return value


@dataclass
class LongDocumentImporter(Importer):
    """An importer of PDF-born long documents (module doc)."""

    pdf: PdfConfig = field(default_factory=PdfConfig)
    """How PDF pages become page images (``dataset.importer.pdf.width=2000``, ...)."""
    ocr: OcrConfig | None = field(default_factory=lambda: OcrConfig(scale=1.0))
    """Tesseract over the page images for ``ocr_text`` (null: none). Scale 1: PDF pages are
    rendered at ``pdf.width`` (1000 px), not at the HTML pages' 2000 px that OCR halves."""
    cache_dir: str | None = None
    """Rasterized PDFs (``<cache_dir>/pdf/``) and OCR (``<cache_dir>/ocr/``); None: the system's
    temporary folder. The Hydra configs set ``${paths.cache_dir}``."""

    RUNTIME_ONLY: ClassVar[dict] = {"cache_dir": None, "pdf": ("workers",), "ocr": ("workers", "tesseract_cmd")}

    def __post_init__(self) -> None:
        self.pdf = _coerce(self.pdf, PdfConfig) or PdfConfig()
        self.ocr = _coerce(self.ocr, OcrConfig)

    def spec(self) -> dict[str, Any]:
        """The importer's spec less what does not change the data (module doc)."""
        spec = super().spec()
        for key, nested in self.RUNTIME_ONLY.items():
            if nested is None:
                spec.pop(key, None)
            elif isinstance(spec.get(key), dict):
                spec[key] = {k: v for k, v in spec[key].items() if k not in nested}
        return spec

    @property
    def work_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(tempfile.gettempdir()) / "vldocir-import-cache"

    def rasterize(self, documents: list[tuple[str, Path]]) -> tuple[pd.DataFrame, PdfBatchReport]:
        """The pages of ``(doc_id, pdf)`` documents (rasterized, text layer as ``dom_text``, OCR
        when ``ocr`` is set) as importer rows, and the batch report (failed PDFs, image-only ones)."""
        report = rasterize_pdfs(documents, self.work_dir / "pdf", self.pdf)
        pages = pd.DataFrame(
            page_rows(report, page_id),
            columns=["page_id", "doc_id", "page_number", "image_file", "width", "height", "dom_text"],
        )
        pages["ocr_text"] = self.ocr_texts(list(pages["image_file"]))
        return pages, report

    def ocr_texts(self, images: list[str]) -> list[str | None]:
        """OCR text of each image (cached per image), or None for each when ``ocr`` is null."""
        if self.ocr is None or not images:
            return [None] * len(images)
        return ocr_pages([Path(p) for p in images], self.work_dir, self.ocr)


def find_file(root: Path, names: Iterable[str], what: str) -> Path:
    """The first of ``names`` (paths or glob patterns relative to ``root``) that exists."""
    for name in names:
        found = sorted(root.glob(name)) if any(c in name for c in "*?[") else [root / name]
        found = [p for p in found if p.is_file() or p.is_symlink()]
        if found:
            return source_file(root, found[0])
    raise ImporterError(f"{root}: no {what} (looked for {', '.join(names)})")


def pdf_notes(report: PdfBatchReport) -> list[str]:
    """Lines for benchmark.json's notes: each PDF that failed (named, with its reason)."""
    return [f"PDF left out: {reason}" for reason in report.failed.values()]
