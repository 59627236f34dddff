"""What a build's page images cost: rendering against OCR, and OCR before and after its rework.

Renders the documents of ``../shared/real-html/`` once (``vldocir.construction.render.render_batch``
in a subprocess measured from outside, as ``perf/bench_render.py`` does: the CPU time of the whole
process tree, Chromium included), then OCRs the same page images twice, side by side:

- before: the previous ``ocr_pages`` (one ``pytesseract.image_to_string`` per page on the page resized
  by half with Lanczos in RGB, a PNG written to a temporary file for each Tesseract process, one
  thread per core), reproduced here without its cache;
- after: :func:`vldocir.construction.ocr.ocr_pages` as the build calls it (empty cache).

Both run ``--workers`` pages at once (default: the cores the job holds). For each it prints pages,
wall and CPU seconds (this process and its reaped children, i.e. every Tesseract process:
``time.process_time`` + ``getrusage(RUSAGE_CHILDREN)``), CPU-s per page, pages per CPU-second,
pages per second per core (pages / wall / workers), the CPU-hours of the paper's 388,548 pages, the
shares of rendering and OCR in the CPU time of a build, and the load average of the machine before
and after (other work on the machine slows both and inflates CPU time: measure on a quiet machine).

Agreement of the two texts, over words (a page's text split on whitespace):

- ``sequence``: 2M / (|A| + |B|) summed over the pages, M the words of the longest matching blocks
  of the two word sequences in order (``difflib.SequenceMatcher``, autojunk off); 1 when identical;
- ``bag``: the multiset F1 of the words, 2 |A & B| / (|A| + |B|) summed over the pages (order
  ignored, as BM25 reads them); at least ``sequence``;
- identical pages: pages whose texts are equal.

PASS when the after OCR costs at most ``--goal`` (1.0) CPU-s per page and its sequence agreement
with the before OCR is at least ``--min-agreement`` (0.99).

    .venv/bin/python perf/bench_build.py                    # the real pages: about 3 CPU-minutes
    .venv/bin/python perf/bench_build.py --pages-dir /tmp/ocr-pages   # reuse rendered pages (no render)
    .venv/bin/python perf/bench_build.py --smoke            # one generated page, seconds (tests/perf)

This is a script, not a timed test: the figures depend on the machine and its other load.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT / "perf"))

import bench_render  # noqa: E402  (perf/: the rendering run and its process-tree meter)

PAPER_PAGES = 388_548
SMOKE_HTML = "<h1>Quarterly revenue</h1>" + "<p>Revenue grew 12 percent to 4,512 million dollars.</p>" * 12


def log(message: str = "") -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------------
# Agreement of two OCR texts (module doc)


def matched_words(a: str, b: str) -> tuple[int, int, int]:
    """``(words matched in order, words matched as multisets, |A| + |B|)`` of two texts."""
    words_a, words_b = a.split(), b.split()
    matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
    in_order = sum(block.size for block in matcher.get_matching_blocks())
    as_bags = sum((Counter(words_a) & Counter(words_b)).values())
    return in_order, as_bags, len(words_a) + len(words_b)


def agreement(before: list[str], after: list[str]) -> dict:
    """Sequence and bag agreement of two lists of page texts, pooled over the pages (module doc)."""
    counts = [matched_words(a, b) for a, b in zip(before, after, strict=True)]
    total = sum(c[2] for c in counts)
    return {
        "sequence": 2 * sum(c[0] for c in counts) / total if total else 1.0,
        "bag": 2 * sum(c[1] for c in counts) / total if total else 1.0,
        "identical_pages": sum(a == b for a, b in zip(before, after, strict=True)),
        "pages": len(before),
        "words_before": sum(len(t.split()) for t in before),
        "words_after": sum(len(t.split()) for t in after),
    }


# --------------------------------------------------------------------------------------------
# The two OCRs


def ocr_before(paths: list[Path], workers: int) -> list[str]:
    """The previous ``ocr_pages`` without its cache (module doc)."""
    import pytesseract
    from PIL import Image

    from vldocir.construction.ocr import OcrConfig

    config = OcrConfig()
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")  # as it set it

    def one(path: Path) -> str:
        with Image.open(path) as image:
            size = (max(1, round(image.width * config.scale)), max(1, round(image.height * config.scale)))
            image = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
            text = pytesseract.image_to_string(image, lang=config.lang, config=f"--psm {config.psm}")
        return " ".join(text.split())

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, paths))


def ocr_after(paths: list[Path], workers: int, cache_dir: Path) -> list[str]:
    from vldocir.construction.ocr import OcrConfig, ocr_pages

    return ocr_pages(paths, cache_dir, OcrConfig(workers=workers))


def timed(fn, *args) -> tuple[list[str], dict]:
    """``fn(*args)`` and its wall and CPU seconds (this process and its reaped children)."""

    def cpu() -> float:
        child = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + child.ru_utime + child.ru_stime

    c0, t0 = cpu(), time.monotonic()
    texts = fn(*args)
    return texts, {"cpu_s": cpu() - c0, "wall_s": time.monotonic() - t0}


# --------------------------------------------------------------------------------------------
# Driver


def render(docs: list, workdir: Path, workers: int) -> tuple[list[Path], dict]:
    """Render ``docs`` in a subprocess measured from outside (bench_render); the page images."""
    docs_file = workdir / "docs.json"
    docs_file.write_text(json.dumps(docs))
    out = workdir / "pages"
    figures = bench_render.measure(["--run", str(docs_file), str(out), str(workers)], "render")
    if figures["failed"]:
        raise SystemExit(f"rendering failed: {figures['failed']}")
    return sorted(out.glob("*/page-*.png")), figures


def main(argv=None) -> int:
    from vldocir.threads import job_cpus

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real-html", type=Path, default=bench_render.REAL_HTML, help="folder of real documents")
    ap.add_argument("--pages-dir", type=Path, default=None, help="OCR the page-*.png under this folder; no render")
    ap.add_argument("--workers", type=int, default=None, help="pages at once (default: the job's cores)")
    ap.add_argument("--goal", type=float, default=1.0, help="CPU-s per page the OCR may cost")
    ap.add_argument("--min-agreement", type=float, default=0.99, help="sequence agreement the OCR must keep")
    ap.add_argument("--smoke", action="store_true", help="one generated page: seconds (tests/perf)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    workers = args.workers or job_cpus()
    load_start = os.getloadavg()
    figures: dict = {"workers": workers, "cores": job_cpus(), "load_start": load_start}
    log(f"machine: {job_cpus()} cores for this job, {workers} workers; load average {_load(load_start)} at start")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.pages_dir:
            pages = sorted(args.pages_dir.glob("*/page-*.png")) or sorted(args.pages_dir.glob("page-*.png"))
        else:
            if args.smoke:
                (workdir / "smoke").mkdir(exist_ok=True)
                (workdir / "smoke" / "index.html").write_text(SMOKE_HTML)
                docs = [("smoke", "generic", str(workdir / "smoke" / "index.html"))]
            elif args.real_html.is_dir():
                docs = bench_render.real_documents(args.real_html, 1)
            else:
                raise SystemExit(f"no real pages at {args.real_html} (--real-html DIR, or --pages-dir, or --smoke)")
            log(f"rendering {len(docs)} document(s) ...")
            pages, figures["render"] = render(docs, workdir, workers)
        if not pages:
            raise SystemExit("no page images to OCR")
        log(f"OCR of {len(pages)} pages, before and after ...")
        before, figures["before"] = timed(ocr_before, pages, workers)
        after, figures["after"] = timed(ocr_after, pages, workers, workdir / "ocr-cache")
    figures["agreement"] = agreement(before, after)
    figures["load_end"] = os.getloadavg()
    report(figures, len(pages), workers)
    after_cost = figures["after"]["cpu_s"] / len(pages)
    ok_cost = after_cost <= args.goal
    ok_text = figures["agreement"]["sequence"] >= args.min_agreement
    figures["verdicts"] = {
        f"OCR <= {args.goal:g} CPU-s per page": ok_cost,
        f"agreement >= {args.min_agreement:g}": ok_text,
    }
    for name, ok in figures["verdicts"].items():
        log(f"{'PASS' if ok else 'FAIL'}: {name}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if args.smoke or (ok_cost and ok_text) else 1


def _load(load: tuple) -> str:
    return "/".join(f"{x:.2f}" for x in load) + " (1/5/15 min)"


def report(figures: dict, n_pages: int, workers: int) -> None:
    rows = {"OCR before": figures["before"], "OCR after": figures["after"]}
    if "render" in figures:
        rows = {"render": figures["render"], **rows}
    log("")
    header = (
        f"{'stage':12s} {'pages':>5s} {'wall s':>7s} {'CPU s':>7s} {'CPU-s/page':>10s} {'p/CPU-s':>7s} "
        f"{'p/s/core':>8s} {'paper CPU-h':>11s}"
    )
    log(header)
    log("-" * len(header))
    for name, row in rows.items():
        pages = row.get("pages", n_pages)
        row.update(
            pages=pages,
            cpu_s_per_page=row["cpu_s"] / pages,
            pages_per_cpu_s=pages / row["cpu_s"] if row["cpu_s"] else float("nan"),
            pages_per_s_per_core=pages / row["wall_s"] / workers,
            paper_cpu_hours=PAPER_PAGES * row["cpu_s"] / pages / 3600,
        )
        log(
            f"{name:12s} {pages:5d} {row['wall_s']:7.1f} {row['cpu_s']:7.1f} {row['cpu_s_per_page']:10.3f} "
            f"{row['pages_per_cpu_s']:7.2f} {row['pages_per_s_per_core']:8.2f} {row['paper_cpu_hours']:11.0f}"
        )
    if "render" in figures:
        render_cost = figures["render"]["cpu_s_per_page"]
        for name in ("before", "after"):
            ocr_cost = figures[name]["cpu_s_per_page"]
            figures[name]["build_share"] = {
                "render": render_cost / (render_cost + ocr_cost),
                "ocr": ocr_cost / (render_cost + ocr_cost),
            }
            log(
                f"shares of a build's CPU, OCR {name}: render {figures[name]['build_share']['render']:.0%}, "
                f"OCR {figures[name]['build_share']['ocr']:.0%}"
            )
    a = figures["agreement"]
    log(
        f"agreement after/before: sequence {a['sequence']:.4f}, bag {a['bag']:.4f}, identical pages "
        f"{a['identical_pages']}/{a['pages']}, words {a['words_before']} -> {a['words_after']}"
    )
    log(f"p/s/core = pages / wall / {workers} workers; load average {_load(figures['load_end'])} at the end")


if __name__ == "__main__":
    sys.exit(main())
