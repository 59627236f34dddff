"""ViDoRe v1 (QA and BEIR forms), v2 and v3 importers on fixtures in the datasets' hub layout
(importer_fixtures.py), imported, validated and evaluated through the pipeline in process."""

from __future__ import annotations

import json

import pytest

from helpers import evaluate, tiny_overrides
from importer_fixtures import (
    V1_BEIR_COUNTS,
    V1_QA_COUNTS,
    V2_COUNTS,
    V3_COUNTS,
    write_vidore_v1_qa,
    write_vidore_v2,
    write_vidore_v3,
)
from vldocir.data.benchmark import load_benchmark
from vldocir.errors import ConfigError
from vldocir.importers.base import NO_DOCUMENT_IDS, ImporterError, import_benchmark, summary
from vldocir.importers.vidore import ViDoReImporter, ViDoReQAImporter, document_from_filename


@pytest.fixture(scope="module")
def v3_source(tmp_path_factory):
    return write_vidore_v3(tmp_path_factory.mktemp("hub") / "vidore_v3_hr")


def _structures(metrics) -> dict[str, int]:
    return {s: row["n_queries"] for s, row in metrics["breakdowns"]["structure"].items()}


def test_v3_imports_with_the_hand_counted_structures_drops_and_languages(v3_source, tmp_path):
    bench = import_benchmark(ViDoReImporter(source=str(v3_source)), tmp_path / "v3", name="v3")
    built = bench.info["built_by"]
    assert built["structures"] == V3_COUNTS["structures"]
    assert built["languages"] == V3_COUNTS["languages"]
    assert built["dropped"] == V3_COUNTS["dropped"]
    assert {k: built["kept"][k] for k in V3_COUNTS["kept"]} == V3_COUNTS["kept"]
    assert built["documents_without_text"]["doc_ids"] == V3_COUNTS["documents_without_text"]
    assert built["document_ids"].startswith("from the source")
    assert bench.info["imported_from"]["format"] == "vidore_v3"
    pages = bench.pages.set_index("page_id")
    assert pages.loc["0", "dom_text"].startswith("# hr_a page 1") and pages.loc["0", "page_number"] == 1
    documents = bench.documents.set_index("doc_id")
    assert documents.loc["slides_c", "domain"] == "slides" and documents.loc["hr_a", "license"] == "cc-by-4.0"
    grades = bench.arrow("qrels", ["query_id", "page_id", "grade"]).to_pandas().set_index(["query_id", "page_id"])
    assert grades.loc[("3", "2"), "grade"] == 2 and grades.loc[("11", "11"), "grade"] == 2
    queries = bench.queries.set_index("query_id")
    assert queries.loc["3", "language"] == "french" and list(queries.loc["1", "query_types"]) == ["extractive"]
    assert built["structures_per_language"] == V3_COUNTS["structures_per_language"]
    assert built["unmapped_labels"] == V3_COUNTS["unmapped_labels"]
    for query_id, types in V3_COUNTS["evidence_types"].items():
        assert queries.loc[query_id, "evidence_types"].tolist() == types
    assert queries.loc["1", "evidence_structure"] == "page_single"  # the placeholder is no second kind
    printed = summary(bench)
    assert "page_multi 2" in printed and "documents without a text layer: 1 (e.g. slides_c)" in printed
    assert "    french: page_single 0, page_multi 0, doc_adjacent 2, doc_near 1, doc_far 0, cross_doc 0" in printed
    assert "unmapped labels (no evidence type; left out): 'Diagram' 1" in printed


def test_v3_one_language(v3_source, tmp_path):
    bench = import_benchmark(ViDoReImporter(source=str(v3_source), languages=["english"]), tmp_path / "en", name="en")
    assert bench.info["built_by"]["languages"] == {"english": 5}
    assert bench.info["built_by"]["dropped"]["queries"]["language_not_selected"] == 5


@pytest.mark.parametrize(("with_filenames", "counts"), [(True, V2_COUNTS), (False, V1_BEIR_COUNTS)])
def test_v2_and_v1_beir_derive_documents_from_file_names_or_say_there_are_none(tmp_path, with_filenames, counts):
    source = write_vidore_v2(tmp_path / "hub", with_filenames=with_filenames)
    bench = import_benchmark(ViDoReImporter(source=str(source)), tmp_path / "out", name="v2")
    built = bench.info["built_by"]
    assert built["structures"] == counts["structures"]
    assert {k: built["kept"][k] for k in counts["kept"]} == counts["kept"]
    assert built["dropped"]["queries"] == {"no_evidence": 1}
    assert built["document_ids"] == (NO_DOCUMENT_IDS if not with_filenames else built["document_ids"])
    if with_filenames:
        assert sorted(bench.documents["doc_id"]) == ["esg_report_1", "esg_report_2"]
    printed = summary(bench)
    assert "document ids: " + built["document_ids"] in printed
    unknown = "3 queries are multi_page_docs_unknown (several pages, documents unknown): left out of structure Macro"
    assert (unknown in printed) == (not with_filenames)
    # four languages, one query each: one query set per language
    assert built["structures_per_language"]["spanish"] == (
        {**dict.fromkeys(counts["structures"], 0), "multi_page_docs_unknown": 1}
        if not with_filenames
        else {**dict.fromkeys(counts["structures"], 0), "cross_doc": 1}
    )


def test_v1_qa_form_one_page_per_query(tmp_path):
    source = write_vidore_v1_qa(tmp_path / "docvqa_test_subsampled")
    bench = import_benchmark(ViDoReQAImporter(source=str(source)), tmp_path / "qa", name="qa")
    built = bench.info["built_by"]
    assert built["structures"] == V1_QA_COUNTS["structures"]
    assert {k: built["kept"][k] for k in V1_QA_COUNTS["kept"]} == V1_QA_COUNTS["kept"]
    assert built["dropped"] == V1_QA_COUNTS["dropped"]
    qrels = bench.qrels.groupby("query_id")["page_id"].agg(sorted)
    assert qrels["49100"] == ["101_p1.png"]  # a page two queries share
    assert qrels["49000"] == ["101_p1.png", "102_p1.png"] and qrels["49001"] == ["101_p1.png", "101_p2.png"]
    assert set(bench.queries["query_id"]) == {"49000", "49001", "49002", "49004", "49100"}
    assert any(n.startswith("2 query rows repeat an earlier row's query text: merged") for n in built["notes"])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("data/esg_report_1_page_12.png", ("esg_report_1", 12)),
        ("doc-p3.jpg", ("doc", 3)),
        ("x.pdf_page_3", ("x.pdf", 3)),
        ("cover.png", None),
    ],
)
def test_document_from_filename(name, expected):
    assert document_from_filename(name) == expected


def test_a_source_without_the_configs_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImporterError, match="no Parquet files for config 'corpus', split 'test'"):
        ViDoReImporter(source=str(tmp_path / "empty")).read()


def test_run_py_on_imported_v3_with_bm25_and_a_tiny_visual_retriever(v3_source, isolated_paths, tiny):
    dataset = ["dataset=vidore_v3_hr", f"dataset.importer.source={v3_source}", "dataset.importer.revision=null"]
    metrics, manifest, _ = evaluate(*dataset, "retriever=dom_bm25")
    assert _structures(metrics) == {s: n for s, n in V3_COUNTS["structures"].items() if n}
    assert metrics["n_queries"] == V3_COUNTS["kept"]["queries"]
    root = isolated_paths / "data" / "vidore-v3-hr"
    assert manifest["benchmark"]["root"] == str(root)
    stamp = (root / "benchmark.json").stat().st_mtime_ns
    visual, _, _ = evaluate(*dataset, *tiny_overrides("colqwen25", tiny), "depth=19")
    assert _structures(visual) == _structures(metrics) and (root / "benchmark.json").stat().st_mtime_ns == stamp
    assert load_benchmark(root).fingerprint == json.loads((root / "benchmark.json").read_text())["fingerprint"]
    with pytest.raises(ConfigError, match=r"imported with another dataset\.importer spec"):
        evaluate(*dataset, "retriever=dom_bm25", "dataset.importer.languages=[english]")


@pytest.mark.parametrize(
    ("dataset", "write", "counts"),
    [
        ("vidore_docvqa", write_vidore_v1_qa, V1_QA_COUNTS),
        ("vidore_v1_docvqa_beir", lambda root: write_vidore_v2(root, with_filenames=False), V1_BEIR_COUNTS),
        ("vidore_v2_esg", lambda root: write_vidore_v2(root, with_filenames=True), V2_COUNTS),
    ],
)
def test_run_py_on_imported_v1_and_v2_with_a_tiny_visual_retriever(
    dataset, write, counts, tmp_path, isolated_paths, tiny
):
    """Each dataset config as a user runs it (its importer reading a local copy of the hub layout): the
    structures evaluated are the hand-counted ones; these sources carry no page text, so a text retriever
    is refused in one line naming the benchmark and what to do."""
    over = [
        f"dataset={dataset}",
        f"dataset.importer.source={write(tmp_path / 'hub')}",
        "dataset.importer.revision=null",
    ]
    visual, _, _ = evaluate(*over, *tiny_overrides("colqwen25", tiny), "depth=10", "eval.ks=[3,5,10]")
    assert _structures(visual) == {s: n for s, n in counts["structures"].items() if n}
    assert visual["n_queries"] == counts["kept"]["queries"]
    with pytest.raises(ConfigError, match=r"'dom_text', and benchmark .* has it for no page.*visual retriever"):
        evaluate(*over, "retriever=dom_bm25")
