"""Many documents with one browser: :func:`render_batch` (resumable, failures recorded and
survived) and its :class:`BatchReport`."""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from vldocir.construction.render.config import RenderConfig
from vldocir.construction.render.layout import LAYOUT_FILE
from vldocir.construction.render.renderer import Renderer

log = logging.getLogger(__name__)

FAILURES_FILE = "failures.jsonl"


@dataclass
class BatchReport:
    """What one :func:`render_batch` call did."""

    rendered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Documents whose ``layout.json`` already existed (not rendered again)."""
    failed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """doc_id -> ``"ErrorType: message"`` for the failed documents (also in failures.jsonl)."""
    pages: dict[str, int] = field(default_factory=dict)
    """doc_id -> number of pages, for rendered and skipped documents."""
    pages_rendered: int = 0
    wall_s: float = 0.0
    browser_launches: int = 0

    @property
    def n_pages(self) -> int:
        return sum(self.pages.values())


def _record_failure(out_dir: Path, doc_id: str, source: str, html_path: Path, exc: BaseException, elapsed: float) -> None:
    entry = {
        "doc_id": doc_id,
        "source": source,
        "html_path": str(html_path),
        "error_type": type(exc).__name__,
        "error": str(exc).strip().splitlines()[0][:2000] if str(exc).strip() else repr(exc),
        "elapsed_s": round(elapsed, 3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / FAILURES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def render_batch(
    docs: Iterable[tuple[str, str, str | Path]],
    out_dir: str | Path,
    config: RenderConfig | None = None,
    *,
    progress: bool = True,
    renderer: Renderer | None = None,
) -> BatchReport:
    """Render ``(doc_id, source, html_path)`` documents into ``out_dir`` with one browser.

    Resumable: a document whose ``out_dir/<doc_id>/layout.json`` exists is skipped. A document that
    fails (timeout, navigation error, browser crash, ...) is appended to ``out_dir/failures.jsonl``
    (one JSON object per line: doc_id, source, html_path, error_type, error, elapsed_s, time) and
    the batch goes on; a crashed or killed browser is relaunched. Pass ``renderer`` to reuse an open
    :class:`Renderer` (its config is then used).
    """
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = list(docs)
    report = BatchReport()
    t0 = time.monotonic()
    own = renderer is None
    renderer = renderer or Renderer(config)
    doc_bar = tqdm(total=len(docs), desc="documents", unit="doc", disable=not progress, position=0)
    page_bar = tqdm(desc="pages", unit="page", disable=not progress, position=1)
    launches0 = renderer.launches
    try:
        for doc_id, source, html_path in docs:
            html_path = Path(html_path)
            layout = out_dir / doc_id / LAYOUT_FILE
            if layout.exists():
                try:
                    report.pages[doc_id] = int(json.loads(layout.read_text())["n_pages"])
                    report.skipped.append(doc_id)
                    doc_bar.update(1)
                    continue
                except (ValueError, KeyError, OSError) as exc:
                    log.warning("%s: unreadable %s (%s); rendering again", doc_id, layout, exc)
            started = time.monotonic()
            try:
                doc = renderer.render(doc_id, source, html_path, out_dir)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                elapsed = time.monotonic() - started
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log.warning("%s failed after %.1f s: %s: %s", doc_id, elapsed, type(exc).__name__, msg)
                log.debug("%s", traceback.format_exc())
                _record_failure(out_dir, doc_id, source, html_path, exc, elapsed)
                report.failed.append(doc_id)
                report.errors[doc_id] = f"{type(exc).__name__}: {msg}"
            else:
                report.rendered.append(doc_id)
                report.pages[doc_id] = len(doc.pages)
                report.pages_rendered += len(doc.pages)
                page_bar.update(len(doc.pages))
            doc_bar.update(1)
            doc_bar.set_postfix(failed=len(report.failed), refresh=False)
    finally:
        doc_bar.close()
        page_bar.close()
        report.browser_launches = renderer.launches - launches0
        if own:
            renderer.close()
    report.wall_s = round(time.monotonic() - t0, 3)
    return report
