"""Document-context vectors: peak memory flat in the number of documents, seconds per document,
and the speed-up of worker processes.

    .venv/bin/python perf/bench_context.py                 # 1,000 and 2,000 documents, n_ctx 1024: a few minutes
    .venv/bin/python perf/bench_context.py --docs 200      # quicker

It writes two synthetic page stores to a temporary directory, N and 2N documents (the first N the
same in both), each document ``--pages`` pages (+-20%) of ``--tokens`` tokens (+-20%) x ``--dim``
random unit fp16 vectors, in shards of ``--shard-size`` pages, as the embedding store holds them.
Then each build runs in a fresh subprocess (so that its peak RSS, ``ru_maxrss``, is its own),
into an empty cache:

1. N documents, ``workers=1`` (in process: every byte the build touches is this process's);
2. 2N documents, ``workers=1``;
3. N documents, ``workers=--workers`` (default 2): the speed-up over 1., measured in the same run.

It prints, per build, seconds, seconds per document, CPU seconds (workers included), the
output's size, and peak RSS (the process's own, and the largest worker's); then PASS when the
peak RSS at 2N is within 10% of that at N (the build's memory does not grow with the corpus),
FAIL otherwise (exit 1).
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


def _rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _layout(args, docs: int):
    """Page ids (``d00000-p000``), pages per document and tokens per page, the same for the first
    documents whatever ``docs``: each document draws from its own seeded generator."""
    import numpy as np

    page_ids, tokens = [], []
    for doc in range(docs):
        rng = np.random.default_rng([args.seed, doc])
        pages = int(rng.integers(round(args.pages * 0.8), round(args.pages * 1.2) + 1))
        page_ids += [f"d{doc:05d}-p{page:03d}" for page in range(pages)]
        tokens += rng.integers(round(args.tokens * 0.8), round(args.tokens * 1.2) + 1, size=pages).tolist()
    return page_ids, tokens


def worker_store(args) -> dict:
    """Write the page store of ``args.docs`` documents under ``<tmp>/store-<docs>``."""
    import numpy as np

    from vldocir.cache import ArtifactCache
    from vldocir.retrieval.embeddings import finish_if_complete, open_page_store, write_ragged

    page_ids, tokens = _layout(args, args.docs)
    store = open_page_store(
        ArtifactCache(Path(args.tmp) / f"store-{args.docs}"), "synthetic", {}, page_ids, args.shard_size, "float16"
    )
    for shard in range(store.n_shards):
        start, stop = store.shard_range(shard)
        items = []
        for page in range(start, stop):
            rng = np.random.default_rng([args.seed, 1, int(page_ids[page][1:6]), int(page_ids[page][-3:])])
            vectors = rng.standard_normal((tokens[page], args.dim), dtype=np.float32)
            items.append(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        store.shard_dir(shard).mkdir(parents=True)
        write_ragged(store.shard_dir(shard), items, "float16", {"first_page": start})
    finish_if_complete(store, {})
    return {"pages": len(page_ids), "tokens": int(sum(tokens)), "shards": store.n_shards}


def worker_build(args) -> dict:
    """Build the context vectors of the store of ``args.docs`` documents into an empty cache."""
    import numpy as np

    from vldocir.cache import ArtifactCache
    from vldocir.retrieval.context import document_context_vectors
    from vldocir.retrieval.embeddings import PageEmbeddingStore

    root = Path(args.tmp) / f"store-{args.docs}"
    spec = json.loads((root / "page-embeddings" / "synthetic" / "store.json").read_text())
    store = PageEmbeddingStore(
        root / "page-embeddings" / "synthetic", spec["n_pages"], spec["shard_size"], spec["dtype"]
    )
    docs = [page_id.split("-p")[0] for page_id in store.page_ids()]
    doc_ids = list(dict.fromkeys(docs))
    position = {doc: i for i, doc in enumerate(doc_ids)}
    page_doc = np.fromiter((position[doc] for doc in docs), dtype=np.int64, count=len(docs))
    cache = ArtifactCache(Path(args.tmp) / f"cache-{args.docs}-w{args.workers}")
    rss_before = _rss_mb()
    stats: dict = {}
    cpu_before = _cpu_s()
    tick = time.perf_counter()
    built = document_context_vectors(
        store, doc_ids, page_doc, cache, args.n_ctx, 20, 0, workers=args.workers, progress=False, stats=stats
    )
    seconds = time.perf_counter() - tick
    cpu = _cpu_s() - cpu_before
    output = Path(built.vectors.source, "vectors.npy").stat().st_size
    return {
        "docs": len(doc_ids),
        "workers": stats["doc_context"]["workers"],
        "seconds": seconds,
        "s_per_doc": seconds / len(doc_ids),
        "cpu_s": cpu,
        "output_mb": output / 2**20,
        "peak_rss_mb": _rss_mb(),
        "rss_before_build_mb": rss_before,
        "worker_peak_rss_mb": _rss_mb(resource.RUSAGE_CHILDREN),
        "stats": stats["doc_context"],
    }


WORKERS = {"store": worker_store, "build": worker_build}


def run_worker(args, name: str, docs: int, workers: int = 1) -> dict:
    argv = [sys.executable, __file__, "--worker", name, "--docs", str(docs), "--workers", str(workers)]
    for key in ("pages", "tokens", "dim", "shard_size", "n_ctx", "seed", "tmp"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1000, help="N: documents of the smaller store (the larger has 2N)")
    parser.add_argument("--pages", type=int, default=13, help="pages per document, on average")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per page, on average")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--shard-size", type=int, default=1024, help="pages per page shard")
    parser.add_argument("--n-ctx", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2, help="workers of the parallel build (run 3.)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where the temporary stores are written"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return

    print(
        f"documents of ~{args.pages} pages x ~{args.tokens} tokens x {args.dim} dims (fp16), shards of "
        f"{args.shard_size} pages, n_ctx={args.n_ctx}; {_load()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        args.tmp = tmp
        for docs in (args.docs, 2 * args.docs):
            store = run_worker(args, "store", docs)
            print(
                f"store of {docs} documents: {store['pages']} pages, {store['tokens']} tokens, "
                f"{store['shards']} shards",
                flush=True,
            )
        results = {"load_before": _load()}
        for name, docs, workers in (
            ("n", args.docs, 1),
            ("2n", 2 * args.docs, 1),
            ("n_parallel", args.docs, args.workers),
        ):
            r = results[name] = run_worker(args, "build", docs, workers)
            print(
                f"{r['docs']:>6} documents, workers={r['workers']}: {r['seconds']:7.1f} s  "
                f"{r['s_per_doc']:.4f} s/doc  {r['cpu_s']:6.1f} CPU s  "
                f"output {r['output_mb']:.0f} MB  peak RSS {r['peak_rss_mb']:.0f} MB "
                f"({r['rss_before_build_mb']:.0f} MB before the build"
                + (f"; largest worker {r['worker_peak_rss_mb']:.0f} MB)" if r["workers"] > 1 else ")"),
                flush=True,
            )
        results["load_after"] = _load()
    ratio = results["2n"]["peak_rss_mb"] / results["n"]["peak_rss_mb"]
    speedup = results["n"]["seconds"] / results["n_parallel"]["seconds"]
    results.update(rss_ratio=ratio, speedup=speedup, passed=ratio <= 1.10)
    print(
        f"\nworkers={results['n_parallel']['workers']} vs 1 at {args.docs} documents: {speedup:.2f}x faster; {_load()}"
    )
    if results["n_parallel"]["workers"] < args.workers:
        print(
            f"(fewer workers than --workers {args.workers}: the build starts at most one per "
            "vldocir.retrieval.context.MIN_DOCS_PER_WORKER documents)"
        )
    print(
        f"{'PASS' if ratio <= 1.10 else 'FAIL'}: peak RSS at {2 * args.docs} documents is {ratio:.3f}x that at "
        f"{args.docs} (flat within 10%: {ratio <= 1.10})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))
    sys.exit(0 if ratio <= 1.10 else 1)


if __name__ == "__main__":
    main()
