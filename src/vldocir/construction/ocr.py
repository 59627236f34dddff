"""OCR text of page images with Tesseract: the input of the OCR baselines.

Results are cached per image content (and Tesseract version, language and options), so a rerun,
or a second benchmark sharing pages, never OCRs a page twice.

How a page is read, and what that costs (``perf/bench_build.py`` measures it; figures in
``perf/README.md``): the page is decoded, resized by ``scale`` with Lanczos in RGB, and handed to
``tesseract`` on its standard input as an uncompressed image, several pages to one process
(:data:`PAGES_PER_PROCESS`, a multi-page TIFF whose texts come back separated by form feeds). Each
process runs one Tesseract thread (``OMP_THREAD_LIMIT=1``: more threads cost more CPU for no gain),
and one process runs per core the job holds (:func:`vldocir.threads.job_cpus`: the affinity mask,
capped by ``SLURM_CPUS_PER_TASK``). Tesseract sees exactly the pixels it saw when this module went
through pytesseract (a PNG written to a temporary file), so the text is unchanged and so is the
cache key; what is saved is the PNG encoding and decoding, a model load per page and Tesseract's
paragraph pass on the text (:data:`SPEED_OPTIONS`). A page of one colour (blank padding) has no text
and is not OCR'd. Tesseract's own time is about 90% of a page's cost, and two thirds of that is its
LSTM recognizing the lines, which no option tried lowers without changing the text: cropping to the
content and collapsing white bands cost Tesseract the same time (and move its layout analysis);
grey input, ``tessedit_do_invert=0``, table finding off, page segmentation modes 4 and 6 change the
text for a few percent or less of time; a smaller scale loses words (see ``perf/README.md``).

A cache entry, ``ocr/<key[:2]>/<key>.json``, is ``{"key", "text", "sha256"}``: the key it was made
for and the SHA-256 of its text. Every read checks both (an entry is a few hundred bytes), so an
entry that was changed, cut short, swapped with another or copied from another key is found; it is
logged, naming the file, and the page is OCR'd again (the entry rewritten).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tqdm.auto import tqdm

from vldocir.errors import MissingDependencyError, VldocirError
from vldocir.io import atomic_write_text
from vldocir.subprocesses import end_with_parent
from vldocir.threads import job_cpus

log = logging.getLogger(__name__)


class OcrError(VldocirError, RuntimeError):
    """Tesseract failed on some page images; the message lists the first of them with the reason."""


INSTALL_HINT = "install Tesseract: apt-get install tesseract-ocr (or set ocr.tesseract_cmd to its binary)"

PAGES_PER_PROCESS = 8
"""Pages one ``tesseract`` process reads (fewer when that would leave a core idle): each start
loads the language model again, about 0.1 CPU-s."""

SPEED_OPTIONS = ("-c", "paragraph_text_based=0")
"""Tesseract options that save time and leave the text as it was, so they are not part of the cache
key: paragraphs are found before recognition rather than after it (about 5% of Tesseract's time).
Paragraphs decide only where the text breaks lines, and :func:`ocr_pages` folds every run of
whitespace into one space. Measured identical on every real page of ``perf/bench_build.py``."""

PAGE_SEPARATOR = "\f"  # Tesseract's default ``page_separator``, written between the pages of one input


@dataclass
class OcrConfig:
    lang: str = "eng"
    psm: int = 3  # Tesseract page segmentation: fully automatic, no OSD
    scale: float = 0.5
    """Resize pages by this factor before OCR. Pages are rendered at device scale 2, so half size
    still gives Tesseract text of its preferred height and reads the same words faster."""
    workers: int | None = None  # Tesseract processes at once; default: one per core the job holds
    tesseract_cmd: str | None = None


@lru_cache(maxsize=8)
def _tesseract_version(command: str) -> str:
    """The version ``command --version`` prints (``5.3.0``), part of every cache key."""
    try:
        done = subprocess.run(
            [command, "--version"], capture_output=True, text=True, timeout=60, preexec_fn=end_with_parent()
        )
    except OSError as error:
        raise MissingDependencyError(f"Tesseract ({command}) cannot be run ({error}): {INSTALL_HINT}") from error
    words = (done.stdout or done.stderr).split()
    if done.returncode != 0 or len(words) < 2 or words[0].lower() != "tesseract":
        raise MissingDependencyError(f"{command} --version does not print a Tesseract version: {INSTALL_HINT}")
    return words[1]


def _tesseract(config: OcrConfig) -> tuple[str, str]:
    """The Tesseract binary to run and its version."""
    command = config.tesseract_cmd or shutil.which("tesseract")
    if not command:
        raise MissingDependencyError(f"Tesseract was not found on PATH: {INSTALL_HINT}")
    return command, _tesseract_version(command)


def tesseract_version(config: OcrConfig) -> str:
    """The version of the Tesseract ``config`` runs (part of every OCR cache key)."""
    return _tesseract(config)[1]


def cache_key(image_bytes: bytes, version: str, config: OcrConfig) -> str:
    """The cache key of the OCR of an image file's bytes: everything that decides its text."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{version}|{config.lang}|--psm {config.psm} scale={config.scale}|".encode())
    digest.update(image_bytes)
    return digest.hexdigest()


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


def prepare_page(path: Path, scale: float):
    """The image Tesseract reads for the page at ``path`` (RGB, resized by ``scale`` with Lanczos),
    or ``None`` when the page is of one colour and so has no text."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
    if all(low == high for low, high in image.getextrema()):
        return None
    if scale != 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    return image


class _Processes:
    """The ``tesseract`` processes of one :func:`ocr_pages` call (all its threads): started under a
    lock, and once :meth:`stop` has run (an interrupt), killed and never started again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopped = False

    def start(self, args: list[str], env: dict) -> subprocess.Popen:
        with self.lock:
            if self.stopped:
                raise OcrError("interrupted")
            process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                preexec_fn=end_with_parent(),  # killed with this process, even by SIGKILL
            )
            self.running.add(process)
            return process

    def done(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.running.discard(process)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for process in self.running:
                if process.poll() is None:
                    process.kill()


_THIS_CALL = threading.local()
"""``processes``: the :class:`_Processes` of the :func:`ocr_pages` call a worker thread works for."""


def _run_tesseract(command: str, images: list, config: OcrConfig) -> list[str]:
    """One ``tesseract`` process over ``images`` (PIL RGB images): their texts, whitespace folded."""
    processes = getattr(_THIS_CALL, "processes", None) or _Processes()
    buffer = io.BytesIO()
    if len(images) == 1:
        images[0].save(buffer, format="PPM")
    else:  # uncompressed: encoding costs nothing and Tesseract reads the very same pixels
        images[0].save(buffer, format="TIFF", save_all=True, append_images=images[1:])
    process = processes.start(
        [command, "stdin", "stdout", "-l", config.lang, "--psm", str(config.psm), *SPEED_OPTIONS],
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},  # parallelism comes from running several processes
    )
    with process:
        try:
            stdout, stderr = process.communicate(buffer.getvalue())
        finally:
            processes.done(process)
    if process.returncode != 0:
        reason = stderr.decode(errors="replace").strip().splitlines()
        raise OcrError(f"tesseract exited with status {process.returncode}: {reason[-1] if reason else 'no message'}")
    texts = stdout.decode(errors="replace").split(PAGE_SEPARATOR)
    if len(texts) != len(images):
        raise OcrError(f"tesseract returned {len(texts)} page texts for {len(images)} pages")
    return [" ".join(text.split()) for text in texts]


def ocr_pages(
    images: Sequence[Path],
    cache_dir: Path,
    config: OcrConfig | None = None,
    on_done: Callable[[list[int], bool], None] | None = None,
) -> list[str]:
    """OCR text for each image, in order; cached under ``cache_dir/ocr/``; ``config`` defaults to
    ``OcrConfig()``. ``on_done(indices, from_cache)``: called once with the indices of the images
    found in the cache (``from_cache=True``), then with those of each batch of images OCRed as it
    ends (a sharded build's status file; failed pages are not passed).

    An image that cannot be read raises an error naming its path, after every other page's text
    has been cached (a rerun then only redoes the failures).
    """
    config = OcrConfig() if config is None else config
    command, version = _tesseract(config)
    paths = [Path(p) for p in images]
    results: list[str | None] = [None] * len(paths)
    failures: dict[int, Exception] = {}
    todo: list[tuple[int, str]] = []  # (index, key) of the pages not cached
    for i, path in enumerate(paths):
        try:
            key = cache_key(path.read_bytes(), version, config)
        except OSError as error:
            failures[i] = error
            continue
        results[i] = read_entry(entry_path(cache_dir, key), key)
        if results[i] is None:
            todo.append((i, key))

    if on_done is not None:
        on_done([i for i, text in enumerate(results) if text is not None], True)
    processes = _Processes()

    def store(i: int, key: str, text: str) -> None:
        write_entry(entry_path(cache_dir, key), key, text)
        results[i] = text

    def ocr_batch(batch: list[tuple[int, str]]) -> None:
        _THIS_CALL.processes = processes
        prepared = []
        for i, key in batch:
            try:
                image = prepare_page(paths[i], config.scale)
            except Exception as error:  # an unreadable image fails alone; its batch goes on
                failures[i] = error
                continue
            if image is None:
                store(i, key, "")
            else:
                prepared.append((i, key, image))
        if not prepared:
            return
        try:
            texts = _run_tesseract(command, [image for _, _, image in prepared], config)
        except OcrError:
            if len(prepared) == 1:
                raise
            texts = []  # one page broke the process: each page alone, so the failure is named
            for i, _key, image in prepared:
                try:
                    texts.append(_run_tesseract(command, [image], config)[0])
                except OcrError as error:
                    failures[i] = error
                    texts.append(None)
        for (i, key, _), text in zip(prepared, texts, strict=True):
            if text is not None:
                store(i, key, text)

    workers = config.workers or job_cpus()
    # Batches of at most PAGES_PER_PROCESS pages, as many as a whole number of rounds of the workers
    # needs: each worker gets pages and the last round is not one worker alone.
    n_batches = workers * -(-len(todo) // (workers * PAGES_PER_PROCESS))
    per_process = max(1, -(-len(todo) // max(1, n_batches)))
    batches = [todo[start : start + per_process] for start in range(0, len(todo), per_process)]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        with tqdm(total=len(todo), desc="OCR pages", unit="page") as bar:
            futures = {pool.submit(ocr_batch, batch): batch for batch in batches}
            for future in as_completed(futures):
                batch = futures[future]
                try:
                    future.result()
                except Exception as error:  # keep going: every other page is still OCRed and cached
                    failures.update({i: error for i, _ in batch if results[i] is None and i not in failures})
                bar.update(len(batch))
                if on_done is not None:
                    on_done([i for i, _ in batch if results[i] is not None], False)
    except BaseException:  # an interrupt (Ctrl-C, SIGTERM): no batch starts, the running ones are killed
        pool.shutdown(wait=False, cancel_futures=True)
        processes.stop()
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)
    if failures:
        listed = "; ".join(f"{paths[i]}: {failures[i]}" for i in sorted(failures)[:5])
        raise OcrError(
            f"OCR failed for {len(failures)} page image(s) (the others are cached; a rerun retries these): {listed}"
        )
    return results  # type: ignore[return-value]


def ocr_where_needed(
    images: Sequence[Path], cache_dir: Path, config: OcrConfig | None, not_needed: Sequence[str | None]
) -> list[str | None]:
    """:func:`ocr_pages` for the images whose ``not_needed`` entry is ``None``; ``None`` (no OCR text)
    for the others, whose entry says why they are not OCRed (``spec.ocr=false``, a PDF page whose
    text layer is its text with ``pdf.ocr=false``: :func:`vldocir.construction.build_report.ocr_coverage`)."""
    if len(images) != len(not_needed):
        raise ValueError(f"{len(images)} images but {len(not_needed)} OCR decisions")
    todo = [i for i, why in enumerate(not_needed) if why is None]
    texts: list[str | None] = [None] * len(images)
    if todo:
        for i, text in zip(todo, ocr_pages([images[i] for i in todo], cache_dir, config), strict=True):
            texts[i] = text
    return texts
