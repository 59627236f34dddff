"""OCR text of page images with Tesseract (pytesseract): the input of the OCR baselines.

Results are cached per image content (and Tesseract version, language and options), so a rerun,
or a second benchmark sharing pages, never OCRs a page twice. Pages are processed in parallel
threads: each call runs a separate ``tesseract`` process, so threads use every core.

A cache entry, ``ocr/<key[:2]>/<key>.json``, is ``{"key", "text", "sha256"}``: the key it was made
for and the SHA-256 of its text. Every read checks both (an entry is a few hundred bytes), so an
entry that was changed, cut short, swapped with another or copied from another key is found; it is
logged, naming the file, and the page is OCR'd again (the entry rewritten).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from vldocir.errors import MissingDependencyError, VldocirError
from vldocir.io import atomic_write_text

log = logging.getLogger(__name__)


class OcrError(VldocirError, RuntimeError):
    """Tesseract failed on some page images; the message lists the first of them with the reason."""


INSTALL_HINT = "install Tesseract: apt-get install tesseract-ocr (or set ocr.tesseract_cmd to its binary)"


@dataclass
class OcrConfig:
    lang: str = "eng"
    psm: int = 3  # Tesseract page segmentation: fully automatic, no OSD
    scale: float = 0.5
    """Resize pages by this factor before OCR. Pages are rendered at device scale 2, so half size
    still gives Tesseract text of its preferred height and reads the same words faster."""
    workers: int | None = None  # default: one per core
    tesseract_cmd: str | None = None


def _tesseract(config: OcrConfig):
    try:
        import pytesseract
    except ImportError as error:
        raise MissingDependencyError(
            f"OCR needs pytesseract: uv sync (or pip install pytesseract); and {INSTALL_HINT}"
        ) from error
    command = config.tesseract_cmd or shutil.which("tesseract")
    if not command:
        raise MissingDependencyError(f"Tesseract was not found on PATH: {INSTALL_HINT}")
    pytesseract.pytesseract.tesseract_cmd = command
    return pytesseract


def entry_path(cache_dir: Path, key: str) -> Path:
    """Where the OCR text of ``key`` is cached under ``cache_dir``."""
    return Path(cache_dir) / "ocr" / key[:2] / f"{key}.json"


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_entry(path: Path, key: str, text: str) -> None:
    """Cache ``text`` as the OCR of ``key`` at ``path`` (atomically)."""
    atomic_write_text(json.dumps({"key": key, "text": text, "sha256": _text_digest(text)}), path)


def read_entry(path: Path, key: str) -> str | None:
    """The cached text of ``key`` at ``path``; ``None`` when there is none or it does not verify
    (logged, naming the file: the caller OCRs the page again)."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        text = record["text"]
        if record["key"] != key:
            problem = f"holds the OCR of another image or setting (key {record['key']!r})"
        elif not isinstance(text, str) or record["sha256"] != _text_digest(text):
            problem = "does not match its checksum"
        else:
            return text
    except (OSError, ValueError, KeyError, TypeError) as error:  # (JSON and UTF-8 errors are ValueErrors)
        problem = f"is unreadable ({type(error).__name__}: {error})"
    log.warning("%s: damaged OCR cache entry (%s); the page is OCR'd again", path, problem)
    return None


def ocr_pages(images: Sequence[Path], cache_dir: Path, config: OcrConfig = OcrConfig()) -> list[str]:
    """OCR text for each image, in order; cached under ``cache_dir/ocr/``.

    An image that cannot be read raises an error naming its path, after every other page's text
    has been cached (a rerun then only redoes the failures).
    """
    pytesseract = _tesseract(config)
    version = str(pytesseract.get_tesseract_version())
    options = f"--psm {config.psm} scale={config.scale}"

    def one(path: Path) -> str:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"{version}|{config.lang}|{options}|".encode())
        digest.update(Path(path).read_bytes())
        key = digest.hexdigest()
        cached = entry_path(cache_dir, key)
        text = read_entry(cached, key)
        if text is not None:
            return text
        from PIL import Image

        with Image.open(path) as image:
            if config.scale != 1.0:
                size = (max(1, round(image.width * config.scale)), max(1, round(image.height * config.scale)))
                image = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
            text = pytesseract.image_to_string(image, lang=config.lang, config=f"--psm {config.psm}")
        text = " ".join(text.split())
        write_entry(cached, key, text)
        return text

    # One Tesseract thread per process: parallelism comes from running several processes at once.
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    workers = config.workers or os.cpu_count() or 1
    results: list[str | None] = [None] * len(images)
    failures: list[tuple[Path, Exception]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool, tqdm(total=len(images), desc="OCR pages", unit="page") as bar:
        futures = {pool.submit(one, Path(p)): i for i, p in enumerate(images)}
        for future, i in futures.items():
            try:
                results[i] = future.result()
            except Exception as error:  # keep going: every other page is still OCRed and cached
                failures.append((Path(images[i]), error))
            bar.update()
    if failures:
        listed = "; ".join(f"{p}: {e}" for p, e in failures[:5])
        raise OcrError(
            f"OCR failed for {len(failures)} page image(s) (the others are cached; a rerun retries these): {listed}"
        )
    return results  # type: ignore[return-value]
