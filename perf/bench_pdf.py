"""PDF pages to text and images (vldocir.construction.pdf): text layers per second, page images per
second per core including encoding, and the encoders that choice was made from.

    .venv/bin/python perf/bench_pdf.py              # 8 PDFs x 25 pages at 1000 px: about a minute
    .venv/bin/python perf/bench_pdf.py --width 2000 # the HTML pages' width
    .venv/bin/python perf/bench_pdf.py --smoke      # 2 PDFs x 4 pages: seconds (no verdict)

It makes ``--docs`` PDFs of ``--pages`` pages (one made with matplotlib, TrueType text: a heading,
40 lines of body text, a bar-and-line chart drawn as vectors, a raster image on every fifth page,
the kind of page a report has; the others byte-distinct copies), then measures, in this run:

1. **text layers**: :func:`page_texts` over every PDF, in this process and in 2 worker processes;
   target at least 500 pages/s (wall).
2. **encoders**: each page rendered once at ``--width`` (PDFium alone), then encoded by PNG
   (``compress_level`` 1, 3, 6), JPEG (quality 90) and WebP (quality 80, fastest method): CPU ms
   per page, KiB per page, and render + encode pages per CPU second.
3. **the rasterizer** (:func:`rasterize_pdfs` with the default format, JPEG q90: render, encode,
   text layer, elements, ``pages.json``) with 1 and 2 workers into empty folders: pages/s (wall)
   and pages per CPU second (this process and its workers); target at least 10 pages/s per core.

The load average is printed at the start and the end: on a shared machine the wall figures drop
with it, the per-CPU-second ones much less. Exit status 1 when a target fails (not in ``--smoke``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def make_pdfs(root: Path, docs: int, pages: int) -> list[Path]:
    """``docs`` PDFs of ``pages`` pages: one made with matplotlib, the others its copies with a comment
    after the end (distinct bytes, so the rasterizer, keyed by content, renders each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.backends.backend_pdf import PdfPages

    rng = np.random.default_rng(0)
    first = root / "doc000.pdf"
    with plt.rc_context({"pdf.fonttype": 42}), PdfPages(first) as pdf:
        for p in range(pages):
            fig = plt.figure(figsize=(8.5, 11))
            fig.text(0.08, 0.94, f"Section {p + 1}: regional results", fontsize=15)
            for line in range(40):
                fig.text(
                    0.08,
                    0.9 - 0.012 * line,
                    f"Line {line}: revenue in region {line} grew by "
                    f"{rng.integers(100)} percent while costs rose by {rng.integers(50)} percent.",
                    fontsize=8,
                )
            ax = fig.add_axes((0.1, 0.08, 0.8, 0.28))
            ax.bar(range(12), rng.random(12))
            ax.plot(range(12), rng.random(12), color="red")
            ax.set_title(f"Figure {p + 1}: monthly sales")
            if p % 5 == 0:
                ax.imshow(rng.random((40, 60)), extent=(0, 11, 0, 1), aspect="auto", alpha=0.4)
            pdf.savefig(fig)
            plt.close(fig)
    data = first.read_bytes()
    paths = [first]
    for d in range(1, docs):
        paths.append(root / f"doc{d:03d}.pdf")
        paths[-1].write_bytes(data + f"\n% copy {d}\n".encode())
    return paths


def _texts(path: str) -> int:
    from vldocir.construction.pdf import page_texts

    return len(page_texts(path))


def bench_text(pdfs: list[Path]) -> dict:
    from vldocir.construction.pdf import page_texts

    page_texts(pdfs[0])  # imports and PDFium's start before the clock
    t0, c0 = time.perf_counter(), _cpu_s()
    n = sum(len(page_texts(p)) for p in pdfs)
    one = {"pages": n, "wall_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - c0}
    import multiprocessing

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_texts, [str(pdfs[0])] * 2))  # start the workers before the clock
        t0 = time.perf_counter()
        n2 = sum(pool.map(_texts, [str(p) for p in pdfs]))
        two = {"pages": n2, "wall_s": time.perf_counter() - t0}
    one["pages_per_s"], two["pages_per_s"] = n / one["wall_s"], n2 / two["wall_s"]
    return {"1 process": one, "2 processes": two}


ENCODERS = {
    "png level 1": {"format": "PNG", "compress_level": 1},
    "png level 3": {"format": "PNG", "compress_level": 3},
    "png level 6": {"format": "PNG", "compress_level": 6},
    "jpeg q90": {"format": "JPEG", "quality": 90},
    "webp q80 method 0": {"format": "WEBP", "quality": 80, "method": 0},
}


def bench_encoders(pdfs: list[Path], width: int, max_pages: int) -> dict:
    import pypdfium2 as pdfium

    images, render_s = [], 0.0
    for path in pdfs:
        document = pdfium.PdfDocument(path)
        for index in range(len(document)):
            if len(images) >= max_pages:
                break
            page = document[index]
            t0 = time.process_time()
            bitmap = page.render(scale=width / page.get_width(), rev_byteorder=True, draw_annots=True)
            images.append(bitmap.to_pil().convert("RGB"))
            render_s += time.process_time() - t0
        document.close()
    n = len(images)
    result = {
        "pages": n,
        "size": list(images[0].size),
        "render_ms": 1000 * render_s / n,
        "render_pages_per_cpu_s": n / render_s,
        "encoders": {},
    }
    for name, options in ENCODERS.items():
        size, t0 = 0, time.process_time()
        for image in images:
            out = io.BytesIO()
            image.save(out, **options)
            size += out.tell()
        encode_s = time.process_time() - t0
        result["encoders"][name] = {
            "encode_ms": 1000 * encode_s / n,
            "kib_per_page": size / n / 1024,
            "render_and_encode_pages_per_cpu_s": n / (render_s + encode_s),
        }
    return result


def bench_rasterizer(pdfs: list[Path], width: int, workers: int, root: Path) -> dict:
    from vldocir.construction.pdf import PdfConfig, rasterize_pdfs

    t0, c0 = time.perf_counter(), _cpu_s()
    report = rasterize_pdfs(
        [(p.stem, p) for p in pdfs], root / f"w{workers}", PdfConfig(width=width, workers=workers), progress=False
    )
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    assert not report.failed, report.failed
    n = report.pages_rendered
    return {
        "workers": report.workers,
        "pages": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "pages_per_s": n / wall,
        "pages_per_s_per_core": n / wall / report.workers,
        "pages_per_cpu_s": n / cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--pages", type=int, default=25)
    parser.add_argument("--width", type=int, default=None, help="page image width (default: PdfConfig's)")
    parser.add_argument("--encoder-pages", type=int, default=60, help="pages the encoders are compared on")
    parser.add_argument("--smoke", action="store_true", help="2 PDFs x 4 pages, no verdict")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    from vldocir.construction.pdf import PdfConfig

    if args.smoke:
        args.docs, args.pages, args.encoder_pages = 2, 4, 8
    width = args.width or PdfConfig().width
    figures: dict = {"load_start": _load(), "cores": len(os.sched_getaffinity(0)), "width": width}
    print(
        f"load average {figures['load_start']} (1/5/15 min) on {figures['cores']} cores; "
        f"{args.docs} PDFs x {args.pages} pages at {width} px"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        pdfs = make_pdfs(root, args.docs, args.pages)
        print(f"made the PDFs in {time.perf_counter() - t0:.1f} s")
        figures["text"] = text = bench_text(pdfs)
        for name, row in text.items():
            print(
                f"text layers, {name}: {row['pages_per_s']:.0f} pages/s ({row['pages']} pages, {row['wall_s']:.2f} s)"
            )
        figures["encoders"] = enc = bench_encoders(pdfs, width, args.encoder_pages)
        print(
            f"PDFium render alone at {enc['size'][0]}x{enc['size'][1]}: {enc['render_ms']:.1f} ms/page "
            f"({enc['render_pages_per_cpu_s']:.0f} pages per CPU s)"
        )
        print(f"{'encoder':<20} {'ms/page':>8} {'KiB/page':>9} {'render+encode pages/CPU s':>26}")
        for name, row in enc["encoders"].items():
            print(
                f"{name:<20} {row['encode_ms']:>8.1f} {row['kib_per_page']:>9.0f} "
                f"{row['render_and_encode_pages_per_cpu_s']:>26.1f}"
            )
        figures["rasterizer"] = []
        for workers in (1, 2):
            row = bench_rasterizer(pdfs, width, workers, root / "out")
            figures["rasterizer"].append(row)
            print(
                f"rasterize_pdfs, {row['workers']} worker(s): {row['pages_per_s']:.1f} pages/s, "
                f"{row['pages_per_s_per_core']:.1f} pages/s per core (wall), {row['pages_per_cpu_s']:.1f} pages per "
                f"CPU s ({row['pages']} pages, {row['wall_s']:.1f} s)"
            )
    figures["load_end"] = _load()
    print(f"load average {figures['load_end']} at the end")
    best_text = max(row["pages_per_s"] for row in text.values())
    per_core = min(row["pages_per_cpu_s"] for row in figures["rasterizer"])
    verdicts = {"text layers >= 500 pages/s": best_text >= 500, "page images >= 10 pages/s per core": per_core >= 10}
    figures["verdicts"] = verdicts
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    if args.smoke:
        return 0
    for name, ok in verdicts.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
