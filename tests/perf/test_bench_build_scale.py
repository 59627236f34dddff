"""perf/bench_build_scale.py: its projection arithmetic and corpus facts against hand-computed cases,
and the script end to end on two small documents (every stage measured, every build the same
benchmark)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, no_build_tools


def _bench():
    spec = importlib.util.spec_from_file_location("bench_build_scale", REPO_ROOT / "perf" / "bench_build_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_projection_splits_shard_and_driver_stages():
    bench = _bench()
    per_page = {"render": 0.5, "paginate": 0.1, "OCR": 2.4, "assemble": 0.01, "evidence sampling": 0.02, "write": 0.03}
    stages = {name: {"cpu_s_per_page": cost} for name, cost in per_page.items()}
    p = bench.projection(stages, pages=3600, cores=100, cores_per_node=8, efficiency=0.5, single_use=0.75)
    # 3,600 pages: the shards' stages 3 CPU-s a page = 3 CPU-h, the driver's 0.06 = 0.06 CPU-h.
    assert p["parallel_cpu_hours"] == pytest.approx(3.0) and p["serial_cpu_hours"] == pytest.approx(0.06)
    assert p["cpu_hours"] == pytest.approx(3.06) and p["nodes"] == 13  # ceil(100 / 8)
    assert p["sharded_wall_s"] == pytest.approx(10_800 / (100 * 0.5) + 216)
    assert p["linear_wall_s"] == pytest.approx(10_800 / 100 + 216)
    assert p["single_wall_s"] == pytest.approx(10_800 / (8 * 0.75) + 216)
    assert bench.projection(stages, 3600, 100, 8, None, 0.75)["sharded_wall_s"] == p["linear_wall_s"]


def test_paper_corpus_from_facts_else_the_issue(tmp_path):
    bench = _bench()
    facts = tmp_path / "facts.md"
    facts.write_text("- 1,234 HTML-born documents rendered into 56,789 page images (average 46 pages).\n")
    assert bench.paper_corpus(facts) == (1234, 56789, str(facts))
    assert bench.paper_corpus(tmp_path / "absent.md") == (29_641, 388_548, "issue 37")


@pytest.mark.slow
@pytest.mark.skipif(no_build_tools() is not None, reason=no_build_tools() or "")
def test_bench_build_scale_runs_on_two_small_documents(tmp_path):
    real = tmp_path / "real"  # a stand-in for ../shared/real-html: two small documents
    for name, text in [("wikipedia-x", "A Hermitian matrix equals its conjugate transpose."), ("sec-x", "Vote.")]:
        (real / name).mkdir(parents=True)
        (real / name / "index.html").write_text(f"<h1>{name}</h1>" + f"<p>{text}</p>" * 120)
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "perf/bench_build_scale.py",
            "--real-html",
            str(real),
            "--workers",
            "2",
            "--json",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    stages = figures["stages"]["stages"]
    assert list(stages) == ["render", "paginate", "assemble", "OCR", "evidence sampling", "write"]
    assert all(row["cpu_s"] > 0 for name, row in stages.items() if name != "assemble")
    assert sum(row["share"] for row in stages.values()) == pytest.approx(1.0)
    builds = figures["builds"]
    rows = [builds["plain"], *builds["arrays"].values()]
    assert all(row["pages"] == figures["stages"]["pages"] for row in rows)
    assert len({row["fingerprint"] for row in rows}) == 1  # whatever the shard count
    if builds["arrays"]:  # the checkout has build.shards
        assert sorted(builds["arrays"]) == ["1", "2"]  # (JSON keys)
        assert builds["arrays"]["1"]["speedup"] == pytest.approx(1.0)
        assert builds["arrays"]["2"]["array_tasks"] >= 1 and builds["arrays"]["2"]["of_bound"] > 0
    assert figures["projection"]["cpu_hours"] > 0
    assert "3. Projection: the paper's corpus" in done.stdout and "one process on one" in done.stdout
