"""Exact MaxSim search on CPU against colpali-engine's score_multi_vector and plain fp32 matmul.

    uv run python perf/bench_maxsim.py                    # 256 q x 32 tok vs 2,000 pages x 768 tok x 128
    uv run python perf/bench_maxsim.py --pages 20000      # the issue's full size (about 1 hour here)

Each measurement runs in its own subprocess, so that its peak memory (ru_maxrss) is its own:

1. ``matmul``: the machine's fp32 matrix-product rate, on a 4096^3 product and on the shape one
   search block uses; and a 3 s 4096^3 measurement just before and after each contender (the
   rate drifts on shared machines), whose mean gives the "adjacent" ratio.
2. ``ours`` at N and 2N pages: :func:`vldocir.retrieval.search.exact_search` over a sharded,
   memory-mapped fp16 store written to a temporary directory (as the embedding store holds it),
   top-100 output only.
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
    """Write ``pages`` random pages as fp16 shards (vectors.npy + offsets.npy), like the store."""
    import numpy as np

    from vldocir.retrieval.embeddings import write_ragged

    rng = np.random.default_rng(0)
    for shard, start in enumerate(range(0, pages, args.shard_size)):
        n = min(args.shard_size, pages - start)
        items = [rng.standard_normal((args.page_tokens, args.dim), dtype=np.float32) for _ in range(n)]
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


def _matmul_rate(rows: int, inner: int, cols: int, seconds: float = 10.0) -> float:
    import torch

    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    for _ in range(3):
        a @ b
    repeats, tick = 0, time.perf_counter()
    while time.perf_counter() - tick < seconds:
        a @ b
        repeats += 1
    return 2 * rows * inner * cols * repeats / (time.perf_counter() - tick) / 1e9


def worker_matmul(args) -> dict:
    """fp32 GEMM rates: a large square product, and the product shape one search block uses."""
    rows = args.query_batch_size * args.query_tokens
    cols = max(args.page_block_tokens // args.page_tokens, 1) * args.page_tokens
    return {
        "square_gflops": _matmul_rate(4096, 4096, 4096),
        "block_gflops": _matmul_rate(rows, args.dim, cols),
        "block_shape": [rows, args.dim, cols],
        "peak_rss_mb": _rss_mb(),
    }


def worker_store(args) -> dict:
    _make_store(args, args.pages, Path(args.store))
    return {"peak_rss_mb": _rss_mb()}


def worker_ours(args) -> dict:
    from vldocir.retrieval.embeddings import read_ragged
    from vldocir.retrieval.search import exact_search

    queries = _queries(args)
    shard_dirs = sorted(Path(args.store).iterdir())[: -(-args.pages // args.shard_size)]
    base_rss = _rss_mb()
    tick = time.perf_counter()
    top = exact_search(
        queries,
        (read_ragged(d, first_index=i * args.shard_size) for i, d in enumerate(shard_dirs)),
        depth=100,
        query_batch_size=args.query_batch_size,
        page_block_tokens=args.page_block_tokens,
        device="cpu",
        progress=False,
    )
    seconds = time.perf_counter() - tick
    return {
        "gflops": _flops(args, args.pages) / seconds / 1e9,
        "seconds": seconds,
        "peak_rss_mb": _rss_mb(),
        "rss_before_search_mb": base_rss,
        "output_shape": list(top.indices.shape),
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
    torch.topk(scores, 100, dim=1)
    seconds = time.perf_counter() - tick
    return {
        "gflops": _flops(args, args.pages) / seconds / 1e9,
        "seconds": seconds,
        "peak_rss_mb": _rss_mb(),
        "rss_before_search_mb": base_rss,
        "output_shape": list(scores.shape),
    }


def worker_square(args) -> dict:
    return {"gflops": _matmul_rate(4096, 4096, 4096, seconds=3)}


WORKERS = {
    "store": worker_store,
    "matmul": worker_matmul,
    "square": worker_square,
    "ours": worker_ours,
    "colpali": worker_colpali,
}


def run_with_adjacent_matmul(args, name: str, pages: int) -> dict:
    """Run a contender between two 3 s 4096^3 matmul measurements (this machine's rate drifts)."""
    before = run_worker(args, "square", pages)["gflops"]
    result = run_worker(args, name, pages)
    after = run_worker(args, "square", pages)["gflops"]
    return {**result, "adjacent_matmul_gflops": (before + after) / 2}


def run_worker(args, name: str, pages: int) -> dict:
    argv = [sys.executable, __file__, "--worker", name, "--pages", str(pages)]
    for key in (
        "queries",
        "query_tokens",
        "page_tokens",
        "dim",
        "shard_size",
        "query_batch_size",
        "page_block_tokens",
        "store",
    ):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
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
        "--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where the temporary fp16 store is written"
    )
    parser.add_argument("--store", default="", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return

    import torch

    print(
        f"{args.queries} queries x {args.query_tokens} tokens vs pages x {args.page_tokens} tokens x {args.dim} dims, "
        f"fp16 store, top-100; torch {torch.__version__}, {torch.get_num_threads()} threads",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        args.store = tmp
        run_worker(args, "store", 2 * args.pages)
        results = measure(args)
    print(json.dumps(results))


def measure(args) -> dict:
    results = {"matmul": run_worker(args, "matmul", args.pages)}
    matmul = results["matmul"]
    peak = max(matmul["square_gflops"], matmul["block_gflops"])
    rows, inner, cols = matmul["block_shape"]
    print(
        f"fp32 matmul: {matmul['square_gflops']:.1f} GFLOP/s (4096^3), {matmul['block_gflops']:.1f} GFLOP/s "
        f"({rows} x {inner} @ {inner} x {cols}, one search block); ratios below use the higher, {peak:.1f}",
        flush=True,
    )
    for pages in (args.pages, 2 * args.pages):
        r = run_with_adjacent_matmul(args, "ours", pages)
        results[f"ours_{pages}"] = r
        print(
            f"ours, {pages:>6} pages: {r['seconds']:7.1f} s  {r['gflops']:6.1f} GFLOP/s  "
            f"({r['gflops'] / peak:.0%} of matmul; {r['gflops'] / r['adjacent_matmul_gflops']:.0%} of the 4096^3 "
            f"matmul measured just before and after)  peak RSS {r['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    colpali_pages = args.colpali_pages or args.pages
    r = run_with_adjacent_matmul(args, "colpali", colpali_pages)
    results["colpali"] = r
    print(
        f"colpali-engine score_multi_vector, {colpali_pages} pages: {r['seconds']:7.1f} s  {r['gflops']:6.1f} GFLOP/s  "
        f"({r['gflops'] / r['adjacent_matmul_gflops']:.0%} of the adjacent matmul)  "
        f"peak RSS {r['peak_rss_mb']:.0f} MB (pages alone {r['rss_before_search_mb']:.0f} MB; "
        f"+{r['peak_rss_mb'] - r['rss_before_search_mb']:.0f} MB while scoring)",
        flush=True,
    )
    ours = results[f"ours_{args.pages}"]
    print(
        f"\nours / matmul: {ours['gflops'] / peak:.2f} "
        f"(adjacent: {ours['gflops'] / ours['adjacent_matmul_gflops']:.2f})   "
        f"ours / colpali-engine: {ours['gflops'] / r['gflops']:.2f}x   "
        f"peak RSS at 2N / N pages: {results[f'ours_{2 * args.pages}']['peak_rss_mb'] / ours['peak_rss_mb']:.2f}"
    )
    return results


if __name__ == "__main__":
    main()
