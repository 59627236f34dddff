"""The BEIR importer on a hand-written fixture in BEIR's exact format (tests/fixtures/importers/beir_toy,
its README has the hand count), on the real DBpedia-Entity slice, and the hub path (hf://, offline)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT, evaluate
from importer_fixtures import V3_COUNTS, hub_cache, write_vidore_v3
from vldocir.data.benchmark import load_benchmark
from vldocir.importers.base import ImporterError, import_benchmark
from vldocir.importers.beir import BeirImporter, read_qrels_tsv

TOY = REPO_ROOT / "tests" / "fixtures" / "importers" / "beir_toy"
REAL = REPO_ROOT.parent / "shared" / "real-benchmarks" / "beir-dbpedia-entity"


def test_beir_toy_hand_count(tmp_path):
    bench = import_benchmark(BeirImporter(source=str(TOY)), tmp_path / "toy", name="toy")
    built = bench.info["built_by"]
    assert built["structures"] == {
        "page_single": 2,
        "page_multi": 0,
        "doc_adjacent": 0,
        "doc_near": 0,
        "doc_far": 0,
        "cross_doc": 1,
    }
    assert built["dropped"] == {
        "qrels": {"duplicate": 1, "not_relevant": 3},
        "queries": {"evidence_not_in_corpus": 1, "no_evidence": 1, "not_in_split": 1},
    }
    assert built["grades"] == {"1": 2, "2": 2}
    assert bench.info["rendered"] is False and bench.pages["image"].isna().all()
    assert bench.pages["width"].isna().all()  # a passage has no page size
    pages = bench.pages.set_index("page_id")
    assert pages.loc["<dbpedia:Solar_cell>", "dom_text"].startswith("Solar cell\nA solar cell converts")
    assert bench.info["sources"] == ["beir_toy"]
    dev = import_benchmark(BeirImporter(source=str(TOY), split="dev"), tmp_path / "dev", name="dev")
    assert dev.info["built_by"]["structures"]["page_single"] == 1


def test_qrels_without_a_header_are_read(tmp_path):
    """Some BEIR-style sets ship qrels without the header line: the first line is then a judgement
    (its third field a number, its first two not BEIR's column names) and is read as one."""
    source = tmp_path / "headerless"
    shutil.copytree(TOY, source)
    qrels = source / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines(keepends=True)
    qrels.write_text("".join(lines[1:]))
    assert read_qrels_tsv(qrels).equals(read_qrels_tsv(TOY / "qrels" / "test.tsv"))
    with_header = import_benchmark(BeirImporter(source=str(TOY)), tmp_path / "a", name="toy").info["built_by"]
    without = import_benchmark(BeirImporter(source=str(source)), tmp_path / "b", name="toy").info["built_by"]
    for key in ("structures", "dropped", "grades", "kept"):
        assert without[key] == with_header[key]
    qrels.write_text("qid\tdocid\trel\n" + "".join(lines[1:]))  # another header: still refused
    with pytest.raises(ImporterError, match=r"header \['qid', 'docid', 'rel'\] is not BEIR's"):
        read_qrels_tsv(qrels)


def test_run_py_on_imported_beir_with_bm25(isolated_paths):
    metrics, _, _ = evaluate(
        "dataset=beir_dbpedia_entity",
        f"dataset.importer.source={TOY}",
        "dataset.importer.revision=null",
        "retriever=dom_bm25",
        "eval.ks=[1,3]",
    )
    assert {s: r["n_queries"] for s, r in metrics["breakdowns"]["structure"].items()} == {
        "page_single": 2,
        "cross_doc": 1,
    }
    # Each query's words are in its relevant passages only: BM25 ranks them first.
    assert metrics["aggregates"]["micro"]["recall@1"] == pytest.approx(100 * (1 + 1 + 0.5) / 3, abs=1e-4)
    assert metrics["aggregates"]["micro"]["recallall@3"] == pytest.approx(100.0)


@pytest.mark.skipif(not REAL.is_dir(), reason=f"the real DBpedia-Entity slice is not at {REAL}")
def test_real_dbpedia_entity_slice(tmp_path):
    """554 test qrels of 7 queries (462 score 0, 71 score 1, 21 score 2; its README); 3 of its 10
    queries have no test qrels."""
    bench = import_benchmark(BeirImporter(source=str(REAL)), tmp_path / "db", name="db")
    built = bench.info["built_by"]
    assert built["grades"] == {"1": 71, "2": 21} and built["dropped"]["qrels"] == {"not_relevant": 462}
    assert built["kept"]["queries"] == 7 and built["dropped"]["queries"] == {"not_in_split": 3}
    assert built["structures"]["cross_doc"] == 7  # every kept query has several relevant passages
    assert load_benchmark(bench.root).info["counts"]["pages"] == 554


@pytest.mark.slow
def test_hub_source_offline_through_the_import_app(tmp_path):
    """``hf://`` read through huggingface_hub as a user's would be: from a hub cache, hub offline."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    hub_cache(tmp_path / "hub", "toy-org/vidore_v3_hr", write_vidore_v3, commit)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "VLDOCIR_DATA_DIR": str(tmp_path / "data"),
        "VLDOCIR_LOG_DIR": str(tmp_path / "logs"),
        "VLDOCIR_CACHE_DIR": str(tmp_path / "cache"),
    }
    command = [
        sys.executable,
        "-m",
        "vldocir.apps.import_benchmark",
        "dataset=vidore_v3_hr",
        "dataset.importer.source=hf://toy-org/vidore_v3_hr",
        "dataset.importer.revision=main",
    ]
    refused = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "hf://toy-org/vidore_v3_hr is read at revision main, not a pinned commit" in refused.stderr
    assert not (tmp_path / "data" / "vidore-v3-hr").exists()
    done = subprocess.run(
        [*command, "dataset.importer.allow_unpinned=true"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    per_structure = ", ".join(f"{s} {n}" for s, n in V3_COUNTS["structures"].items())
    assert f"per structure: {per_structure}" in done.stdout
    assert "dropped queries: 1 blank_text, 2 evidence_not_in_corpus, 1 no_evidence" in done.stdout
    root = tmp_path / "data" / "vidore-v3-hr"
    assert load_benchmark(root).info["imported_from"]["source"] == "hf://toy-org/vidore_v3_hr"
    shutil.rmtree(tmp_path / "hub" / "datasets--toy-org--vidore_v3_hr")
    assert "allow_unpinned" not in load_benchmark(root).info["built_by"]["importer"]  # (not part of the spec)
    missing = subprocess.run(
        [
            *command[:-2],
            "dataset.importer.source=hf://toy-org/absent",
            f"dataset.importer.revision={commit}",
            "dataset.name=absent",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith(f"import_benchmark error: could not fetch dataset 'toy-org/absent' (revision {commit})")
    )
    assert Path(root / "benchmark.json").is_file()
