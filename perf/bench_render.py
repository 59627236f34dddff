"""Rendering throughput and memory: window-by-window pagination against a full-page capture.

Generates a fixed set of HTML documents (10 by default, of mixed length: text sections, tables,
lists and inline SVG figures; about 110 pages of 2000x4000 px in all) and renders them with one
browser in two ways, each in a fresh subprocess:

- ours: ``vldocir.construction.render.Renderer``: one clipped capture per page window (plus a few rows
  to choose the cut), the page written as Chromium encoded it;
- naive: the same loading, cleaning and element extraction, then ONE full-page screenshot of the
  document (Playwright ``page.screenshot(full_page=True)``), decoded with PIL and sliced into pages
  with the same cut rule (``paginate.choose_cut`` on the full image), each page padded and written
  as PNG by PIL (``compress_level=1``, its fastest).

For each it prints pages, wall time, CPU time, pages/s, pages per second per core and peak memory:

- CPU time: user + system seconds of the worker process and of all its descendants (Playwright's
  driver and every Chromium process, also those that ended), sampled every 0.1 s per process
  during the render loop. (``getrusage(RUSAGE_CHILDREN)`` of the finished worker is printed too,
  but it is only a lower bound: Chromium's renderer processes are not reaped up the worker's
  process tree, so their time is lost to it);
- pages/s per core = pages / wall / cores used, where cores used = CPU time / wall (the average
  number of busy cores): that is pages per CPU-second. Also shown: pages / wall / machine cores
  (``os.cpu_count()``), which assumes every core of the machine was ours;
- peak memory: the largest sample of (worker RSS + the PSS of its descendants); PSS counts the
  pages Chromium's processes share once, where summed RSS would count them once per process.

    .venv/bin/python perf/bench_render.py                 # both approaches
    .venv/bin/python perf/bench_render.py --skip-naive    # ours only
    .venv/bin/python perf/bench_render.py --docs 4        # fewer documents, quicker

This is a script, not a timed test: the figures depend on the machine (and on its other load).
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
SECTIONS = [6, 12, 18, 24, 30, 36, 8, 16, 20, 10]  # per document; ~0.6 pages per section
WORDS = (
    "river council museum harbour census bridge tower valley market station library festival garden "
    "academy chapel quarry mill orchard canal meadow fortress measurement quarter region revenue "
    "patients cohort sample protein signal analysis model dataset"
).split()


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------------
# Documents


def make_document(doc_index: int, n_sections: int) -> str:
    rng = np.random.default_rng(1000 + doc_index)
    out = [f"<h1>Document {doc_index}: a report on {rng.choice(WORDS)} and {rng.choice(WORDS)}</h1>"]
    for s in range(n_sections):
        out.append(f"<h2>{s + 1}. The {rng.choice(WORDS)} {rng.choice(WORDS)}</h2>")
        for _ in range(int(rng.integers(2, 5))):
            out.append("<p>" + " ".join(rng.choice(WORDS, size=int(rng.integers(50, 140)))) + ".</p>")
        kind = s % 4
        if kind == 0:
            rows = "".join(
                f"<tr><td>{rng.choice(WORDS)} {r}</td><td>{rng.integers(100, 99999)}</td>"
                f"<td>{rng.random():.3f}</td><td>{' '.join(rng.choice(WORDS, size=4))}</td></tr>"
                for r in range(int(rng.integers(8, 30)))
            )
            out.append(f"<table><caption>Table {s + 1}</caption><tr><th>Item</th><th>Count</th><th>Rate</th>"
                       f"<th>Note</th></tr>{rows}</table>")
        elif kind == 1:
            bars = "".join(
                f'<rect x="{40 + 50 * i}" y="{260 - h}" width="36" height="{h}" fill="rgb({(37 * i) % 256},110,190)"/>'
                for i, h in enumerate(rng.integers(20, 240, size=10))
            )
            out.append(f'<figure><svg width="560" height="280"><rect width="560" height="280" fill="#f4f4f4"/>{bars}'
                       f'<text x="40" y="20">Figure {s + 1}</text></svg><figcaption>Figure {s + 1}: '
                       f"{' '.join(rng.choice(WORDS, size=8))}.</figcaption></figure>")
        elif kind == 2:
            items = "".join(f"<li>{' '.join(rng.choice(WORDS, size=int(rng.integers(4, 20))))}</li>"
                            for _ in range(int(rng.integers(3, 9))))
            out.append(f"<ul>{items}</ul>")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Benchmark document</title><style>"
        "body{margin:0;padding:16px 64px;font:17px/26px 'DejaVu Serif',serif}"
        "table{border-collapse:collapse;width:100%}td,th{border:1px solid #444;padding:2px 6px}"
        "figure{margin:12px 0}</style></head><body>" + "".join(out) + "</body></html>"
    )


def write_documents(root: Path, n_docs: int) -> list[tuple[str, str, Path]]:
    docs = []
    for i in range(n_docs):
        doc_id = f"bench-{i:02d}"
        path = root / "docs" / doc_id / "index.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make_document(i, SECTIONS[i % len(SECTIONS)]))
        docs.append((doc_id, "generic", path))
    return docs


# --------------------------------------------------------------------------------------------
# Measuring (inside a worker)


class Meter:
    """Samples CPU time (per process, so that ended processes still count) and memory."""

    def __init__(self, interval: float = 0.1):
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._cpu: dict[tuple[int, float], float] = {}
        self.peak_total = self.peak_python = self.peak_children = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        py = self._me.memory_info().rss
        children = 0
        for c in self._me.children(recursive=True):
            try:
                with c.oneshot():
                    t = c.cpu_times()
                    self._cpu[(c.pid, c.create_time())] = t.user + t.system
                    children += c.memory_full_info().pss
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                pass
        self.peak_python = max(self.peak_python, py)
        self.peak_children = max(self.peak_children, children)
        self.peak_total = max(self.peak_total, py + children)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    def cpu_seconds(self) -> float:
        own = self._me.cpu_times()
        return own.user + own.system + sum(self._cpu.values())

    def __enter__(self) -> "Meter":
        self._sample()
        self.cpu0 = self.cpu_seconds()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._sample()
        self._stop.set()
        self._thread.join()


def naive_renderer_class():
    """A Renderer whose pagination captures the whole document at once, then slices it with PIL."""
    from PIL import Image

    from vldocir.construction.paginate import choose_cut
    from vldocir.construction.render import Renderer, RenderedPage
    from vldocir.io import atomic_path

    class NaiveRenderer(Renderer):
        def _paginate(self, prep, doc_dir):
            cfg = self.config
            png = prep.page.screenshot(full_page=True, type="png", timeout=cfg.timeout_s * 1000)
            with Image.open(BytesIO(png)) as im:
                full = np.asarray(im.convert("RGB"))
            del png
            cuts, pages, start = [0], [], 0
            while start < prep.doc_h:
                window = full[start : start + cfg.page_height]
                decision = choose_cut(
                    window, start, start, prep.atomic_boxes, page_height=cfg.page_height, doc_height=prep.doc_h,
                    cut_window=cfg.cut_window, min_fill=cfg.min_fill, background=prep.background,
                    tolerance=cfg.blank_tolerance,
                )
                cut = decision.cut
                page = np.full((cfg.page_height, cfg.page_width, 3), 255, dtype=np.uint8)
                part = full[start:cut, : cfg.page_width]
                page[: part.shape[0], : part.shape[1]] = part
                name = f"page-{len(pages):03d}.png"
                with atomic_path(doc_dir / name) as tmp:
                    Image.fromarray(page).save(tmp, format="PNG", compress_level=1)
                pages.append(RenderedPage(len(pages), name, cfg.page_width, cfg.page_height, start, cut - start,
                                          decision.reason, ""))
                cuts.append(cut)
                start = cut
            del full
            return pages, cuts

    return NaiveRenderer


def worker(approach: str, workdir: Path) -> dict:
    sys.path.insert(0, str(REPO_ROOT / "src"))
    from vldocir.construction.render import RenderConfig, Renderer

    docs = json.loads((workdir / "docs.json").read_text())
    out = workdir / f"out-{approach}"
    cfg = RenderConfig(timeout_s=600)
    cls = Renderer if approach == "ours" else naive_renderer_class()
    t_launch = time.monotonic()
    with cls(cfg) as renderer:
        launch_s = time.monotonic() - t_launch
        with Meter() as meter:
            t0 = time.monotonic()
            pages, failed = {}, {}
            for doc_id, source, path in docs:
                try:
                    doc = renderer.render(doc_id, source, Path(path), out)
                    pages[doc_id] = len(doc.pages)
                except Exception as exc:  # the naive capture may fail on long documents
                    failed[doc_id] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            wall = time.monotonic() - t0
        cpu = meter.cpu_seconds() - meter.cpu0
    return {
        "approach": approach,
        "docs": len(pages),
        "failed": failed,
        "pages": sum(pages.values()),
        "pages_per_doc": pages,
        "wall_s": wall,
        "cpu_s": cpu,
        "launch_s": launch_s,
        "peak_total_mib": meter.peak_total / 2**20,
        "peak_python_mib": meter.peak_python / 2**20,
        "peak_children_mib": meter.peak_children / 2**20,
    }


# --------------------------------------------------------------------------------------------
# Driver


def run_worker(approach: str, workdir: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", approach, "--workdir", str(workdir)],
        capture_output=True, text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{approach} worker failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["cpu_s_rusage"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def summarise(r: dict, cores: int) -> dict:
    wall, cpu, pages = r["wall_s"], r["cpu_s"], r["pages"]
    used = cpu / wall if wall else float("nan")
    return {
        **r,
        "pages_per_s": pages / wall if wall else float("nan"),
        "cores_used": used,
        "pages_per_s_per_core": pages / cpu if cpu else float("nan"),  # = pages / wall / cores used
        "pages_per_s_per_machine_core": pages / wall / cores if wall else float("nan"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--worker", choices=("ours", "naive"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.workdir)), flush=True)
        return 0

    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        docs = write_documents(workdir, args.docs)
        (workdir / "docs.json").write_text(json.dumps([[d, s, str(p)] for d, s, p in docs]))
        log(f"{len(docs)} documents in {workdir / 'docs'}; machine: {cores} cores (os.cpu_count()), "
            f"load average {os.getloadavg()[0]:.2f} at start")
        results = []
        for approach in ("ours",) + (() if args.skip_naive else ("naive",)):
            log(f"rendering with {approach} ...")
            results.append(summarise(run_worker(approach, workdir), cores))
        load_end = os.getloadavg()[0]

    log("")
    header = (f"{'approach':9s} {'docs':>4s} {'pages':>5s} {'wall s':>7s} {'CPU s':>7s} {'cores':>5s} "
              f"{'pages/s':>7s} {'p/s/core':>8s} {'p/s/mcore':>9s} {'peak MiB':>8s} {'py MiB':>7s} {'chrome MiB':>10s}")
    log(header)
    log("-" * len(header))
    for r in results:
        log(f"{r['approach']:9s} {r['docs']:4d} {r['pages']:5d} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} "
            f"{r['cores_used']:5.2f} {r['pages_per_s']:7.2f} {r['pages_per_s_per_core']:8.2f} "
            f"{r['pages_per_s_per_machine_core']:9.2f} {r['peak_total_mib']:8.0f} {r['peak_python_mib']:7.0f} "
            f"{r['peak_children_mib']:10.0f}")
        if r["failed"]:
            log(f"          failed: {r['failed']}")
    log("")
    log("cores = CPU s / wall s (busy cores on average); p/s/core = pages / wall / cores = pages per CPU-second;")
    log(f"p/s/mcore = pages / wall / {cores} machine cores; peak = max over samples of Python RSS + PSS of the")
    log("driver and Chromium processes; 'py' and 'chrome' are the separate peaks. CPU s counts Python, the")
    log("driver and every Chromium process during the render loop (browser launch excluded). For reference,")
    log("getrusage(RUSAGE_CHILDREN) of the whole worker, a lower bound (it misses Chromium processes that are")
    log("not reaped up the worker's process tree): "
        + ", ".join(f"{r['approach']} {r['cpu_s_rusage']:.1f} s" for r in results) + ".")
    log(f"load average at the end: {load_end:.2f} (other work on the machine inflates wall and CPU time)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
