"""Compressed and indexed late-interaction search (setting=compressed) against exact search on the
same page embeddings: storage, search time, peak memory, recall of exact search's top-k, and the
RecallAll@k change, with PASS/FAIL against the goal.

    .venv/bin/python perf/bench_compressed.py                  # 100,000 pages, 100 queries: ~30 minutes here
    .venv/bin/python perf/bench_compressed.py --pages 20000    # a few minutes
    .venv/bin/python perf/bench_compressed.py --smoke          # 2,000 pages of 24 tokens, 20 queries: seconds (CI)
    .venv/bin/python perf/bench_compressed.py --suite residuals   # PQ64x8 and SQ4 residuals, 16,384 centroids: ~1 hour

Data: synthetic, clustered and document-structured multi-vector pages written as fp16 shards of
1,024 pages (as the page-embedding store holds them) and memory-mapped back. A vocabulary of
``--topics`` unit topic directions has Zipf-like popularity (exponent 0.8), so popular topics are
shared by many documents and rankings have a graded tail; documents of 1 to 25 pages (13 on
average, as the paper's) draw ``--topics-per-doc`` topics; a page takes ``--topics-per-page`` of
its document's, each moved by a page-specific offset (its aspect), and each of its
``--page-tokens`` tokens is one of its aspects plus noise. A query has ``--query-tokens`` noisy
tokens of one page, or (every third query) of two pages of one document: the evidence, for
RecallAll@k ("all evidence pages in the top k").

Contenders, each built once (build time printed, not part of the search time) and searched with
``vldocir.retrieval.compressed.search.compressed_search``; exact is
``vldocir.retrieval.search.exact_search`` over the fp16 shards:

- codecs alone (every page scored, over decoded vectors): ``SQ8``, ``SQ4``, ``PQ64x8``;
- token pooling (colpali-engine's HierarchicalTokenPooler) with pool factor 2, fp16;
- the centroid index (``--n-centroids``) with MaxSim rescoring of the candidates over SQ8, SQ6 and
  fp16 vectors at several (nprobe, candidates).
- ``--suite residuals``: setting=compressed's defaults (PQ64x8-coded residuals, each token's
  offset from its page's bag mean, over 16,384 centroids; nprobe 1024, 4,000 candidates, 300
  rescored) and their neighbours in (nprobe, candidates, rescore), and SQ4-coded residuals: two
  builds, about 30 minutes each here.

Figures: storage (bytes on disk of what the search reads) and search compute as ratios to exact's
("x less"); compute is measured as the CPU seconds of the search (all threads) and shown with the
arithmetic ratio (page vectors scored per query token); peak memory is the peak anonymous RSS above
the level before the search (memory-mapped file pages left out). Exact runs before the contenders
and once more after; its time is the mean of the two runs (the load average is printed with both).
Projection at paper scale (388,548 pages of 768 tokens): storage of exact and of each contender
from its bytes per page vector, and the compute ratio assuming a contender's stage costs scale as
measured (index: candidates per query are fixed, so the ratio grows with the corpus).

Goal: a configuration with recall of exact top-100 >= 0.99 at >= 10x less search compute
(CPU seconds) and >= 3x less storage. This is a script, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "perf"))
from bench_hierarchical_memory import PeakSampler  # noqa: E402

PAPER_PAGES, REAL_PAGE_TOKENS = 388_548, 768
SHARD_PAGES = 1024
GOAL = {"recall@100": 0.99, "compute": 10.0, "storage": 3.0}


def log(message: str = "") -> None:
    print(message, flush=True)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_corpus(args, root: Path) -> dict:
    """Write the fp16 shards under ``root``; returns the shard directories, queries and evidence."""
    from vldocir.retrieval.embeddings import write_ragged
    from vldocir.retrieval.vectors import RaggedVectors

    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(1, 26, size=args.pages)
    n_docs = int(np.searchsorted(np.cumsum(sizes), args.pages)) + 1
    sizes = sizes[:n_docs]
    sizes[-1] -= int(sizes.sum()) - args.pages
    doc_of_page = np.repeat(np.arange(n_docs), sizes)
    topics = _unit(rng.standard_normal((args.topics, args.dim), dtype=np.float32))
    popularity = 1.0 / np.arange(1, args.topics + 1) ** 0.8
    popularity /= popularity.sum()
    doc_topics = np.stack(
        [rng.choice(args.topics, args.topics_per_doc, replace=False, p=popularity) for _ in range(n_docs)]
    )
    T, per_page = args.page_tokens, args.topics_per_page
    shard_dirs, tokens_of = [], {}
    evidence = []  # per query: its evidence pages
    for q in range(args.queries):
        first = int(rng.integers(args.pages))
        doc_pages = np.flatnonzero(doc_of_page == doc_of_page[first])
        if q % 3 == 2 and len(doc_pages) > 1:
            evidence.append(sorted({first, int(rng.choice(doc_pages[doc_pages != first]))}))
        else:
            evidence.append([first])
    wanted = {p for pages in evidence for p in pages}
    for shard, start in enumerate(range(0, args.pages, SHARD_PAGES)):
        n = min(SHARD_PAGES, args.pages - start)
        page_topics = np.stack(
            [rng.choice(doc_topics[doc_of_page[p]], per_page, replace=False) for p in range(start, start + n)]
        )
        aspects = _unit(topics[page_topics] + args.spread * _unit(rng.standard_normal((n, per_page, args.dim))))
        which = rng.integers(0, per_page, size=(n, T))
        tokens = np.take_along_axis(aspects, which[:, :, None], axis=1)
        tokens = _unit(tokens + args.noise * _unit(rng.standard_normal((n, T, args.dim))))
        for p in wanted & set(range(start, start + n)):
            tokens_of[p] = tokens[p - start]
        directory = root / f"{shard:05d}"
        directory.mkdir(parents=True)
        write_ragged(directory, list(tokens), "float16", {})
        shard_dirs.append(directory)
    queries = []
    for pages in evidence:
        split = np.array_split(np.arange(args.query_tokens), len(pages))
        picked = np.concatenate([tokens_of[p][rng.choice(T, len(s))] for p, s in zip(pages, split, strict=True)])
        queries.append(_unit(picked + 2 * args.noise * _unit(rng.standard_normal(picked.shape))))
    return {"shard_dirs": shard_dirs, "queries": RaggedVectors.from_list(queries), "evidence": evidence}


def open_shards(corpus: dict) -> list:
    from vldocir.retrieval.embeddings import read_ragged

    return [read_ragged(d, first_index=i * SHARD_PAGES) for i, d in enumerate(corpus["shard_dirs"])]


def setting_defaults() -> dict:
    """conf/setting/compressed.yaml's CompressedSearch arguments (threads left to --threads)."""
    from omegaconf import OmegaConf

    knobs = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/setting/compressed.yaml"))["retriever"]["model"]
    return {k: v for k, v in knobs["compressed"].items() if k not in ("_target_", "threads")}


def contenders(args) -> list[dict]:
    if args.configs:
        return json.loads(args.configs)
    K = args.n_centroids
    if args.smoke:
        return [  # the first must equal exact search: every page a candidate, fp16
            {"codec": "float16", "n_centroids": K, "candidates": args.pages},
            {"codec": "SQ8"},
            {"pool_factor": 2},
            {"codec": "SQ8", "n_centroids": K, "candidates": 300},
            {"codec": "SQ4", "n_centroids": K, "coded": "residuals", "candidates": 300},
            {"codec": "SQ4", "n_centroids": K, "coded": "residuals", "nprobe": 16, "candidates": 300, "rescore": 150},
        ]
    if args.suite == "residuals":  # setting=compressed's defaults (the first row) and their neighbours
        default = setting_defaults()
        sq4 = {**default, "codec": "SQ4"}
        return [
            default,
            {**default, "candidates": 2000},
            {**default, "nprobe": 512},
            {**default, "nprobe": 2048},
            {**default, "nprobe": 0},
            {**default, "rescore": 200},
            {**default, "rescore": 500},
            sq4,  # SQ4: scored on its codes, coarser
            {**sq4, "nprobe": 0, "candidates": 2000, "rescore": 0},  # every candidate rescored
        ]
    return [
        {"codec": "SQ8"},
        {"codec": "SQ4"},
        {"pool_factor": 2},
        {"codec": "float16", "n_centroids": K, "candidates": 2000},
        {"codec": "SQ8", "n_centroids": K, "candidates": 1000},
        {"codec": "SQ8", "n_centroids": K, "candidates": 2000},
        {"codec": "SQ8", "n_centroids": K, "candidates": 4000},
        {"codec": "SQ8", "n_centroids": K, "nprobe": 32, "candidates": 2000},
        {"codec": "SQ6", "n_centroids": K, "candidates": 2000},
        {"codec": "SQ4", "n_centroids": K, "candidates": 2000},
        {"pool_factor": 2, "codec": "SQ8", "n_centroids": K, "candidates": 2000},
    ]


def _label(config: dict) -> str:
    parts = [config.get("codec", "float16") + (" residuals" if config.get("coded") == "residuals" else "")]
    if config.get("pool_factor", 1) > 1:
        parts.append(f"pool{config['pool_factor']}")
    if config.get("n_centroids"):
        probe = f" nprobe={config['nprobe']}" if config.get("nprobe") else ""
        rescore = f" rescore={config['rescore']}" if config.get("rescore") else ""
        parts.append(f"index K={config['n_centroids']}{probe} cand={config['candidates']}{rescore}")
    return " ".join(parts)


def _timed_search(fn):
    """(result, wall s, CPU s of this process, peak anonymous RSS above the start, bytes)."""
    wall, cpu = time.perf_counter(), time.process_time()
    with PeakSampler() as peak:
        start = peak.peak
        result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu, peak.peak - start


def _recall_of(top, exact, k: int) -> float:
    return float(
        np.mean(
            [
                len(set(a[:k][a[:k] >= 0]) & set(b[:k][b[:k] >= 0])) / k
                for a, b in zip(top.indices, exact.indices, strict=True)
            ]
        )
    )


def _recall_all(top, evidence: list[list[int]], k: int) -> float:
    return float(np.mean([set(pages) <= set(row[:k]) for row, pages in zip(top.indices, evidence, strict=True)]))


def run(args) -> dict:
    import torch

    from vldocir.retrieval.compressed import CompressedSearch
    from vldocir.retrieval.compressed.build import build_compressed
    from vldocir.retrieval.compressed.pages import CompressedPages
    from vldocir.retrieval.search import exact_search

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-compressed-") as tmp:
        root = Path(tmp)
        tick = time.perf_counter()
        corpus = make_corpus(args, root / "store")
        shards = open_shards(corpus)
        queries, evidence = corpus["queries"], corpus["evidence"]
        n_vectors = sum(len(s.vectors) for s in shards)
        exact_bytes = sum(f.stat().st_size for d in corpus["shard_dirs"] for f in d.iterdir())
        log(f"corpus: {args.pages:,} pages, {n_vectors:,} vectors of {args.dim} dims, {len(queries)} queries; "
            f"written in {time.perf_counter() - tick:.0f} s; {args.threads} thread(s)")  # fmt: skip

        def exact():
            return exact_search(queries, shards, args.depth, device="cpu", progress=False)

        exact_top, wall0, cpu0, peak0 = _timed_search(exact)
        log(f"exact: {wall0:.2f} s wall, {cpu0:.2f} CPU-s, load {os.getloadavg()[0]:.2f}")
        rows = []
        built: dict[str, tuple] = {}
        for config in contenders(args):
            settings = CompressedSearch(**config, threads=args.threads)
            build_key = json.dumps(settings.build_params(), sort_keys=True)
            if build_key not in built:
                out = root / f"c{len(built)}"
                out.mkdir()
                report = build_compressed(shards, args.pages, out, settings, progress=False)
                built[build_key] = (CompressedPages.open(out), report)
            pages, report = built[build_key]
            stats: dict = {}
            top, wall, cpu, peak = _timed_search(partial(settings.search, queries, pages, args.depth, False, stats))
            per_vector = (report["bytes"] - pages.meta.get("n_centroids", 0) * args.dim * 4) / max(n_vectors, 1)
            rows.append(
                {
                    "config": _label(config),
                    **config,
                    "build_s": report["build_s"],
                    "bytes": report["bytes"],
                    "storage_x": exact_bytes / report["bytes"],
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "peak_mb": peak / 2**20,
                    "arith_x": n_vectors / max(stats["scored_vectors"], 1),
                    "recall@10": _recall_of(top, exact_top, 10),
                    "recall@100": _recall_of(top, exact_top, min(100, args.depth)),
                    "recallall@10": _recall_all(top, evidence, 10) - _recall_all(exact_top, evidence, 10),
                    "recallall@100": _recall_all(top, evidence, 100) - _recall_all(exact_top, evidence, 100),
                    "paper_bytes_per_vector": per_vector,
                }
            )
            log(f"  {rows[-1]['config']}: built in {report['build_s']:.0f} s, searched in {wall:.2f} s")
        exact_again, wall1, cpu1, peak1 = _timed_search(exact)
        assert np.array_equal(exact_again.indices, exact_top.indices)
        log(f"exact again: {wall1:.2f} s wall, {cpu1:.2f} CPU-s, load {os.getloadavg()[0]:.2f}")
        exact_cpu = (cpu0 + cpu1) / 2
        for row in rows:
            row["compute_x"] = exact_cpu / max(row["cpu_s"], 1e-9)
            row["pass"] = (
                row["recall@100"] >= GOAL["recall@100"]
                and row["compute_x"] >= GOAL["compute"]
                and row["storage_x"] >= GOAL["storage"]
            )
        return {
            "pages": args.pages,
            "vectors": n_vectors,
            "queries": len(queries),
            "threads": args.threads,
            "exact": {
                "bytes": exact_bytes,
                "wall_s": (wall0 + wall1) / 2,
                "cpu_s": exact_cpu,
                "peak_mb": max(peak0, peak1) / 2**20,
                "recallall@10": _recall_all(exact_top, evidence, 10),
                "recallall@100": _recall_all(exact_top, evidence, 100),
            },
            "rows": rows,
        }


def print_table(args, out: dict) -> None:
    exact = out["exact"]
    paper_exact = PAPER_PAGES * REAL_PAGE_TOKENS * (args.dim * 2 + 0)
    log()
    log(f"exact fp16: {exact['bytes'] / 2**20:,.0f} MiB, {exact['wall_s']:.2f} s wall, {exact['cpu_s']:.2f} CPU-s, "
        f"peak {exact['peak_mb']:.0f} MiB; RecallAll@10 {exact['recallall@10']:.3f}, "
        f"@100 {exact['recallall@100']:.3f}; paper scale {paper_exact / 2**30:,.0f} GiB")  # fmt: skip
    head = (
        f"{'configuration':<62} {'storage':>8} {'compute':>8} {'arith.':>7} {'wall s':>7} {'peak MiB':>8} "
        f"{'R@10':>6} {'R@100':>6} {'dRA@10':>7} {'dRA@100':>7} {'paper GiB':>9}  goal"
    )
    log(head)
    log("-" * len(head))
    for r in out["rows"]:
        paper = PAPER_PAGES * REAL_PAGE_TOKENS / r.get("pool_factor", 1) * r["paper_bytes_per_vector"] / 2**30
        log(
            f"{r['config']:<62} {r['storage_x']:>7.2f}x {r['compute_x']:>7.1f}x {r['arith_x']:>6.1f}x "
            f"{r['wall_s']:>7.2f} {r['peak_mb']:>8.0f} {r['recall@10']:>6.3f} {r['recall@100']:>6.3f} "
            f"{r['recallall@10']:>+7.3f} {r['recallall@100']:>+7.3f} {paper:>9,.0f}  {'PASS' if r['pass'] else 'FAIL'}"
        )
    log()
    log("storage, compute (CPU seconds), arith. (page vectors scored): how many times less than exact; "
        "R@k: recall of exact top-k; dRA@k: RecallAll@k change vs exact")  # fmt: skip
    log(f"goal: R@100 >= {GOAL['recall@100']}, compute >= {GOAL['compute']:.0f}x, storage >= {GOAL['storage']:.0f}x: "
        f"{'PASS' if any(r['pass'] for r in out['rows']) else 'FAIL'} "
        f"({sum(r['pass'] for r in out['rows'])} of {len(out['rows'])} configurations)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--page-tokens", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--topics", type=int, default=4096)
    parser.add_argument("--topics-per-doc", type=int, default=6)
    parser.add_argument("--topics-per-page", type=int, default=3)
    parser.add_argument("--spread", type=float, default=0.35, help="size of a page's offset of its topics")
    parser.add_argument("--noise", type=float, default=0.15, help="size of a token's offset of its aspect")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--query-tokens", type=int, default=16)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--n-centroids", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every search (1: see perf/README.md)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", help="the contenders as a JSON list of CompressedSearch arguments")
    parser.add_argument(
        "--suite",
        choices=("codecs", "residuals"),
        default="codecs",
        help="codecs: the codecs, pooling and the index (--n-centroids); residuals: setting=compressed's "
        "defaults (PQ64x8 residuals, 16,384 centroids) and neighbouring search knobs, and SQ4 residuals",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="2,000 pages of 24 tokens, 20 queries, 4 contenders: seconds"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.pages, args.page_tokens, args.queries, args.n_centroids, args.topics = 2000, 24, 20, 128, 512
    out = run(args)
    print_table(args, out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
