"""Exact MaxSim search on CPU against colpali-engine's score_multi_vector and plain fp32 matmul.

    .venv/bin/python perf/bench_maxsim.py                 # 256 q x 32 tok vs 2,000 pages x 768 tok x 128
    .venv/bin/python perf/bench_maxsim.py --threads 2     # one thread count only (default: 1 and N)
    .venv/bin/python perf/bench_maxsim.py --pages 20000   # the issue's full size (about 1 hour here)
    .venv/bin/python perf/bench_maxsim.py --tile-scores 131072,524288  # and ours at other tile sizes
    .venv/bin/python perf/bench_maxsim.py --smoke         # tiny sizes, seconds: the code path only (CI)

For each ``--threads`` count (default 1 and the job's cores, :func:`vldocir.threads.job_cpus`), each
measurement runs in its own subprocess with that many torch threads, so that its peak memory
(ru_maxrss) is its own; the load average is printed before and after each:

1. ``matmul``: the machine's fp32 matrix-product rate, on a 4096^3 product and on the shape of the
   products the search computes on CPU (one tile, :func:`vldocir.retrieval.search._tile_steps`);
   and a 3 s 4096^3 measurement just before and after each contender (the rate drifts on shared
   machines), whose mean gives the "adjacent" ratio.
2. ``ours`` at N and 2N pages: :func:`vldocir.retrieval.search.exact_search` over a sharded,
   memory-mapped fp16 store written to a temporary directory (as the embedding store holds it),
   top-100 output only; with ``--tile-scores``, also at N pages with each of those tile sizes
   (:data:`vldocir.retrieval.search.CPU_TILE_SCORES` is the default's).
3. ``colpali``: ``score_multi_vector`` on the same pages (given as fp32 tensors, its fast path on
   CPU; the upcast is not timed) on the first ``--colpali-pages`` pages; it returns the dense
   (queries x pages) score matrix.

GFLOP/s counts the useful MaxSim arithmetic, 2 x queries x query tokens x pages x page tokens x dim,
for every contender. Ratios are printed against the matmul rate and against colpali-engine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _flops(args, pages: int) -> float:
    return 2.0 * args.queries * args.query_tokens * pages * args.page_tokens * args.dim


def _make_store(args, pages: int, root: Path) -> None:
    """Write ``pages`` random pages as fp16 shards (vectors.npy + offsets.npy), like the store; the
    first ``args.pages`` fill whole shards of their own, so that a search of N pages reads exactly
    those (the pages colpali-engine gets: the same random stream)."""
    import numpy as np

    from vldocir.retrieval.embeddings import write_ragged

    rng = np.random.default_rng(0)
    bounds = [
        (start, min(start + args.shard_size, part_stop))
        for part_start, part_stop in ((0, min(args.pages, pages)), (args.pages, pages))
        for start in range(part_start, part_stop, args.shard_size)
    ]
    for shard, (start, stop) in enumerate(bounds):
        items = [rng.standard_normal((args.page_tokens, args.dim), dtype=np.float32) for _ in range(stop - start)]
        directory = root / f"{shard:05d}"
        directory.mkdir(parents=True)
        write_ragged(directory, items, "float16", {})


def _queries(args):
    import numpy as np

    from vldocir.retrieval.vectors import RaggedVectors

    rng = np.random.default_rng(1)
    return RaggedVectors.from_list(
        [rng.standard_normal((args.query_tokens, args.dim), dtype=np.float32) for _ in range(args.queries)]
    )


def _matmul_rate(rows: int, inner: int, cols: int, seconds: float) -> float:
    """GFLOP/s of ``torch.mm`` into a preallocated output, repeated for ``seconds``."""
    import torch

    a, b, out = torch.randn(rows, inner), torch.randn(inner, cols), torch.empty(rows, cols)
    for _ in range(3):
        torch.mm(a, b, out=out)
    repeats, tick = 0, time.perf_counter()
    while time.perf_counter() - tick < seconds:
        torch.mm(a, b, out=out)
        repeats += 1
    return 2 * rows * inner * cols * repeats / (time.perf_counter() - tick) / 1e9


def _tile_shape(args) -> list[int]:
    """(rows, inner, cols) of the products exact_search computes on CPU for these sizes: page
    tokens by query tokens (:func:`vldocir.retrieval.search._product`)."""
    from vldocir.retrieval.search import CPU_TILE_SCORES, _tile_steps

    pages_per_block = max(args.page_block_tokens // args.page_tokens, 1)
    queries, pages, page_tokens = _tile_steps(
        args.query_batch_size, args.query_tokens, pages_per_block, args.page_tokens, CPU_TILE_SCORES
    )
    rows = pages * page_tokens if page_tokens == args.page_tokens else page_tokens
    return [rows, args.dim, queries * args.query_tokens]


def worker_matmul(args) -> dict:
    """fp32 GEMM rates: a large square product, and the product shape the search computes."""
    rows, inner, cols = _tile_shape(args)
    return {
        "square_gflops": _matmul_rate(args.square, args.square, args.square, args.matmul_seconds),
        "tile_gflops": _matmul_rate(rows, inner, cols, args.matmul_seconds),
        "tile_shape": [rows, inner, cols],
        "peak_rss_mb": _rss_mb(),
    }


def worker_ours(args) -> dict:
    from vldocir.retrieval.embeddings import read_ragged
    from vldocir.retrieval.search import exact_search

    queries = _queries(args)

    def shards():  # the store's shards in order, up to ``args.pages`` pages (whole shards: see _make_store)
        first = 0
        for directory in sorted(Path(args.store).iterdir()):
            if first >= args.pages:
                return
            shard = read_ragged(directory, first_index=first)
            first += len(shard)
            yield shard

    base_rss = _rss_mb()
    tick = time.perf_counter()
    top = exact_search(
        queries,
        shards(),
        depth=100,
        query_batch_size=args.query_batch_size,
        page_block_tokens=args.page_block_tokens,
        device="cpu",
        progress=False,
        cpu_tile_scores=args.tile or None,
    )
    seconds = time.perf_counter() - tick
    return {
        "gflops": _flops(args, args.pages) / seconds / 1e9,
        "seconds": seconds,
        "peak_rss_mb": _rss_mb(),
        "rss_before_search_mb": base_rss,
        "output_shape": list(top.indices.shape),
        "top10": top.indices[:, :10].tolist(),
    }


def worker_colpali(args) -> dict:
    import numpy as np
    import torch
    from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

    rng = np.random.default_rng(0)
    pages = [
        torch.from_numpy(rng.standard_normal((args.page_tokens, args.dim), dtype=np.float32).astype(np.float16)).float()
        for _ in range(args.pages)
    ]
    queries = _queries(args)
    qs = [torch.from_numpy(np.asarray(queries.item(i))) for i in range(len(queries))]
    base_rss = _rss_mb()
    tick = time.perf_counter()
    scores = BaseVisualRetrieverProcessor.score_multi_vector(qs, pages, batch_size=128, device="cpu")
    top = torch.topk(scores, min(100, args.pages), dim=1)
    seconds = time.perf_counter() - tick
    return {
        "gflops": _flops(args, args.pages) / seconds / 1e9,
        "seconds": seconds,
        "peak_rss_mb": _rss_mb(),
        "rss_before_search_mb": base_rss,
        "output_shape": list(scores.shape),
        "top10": top.indices[:, :10].tolist(),
    }


def worker_square(args) -> dict:
    return {"gflops": _matmul_rate(args.square, args.square, args.square, args.matmul_seconds * 0.3)}


WORKERS = {
    "matmul": worker_matmul,
    "square": worker_square,
    "ours": worker_ours,
    "colpali": worker_colpali,
}


def run_with_adjacent_matmul(args, name: str, pages: int) -> dict:
    """Run a contender between two short square matmul measurements (this machine's rate drifts;
    ``--smoke`` measures the matmul once, not around each contender)."""
    if args.smoke:
        return {**run_worker(args, name, pages), "adjacent_matmul_gflops": args.square_gflops}
    before = run_worker(args, "square", pages)["gflops"]
    result = run_worker(args, name, pages)
    after = run_worker(args, "square", pages)["gflops"]
    return {**result, "adjacent_matmul_gflops": (before + after) / 2}


WORKER_OPTIONS = (
    "queries",
    "query_tokens",
    "page_tokens",
    "dim",
    "shard_size",
    "query_batch_size",
    "page_block_tokens",
    "square",
    "matmul_seconds",
    "store",
    "tile",
)


def run_worker(args, name: str, pages: int) -> dict:
    """One measurement in a fresh process with ``args.worker_threads`` torch threads; the load
    average before and after it is recorded beside its figures."""
    argv = [sys.executable, __file__, "--worker", name, "--pages", str(pages), "--threads", str(args.worker_threads)]
    for key in WORKER_OPTIONS:
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    load_before = os.getloadavg()[0]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load": [load_before, os.getloadavg()[0]]}


SMOKE = {
    "queries": 8,
    "query_tokens": 8,
    "pages": 40,  # not a multiple of the shard size
    "page_tokens": 32,
    "dim": 16,
    "shard_size": 16,
    "query_batch_size": 4,
    "page_block_tokens": 64,
    "square": 256,
    "matmul_seconds": 0.2,
}


def positive_integers(text: str) -> list[int]:
    """``--tile-scores``: comma-separated positive integers (argparse turns a ValueError into one line)."""
    values = [int(t) for t in text.split(",") if t.strip()]
    if any(v <= 0 for v in values):
        raise ValueError(text)
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--query-tokens", type=int, default=32)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--page-tokens", type=int, default=768)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--shard-size", type=int, default=512)
    parser.add_argument("--query-batch-size", type=int, default=32)
    parser.add_argument("--page-block-tokens", type=int, default=4096)
    parser.add_argument("--colpali-pages", type=int, default=None, help="pages for colpali-engine (default: --pages)")
    parser.add_argument(
        "--threads", default=None, help="torch threads, comma-separated counts (default: 1 and the job's cores)"
    )
    parser.add_argument("--square", type=int, default=4096, help="size of the square matmul peer")
    parser.add_argument("--matmul-seconds", type=float, default=10.0, help="seconds per matmul-rate measurement")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks the code path, not the rates"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where the temporary fp16 store is written"
    )
    parser.add_argument(
        "--tile-scores",
        type=positive_integers,
        default=[],
        help="also run ours at N pages with these tile sizes (comma-separated scores per product, e.g. 131072,524288)",
    )
    parser.add_argument("--store", default="", help=argparse.SUPPRESS)
    parser.add_argument("--tile", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    if args.worker:
        import torch

        torch.set_num_threads(int(args.threads))
        print(json.dumps(WORKERS[args.worker](args)))
        return

    import torch

    from vldocir.threads import job_cpus

    default = [1] if args.smoke else sorted({1, job_cpus()})
    counts = [int(t) for t in args.threads.split(",")] if args.threads else default
    print(
        f"{args.queries} queries x {args.query_tokens} tokens vs pages x {args.page_tokens} tokens x {args.dim} dims, "
        f"fp16 store, top-100; torch {torch.__version__}; threads {counts} ({job_cpus()} cores available); "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    figures = {"config": {k: v for k, v in vars(args).items() if k not in ("store", "worker", "json")}, "runs": {}}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        args.store = tmp
        _make_store(args, args.pages if args.smoke else 2 * args.pages, Path(tmp))
        for threads in counts:
            args.worker_threads = threads
            print(f"\n--- {threads} thread(s) ---", flush=True)
            figures["runs"][str(threads)] = measure(args)
    print(json.dumps({t: _summary(r) for t, r in figures["runs"].items()}))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def _summary(results: dict) -> dict:
    return {k: v for k, v in results.items() if k.startswith("ratio") or k == "top10_agree"}


def _load(r: dict) -> str:
    return f"load {r['load'][0]:.1f} -> {r['load'][1]:.1f}"


def measure(args) -> dict:
    from vldocir.retrieval.search import CPU_TILE_SCORES

    results = {"matmul": run_worker(args, "matmul", args.pages)}
    matmul = results["matmul"]
    peak = max(matmul["square_gflops"], matmul["tile_gflops"])
    rows, inner, cols = matmul["tile_shape"]
    args.square_gflops = matmul["square_gflops"]
    print(
        f"fp32 matmul: {matmul['square_gflops']:.1f} GFLOP/s ({args.square}^3), {matmul['tile_gflops']:.1f} GFLOP/s "
        f"({rows} x {inner} @ {inner} x {cols}, the search's product); ratios below use the higher, {peak:.1f}  "
        f"({_load(matmul)})",
        flush=True,
    )
    for pages in (args.pages,) if args.smoke else (args.pages, 2 * args.pages):  # 2N: is memory flat?
        r = run_with_adjacent_matmul(args, "ours", pages)
        results[f"ours_{pages}"] = r
        print(
            f"ours, {pages:>6} pages: {r['seconds']:7.1f} s  {r['gflops']:6.1f} GFLOP/s  "
            f"({r['gflops'] / peak:.0%} of matmul; {r['gflops'] / r['adjacent_matmul_gflops']:.0%} of the square "
            f"matmul measured just before and after)  peak RSS {r['peak_rss_mb']:.0f} MB  ({_load(r)})",
            flush=True,
        )
    for tile in args.tile_scores:  # the default against other tile sizes
        args.tile = tile
        r = results[f"ours_tile_{tile}"] = run_with_adjacent_matmul(args, "ours", args.pages)
        args.tile = 0
        default = results[f"ours_{args.pages}"]["top10"]
        r["top10_agree_default"] = sum(a == b for a, b in zip(r["top10"], default, strict=True)) / len(default)
        print(
            f"ours, {args.pages:>6} pages, tiles of {tile} scores (default {CPU_TILE_SCORES}): {r['seconds']:7.1f} s  "
            f"{r['gflops']:6.1f} GFLOP/s  ({r['gflops'] / peak:.0%} of matmul; "
            f"{r['gflops'] / r['adjacent_matmul_gflops']:.0%} of the adjacent matmul; top-10 as the default's on "
            f"{r['top10_agree_default']:.0%} of queries)  ({_load(r)})",
            flush=True,
        )
    colpali_pages = args.colpali_pages or args.pages
    r = run_with_adjacent_matmul(args, "colpali", colpali_pages)
    results["colpali"] = r
    print(
        f"colpali-engine score_multi_vector, {colpali_pages} pages: {r['seconds']:7.1f} s  {r['gflops']:6.1f} GFLOP/s  "
        f"({r['gflops'] / r['adjacent_matmul_gflops']:.0%} of the adjacent matmul)  "
        f"peak RSS {r['peak_rss_mb']:.0f} MB (pages alone {r['rss_before_search_mb']:.0f} MB; "
        f"+{r['peak_rss_mb'] - r['rss_before_search_mb']:.0f} MB while scoring)  ({_load(r)})",
        flush=True,
    )
    ours = results[f"ours_{args.pages}"]
    results["ratio_matmul"] = ours["gflops"] / peak
    results["ratio_adjacent"] = ours["gflops"] / ours["adjacent_matmul_gflops"]
    results["ratio_colpali"] = ours["gflops"] / r["gflops"]
    if not args.smoke:
        results["ratio_rss_2n_n"] = results[f"ours_{2 * args.pages}"]["peak_rss_mb"] / ours["peak_rss_mb"]
    if colpali_pages == args.pages:  # equal-length pages: colpali-engine's zero padding is inert
        results["top10_agree"] = sum(a == b for a, b in zip(ours["top10"], r["top10"], strict=True)) / len(
            ours["top10"]
        )
    print(
        f"ours / matmul: {results['ratio_matmul']:.2f} (adjacent: {results['ratio_adjacent']:.2f})   "
        f"ours / colpali-engine: {results['ratio_colpali']:.2f}x"
        + (f"   peak RSS at 2N / N pages: {results['ratio_rss_2n_n']:.2f}" if "ratio_rss_2n_n" in results else "")
        + (
            f"   top-10 equal to colpali-engine's on {results['top10_agree']:.0%} of queries"
            if "top10_agree" in results
            else ""
        )
    )
    for r in results.values():
        if isinstance(r, dict):
            r.pop("top10", None)
    return results


if __name__ == "__main__":
    main()
