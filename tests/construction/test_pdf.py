"""PDF-born documents (vldocir.construction.pdf): a PDF made here with matplotlib (real embedded text and a
figure) becomes one image per page at the configured size, its text layer per page, elements and OCR;
a damaged PDF is one line naming it and the others go on; reruns reuse what was rasterized."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import make_pdf
from vldocir.construction.pdf import (
    PAGES_FILE,
    PdfConfig,
    PdfError,
    clean_text,
    page_texts,
    rasterize_pdf,
    rasterize_pdfs,
)
from vldocir.errors import ConfigError, VldocirError

PAGE_LINES = [
    ["Quarterly report, page one", "Revenue grew by 12 percent in the north.", "Costs fell in the south."],
    ["Second page: outlook", "The board expects steady demand.", "Prices stay flat."],
    ["Third page holds a figure", "Figure 1: monthly sales."],
]
FIGURE_PAGES = {2}


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pdfs")
    good = make_pdf(root / "report.pdf", PAGE_LINES, FIGURE_PAGES)
    broken = root / "broken.pdf"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # truncated: no cross-reference table
    image_only = make_pdf(root / "scan.pdf", [[], []])
    return {"good": good, "broken": broken, "image_only": image_only}


def test_pages_become_images_text_and_elements(pdfs, tmp_path):
    from PIL import Image

    config = PdfConfig(width=500, workers=1)
    report = rasterize_pdfs([("report", pdfs["good"])], tmp_path / "pdf", config, progress=False)

    doc = report.documents["report"]
    assert report.rasterized == ["report"] and not report.failed and doc.n_pages == len(PAGE_LINES)
    expected_height = round(500 * 5.5 / 4.25)
    for page in doc.pages:
        with Image.open(doc.image_path(page.page_index)) as image:
            assert image.format == "JPEG" and image.size == (page.width, page.height)
        assert page.width == 500 and abs(page.height - expected_height) <= 1
        assert (page.width_pt, page.height_pt) == (306.0, 396.0)  # 4.25 x 5.5 inches in points
    # The text layer is what the PDF holds: each page's lines, in the order written, nothing else.
    for page, lines in zip(doc.pages, PAGE_LINES, strict=True):
        assert page.text.splitlines() == lines
    assert [p.text for p in doc.pages] == page_texts(pdfs["good"])
    assert doc.has_text_layer and report.no_text_layer == []
    # Elements: the lines as text blocks inside the page, the figure as an image.
    first = doc.pages[0].elements
    assert [e["element_type"] for e in first] == ["text"]
    assert first[0]["text"] == " ".join(PAGE_LINES[0])
    x0, y0, x1, y1 = first[0]["bbox"]
    assert 0 <= x0 < x1 <= 500 and 0 <= y0 < y1 <= expected_height / 2  # the lines are at the top
    figure = [e for e in doc.pages[2].elements if e["element_type"] == "image"]
    assert len(figure) == 1 and figure[0]["bbox"][1] > expected_height / 2  # the figure is in the lower half


def test_a_damaged_pdf_is_one_line_naming_it_and_the_batch_goes_on(pdfs, tmp_path, caplog):
    docs = [("broken", pdfs["broken"]), ("report", pdfs["good"]), ("absent", tmp_path / "absent.pdf")]
    report = rasterize_pdfs(docs, tmp_path / "pdf", PdfConfig(width=300, workers=1), progress=False)

    assert list(report.documents) == ["report"]
    assert list(report.failed) == ["broken", "absent"]  # in the order of the input
    broken = report.failed["broken"]
    assert broken == f"{pdfs['broken']}: damaged or unreadable PDF (PDFium: Data format error)"
    assert "\n" not in broken and "absent.pdf" in report.failed["absent"]
    logged = [r.getMessage() for r in caplog.records if "broken.pdf" in r.getMessage()]
    assert len(logged) == 1 and "\n" not in logged[0]
    with pytest.raises(PdfError, match=r"broken\.pdf: damaged or unreadable PDF") as raised:
        rasterize_pdf(pdfs["broken"], tmp_path / "pdf")
    assert isinstance(raised.value, VldocirError)  # the apps print it as one line
    assert not [p for p in (tmp_path / "pdf").iterdir() if ".staging-" in p.name]  # nothing half-written left


def test_reruns_reuse_and_settings_key_the_pages(pdfs, tmp_path):
    out = tmp_path / "pdf"
    first = rasterize_pdfs([("report", pdfs["good"])], out, PdfConfig(width=300, workers=1), progress=False)
    again = rasterize_pdfs(
        [("report", pdfs["good"]), ("copy", pdfs["good"])], out, PdfConfig(width=300, workers=4), progress=False
    )
    assert again.reused == ["report", "copy"] and again.pages_rendered == 0  # workers do not change the pages
    assert again.documents["copy"].directory == first.documents["report"].directory
    wider = rasterize_pdfs([("report", pdfs["good"])], out, PdfConfig(width=400, workers=1), progress=False)
    assert wider.rasterized == ["report"] and wider.documents["report"].pages[0].width == 400
    png = rasterize_pdfs([("report", pdfs["good"])], out, PdfConfig(width=300, image_format="png"), progress=False)
    assert png.documents["report"].pages[0].image.endswith(".png")
    assert len({d.documents["report"].directory for d in (first, wider, png)}) == 3
    # A document directory without its record (a killed run's leftover renamed by hand) is not taken.
    directory = first.documents["report"].directory
    (directory / PAGES_FILE).unlink()
    redone = rasterize_pdfs([("report", pdfs["good"])], out, PdfConfig(width=300, workers=1), progress=False)
    assert redone.rasterized == ["report"] and json.loads((directory / PAGES_FILE).read_text())["pages"]


def test_worker_processes_make_the_same_pages(pdfs, tmp_path):
    docs = [("report", pdfs["good"]), ("scan", pdfs["image_only"]), ("broken", pdfs["broken"])]
    alone = rasterize_pdfs(docs, tmp_path / "one", PdfConfig(width=300, workers=1), progress=False)
    parallel = rasterize_pdfs(docs, tmp_path / "two", PdfConfig(width=300, workers=2), progress=False)

    assert parallel.workers == 2 and alone.workers == 1
    assert parallel.failed.keys() == alone.failed.keys() == {"broken"}
    for doc_id in ("report", "scan"):
        a, b = alone.documents[doc_id], parallel.documents[doc_id]
        assert a.pages == b.pages
        assert all(a.image_path(i).read_bytes() == b.image_path(i).read_bytes() for i in range(a.n_pages))
    assert parallel.no_text_layer == ["scan"]  # an image-only document is said, not hidden
    assert [p.text for p in parallel.documents["scan"].pages] == ["", ""]


def test_ocr_reads_the_rendered_page(pdfs, tmp_path):
    from vldocir.construction.ocr import OcrConfig, ocr_pages

    pytest.importorskip("pytesseract")
    import shutil

    if shutil.which("tesseract") is None:
        pytest.skip("Tesseract is not installed (apt-get install tesseract-ocr)")
    report = rasterize_pdfs(
        [("report", pdfs["good"])], tmp_path / "pdf", PdfConfig(width=1000, workers=1), progress=False
    )
    page = report.documents["report"].image_path(0)
    text = ocr_pages([page], tmp_path, OcrConfig(scale=1.0, workers=1))[0]
    assert "Revenue" in text and "percent" in text


def test_config_and_text_cleaning():
    with pytest.raises(ConfigError, match=r"pdf\.image_format"):
        PdfConfig(image_format="gif")
    with pytest.raises(ConfigError, match=r"pdf\.width"):
        PdfConfig(width=0)
    assert PdfConfig(png_compress_level=6, image_format="png").page_settings() == {"width": 1000, "image_format": "png"}
    assert clean_text("a\r\nb\rc\x00d\x02\te\ufffe") == "a\nb\ncd\te"


@pytest.mark.slow
def test_build_from_an_index_of_pdfs(pdfs, tmp_path):
    """``python -m vldocir.apps.build input=`` with PDFs beside (here instead of) HTML: pages are the
    PDF's pages, the text layer is the DOM text, elements come from the text blocks and images, OCR
    and the VLM query stage run as for HTML, and a damaged PDF is reported by name."""
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from helpers import ScriptedVLM
    from vldocir.construction.ingest import build_from_html
    from vldocir.construction.ocr import OcrConfig
    from vldocir.data.benchmark import load_benchmark
    from vldocir.llm_server import ChatServer

    if shutil.which("tesseract") is None:
        pytest.skip("Tesseract is not installed (apt-get install tesseract-ocr)")
    rows = [
        {"doc_id": "report", "source": "sec", "domain": "Financial Reports", "path": str(pdfs["good"])},
        {"doc_id": "outlook", "source": "sec", "path": str(make_pdf(tmp_path / "outlook.pdf", PAGE_LINES[::-1]))},
        {"doc_id": "damaged", "source": "sec", "path": str(pdfs["broken"])},
    ]
    (tmp_path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (
        ChatServer(responder=ScriptedVLM()) as server,
        initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "conf"), version_base="1.3"),
    ):
        cfg = compose(
            "build",
            overrides=[
                f"paths.cache_dir={tmp_path / 'cache'}",
                "queries.recorded=null",
                "queries.llm.model=test-vlm",
                f"queries.llm.base_url={server.url}",
                "queries.sampling.configs_per_structure=1",
                "queries.progress=false",
                "queries.generation.queries_per_config=2",
            ],
        )
        bench = build_from_html(
            tmp_path / "index.jsonl",
            tmp_path / "bench",
            tmp_path / "cache",
            "own-pdfs",
            instantiate(cfg.queries),
            ocr=OcrConfig(scale=1.0),
            pdf=PdfConfig(width=600),
        )
    built = bench.info["built_by"]
    assert built["failed_documents"] == {
        "damaged": f"{pdfs['broken']}: damaged or unreadable PDF (PDFium: Data format error)"
    }
    assert built["pdf"]["documents"] == 2 and built["pdf"]["settings"]["width"] == 600
    pages = bench.pages.set_index("page_id")
    assert len(pages) == 2 * len(PAGE_LINES) and set(pages["width"]) == {600}
    assert pages.loc["report-p001", "dom_text"].splitlines() == PAGE_LINES[1]
    assert pages["ocr_text"].str.len().gt(0).all()
    assert set(bench.elements["element_type"]) == {"text", "image"}
    assert len(bench.queries) > 0 and bench.qrels["doc_id"].isin(["report", "outlook"]).all()
    assert load_benchmark(bench.root).fingerprint == bench.fingerprint
