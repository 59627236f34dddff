"""Round robin and reciprocal rank fusion of two paper-scale runs: ours against today's code and ranx.

    .venv/bin/python perf/bench_fusion.py              # 271,760 queries x 100, two runs: about 5 minutes here
    .venv/bin/python perf/bench_fusion.py --smoke      # 2,000 queries x 20: seconds (tests/perf/test_bench_fusion.py)
    .venv/bin/python perf/bench_fusion.py --before-fraction 0.2 --ranx-fraction 0.1 --json figures.json

Two synthetic runs, ``a`` and ``b``, of ``--queries`` queries x ``--depth`` pages over ``--pages``
page ids like the benchmark's (``arxiv-00012-p003``; query ids ``q0000012``), written with
:func:`vldocir.data.runs.write_run` and read back with ``read_run`` (dictionary-encoded ids, as every
bctx, ensemble and rrf job reads its stored inputs). Each query's list in ``a`` is distinct pages;
``b`` ranks mostly the same pages in a perturbed order plus others (the overlap is printed), scores
descending. Each measurement runs in its own subprocess, so that its peak RSS (``ru_maxrss``) is its
own; the timings cover the fusion call only (the inputs are loaded first, their RSS printed):

- **ours**: :func:`vldocir.retrieval.fusion.round_robin` and ``reciprocal_rank_fusion`` (k=60) on
  every query;
- **before**: the implementation this replaced (pandas + one Python merge per query), copied below,
  on the first ``--before-fraction`` of the queries (at full scale it takes minutes and about 11 GB
  per fusion), extrapolated linearly to all queries: a lower bound, as its cost grows faster;
- **ranx** ``fuse(method="rrf", norm=None)`` on the first ``--ranx-fraction`` (its dictionaries of
  the full runs need about 40 GB), its input conversion timed apart; ranx has no round robin.

Checks: ours equals the definitions (``round_robin_lists``, ``rrf_scores`` of the code it replaced,
on each query's lists as Python lists, straight from the generator's arrays) in the top 10 of every
query; ours equals before (every rank of every query it ran) and ranx (ranx's sums, ordered by our
rule: sum descending, then page id) on their fractions. Targets: each of ours at most 10 s and
3 GB peak RSS at full scale, every check equal. Exit status 1 when one fails.
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

TARGET_S = 10.0
TARGET_GB = 3.0
K = 60
CHECKED_TOP = 10
SOURCES = ("arxiv", "pubmed", "sec", "wikipedia")  # in page_id order


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- today's code before this change, the peer "before" (vldocir/retrieval/fusion.py at 6fa03cd) ------


def before_ranked_lists(run):
    frame = run.select(["query_id", "page_id", "score"] + (["rank"] if "rank" in run.column_names else [])).to_pandas()
    if "rank" in frame:
        frame = frame.sort_values(["query_id", "rank", "page_id"], kind="stable")
    else:
        frame = frame.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True], kind="stable")
    frame["query_id"] = frame["query_id"].astype(str)
    frame["page_id"] = frame["page_id"].astype(str)
    return {q: list(g) for q, g in frame.groupby("query_id", sort=False)["page_id"]}


def before_round_robin_lists(lists, depth=None):
    merged, seen = [], set()
    for position in range(max((len(x) for x in lists), default=0)):
        for items in lists:
            if position < len(items) and items[position] not in seen:
                seen.add(items[position])
                merged.append(items[position])
                if depth is not None and len(merged) == depth:
                    return merged
    return merged


def before_rrf_scores(lists, k=60):
    scores = {}
    for items in lists:
        for rank, item in enumerate(items, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def _before_queries(runs, query_ids):
    if query_ids is not None:
        return list(query_ids)
    seen = {}
    for run in runs:
        seen.update(dict.fromkeys(str(q) for q in run.column("query_id").to_pylist()))
    return list(seen)


def _before_ordered_run(query_ids, lists):
    from vldocir.data.runs import make_run

    return make_run(query_ids, lists, [np.arange(len(items), 0, -1, dtype=np.float64) for items in lists])


def before_round_robin(runs, depth, query_ids=None):
    per_run = [before_ranked_lists(run) for run in runs]
    queries = _before_queries(runs, query_ids)
    return _before_ordered_run(
        queries, [before_round_robin_lists([r.get(q, []) for r in per_run], depth) for q in queries]
    )


def before_reciprocal_rank_fusion(runs, depth, k=60, query_ids=None):
    per_run = [before_ranked_lists(run) for run in runs]
    queries = _before_queries(runs, query_ids)
    lists = []
    for q in queries:
        fused = before_rrf_scores([r.get(q, []) for r in per_run], k)
        lists.append([p for p, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:depth]])
    return _before_ordered_run(queries, lists)


# -- the runs --------------------------------------------------------------------------------------


def page_ids(n_pages: int):
    """``n_pages`` distinct ids like the benchmark's, in page_id order (13 pages a document)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    page = np.arange(n_pages)
    doc, index = page // 13, page % 13
    n_docs = int(doc.max(initial=-1)) + 1
    doc_source = np.arange(n_docs) * len(SOURCES) // max(n_docs, 1)  # consecutive blocks of documents
    doc_in_source = np.arange(n_docs) - np.searchsorted(doc_source, doc_source)
    names = pa.array(np.asarray(SOURCES, dtype=object)[doc_source[doc]], pa.string())
    doc_part = pc.utf8_lpad(pc.cast(pa.array(doc_in_source[doc]), pa.string()), 5, "0")
    page_part = pc.binary_join_element_wise(
        pa.scalar("p"), pc.utf8_lpad(pc.cast(pa.array(index), pa.string()), 3, "0"), ""
    )
    return pc.binary_join_element_wise(names, doc_part, page_part, "-").cast(pa.string())


def query_ids(n_queries: int):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(
        pa.scalar("q"), pc.utf8_lpad(pc.cast(pa.array(np.arange(n_queries)), pa.string()), 7, "0"), ""
    )


def list_indices(n_queries: int, depth: int, n_pages: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's pages in ``a`` and ``b`` as (queries, depth) page indices: distinct in each list;
    ``b`` takes ``depth`` of the ``a``-style sequence's first 1.5 x depth in a perturbed order."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, n_pages, n_queries)
    stride = rng.integers(1, max(n_pages // 2, 2), n_queries)
    while (bad := np.gcd(stride, n_pages) != 1).any():  # coprime strides: the first n_pages steps are distinct
        stride[bad] = rng.integers(1, max(n_pages // 2, 2), int(bad.sum()))
    steps = int(1.5 * depth)
    noisy = np.arange(steps) + rng.normal(0, depth / 3, (n_queries, steps))
    b_steps = np.argsort(noisy, axis=1)[:, :depth]
    a = (start[:, None] + stride[:, None] * np.arange(depth)) % n_pages
    b = (start[:, None] + stride[:, None] * b_steps) % n_pages
    return a.astype(np.int32), b.astype(np.int32)


def write_runs(args, directory: Path) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from vldocir.data.runs import run_from_indices, write_run

    pages, queries = page_ids(args.pages), query_ids(args.queries)
    assert pc.all(pc.less(pages[:-1], pages[1:])).as_py(), "page ids must be sorted: the checks compare indices"
    a, b = list_indices(args.queries, args.depth, args.pages, args.seed)
    np.save(directory / "a.npy", a)
    np.save(directory / "b.npy", b)
    pq.write_table(pa.table({"page_id": pages}), directory / "pages.parquet")
    scores = np.broadcast_to(np.arange(args.depth, 0, -1, dtype=np.float32), a.shape)
    fractions = {"all": 1.0, "before": args.before_fraction, "ranx": args.ranx_fraction}
    for name, indices in (("a", a), ("b", b)):
        run = run_from_indices(
            queries.to_numpy(zero_copy_only=False), pages.to_numpy(zero_copy_only=False), indices, scores
        )
        for label, fraction in fractions.items():
            write_run(run.slice(0, _queries_of(args, fraction) * args.depth), directory / f"{name}-{label}.parquet")
    overlap = np.mean([len(np.intersect1d(x, y)) for x, y in zip(a[:1000], b[:1000], strict=True)]) / args.depth
    return {"overlap": float(overlap)}


def _queries_of(args, fraction: float) -> int:
    return max(1, round(args.queries * fraction))


# -- the measurements, one subprocess each ----------------------------------------------------------


def _as_matrix(run, pages, n_queries: int, depth: int) -> np.ndarray:
    """A run (rows grouped by query in order, each ranked 1..n) as (queries, depth) page indices, -1 padded."""
    import pyarrow.compute as pc

    page = pc.index_in(run.column("page_id"), value_set=pages).to_numpy(zero_copy_only=False)
    query = pc.index_in(run.column("query_id"), value_set=query_ids(n_queries)).to_numpy(zero_copy_only=False)
    rank = run.column("rank").to_numpy()
    out = np.full((n_queries, depth), -1, dtype=np.int32)
    keep = rank <= depth
    out[query[keep].astype(np.int64), rank[keep] - 1] = page[keep]
    return out


def worker(args) -> dict:
    import pyarrow.parquet as pq

    from vldocir.data.runs import read_run

    directory = Path(args.dir)
    who, _, method = args.worker.partition("-")
    if who == "write":
        return write_runs(args, directory)
    if who == "reference":
        tick = time.perf_counter()
        np.save(
            directory / f"out-{args.worker}.npy",
            reference_top(np.load(directory / "a.npy"), np.load(directory / "b.npy"), method),
        )
        return {"seconds": time.perf_counter() - tick}
    label = {"ours": "all", "before": "before", "ranx": "ranx"}[who]
    fraction = {"all": 1.0, "before": args.before_fraction, "ranx": args.ranx_fraction}[label]
    n_queries = _queries_of(args, fraction)
    runs = [read_run(directory / f"{name}-{label}.parquet") for name in ("a", "b")]
    figures = {"queries": n_queries, "rss_inputs_gb": _peak_gb(), "load_before": _load()}
    if who == "ranx":
        fused, seconds, convert_s = _ranx(runs)
        figures["convert_s"] = convert_s
        matrix = _ranx_matrix(
            fused, pq.read_table(directory / "pages.parquet").column("page_id"), n_queries, args.depth
        )
    else:
        if who == "ours":
            from vldocir.retrieval.fusion import reciprocal_rank_fusion, round_robin
        else:
            round_robin, reciprocal_rank_fusion = before_round_robin, before_reciprocal_rank_fusion
        queries = query_ids(n_queries).to_pylist()
        tick, cpu = time.perf_counter(), time.process_time()
        if method == "rr":
            fused = round_robin(runs, args.depth, query_ids=queries)
        else:
            fused = reciprocal_rank_fusion(runs, args.depth, K, query_ids=queries)
        seconds = time.perf_counter() - tick
        figures["cpu_s"] = time.process_time() - cpu
        figures["rows"] = fused.num_rows
        pages = pq.read_table(directory / "pages.parquet").column("page_id")
        matrix = _as_matrix(fused, pages, n_queries, args.depth)
    np.save(directory / f"out-{args.worker}.npy", matrix)
    figures.update(seconds=seconds, peak_gb=_peak_gb(), load_after=_load())
    return figures


def _ranx(runs):
    from ranx import fuse

    # numba compiles ranx's functions on first use: compiled here on the first queries, outside the timings
    fuse(_ranx_runs([run.slice(0, 10) for run in runs]), norm=None, method="rrf", params={"k": K})
    tick = time.perf_counter()
    inputs = _ranx_runs(runs)
    convert_s = time.perf_counter() - tick
    tick = time.perf_counter()
    fused = fuse(inputs, norm=None, method="rrf", params={"k": K})
    return fused.to_dict(), time.perf_counter() - tick, convert_s


def _ranx_runs(runs):
    """ranx Runs of our runs: ``{query: {page: score}}`` dicts, rows grouped by query."""
    from ranx import Run

    inputs = []
    for run in runs:
        frame = run.select(["query_id", "page_id", "score"]).to_pandas()
        q, p, s = (frame[c].astype(str).tolist() if c != "score" else frame[c].tolist() for c in frame.columns)
        bounds = np.flatnonzero(
            np.concatenate(([True], frame["query_id"].to_numpy()[1:] != frame["query_id"].to_numpy()[:-1]))
        )
        ends = np.append(bounds[1:], len(q)).tolist()
        inputs.append(
            Run({q[i]: dict(zip(p[i:j], s[i:j], strict=True)) for i, j in zip(bounds.tolist(), ends, strict=True)})
        )
    return inputs


def _ranx_matrix(fused: dict, pages, n_queries: int, depth: int) -> np.ndarray:
    """ranx's sums ordered by our rule (sum descending, then page id), as page indices."""
    import pyarrow as pa
    import pyarrow.compute as pc

    index = {p: i for i, p in enumerate(pages.to_pylist())}
    out = np.full((n_queries, depth), -1, dtype=np.int32)
    queries = pc.index_in(pa.array(list(fused), pa.string()), value_set=query_ids(n_queries)).to_pylist()
    for row, scores in zip(queries, fused.values(), strict=True):
        # exact sums, not rounded: with two runs ranx adds the same two terms (a + b == b + a), and
        # sums equal in exact arithmetic can differ in the last bit (1/63 + 1/140 and 1/84 + 1/90),
        # which ours orders by value, as the code it replaced did
        ranked = sorted(scores, key=lambda p: (-scores[p], p))[:depth]
        out[row, : len(ranked)] = [index[p] for p in ranked]
    return out


def reference_top(a: np.ndarray, b: np.ndarray, method: str) -> np.ndarray:
    """The top ``CHECKED_TOP`` of every query by the definitions, on plain Python lists."""
    out = np.full((len(a), CHECKED_TOP), -1, dtype=np.int32)
    for row, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
        if method == "rr":
            top = before_round_robin_lists([x, y], CHECKED_TOP)
        else:
            fused = before_rrf_scores([x, y], K)  # page indices order as page ids do
            top = sorted(fused, key=lambda p: (-fused[p], p))[:CHECKED_TOP]
        out[row, : len(top)] = top
    return out


def run_worker(args, name: str) -> dict:
    argv = [sys.executable, __file__, "--worker", name, "--dir", args.dir]
    for key in ("queries", "depth", "pages", "before_fraction", "ranx_fraction", "seed"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"worker {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args) -> dict:
    """Every measurement in its own subprocess (this process stays small: a child's ``ru_maxrss``
    starts from its parent's), then the comparisons."""
    directory = Path(args.dir)
    print(
        f"load {_load()}: writing two runs of {args.queries:,} queries x {args.depth} ({args.pages:,} pages)",
        flush=True,
    )
    tick = time.perf_counter()
    config = ("queries", "depth", "pages", "before_fraction", "ranx_fraction", "seed")
    figures = {"config": {key: getattr(args, key) for key in config}, "runs": run_worker(args, "write")}
    print(f"  {time.perf_counter() - tick:.1f} s; b ranks {figures['runs']['overlap']:.0%} of a's pages", flush=True)
    for name in ("ours-rr", "ours-rrf", "before-rr", "before-rrf", "ranx-rrf", "reference-rr", "reference-rrf"):
        figures[name.replace("-", "_")] = run_worker(args, name)
    checks, ok = {}, True
    for method, name in (("rr", "round robin"), ("rrf", f"RRF k={K}")):
        ours, before = figures[f"ours_{method}"], figures[f"before_{method}"]
        out = np.load(directory / f"out-ours-{method}.npy")
        expected = np.load(directory / f"out-reference-{method}.npy")
        checks[f"{method}_definition"] = bool((out[:, :CHECKED_TOP] == expected).all())
        before_out = np.load(directory / f"out-before-{method}.npy")
        checks[f"{method}_before"] = bool((out[: len(before_out)] == before_out).all())
        before["extrapolated_s"] = before["seconds"] * args.queries / before["queries"]
        passed = ours["seconds"] <= TARGET_S and ours["peak_gb"] <= TARGET_GB
        ok &= passed and checks[f"{method}_definition"] and checks[f"{method}_before"]
        print(
            f"{name:>12}: ours {ours['seconds']:6.2f} s ({ours['cpu_s']:.2f} s CPU), peak RSS {ours['peak_gb']:.2f} GB "
            f"(after loading the inputs {ours['rss_inputs_gb']:.2f} GB), load {ours['load_before']} -> "
            f"{ours['load_after']}  [{'PASS' if passed else 'FAIL'}: <= {TARGET_S:g} s, <= {TARGET_GB:g} GB]\n"
            f"{'':>12}  before {before['seconds']:6.2f} s on {before['queries']:,} queries, "
            f"peak {before['peak_gb']:.2f} GB, "
            f"load {before['load_before']} -> {before['load_after']}; all queries >= {before['extrapolated_s']:.0f} s "
            f"= {before['extrapolated_s'] / ours['seconds']:.0f}x ours\n"
            f"{'':>12}  top {CHECKED_TOP} = definitions on every query: {checks[f'{method}_definition']} "
            f"(reference {figures[f'reference_{method}']['seconds']:.0f} s); every rank = before on its "
            f"{before['queries']:,}: {checks[f'{method}_before']}",
            flush=True,
        )
    ranx = figures["ranx_rrf"]
    ranx_out = np.load(directory / "out-ranx-rrf.npy")
    out = np.load(directory / "out-ours-rrf.npy")
    checks["rrf_ranx"] = bool((out[: len(ranx_out)] == ranx_out).all())
    ok &= checks["rrf_ranx"]
    ours_share = figures["ours_rrf"]["seconds"] * ranx["queries"] / args.queries
    print(
        f"{'ranx RRF':>12}: fuse {ranx['seconds']:.2f} s + conversion {ranx['convert_s']:.2f} s on {ranx['queries']:,} "
        f"queries, peak {ranx['peak_gb']:.2f} GB, load {ranx['load_before']} -> {ranx['load_after']}; "
        f"fuse alone {ranx['seconds'] / ours_share:.0f}x ours' time per query; every rank = ours: {checks['rrf_ranx']}",
        flush=True,
    )
    figures.update(checks=checks, ok=bool(ok), load_end=_load())
    print("PASS" if ok else "FAIL", flush=True)
    return figures


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=271_760)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--pages", type=int, default=388_544)
    parser.add_argument("--before-fraction", type=float, default=0.1)
    parser.add_argument("--ranx-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="2,000 queries x 20 over 5,000 pages: seconds")
    parser.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where the runs are written")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--dir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.queries, args.depth, args.pages, args.before_fraction, args.ranx_fraction = 2_000, 20, 5_000, 0.5, 0.5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        args.dir = tmp
        figures = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
