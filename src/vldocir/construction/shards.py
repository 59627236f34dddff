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
PDF and OCR settings.

With the generated query stage (``queries=generated``), its model requests run over shards too
(:meth:`ShardedStages.queries`, after the driver has assembled the tables): the driver samples the
evidence configurations (as the stage will), then runs two job arrays of :class:`QueryShards`:
``describe``, each page's description in the shard of its page id (a page shared by configurations
of several shards is described once, so every generation request holds the one description the
driver's stage will find), then ``generate``, each configuration in the shard of its signature
(``vlm_generation.config_signature``) with the cleaning of its queries. A task calls
:meth:`~vldocir.queries.query_stage.GeneratedQueries.prefetch` (the stage's own code; with recorded
answers, its own replay server) on its part of the tables, and its answers land in the LLM cache;
the driver's stage then asks nothing (``built_by.queries.usage``: ``called`` 0) but what got no
usable answer (never cached: asked again, as by any rerun). The clients are
pickled without their key (read by name from the environment, ``api_env_var``); credentials in a
URL or in request headers are refused. A query shard's done marker is keyed by the bytes of what
its task is sent, its page images' paths, sizes and times, the recording and the prompts; a shard
with a failed or unusable answer writes none (the rerun asks again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vldocir.construction.ocr import OcrConfig, cache_key, entry_path, ocr_pages, tesseract_version
from vldocir.construction.pdf import PdfConfig, needs_ocr, rasterize_pdfs
from vldocir.construction.render import RenderConfig, load_layout, render_batch
from vldocir.construction.render.layout import LAYOUT_FILE
from vldocir.errors import ConfigError, VldocirError
from vldocir.io import atomic_write_text, file_digest
from vldocir.leases import LEASES_DIR, Leases, job_id
from vldocir.threads import job_cpus

if TYPE_CHECKING:
    import pandas as pd

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


class _Shards:
    """What a sharded step's work has in common (:class:`ShardWork`, :class:`QueryShards`): each shard's
    name, lease, status file and done marker under ``work_dir/shards``. A subclass sets ``n_shards``,
    ``cache_dir``, ``work_dir``, ``leases``, :attr:`prefix` and defines :meth:`key`, :meth:`size`,
    :meth:`run`; :meth:`part` is what task ``index`` is sent (submitit pickles it)."""

    prefix = "shard"
    what = "render, rasterize, OCR"
    n_shards: int
    cache_dir: Path
    work_dir: Path
    leases: dict[str, Any]

    def name(self, index: int) -> str:
        return f"{self.prefix}-{index}-of-{self.n_shards}"

    def unit(self, index: int) -> str:
        """The lease that makes shard ``index`` single-flight."""
        return f"build/{self.work_dir.name}/{self.name(index)}"

    def status_path(self, index: int) -> Path:
        return self.work_dir / SHARDS_DIR / f"{self.name(index)}.json"

    def marker_path(self, index: int) -> Path:
        return self.work_dir / SHARDS_DIR / f"{self.name(index)}.done.json"

    def key(self, index: int) -> str:
        raise NotImplementedError

    def size(self, index: int) -> int:
        """Shard ``index``'s items (0: an empty shard, never submitted)."""
        raise NotImplementedError

    def part(self, index: int) -> _Shards:
        return self

    def empty(self, index: int) -> dict:
        """The summary of shard ``index`` when it has nothing to do."""
        return {"shard": index}

    def run(self, index: int) -> dict:
        raise NotImplementedError

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

    def mark_done(self, index: int, summary: dict, artifacts: list[str] = (), **extra: Any) -> None:
        body = {"key": self.key(index), **extra, "artifacts": sorted(artifacts), "summary": summary}
        atomic_write_text(json.dumps({"body": body, "sha256": _digest(body)}), self.marker_path(index))


@dataclass
class ShardWork(_Shards):
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

    def size(self, index: int) -> int:
        return sum(len(part) for part in self.documents(index))

    def empty(self, index: int) -> dict:
        return {"shard": index, "documents": 0, "pages": 0}

    def run(self, index: int) -> dict:
        html, pdfs = self.documents(index)
        status = _Status(  # (only the lease's holder writes it)
            self,
            index,
            documents={"total": len(html) + len(pdfs), "rendered": 0, "reused": 0, "failed": 0, "ocr_done": 0},
            pages={"total": 0, "ocred": 0, "from_cache": 0},
        )
        return _run_shard(self, index, html, pdfs, status)

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


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _Status:
    """A task's status file, rewritten (atomically) at each step."""

    def __init__(self, work: _Shards, index: int, **counters: Any):
        self.path = work.status_path(index)
        self.record: dict[str, Any] = {
            "shard": index,
            "of": work.n_shards,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "job": job_id(),
            "started": time.time(),
            "stage": "start",
            **counters,
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

    def __call__(self, work: _Shards, index: int) -> dict:
        return run_shard(work, index)

    def checkpoint(self, work: _Shards, index: int):
        import submitit

        return submitit.helpers.DelayedSubmission(self, work, index)


def run_shard(work: _Shards, index: int) -> dict:
    """Shard ``index`` of ``work`` (its :meth:`~_Shards.run`), single-flight; returns its summary."""
    leases = Leases(work.cache_dir / LEASES_DIR, **work.leases)
    with leases.single_flight(work.unit(index), lambda: work.finished(index) is not None) as lease:
        if lease is None:  # finished by an earlier run or a concurrent build (whose status file stays)
            return {**work.finished(index), "state": "done earlier"}
        return work.run(index)


def _run_shard(work: ShardWork, index: int, html, pdfs, status: _Status) -> dict:
    cpus = work.cpus or job_cpus()
    artifacts: list[Path] = []
    pages: list[Path] = []  # the pages to OCR
    n_pages = 0  # every page of the shard's documents
    documents: dict[str, int] = {}  # doc_id -> its pages to OCR, in the order of ``pages``
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
            n_pages += len(layout.pages)
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
                n_pages += document.n_pages
                to_ocr = [p for p in document.pages if needs_ocr(p, work.pdf)]  # (ingest.py decides the same)
                documents[doc_id] = len(to_ocr)
                pages += [document.image_path(p.page_index) for p in to_ocr]
                artifacts.append(document.directory)
    if work.ocr is None:  # spec.ocr=false: no page is OCRed
        pages, documents = [], dict.fromkeys(documents, 0)
    status.update(documents={"failed": summary["failed"]}, pages={"total": len(pages)})
    counts = {"ocred": 0, "from_cache": 0}
    if work.ocr is not None and pages:
        status.update(stage="ocr")
        ocr = dataclasses.replace(work.ocr, workers=_capped(work.ocr.workers, cpus))
        _check_version(work, ocr)
        page_doc = [doc for doc, n in documents.items() for _ in range(n)]
        left = dict(documents)  # doc_id -> its pages not OCRed yet

        def progress(done: list[int], from_cache: bool) -> None:  # called by ocr_pages as its batches end
            counts["from_cache" if from_cache else "ocred"] += len(done)
            for i in done:
                left[page_doc[i]] -= 1
            status.update(pages=dict(counts), documents={"ocr_done": sum(n <= 0 for n in left.values())})

        ocr_pages(pages, work.cache_dir, ocr, on_done=progress)
        artifacts += [entry_path(work.cache_dir, cache_key(p.read_bytes(), work.ocr_version, ocr)) for p in pages]
    summary.update(pages=n_pages, to_ocr=len(pages), ocred=counts["ocred"], ocr_from_cache=counts["from_cache"])
    work.mark_done(
        index,
        {k: summary[k] for k in ("shard", "documents", "pages", "to_ocr", "failed")},
        list({str(p.relative_to(work.cache_dir)) for p in artifacts}),
        documents=documents,
    )
    status.update(stage="done", documents={"ocr_done": len(documents)})
    return {**summary, "state": "computed"}


def _check_version(work: ShardWork, ocr: OcrConfig) -> None:
    version = tesseract_version(ocr)
    if version != work.ocr_version:
        raise ShardError(
            f"Tesseract {version} here ({socket.gethostname()}) but {work.ocr_version} where the build started: "
            "the OCR cache keys would differ; give every node the same Tesseract"
        )


QUERY_STEPS = ("describe", "generate")
"""The query stage's two job arrays: the page descriptions (a page per shard, by its id), then
per configuration (by its signature) the generation and the cleaning of its queries."""


@dataclass
class QueryShards(_Shards):
    """The model requests of the query stage (:class:`~vldocir.queries.query_stage.GeneratedQueries`)
    over shards, one ``step`` of :data:`QUERY_STEPS`. ``items``: shard -> its page ids (describe) or
    its configurations (generate, a frame of them); ``stage``: the stage without its encoder
    (:meth:`~vldocir.queries.query_stage.GeneratedQueries.for_requests`; its clients pickle without
    a key). :meth:`part` is what task ``i`` is sent: its items and the rows of the tables (documents,
    elements) and page images they need, no more."""

    step: str
    n_shards: int
    cache_dir: Path
    work_dir: Path
    stage: Any
    near_max_gap: int
    items: dict[int, Any]
    documents: Any  # pd.DataFrame (generate) or None
    elements: Any
    images: dict[str, Any]
    leases: dict[str, Any] = field(default_factory=dict)
    whole: bool = True

    @property
    def prefix(self) -> str:
        return f"queries-{self.step}"

    @property
    def what(self) -> str:
        return f"queries, {self.step}"

    def size(self, index: int) -> int:
        return len(self.items.get(index, ()))

    def empty(self, index: int) -> dict:
        return {"shard": index, "items": 0}

    def _pages(self, index: int) -> list[str]:
        from vldocir.data.evidence import page_id

        items = self.items.get(index, ())
        if self.step == "describe":
            return list(items)
        return list(
            dict.fromkeys(
                page_id(d, p)
                for docs, indices in zip(items["doc_ids"], items["page_indices"], strict=True)
                for d, p in zip(docs, indices, strict=True)
            )
        )

    def part(self, index: int) -> QueryShards:
        if not self.whole:
            return self
        items = self.items.get(index, ())
        documents = elements = None
        if self.step == "generate" and len(items):
            docs = {str(d) for ids in items["doc_ids"] for d in ids}
            documents = self.documents[self.documents["doc_id"].isin(docs)]
            elements = self.elements[self.elements["doc_id"].isin(docs)]
        images = {p: self.images[p] for p in self._pages(index) if p in self.images}
        return dataclasses.replace(
            self, items={index: items}, documents=documents, elements=elements, images=images, whole=False
        )

    def key(self, index: int) -> str:
        """What the shard's requests depend on: its items and table rows, the clients' cache settings
        (not the servers: an answer does not depend on which one gave it), the generation and cleaning
        settings, its page images (path, size, time), the recording and the prompts."""
        part, stage = self.part(index), self.stage

        def rows(frame) -> str | None:
            return None if frame is None else frame.to_json(orient="split", default_handler=str)

        items = part.items[index]
        described = {
            "version": MARKER_VERSION,
            "step": self.step,
            "shard": [index, self.n_shards],
            "clients": [c.cache_params() for c in stage.clients()],
            "cache_dirs": [str(c.cache_dir) for c in stage.clients()],
            "generation": dataclasses.asdict(stage.generation),
            "cleaning": dataclasses.asdict(stage.cleaning),
            "near_max_gap": self.near_max_gap,
            "items": list(items) if self.step == "describe" else rows(items),
            "documents": rows(part.documents),
            "elements": rows(part.elements),
            "images": {
                p: (str(v), *_stat(v)) if isinstance(v, (str, Path)) else _sha256(v) for p, v in part.images.items()
            },
            "recorded": stage.recorded and file_digest(Path(stage.recorded)),
            "prompts": _prompts_digest(),
        }
        return _sha256(json.dumps(described, sort_keys=True, default=str).encode())

    def run(self, index: int) -> dict:
        part = self.part(index)
        n = part.size(index)
        status = _Status(part, index, step=part.step, items=n, usage={})
        status.update(stage=part.step)
        items = part.items[index]
        usage = part.stage.for_requests().prefetch(  # (its own clients: their usage is this task's)
            part.documents,
            part.elements,
            part.images,
            part.near_max_gap,
            configs=items if part.step == "generate" else None,
            page_ids=items if part.step == "describe" else None,
        )
        summary = {
            "shard": index,
            "items": n,
            "asked": sum(u["called"] for u in usage.values()),
            "from_cache": sum(u["cached"] for u in usage.values()),
            "failed": sum(u["failed"] + sum(u["unusable"].values()) for u in usage.values()),
        }
        if not summary["failed"]:  # a failed or unusable answer is asked again by the next run (not cached)
            part.mark_done(index, summary)
        status.update(stage="done", usage=usage)
        return {**summary, "state": "computed"}


def _stage_clients(stage: Any) -> list:
    """Every client the stage holds (the judge too, pickled with it even when cleaning is off)."""
    return [c for c in (stage.describer, stage.generator, stage.judge) if c is not None]


def _no_secret_sent(clients: list) -> None:
    """The tasks get the clients pickled: a key must come from the environment (``api_env_var``),
    not from ``base_url`` or ``params`` (headers), which would be written into submitit's folder."""
    from vldocir.manifest import redact_secrets, url_secrets

    for client in clients:
        if any(url_secrets(url) for url in client.base_urls) or redact_secrets(client.params, []) != client.params:
            raise ConfigError(
                "build.shards>1 sends the query stage's LLM clients to its tasks (pickled by submitit), but "
                "queries.llm.base_url or a client's params hold credentials; give the key through the environment "
                f"variable named by queries.llm.api_env_var ({client.api_env_var}) instead"
            )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stat(path: str | Path) -> tuple[int, int]:
    try:
        stat = Path(path).stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)


def _prompts_digest() -> str:
    from importlib import resources

    digest = hashlib.sha256()
    prompts = resources.files("vldocir.queries").joinpath("prompts")
    stack = [prompts]
    while stack:
        for entry in sorted(stack.pop().iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                stack.append(entry)
            elif entry.name.endswith(".md"):
                digest.update(entry.name.encode() + entry.read_bytes())
    return digest.hexdigest()


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
        self.executor = self._executor() if self.cluster != "inline" else None  # (a cluster it cannot use: now)
        if self.cluster == "inline" and self.n_shards > 1:
            log.warning(
                "build.shards=%d with Hydra's basic launcher: the shards run one after another in this process; "
                "hydra/launcher=submitit_local (or slurm_cpu) runs them at once",
                self.n_shards,
            )

    def _executor(self):
        """The submitit executor of the launcher; a launcher it cannot use is one line, before any work."""
        import submitit

        try:
            executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.cluster, **self.init)
            executor.update_parameters(**self.parameters)
        except (RuntimeError, ValueError, TypeError, AssertionError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"build.shards: the {self.cluster} launcher cannot run the shards: {first}") from None
        return executor

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
            version = tesseract_version(ocr)
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
        return {**self.run(work), "wall_s": round(time.monotonic() - started, 3)}

    def run(self, work: _Shards) -> dict:
        """Run the unfinished, non-empty shards of ``work`` as one job array and wait; the summary:
        ``n``, ``launcher``, ``cpus_per_task`` and one entry per shard (its ``state``: computed,
        done earlier, empty)."""
        started = time.monotonic()
        shards, todo = {}, []
        for index in range(work.n_shards):
            size = work.size(index)
            done = work.finished(index) if size else None
            if not size:
                shards[index] = {**work.empty(index), "state": "empty"}
            elif done is not None:
                shards[index] = {**done, "state": "done earlier"}
            else:
                todo.append(index)
        if todo:
            log.info("%s: %d of %d shard(s) to run (%s)", work.what, len(todo), work.n_shards, self.cluster)
            shards.update(self._run(work, todo))
        return {
            "n": work.n_shards,
            "launcher": self.cluster,
            "cpus_per_task": self.parameters.get("cpus_per_task"),
            "wall_s": round(time.monotonic() - started, 3),
            "shards": [shards[i] for i in range(work.n_shards)],
        }

    def check_queries(self, stage: Any) -> None:
        """Before any work (:func:`vldocir.apps.build.build`): a query stage whose requests the tasks
        would make must send them no secret and must cache its answers (the driver reads them there)."""
        if not callable(getattr(stage, "prefetch", None)) or stage.recorded:
            return
        clients = _stage_clients(stage)
        _no_secret_sent(clients)
        if any(c.cache_dir is None for c in clients):
            raise ConfigError(
                "build.shards>1 makes the query stage's model requests in its tasks and reads the answers from the "
                "LLM cache: set queries.llm.cache_dir (null keeps no answer)"
            )

    def queries(
        self,
        stage: Any,
        cache_dir: Path,
        work_dir: Path,
        documents: pd.DataFrame,
        pages: pd.DataFrame,
        elements: pd.DataFrame,
        images: dict[str, Any],
        near_max_gap: int,
    ) -> dict | None:
        """The query stage's model requests over shards (:data:`QUERY_STEPS`, two job arrays), before
        the build's own query stage, which then finds every answer in the LLM cache; ``None`` for a
        stage that makes no model request (``queries=file``, ``none``: no ``prefetch``). The stage's
        arguments are the build's; returns the summary for ``built_by.shards["queries"]``."""
        if not callable(getattr(stage, "prefetch", None)):
            return None
        self.check_queries(stage)
        from vldocir.queries.vlm_generation import config_signature

        started = time.monotonic()
        configs = stage.sample(documents, pages, elements, near_max_gap)
        signatures = [
            config_signature(s, list(zip(d, p, strict=True)))
            for s, d, p in zip(configs["structure"], configs["doc_ids"], configs["page_indices"], strict=True)
        ]
        shard = [shard_of(signature, self.n_shards) for signature in signatures]
        config_items = {i: configs.loc[[s == i for s in shard]] for i in range(self.n_shards)}
        common = dict(
            n_shards=self.n_shards,
            cache_dir=Path(cache_dir),
            work_dir=Path(work_dir),
            stage=stage.for_requests(),
            near_max_gap=near_max_gap,
            documents=documents,
            elements=elements,
            images=images,
            leases=dict(self.leases),
        )
        generate = QueryShards("generate", items=config_items, **common)
        described = [generate._pages(i) for i in range(self.n_shards)] if stage.generation.describe else []
        page_ids = list(dict.fromkeys(p for pages_of in described for p in pages_of))
        by_page = {i: [p for p in page_ids if shard_of(p, self.n_shards) == i] for i in range(self.n_shards)}
        steps = {"describe": QueryShards("describe", items=by_page, **common), "generate": generate}
        summary = {"configs": len(configs), "pages": len(page_ids)}
        for name, work in steps.items():  # the descriptions first: the generation requests hold them
            summary[name] = self.run(work)
        summary["wall_s"] = round(time.monotonic() - started, 3)
        return summary

    def _run(self, work: _Shards, todo: list[int]) -> dict[int, dict]:
        if self.cluster == "inline":
            results = {}
            for index in todo:
                try:
                    results[index] = ShardTask()(work.part(index), index)
                except (VldocirError, OSError) as error:
                    raise ShardError(f"{work.name(index)} failed: {error}; rerun the same command to resume") from error
            return results
        import submitit
        from submitit.core.utils import FailedJobError

        printed = io.StringIO()  # (submitit prints a refusing sbatch's output: it goes into the one line)
        try:
            with contextlib.redirect_stderr(printed):
                jobs = self.executor.map_array(ShardTask(), [work.part(index) for index in todo], todo)
        except (FailedJobError, OSError, RuntimeError) as error:  # sbatch refused it (partition, account, ...)
            lines = [line.strip() for line in f"{printed.getvalue()}\n{error}".splitlines() if line.strip()]
            reason = next((line for line in lines if "error" in line.lower()), lines[0] if lines else repr(error))
            raise ShardError(f"{work.what}: the {self.cluster} array could not be submitted: {reason}") from None
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


def _failure(work: _Shards, index: int, job, error: BaseException) -> str:
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
    line = (
        f"shards: {summary['n']} ({summary['launcher']}): {states['computed']} built, {states['done earlier']} "
        f"done earlier, {states['empty']} empty; {sum(e['documents'] for e in shards)} documents, "
        f"{sum(e['pages'] for e in shards)} pages ({ocred} OCRed, {cached} from the cache by the shards run now) "
        f"in {summary['wall_s']:.1f} s"
    )
    if (queries := summary.get("queries")) is not None:
        steps = []
        for step in QUERY_STEPS:
            done = [e for e in queries[step]["shards"] if e["state"] == "computed"]  # (the others' counts are old)
            asked, cached = (sum(e.get(key, 0) for e in done) for key in ("asked", "from_cache"))
            again = sum(e["state"] == "done earlier" for e in queries[step]["shards"])
            steps.append(f"{step} {asked} asked, {cached} from the cache, {again} shard(s) done earlier")
        line += (
            f"\nqueries: {queries['configs']} configurations, {queries['pages']} pages over {summary['n']} shards: "
            f"{'; '.join(steps)} in {queries['wall_s']:.1f} s"
        )
    return line
