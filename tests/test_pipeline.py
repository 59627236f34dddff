"""The evaluation pipeline end to end: results store, manifest, cache reuse, report.

Most tests run the pipeline in process (``helpers.evaluate``: compose, then ``run_stage``, what
``run.py`` does minus process start-up); the last ones run ``python run.py`` as a subprocess (slow).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from helpers import evaluate, run_py
from vldocir import store
from vldocir.data.benchmark import load_benchmark
from vldocir.data.runs import read_run, write_run

STORE_FILES = (store.RUN_FILE, store.PER_QUERY_FILE, store.METRICS_FILE, store.MANIFEST_FILE)
OLD = 1_000_000_000  # an mtime (2001) that no write made by a test can have


@pytest.fixture
def run_eval(isolated_paths, small_bench_dir, capsys):
    """``run_eval(*overrides)`` evaluates DOM-BM25 on the small benchmark (``helpers.evaluate``);
    returns (metrics, the job's manifest, its printed report, the store entry the report names)."""

    def run(*overrides: str):
        capsys.readouterr()
        metrics, manifest, entry = evaluate(f"dataset.source={small_bench_dir}", "dataset.build=null", *overrides)
        return metrics, manifest, capsys.readouterr().out, entry

    return run


def entry_printed(stdout: str) -> Path:
    """The store entry the report names (``Run directory: <path>``)."""
    return Path(re.search(r"^Run directory: (\S+)", stdout, re.M).group(1))


def _events(manifest) -> list[tuple[str, str]]:
    return [(e["kind"], e["status"]) for e in manifest["cache"]]


def _age(path: Path) -> None:
    os.utime(path, ns=(OLD * 10**9, OLD * 10**9))


def _rewritten(path: Path) -> bool:
    return path.stat().st_mtime_ns != OLD * 10**9


def test_store_entry_and_manifest(run_eval, small_bench_dir, isolated_paths):
    metrics, manifest, printed, run_dir = run_eval()

    assert run_dir.parent == isolated_paths / "results" / "runs" / "test-small" / "dom_bm25" / "base"
    assert run_dir.name == f"depth100_k3-5-10_{manifest['run']['key']}"
    for file in STORE_FILES:
        assert (run_dir / file).is_file(), file
    assert json.loads((run_dir / store.METRICS_FILE).read_text()) == json.loads(json.dumps(metrics))

    assert manifest["config"]["dataset"]["source"] == str(small_bench_dir)
    assert manifest["config"]["retriever"]["id"] == "dom_bm25"
    assert manifest["config"]["paths"]["results_dir"] == str(isolated_paths / "results")
    assert f"dataset.source={small_bench_dir}" in manifest["overrides"]
    assert re.fullmatch(r"[0-9a-f]{40}", manifest["git"]["sha"])
    assert isinstance(manifest["git"]["dirty"], bool)
    assert manifest["packages"]["vldocir"] and manifest["packages"]["hydra-core"] and manifest["packages"]["bm25s"]
    bench = load_benchmark(small_bench_dir)
    assert manifest["benchmark"]["fingerprint"] == bench.fingerprint
    assert manifest["benchmark"]["name"] == "test-small"
    assert manifest["hardware"]["cpus"] >= 1 and manifest["hardware"]["host"]
    assert manifest["timings"]["wall_s"] > 0
    assert set(manifest["timings"]) >= {
        "load_benchmark_s",
        "validate_s",
        "fingerprint_s",
        "retrieve_s",
        "evaluate_s",
        "wall_s",
    }
    assert isinstance(manifest["timings"]["validate_from_memo"], bool)
    assert isinstance(manifest["timings"]["fingerprint_from_memo"], bool)
    assert manifest["run"]["reused"] is False
    # The manifest vouches for the files beside it.
    assert manifest["store"]["run_key"] == manifest["run"]["key"] and manifest["store"]["ks"] == [3, 5, 10]
    for file in (store.RUN_FILE, store.PER_QUERY_FILE, store.METRICS_FILE):
        assert manifest["store"]["files"][file] == store.file_record(run_dir / file)
    assert _events(manifest) == [("run", "miss"), ("bm25-index", "miss")]

    run = read_run(run_dir / store.RUN_FILE)
    assert pc.max(run["rank"]).as_py() <= manifest["run"]["depth"]
    per_query = pq.read_table(run_dir / store.PER_QUERY_FILE).to_pandas()
    assert len(per_query) == metrics["n_queries"] == len(bench.queries)

    # The printed report: headline rows, per-structure RecallAll, where the entry is.
    assert re.search(r"^Macro\s+\d", printed, re.M) and re.search(r"^Micro\s+\d", printed, re.M)
    assert "page_single" in printed and "cross_doc" in printed
    assert f"Run directory: {run_dir}" in printed
    assert "reused" not in printed


def test_cache_events_across_runs(run_eval):
    _, first, _, _ = run_eval()
    assert _events(first) == [("run", "miss"), ("bm25-index", "miss")]
    _, again, _, _ = run_eval()
    assert _events(again) == [("run", "hit")], "the stored run is reused: no index lookup, no search"
    # Another depth is another run, over the same index.
    _, deeper, _, _ = run_eval("depth=50")
    assert _events(deeper) == [("run", "miss"), ("bm25-index", "hit")]
    assert deeper["run"]["key"] != first["run"]["key"]


def test_identical_rerun_reuses_the_stored_run(run_eval, monkeypatch):
    metrics, _, _, run_dir = run_eval()
    _age(run_dir / store.RUN_FILE)
    writes, reads = [], []
    monkeypatch.setattr(store, "_write_file", lambda *args: writes.append(args))
    real_read = store.read_stored_run
    monkeypatch.setattr(
        store, "read_stored_run", lambda entry, columns=None: reads.append(columns) or real_read(entry, columns)
    )
    again, manifest, printed, again_dir = run_eval()
    # The same evaluation of the same run: the entry stays as it is, its manifest that of the first run.
    assert writes == [], "nothing to write: the entry already holds this result"
    assert reads == [("query_id", "page_id", "score")], "read once, without the ranks the metrics recompute"
    assert manifest["store"]["files"] == json.loads((run_dir / store.MANIFEST_FILE).read_text())["store"]["files"]
    assert manifest["run"]["reused"] is True and again_dir == run_dir
    assert json.loads((run_dir / store.MANIFEST_FILE).read_text())["run"]["reused"] is False
    assert not _rewritten(run_dir / store.RUN_FILE)
    assert "reused" in printed
    assert again == metrics


def test_changing_ks_reevaluates_without_searching(run_eval):
    _, _, _, first_dir = run_eval()
    _age(first_dir / store.RUN_FILE)
    metrics, manifest, printed, run_dir = run_eval("eval.ks=[1,20]")
    assert _events(manifest) == [("run", "hit")] and manifest["run"]["reused_from"] == str(first_dir)
    assert run_dir != first_dir and run_dir.name.startswith("depth100_k1-20_")
    assert not _rewritten(first_dir / store.RUN_FILE)
    assert (run_dir / store.RUN_FILE).read_bytes() == (first_dir / store.RUN_FILE).read_bytes()
    assert store.Entry(first_dir).verify(full=True), "the first evaluation is kept as it was"
    assert metrics["ks"] == [1, 20]
    assert set(metrics["aggregates"]["macro"]) >= {"recallall@1", "recallall@20", "ndcgall@20"}
    assert "recallall@10" not in metrics["aggregates"]["macro"]
    assert "recallall@20" in pq.read_schema(run_dir / store.PER_QUERY_FILE).names
    assert "recallall@20" in printed


def test_overwrite_policy_recomputes(run_eval):
    first_metrics, first, _, run_dir = run_eval()
    _age(run_dir / store.RUN_FILE)
    metrics, manifest, _printed, again_dir = run_eval("cache_policy=overwrite")
    assert ("run", "overwrite") in _events(manifest)
    assert ("bm25-index", "overwrite") in _events(manifest)
    assert manifest["run"]["key"] == first["run"]["key"] and metrics == first_metrics
    # Recomputed to the same result: the verified entry is kept, never written over.
    assert again_dir == run_dir and not _rewritten(run_dir / store.RUN_FILE)


def test_a_run_file_edited_by_hand_is_not_reused_nor_deleted(run_eval, caplog):
    metrics, _, _, run_dir = run_eval()
    run = read_run(run_dir / store.RUN_FILE)
    dropped = run["query_id"][0].as_py()
    write_run(run.filter(pc.not_equal(run["query_id"].cast("string"), dropped)), run_dir / store.RUN_FILE)
    edited = (run_dir / store.RUN_FILE).read_bytes()

    with caplog.at_level("WARNING"):
        again, manifest, _, again_dir = run_eval()
    assert manifest["run"]["reused"] is False and ("run", "miss") in _events(manifest)
    assert f"not reusing the run in {run_dir}" in caplog.text and "run.parquet" in caplog.text
    assert again == metrics, "recomputed from scratch, not from the edited file"
    assert again_dir == run_dir.with_name(run_dir.name + ".2"), "published beside the damaged entry"
    assert (run_dir / store.RUN_FILE).read_bytes() == edited, "the edited file is left alone"
    assert [Path(p) for p in store.list_runs(run_dir.parents[4]).path] == [again_dir]


# --- `python run.py` as a subprocess ------------------------------------------------------------


@pytest.mark.slow
def test_command_end_to_end_on_a_benchmark_built_on_first_use(isolated_paths):
    done = run_py("dataset=synthetic_text")
    assert done.returncode == 0, done.stderr[-5000:]
    assert (isolated_paths / "data" / "synthetic-text" / "benchmark.json").is_file(), "built on first use"
    run_dir = entry_printed(done.stdout)
    assert run_dir.parent == isolated_paths / "results" / "runs" / "synthetic-text" / "dom_bm25" / "base"
    for file in STORE_FILES:
        assert (run_dir / file).is_file(), file
    assert re.search(r"^Macro\s+\d", done.stdout, re.M) and re.search(r"^Micro\s+\d", done.stdout, re.M)
    assert f"Run directory: {run_dir}" in done.stdout

    structures = json.loads((run_dir / store.METRICS_FILE).read_text())["breakdowns"]["structure"]
    recall = {s: v["recallall@10"] for s, v in structures.items()}
    assert recall["page_single"] > recall["cross_doc"], recall
    assert recall["page_multi"] > recall["cross_doc"], recall

    manifest = json.loads((run_dir / store.MANIFEST_FILE).read_text())
    assert manifest["overrides"] == ["dataset=synthetic_text"] and manifest["run"]["reused"] is False

    # The identical command again: the run is reused, said so, and not rewritten.
    _age(run_dir / store.RUN_FILE)
    again = run_py("dataset=synthetic_text")
    assert again.returncode == 0, again.stderr[-5000:]
    assert "reused" in again.stdout and entry_printed(again.stdout) == run_dir
    assert not _rewritten(run_dir / store.RUN_FILE)


@pytest.mark.slow
def test_failing_job_names_the_problem(isolated_paths):
    missing = isolated_paths / "no-such-benchmark"
    done = run_py(f"dataset.source={missing}", "dataset.build=null")
    assert done.returncode != 0
    assert str(missing) in done.stderr and "does not exist" in done.stderr
    assert not (isolated_paths / "results" / "runs").exists(), "a failed job leaves no store entry"


RRF_OF_TWO = [
    "setting=rrf",
    "setting.fuse=base",
    "setting.id=rrf-k1",
    "setting.method.inputs=[base,{setting:base,overrides:['retriever.model.k1=0.9']}]",
]


@pytest.mark.parametrize("damage", ["flipped byte", "copied from the other input"])
def test_a_damaged_input_run_of_a_setting_is_computed_again_never_used(run_eval, damage, caplog):
    """The fused run is computed again from its inputs; the damaged input entry is found, not used,
    and its run is computed again and filed beside it: the same numbers as the first time."""
    metrics, manifest, _, entry = run_eval(*RRF_OF_TWO)
    inputs = [Path(i["entry"]) for i in manifest["run"]["inputs"]]
    damaged = inputs[0] / store.RUN_FILE
    if damage == "flipped byte":
        raw = bytearray(damaged.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        damaged.write_bytes(bytes(raw))
    else:
        damaged.write_bytes((inputs[1] / store.RUN_FILE).read_bytes())
    for name in STORE_FILES:  # the fused entry gone: its run must be made from the inputs again
        (entry / name).unlink()
    entry.rmdir()

    with caplog.at_level("WARNING"):
        again, again_manifest, _, again_entry = run_eval(*RRF_OF_TWO)
    assert f"not reusing the run in {inputs[0]}" in caplog.text
    assert again == metrics and again_entry == entry
    first_input, second_input = again_manifest["run"]["inputs"]
    assert not first_input["reused"] and Path(first_input["entry"]) == inputs[0].with_name(inputs[0].name + ".2")
    assert second_input["reused"] and Path(second_input["entry"]) == inputs[1]
    recomputed = Path(first_input["entry"]) / store.METRICS_FILE
    assert recomputed.read_text() == (inputs[0] / store.METRICS_FILE).read_text(), "the input's own numbers too"
