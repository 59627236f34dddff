"""perf/bench_significance.py at a quick size, in process, so that the script cannot rot.

Nothing asserts on a time; only on what the figures must be whatever the machine."""

from __future__ import annotations

import importlib.util
import json

import pytest

from helpers import REPO_ROOT


def test_bench_significance_quick(tmp_path, capsys):
    pytest.importorskip("ranx")
    spec = importlib.util.spec_from_file_location("bench_significance", REPO_ROOT / "perf" / "bench_significance.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "figures.json"
    bench.main(["--queries", "3000", "--permutations", "300", "--ranx-permutations", "50", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert {"micro", "macro", "source_macro", "domain_macro"} <= set(figures["ours_aggregates"])
    assert figures["ours_s"] > 0 and figures["ranx_s"] > 0 and figures["ratio"] > 0
    assert 0 < figures["p_micro_ours"] <= 1 and 0 <= figures["p_micro_ranx"] <= 1
    assert set(figures["peak_mb"]) == {"30", "300"} and figures["load_before"] and figures["load_after"]
    assert ("PASS" if figures["ok"] else "FAIL") in capsys.readouterr().out
