"""Benchmark fingerprint cost at paper scale: first computation (every image byte hashed) and rerun
(one stat per image file), against the lower bound of a rerun: ``os.stat`` on every image path.

Builds (once, reused under ``--workdir``) a valid benchmark of ``--pages`` pages whose images are
tiny files referenced by path, then in one process:

- ``load_benchmark`` (validation, image path checks included);
- the first fingerprint, with an empty memo directory (reads and hashes every image file);
- the second fingerprint (memo hit: stats only), best of ``--repeat``;
- the peer: ``os.stat`` on every image path, best of ``--repeat``.

Usage::

    .venv/bin/python perf/bench_fingerprint.py                 # 388,548 pages (the paper's count)
    .venv/bin/python perf/bench_fingerprint.py --pages 50000
    .venv/bin/python perf/bench_fingerprint.py --smoke          # 300 pages, one repeat: seconds (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

PAPER_PAGES = 388_548
PAGES_PER_DOC = 13  # the paper's average is 13.1
IMAGE_BYTES = (200, 600)  # tiny files: the cost measured is per file, not per byte


def build(root: Path, n_pages: int, seed: int = 0) -> None:
    """Write a valid benchmark of ``n_pages`` pages, each image a small file under ``pages/``."""
    from vldocir.data.benchmark import INFO_FILE
    from vldocir.data.schema import TABLES
    from vldocir.io import atomic_write_json, atomic_write_parquet

    rng = np.random.default_rng(seed)
    n_docs = -(-n_pages // PAGES_PER_DOC)
    doc_of = np.arange(n_pages) // PAGES_PER_DOC
    index = np.arange(n_pages) % PAGES_PER_DOC
    doc_ids = [f"doc-{d:06d}" for d in range(n_docs)]
    n_pages_of = np.bincount(doc_of, minlength=n_docs)
    page_ids = [f"{doc_ids[d]}-p{i:03d}" for d, i in zip(doc_of, index, strict=True)]
    paths = [f"pages/{doc_ids[d]}/page-{i:03d}.png" for d, i in zip(doc_of, index, strict=True)]
    started = time.perf_counter()
    for d in range(n_docs):
        (root / "pages" / doc_ids[d]).mkdir(parents=True, exist_ok=True)
    sizes = rng.integers(*IMAGE_BYTES, size=n_pages)
    blob = rng.bytes(int(IMAGE_BYTES[1]) * 64)
    for k, (relative, size) in enumerate(zip(paths, sizes, strict=True)):
        offset = (k * 7919) % (len(blob) - int(size))
        with open(root / relative, "wb") as file:
            file.write(k.to_bytes(8, "little") + blob[offset : offset + int(size) - 8])
        if k % 50_000 == 0 and k:
            print(f"  wrote {k:,} image files ({time.perf_counter() - started:.0f} s)", flush=True)
    schema = {name: spec.schema for name, spec in TABLES.items()}
    tables = {
        "documents": pa.table(
            {
                "doc_id": doc_ids,
                "source": ["wikipedia"] * n_docs,
                "domain": ["history"] * n_docs,
                "title": doc_ids,
                "n_pages": n_pages_of.astype(np.int32),
                "url": [None] * n_docs,
                "license": ["CC-BY-4.0"] * n_docs,
            },
            schema=schema["documents"],
        ),
        "pages": pa.table(
            {
                "page_id": page_ids,
                "doc_id": [doc_ids[d] for d in doc_of],
                "page_index": index.astype(np.int32),
                "image": [{"bytes": None, "path": p} for p in paths],
                "width": np.full(n_pages, 2000, np.int32),
                "height": np.full(n_pages, 4000, np.int32),
                "dom_text": [f"text of {p}" for p in page_ids],
                "ocr_text": [None] * n_pages,
            },
            schema=schema["pages"],
        ),
        "elements": schema["elements"].empty_table(),
        "queries": pa.table(
            {
                "query_id": [f"q{d:07d}" for d in range(n_docs)],
                "text": [f"what is on {d}?" for d in doc_ids],
                "answer": ["x"] * n_docs,
                "evidence_structure": ["page_single"] * n_docs,
                "source": ["wikipedia"] * n_docs,
                "domain": ["history"] * n_docs,
                "generator": ["bench"] * n_docs,
                "evidence_types": [["text"]] * n_docs,
            },
            schema=schema["queries"],
        ),
        "qrels": pa.table(
            {
                "query_id": [f"q{d:07d}" for d in range(n_docs)],
                "page_id": [f"{d}-p000" for d in doc_ids],
                "doc_id": doc_ids,
                "element_ids": [[] for _ in range(n_docs)],
            },
            schema=schema["qrels"],
        ),
    }
    for name, table in tables.items():
        atomic_write_parquet(table, root / f"{name}.parquet")
    info = {
        "name": f"bench-fingerprint-{n_pages}",
        "version": "bench",
        "counts": {n: t.num_rows for n, t in tables.items()},
    }
    atomic_write_json(info, root / INFO_FILE)
    print(f"  built {n_pages:,} pages / {n_docs:,} documents in {time.perf_counter() - started:.0f} s", flush=True)


def du_bytes(root: Path) -> tuple[int, int]:
    """(bytes of image content, bytes allocated on disk) under ``root/pages``."""
    content = allocated = 0
    for directory, _, files in os.walk(root / "pages"):
        for name in files:
            st = os.stat(os.path.join(directory, name))
            content += st.st_size
            allocated += st.st_blocks * 512
    return content, allocated


def time_best(fn, repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return best, value


def stat_all(root: Path, paths: list[str]) -> None:
    """The peer: the least a rerun must do to notice a changed file."""
    prefix = str(root) + os.sep
    stat = os.stat
    for relative in paths:
        stat(prefix + relative)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=PAPER_PAGES)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "vldocir-bench-fingerprint")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--clean", action="store_true", help="delete the generated benchmark at the end")
    parser.add_argument("--smoke", action="store_true", help="--pages 300 --repeat 1: seconds, the code path only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.pages, args.repeat = 300, 1

    root = (args.workdir / f"pages-{args.pages}").resolve()
    if not (root / "benchmark.json").is_file():
        shutil.rmtree(root, ignore_errors=True)
        print(f"building {root} ...", flush=True)
        build(root, args.pages)
    else:
        print(f"reusing {root}", flush=True)
    cache = args.workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["VLDOCIR_CACHE_DIR"] = str(cache)

    from vldocir.data import fingerprint
    from vldocir.data.benchmark import load_benchmark
    from vldocir.data.fingerprint.memo import RACY_WINDOW_NS

    # Files written less than the racy window ago are not memoized: let a fresh build age.
    newest = max(p.stat().st_mtime_ns for p in root.glob("*.parquet"))
    time.sleep(max(0.0, (newest + RACY_WINDOW_NS - time.time_ns()) / 1e9 + 0.1))

    figures: dict = {"pages": args.pages, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    content, allocated = du_bytes(root)
    figures["image_bytes"], figures["image_disk_bytes"] = content, allocated
    started = time.perf_counter()
    bench = load_benchmark(root)
    figures["load_and_validate_s"] = time.perf_counter() - started
    paths = bench.image_refs().column("path").to_pylist()

    started = time.perf_counter()
    first = fingerprint.compute_fingerprint(root)
    figures["first_fingerprint_s"] = time.perf_counter() - started
    figures["memo_bytes"] = sum(p.stat().st_size for p in (cache / "fingerprints").iterdir())

    second_s, second = time_best(lambda: fingerprint.compute_fingerprint(root), args.repeat)
    assert second == first, "the rerun must give the same fingerprint"
    stat_s, _ = time_best(lambda: stat_all(root, paths), args.repeat)
    figures.update(
        second_fingerprint_s=second_s,
        stat_every_image_s=stat_s,
        ratio_second_vs_stat=second_s / stat_s,
        speedup_second_vs_first=figures["first_fingerprint_s"] / second_s,
        fingerprint=first,
    )

    print()
    print(f"pages / image files:                 {args.pages:,}")
    print(f"image content / allocated on disk:   {content / 1e6:,.1f} MB / {allocated / 1e6:,.1f} MB")
    print(f"load_benchmark (validation):         {figures['load_and_validate_s']:.2f} s")
    print(f"first fingerprint (hash all bytes):  {figures['first_fingerprint_s']:.2f} s")
    print(f"second fingerprint (memo), best of {args.repeat}: {second_s:.2f} s")
    print(f"peer: os.stat every image, best of {args.repeat}: {stat_s:.2f} s")
    print(f"ratio second fingerprint / stat:     {figures['ratio_second_vs_stat']:.2f}x")
    print(f"first / second:                      {figures['speedup_second_vs_first']:.1f}x")
    print(f"memo size:                           {figures['memo_bytes'] / 1e6:.1f} MB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.clean:
        shutil.rmtree(root)
    return figures


if __name__ == "__main__":
    main()
