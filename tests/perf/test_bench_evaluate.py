"""perf/bench_evaluate.py in its smoke mode: it builds a tiny benchmark and run that the real loader
accepts, evaluates them in a fresh process and in process, and agrees with pytrec_eval on every
query's nDCG@k and Recall@k (the times at this size mean nothing and are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_evaluate_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_evaluate.py", "--smoke", "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["scale"] == 0.002 and figures["n_queries"] == 542
    assert figures["rows"] == 542 * 100
    assert figures["ours_fresh_process"]["peak_gb"] > 0 and figures["ours"]["total"] > 0
    assert set(figures["peers"]) == {"pytrec_eval"}
    assert figures["pytrec_eval_max_abs_diff"] == {f"{m}@{k}": 0.0 for k in (3, 5, 10) for m in ("ndcg", "recall")}
