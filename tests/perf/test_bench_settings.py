"""perf/bench_settings.py runs end to end at its smoke size, so that the script cannot rot.

It is a benchmark, not a timed test: nothing here asserts on a time, only on what the figures must
be whatever the machine (one row per setting, fractions of page scores, the pipeline's manifest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, SUBSET_PAGES, SUBSET_QUERIES


@pytest.mark.slow
def test_smoke_run_reports_every_setting(tmp_path, subset_dir):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "perf/bench_settings.py",
            "--smoke",
            "--mini-dir",
            str(subset_dir),
            "--n-ctx",
            "4,32",
            "--top-docs",
            "2,10",
            "--tmp",
            str(tmp_path),
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Part A summary" in done.stdout and "Part B summary" in done.stdout
    figures = json.loads(out.read_text())

    random = figures["random"]
    assert random["config"]["pages"] == 2000 and random["config"]["queries"] == 20
    rows = {r["setting"]: r for r in random["rows"]}
    assert set(rows) == {
        "ctx n_ctx=4",
        "ctx n_ctx=32",
        *(f"hier {d} top{t}" for d in ("context n4", "context n32", "pooled") for t in (2, 10)),
    }
    for row in rows.values():
        assert row["search_s"] > 0 and row["ratio"] > 0 and 0 <= row["overlap@10"] <= 1
        if row["kind"] == "ctx":
            assert row["page_score_fraction"] == 1 and row["build_ms_per_doc"] > 0 and row["arith"] > 1
        else:
            assert 0 < row["page_score_fraction"] < 1 and row["stage1_s"] > 0 and row["adjacent_base_s"] > 0
    # more documents kept, more pages scored, and no further from exhaustive search
    for name in ("context n4", "context n32", "pooled"):
        few, many = rows[f"hier {name} top2"], rows[f"hier {name} top10"]
        assert few["page_scores"] < many["page_scores"]
    assert random["checks"]["every hierarchical run computed fewer page scores than exhaustive search"]

    mini = figures["mini"]
    assert mini["n_docs"] == 3 and mini["base"]["n_queries"] == SUBSET_QUERIES
    assert [(r["doc_vectors"], r["top_docs"]) for r in mini["rows"]] == [("context", 1), ("pooled", 1)]
    for row in mini["rows"]:
        assert 0 < row["hierarchical"]["page_score_fraction"] < 1
        assert row["hierarchical"]["exhaustive_page_scores"] == SUBSET_QUERIES * SUBSET_PAGES
    # published to the temporary results store (--tmp), never the repository's results/
    for row in [mini["base"], *mini["rows"]]:
        assert row["entry"].startswith(str(tmp_path))
