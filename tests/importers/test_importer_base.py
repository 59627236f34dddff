"""The importer interface (vldocir.importers.base) and what the data model gained for it: the shared
structure rule, drops counted by reason, declared sources, optional qrels grade / queries language."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import MINI_DIR, REPO_ROOT
from importer_fixtures import png
from vldocir.data.benchmark import BenchmarkError, load_benchmark
from vldocir.data.evidence import STRUCTURE_RULES, evidence_structures, within_document_structure
from vldocir.data.schema import UNKNOWN_DOCUMENTS_STRUCTURE
from vldocir.errors import ConfigError
from vldocir.importers.base import (
    EVIDENCE_TYPE_VOCABULARY,
    PINNED_REVISION,
    ImportedData,
    Importer,
    ImporterError,
    import_benchmark,
    open_imported,
    summary,
    write_imported,
)
from vldocir.importers.beir import BeirImporter


def test_structures_follow_the_projects_distance_rule():
    evidence = pd.DataFrame(
        [
            ("single", "d", 3, 1),
            ("multi", "d", 3, 2),
            ("adjacent", "d", 4, 1),
            ("adjacent", "d", 5, 1),
            ("near", "d", 1, 1),
            ("near", "d", 5, 1),
            ("far", "d", 0, 1),
            ("far", "d", 5, 1),
            ("far", "d", 9, 1),
            ("cross", "d", 1, 1),
            ("cross", "e", 1, 1),
            *[("run", "d", p, 1) for p in (3, 4, 5, 6, 7, 8)],  # six consecutive pages (span 5)
            *[("stride", "d", p, 1) for p in (1, 3, 5, 7, 9, 11)],  # every other page (span 10)
            ("outlier", "d", 1, 1),
            ("outlier", "d", 2, 1),
            ("outlier", "d", 9, 1),  # one page 7 after the others
            ("repeat", "d", 4, 1),
            ("repeat", "d", 4, 1),  # the same page twice: one gap of 0 is no gap
            ("repeat", "d", 6, 1),
        ],
        columns=["query_id", "doc_id", "page_number", "n_elements"],
    )
    got = evidence_structures(evidence, near_max_gap=4).to_dict()
    # By hand, the largest gap between consecutive pages: run 1, stride 2, outlier 7, repeat 2.
    assert got == {
        "single": "page_single",
        "multi": "page_multi",
        "adjacent": "doc_adjacent",
        "near": "doc_near",
        "far": "doc_far",
        "cross": "cross_doc",
        "run": "doc_adjacent",
        "stride": "doc_near",
        "outlier": "doc_far",
        "repeat": "doc_near",
    }
    assert evidence_structures(evidence, near_max_gap=3).to_dict()["near"] == "doc_far"
    unknown = evidence_structures(evidence, documents_known=False).to_dict()
    assert {q for q, s in unknown.items() if s == UNKNOWN_DOCUMENTS_STRUCTURE} == {
        "adjacent", "near", "far", "cross", "run", "stride", "outlier", "repeat"
    }  # fmt: skip
    assert unknown["single"] == "page_single" and unknown["multi"] == "page_multi"
    # The per-query form the VLM generation labels with gives the same labels, query by query.
    for query, pages in evidence[evidence["doc_id"] == "d"].groupby("query_id")["page_number"]:
        assert within_document_structure(pages, 4) == (got[query] if pages.nunique() > 1 else None), query


def test_the_mini_keeps_its_labels_under_the_largest_gap_rule():
    """No mini query has three or more evidence pages, so the rule gives its stored labels."""
    bench = load_benchmark(MINI_DIR)
    qrels = bench.qrels.merge(bench.pages[["page_id", "page_index"]], on="page_id")
    assert qrels.groupby("query_id").size().max() == 2
    labels = evidence_structures(qrels.rename(columns={"page_index": "page_number"}).assign(n_elements=1))
    stored = bench.queries.set_index("query_id")["evidence_structure"]
    multi_page = stored[~stored.isin(["page_single", "page_multi"])]
    assert (labels[multi_page.index] == multi_page).all() and len(multi_page) == 89


def _toy() -> ImportedData:
    """Two documents (one image-only), the awkward cases of every format, hand-counted below."""
    pages = pd.DataFrame(
        {
            "page_id": ["a1", "a2", "a4", "b1", "b1", "b2", "a9"],
            "doc_id": ["a", "a", "a", "b", "b", "b", "a"],
            "page_number": [1, 2, 4, 1, 1, 2, 2],  # a9 repeats page 2 of a
            "image": [png("a1"), png("a2"), png("a4"), png("b1"), png("b1 again"), None, png("a9")],
            "dom_text": ["alpha one", "alpha two", "alpha four", "", "", "", "x"],
        }
    )
    queries = pd.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4", "q5", "q6", "q6"],
            "text": ["first", "second", "third", " ", "fifth", "sixth", "duplicate id"],
            "language": ["en", "fr", "en", "en", None, "en", "en"],
        }
    )
    qrels = pd.DataFrame(
        {
            "query_id": ["q1", "q1", "q2", "q2", "q3", "q4", "q5", "q6", "q7"],
            "page_id": ["a1", "a1", "a1", "a2", "b2", "a1", "a4", "b1", "a1"],
            "grade": [1, 3, 2, 1, 1, 1, 0, 1, 1],
        }
    )
    data = ImportedData(
        pages=[pages.iloc[:3], pages.iloc[3:]],
        queries=queries,
        qrels=qrels,
        source="toy",
        info={"format": "toy", "source": "nowhere", "revision": "r1", "license": "cc0"},
    )
    data.drop("queries", "unanswerable", 2)  # as an importer counts what only it sees
    return data


def test_write_imported_counts_every_drop_and_validates(tmp_path):
    bench = write_imported(_toy(), tmp_path / "toy", name="toy")
    built = bench.info["built_by"]
    assert built["dropped"] == {
        "pages": {"duplicate_page_id": 1, "duplicate_page_number": 1, "missing_image": 1},
        "qrels": {"duplicate": 1, "not_relevant": 1, "unknown_query": 2},
        "queries": {
            "blank_text": 1,
            "duplicate_query_id": 1,
            "evidence_not_in_corpus": 1,
            "no_evidence": 1,
            "unanswerable": 2,
        },
    }
    assert built["structures"] == {
        "page_single": 2,
        "page_multi": 0,
        "doc_adjacent": 1,
        "doc_near": 0,
        "doc_far": 0,
        "cross_doc": 0,
    }
    assert built["languages"] == {"en": 2, "fr": 1}
    assert built["documents_without_text"] == {"count": 1, "doc_ids": ["b"]}
    assert bench.info["sources"] == ["toy"] and bench.info["imported_from"]["license"] == "cc0"
    qrels = bench.arrow("qrels").to_pandas().set_index(["query_id", "page_id"])
    assert qrels.loc[("q1", "a1"), "grade"] == 3  # repeated rows collapse to the largest grade
    assert str(bench.arrow("qrels").schema.field("grade").type) == "int32"
    pages = bench.arrow("pages").to_pandas().set_index("page_id")
    assert pages.loc[["a1", "a2", "a4"], "page_index"].tolist() == [0, 1, 2]  # dense within the document
    assert pages.loc[["a1", "a2", "a4"], "page_number"].tolist() == [1, 2, 4]  # the source's numbers kept
    assert (pages["width"] == 64).all() and (pages["height"] == 96).all()
    assert load_benchmark(bench.root).fingerprint == bench.fingerprint


def test_a_benchmark_declares_its_sources_and_validation_holds_it_to_them(tmp_path):
    bench = write_imported(_toy(), tmp_path / "toy", name="toy")
    info = json.loads((bench.root / "benchmark.json").read_text())
    (bench.root / "benchmark.json").write_text(json.dumps({**info, "sources": ["wikipedia"]}))
    with pytest.raises(BenchmarkError, match=r"documents\[a\]: source 'toy' is not one the benchmark declares"):
        load_benchmark(bench.root)
    del info["sources"]  # none declared: the paper's four
    (bench.root / "benchmark.json").write_text(json.dumps(info))
    with pytest.raises(BenchmarkError, match="declares \\(wikipedia, arxiv, pubmed, sec"):
        load_benchmark(bench.root)


def test_grades_must_not_be_negative_and_grade_0_is_not_evidence(tmp_path):
    bench = write_imported(_toy(), tmp_path / "toy", name="toy")
    schema = pq.read_schema(bench.root / "qrels.parquet")
    qrels = pq.read_table(bench.root / "qrels.parquet").to_pandas()
    # q1 is page_single: a grade-0 qrel on another page is no evidence, so it stays valid
    not_evidence = qrels[qrels["query_id"] == "q1"].assign(page_id="a2", grade=0)
    pq.write_table(
        pa.Table.from_pandas(pd.concat([qrels, not_evidence]), schema, preserve_index=False),
        bench.root / "qrels.parquet",
    )
    assert load_benchmark(bench.root, memo=False).info["name"] == "toy"
    qrels.loc[0, "grade"] = -1
    pq.write_table(pa.Table.from_pandas(qrels, schema, preserve_index=False), bench.root / "qrels.parquet")
    with pytest.raises(BenchmarkError, match="grade is negative"):
        load_benchmark(bench.root, memo=False)


def test_benchmarks_without_the_optional_columns_read_as_before():
    mini = load_benchmark(MINI_DIR)
    assert mini.fingerprint == json.loads((MINI_DIR / "benchmark.json").read_text())["fingerprint"]
    assert "grade" not in mini.qrels.columns and "language" not in mini.queries.columns  # the files' columns
    grades = mini.arrow("qrels", ["query_id", "grade"]).column("grade").to_pylist()
    assert set(grades) == {1} and len(grades) == len(mini.qrels)  # asked for: the default
    assert set(mini.arrow("queries", ["language"]).column("language").to_pylist()) == {None}


class _Toy(Importer):
    format = "toy"

    def read(self) -> ImportedData:
        return _toy()


def test_first_use_imports_then_reuses_and_refuses_another_spec(tmp_path):
    dest = tmp_path / "data" / "toy"
    first = open_imported(_Toy(source="nowhere"), dest, name="toy")
    stamp = (dest / "benchmark.json").stat().st_mtime_ns
    again = open_imported(_Toy(source="nowhere"), dest, name="toy")
    assert again.fingerprint == first.fingerprint and (dest / "benchmark.json").stat().st_mtime_ns == stamp
    with pytest.raises(ConfigError, match=r"imported with another dataset.importer spec \(differs in: revision\)"):
        open_imported(_Toy(source="nowhere", revision="v2"), dest, name="toy")
    replaced = import_benchmark(_Toy(source="nowhere", revision="v2"), dest, name="toy", replace=True)
    assert replaced.info["built_by"]["importer"]["revision"] == "v2"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["toy"]  # no staging or old copy left behind


def test_an_import_of_another_import_version_is_not_reused(tmp_path):
    dest = tmp_path / "data" / "toy"
    open_imported(_Toy(source="nowhere"), dest, name="toy")
    info = json.loads((dest / "benchmark.json").read_text())
    info["built_by"]["import_version"] = 1  # written before the largest-gap rule and the label tables
    (dest / "benchmark.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"written by import version 1, this code writes 2 .* overwrite=true"):
        open_imported(_Toy(source="nowhere"), dest, name="toy")
    again = import_benchmark(_Toy(source="nowhere"), dest, name="toy", replace=True)
    assert again.info["built_by"]["import_version"] == 2


def test_an_import_never_replaces_a_folder_that_is_not_a_benchmark(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not a benchmark"):
        import_benchmark(_Toy(source="nowhere"), dest, name="toy")
    assert (dest / "notes.txt").read_text() == "keep me"
    shutil.rmtree(dest)


def test_the_structure_rules_are_recorded_and_printed(tmp_path):
    bench = write_imported(_toy(), tmp_path / "toy", name="toy", near_max_gap=3)
    rules = bench.info["built_by"]["structure_rules"]
    assert rules == {**STRUCTURE_RULES, "near_max_gap": 3}
    assert rules["within_document"].startswith("largest gap between consecutive evidence pages")
    printed = summary(bench)
    assert "    within a document: largest gap between consecutive evidence pages" in printed
    assert "(near_max_gap 3)" in printed and "    one page: two or more evidence elements (boxes)" in printed
    assert bench.info["built_by"]["unmapped_labels"] == {}


def test_labels_are_mapped_through_the_table_and_the_others_counted():
    data = _toy()
    table = {"text": "text", "figure": "image", "placeholder": None}
    assert data.evidence_types(["Text", " figure ", "Placeholder", "Hyperlink", None, ""], table) == ["image", "text"]
    assert data.evidence_types(["hyperlink", "Hyperlink"], table) == []
    assert data.unmapped_labels == {"Hyperlink": 2, "hyperlink": 1}


@pytest.mark.parametrize("revision", ["main", None, "v1.0", "0123456789abcdef"])
def test_an_unpinned_hub_source_is_refused_in_one_line(tmp_path, revision):
    with pytest.raises(ImporterError, match=r"hf://org/set is read at revision .*, not a pinned commit") as refused:
        import_benchmark(_Toy(source="hf://org/set", revision=revision), tmp_path / "toy", name="toy")
    assert "\n" not in str(refused.value) and "allow_unpinned=true" in str(refused.value)
    assert not (tmp_path / "toy").exists()
    allowed = import_benchmark(
        _Toy(source="hf://org/set", revision=revision, allow_unpinned=True), tmp_path / "ok", name="toy"
    )
    assert "allow_unpinned" not in allowed.info["built_by"]["importer"]  # (the spec stays comparable)


def test_pinned_and_local_sources_pass_and_beir_qrels_are_checked_too(tmp_path):
    _Toy(source="hf://org/set", revision="0123456789abcdef0123456789abcdef01234567").check_pinned()
    _Toy(source=str(tmp_path)).check_pinned()  # a local folder has no revision to pin
    beir = BeirImporter(
        source="hf://BeIR/x", revision="0123456789abcdef0123456789abcdef01234567", qrels_source="hf://BeIR/x-qrels"
    )
    with pytest.raises(ImporterError, match=r"qrels_source=hf://BeIR/x-qrels .* set dataset\.importer\.qrels_revision"):
        beir.check_pinned()


def test_rows_left_out_are_named_ten_at_most():
    data = _toy()
    data.name_rows("queries left out, evidence_page_zero", [f"question {i}" for i in range(12)])
    assert data.notes[-1] == (
        "queries left out, evidence_page_zero (12): " + "; ".join(f"question {i}" for i in range(10)) + "; and 2 more"
    )


def test_every_mapping_table_maps_into_the_vocabulary():
    from vldocir.importers import longdocurl, mmdocir, mmlongbench, vidore

    tables = [vidore.CONTENT_TYPES, mmlongbench.EVIDENCE_SOURCES, mmdocir.QUESTION_TYPES, longdocurl.EVIDENCE_SOURCES]
    for table in tables:
        assert all(key == key.strip().lower() for key in table)  # (labels are looked up lower-cased)
        assert set(table.values()) - {None} <= set(EVIDENCE_TYPE_VOCABULARY)


PUBLIC_CONFIGS = (
    "beir_dbpedia_entity",
    "longdocurl",
    "mmdocir",
    "mmlongbench_doc",
    "vidore_docvqa",
    "vidore_v1_docvqa_beir",
    "vidore_v2_esg",
    "vidore_v3_hr",
)


@pytest.mark.parametrize("name", PUBLIC_CONFIGS)
def test_every_public_config_is_pinned_and_names_its_protocol(name):
    from omegaconf import OmegaConf

    config = OmegaConf.load(REPO_ROOT / "conf" / "dataset" / f"{name}.yaml")
    importer = config.importer
    assert importer.source.startswith("hf://") and PINNED_REVISION.match(importer.revision)
    assert importer.allow_unpinned is False
    protocol = config.protocol
    assert set(protocol) == {"name", "main_score", "subsets", "scope", "summary", "mteb_task"}
    metric, k = protocol.main_score.split("@")
    assert metric in {"ndcg", "recall", "mrr"} and int(k) > 0
    assert protocol.scope in {"corpus", "document"} and protocol.subsets in {None, "language"}
    # multilingual sets are scored per language (mteb's hf_subsets); ViDoRe v1/v2 at nDCG@5, v3 and BEIR at nDCG@10
    expected = {
        "vidore_v2_esg": ("ndcg@5", "language"),
        "vidore_v3_hr": ("ndcg@10", "language"),
        "vidore_docvqa": ("ndcg@5", None),
        "vidore_v1_docvqa_beir": ("ndcg@5", None),
        "beir_dbpedia_entity": ("ndcg@10", None),
        "mmdocir": ("recall@5", None),
    }
    if name in expected:
        assert (protocol.main_score, protocol.subsets) == expected[name]
