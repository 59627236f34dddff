"""Tesseract OCR of page images, cached by content."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image, ImageDraw, ImageFont

from vldocir.construction.ocr import OcrConfig, ocr_pages, write_entry

pytestmark = pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="needs the tesseract binary (apt-get install tesseract-ocr)"
)


def _page(path, text):
    image = Image.new("RGB", (1000, 400), "white")
    ImageDraw.Draw(image).text((40, 150), text, fill="black", font=ImageFont.load_default(size=48))
    image.save(path)
    return path


def test_ocr_reads_the_text_and_caches_it(tmp_path):
    pages = [_page(tmp_path / "a.png", "Population 12345"), _page(tmp_path / "b.png", "Quarterly revenue")]
    texts = ocr_pages(pages, tmp_path / "cache", OcrConfig(workers=2))
    assert "12345" in texts[0] and "Population" in texts[0]
    assert "revenue" in texts[1]
    cached = list((tmp_path / "cache" / "ocr").rglob("*.json"))
    assert len(cached) == 2
    for entry in cached:  # a second call reads these entries instead of running Tesseract
        write_entry(entry, json.loads(entry.read_text())["key"], "from the cache")
    assert ocr_pages(pages, tmp_path / "cache") == ["from the cache", "from the cache"]


def test_unreadable_image_is_named_and_the_rest_is_kept(tmp_path):
    good = _page(tmp_path / "good.png", "Board members 11")
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(RuntimeError, match="broken.png"):
        ocr_pages([good, bad], tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "ocr").rglob("*.json"))) == 1
