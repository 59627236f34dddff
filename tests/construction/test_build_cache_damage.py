"""The build's caches (OCR entries, rendered documents) vouch for what they hold: every damage is
found and repaired to exactly what a clean build has, never used.

Damages, for each file of each cache: a flipped byte in the middle, truncation, deletion, swapped
ids, an entry copied over another, a stale file of another key. The references are built once per
module; each case damages a copy and runs the cache's reader (``ocr_pages``, ``render_batch``) in
process.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from helpers import CHROMIUM, NO_CHROMIUM_REASON, needs_chromium
from vldocir.cache import CorruptArtifactError
from vldocir.construction.ocr import OcrConfig, ocr_pages, read_entry
from vldocir.construction.render import LAYOUT_FILE, RenderConfig, Renderer, load_layout, render_batch
from vldocir.construction.render.layout import check_rendered
from vldocir.io import file_digest

DAMAGES = ["flipped byte", "truncated", "deleted", "swapped ids", "entry copied over it", "stale file of another key"]


def flip_middle(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # an ASCII digit or letter stays one: JSON still parses
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# -- OCR cache --------------------------------------------------------------------------------------

OCR = OcrConfig(workers=1)


def _page(path: Path, text: str) -> Path:
    image = Image.new("RGB", (800, 200), "white")
    ImageDraw.Draw(image).text((30, 70), text, fill="black", font=ImageFont.load_default(size=44))
    image.save(path)
    return path


@pytest.fixture(scope="module")
def ocr_reference(tmp_path_factory):
    """Two page images, their OCR texts, the clean cache, and the entry of page a made with other
    options (another key)."""
    if shutil.which("tesseract") is None:
        pytest.skip("needs the tesseract binary (apt-get install tesseract-ocr)")
    root = tmp_path_factory.mktemp("ocr")
    pages = [_page(root / "a.png", "Population 12345"), _page(root / "b.png", "Quarterly revenue 678")]
    texts = ocr_pages(pages, root / "clean", OCR)
    assert texts[0] != texts[1] and "12345" in texts[0]
    ocr_pages(pages[:1], root / "other", OcrConfig(workers=1, psm=6))
    (other,) = (root / "other" / "ocr").rglob("*.json")
    by_text = {
        json.loads(p.read_text())["text"]: p.relative_to(root / "clean") for p in (root / "clean").rglob("*.json")
    }
    return pages, texts, root / "clean", [by_text[t] for t in texts], other


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_ocr_entry_is_ocred_again_to_the_clean_text(ocr_reference, damage, tmp_path, caplog):
    pages, texts, clean, (entry_a, entry_b), other = ocr_reference
    cache = tmp_path / "cache"
    shutil.copytree(clean, cache)
    a, b = cache / entry_a, cache / entry_b
    if damage == "flipped byte":
        flip_middle(a)
    elif damage == "truncated":
        truncate(a)
    elif damage == "deleted":
        a.unlink()
    elif damage == "swapped ids":  # the two pages' entries exchanged
        a_bytes = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(a_bytes)
    elif damage == "entry copied over it":
        shutil.copyfile(b, a)
    else:
        shutil.copyfile(other, a)

    with caplog.at_level(logging.WARNING, logger="vldocir.construction.ocr"):
        assert ocr_pages(pages, cache, OCR) == texts
    if damage != "deleted":
        assert f"{a}: damaged OCR cache entry" in caplog.text, "the damaged file is named"
    for entry in (a, b):  # repaired: the next read takes them as they are
        assert read_entry(entry, json.loads(entry.read_text())["key"]) is not None
    assert {p.relative_to(cache) for p in cache.rglob("*.json")} == {entry_a, entry_b}


# -- rendered documents ------------------------------------------------------------------------------

FILES = [LAYOUT_FILE, "page-000.png", "page-001.png"]


def _html(path: Path, word: str) -> Path:
    """A document of two 2000x4000 pages."""
    paragraphs = "\n".join(f"<p>{word} paragraph {i}: {'text ' * 30}</p>" for i in range(40))
    path.write_text(f"<html><body style='font-size:20px'><h1>{word}</h1>{paragraphs}</body></html>")
    return path


def _content(doc_dir: Path) -> tuple:
    """What a build takes from a rendering: pages (without timings), elements, image bytes."""
    doc = load_layout(doc_dir, full=True)
    images = {p.image: (doc_dir / p.image).read_bytes() for p in doc.pages}
    return doc.doc_id, doc.pages, doc.elements, images


CONFIG = RenderConfig(workers=1, timeout_s=60)


@pytest.fixture(scope="module")
def render_reference(tmp_path_factory):
    """Documents a and b rendered clean, and a rendered with other settings (another key)."""
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM_REASON)
    root = tmp_path_factory.mktemp("render")
    docs = [("a", "generic", _html(root / "a.html", "Alpha")), ("b", "generic", _html(root / "b.html", "Beta"))]
    report = render_batch(docs, root / "clean", CONFIG, progress=False)
    assert report.rendered == ["a", "b"] and report.pages == {"a": 2, "b": 2}, report.errors
    other = RenderConfig(workers=1, timeout_s=60, page_height=3000)
    assert render_batch(docs[:1], root / "other", other, progress=False).rendered == ["a"]
    return docs, root / "clean", root / "other", _content(root / "clean" / "a")


@pytest.fixture(scope="module")
def renderer(render_reference):
    """One browser for every case (a sync Playwright session per thread: opened after the references)."""
    with Renderer(CONFIG) as open_renderer:
        yield open_renderer


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_rendering_is_found_and_rendered_again_to_the_clean_pages(
    render_reference, renderer, damage, name, tmp_path
):
    docs, clean, other, reference = render_reference
    out = tmp_path / "rendered"
    shutil.copytree(clean, out)
    doc_dir = out / "a"
    path = doc_dir / name
    if damage == "flipped byte":
        flip_middle(path)
    elif damage == "truncated":
        truncate(path)
    elif damage == "deleted":
        path.unlink()
    elif damage == "swapped ids":
        if name == LAYOUT_FILE:  # two elements' ids exchanged, the JSON otherwise intact
            layout = json.loads(path.read_text())
            first, second = layout["elements"][0], layout["elements"][1]
            first["element_id"], second["element_id"] = second["element_id"], first["element_id"]
            path.write_text(json.dumps(layout))
        else:  # the two page images exchanged
            pages = [doc_dir / "page-000.png", doc_dir / "page-001.png"]
            data = [p.read_bytes() for p in pages]
            pages[0].write_bytes(data[1])
            pages[1].write_bytes(data[0])
    elif damage == "entry copied over it":  # the rendering of b copied over a's file
        shutil.copyfile(out / "b" / name, path)
    else:
        shutil.copyfile(other / "a" / name, path)

    key = renderer.config.output_key()
    found, problem = check_rendered(doc_dir, "a", file_digest(docs[0][2]), key)
    assert found is None, "the damage is found"
    assert problem is None if (damage, name) == ("deleted", LAYOUT_FILE) else "\n" not in problem
    if name != LAYOUT_FILE and damage in ("deleted", "truncated"):  # found by the cheap checks a build makes
        with pytest.raises(CorruptArtifactError, match=name):
            load_layout(doc_dir)

    report = render_batch(docs, out, renderer=renderer, progress=False)
    assert report.rendered == ["a"] and report.skipped == ["b"], report.errors
    assert _content(doc_dir) == reference, "rendered again: the same pages, elements and images"
    assert check_rendered(doc_dir, "a", file_digest(docs[0][2]), key)[0] is not None
