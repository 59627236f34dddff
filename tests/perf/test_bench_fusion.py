"""perf/bench_fusion.py at smoke size (2,000 queries x 20), so that it cannot rot.

Nothing asserts on a time; only on what the figures must be whatever the machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_fusion_smoke(tmp_path):
    pytest.importorskip("ranx")
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_fusion.py", "--smoke", "--tmp", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a target failed, which a busy machine may cause
    figures = json.loads(out.read_text())
    assert figures["checks"] == {
        "rr_definition": True,
        "rr_before": True,
        "rrf_definition": True,
        "rrf_before": True,
        "rrf_ranx": True,
    }
    for name in ("ours_rr", "ours_rrf", "before_rr", "before_rrf"):
        assert figures[name]["rows"] > 0 and figures[name]["seconds"] > 0 and figures[name]["peak_gb"] > 0
        assert figures[name]["load_before"] and figures[name]["load_after"]
    assert figures["ours_rr"]["queries"] == 2_000 and figures["before_rr"]["queries"] == 1_000
    assert figures["ranx_rrf"]["seconds"] > 0 and figures["ranx_rrf"]["convert_s"] > 0
    assert ("PASS" if figures["ok"] else "FAIL") in done.stdout
