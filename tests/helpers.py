"""Helpers shared by test modules (imported as `helpers`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from vldocir.tracking import NullTracker

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "conf"


def run_py(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repository root, in the current environment (plus ``env``)."""
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "HYDRA_FULL_ERROR": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


MINI_DIR = REPO_ROOT / "data" / "vl-docir-mini"


def mini_subset(dest: Path, doc_ids: list[str], *, corrupt_page: str | None = None, name: str = "mini-subset") -> Path:
    """A benchmark of some of the shipped mini's documents, page images inline as bytes.

    Keeps the queries whose evidence lies entirely in ``doc_ids``. ``corrupt_page`` gets a
    truncated JPEG instead of its image (a page that fails to decode).
    """
    import pyarrow.compute as pc

    from vldocir.data.benchmark import load_benchmark, write_benchmark

    mini = load_benchmark(MINI_DIR)
    docs = mini.arrow("documents").filter(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))
    pages = mini.arrow("pages").filter(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))
    images = []
    for page_id, image in zip(pages.column("page_id").to_pylist(), pages.column("image").to_pylist()):
        data = (MINI_DIR / image["path"]).read_bytes()
        images.append({"bytes": data[: len(data) // 3] if page_id == corrupt_page else data, "path": None})
    pages = pages.set_column(pages.schema.get_field_index("image"), "image", pa.array(images, pages.schema.field("image").type))
    elements = mini.arrow("elements").filter(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))
    qrels = mini.arrow("qrels")
    outside = set(qrels.filter(pc.invert(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))).column("query_id").to_pylist())
    keep = [q for q in set(qrels.column("query_id").to_pylist()) if q not in outside]
    queries = mini.arrow("queries").filter(pc.is_in(pc.field("query_id"), pa.array(keep)))
    qrels = qrels.filter(pc.is_in(pc.field("query_id"), pa.array(keep)))
    tables = {"documents": docs, "pages": pages, "elements": elements, "queries": queries, "qrels": qrels}
    write_benchmark(dest, tables, {"name": name, "version": "test"})
    return dest


def tiny_overrides(name: str, tiny: dict[str, Path]) -> list[str]:
    """What a user with a local copy of the checkpoint would set, plus CPU-friendly sizes."""
    over = [f"retriever={name}", f"retriever.model.encoder.checkpoint.local_path={tiny[name]}",
            "retriever.model.encoder.dtype=float32", "retriever.model.progress=false"]
    if name == "colqwen25":
        over.append("retriever.model.encoder.processor_kwargs.max_num_visual_tokens=64")
    if name == "gme_qwen2vl":
        over += ["retriever.model.encoder.min_visual_tokens=4", "retriever.model.encoder.max_visual_tokens=64"]
    return over


def compose_cfg(*overrides: str, config_dir: Path = CONFIG_DIR, keep_hydra: bool = False):
    """The job config `python run.py <overrides>` would run, with Hydra's global config set (for
    ``${hydra:...}``). ``keep_hydra`` keeps the ``hydra`` node (launcher, sweep dirs) that Hydra
    removes before calling the task; ``config_dir`` composes another copy of ``conf/``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    if not keep_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


class Evaluation(NamedTuple):
    """What one in-process evaluation made: ``metrics.json``'s content, the job's manifest (as the
    pipeline handed it to the tracker: on a reused entry it says so, unlike the entry's own
    manifest file) and the store entry the job's report names."""

    metrics: dict
    manifest: dict | None
    entry: Path | None


class RecordingTracker:
    """Passes everything on to ``tracker`` (``logger=none``'s by default), keeping the manifest the
    pipeline hands it (what W&B would receive)."""

    def __init__(self, tracker=None):
        self.tracker = tracker if tracker is not None else NullTracker()
        self.manifest: dict | None = None

    def start(self, manifest):
        self.tracker.start(manifest)

    def log_results(self, metrics, structure_table, manifest=None):
        self.manifest = json.loads(json.dumps(manifest, default=str))
        self.tracker.log_results(metrics, structure_table, manifest=manifest)

    def finish(self, failed):
        self.tracker.finish(failed=failed)


class _Tee(io.TextIOBase):
    def __init__(self, out):
        self.out, self.seen = out, io.StringIO()

    def write(self, text):
        self.out.write(text)
        return self.seen.write(text)

    def flush(self):
        self.out.flush()


def evaluate(*overrides: str, tracker=None) -> Evaluation:
    """Run the pipeline in process as `python run.py <overrides>` does (compose, ``run_stage``, the
    tracker always finished), minus process start-up. What it prints still reaches stdout (and
    ``capsys``). ``tracker``: another tracker than ``logger=none``'s."""
    from vldocir.pipeline import run_stage

    cfg = compose_cfg(*overrides)
    recorder = RecordingTracker(tracker)
    tee = _Tee(sys.stdout)
    failed = True
    try:
        with contextlib.redirect_stdout(tee):
            metrics = run_stage(cfg, recorder)
        failed = False
    finally:
        recorder.finish(failed=failed)
    found = re.search(r"^Run directory: (\S+)", tee.seen.getvalue(), re.M)
    return Evaluation(metrics, recorder.manifest, Path(found.group(1)) if found else None)


def newest_entry(results_dir, benchmark: str, retriever: str, setting: str) -> Path:
    """The most recently published store entry of (benchmark, retriever, setting)."""
    from vldocir import store

    index = store.list_runs(results_dir)
    rows = index[(index.benchmark == benchmark) & (index.retriever == retriever) & (index.setting == setting)]
    assert len(rows), f"no entry for {benchmark}/{retriever}/{setting} in {results_dir}"
    return Path(rows.iloc[-1].path)
