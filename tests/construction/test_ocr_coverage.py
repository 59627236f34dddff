"""Which pages a build OCRs, and the report that says so (``built_by.ocr``): ``spec.ocr=false``
turns OCR off for every input kind (``input=`` too: it used to OCR anyway, silently), and
``pdf.ocr=false`` leaves out the PDF pages whose text layer is their text, not the others."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from helpers import REPO_ROOT, make_pdf
from vldocir.apps.build import build
from vldocir.construction.build_report import PDF_TEXT_LAYER, SPEC_OCR_OFF, ocr_coverage, ocr_summary
from vldocir.data.benchmark import load_benchmark

REPORT_LINES = [["Annual report, page one", "Revenue grew by 12 percent."], ["Page two: outlook", "Demand holds."]]


def test_coverage_names_the_pages_not_ocred_as_ranges():
    import pandas as pd

    pages = pd.DataFrame({"doc_id": ["a"] * 9 + ["b"] * 2, "page_index": [*range(9), 0, 1]})
    why = [PDF_TEXT_LAYER] * 4 + [None] * 3 + [PDF_TEXT_LAYER, None] + [PDF_TEXT_LAYER] * 2
    coverage = ocr_coverage(pages, why)
    assert coverage == {
        "pages": 11,
        "ocred": 4,
        "not_ocred": {PDF_TEXT_LAYER: 7},
        "documents": {"a": {PDF_TEXT_LAYER: "0-3, 7"}, "b": {PDF_TEXT_LAYER: "all"}},
    }
    assert ocr_summary({"ocr": coverage}).splitlines() == [
        f"OCR: 4 of 11 pages; not OCRed: 7 by {PDF_TEXT_LAYER}",
        f"  a: pages 0-3, 7 not OCRed ({PDF_TEXT_LAYER})",
        f"  b: all pages not OCRed ({PDF_TEXT_LAYER})",
    ]
    assert ocr_coverage(pages, [None] * 11)["not_ocred"] == {} and ocr_summary({}) is None
    assert ocr_summary({"ocr": ocr_coverage(pages, [None] * 11)}) == "OCR: all 11 pages"


def _build(tmp_path: Path, rows: list[dict], *overrides: str):
    (tmp_path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "build",
            overrides=[
                *(f"paths.{k}_dir={tmp_path / k}" for k in ("root", "data", "cache", "results", "log")),
                f"input={tmp_path / 'index.jsonl'}",
                f"out_dir={tmp_path / 'bench'}",
                "spec.name=ocr-coverage",
                "queries=none",
                "pdf.width=400",
                *overrides,
            ],
        )
        build(cfg)
    return load_benchmark(tmp_path / "bench")


def test_spec_ocr_false_is_honoured_with_input(tmp_path, capsys):
    """Fails before the fix: the input= build OCRed regardless, here with a Tesseract that cannot run."""
    rows = [{"doc_id": "report", "source": "sec", "path": str(make_pdf(tmp_path / "report.pdf", REPORT_LINES))}]
    bench = _build(tmp_path, rows, "spec.ocr=false", f"ocr.tesseract_cmd={tmp_path / 'no-tesseract'}")
    assert bench.pages["ocr_text"].isna().all()
    assert bench.info["built_by"]["ocr"] == {"pages": 2, "ocred": 0, "not_ocred": {SPEC_OCR_OFF: 2}, "documents": {}}
    assert f"OCR: 0 of 2 pages; not OCRed: 2 by {SPEC_OCR_OFF}" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract (apt-get install tesseract-ocr)")
def test_pdf_ocr_false_leaves_out_only_the_pages_with_a_text_layer(tmp_path, capsys):
    rows = [
        {"doc_id": "report", "source": "sec", "path": str(make_pdf(tmp_path / "report.pdf", REPORT_LINES))},
        # page 0 has text, page 1 is a picture only (a scanned page): it is still OCRed
        {"doc_id": "mixed", "source": "sec", "path": str(make_pdf(tmp_path / "mixed.pdf", [REPORT_LINES[0], []]))},
    ]
    bench = _build(tmp_path, rows, "pdf.ocr=false", "ocr.scale=1.0")
    pages = bench.pages.set_index("page_id")["ocr_text"]
    assert pages[["report-p000", "report-p001", "mixed-p000"]].isna().all()
    assert isinstance(pages["mixed-p001"], str)  # OCRed (a picture without words: little or no text)
    built = bench.info["built_by"]
    assert built["ocr"] == {
        "pages": 4,
        "ocred": 1,
        "not_ocred": {PDF_TEXT_LAYER: 3},
        "documents": {"report": {PDF_TEXT_LAYER: "all"}, "mixed": {PDF_TEXT_LAYER: "0"}},
    }
    assert built["pdf"]["ocr"] is False
    out = capsys.readouterr().out
    assert f"OCR: 1 of 4 pages; not OCRed: 3 by {PDF_TEXT_LAYER}" in out and "mixed: pages 0 not OCRed" in out
