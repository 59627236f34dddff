"""Paired randomization test at paper scale: ours (all four aggregates) against ranx's Fisher test (Micro).

Builds two runs' per-query rows for the 271,760 queries of the full benchmark (six structures of
unequal sizes, four sources, three domains; nDCG@10 on a grid of 1/100, as real metrics tie) and, in
one process, times

- ours: ``paired_tests(n_permutations=10000, n_resamples=0)``, the sign-flip test of Micro, Macro,
  source Macro, domain Macro and every structure cell at once (float32 product per chunk of
  permutations), with the paired t beside it; also the bootstrap interval of the difference alone;
- ranx: ``ranx.statistical_tests.fisher_randomization_test``, what ``ranx.compare(stat_test="fisher")``
  runs on the same per-query scores, Micro only; at ``--ranx-permutations`` (default the same number;
  fewer extrapolates its time linearly, as its cost is one shuffle per query per permutation);

and the peak traced memory (tracemalloc, which counts NumPy's buffers) of our test at 1,000 and at
10,000 permutations (flat: permutations are processed in chunks of fixed size), the Micro p-values of
both, and the load average before and after.

    .venv/bin/python perf/bench_significance.py                       # paper scale; ranx takes minutes
    .venv/bin/python perf/bench_significance.py --ranx-permutations 1000
    .venv/bin/python perf/bench_significance.py --queries 2000 --permutations 500 --ranx-permutations 100

This is a script, not a timed test: the figures depend on the machine. See perf/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))

from vldocir.data.schema import EVIDENCE_STRUCTURES  # noqa: E402
from vldocir.evaluation.significance import paired_tests  # noqa: E402

TARGET_S = 10.0
METRIC = "ndcg@10"


def runs(n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs' per-query rows: b is a slightly worse a, per-query noise on a grid of 1/100."""
    rng = np.random.default_rng(seed)
    shares = np.array([0.30, 0.20, 0.15, 0.15, 0.10, 0.10])
    frame = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "evidence_structure": rng.choice(EVIDENCE_STRUCTURES, n, p=shares),
            "source": rng.choice(["wikipedia", "arxiv", "sec", "manuals"], n),
            "domain": rng.choice(["science", "finance", "general"], n),
            "in_run": True,
        }
    )
    a = frame.assign(**{METRIC: rng.beta(2, 2, n).round(2)})
    b = frame.assign(**{METRIC: (a[METRIC] - 0.002 + rng.normal(0, 0.15, n)).clip(0, 1).round(2)})
    return a, b


def ours(a, b, permutations: int) -> tuple[float, pd.DataFrame]:
    start = time.perf_counter()
    table = paired_tests(a, b, [METRIC], n_permutations=permutations, n_resamples=0)
    return time.perf_counter() - start, table


def peak_mb(a, b, permutations: int) -> float:
    tracemalloc.start()
    paired_tests(a, b, [METRIC], n_permutations=permutations, n_resamples=0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def ranx_fisher(a, b, permutations: int) -> tuple[float, float]:
    from ranx.statistical_tests import fisher_randomization_test

    xa, xb = a[METRIC].to_numpy(np.float64), b[METRIC].to_numpy(np.float64)
    fisher_randomization_test(xa[:50], xb[:50], 10, 0.01, 42)  # numba compiles outside the timing
    start = time.perf_counter()
    p, _ = fisher_randomization_test(xa, xb, permutations, 0.01, 42)
    return time.perf_counter() - start, float(p)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=271_760)
    parser.add_argument("--permutations", type=int, default=10_000)
    parser.add_argument("--ranx-permutations", type=int, default=None, help="default: --permutations")
    parser.add_argument("--skip-ranx", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    ranx_permutations = args.ranx_permutations or args.permutations
    load_before = os.getloadavg()
    a, b = runs(args.queries)

    ours(a, b, 100)  # warm BLAS and pandas outside the timing
    ours_s, table = ours(a, b, args.permutations)
    start = time.perf_counter()
    paired_tests(a, b, [METRIC], n_permutations=1, n_resamples=2000)
    bootstrap_s = time.perf_counter() - start
    small = max(1, args.permutations // 10)
    peaks = {small: peak_mb(a, b, small), args.permutations: peak_mb(a, b, args.permutations)}
    micro = table[table["aggregate"] == "micro"].iloc[0]
    figures = {
        "queries": args.queries,
        "permutations": args.permutations,
        "ours_s": ours_s,
        "ours_aggregates": sorted(table["aggregate"]),
        "bootstrap_2000_s": bootstrap_s,
        "peak_mb": {str(k): v for k, v in peaks.items()},
        "p_micro_ours": float(micro["p_randomization"]),
        "p_t_micro": float(micro["p_t"]),
    }
    if not args.skip_ranx:
        ranx_s, p_ranx = ranx_fisher(a, b, ranx_permutations)
        figures.update(
            ranx_permutations=ranx_permutations,
            ranx_s=ranx_s,
            ranx_s_at_permutations=ranx_s * args.permutations / ranx_permutations,
            p_micro_ranx=p_ranx,
        )
        figures["ratio"] = figures["ranx_s_at_permutations"] / ours_s
    figures["load_before"], figures["load_after"] = list(load_before), list(os.getloadavg())
    figures["ok"] = ours_s <= TARGET_S

    print(f"{args.queries:,} queries, {args.permutations:,} permutations; load {load_before} -> {os.getloadavg()}")
    print(
        f"ours: {ours_s:.2f} s for {len(table)} aggregates and cells (4 aggregates + structures),"
        f" p_micro={micro['p_randomization']:.4f}"
    )
    print(f"ours: bootstrap of the difference, 2000 resamples, every aggregate: {bootstrap_s:.2f} s")
    print("peak traced memory: " + ", ".join(f"{k:,} permutations {v:.0f} MB" for k, v in peaks.items()))
    if not args.skip_ranx:
        extrapolated = "" if ranx_permutations == args.permutations else f" (timed at {ranx_permutations:,}, scaled)"
        print(
            f"ranx fisher (Micro only): {figures['ranx_s_at_permutations']:.1f} s{extrapolated}, p={p_ranx:.4f};"
            f" ratio ranx/ours {figures['ratio']:.1f}x"
        )
    print(f"target <= {TARGET_S:.0f} s: {'PASS' if figures['ok'] else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
