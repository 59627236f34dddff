"""perf/bench_hierarchical_memory.py runs at its smoke size, so that the script cannot rot (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_smoke_run_reports_both_sizes_and_the_ratio(tmp_path):
    done = subprocess.run(
        [sys.executable, "perf/bench_hierarchical_memory.py", "--smoke", "--tmp", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "1x: 500 documents" in done.stdout and "2x: 1,000 documents" in done.stdout
    ratio = float(re.search(r"2x / 1x peak growth: ([\d.]+)", done.stdout).group(1))
    assert ratio > 0
    assert not list(tmp_path.iterdir())  # the memory-mapped vectors are removed
