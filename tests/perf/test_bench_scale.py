"""perf/bench_scale.py: its verdicts against the targets, and the whole script at the mini's size
(two run.py commands, the bm25s peer and the context build), so that it cannot rot. The end-to-end
test checks that it runs and prints its ratios and PASS/FAIL lines, never that a target holds: the
targets are wall times, which a loaded machine misses."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from helpers import MINI_DIR, REPO_ROOT


def _bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", REPO_ROOT / "perf" / "bench_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_targets() -> list[str]:
    return list(_bench_scale().TARGETS)


def _figures(fresh_s, rerun_s, load_s, qps, queries, rss_ratio):
    run = {
        "retriever": "dom_bm25",
        "fresh": {
            "wall_s": fresh_s,
            "load_s": 12.0,
            "retrieval": {"search": {"queries_per_s": qps, "queries": queries}},
        },
        "rerun": {"wall_s": rerun_s, "load_s": load_s, "retrieval": None},
    }
    return {"retrievers": [run], "context": {"rss_ratio": rss_ratio}}


def test_verdicts_hold_each_figure_to_its_target():
    bench = _bench_scale()
    ok = bench.verdicts(_figures(250.0, 3.3, 0.02, 1600.0, 271_760, 1.0))
    assert [(v[0], v[-1]) for v in ok] == [
        ("fresh_run_s", True),
        ("reevaluate_s", True),
        ("second_load_s", True),
        ("search_qps", True),
        ("context_rss_ratio", True),
    ]
    bad = bench.verdicts(_figures(601.0, 5.2, 5.5, 999.0, 271_760, 1.11))
    assert [v[-1] for v in bad] == [False] * 5
    small = bench.verdicts(_figures(2.0, 1.0, 0.02, 36.0, 288, 1.0))
    assert {v[0]: v[-1] for v in small}["search_qps"] is None  # judged at paper scale only


@pytest.mark.slow
def test_bench_scale_runs_end_to_end_on_the_mini(tmp_path):
    figures = tmp_path / "figures.json"
    out = subprocess.run(
        [
            sys.executable,
            "perf/bench_scale.py",
            "--dataset",
            "mini",
            "--retrievers",
            "dom_bm25",
            "--workdir",
            str(tmp_path / "work"),
            "--peer-queries",
            "32",
            "--context-docs",
            "20",
            "--json",
            str(figures),
            "--context-args",
            "--pages",
            "4",
            "--tokens",
            "20",
            "--dim",
            "16",
            "--shard-size",
            "16",
            "--n-ctx",
            "4",
            "--tmp",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # Speed is the benchmark's to report, not the test's to assert: under load a wall-time target may
    # fail (exit 1, FAIL). The test holds the script to running through and printing every verdict.
    assert out.returncode in (0, 1) and figures.is_file(), out.stdout + out.stderr  # a crash writes no JSON
    results = json.loads(figures.read_text())
    for target in bench_targets():
        assert re.search(rf"^{target} .*  (PASS|FAIL|n/a \(judged from 100,000 queries\))$", out.stdout, re.M), target
    summary = re.search(r"^(PASS|FAIL): (\d+) of 4 targets hold$", out.stdout, re.M)
    assert summary, out.stdout
    passed = summary.group(1) == "PASS"
    assert results["passed"] is passed and out.returncode == (0 if passed else 1)
    assert re.search(r"the run's search is \d+\.\d\dx bm25s alone", out.stdout)
    run = results["retrievers"][0]
    n_queries = len(pd.read_parquet(MINI_DIR / "queries.parquet", columns=["query_id"]))
    assert run["benchmark"]["queries"] == n_queries
    assert run["fresh"]["timings"]["validate_from_memo"] is False  # a fresh cache validates
    assert (
        run["rerun"]["timings"]["validate_from_memo"] is True
        and run["rerun"]["timings"]["fingerprint_from_memo"] is True
    )
    assert run["fresh"]["retrieval"]["search"]["queries"] == n_queries and "index" in run["fresh"]["retrieval"]
    assert run["rerun"]["retrieval"] in (None, {})  # reused: no index, no search
    assert run["peer"]["queries"] == 32 and run["peer"]["backend"] == run["fresh"]["retrieval"]["search"]["backend"]
    assert results["context"]["2n"]["docs"] == 40 and results["context"]["rss_ratio"] > 0
