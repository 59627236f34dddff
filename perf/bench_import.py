"""Importing a ViDoRe-v3-sized corpus: peak memory must stay flat in corpus size.

    .venv/bin/python perf/bench_import.py              # 13,000 and 26,000 page images (ViDoRe v3: ~26,000)
    .venv/bin/python perf/bench_import.py --smoke      # 300 and 600 pages, seconds

For N and 2N pages it writes a corpus in ViDoRe v3's hub layout (``corpus/test-*.parquet`` shards of
1,000 rows in row groups of 64, each row a ~20 KB JPEG page image, its markdown and its ids; plus
queries and qrels, one query per 8 pages), then imports it with :class:`vldocir.importers.vidore.
ViDoReImporter` in a fresh process whose peak RSS (``ru_maxrss`` from ``wait4``) is its own. The
importer streams row batches and writes each image to a file as it goes; the texts go to sorted runs
on disk, merged into the pages table as it is written, and the fingerprint reads the table back in
batches; what grows with the corpus is the small per-page record (ids, numbers, image path, size).
Target: peak RSS at 2N at most 1.10x that at N. Printed: pages/s, peak RSS, the ratio, the load
average before and after (2 shared cores here: every wall time grows with the load). Exit status 1
when the target fails.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.10
SHARD_ROWS = 1000


def _images(n_distinct: int = 32) -> list[bytes]:
    """A pool of JPEG pages (noisy, so about 20 KB each, like a small scanned page)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(n_distinct):
        pixels = (rng.random((420, 320, 3)) * 255).astype("uint8")
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=40)
        out.append(buffer.getvalue())
    return out


def generate(root: Path, n_pages: int, words: int) -> None:
    """A ViDoRe v3-layout corpus of ``n_pages`` pages in documents of 20 pages, ``words`` words of
    markdown each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT / "tests" / "importers"))
    from importer_fixtures import V3_CORPUS, V3_QRELS, V3_QUERIES

    pool = _images()
    (root / "corpus").mkdir(parents=True)
    n_shards = -(-n_pages // SHARD_ROWS)
    for shard in range(n_shards):
        rows = []
        for i in range(shard * SHARD_ROWS, min(n_pages, (shard + 1) * SHARD_ROWS)):
            image = pool[i % len(pool)] + i.to_bytes(8, "little")  # (after JPEG's end marker: distinct bytes)
            rows.append(
                {
                    "corpus_id": i,
                    "image": {"bytes": image, "path": None},
                    "doc_id": f"doc{i // 20:05d}",
                    "markdown": f"# Page {i % 20 + 1}\n\n" + " ".join(random.Random(i).choices(WORDS, k=words)),
                    "page_number_in_doc": i % 20 + 1,
                }
            )
        pq.write_table(
            pa.Table.from_pylist(rows, schema=V3_CORPUS),
            root / "corpus" / f"test-{shard:05d}-of-{n_shards:05d}.parquet",
            row_group_size=64,
        )
    n_queries = n_pages // 8
    for config, schema, rows in (
        (
            "queries",
            V3_QUERIES,
            [
                {
                    "query_id": q,
                    "query": f"question {q} " + " ".join(random.Random(-q).choices(WORDS, k=12)),
                    "language": "english",
                }
                for q in range(n_queries)
            ],
        ),
        (
            "qrels",
            V3_QRELS,
            [
                {"query_id": q, "corpus_id": 8 * q + j, "score": 1 + j % 2}
                for q in range(n_queries)
                for j in range(1 + q % 3)
            ],
        ),
    ):
        (root / config).mkdir()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / config / "test-00000-of-00001.parquet")


WORDS = (
    "policy remote work annual leave pension salary training budget insurance report staff overtime review "
    "promotion recruitment diversity mobility allowance table figure chart total percent year"
).split()


def child_import(source: Path, dest: Path) -> None:
    from vldocir.importers.base import import_benchmark
    from vldocir.importers.vidore import ViDoReImporter

    tick = time.perf_counter()
    bench = import_benchmark(ViDoReImporter(source=str(source)), dest, name="bench-import")
    print(
        json.dumps(
            {
                "wall_s": time.perf_counter() - tick,
                "pages": bench.info["counts"]["pages"],
                "queries": bench.info["counts"]["queries"],
            }
        )
    )


def _run(args: list[str]) -> tuple[dict, float]:
    """Run this script as a child with ``args``; its JSON line and its own peak RSS in MB."""
    process = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    out = process.stdout.read()
    process.stdout.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_import: child {' '.join(args)} failed")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=13_000, help="N (the second import has 2N pages)")
    parser.add_argument("--smoke", action="store_true", help="N=300: seconds, for tests")
    parser.add_argument("--workdir", type=Path, default=None, help="where corpora and imports go (removed at the end)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--words", type=int, default=150, help="markdown words per page (150: about 1 KB)")
    parser.add_argument("--child-generate", nargs=3, metavar=("DIR", "PAGES", "WORDS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-import", nargs=2, metavar=("SOURCE", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_generate:
        generate(Path(args.child_generate[0]), int(args.child_generate[1]), int(args.child_generate[2]))
        print("{}")
        return 0
    if args.child_import:
        child_import(Path(args.child_import[0]), Path(args.child_import[1]))
        return 0

    n = 300 if args.smoke else args.pages
    workdir = Path(tempfile.mkdtemp(prefix="bench-import-", dir=args.workdir))
    load_before = os.getloadavg()
    figures: dict = {"load_before": [round(x, 2) for x in load_before], "sizes": []}
    try:
        for pages in (n, 2 * n):
            source, dest = workdir / f"corpus-{pages}", workdir / f"import-{pages}"
            _run(["--child-generate", str(source), str(pages), str(args.words)])
            image_kb = sum(f.stat().st_size for f in (source / "corpus").iterdir()) / pages / 1024
            result, rss_mb = _run(["--child-import", str(source), str(dest)])
            figures["sizes"].append(
                {
                    "pages": pages,
                    "wall_s": round(result["wall_s"], 2),
                    "pages_per_s": round(result["pages"] / result["wall_s"], 1),
                    "peak_rss_mb": round(rss_mb, 1),
                    "imported_pages": result["pages"],
                    "corpus_kb_per_page": round(image_kb, 1),
                }
            )
            print(
                f"{pages:>7} pages: import {result['wall_s']:7.1f} s ({result['pages'] / result['wall_s']:6.0f} "
                f"pages/s), peak RSS {rss_mb:7.1f} MB",
                flush=True,
            )
            shutil.rmtree(source)
            shutil.rmtree(dest)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    small, large = figures["sizes"]
    ratio = large["peak_rss_mb"] / small["peak_rss_mb"]
    growth_kb = (large["peak_rss_mb"] - small["peak_rss_mb"]) * 1024 / (large["pages"] - small["pages"])
    figures.update(words_per_page=args.words, rss_growth_kb_per_page=round(growth_kb, 2))
    figures.update(
        rss_ratio=round(ratio, 3),
        target_ratio=TARGET_RATIO,
        ok=ratio <= TARGET_RATIO,
        load_after=[round(x, 2) for x in os.getloadavg()],
        cpus=os.cpu_count(),
    )
    print(
        f"peak RSS at {large['pages']} / at {small['pages']} pages: {ratio:.3f}x (target <= {TARGET_RATIO}x): "
        f"{'PASS' if figures['ok'] else 'FAIL'}"
    )
    print(
        f"peak RSS grows {growth_kb:.2f} KB per added page; the corpus holds {large['corpus_kb_per_page']} KB per "
        "page (image and text): neither images nor texts are held, only ids, numbers, paths and sizes"
    )
    print(f"load average before {figures['load_before']}, after {figures['load_after']} ({os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
