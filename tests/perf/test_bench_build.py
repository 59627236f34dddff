"""perf/bench_build.py: its agreement measure on hand-computed cases, and the script end to end at
smoke size (one generated page rendered and OCR'd before and after)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, no_build_tools


def _bench():
    spec = importlib.util.spec_from_file_location("bench_build", REPO_ROOT / "perf" / "bench_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agreement_counts_words_in_order_and_as_bags():
    bench = _bench()
    # "a b c d" against "a c b d": in order a, b, d match (3 of 4 each side); as bags all 4 do.
    assert bench.matched_words("a b c d", "a c b d") == (3, 4, 8)
    figures = bench.agreement(["a b c d", "x y", ""], ["a c b d", "x  y", ""])
    # Pooled: 3 + 2 + 0 words matched in order of 8 + 4 + 0, all of them as bags; "x y" and "x  y"
    # are the same words but not the same string, so only the empty page is identical.
    assert figures["sequence"] == pytest.approx(2 * 5 / 12)
    assert figures["bag"] == pytest.approx(1.0)
    assert figures["identical_pages"] == 1 and figures["pages"] == 3
    assert bench.agreement([""], [""])["sequence"] == 1.0
    assert bench.agreement(["lost words here"], ["lost"]) == pytest.approx(
        {"sequence": 0.5, "bag": 0.5, "identical_pages": 0, "pages": 1, "words_before": 3, "words_after": 1}
    )


@pytest.mark.slow
@pytest.mark.skipif(no_build_tools() is not None, reason=no_build_tools() or "")
def test_bench_build_smoke(tmp_path):
    pytest.importorskip("pytesseract")
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_build.py", "--smoke", "--workers", "1", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["render"]["pages"] == figures["before"]["pages"] == figures["after"]["pages"] == 1
    for stage in ("render", "before", "after"):
        row = figures[stage]
        assert row["cpu_s"] > 0 and row["cpu_s_per_page"] == pytest.approx(row["cpu_s"] / row["pages"])
        assert row["pages_per_s_per_core"] == pytest.approx(row["pages"] / row["wall_s"] / figures["workers"])
    for stage in ("before", "after"):
        share = figures[stage]["build_share"]
        assert share["render"] + share["ocr"] == pytest.approx(1.0)
    a = figures["agreement"]
    assert a["sequence"] == a["bag"] == 1.0 and a["identical_pages"] == 1 and a["words_after"] > 50
    assert set(figures["verdicts"]) == {"OCR <= 1 CPU-s per page", "agreement >= 0.99"}
    assert "load average" in done.stdout and "shares of a build's CPU" in done.stdout
