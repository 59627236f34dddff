"""The build's parallel stages over document shards (``build.shards=N``): render + paginate,
rasterize PDFs and OCR as one submitit job array of N tasks, before the one-process assembly.

Task ``i`` takes the documents with ``shard_of(doc_id, N) == i`` (a hash of the id, never its place
in a list) and does what the one-process build would do to them, into the same content-keyed
places: :func:`~vldocir.construction.render.render_batch` into the build's work dir,
:func:`~vldocir.construction.pdf.rasterize_pdfs` into ``cache_dir/pdf/``,
:func:`~vldocir.construction.ocr.ocr_pages` into ``cache_dir/ocr/``. The build then runs its usual
one-process code, which finds every document rendered and every page OCRed: its output, and so its
fingerprint, is the one-process build's whatever the shard count or the order the tasks finish in.

A task is single-flight (the lease ``build/<work key>/shard-<i>-of-<N>``, :mod:`vldocir.leases`)
and resumable: documents rendered and pages OCRed by a killed task are reused (those caches are
per document and per page). A finished shard writes a done marker,
``<work dir>/shards/shard-<i>-of-<N>.done.json``, keyed by everything its work depends on and
checksummed, listing the artifacts it made; a marker that verifies (and whose artifacts are still
there) lets a rerun skip the shard without submitting it. While it works, each task keeps a status
file beside it (``shard-<i>-of-<N>.json``: pid, host, job, stage, documents and pages done, pages
OCRed and found in the cache).

How the array runs follows the composed ``hydra.launcher`` (:func:`executor_settings`): the
submitit plugin's ``submitit_local`` runs the tasks as local processes, its ``submitit_slurm`` and
``conf/hydra/launcher/slurm_*.yaml`` as a SLURM job array; Hydra's basic launcher runs them one
after another in the build's own process. A task's CPU share is ``hydra.launcher.cpus_per_task``
when set (its render workers, PDF workers and Tesseract processes), else the cores it may use
(:func:`vldocir.threads.job_cpus`).

What a task is sent (submitit pickles it) is :class:`ShardWork`: paths, document ids and the render,
PDF and OCR settings. The query stage, which may hold a model server's key, stays in the driver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vldocir.construction.ocr import PAGES_PER_PROCESS, OcrConfig, cache_key, entry_path, ocr_pages, read_entry
from vldocir.construction.pdf import PdfConfig, rasterize_pdfs
from vldocir.construction.render import RenderConfig, load_layout, render_batch
from vldocir.construction.render.layout import LAYOUT_FILE
from vldocir.errors import ConfigError, VldocirError
from vldocir.io import atomic_write_text, file_digest
from vldocir.leases import LEASES_DIR, Leases, job_id
from vldocir.threads import job_cpus

log = logging.getLogger(__name__)

SHARDS_DIR = "shards"
"""Where, under the build's work dir, the shards keep their status files and done markers."""
MARKER_VERSION = 1
RENDER_DOCUMENTS_PER_WORKER = 20
"""Documents a task renders per Chromium worker between two updates of its status file."""


class ShardError(VldocirError, RuntimeError):
    """A shard's task failed or was killed; the message names it, its log, and says to rerun."""


def shard_of(doc_id: str, n_shards: int) -> int:
    """The shard of ``doc_id`` among ``n_shards``: from a hash of the id alone (BLAKE2b, stable across
    runs, machines and Python versions), so adding or reordering documents moves no other one."""
    digest = hashlib.blake2b(doc_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


def executor_settings(launcher: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """How the array of the composed ``hydra.launcher`` node (resolved, as a dict) runs:
    ``(cluster, init, parameters)`` for ``submitit.AutoExecutor(folder, cluster=cluster, **init)``
    and its ``update_parameters(**parameters)``, mapped as the submitit plugin maps a sweep's
    (its shared keys as they are, the others prefixed by the cluster; ``max_num_timeout`` at init);
    ``cluster`` is ``"inline"`` for Hydra's basic launcher (the tasks run in this process). A shard
    is one process: ``nodes`` and ``tasks_per_node`` are 1 whatever the launcher says (the
    node-per-job ``slurm_node`` launcher would otherwise run each shard once per GPU)."""
    target = str(launcher.get("_target_", ""))
    kind = target.rsplit(".", 1)[-1]
    if kind == "BasicLauncher":
        return "inline", {}, {}
    cluster = {"LocalLauncher": "local", "SlurmLauncher": "slurm"}.get(kind)
    if cluster is None:
        raise ConfigError(
            f"build.shards>1 runs its tasks through hydra/launcher=basic, submitit_local, submitit_slurm or a "
            f"conf/hydra/launcher/slurm_* file; this launcher is {target or 'unknown'}"
        )
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf  # (lazy: the plugin's shared keys)

    shared = {f.name for f in dataclasses.fields(BaseQueueConf)}
    params = {k: v for k, v in launcher.items() if k not in ("_target_", "submitit_folder")}
    init = {f"{cluster}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
    parameters = {k if k in shared else f"{cluster}_{k}": v for k, v in params.items()}
    parameters.update(nodes=1, tasks_per_node=1)
    return cluster, init, parameters


@dataclass
class ShardWork:
    """What every task of one sharded build needs (pickled for submitit: no secret in it).

    ``html``: ``(doc_id, source, html_path)`` of the HTML documents, rendered into
    ``work_dir/rendered``; ``pdfs``: ``(doc_id, pdf_path)``, rasterized into ``cache_dir/pdf``;
    ``ocr``: ``None`` when the build makes no OCR text; ``ocr_version``: the Tesseract version the
    driver's OCR keys use (a task on a node with another one stops, rather than cache pages the
    driver would not find); ``cpus``: a task's CPU share (``None``: :func:`job_cpus`)."""

    n_shards: int
    cache_dir: Path
    work_dir: Path
    html: list[tuple[str, str, Path]]
    pdfs: list[tuple[str, Path]]
    render: RenderConfig
    pdf: PdfConfig | None
    ocr: OcrConfig | None
    ocr_version: str | None
    leases: dict[str, Any] = field(default_factory=dict)
    cpus: int | None = None
    pdf_digests: dict[str, str] = field(default_factory=dict)

    def documents(self, index: int) -> tuple[list[tuple[str, str, Path]], list[tuple[str, Path]]]:
        """Shard ``index``'s HTML documents and PDFs."""
        return (
            [d for d in self.html if shard_of(d[0], self.n_shards) == index],
            [d for d in self.pdfs if shard_of(d[0], self.n_shards) == index],
        )

    def name(self, index: int) -> str:
        return f"shard-{index}-of-{self.n_shards}"

    def unit(self, index: int) -> str:
        """The lease that makes shard ``index`` single-flight."""
        return f"build/{self.work_dir.name}/{self.name(index)}"

    def status_path(self, index: int) -> Path:
        return self.work_dir / SHARDS_DIR / f"{self.name(index)}.json"

    def marker_path(self, index: int) -> Path:
        return self.work_dir / SHARDS_DIR / f"{self.name(index)}.done.json"

    def key(self, index: int) -> str:
        """What shard ``index``'s work depends on: the work dir (keyed by the HTML and the render
        settings), its documents, the PDFs' bytes and page settings, and the OCR's cache-key settings."""
        from vldocir.cache import content_key

        html, pdfs = self.documents(index)
        ocr = None if self.ocr is None else [self.ocr_version, self.ocr.lang, self.ocr.psm, self.ocr.scale]
        return content_key(
            {
                "version": MARKER_VERSION,
                "work": self.work_dir.name,
                "shard": [index, self.n_shards],
                "html": [(doc_id, source) for doc_id, source, _ in html],
                "pdfs": [(doc_id, self.pdf_digests.get(doc_id)) for doc_id, _ in pdfs],
                "pdf": {**self.pdf.page_settings(), "ocr": self.pdf.ocr} if pdfs else None,
                "ocr": ocr,
            }
        )

    def finished(self, index: int) -> dict | None:
        """The summary in shard ``index``'s done marker when the marker verifies (its checksum, its
        key, every artifact it lists still there); ``None`` otherwise."""
        path = self.marker_path(index)
        try:
            record = json.loads(path.read_text())
            body = record["body"]
            if record["sha256"] != _digest(body) or body["key"] != self.key(index):
                return None
            if not all((self.cache_dir / p).exists() for p in body["artifacts"]):
                return None
            return body["summary"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("%s: unreadable done marker (%s); the shard is run again", path, error)
            return None


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _Status:
    """A task's status file, rewritten (atomically) at each step."""

    def __init__(self, work: ShardWork, index: int, n_documents: int):
        self.path = work.status_path(index)
        self.record: dict[str, Any] = {
            "shard": index,
            "of": work.n_shards,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "job": job_id(),
            "started": time.time(),
            "stage": "start",
            "documents": {"total": n_documents, "rendered": 0, "reused": 0, "failed": 0, "ocr_done": 0},
            "pages": {"total": 0, "ocred": 0, "from_cache": 0},
        }

    def update(self, **changes: Any) -> None:
        for key, value in changes.items():
            if isinstance(value, dict):
                self.record[key].update(value)
            else:
                self.record[key] = value
        self.record["updated"] = time.time()
        atomic_write_text(json.dumps(self.record, indent=1), self.path)


def _capped(workers: int | None, cpus: int) -> int:
    return min(workers or cpus, cpus)


class ShardTask:
    """The task of one shard, as submitit runs it; a preempted or timed-out SLURM task is requeued
    (``checkpoint``) and resumes from the caches."""

    def __call__(self, work: ShardWork, index: int) -> dict:
        return run_shard(work, index)

    def checkpoint(self, work: ShardWork, index: int):
        import submitit

        return submitit.helpers.DelayedSubmission(self, work, index)


def run_shard(work: ShardWork, index: int) -> dict:
    """Render, rasterize and OCR shard ``index`` of ``work`` (module doc); returns its summary."""
    html, pdfs = work.documents(index)
    leases = Leases(work.cache_dir / LEASES_DIR, **work.leases)
    with leases.single_flight(work.unit(index), lambda: work.finished(index) is not None) as lease:
        if lease is None:  # finished by an earlier run or a concurrent build (whose status file stays)
            return {**work.finished(index), "state": "done earlier"}
        status = _Status(work, index, len(html) + len(pdfs))  # (only the lease's holder writes it)
        return _run_shard(work, index, html, pdfs, status)


def _run_shard(work: ShardWork, index: int, html, pdfs, status: _Status) -> dict:
    cpus = work.cpus or job_cpus()
    artifacts: list[Path] = []
    pages: list[Path] = []
    documents: dict[str, int] = {}  # doc_id -> pages, in the order of ``pages``
    status.update()
    summary = {"shard": index, "documents": len(html) + len(pdfs), "rendered": 0, "render_reused": 0, "failed": 0}
    if html:
        status.update(stage="render")
        render = dataclasses.replace(work.render, workers=_capped(work.render.workers, cpus))
        failed: set[str] = set()
        chunk = render.workers * RENDER_DOCUMENTS_PER_WORKER
        for start in range(0, len(html), chunk):
            report = render_batch(html[start : start + chunk], work.work_dir / "rendered", render, progress=False)
            summary["rendered"] += len(report.rendered)
            summary["render_reused"] += len(report.skipped)
            failed.update(report.failed)
            status.update(
                documents={"rendered": summary["rendered"], "reused": summary["render_reused"], "failed": len(failed)}
            )
        summary["failed"] = len(failed)
        for doc_id, _, _ in html:
            if doc_id in failed:
                continue
            layout = load_layout(work.work_dir / "rendered" / doc_id)
            documents[doc_id] = len(layout.pages)
            pages += [layout.page_path(p.page_index) for p in layout.pages]
            artifacts.append(layout.directory / LAYOUT_FILE)
    if pdfs:
        status.update(stage="pdf")
        pdf = dataclasses.replace(work.pdf, workers=_capped(work.pdf.workers, cpus))
        pdf_report = rasterize_pdfs(pdfs, work.cache_dir / "pdf", pdf)
        summary["failed"] += len(pdf_report.failed)
        for doc_id, _ in pdfs:
            document = pdf_report.documents.get(doc_id)
            if document is not None:
                # pdf.ocr=false: the pages with a text layer are not OCRed (ingest.py decides the same)
                to_ocr = [p for p in document.pages if work.pdf.ocr or not p.text.strip()]
                documents[doc_id] = len(to_ocr)
                pages += [document.image_path(p.page_index) for p in to_ocr]
                artifacts.append(document.directory)
    status.update(documents={"failed": summary["failed"]}, pages={"total": len(pages)})
    ocred = from_cache = 0
    if work.ocr is not None and pages:
        status.update(stage="ocr")
        ocr = dataclasses.replace(work.ocr, workers=_capped(work.ocr.workers, cpus))
        _check_version(work, ocr)
        chunk = ocr.workers * PAGES_PER_PROCESS  # one round of Tesseract processes between status updates
        for start in range(0, len(pages), chunk):
            batch = pages[start : start + chunk]
            keys = [cache_key(p.read_bytes(), work.ocr_version, ocr) for p in batch]
            cached = sum(read_entry(entry_path(work.cache_dir, k), k) is not None for k in keys)
            ocr_pages(batch, work.cache_dir, ocr)
            artifacts += [entry_path(work.cache_dir, k) for k in keys]
            ocred, from_cache = ocred + len(batch) - cached, from_cache + cached
            ends = itertools.accumulate(documents.values())  # a document is done once its last page is
            status.update(
                pages={"ocred": ocred, "from_cache": from_cache},
                documents={"ocr_done": sum(end <= start + len(batch) for end in ends)},
            )
    summary.update(pages=len(pages), ocred=ocred, ocr_from_cache=from_cache)
    body = {
        "key": work.key(index),
        "documents": documents,
        "artifacts": sorted({str(p.relative_to(work.cache_dir)) for p in artifacts}),
        "summary": {k: summary[k] for k in ("shard", "documents", "pages", "failed")},
    }
    atomic_write_text(json.dumps({"body": body, "sha256": _digest(body)}), work.marker_path(index))
    status.update(stage="done", documents={"ocr_done": len(documents)})
    return {**summary, "state": "computed"}


def _check_version(work: ShardWork, ocr: OcrConfig) -> None:
    from vldocir.construction.ocr import _tesseract

    version = _tesseract(ocr)[1]
    if version != work.ocr_version:
        raise ShardError(
            f"Tesseract {version} here ({socket.gethostname()}) but {work.ocr_version} where the build started: "
            "the OCR cache keys would differ; give every node the same Tesseract"
        )


@dataclass
class ShardedStages:
    """The driver's step (``build.shards=N``, N > 1) that the builds call before their own render
    (:func:`~vldocir.construction.ingest.build_from_html`,
    :func:`~vldocir.construction.build_generated.build_rendered_benchmark`): submits the unfinished
    shards as one job array, waits, and returns the summary that goes into ``built_by.shards``.

    ``launcher``: the composed ``hydra.launcher`` node, resolved (:func:`executor_settings`);
    ``folder``: where submitit keeps the tasks' pickles and logs (``%j``: the job id); ``leases``:
    the config's ``leases`` node (:class:`~vldocir.leases.Leases` arguments)."""

    n_shards: int
    launcher: dict[str, Any]
    folder: Path
    leases: dict[str, Any] = field(default_factory=dict)
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.n_shards, bool) or not isinstance(self.n_shards, int) or self.n_shards < 1:
            raise ConfigError(f"build.shards must be a positive integer, got {self.n_shards!r}")
        self.cluster, self.init, self.parameters = executor_settings(self.launcher)

    def __call__(
        self,
        cache_dir: Path,
        work_dir: Path,
        html: list[tuple[str, str, Path]],
        pdfs: list[tuple[str, Path]],
        render: RenderConfig,
        pdf: PdfConfig | None,
        ocr: OcrConfig | None,
    ) -> dict:
        started = time.monotonic()
        version = None
        if ocr is not None:
            from vldocir.construction.ocr import _tesseract

            version = _tesseract(ocr)[1]
        work = ShardWork(
            self.n_shards,
            Path(cache_dir),
            Path(work_dir),
            [(d, s, Path(p)) for d, s, p in html],
            [(d, Path(p)) for d, p in pdfs],
            render,
            pdf,
            ocr,
            version,
            dict(self.leases),
            self.parameters.get("cpus_per_task"),
            {doc_id: file_digest(path) for doc_id, path in pdfs},
        )
        shards, todo = {}, []
        for index in range(self.n_shards):
            docs = sum(len(part) for part in work.documents(index))
            done = work.finished(index) if docs else None
            if not docs:
                shards[index] = {"shard": index, "documents": 0, "pages": 0, "state": "empty"}
            elif done is not None:
                shards[index] = {**done, "state": "done earlier"}
            else:
                todo.append(index)
        if todo:
            log.info("%d of %d shard(s) to build (%s)", len(todo), self.n_shards, self.cluster)
            shards.update(self._run(work, todo))
        return {
            "n": self.n_shards,
            "launcher": self.cluster,
            "cpus_per_task": work.cpus,
            "wall_s": round(time.monotonic() - started, 3),
            "shards": [shards[i] for i in range(self.n_shards)],
        }

    def _run(self, work: ShardWork, todo: list[int]) -> dict[int, dict]:
        if self.cluster == "inline":
            results = {}
            for index in todo:
                try:
                    results[index] = ShardTask()(work, index)
                except (VldocirError, OSError) as error:
                    raise ShardError(f"{work.name(index)} failed: {error}; rerun the same command to resume") from error
            return results
        import submitit

        executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.cluster, **self.init)
        executor.update_parameters(**self.parameters)
        jobs = executor.map_array(ShardTask(), [work] * len(todo), todo)
        shard_of_job = {job.job_id: index for job, index in zip(jobs, todo, strict=True)}
        log.info("submitted %d shard task(s): job %s, logs in %s", len(jobs), jobs[0].job_id, self.folder)
        results, failures = {}, []
        try:
            for job in submitit.helpers.as_completed(jobs, poll_frequency=self.poll_s):
                index = shard_of_job[job.job_id]
                error = job.exception()
                if error is None:
                    results[index] = job.result()
                    continue
                failures.append(_failure(work, index, job, error))
                log.error("%s", failures[-1])
        except BaseException:  # an interrupt (Ctrl-C, SIGTERM): the tasks stop with the build
            for job in jobs:
                if not job.done():
                    job.cancel(check=False)
            raise
        if failures:
            raise ShardError(f"{'; '.join(failures)}; rerun the same command to resume (finished work is kept)")
        return results


def _failure(work: ShardWork, index: int, job, error: BaseException) -> str:
    """One line: which shard, why, where its log is."""
    from submitit.core.utils import FailedJobError

    reason = f"its task stopped without a result (state {job.state})"
    if isinstance(error, FailedJobError):  # its message holds the task's traceback between two rules of dashes
        parts = re.split(r"^-{10,}$", str(error), flags=re.MULTILINE)
        lines = [line.strip() for line in (parts[1] if len(parts) > 2 else "").splitlines() if line.strip()]
        if lines:
            reason = re.sub(r"^[\w.]+\.(\w+: )", r"\1", lines[-1])  # vldocir.x.OcrError: ... -> OcrError: ...
    return f"{work.name(index)} (job {job.job_id}) failed: {reason}; its log: {job.paths.stderr}"


def shards_line(summary: dict) -> str:
    """One line of ``built_by.shards`` for the build's report."""
    shards = summary["shards"]
    states = {s: sum(1 for e in shards if e["state"] == s) for s in ("computed", "done earlier", "empty")}
    ocred = sum(e.get("ocred", 0) for e in shards)
    cached = sum(e.get("ocr_from_cache", 0) for e in shards)
    return (
        f"shards: {summary['n']} ({summary['launcher']}): {states['computed']} built, {states['done earlier']} "
        f"done earlier, {states['empty']} empty; {sum(e['documents'] for e in shards)} documents, "
        f"{sum(e['pages'] for e in shards)} pages ({ocred} OCRed, {cached} from the cache) in {summary['wall_s']:.1f} s"
    )
