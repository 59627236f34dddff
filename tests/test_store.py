"""The results store never lies: every kill, full disk, race or variant leaves verified entries only.

The pipeline publishes an entry in five steps (run, per-query rows, metrics, manifest written into
a staging directory, then one rename). The crash tests run the pipeline (``helpers.evaluate``) in a
child process that SIGKILLs itself before or after each step (the store's two step functions
wrapped, nothing else changed), then run the same command again and compare with an uninterrupted run.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from helpers import REPO_ROOT, evaluate, newest_entry
from vldocir import store
from vldocir.store import cli as store_cli

STEPS = ["write run.parquet", "write per_query.parquet", "write metrics.json", "write manifest.json", "rename"]
KILL_POINTS = [(i, when) for i in range(1, len(STEPS) + 1) for when in ("before", "after")]

CHILD = r"""
import os, signal, sys
sys.path.insert(0, "tests")
from helpers import evaluate
from vldocir import store

step, when, overrides = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
calls = [0]

def killing(function):
    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = function(*args, **kwargs)
        if calls[0] == step and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return wrapped

store._write_file = killing(store._write_file)
store._commit = killing(store._commit)
evaluate(*overrides)
"""


def _bench(small_bench_dir) -> list[str]:
    return [f"dataset.source={small_bench_dir}", "dataset.build=null"]


def _kill_at(step: int, when: str, overrides: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(step), when, *overrides],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HYDRA_FULL_ERROR": "1"},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_bench_dir):
    """Metrics of uninterrupted runs (default ks, and ks [1,20]) in a store of their own."""
    root = tmp_path_factory.mktemp("reference")
    saved = {k: os.environ.get(k) for k in ("VLDOCIR_RESULTS_DIR", "VLDOCIR_CACHE_DIR")}
    os.environ.update(VLDOCIR_RESULTS_DIR=str(root / "results"), VLDOCIR_CACHE_DIR=str(root / "cache"))
    try:
        return {
            "default": evaluate(*_bench(small_bench_dir)).metrics,
            "k1-20": evaluate(*_bench(small_bench_dir), "eval.ks=[1,20]").metrics,
        }
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def _entries(results: Path) -> list[Path]:
    return [Path(p) for p in store.list_runs(results).path]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "when"), KILL_POINTS, ids=[f"{w}-{STEPS[s - 1].replace(' ', '-')}" for s, w in KILL_POINTS]
)
def test_sigkill_at_any_step_of_a_first_publish(isolated_paths, small_bench_dir, reference, step, when):
    results = isolated_paths / "results"
    _kill_at(step, when, _bench(small_bench_dir))
    published = (step, when) == (5, "after")
    assert len(_entries(results)) == (1 if published else 0), "an entry is either complete and verified, or absent"

    assert evaluate(*_bench(small_bench_dir)).metrics == reference["default"]
    (entry,) = _entries(results)
    assert store.Entry(entry).verify(full=True)
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name], "the killed writer's staging is cleaned"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "when"), KILL_POINTS, ids=[f"{w}-{STEPS[s - 1].replace(' ', '-')}" for s, w in KILL_POINTS]
)
def test_sigkill_at_any_step_of_a_reevaluation(isolated_paths, small_bench_dir, reference, step, when):
    """The second evaluation links the stored run into its entry; a kill there harms neither."""
    results = isolated_paths / "results"
    evaluate(*_bench(small_bench_dir))
    (first,) = _entries(results)
    before = {f: (first / f).read_bytes() for f in (*store.VOUCHED_FILES, store.MANIFEST_FILE)}

    _kill_at(step, when, [*_bench(small_bench_dir), "eval.ks=[1,20]"])
    assert {f: (first / f).read_bytes() for f in before} == before, "the first entry is untouched"

    assert evaluate(*_bench(small_bench_dir), "eval.ks=[1,20]").metrics == reference["k1-20"]
    entries = _entries(results)
    assert len(entries) == 2 and all(store.Entry(e).verify(full=True) for e in entries)
    assert sorted(p.name for p in first.parent.iterdir()) == sorted(e.name for e in entries)


@pytest.mark.parametrize("step", range(1, len(STEPS)), ids=STEPS[:-1])
def test_full_disk_at_any_step_publishes_nothing_and_the_rerun_is_right(
    isolated_paths, small_bench_dir, reference, monkeypatch, step
):
    results = isolated_paths / "results"
    real, calls = store._write_file, [0]

    def full_disk(staging, name, write):
        calls[0] += 1
        if calls[0] == step:
            write(staging / name)  # part of the file reaches the disk, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(staging / name))
        return real(staging, name, write)

    monkeypatch.setattr(store, "_write_file", full_disk)
    with pytest.raises(store.StoreError, match=r"the disk is full\. Nothing was published"):
        evaluate(*_bench(small_bench_dir))
    setting_dir = results / "runs" / "test-small" / "dom_bm25" / "base"
    assert list(setting_dir.iterdir()) == [], "no entry and no staging debris"

    monkeypatch.setattr(store, "_write_file", real)
    assert evaluate(*_bench(small_bench_dir)).metrics == reference["default"]


def test_full_disk_on_the_rename_keeps_the_old_entries(isolated_paths, small_bench_dir, reference, monkeypatch):
    results = isolated_paths / "results"
    evaluate(*_bench(small_bench_dir))

    def no_space(staging, final):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:  # not monkeypatch.undo(): that would undo isolated_paths too
        patch.setattr(store, "_commit", no_space)
        with pytest.raises(store.StoreError, match="the disk is full"):
            evaluate(*_bench(small_bench_dir), "eval.ks=[1,20]")
    (entry,) = _entries(results)
    assert store.Entry(entry).verify(full=True)
    assert evaluate(*_bench(small_bench_dir), "eval.ks=[1,20]").metrics == reference["k1-20"]


def test_variants_get_their_own_entries_and_are_listed(isolated_paths, small_bench_dir, caplog, capsys):
    results = isolated_paths / "results"
    evaluate(*_bench(small_bench_dir))
    evaluate(*_bench(small_bench_dir), "eval.ks=[1,3]")
    evaluate(*_bench(small_bench_dir), "depth=20")
    assert "with other parameters" not in caplog.text
    with caplog.at_level("WARNING"):
        evaluate(*_bench(small_bench_dir), "retriever.model.k1=0.9")
    assert "holds a run of dom_bm25/base with other parameters; both are kept" in caplog.text
    index = store.list_runs(results)
    assert sorted(zip(index.depth, index.ks, strict=True)) == [
        (20, (3, 5, 10)),
        (100, (1, 3)),
        (100, (3, 5, 10)),
        (100, (3, 5, 10)),
    ]
    assert index.run_key.nunique() == 3  # depth 20 and k1 0.9 are other runs; ks [1,3] re-evaluates the first
    for row in index.itertuples():
        manifest = json.loads((row.path / store.MANIFEST_FILE).read_text())
        assert (manifest["store"]["depth"], tuple(manifest["store"]["ks"])) == (row.depth, row.ks)
        assert json.loads((row.path / store.METRICS_FILE).read_text())["ks"] == list(row.ks)

    picked = store.select(index, ks=[5, 10], depth=100).iloc[0]
    assert picked.alternatives == 3 and picked.depth == 100 and picked.ks == (3, 5, 10)
    assert picked.path == index[(index.depth == 100) & (index.ks == (3, 5, 10))].sort_values("created_at").path.iloc[-1]

    capsys.readouterr()
    assert store_cli.main([str(results)]) == 0  # python -m vldocir.store RESULTS_DIR
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 4


def test_a_benchmark_with_the_same_name_and_other_content_gets_its_own_entry(isolated_paths, tmp_path):
    from vldocir.construction.synthetic import SyntheticSpec, generate

    for seed in (1, 2):
        generate(SyntheticSpec(name="same-name", seed=seed), tmp_path / f"b{seed}")
        evaluate(f"dataset.source={tmp_path / f'b{seed}'}", "dataset.build=null")
    index = store.list_runs(isolated_paths / "results")
    assert len(index) == 2 and index.fingerprint.nunique() == 2 and set(index.benchmark) == {"same-name"}


def test_an_entry_that_records_no_benchmark_root_is_not_verified(isolated_paths, small_bench_dir, caplog):
    """The reports find a run's benchmark by its manifest's benchmark.root; an entry without it is
    not one of this store's, so reports leave it out and no job reuses its run."""
    results = isolated_paths / "results"
    first = evaluate(*_bench(small_bench_dir))
    manifest_file = first.entry / store.MANIFEST_FILE
    manifest = json.loads(manifest_file.read_text())
    del manifest["benchmark"]["root"]
    manifest_file.write_text(json.dumps(store.seal_manifest(manifest)))  # written so, not damaged
    assert store.Entry(first.entry).problems() == ["manifest.json records no benchmark.root"]
    with caplog.at_level("WARNING"):
        assert store.list_runs(results).empty
    assert f"skipping {first.entry}: manifest.json records no benchmark.root" in caplog.text
    assert store.find_run(first.entry.parent, first.manifest["run"]["key"]) is None


def test_hand_placed_files_are_never_touched(isolated_paths, small_bench_dir, caplog):
    results = isolated_paths / "results"
    setting_dir = results / "runs" / "test-small" / "dom_bm25" / "base"
    setting_dir.mkdir(parents=True)
    (setting_dir / "run.parquet").write_bytes(b"placed by hand")  # outside any entry
    evaluate(*_bench(small_bench_dir))
    (entry,) = _entries(results)
    other = entry.with_name(entry.name.replace("k3-5-10", "k1-20"))  # made by hand where the next entry goes
    other.mkdir()
    (other / "notes.txt").write_text("mine")

    with caplog.at_level("WARNING"):
        evaluate(*_bench(small_bench_dir), "eval.ks=[1,20]")
    assert "is in the way and is not a verified entry" in caplog.text
    assert (setting_dir / "run.parquet").read_bytes() == b"placed by hand"
    assert (other / "notes.txt").read_text() == "mine" and sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert store.Entry(entry).verify(full=True)
    assert sorted(p.name for p in _entries(results)) == sorted([entry.name, other.name + ".2"])
    assert [p for p, _ in store.unverified(results)] == [setting_dir, other]


def test_concurrent_writers_of_one_entry_leave_one_verified_entry(isolated_paths, small_bench_dir):
    """Eight threads publish the same evaluation at once: the first rename wins, the others keep it."""
    evaluate(*_bench(small_bench_dir))
    (entry,) = _entries(isolated_paths / "results")
    per_query = pd.read_parquet(entry / store.PER_QUERY_FILE)
    metrics = json.loads((entry / store.METRICS_FILE).read_text())
    manifest = json.loads((entry / store.MANIFEST_FILE).read_text())
    name = entry.name.replace("depth100", "depth100x")
    barrier, out = threading.Barrier(8), []

    def writer():
        barrier.wait()
        out.append(
            store.publish(
                entry.parent,
                name,
                run=None,
                reused=store.Entry(entry),
                per_query=per_query,
                metrics=metrics,
                manifest=json.loads(json.dumps(manifest)),
            )
        )

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(out) == {entry.parent / name}
    assert store.Entry(entry.parent / name).verify(full=True)
    assert sorted(p.name for p in entry.parent.iterdir()) == sorted([entry.name, name]), "no staging debris"


@pytest.mark.slow
def test_parallel_sweeps_keep_every_point(isolated_paths, small_bench_dir):
    """ks, depth and parameter sweeps through submitit_local, two of them at the same time."""
    common = ["-m", "hydra/launcher=submitit_local", *_bench(small_bench_dir)]
    sweeps = [
        [*common, "eval.ks=[1,3],[5,10]"],
        [*common, "eval.ks=[3],[5],[10]"],
        [*common, "depth=10,20,50", "eval.ks=[10]"],
        [*common, "retriever.model.k1=0.9,1.2"],
    ]
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "run.py", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in sweeps
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    index = store.list_runs(isolated_paths / "results")
    points = sorted((row.depth, row.ks) for row in index.itertuples())
    assert points == sorted(
        [
            (100, (1, 3)),
            (100, (5, 10)),
            (100, (3,)),
            (100, (5,)),
            (100, (10,)),
            (10, (10,)),
            (20, (10,)),
            (50, (10,)),
            (100, (3, 5, 10)),
            (100, (3, 5, 10)),
        ]
    )
    for row in index.itertuples():
        assert store.Entry(row.path).verify(full=True)
        assert json.loads((row.path / store.METRICS_FILE).read_text())["ks"] == list(row.ks)
    assert store.unverified(isolated_paths / "results") == []


def test_names_that_would_leave_the_store_are_refused(tmp_path):
    for bad in ("../../x", "/abs", "..", ".", "a/b", "", "x y"):
        with pytest.raises(store.StoreError, match="cannot name a results-store directory"):
            store.setting_directory(tmp_path, bad, "dom_bm25", "base")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "linked").symlink_to(outside)
    with pytest.raises(store.StoreError, match="resolves outside the results store"):
        store.setting_directory(tmp_path, "linked", "dom_bm25", "base")
    assert store.setting_directory(tmp_path, "vl-docir_v1.0", "dom_bm25", "ctx-n256").parts[-4:] == (
        "runs",
        "vl-docir_v1.0",
        "dom_bm25",
        "ctx-n256",
    )


def test_reports_pick_the_paper_depth_and_ks_and_say_which(isolated_paths, small_bench_dir):
    from vldocir.reporting.store_view import ResultsView

    results = isolated_paths / "results"
    evaluate(*_bench(small_bench_dir))
    evaluate(*_bench(small_bench_dir), "depth=20")  # newer, but not the paper's depth
    evaluate(*_bench(small_bench_dir), "eval.ks=[1,3]")  # newer, but without k=5, 10
    view = ResultsView(results, "test-small", ks=[5, 10], depth=100)
    run = view.runs()[0]
    assert run.path == newest_entry(results, "test-small", "dom_bm25", "base").parent / run.path.name
    assert run.path.name.startswith("depth100_k3-5-10_")
    assert view.choices() == [f"dom_bm25/base: {run.path.name} (chosen from 3 entries)"]
    # The viewer, given the setting directory, takes the newest entry evaluated at its k.
    assert store.newest_entry_in(run.path.parent, k=1).name.startswith("depth100_k1-3_")
    assert store.newest_entry_in(run.path.parent, k=5).name.startswith("depth20_k3-5-10_")


# -- damaged entries: recomputed with the same numbers, never used --------------------------------

DAMAGES = ["flipped byte", "truncated", "deleted", "swapped ids", "entry copied over it", "stale file of another key"]


def _flip_middle(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # an ASCII digit or letter stays one: the JSON still parses
    path.write_bytes(bytes(raw))


def _swap_ids(path: Path) -> None:
    """Two ids (or two keyed values) exchanged, everything else as it was."""
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        table = pq.read_table(path)
        column = "page_id" if path.name == store.RUN_FILE else "query_id"
        ids = table.column(column).to_pylist()
        first, other = 0, next(i for i, v in enumerate(ids) if v != ids[0])
        ids[first], ids[other] = ids[other], ids[first]
        index = table.schema.get_field_index(column)
        pq.write_table(
            table.set_column(index, table.schema.field(index), pa.array(ids, table.column(column).type)), path
        )
        return
    data = json.loads(path.read_text())
    if path.name == store.METRICS_FILE:
        micro, macro = data["aggregates"]["micro"], data["aggregates"]["macro"]
        data["aggregates"]["micro"], data["aggregates"]["macro"] = macro, micro
    else:
        record = data["store"]
        record["run_key"], record["eval_key"] = record["eval_key"], record["run_key"]
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def damage_reference(tmp_path_factory, small_bench_dir):
    """A clean store (and cache) holding the default run and a run of other parameters (another key,
    other numbers), and the default run's metrics; each damage case works on a copy."""
    root = tmp_path_factory.mktemp("damage-reference")
    saved = {k: os.environ.get(k) for k in ("VLDOCIR_RESULTS_DIR", "VLDOCIR_CACHE_DIR")}
    os.environ.update(VLDOCIR_RESULTS_DIR=str(root / "results"), VLDOCIR_CACHE_DIR=str(root / "cache"))
    try:
        clean = evaluate(*_bench(small_bench_dir))
        other = evaluate(*_bench(small_bench_dir), "retriever.model.k1=0.9")
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return root, clean, other.entry


@pytest.mark.parametrize("name", [*store.VOUCHED_FILES, store.MANIFEST_FILE])
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_entry_is_never_used_and_the_rerun_gives_the_clean_numbers(
    damage_reference, isolated_paths, small_bench_dir, damage, name, caplog
):
    root, clean, other = damage_reference
    results = isolated_paths / "results"
    shutil.copytree(root / "results", results)
    shutil.copytree(root / "cache", isolated_paths / "cache")
    entry = results / clean.entry.relative_to(root / "results")
    other = results / other.relative_to(root / "results")
    path = entry / name
    if damage == "flipped byte":
        _flip_middle(path)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "deleted":
        path.unlink()
    elif damage == "swapped ids":
        _swap_ids(path)
    elif damage == "entry copied over it":
        shutil.rmtree(entry)
        shutil.copytree(other, entry)
    else:
        shutil.copyfile(other / name, path)

    assert store.Entry(entry).problems(full=True), "the damage is found"
    cheap = store.Entry(entry).problems()
    # Reports list entries by the cheap checks, which miss only a same-size change of run.parquet:
    # reports never read that file (the viewer, a reuse and --verify hash it in full).
    assert cheap or name == store.RUN_FILE
    assert (entry in _entries(results)) == (not cheap)
    assert [p for p, _ in store.unverified(results)] == [entry]
    assert store.find_run(entry.parent, clean.manifest["run"]["key"]) is None

    with caplog.at_level("WARNING"):
        again = evaluate(*_bench(small_bench_dir))
    assert again.metrics == clean.metrics, "recomputed, not read from the damaged entry"
    assert again.manifest["run"]["reused"] is False
    assert again.entry == entry.with_name(entry.name + ".2"), "published beside it; the damaged one is left alone"
    assert store.Entry(again.entry).verify(full=True)
    assert sorted(_entries(results)) == sorted([other, again.entry] + ([entry] if not cheap else []))


def test_a_reused_run_that_changes_before_it_is_linked_is_refused_in_one_line(isolated_paths, small_bench_dir):
    first = evaluate(*_bench(small_bench_dir))
    reused = store.find_run(first.entry.parent, first.manifest["run"]["key"])
    _flip_middle(first.entry / store.RUN_FILE)  # after find_run verified it, before publish links it
    with pytest.raises(store.StoreError, match=r"run\.parquet changed after it was verified") as error:
        store.publish(
            first.entry.parent,
            first.entry.name.replace("k3-5-10", "k1"),
            run=None,
            reused=reused,
            per_query=pd.read_parquet(first.entry / store.PER_QUERY_FILE),
            metrics=json.loads((first.entry / store.METRICS_FILE).read_text()),
            manifest=json.loads((first.entry / store.MANIFEST_FILE).read_text()),
        )
    assert "\n" not in str(error.value) and str(first.entry / store.RUN_FILE) in str(error.value)
    assert sorted(p.name for p in first.entry.parent.iterdir()) == [first.entry.name], "nothing published"


def test_a_stored_run_with_no_rows_exports_as_an_empty_file(tmp_path):
    """``python -m vldocir.store export`` of a run that retrieved nothing: an empty TREC run file
    (it raised IndexError)."""
    from vldocir.data.runs import write_run

    entry = store.Entry(tmp_path / "results" / "runs" / "bench" / "retriever" / "setting" / "entry")
    entry.path.mkdir(parents=True)
    ids = pa.array([], pa.string())
    empty = pa.table({"query_id": ids, "page_id": ids, "score": pa.array([], pa.float32())})
    write_run(empty, entry.path / store.RUN_FILE)
    done = store_cli.export_trec(entry, tmp_path / "empty.trec")
    assert (tmp_path / "empty.trec").read_bytes() == b""
    assert (done["rows"], done["queries"], done["lowered"], done["ties_left"]) == (0, 0, 0, 0)
