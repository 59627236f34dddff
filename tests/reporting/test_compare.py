"""``do=compare``: paired tests between stored runs of the mini benchmark (``multi_results``), their cache and
their refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from helpers import REPO_ROOT
from vldocir.evaluation import significance as sig
from vldocir.reporting.compare import CompareError, Params, StoredRun, check_benchmarks, compute, load_run
from vldocir.reporting.report_tasks import compose_report, run
from vldocir.store import METRICS_FILE

BENCH = "synthetic-text"
BASELINE = f"{BENCH}/dom_bm25/base"
RUNS = [f"{BENCH}/colqwen25/base", f"{BENCH}/ocr_bm25/base"]
METRICS = ["ndcgall@10", "recallall@10"]


def compare(results, tmp_path, *extra: str) -> int:
    return run(
        compose_report(
            [
                f"paths.results_dir={results}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                f"out_dir={tmp_path / 'out'}",
                "do=compare",
                f"runs=[{','.join(RUNS)}]",
                f"baseline={BASELINE}",
                f"significance.metrics=[{','.join(METRICS)}]",
                *extra,
            ]
        )
    )


def params(**changes) -> Params:
    base = dict(
        metrics=METRICS, correction="holm", alpha=0.05, n_permutations=500, level=0.95, seed=0, intersection=False
    )
    return Params(**{**base, **changes})


def test_the_table_is_what_the_tests_give_on_the_stored_rows(multi_results, tmp_path, capsys):
    assert compare(multi_results, tmp_path, "significance.n_permutations=2000") == 0
    out = capsys.readouterr().out
    assert "computed and stored in" in out and "Holm at alpha 0.05 across all" in out
    (csv,) = (tmp_path / "out" / "compare").glob("comparison_*.csv")
    assert csv.with_suffix(".md").is_file()
    table = pd.read_csv(csv)
    baseline = load_run(BASELINE, multi_results)
    stored = json.loads((baseline.entry.path / METRICS_FILE).read_text())
    expected = []
    for name in RUNS:
        other = load_run(name, multi_results)
        direct = sig.paired_tests(other.per_query, baseline.per_query, METRICS, n_permutations=2000, seed=0)
        mine = table[table["run"] == other.label].reset_index(drop=True)
        assert len(mine) == len(direct) > 4 * len(METRICS)  # the four aggregates and the structures
        for column, theirs in [("run_value", "a"), ("baseline_value", "b"), ("difference", "difference")]:
            np.testing.assert_allclose(mine[column], direct[theirs], atol=1e-9)
        for column in ("diff_low", "diff_high", "p_randomization", "p_t", "effect_size", "n_queries"):
            np.testing.assert_allclose(mine[column], direct[column], atol=1e-9)
        values = json.loads((other.entry.path / METRICS_FILE).read_text())
        for metric in METRICS:
            for aggregate in sig.AGGREGATES:
                row = mine[(mine["metric"] == metric) & (mine["aggregate"] == aggregate)].iloc[0]
                assert row["run_value"] == pytest.approx(values["aggregates"][aggregate][metric], abs=1e-4)
                assert row["baseline_value"] == pytest.approx(stored["aggregates"][aggregate][metric], abs=1e-4)
            for structure, cell in stored["breakdowns"]["structure"].items():
                row = mine[(mine["metric"] == metric) & (mine["aggregate"] == f"structure:{structure}")].iloc[0]
                assert row["baseline_value"] == pytest.approx(cell[metric], abs=1e-4)
        expected.append(direct["p_randomization"].to_numpy())
    reject, adjusted = sig.correct(np.concatenate(expected), "holm", 0.05)
    np.testing.assert_allclose(table["p_adjusted"], adjusted, atol=1e-12)
    assert table["significant"].tolist() == reject.tolist()
    assert "Minimum detectable difference" in out
    assert "page_single" in out.split("Minimum detectable difference")[1]


def test_a_rerun_reuses_the_cached_comparison_and_other_parameters_miss(multi_results, tmp_path, capsys):
    assert compare(multi_results, tmp_path, "significance.n_permutations=300") == 0
    first = capsys.readouterr().out
    (cached,) = (tmp_path / "cache" / "significance").glob("*.json")
    stamp = cached.stat().st_mtime_ns
    assert compare(multi_results, tmp_path, "significance.n_permutations=300") == 0
    second = capsys.readouterr().out
    assert "computed and stored in" in first and f"reused {cached}" in second
    assert cached.stat().st_mtime_ns == stamp
    assert first.split("\n", 4)[-1] == second.split("\n", 4)[-1].replace("reused", "computed and stored in")
    record = json.loads(cached.read_text())  # a number changed in place: found by the checksum, recomputed
    record["result"]["comparisons"][0]["difference"] += 1.0
    cached.write_text(json.dumps(record))
    assert compare(multi_results, tmp_path, "significance.n_permutations=300") == 0
    assert capsys.readouterr().out == first
    assert compare(multi_results, tmp_path, "significance.n_permutations=301") == 0
    assert "computed and stored in" in capsys.readouterr().out
    assert len(list((tmp_path / "cache" / "significance").glob("*.json"))) == 2
    assert compare(multi_results, tmp_path, "significance.n_permutations=300", "significance.correction=bh") == 0
    assert "Benjamini-Hochberg" in capsys.readouterr().out
    assert len(list((tmp_path / "cache" / "significance").glob("*.json"))) == 3


def subset(run: StoredRun, drop: int) -> StoredRun:
    return StoredRun(run.name, run.label, run.entry, run.how, run.per_query.iloc[drop:].reset_index(drop=True))


def test_other_query_sets_are_refused_in_one_line_or_compared_on_the_intersection(multi_results):
    baseline, other = load_run(BASELINE, multi_results), load_run(RUNS[0], multi_results)
    with pytest.raises(CompareError) as refused:
        compute(baseline, [subset(other, 5)], params())
    assert "\n" not in str(refused.value) and "colqwen25/base vs the baseline dom_bm25/base" in str(refused.value)
    result = compute(baseline, [subset(other, 5)], params(intersection=True))
    (note,) = result["notes"]
    assert "common queries" in note and "5" in note
    table = pd.DataFrame(result["comparisons"])
    assert set(table.loc[table["aggregate"] == "micro", "n_queries"]) == {len(baseline.per_query) - 5}


def test_runs_of_another_benchmark_are_refused(multi_results, tmp_path):
    baseline, other = load_run(BASELINE, multi_results), load_run(RUNS[0], multi_results)
    copy = tmp_path / "entry"
    shutil.copytree(other.entry.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["benchmark"]["name"] = "another-benchmark"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    elsewhere = StoredRun(other.name, other.label, type(other.entry)(copy), other.how, other.per_query)
    with pytest.raises(CompareError, match="is a run of another-benchmark, the baseline dom_bm25/base of"):
        check_benchmarks(baseline, [elsewhere], intersection=True)
    manifest["benchmark"]["name"], manifest["benchmark"]["fingerprint"] = BENCH, "0" * 32
    (copy / "manifest.json").write_text(json.dumps(manifest))
    version = StoredRun(other.name, other.label, type(other.entry)(copy), other.how, other.per_query)
    with pytest.raises(CompareError, match="different versions of synthetic-text"):
        check_benchmarks(baseline, [version], intersection=False)
    assert "another version" in check_benchmarks(baseline, [version], intersection=True)[0]


def test_compare_needs_a_baseline_and_another_run(multi_results, tmp_path):
    from vldocir.errors import ConfigError

    with pytest.raises(ConfigError, match="baseline="):
        compare(multi_results, tmp_path, "baseline=null")
    with pytest.raises(ConfigError, match="at least one run other than the baseline"):
        compare(multi_results, tmp_path, f"runs=[{BASELINE}]")
    with pytest.raises(ConfigError, match=r"significance\.correction"):
        compare(multi_results, tmp_path, "significance.correction=bonferroni")


@pytest.mark.slow
def test_report_py_do_compare(multi_results, tmp_path):
    """The command of docs/reports.md; a run from another store is refused in one line with exit 2."""
    env = {**os.environ, "VLDOCIR_RESULTS_DIR": str(multi_results), "VLDOCIR_LOG_DIR": str(tmp_path / "logs")}
    env["VLDOCIR_CACHE_DIR"] = str(tmp_path / "cache")
    command = [sys.executable, "-m", "vldocir.apps.report", "do=compare", f"baseline={BASELINE}"]
    done = subprocess.run(
        [*command, f"runs=[{RUNS[0]}]", "significance.n_permutations=200", f"out_dir={tmp_path / 'out'}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "micro" in done.stdout and "structure:page_single" in done.stdout
    assert list((tmp_path / "out" / "compare").glob("comparison_*.csv"))
    refused = subprocess.run(
        [*command, f"runs=[{BENCH}/nothing/here]"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "report error:" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_the_console_shows_interval_half_widths_beside_the_headline(multi_results):
    from vldocir.evaluation.console import HEADLINE_AGGREGATES, format_report, headline_intervals

    baseline = load_run(BASELINE, multi_results)
    metrics = json.loads((baseline.entry.path / METRICS_FILE).read_text())
    plain = format_report(metrics, "somewhere", reused=False)
    intervals = headline_intervals(baseline.per_query, metrics["ks"])
    shown = format_report(metrics, "somewhere", reused=False, intervals=intervals)
    assert "±" not in plain and "half-width of the 95% bootstrap interval" in shown
    direct = sig.bootstrap_intervals(baseline.per_query, ["ndcgall@10"], n_resamples=2000, seed=0, cells=False)
    micro = direct[direct["aggregate"] == "micro"].iloc[0]
    line = next(row for row in shown.splitlines() if row.startswith(HEADLINE_AGGREGATES["micro"]))
    value = f"{metrics['aggregates']['micro']['ndcgall@10']:6.2f} ±{(micro.high - micro.low) / 2:.2f}"
    assert value in line


def test_a_run_with_eval_intervals_prints_them(text_bench, tmp_path, capsys):
    from report_stores import evaluate_run

    dataset = [f"dataset.source={text_bench}", f"dataset.name={BENCH}", "dataset.build=null"]
    evaluate_run(tmp_path, *dataset, "eval.intervals=true")
    out = capsys.readouterr().out
    head = out.split("Headline metrics")[1].split("RecallAll@k by evidence structure")[0]
    # four aggregates, nDCGAll and RecallAll at each of the three ks, and the legend
    assert head.count(" ±") == 4 * 2 * 3 and "\n±: " in head
    assert "half-width of the 95% bootstrap interval" in head
