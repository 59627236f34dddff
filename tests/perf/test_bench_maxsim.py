"""perf/bench_maxsim.py in its smoke mode: every measurement runs, in its own process, and our
top-10 equals colpali-engine's and our own at another tile size (the rates at this size mean
nothing and are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_maxsim_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "perf/bench_maxsim.py",
            "--smoke",
            "--tile-scores",
            "100",
            "--tmp",
            str(tmp_path),
            "--json",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "load average" in done.stdout
    run = json.loads(out.read_text())["runs"]["1"]
    assert run["matmul"]["square_gflops"] > 0 and run["matmul"]["tile_gflops"] > 0
    assert run["matmul"]["tile_shape"] == [64, 16, 32]  # 2 pages x 32 tokens, 16 dims, 4 queries x 8 tokens
    ours, colpali = run["ours_40"], run["colpali"]
    assert ours["output_shape"] == [8, 100] and colpali["output_shape"] == [8, 40]
    assert ours["gflops"] > 0 and colpali["gflops"] > 0 and len(ours["load"]) == 2
    assert run["top10_agree"] == 1.0
    other_tiles = run["ours_tile_100"]  # one query a tile, pages in parts of 11 tokens
    assert other_tiles["output_shape"] == [8, 100] and other_tiles["top10_agree_default"] == 1.0
    assert run["ratio_matmul"] > 0 and run["ratio_colpali"] > 0
