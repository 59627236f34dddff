"""perf/bench_vlm_client.py at smoke size (1 and 2 stub endpoints, 20 requests), so that it cannot rot.

Nothing asserts on a time; only on what the figures must be whatever the machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


@pytest.mark.slow
def test_bench_vlm_client_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_vlm_client.py", "--smoke", "--tmp", str(tmp_path), "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert [(r["endpoints"], r["concurrency"]) for r in figures["rows"]] == [(1, 2), (2, 2)]
    for row in figures["rows"]:
        for name in ("ours", "peer", "cache_written", "cache_replayed"):
            assert row[name]["requests"] == 20 and row[name]["rps"] > 0 and row[name]["cpu_ms"] > 0
        # ours, the peer and the cache-writing run went to the stub (the replay did not), on every endpoint
        assert sum(row["per_endpoint"]) == 60 and len(row["per_endpoint"]) == row["endpoints"]
        assert min(row["per_endpoint"]) > 0
    assert "CPU-ms a request" in done.stdout
