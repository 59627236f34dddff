"""perf/bench_pdf.py at smoke size (2 PDFs x 4 pages), so that it cannot rot: every section measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_pdf_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_pdf.py", "--smoke", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["text"]["1 process"]["pages"] == figures["text"]["2 processes"]["pages"] == 8
    assert set(figures["encoders"]["encoders"]) == {
        "png level 1",
        "png level 3",
        "png level 6",
        "jpeg q90",
        "webp q80 method 0",
    }
    assert figures["encoders"]["size"][0] == 1000
    assert [row["workers"] for row in figures["rasterizer"]] == [1, 2]
    assert all(row["pages"] == 8 for row in figures["rasterizer"])
    assert set(figures["verdicts"]) == {"text layers >= 500 pages/s", "page images >= 10 pages/s per core"}
    assert "load average" in done.stdout
