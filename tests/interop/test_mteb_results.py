"""Stored runs as mteb result files (``python -m vldocir.store export --format mteb``), read back by mteb.

Real runs made in process by the pipeline (DOM-BM25 on the mini benchmark; on an imported ViDoRe v3
fixture with six language subsets, offline hub), exported through the CLI's ``main``, then read by
mteb itself: ``TaskResult.from_disk``, ``ResultCache(<out>).load_results`` and (for mteb's own task)
``validate_and_filter_scores``. Oracles: ``metrics.json`` (its main score, per subset and mean; its
Micro nDCG@k and Recall@k, which mteb's pytrec_eval scoring must equal on the stored ranking) and
the evidence-complete aggregates it holds.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers import CONFIG_DIR, MINI_DIR, compose_cfg, evaluate

sys.path.insert(0, str(Path(__file__).parents[1] / "importers"))  # the hub-schema fixtures live there
import hub_schema_fixtures as fx
from importer_fixtures import hub_cache
from vldocir.evaluation.protocol import Protocol
from vldocir.interop import mteb_results as mr
from vldocir.store import cli as store_cli

mteb = pytest.importorskip("mteb")
from mteb.results import TaskResult  # noqa: E402


def export(entry: Path, out: Path, *extra: str) -> int:
    return store_cli.main(["export", "--format", "mteb", str(entry), str(out), *extra])


def only_file(out: Path) -> Path:
    files = [p for p in (out / "results").glob("*/*/*.json") if p.name != "model_meta.json"]
    assert len(files) == 1, files
    return files[0]


def loaded_by_mteb(out: Path):
    """mteb's own loader on the folder: (model name, revision) -> {task: TaskResult}."""
    results = mteb.ResultCache(out).load_results(include_remote=False)
    return {(m.model_name, m.model_revision): {t.task_name: t for t in m.task_results} for m in results.model_results}


@pytest.fixture
def mini_run(isolated_paths, tmp_path):
    """DOM-BM25 on a copy of the mini benchmark (so that a test may change it), stored by the pipeline."""
    bench = tmp_path / "mini"
    shutil.copytree(MINI_DIR, bench)
    return evaluate(f"dataset.source={bench}", "retriever=dom_bm25")


def test_a_stored_mini_run_reads_back_in_mteb_with_its_main_score(mini_run, tmp_path, capsys):
    metrics, _, entry = mini_run
    out = tmp_path / "mteb"
    assert export(entry, out) == 0
    path = only_file(out)
    assert (
        path.parent.parent.name == "vldocir__dom_bm25"
        and path.parent.name == json.loads((entry / "manifest.json").read_text())["store"]["run_key"]
    )
    assert path.name == "VLDocIR-vl-docir-mini.json" and (path.parent / "model_meta.json").is_file()

    headline = metrics["aggregates"]["macro"]["ndcgall@10"] / 100  # the paper's headline
    result = TaskResult.from_disk(path)
    assert result.main_score == pytest.approx(headline, abs=1e-6)
    (scores,) = result.scores["test"]
    assert scores["hf_subset"] == "default" and scores["languages"] == ["eng-Latn"]
    assert scores["vldocir_main_score"] == "macro_ndcgall_at_10"
    # mteb's own metrics at its cut-offs, and on the stored ranking they are this project's numbers.
    per_query = pd.read_parquet(entry / "per_query.parquet")
    for k in (1, 3, 5, 10, 20, 100, 1000):
        for key in ("ndcg", "map", "recall", "precision", "mrr", "hit_rate"):
            assert f"{key}_at_{k}" in scores
    for k in metrics["ks"]:
        assert scores[f"ndcg_at_{k}"] == pytest.approx(metrics["aggregates"]["micro"][f"ndcg@{k}"] / 100, abs=1e-5)
        assert scores[f"recall_at_{k}"] == pytest.approx(metrics["aggregates"]["micro"][f"recall@{k}"] / 100, abs=1e-5)
        assert scores[f"mrr_at_{k}"] == pytest.approx(per_query[f"mrr@{k}"].mean(), abs=1e-6)
        # the evidence-complete metrics, kept by mteb through to_disk / from_disk
        for metric in ("ndcgall", "recallall"):
            assert scores[f"macro_{metric}_at_{k}"] == pytest.approx(
                metrics["aggregates"]["macro"][f"{metric}@{k}"] / 100
            )
            assert scores[f"{metric}_at_{k}"] == pytest.approx(
                metrics["aggregates"]["micro"][f"{metric}@{k}"] / 100, abs=1e-6
            )
            for structure, row in metrics["breakdowns"]["structure"].items():
                assert scores[f"{structure}_{metric}_at_{k}"] == pytest.approx(row[f"{metric}@{k}"] / 100, abs=1e-6)

    loaded = loaded_by_mteb(out)
    (model,) = loaded
    assert model[0] == "vldocir/dom_bm25"
    assert loaded[model]["VLDocIR-vl-docir-mini"].main_score == pytest.approx(headline, abs=1e-6)
    assert "macro_recallall_at_10" in loaded[model]["VLDocIR-vl-docir-mini"].scores["test"][0]

    # Nothing is written over, and the benchmark must be the one the entry was evaluated on.
    before = path.read_bytes()
    assert export(entry, out) == 2
    assert capsys.readouterr().err.strip().endswith("exists; pass --force to replace it")
    assert export(entry, out, "--force") == 0 and path.read_bytes() == before
    bench = Path(json.loads((entry / "manifest.json").read_text())["config"]["dataset"]["source"])
    queries = pd.read_parquet(bench / "queries.parquet")
    queries.loc[0, "text"] = queries.loc[0, "text"] + " (edited)"
    queries.to_parquet(bench / "queries.parquet", index=False)
    assert export(entry, tmp_path / "again") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("export: the benchmark at") and "changed since" in err and "\n" not in err
    assert not (tmp_path / "again").exists()


def test_a_main_score_mteb_does_not_reproduce_is_refused(mini_run):
    """The check itself: metrics.json saying another headline than mteb's scoring gives is refused."""
    metrics, manifest, entry = mini_run
    bench = Path(manifest["config"]["dataset"]["source"])
    from vldocir.data.benchmark import load_benchmark
    from vldocir.store import Entry, read_stored_run

    loaded = load_benchmark(bench)
    qrels = loaded.arrow("qrels", ["query_id", "page_id", "grade"]).to_pandas()
    stored = mr.StoredEvaluation(
        run=read_stored_run(Entry(entry), ["query_id", "page_id", "score"]),
        per_query=pd.read_parquet(entry / "per_query.parquet"),
        metrics=metrics,
        ks=tuple(metrics["ks"]),
    )
    subsets = mr.subset_values(loaded.queries, None)
    task = mr.resolve_task(None, loaded.name, list(subsets), "test", stored.ks)
    assert mr.task_scores(stored, qrels, subsets, task, None)[0]["main_score"] > 0
    other = json.loads(json.dumps(metrics))
    other["aggregates"]["macro"]["ndcgall@10"] += 0.01
    with pytest.raises(mr.MtebResultsError, match="nothing written"):
        mr.task_scores(mr.StoredEvaluation(stored.run, stored.per_query, other, stored.ks), qrels, subsets, task, None)


def test_an_imported_multilingual_benchmark_is_mtebs_task_per_language(offline_hub, isolated_paths, tmp_path):
    dataset = compose_cfg("dataset=vidore_v3_hr").dataset
    hub_cache(
        offline_hub,
        dataset.importer.source.removeprefix("hf://"),
        fx.write_vidore_v3_languages,
        dataset.importer.revision,
    )
    metrics, _, entry = evaluate("dataset=vidore_v3_hr", "retriever=dom_bm25")
    out = tmp_path / "mteb"
    assert export(entry, out) == 0
    path = only_file(out)
    assert path.name == "Vidore3HrRetrieval.json"

    result = TaskResult.from_disk(path)
    task = mteb.get_task("Vidore3HrRetrieval")
    assert result.dataset_revision == dataset.importer.revision and result.mteb_version == mteb.__version__
    per_subset = metrics["protocol"]["per_subset"]
    assert sorted(result.hf_subsets) == sorted(per_subset) == sorted(fx.V3_LANGUAGE_COUNTS)
    for scores in result.scores["test"]:
        language = scores["hf_subset"]
        assert scores["languages"] == task.metadata.hf_subsets_to_langscripts[language]
        assert scores["main_score"] == pytest.approx(per_subset[language]["ndcg@10"] / 100, abs=6e-6)
        assert scores["main_score"] == scores["ndcg_at_10"] and "macro_ndcgall_at_10" in scores
    assert result.main_score == pytest.approx(metrics["protocol"]["mean"]["ndcg@10"] / 100, abs=6e-6)
    # mteb's validation against its own task keeps every subset and the extra keys
    validated = result.validate_and_filter_scores(task)
    assert sorted(s["hf_subset"] for s in validated.scores["test"]) == sorted(fx.V3_LANGUAGE_COUNTS)
    assert all("recallall_at_10" in s for s in validated.scores["test"])
    (loaded,) = loaded_by_mteb(out).values()
    assert loaded["Vidore3HrRetrieval"].main_score == pytest.approx(result.main_score)


def test_every_mteb_task_a_dataset_config_names_is_mtebs_with_its_main_score():
    named = {}
    for path in sorted((CONFIG_DIR / "dataset").glob("*.yaml")):
        protocol = Protocol.from_config(compose_cfg(f"dataset={path.stem}").dataset.get("protocol"))
        if protocol is not None and protocol.mteb_task:
            named[path.stem] = protocol
    assert len(named) >= 7
    for name, protocol in named.items():
        meta = mteb.get_task(protocol.mteb_task).metadata
        metric, k = protocol.main_score.split("@")
        assert meta.main_score == f"{metric}_at_{k}", name


def test_a_bad_mteb_task_or_result_file_is_one_line(tmp_path):
    from vldocir.errors import ConfigError

    block = {"name": "x", "main_score": "ndcg@5"}
    assert Protocol.from_config({**block, "mteb_task": "DBPedia"}).mteb_task == "DBPedia"
    with pytest.raises(ConfigError, match="mteb_task"):
        Protocol.from_config({**block, "mteb_task": "../x"})
    with pytest.raises(mr.MtebResultsError, match="not a task of mteb"):
        mr.resolve_task(Protocol.from_config({**block, "mteb_task": "NoSuchTask"}), "b", ["default"], "test", (5,))

    bad = tmp_path / "results" / "m" / "r" / "T.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"task_name": "T", "scores": {"test": [{"hf_subset": "default"}]}}))
    with pytest.raises(mr.MtebResultsError) as error:
        mr.read_results(tmp_path)
    assert str(bad) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
def test_the_issues_acceptance_make_run_then_export_then_mteb_loads_it(tmp_path):
    """As a user types it: ``python run.py`` (the default: DOM-BM25 on the mini), then
    ``python -m vldocir.store export --format mteb <that entry> <dir>``; mteb reads the main score."""
    import subprocess

    from helpers import REPO_ROOT, run_py

    done = run_py(f"paths.results_dir={tmp_path / 'results'}", f"paths.cache_dir={tmp_path / 'cache'}", "logger=none")
    assert done.returncode == 0, done.stderr[-2000:]
    entry = Path(done.stdout.split("Run directory: ", 1)[1].split()[0])
    out = tmp_path / "m"
    exported = subprocess.run(
        [sys.executable, "-m", "vldocir.store", "export", "--format", "mteb", str(entry), str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    headline = json.loads((entry / "metrics.json").read_text())["aggregates"]["macro"]["ndcgall@10"] / 100
    assert TaskResult.from_disk(only_file(out)).main_score == pytest.approx(headline, abs=1e-6)
    (tasks,) = loaded_by_mteb(out).values()
    assert tasks["VLDocIR-vl-docir-mini"].main_score == pytest.approx(headline, abs=1e-6)


def test_the_model_of_a_stored_run_is_its_checkpoint_else_the_run_itself():
    """Hand-written configs: a pinned checkpoint names itself; retriever=mteb leaves the revision to
    mteb's registry, so the one the manifest's encoder records is used; other runs are vldocir's own."""
    colqwen = {
        "id": "colqwen25",
        "model": {"encoder": {"checkpoint": {"hub_id": "vidore/colqwen2.5-v0.2", "revision": "6f6f"}}},
    }
    mteb_model = {
        "id": "mteb",
        "model": {
            "name": "vidore/colqwen2.5-v0.2",
            "encoder": {"checkpoint": {"hub_id": "vidore/colqwen2.5-v0.2", "revision": None}},
        },
    }
    bm25 = {"id": "dom_bm25", "model": {"text_field": "dom_text"}}
    base, ctx = {"id": "base"}, {"id": "ctx"}
    assert mr.model_identity({"retriever": colqwen, "setting": base}, "key1") == ("vidore/colqwen2.5-v0.2", "6f6f")
    assert mr.model_identity({"retriever": mteb_model, "setting": base}, "key2", {"revision": "abcd"}) == (
        "vidore/colqwen2.5-v0.2",
        "abcd",
    )
    assert mr.model_identity({"retriever": mteb_model, "setting": base}, "key2") == ("vidore/colqwen2.5-v0.2", "key2")
    assert mr.model_identity({"retriever": bm25, "setting": base}, "key3") == ("vldocir/dom_bm25", "key3")
    assert mr.model_identity({"retriever": colqwen, "setting": ctx}, "key4") == ("vldocir/colqwen25.ctx", "key4")
