"""Many documents: :func:`render_batch` (resumable, failures recorded and survived, several
documents at once in worker processes) and its :class:`BatchReport`. A document that renders to
nothing visible (:func:`is_blank`: an empty file, or one with no visible text and no image) is a
failed document (:data:`EMPTY_DOCUMENT`), never a blank page; its rendering stays cached."""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vldocir.cache import CorruptArtifactError, remove_stale_staging
from vldocir.construction.render.browser import kill_process_tree
from vldocir.construction.render.config import RenderConfig, RenderError
from vldocir.construction.render.layout import RenderedDocument, check_rendered, load_layout
from vldocir.construction.render.renderer import Renderer
from vldocir.io import file_digest
from vldocir.subprocesses import end_with_parent

log = logging.getLogger(__name__)

FAILURES_FILE = "failures.jsonl"

EMPTY_DOCUMENT = "EmptyDocument"
"""The error type of a document that rendered to nothing visible (:func:`is_blank`)."""
EMPTY_REASON = "no visible text and no image: the document would be a blank page"

VISIBLE_WITHOUT_TEXT = ("image", "formula")
"""Element types that show something without text (a recorded formula has text or a drawing)."""


def is_blank(doc: RenderedDocument) -> bool:
    """Whether a rendering shows nothing: no element with text and no image or formula other than
    images that failed to load (``doc.images["failed"]``)."""
    failed = {f.get("element_id") for f in doc.images.get("failed", [])}
    return not any(
        e.text.strip() or (e.element_type in VISIBLE_WITHOUT_TEXT and e.element_id not in failed) for e in doc.elements
    )


@dataclass
class BatchReport:
    """What one :func:`render_batch` call did. Document lists are in the order of the input."""

    rendered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Documents already rendered, whose rendering verified (not rendered again)."""
    failed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """doc_id -> ``"ErrorType: message"`` for the failed documents (also in failures.jsonl)."""
    pages: dict[str, int] = field(default_factory=dict)
    """doc_id -> number of pages, for rendered and skipped documents."""
    pages_rendered: int = 0
    wall_s: float = 0.0
    browser_launches: int = 0
    workers: int = 1
    """Documents rendered at once (worker processes; 1: in this process)."""

    @property
    def n_pages(self) -> int:
        return sum(self.pages.values())


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def worker_count(config: RenderConfig, n_docs: int) -> int:
    """How many documents :func:`render_batch` renders at once: ``config.workers`` (default: one
    per core), at most one per core, per ``worker_memory_mb`` of available memory and per document."""
    import psutil

    cores = available_cores()
    wanted = config.workers or cores
    by_memory = int(psutil.virtual_memory().available // (max(1, config.worker_memory_mb) * 2**20))
    return max(1, min(wanted, cores, by_memory, n_docs))


def _failure_entry(doc_id: str, source: str, html_path: Path, error_type: str, error: str, elapsed: float) -> dict:
    return {
        "doc_id": doc_id,
        "source": source,
        "html_path": str(html_path),
        "error_type": error_type,
        "error": error,
        "elapsed_s": round(elapsed, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _describe(exc: BaseException) -> tuple[str, str]:
    """``(error type, first line of the message)`` of a failure."""
    text = str(exc).strip()
    return type(exc).__name__, (text.splitlines()[0][:2000] if text else repr(exc))


def render_batch(
    docs: Iterable[tuple[str, str, str | Path]],
    out_dir: str | Path,
    config: RenderConfig | None = None,
    *,
    progress: bool = True,
    renderer: Renderer | None = None,
    verify: str = "full",
) -> BatchReport:
    """Render ``(doc_id, source, html_path)`` documents into ``out_dir``.

    Several at once: :func:`worker_count` worker processes (``config.workers``, by default one
    per core, bounded by cores and available memory), each with its own Chromium, take the
    documents one at a time, longest HTML file first; with one worker, or when ``renderer`` (an
    open :class:`Renderer`, whose config is then used) is given, they are rendered in this process.

    A document whose rendering :func:`is_blank` is failed (error type :data:`EMPTY_DOCUMENT`, in
    ``errors`` and ``failures.jsonl`` when it is rendered) and its rendering is kept: a rerun finds it
    rendered and fails it again without rendering it.

    Resumable: a document already rendered in ``out_dir/<doc_id>/`` is skipped when its rendering
    verifies (:func:`~vldocir.construction.render.layout.check_rendered`: its ``layout.json``'s
    checksum and version, its doc id, the digest of its HTML file and the key of the settings, and
    every page image, hashed with ``verify="full"`` or by size with ``"sizes"``); otherwise it is
    rendered again, the reason logged. Staging directories that killed runs left in ``out_dir`` are
    removed. A document that fails (timeout, navigation error, browser crash, a worker process that
    died, ...) leaves no files, is appended to ``out_dir/failures.jsonl`` (one JSON object per line:
    doc_id, source, html_path, error_type, error, elapsed_s, time) and the batch goes on; a crashed
    or killed browser (or worker) is replaced.
    """
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out_dir)
    config = renderer.config if renderer is not None else (config or RenderConfig())
    if verify not in ("full", "sizes"):
        raise ValueError(f"verify is 'full' or 'sizes', got {verify!r}")
    docs = [(doc_id, source, Path(html_path)) for doc_id, source, html_path in docs]
    report = BatchReport()
    t0 = time.monotonic()
    todo: list[tuple[str, str, Path]] = []
    render_key = config.output_key()
    for doc_id, source, html_path in docs:
        doc_dir = out_dir / doc_id
        html_sha256 = file_digest(html_path) if html_path.is_file() else None
        rendered, problem = check_rendered(doc_dir, doc_id, html_sha256, render_key, full=verify == "full")
        if rendered is not None:
            if is_blank(rendered):
                report.failed.append(doc_id)
                report.errors[doc_id] = f"{EMPTY_DOCUMENT}: {EMPTY_REASON}"
                continue
            report.pages[doc_id] = len(rendered.pages)
            report.skipped.append(doc_id)
            continue
        if problem is not None:
            log.warning("%s: %s; rendering it again", doc_id, problem)
        todo.append((doc_id, source, html_path))

    report.workers = 1 if renderer is not None else worker_count(config, len(todo))
    doc_bar = tqdm(
        total=len(docs), initial=len(docs) - len(todo), desc="documents", unit="doc", disable=not progress, position=0
    )
    page_bar = tqdm(desc="pages", unit="page", disable=not progress, position=1)
    failures: list[dict] = []
    done: dict[str, int] = {}
    sources = {doc_id: (source, html_path) for doc_id, source, html_path in todo}

    def finished(doc_id: str, n_pages: int | None, failure: dict | None) -> None:
        if failure is None:
            done[doc_id] = n_pages
            page_bar.update(n_pages)
            source, html_path = sources[doc_id]
            try:
                layout = load_layout(out_dir / doc_id)
            except CorruptArtifactError as error:  # what a renderer wrote cannot be read back: a failure
                failure = _failure_entry(doc_id, source, html_path, *_describe(error), 0.0)
            else:
                if is_blank(layout):
                    elapsed = layout.timings.get("total", 0.0)
                    failure = _failure_entry(doc_id, source, html_path, EMPTY_DOCUMENT, EMPTY_REASON, elapsed)
        if failure is not None:
            log.warning(
                "%s failed after %.1f s: %s: %s", doc_id, failure["elapsed_s"], failure["error_type"], failure["error"]
            )
            failures.append(failure)
            out_dir.mkdir(parents=True, exist_ok=True)
            with open(out_dir / FAILURES_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(failure) + "\n")
        doc_bar.update(1)
        doc_bar.set_postfix(failed=len(failures), refresh=False)

    try:
        if report.workers == 1:
            report.browser_launches = _render_here(todo, out_dir, config, renderer, finished)
        else:
            report.browser_launches = _render_in_workers(todo, out_dir, config, report.workers, finished)
    finally:
        doc_bar.close()
        page_bar.close()
    failed = {f["doc_id"]: f for f in failures}
    for doc_id, _, _ in todo:
        report.pages_rendered += done.get(doc_id, 0)  # work done, a blank document's page too
        if doc_id in failed:
            report.failed.append(doc_id)
            report.errors[doc_id] = f"{failed[doc_id]['error_type']}: {failed[doc_id]['error']}"
        elif doc_id in done:
            report.rendered.append(doc_id)
            report.pages[doc_id] = done[doc_id]
    report.wall_s = round(time.monotonic() - t0, 3)
    return report


def _render_here(todo, out_dir: Path, config: RenderConfig, renderer: Renderer | None, finished) -> int:
    """The documents one after the other in this process; returns the browser launches."""
    own = renderer is None
    renderer = renderer or Renderer(config)
    launches0 = renderer.launches
    try:
        for doc_id, source, html_path in todo:
            started = time.monotonic()
            try:
                doc = renderer.render(doc_id, source, html_path, out_dir)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                log.debug("%s", traceback.format_exc())
                finished(
                    doc_id, None, _failure_entry(doc_id, source, html_path, *_describe(exc), time.monotonic() - started)
                )
            else:
                finished(doc_id, len(doc.pages), None)
    finally:
        launches = renderer.launches - launches0
        if own:
            renderer.close()
    return launches


class _Worker:
    """A worker process (``python -m vldocir.construction.render._worker``) and the thread that
    reads its answers (one JSON object per line) into the shared queue ``answers``."""

    COMMAND: tuple[str, ...] = ("-m", "vldocir.construction.render._worker")
    """The worker's command line after the Python executable (tests replace it)."""

    def __init__(self, config: RenderConfig, out_dir: Path, answers: queue.Queue):
        import vldocir

        env = dict(os.environ)
        package_root = str(Path(vldocir.__file__).resolve().parents[1])  # the same vldocir as here
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, *self.COMMAND, str(out_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            bufsize=1,
            preexec_fn=end_with_parent(),  # killed with this process, even by SIGKILL
        )
        self.task: tuple[str, str, Path] | None = None
        self.started = 0.0
        self.launches = 0
        self.proc.stdin.write(json.dumps(config.to_dict()) + "\n")
        self.proc.stdin.flush()
        threading.Thread(target=self._read, args=(answers,), daemon=True).start()

    def _read(self, answers: queue.Queue) -> None:
        for line in self.proc.stdout:
            try:
                answers.put((self, json.loads(line)))
            except ValueError:
                log.warning("render worker %d: unreadable answer %r", self.proc.pid, line[:200])
        answers.put((self, None))  # end of output: the worker exited

    def send(self, task: tuple[str, str, Path] | None) -> None:
        self.task = task
        self.started = time.monotonic()
        line = json.dumps(None if task is None else [task[0], task[1], str(task[2])])
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: its end of output says so

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_process_tree(self.proc.pid)
        self.proc.wait()


def _render_in_workers(todo, out_dir: Path, config: RenderConfig, n_workers: int, finished) -> int:
    """The documents in ``n_workers`` worker processes, longest HTML first; returns the browser
    launches. A worker that dies fails its document and is replaced while documents remain."""

    def size(task) -> int:
        try:
            return task[2].stat().st_size
        except OSError:
            return 0

    pending = sorted(todo, key=size, reverse=True)
    answers: queue.Queue = queue.Queue()
    workers = [_Worker(config, out_dir, answers) for _ in range(n_workers)]
    alive = set(workers)
    launches = 0

    def next_task(w: _Worker) -> None:
        w.send(pending.pop(0) if pending else None)

    try:
        for w in workers:
            next_task(w)
        while alive:
            w, msg = answers.get()
            if msg is None:  # the worker exited
                alive.discard(w)
                code = w.proc.wait()
                launches += w.launches
                if w.task is not None:
                    doc_id, source, html_path = w.task
                    error = f"{doc_id}: the render worker exited with code {code} while rendering it"
                    finished(
                        doc_id,
                        None,
                        _failure_entry(
                            doc_id, source, html_path, RenderError.__name__, error, time.monotonic() - w.started
                        ),
                    )
                    w.task = None
                    if pending:
                        replacement = _Worker(config, out_dir, answers)
                        alive.add(replacement)
                        next_task(replacement)
                continue
            w.launches = msg.get("launches", w.launches)
            if w.task is None:
                continue
            doc_id, source, html_path = w.task
            if msg.get("doc_id") != doc_id:
                raise RuntimeError(f"render worker {w.proc.pid} answered for {msg.get('doc_id')!r}, not {doc_id!r}")
            if msg["ok"]:
                finished(doc_id, int(msg["n_pages"]), None)
            else:
                finished(
                    doc_id,
                    None,
                    _failure_entry(doc_id, source, html_path, msg["error_type"], msg["error"], float(msg["elapsed_s"])),
                )
            next_task(w)
    finally:
        for w in alive:  # only after an error or an interrupt: each worker ends when told to
            w.kill()
    return launches
