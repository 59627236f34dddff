"""perf/bench_context.py at a tiny size: it runs end to end and its flat-memory check passes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_context_runs_and_reports_flat_memory(tmp_path):
    figures = tmp_path / "figures.json"
    out = subprocess.run(
        [
            sys.executable,
            "perf/bench_context.py",
            "--docs",
            "30",
            "--pages",
            "4",
            "--tokens",
            "20",
            "--dim",
            "16",
            "--shard-size",
            "16",
            "--n-ctx",
            "8",
            "--tmp",
            str(tmp_path),
            "--json",
            str(figures),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS: peak RSS at 60 documents" in out.stdout
    results = json.loads(figures.read_text())
    assert [results[run]["docs"] for run in ("n", "2n", "n_parallel")] == [30, 60, 30]
    assert results["2n"]["stats"]["documents_clustered"] == 60 and results["rss_ratio"] <= 1.10
    assert results["n"]["output_mb"] * 2 == pytest.approx(results["2n"]["output_mb"], rel=0.2)
