"""Rendering throughput and memory: real and generated pages, one worker and several at once.

Renders two sets of documents with ``vldocir.construction.render.render_batch``, each in a fresh
subprocess, once per worker count (``--workers``, default ``1`` and the machine's cores):

- real: the documents of ``../shared/real-html/`` (Wikipedia, arXiv by LaTeXML, an SEC proxy
  statement; read where they lie, never copied), ``--real-repeat`` times each under distinct ids
  (the same pages rendered again: a steadier figure than 33 pages give);
- generated: ``--generated`` documents per source from ``vldocir.construction.html_docs`` (seed 0
  and the mini benchmark's page ranges: the first documents of each source of the mini).

For each run it prints pages, wall seconds, CPU seconds, pages per CPU-second, pages per second
per machine core, cores busy and peak memory, and the load average of the machine:

- wall: the whole subprocess, from its start to its exit (Python start, worker processes, browser
  launches, rendering, shutdown);
- CPU: user + system seconds of the subprocess and every process below it (worker processes,
  Playwright drivers, every Chromium process, also those that ended), sampled every 0.2 s per
  process by this script from outside (its own sampling is not counted);
  ``getrusage(RUSAGE_CHILDREN)`` is printed beside it as a lower bound (Chromium processes that are
  not reaped up the tree are missing from it);
- pages per CPU-second = pages / CPU; pages/s per machine core = pages / wall / ``os.cpu_count()``
  (every core of the machine counted as ours, whatever else runs on it); cores busy = CPU / wall;
- peak memory: the largest sample of the RSS summed over the process tree (pages that Chromium's
  processes share are counted once per process), and of the PSS summed (shared pages split
  between their users), sampled every second.

PASS when the real pages reach ``--goal`` (2.0) pages per second per machine core with the most
workers; the pages-per-CPU-second figure says what an otherwise idle machine would give.

    .venv/bin/python perf/bench_render.py                       # real x3 and generated, 1 and N workers
    .venv/bin/python perf/bench_render.py --workers 2 --real-repeat 1 --generated 1   # quicker
    .venv/bin/python perf/bench_render.py --naive               # also the naive full-page capture

``--naive`` adds the comparison kept from the first version of this script: the generated set with
one browser, paginated window by window (ours) against one full-page screenshot per document
sliced with PIL (naive), each in a fresh subprocess.

This is a script, not a timed test: the figures depend on the machine and on its other load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from io import BytesIO
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))

REAL_HTML = Path(os.environ.get("VLDOCIR_REAL_HTML", REPO_ROOT.parent / "shared" / "real-html"))
REAL_SOURCES = {"wikipedia": "wikipedia", "arxiv": "arxiv", "sec": "sec", "pubmed": "pubmed"}
MINI_PAGES = {"wikipedia": (2, 8), "arxiv": (5, 15), "pubmed": (4, 12), "sec": (10, 36)}


def log(message: str = "") -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------------
# Documents


def real_documents(root: Path, repeat: int) -> list[tuple[str, str, str]]:
    """``(doc_id, source, html)`` for every folder of ``root`` with an index.html, ``repeat`` times."""
    docs = []
    for folder in sorted(p for p in root.iterdir() if (p / "index.html").is_file()):
        source = next((s for prefix, s in REAL_SOURCES.items() if folder.name.startswith(prefix)), "generic")
        for k in range(repeat):
            docs.append((f"{folder.name}-{k}" if repeat > 1 else folder.name, source, str(folder / "index.html")))
    return docs


def generated_documents(workdir: Path, per_source: int) -> list[tuple[str, str, str]]:
    from vldocir.construction.html_docs import HtmlCorpusSpec, write_corpus

    spec = HtmlCorpusSpec(seed=0, documents=dict.fromkeys(MINI_PAGES, per_source), pages=dict(MINI_PAGES))
    return [(d.doc_id, d.source, str(d.html_path)) for d in write_corpus(spec, workdir / "generated-html")]


# --------------------------------------------------------------------------------------------
# Inside a run (a subprocess)


def run(docs_file: Path, out: Path, workers: int) -> dict:
    from vldocir.construction.render import RenderConfig, render_batch

    docs = json.loads(docs_file.read_text())
    t0 = time.monotonic()
    report = render_batch(docs, out, RenderConfig(workers=workers, timeout_s=600), progress=False)
    return {
        "pages": report.pages_rendered,
        "docs": len(report.rendered),
        "failed": report.errors,
        "workers": report.workers,
        "batch_wall_s": time.monotonic() - t0,
        "launches": report.browser_launches,
    }


def naive_renderer_class():
    """A Renderer whose pagination captures the whole document at once, then slices it with PIL."""
    from PIL import Image

    from vldocir.construction.paginate import choose_cut
    from vldocir.construction.render import RenderedPage, Renderer

    class NaiveRenderer(Renderer):
        def _paginate(self, prep, doc_dir):
            cfg = self.config
            png = prep.page.screenshot(full_page=True, type="png", timeout=cfg.timeout_s * 1000)
            with Image.open(BytesIO(png)) as im:
                full = np.asarray(im.convert("RGB"))
            del png
            cuts, pages, start = [0], [], 0
            while start < prep.doc_h:
                window = full[start : start + cfg.page_height + 4]
                decision = choose_cut(
                    window,
                    start,
                    start,
                    prep.atomic_boxes,
                    page_height=cfg.page_height,
                    doc_height=prep.doc_h,
                    cut_window=cfg.cut_window,
                    min_fill=cfg.min_fill,
                    background=prep.background,
                    tolerance=cfg.blank_tolerance,
                    margin=cfg.cut_margin,
                    slack=cfg.cut_slack,
                    keep_boxes=prep.keep_boxes,
                    fragile=prep.fragile,
                )
                cut = decision.cut
                page = np.full((cfg.page_height, cfg.page_width, 3), 255, dtype=np.uint8)
                part = full[start:cut, : cfg.page_width]
                page[: part.shape[0], : part.shape[1]] = part
                name = f"page-{len(pages):03d}.png"
                Image.fromarray(page).save(doc_dir / name, format="PNG", compress_level=1)
                pages.append(
                    RenderedPage(
                        len(pages), name, cfg.page_width, cfg.page_height, start, cut - start, decision.reason, ""
                    )
                )
                cuts.append(cut)
                start = cut
            del full
            return pages, cuts

    return NaiveRenderer


def run_one_browser(docs_file: Path, out: Path, naive: bool) -> dict:
    """The documents one after the other with one Renderer (ours or the naive one)."""
    from vldocir.construction.render import RenderConfig, Renderer

    docs = json.loads(docs_file.read_text())
    cls = naive_renderer_class() if naive else Renderer
    t0 = time.monotonic()
    pages, failed = 0, {}
    with cls(RenderConfig(timeout_s=600)) as renderer:
        for doc_id, source, path in docs:
            try:
                pages += len(renderer.render(doc_id, source, Path(path), out).pages)
            except Exception as exc:  # the naive capture may fail on long documents
                failed[doc_id] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return {
        "pages": pages,
        "docs": len(docs) - len(failed),
        "failed": failed,
        "workers": 1,
        "batch_wall_s": time.monotonic() - t0,
        "launches": 1,
    }


# --------------------------------------------------------------------------------------------
# Measuring a run from outside


class TreeMeter:
    """Samples the CPU time (per process, so that ended processes still count) and memory of the
    process ``pid`` and all its descendants, from a thread of this process."""

    def __init__(self, pid: int, interval: float = 0.2, memory_every: float = 1.0):
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid)
        self._cpu: dict[tuple[int, float], float] = {}
        self.peak_rss = self.peak_pss = 0
        self._interval, self._memory_every, self._last_memory = interval, memory_every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        ps = self._psutil
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except ps.NoSuchProcess:
            return
        memory = time.monotonic() - self._last_memory >= self._memory_every
        rss = pss = 0
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self._cpu[(p.pid, p.create_time())] = t.user + t.system
                    rss += p.memory_info().rss
                    if memory:
                        pss += p.memory_full_info().pss
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                pass
        self.peak_rss = max(self.peak_rss, rss)
        if memory:
            self._last_memory = time.monotonic()
            self.peak_pss = max(self.peak_pss, pss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu.values())

    def start(self) -> TreeMeter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure(args: list[str], label: str) -> dict:
    """Run this script with ``args`` in a subprocess, measured from outside; its result and figures."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    meter = TreeMeter(proc.pid).start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    meter.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{stderr[-4000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    cores = os.cpu_count() or 1
    cpu = meter.cpu_s
    return {
        **result,
        "label": label,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_s_rusage": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "pages_per_cpu_s": result["pages"] / cpu if cpu else float("nan"),
        "pages_per_s": result["pages"] / wall,
        "pages_per_s_per_machine_core": result["pages"] / wall / cores,
        "cores_busy": cpu / wall,
        "peak_rss_mib": meter.peak_rss / 2**20,
        "peak_pss_mib": meter.peak_pss / 2**20,
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


# --------------------------------------------------------------------------------------------
# Driver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--real-html",
        type=Path,
        default=REAL_HTML,
        help="folder of real documents (default $VLDOCIR_REAL_HTML, else ../shared/real-html)",
    )
    ap.add_argument("--real-repeat", type=int, default=3, help="render each real document this many times")
    ap.add_argument("--generated", type=int, default=2, help="generated documents per source (0: none)")
    ap.add_argument(
        "--workers", default=None, help="worker counts to run, e.g. 1,4 (default: 1 and the machine's cores)"
    )
    ap.add_argument("--goal", type=float, default=2.0, help="pages/s per machine core the real pages must reach")
    ap.add_argument("--naive", action="store_true", help="also ours vs the naive full-page capture, one browser")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--run", nargs=3, metavar=("DOCS", "OUT", "WORKERS"), help=argparse.SUPPRESS)
    ap.add_argument("--one-browser", nargs=3, metavar=("DOCS", "OUT", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.run:
        print(json.dumps(run(Path(args.run[0]), Path(args.run[1]), int(args.run[2]))), flush=True)
        return 0
    if args.one_browser:
        docs, out, kind = args.one_browser
        print(json.dumps(run_one_browser(Path(docs), Path(out), kind == "naive")), flush=True)
        return 0

    cores = os.cpu_count() or 1
    workers = [int(w) for w in args.workers.split(",")] if args.workers else sorted({1, cores})
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        sets: dict[str, list] = {}
        if args.real_html.is_dir() and args.real_repeat > 0:
            sets["real"] = real_documents(args.real_html, args.real_repeat)
        else:
            log(f"no real pages at {args.real_html}: the real set is skipped (and the goal cannot be judged)")
        if args.generated > 0:
            sets["generated"] = generated_documents(workdir, args.generated)
        log(
            f"machine: {cores} cores (os.cpu_count()), load average {os.getloadavg()[0]:.2f} at start; "
            + "; ".join(f"{name}: {len(docs)} documents" for name, docs in sets.items())
        )
        for name, docs in sets.items():
            docs_file = workdir / f"{name}.json"
            docs_file.write_text(json.dumps(docs))
            for n in workers:
                label = f"{name}, {n} worker{'s' if n > 1 else ''}"
                log(f"rendering {label} ...")
                out = workdir / f"out-{name}-{n}"
                results.append(measure(["--run", str(docs_file), str(out), str(n)], label) | {"set": name})
        if args.naive and "generated" in sets:
            docs_file = workdir / "generated.json"
            for kind in ("ours", "naive"):
                log(f"rendering generated, one browser, {kind} ...")
                out = workdir / f"out-one-{kind}"
                results.append(
                    measure(["--one-browser", str(docs_file), str(out), kind], f"generated, one browser, {kind}")
                    | {"set": f"one-browser-{kind}"}
                )

    log("")
    header = (
        f"{'run':32s} {'docs':>4s} {'pages':>5s} {'wall s':>7s} {'CPU s':>7s} {'p/CPU-s':>7s} {'p/s':>6s} "
        f"{'p/s/core':>8s} {'busy':>5s} {'RSS MiB':>8s} {'PSS MiB':>8s} {'load':>9s}"
    )
    log(header)
    log("-" * len(header))
    for r in results:
        log(
            f"{r['label']:32s} {r['docs']:4d} {r['pages']:5d} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} "
            f"{r['pages_per_cpu_s']:7.2f} {r['pages_per_s']:6.2f} {r['pages_per_s_per_machine_core']:8.2f} "
            f"{r['cores_busy']:5.2f} {r['peak_rss_mib']:8.0f} {r['peak_pss_mib']:8.0f} "
            f"{r['load_start']:4.1f}-{r['load_end']:<4.1f}"
        )
        if r["failed"]:
            log(f"{'':32s} failed: {r['failed']}")
    log("")
    log("p/CPU-s = pages per CPU-second (Python, workers, drivers, every Chromium process); p/s/core = pages /")
    log(f"wall / {cores} machine cores; busy = CPU s / wall s; RSS, PSS = peaks of the process tree's sums; load =")
    log("load average (1 min) at the start and end of the run: other work on the machine takes cores from")
    log(
        "these runs. getrusage(RUSAGE_CHILDREN), a lower bound of CPU s: "
        + ", ".join(f"{r['label']} {r['cpu_s_rusage']:.1f}" for r in results)
        + "."
    )
    verdict = 0
    real = [r for r in results if r["set"] == "real"]
    if real:
        best = max(real, key=lambda r: r["workers"])
        ok = best["pages_per_s_per_machine_core"] >= args.goal
        verdict = 0 if ok else 1
        log(
            f"{'PASS' if ok else 'FAIL'}: real pages, {best['workers']} workers: "
            f"{best['pages_per_s_per_machine_core']:.2f} pages/s per machine core (goal {args.goal:g}); "
            f"{best['pages_per_cpu_s']:.2f} pages per CPU-second, {best['cores_busy']:.2f} of {cores} cores busy, "
            f"load average {best['load_start']:.1f}-{best['load_end']:.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"cores": cores, "goal": args.goal, "results": results}, indent=2) + "\n")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
