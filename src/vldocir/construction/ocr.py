"""OCR text of page images with Tesseract (pytesseract): the input of the OCR baselines.

Results are cached per image content (and Tesseract version, language and options), so a rerun,
or a second benchmark sharing pages, never OCRs a page twice. Pages are processed in parallel
threads: each call runs a separate ``tesseract`` process, so threads use every core.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from vldocir.errors import MissingDependencyError, VldocirError
from vldocir.io import atomic_write_text


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


def ocr_pages(images: Sequence[Path], cache_dir: Path, config: OcrConfig = OcrConfig()) -> list[str]:
    """OCR text for each image, in order; cached under ``cache_dir/ocr/``.

    An image that cannot be read raises an error naming its path, after every other page's text
    has been cached (a rerun then only redoes the failures).
    """
    pytesseract = _tesseract(config)
    version = str(pytesseract.get_tesseract_version())
    options = f"--psm {config.psm} scale={config.scale}"
    store = Path(cache_dir) / "ocr"

    def one(path: Path) -> str:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"{version}|{config.lang}|{options}|".encode())
        digest.update(Path(path).read_bytes())
        key = digest.hexdigest()
        cached = store / key[:2] / f"{key}.txt"
        if cached.is_file():
            return cached.read_text()
        from PIL import Image

        with Image.open(path) as image:
            if config.scale != 1.0:
                size = (max(1, round(image.width * config.scale)), max(1, round(image.height * config.scale)))
                image = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
            text = pytesseract.image_to_string(image, lang=config.lang, config=f"--psm {config.psm}")
        text = " ".join(text.split())
        atomic_write_text(text, cached)
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
