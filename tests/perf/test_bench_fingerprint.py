"""perf/bench_fingerprint.py in its smoke mode: it builds a benchmark the loader validates, and its
memoized rerun gives the fingerprint that hashing every file again gives (the times are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_fingerprint_smoke(tmp_path, monkeypatch):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_fingerprint.py", "--smoke", "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["pages"] == 300 and figures["memo_bytes"] > 0 and figures["stat_every_image_s"] > 0
    assert figures["image_bytes"] >= 300 * 200  # every page has its image file

    from vldocir.data.fingerprint import compute_fingerprint

    monkeypatch.setenv("VLDOCIR_CACHE_DIR", str(tmp_path / "fresh-cache"))  # no memo: every byte hashed again
    assert compute_fingerprint(tmp_path / "pages-300") == figures["fingerprint"]
