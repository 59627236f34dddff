"""perf/bench_compressed.py runs at its smoke size, so that the script cannot rot (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_smoke_run_prints_the_table_with_the_goal_verdict(tmp_path):
    out = tmp_path / "compressed.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_compressed.py", "--smoke", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "goal: R@100 >= 0.99, compute >= 10x, storage >= 3x:" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["config"] for r in rows] == [
        "float16 index K=128 cand=2000",
        "SQ8",
        "float16 pool2",
        "SQ8 index K=128 cand=300",
        "SQ4 residuals index K=128 cand=300",
        "SQ4 residuals index K=128 nprobe=16 cand=300 rescore=150",
    ]
    # every page a candidate, stored in fp16: the index's rescoring must give exact search's rankings
    assert rows[0]["recall@10"] == rows[0]["recall@100"] == 1.0 and rows[0]["recallall@10"] == 0
    assert (
        1.9 < rows[1]["storage_x"] < 2.1 and rows[2]["arith_x"] >= 2
    )  # SQ8: 1 byte a dimension; pool 2: half the vectors
    assert all(0 <= r["recall@100"] <= 1 and r["bytes"] > 0 for r in rows)
    assert rows[4]["storage_x"] > 3  # 4 bits a dimension, plus a mean per bag entry
    assert (
        rows[5]["bytes"] == rows[4]["bytes"] and rows[5]["arith_x"] > rows[4]["arith_x"]
    )  # same artifact, fewer rescored


def test_residual_suite_starts_from_the_settings_defaults():
    """--suite residuals measures what setting=compressed runs: its first row is the yaml's
    CompressedSearch arguments, and every row is a valid configuration."""
    import argparse
    import importlib.util

    from vldocir.retrieval.compressed import CompressedSearch

    spec = importlib.util.spec_from_file_location("bench_compressed", REPO_ROOT / "perf" / "bench_compressed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.contenders(argparse.Namespace(configs=None, n_centroids=4096, smoke=False, suite="residuals"))
    assert rows[0] == bench.setting_defaults() and rows[0]["coded"] == "residuals" and rows[0]["rescore"] > 0
    assert len({bench._label(r) for r in rows}) == len(rows)
    for row in rows:
        CompressedSearch(**row)
