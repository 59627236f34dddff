"""Tesseract OCR of page images, cached by content."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image, ImageDraw, ImageFont

from vldocir.construction.ocr import OcrConfig, ocr_pages, prepare_page, write_entry

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
    with pytest.raises(RuntimeError, match=r"broken\.png"):
        ocr_pages([good, bad], tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "ocr").rglob("*.json"))) == 1


def _lines(path, lines, size=(1400, 900)):
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((40, 40 + 70 * row), line, fill="black", font=ImageFont.load_default(size=40))
    image.save(path)
    return path


def _count_processes(monkeypatch):
    """Record the number of pages each Tesseract process is given."""
    from vldocir.construction import ocr

    sizes, real = [], ocr._run_tesseract

    def counted(command, images, config):
        sizes.append(len(images))
        return real(command, images, config)

    monkeypatch.setattr(ocr, "_run_tesseract", counted)
    return sizes


def test_text_and_cache_key_are_those_of_pytesseract_on_the_resized_page(tmp_path):
    """The oracle: the previous implementation, pytesseract on the page resized with Lanczos. Equal
    text and an equal key keep every OCR cache made before valid."""
    import hashlib

    pytesseract = pytest.importorskip("pytesseract")
    page = _lines(tmp_path / "p.png", ["Board of Directors 2024", "Proposal 3: ratify the auditor", "Votes 1,234,567"])
    (text,) = ocr_pages([page], tmp_path / "cache", OcrConfig(workers=1))
    with Image.open(page) as image:
        resized = image.convert("RGB").resize((700, 450), Image.Resampling.LANCZOS)
    expected = " ".join(pytesseract.image_to_string(resized, lang="eng", config="--psm 3").split())
    assert text == expected and "Directors" in text
    assert prepare_page(page, 0.5).tobytes() == resized.tobytes()  # Tesseract reads the very same pixels
    old_key = hashlib.blake2b(
        f"{pytesseract.get_tesseract_version()}|eng|--psm 3 scale=0.5|".encode() + page.read_bytes(), digest_size=16
    ).hexdigest()
    (entry,) = (tmp_path / "cache" / "ocr").rglob("*.json")
    assert entry.name == f"{old_key}.json"


def test_pages_share_a_process_and_keep_their_own_text(tmp_path, monkeypatch):
    pages = [
        _lines(tmp_path / f"{i}.png", [f"Section {i}", word]) for i, word in enumerate(["alpha", "bravo", "delta"])
    ]
    alone = [ocr_pages([p], tmp_path / f"alone-{i}", OcrConfig(workers=1))[0] for i, p in enumerate(pages)]
    sizes = _count_processes(monkeypatch)
    assert ocr_pages(pages, tmp_path / "together", OcrConfig(workers=1)) == alone
    assert sizes == [3]  # one process read the three pages
    assert [t.split()[-1] for t in alone] == ["alpha", "bravo", "delta"]
    sizes.clear()
    ocr_pages(pages, tmp_path / "two", OcrConfig(workers=2))
    assert sorted(sizes) == [1, 2]  # split so that both workers have pages


def test_workers_default_to_the_cores_the_job_holds(tmp_path, monkeypatch):
    pages = [_lines(tmp_path / f"{i}.png", [f"Item {i}"]) for i in range(4)]
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    sizes = _count_processes(monkeypatch)
    ocr_pages(pages, tmp_path / "cache")
    assert sizes == [4]  # one core: one worker, one process for the four pages


def test_a_blank_page_is_empty_text_without_tesseract(tmp_path, monkeypatch):
    blank = tmp_path / "blank.png"
    Image.new("RGB", (2000, 4000), (250, 250, 250)).save(blank)
    sizes = _count_processes(monkeypatch)
    assert ocr_pages([blank], tmp_path / "cache", OcrConfig(workers=1)) == [""]
    assert sizes == []
    assert len(list((tmp_path / "cache" / "ocr").rglob("*.json"))) == 1  # cached like any page


def test_a_page_that_breaks_its_process_is_named_and_the_others_are_kept(tmp_path, monkeypatch):
    from vldocir.construction import ocr

    pages = [_lines(tmp_path / f"{i}.png", [f"Line {i}"]) for i in range(3)]
    broken = _lines(tmp_path / "broken.png", ["Line broken"], size=(1402, 900))
    real = ocr._run_tesseract

    def fails_on_the_broken_page(command, images, config):
        if any(image.width == 701 for image in images):
            raise ocr.OcrError("tesseract exited with status 1: simulated")
        return real(command, images, config)

    monkeypatch.setattr(ocr, "_run_tesseract", fails_on_the_broken_page)
    with pytest.raises(ocr.OcrError, match=r"1 page image\(s\).*broken\.png: tesseract exited with status 1"):
        ocr_pages([pages[0], broken, pages[1], pages[2]], tmp_path / "cache", OcrConfig(workers=1))
    assert len(list((tmp_path / "cache" / "ocr").rglob("*.json"))) == 3
