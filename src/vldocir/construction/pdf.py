"""PDF-born documents: each page of a PDF becomes a page image, the page's text and its elements
(pypdfium2, PDFium's binding).

- **Image.** A page is rendered by PDFium at :attr:`PdfConfig.width` pixels wide (its height follows the
  page's aspect ratio after its ``/Rotate``; a US-letter page at 1000 px is 1294 px high), on white,
  annotations and form fields drawn, and encoded as :attr:`PdfConfig.image_format`. JPEG (quality 90)
  is the default because the encoder, not PDFium, decides the rate: PDFium renders a text page at
  1000 px in about 13 ms of one core here; JPEG q90 then adds about 7 ms (about 50 pages per CPU
  second in all), PNG 50 ms at ``compress_level=1`` and 85 ms at 6 (about 15 and 10), WebP 50 ms at
  its fastest method, for files about as large as JPEG's (PNG) or half (WebP) (``perf/bench_pdf.py``;
  figures in ``perf/README.md``). JPEG q90 is also what the public page-image benchmarks ship
  (MMDocIR's page images, ViDoRe's); ``png`` is there for lossless pages.
- **Text: the page's ``dom_text``.** The page's text layer as PDFium extracts it
  (``FPDFText_GetBoundedText`` over the whole page: :meth:`pypdfium2.PdfTextPage.get_text_bounded`,
  full Unicode), in content-stream order, PDFium's ``\\r\\n`` line breaks as ``\\n``, control characters
  other than ``\\n`` and ``\\t`` dropped (:func:`clean_text`). It stands in for an HTML page's DOM text
  (what ``dom_bm25`` indexes). A page without a text layer (a scan, an image-only slide) has empty
  text; a document none of whose pages has any is counted and reported
  (:attr:`PdfBatchReport.no_text_layer`): its pages are found only through their images or OCR.
- **Elements** (what query generation cites, as the HTML renderer's element table): text blocks
  (PDFium's text rectangles, one per run of text on a line, merged into blocks of touching lines)
  and the images drawn on the page, each with its box in image pixels.
- **OCR** is the HTML pages': :func:`vldocir.construction.ocr.ocr_pages` over the page images, cached
  per image (the importers and ``build.py input=`` run it).

Many documents: :func:`rasterize_pdfs` renders several at once (worker processes, at most one per
core, like the Chromium batch) and is resumable: each document's pages go into a staging directory
renamed into place when the document is done, named by the PDF's bytes and the settings that change
its pages (:func:`document_key`), so a rerun (or another benchmark holding the same PDF) reuses it.
A damaged PDF (truncated, not a PDF, encrypted) is reported by name with PDFium's reason, in one
line, and the batch goes on.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vldocir.errors import ConfigError, VldocirError

log = logging.getLogger(__name__)

PDF_LAYOUT_VERSION = 1
"""Version of what :func:`rasterize_pdf` writes (bumped when a page's image, text or elements would change)."""

PAGES_FILE = "pages.json"
"""The record of one rasterized document, written last: a directory without it is not finished."""

IMAGE_FORMATS = {"jpeg": ".jpg", "png": ".png", "webp": ".webp"}

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffe\uffff]")


class PdfError(VldocirError, RuntimeError):
    """A PDF that cannot be read or rendered; the message names the file and PDFium's reason."""


@dataclass
class PdfConfig:
    """How PDF pages become page images (module doc)."""

    width: int = 1000
    """Page image width in pixels; the height follows the page's aspect ratio. 1000 px keeps small
    print legible at about 120 dpi for a letter page and renders fast (the project's HTML pages are
    2000 px wide: set 2000 to match them, at about a third of the rate)."""
    image_format: str = "jpeg"
    """``jpeg`` (default, see the module doc), ``png`` or ``webp``."""
    jpeg_quality: int = 90
    png_compress_level: int = 1
    webp_quality: int = 80
    workers: int | None = None
    """Documents rasterized at once, each in a worker process; None: one per core this process may
    use (never more than the cores or the documents)."""
    ocr: bool = True
    """OCR every page (Tesseract, as for HTML). ``False``: a page with a text layer is not OCRed (its
    ``ocr_text`` is null: the text layer, its ``dom_text``, is its text); pages without one still are.
    The build report says which pages were OCRed (``built_by.ocr``)."""

    def __post_init__(self) -> None:
        if self.image_format not in IMAGE_FORMATS:
            raise ConfigError(f"pdf.image_format must be one of {', '.join(IMAGE_FORMATS)}, got {self.image_format!r}")
        if self.width < 16:
            raise ConfigError(f"pdf.width must be at least 16 pixels, got {self.width}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ConfigError(f"pdf.jpeg_quality must be in 1..100, got {self.jpeg_quality}")
        if not 0 <= self.png_compress_level <= 9:
            raise ConfigError(f"pdf.png_compress_level must be in 0..9, got {self.png_compress_level}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"pdf.workers must be at least 1 (or null: one per core), got {self.workers}")

    def page_settings(self) -> dict:
        """The settings that change the pages (the cache key's part; ``workers`` does not)."""
        settings = {"width": self.width, "image_format": self.image_format}
        if self.image_format == "jpeg":
            settings["jpeg_quality"] = self.jpeg_quality
        elif self.image_format == "webp":
            settings["webp_quality"] = self.webp_quality
        return settings  # the PNG level changes the file size, never the pixels

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PdfPage:
    """One page of a rasterized PDF."""

    page_index: int
    """0-based position in the PDF."""
    image: str
    """The image's file name inside the document's directory."""
    width: int
    """Image width in pixels."""
    height: int
    """Image height in pixels."""
    width_pt: float
    """Page width in PDF points (1/72 inch), as displayed (after the page's rotation)."""
    height_pt: float
    text: str
    """The page's text layer (module doc); empty when the page has none."""
    elements: tuple[dict, ...] = ()
    """``{element_id, element_type ("text" | "image"), bbox [x0, y0, x1, y1] in image pixels, text}``."""


def needs_ocr(page: PdfPage, config: PdfConfig) -> bool:
    """Whether the build OCRs ``page``: always, unless ``pdf.ocr=false`` and the page has a text layer."""
    return config.ocr or not page.text.strip()


@dataclass(frozen=True)
class PdfDocument:
    """One rasterized PDF: its directory (``<out_dir>/<key>``) and its pages."""

    directory: Path
    sha256: str
    pages: tuple[PdfPage, ...]

    @property
    def n_pages(self) -> int:
        return len(self.pages)

    @property
    def has_text_layer(self) -> bool:
        return any(page.text.strip() for page in self.pages)

    def image_path(self, page_index: int) -> Path:
        return self.directory / self.pages[page_index].image


@dataclass
class PdfBatchReport:
    """What one :func:`rasterize_pdfs` call did; document lists are in the order of the input."""

    documents: dict[str, PdfDocument] = field(default_factory=dict)
    """doc_id -> its rasterized PDF, for every document that did not fail."""
    rasterized: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    """Documents found already rasterized (same PDF bytes, same settings)."""
    failed: dict[str, str] = field(default_factory=dict)
    """doc_id -> one line naming the PDF and the reason."""
    pages_rendered: int = 0
    wall_s: float = 0.0
    workers: int = 1

    @property
    def no_text_layer(self) -> list[str]:
        """Documents none of whose pages has a text layer (image-only: their dom_text is empty)."""
        return [doc_id for doc_id, doc in self.documents.items() if not doc.has_text_layer]

    def summary(self) -> dict:
        """The counts a benchmark.json records."""
        return {
            "documents": len(self.documents),
            "rasterized": len(self.rasterized),
            "reused": len(self.reused),
            "pages": sum(d.n_pages for d in self.documents.values()),
            "pages_rendered": self.pages_rendered,
            "failed": dict(self.failed),
            "no_text_layer": self.no_text_layer,
            "wall_s": round(self.wall_s, 3),
            "workers": self.workers,
        }


def clean_text(text: str) -> str:
    """PDFium's page text with ``\\n`` line breaks and no control characters (module doc)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def _reason(error: Exception) -> str:
    """PDFium's reason in a few words (``PDFium: Data format error``), else the error's first line."""
    text = " ".join(str(error).split())
    found = re.search(r"\((PDFium: [^)]*)\)", text)
    return found.group(1) if found else (text or type(error).__name__)


def _open(pdf: str | Path | bytes, name: str):
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError as error:
        raise PdfError(f"{name}: damaged or unreadable PDF ({_reason(error)})") from None
    except FileNotFoundError:
        raise PdfError(f"{name}: no such file") from None


def _page_text(textpage) -> str:
    return clean_text(textpage.get_text_bounded())


def page_texts(pdf: str | Path | bytes, name: str | None = None) -> list[str]:
    """The text layer of each page of ``pdf`` (a path or the PDF's bytes), in page order (module doc)."""
    name = name or (str(pdf) if not isinstance(pdf, bytes) else "<PDF bytes>")
    document = _open(pdf, name)
    try:
        texts = []
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            try:
                texts.append(_page_text(textpage))
            finally:
                textpage.close()
                page.close()
        return texts
    finally:
        document.close()


class _ToPixels:
    """PDF page coordinates -> image pixels, through PDFium's own transform (rotation and crop box)."""

    def __init__(self, page, width: int, height: int):
        import pypdfium2.raw as raw

        self.raw, self.page, self.size = raw, page.raw, (width, height)
        self.x, self.y = ctypes.c_int(), ctypes.c_int()

    def point(self, x: float, y: float) -> tuple[int, int]:
        self.raw.FPDF_PageToDevice(
            self.page,
            0,
            0,
            *self.size,
            0,
            ctypes.c_double(x),
            ctypes.c_double(y),
            ctypes.byref(self.x),
            ctypes.byref(self.y),
        )
        return self.x.value, self.y.value

    def box(self, left: float, bottom: float, right: float, top: float) -> list[float]:
        (x0, y0), (x1, y1) = self.point(left, top), self.point(right, bottom)
        w, h = self.size
        x0, x1 = sorted((min(max(x0, 0), w), min(max(x1, 0), w)))
        y0, y1 = sorted((min(max(y0, 0), h), min(max(y1, 0), h)))
        return [float(x0), float(y0), float(x1), float(y1)]


def _text_blocks(textpage, to_pixels: _ToPixels) -> list[tuple[list[float], tuple[float, ...]]]:
    """PDFium's text rectangles merged into blocks: a rectangle joins a block when they overlap
    horizontally and the vertical gap is under 0.8 line heights, or sit on one line a character apart.
    Returns ``(pixel box, PDF rect)`` per block, top to bottom."""
    rects = [textpage.get_rect(i) for i in range(textpage.count_rects())]
    blocks: list[list[float]] = []  # PDF coordinates: left, bottom, right, top (y grows upwards)
    for left, bottom, right, top in sorted(rects, key=lambda r: (-r[3], r[0])):
        height = max(top - bottom, 1.0)
        for block in blocks:
            b_left, b_bottom, b_right, b_top = block
            overlaps_x = left <= b_right and right >= b_left
            gap_below = b_bottom - top  # >= 0 when the rectangle lies below the block
            same_line = bottom < b_top and top > b_bottom and left - b_right < height and b_left - right < height
            if same_line or (overlaps_x and -height < gap_below < 0.8 * height):
                block[:] = [min(left, b_left), min(bottom, b_bottom), max(right, b_right), max(top, b_top)]
                break
        else:
            blocks.append([left, bottom, right, top])
    return [(to_pixels.box(*b), tuple(b)) for b in blocks]


def _page_elements(page, textpage, width: int, height: int) -> list[dict]:
    import pypdfium2.raw as raw

    to_pixels = _ToPixels(page, width, height)
    elements = []
    for box, rect in _text_blocks(textpage, to_pixels):
        text = " ".join(clean_text(textpage.get_text_bounded(*rect)).split())
        if text and box[2] > box[0] and box[3] > box[1]:
            elements.append({"element_type": "text", "bbox": box, "text": text})
    for obj in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=1):
        box = to_pixels.box(*obj.get_bounds())
        if (box[2] - box[0]) * (box[3] - box[1]) >= 0.001 * width * height:  # not a dot or a rule
            elements.append({"element_type": "image", "bbox": box, "text": ""})
    elements.sort(key=lambda e: (e["bbox"][1], e["bbox"][0]))
    for number, element in enumerate(elements):
        element["element_id"] = f"e{number:04d}"
    return elements


def _encode(image, target: Path, config: PdfConfig) -> None:
    if config.image_format == "jpeg":
        image.save(target, format="JPEG", quality=config.jpeg_quality)
    elif config.image_format == "png":
        image.save(target, format="PNG", compress_level=config.png_compress_level)
    else:
        image.save(target, format="WEBP", quality=config.webp_quality, method=0)


def document_key(sha256: str, config: PdfConfig) -> str:
    """The name of a rasterized PDF's directory: its bytes' digest and the page settings."""
    from vldocir.cache import content_key

    return "pdf-" + content_key({"sha256": sha256, "pages": config.page_settings(), "version": PDF_LAYOUT_VERSION})


def load_document(directory: Path) -> PdfDocument | None:
    """A finished rasterized PDF, or None when ``directory`` holds none (or one of another version)."""
    try:
        record = json.loads((directory / PAGES_FILE).read_text())
        if record["version"] != PDF_LAYOUT_VERSION:
            return None
        pages = tuple(PdfPage(**{**page, "elements": tuple(page["elements"])}) for page in record["pages"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(not (directory / page.image).is_file() for page in pages):
        return None
    return PdfDocument(directory, record["sha256"], pages)


def _render_page(page, index: int, staging: Path, config: PdfConfig, pdf_path: Path) -> PdfPage:
    width_pt, height_pt = page.get_size()
    if width_pt <= 0 or height_pt <= 0:
        raise PdfError(f"{pdf_path}: page {index + 1} has an empty size ({width_pt} x {height_pt} pt)")
    bitmap = page.render(scale=config.width / width_pt, rev_byteorder=True, draw_annots=True)
    try:
        image = bitmap.to_pil()
        image = image if image.mode == "RGB" else image.convert("RGB")
        name = f"page-{index:04d}{IMAGE_FORMATS[config.image_format]}"
        _encode(image, staging / name, config)
    finally:
        bitmap.close()
    textpage = page.get_textpage()
    try:
        text = _page_text(textpage)
        elements = _page_elements(page, textpage, image.width, image.height)
    finally:
        textpage.close()
    return PdfPage(
        index, name, image.width, image.height, round(width_pt, 3), round(height_pt, 3), text, tuple(elements)
    )


def rasterize_pdf(
    pdf_path: str | Path, out_dir: str | Path, config: PdfConfig | None = None, sha256: str | None = None
) -> PdfDocument:
    """Render every page of ``pdf_path`` into ``out_dir/<document_key>/`` (``page-0000.jpg``, ...,
    and ``pages.json``: each page's size, text and elements), or reuse the directory when it is there.

    Written into a staging directory and renamed into place, so a killed run leaves nothing that
    is taken for a finished document. Raises :class:`PdfError` naming the file for a damaged PDF.
    """
    from vldocir.cache import staging_path
    from vldocir.io import atomic_write_json, file_digest

    config = config or PdfConfig()
    pdf_path = Path(pdf_path)
    try:
        sha256 = sha256 or file_digest(pdf_path)
    except FileNotFoundError:
        raise PdfError(f"{pdf_path}: no such file") from None
    final = Path(out_dir) / document_key(sha256, config)
    done = load_document(final)
    if done is not None:
        return done
    staging = staging_path(final)
    staging.mkdir(parents=True)
    try:
        document = _open(pdf_path, str(pdf_path))
        pages = []
        try:
            document.init_forms()  # form fields are drawn as a viewer shows them
            for index in range(len(document)):
                page = document[index]
                try:
                    pages.append(_render_page(page, index, staging, config, pdf_path))
                except PdfError:
                    raise
                except Exception as error:  # PDFium failing on one page: the document is damaged
                    raise PdfError(f"{pdf_path}: page {index + 1} cannot be rendered ({_reason(error)})") from None
                finally:
                    page.close()
        finally:
            document.close()
        if not pages:
            raise PdfError(f"{pdf_path}: the PDF has no pages")
        record = {
            "version": PDF_LAYOUT_VERSION,
            "source": str(pdf_path),
            "sha256": sha256,
            "settings": config.page_settings(),
            "pages": [asdict(page) for page in pages],
        }
        atomic_write_json(record, staging / PAGES_FILE)
        if final.exists() and load_document(final) is None:  # unfinished, damaged or of another version
            stale = staging_path(final)
            final.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            staging.rename(final)
        except OSError:  # another writer finished the same PDF first: theirs is as good
            if load_document(final) is None:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = load_document(final)
    if result is None:  # pragma: no cover - renamed just now
        raise PdfError(f"{final}: the rasterized PDF is unreadable")
    return result


def _rasterize_one(pdf_path: str, out_dir: str, config: dict, sha256: str) -> tuple[str | None, str | None]:
    """One document (in a worker process or here): ``(directory, None)`` or ``(None, one-line reason)``."""
    try:
        return str(rasterize_pdf(pdf_path, out_dir, PdfConfig(**config), sha256).directory), None
    except PdfError as error:
        return None, str(error)
    except Exception as error:  # any failure of one document is reported by name; the batch goes on
        return None, f"{pdf_path}: {type(error).__name__}: {_reason(error)}"


def worker_count(config: PdfConfig, n_docs: int) -> int:
    """Documents rasterized at once: ``config.workers`` (default one per core), at most one per
    core and per document."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(config.workers or cores, cores, n_docs))


def rasterize_pdfs(
    docs: Iterable[tuple[str, str | Path]],
    out_dir: str | Path,
    config: PdfConfig | None = None,
    *,
    progress: bool = True,
) -> PdfBatchReport:
    """Rasterize ``(doc_id, pdf_path)`` documents into ``out_dir`` (module doc): several at once in
    :func:`worker_count` worker processes, largest PDF first; documents already rasterized with the
    same bytes and settings are reused (one job per distinct PDF); a damaged or missing PDF is
    logged in one line naming it, recorded in :attr:`PdfBatchReport.failed`, and the others go on."""
    from tqdm.auto import tqdm

    from vldocir.cache import remove_stale_staging
    from vldocir.io import file_digest

    config = config or PdfConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out_dir)
    docs = [(doc_id, Path(path)) for doc_id, path in docs]
    report = PdfBatchReport()
    t0 = time.monotonic()
    found: dict[str, PdfDocument] = {}
    todo: dict[str, tuple[Path, str, int]] = {}  # key -> (pdf, sha256, size)
    keys: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for doc_id, path in docs:
        try:
            sha256, size = file_digest(path), path.stat().st_size
        except OSError as error:
            unreadable[doc_id] = f"{path}: cannot be read ({error.strerror or error})"
            continue
        key = keys[doc_id] = document_key(sha256, config)
        if key not in found and key not in todo:
            done = load_document(out_dir / key)
            if done is not None:
                found[key] = done
            else:
                todo[key] = (path, sha256, size)
    report.workers = worker_count(config, len(todo))
    made: dict[str, PdfDocument] = {}
    errors: dict[str, str] = {}
    jobs = sorted(todo.items(), key=lambda item: item[1][2], reverse=True)
    settings = config.to_dict()
    with tqdm(total=len(jobs), desc="PDFs", unit="doc", disable=not progress or not jobs) as bar:
        if report.workers == 1:
            for key, (path, sha256, _) in jobs:
                _collect(key, *_rasterize_one(str(path), str(out_dir), settings, sha256), made, errors)
                bar.update()
        else:
            import multiprocessing

            # spawn: PDFium's state is not fork-safe, and the parent may hold threads (tqdm, OCR)
            with ProcessPoolExecutor(report.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {
                    pool.submit(_rasterize_one, str(path), str(out_dir), settings, sha256): key
                    for key, (path, sha256, _) in jobs
                }
                for future in as_completed(futures):
                    _collect(futures[future], *future.result(), made, errors)
                    bar.update()
    for doc_id, _ in docs:
        key = keys.get(doc_id)
        if doc_id in unreadable or key in errors:
            report.failed[doc_id] = unreadable.get(doc_id) or errors[key]
            log.warning("PDF of %s left out: %s", doc_id, report.failed[doc_id])
        elif key in found:
            report.documents[doc_id] = found[key]
            report.reused.append(doc_id)
        else:
            report.documents[doc_id] = made[key]
            report.rasterized.append(doc_id)
    report.pages_rendered = sum(doc.n_pages for doc in made.values())
    report.wall_s = time.monotonic() - t0
    return report


def _collect(key: str, directory: str | None, error: str | None, made: dict, errors: dict) -> None:
    if error is not None:
        errors[key] = error
        return
    document = load_document(Path(directory))
    if document is None:  # pragma: no cover - written just now
        errors[key] = f"{directory}: the rasterized PDF is unreadable"
    else:
        made[key] = document


def page_rows(report: PdfBatchReport, page_id_of: Callable[[str, int], str]) -> list[dict]:
    """One row per page of the report's documents (in their order): ``page_id`` (``page_id_of(doc_id,
    page_index)``), ``doc_id``, ``page_number`` (0-based page of the PDF), ``image_file`` (the
    rasterized image), ``width``, ``height`` (its pixels) and ``dom_text`` (the text layer)."""
    return [
        {
            "page_id": page_id_of(doc_id, page.page_index),
            "doc_id": doc_id,
            "page_number": page.page_index,
            "image_file": str(document.directory / page.image),
            "width": page.width,
            "height": page.height,
            "dom_text": page.text,
        }
        for doc_id, document in report.documents.items()
        for page in document.pages
    ]
