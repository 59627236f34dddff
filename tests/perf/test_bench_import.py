"""perf/bench_import.py at smoke size (300 and 600 pages), so that it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_import_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_import.py", "--smoke", "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the ratio target failed, which a busy machine may cause
    figures = json.loads(out.read_text())
    assert [s["pages"] for s in figures["sizes"]] == [300, 600]
    assert [s["imported_pages"] for s in figures["sizes"]] == [300, 600]
    assert figures["rss_ratio"] > 0 and figures["load_before"] and figures["load_after"]
    assert ("PASS" if figures["ok"] else "FAIL") in done.stdout
