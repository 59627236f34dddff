"""The importer interface (vldocir.importers.base) and what the data model gained for it: the shared
structure rule, drops counted by reason, declared sources, optional qrels grade / queries language."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import MINI_DIR
from importer_fixtures import png
from vldocir.data.benchmark import BenchmarkError, load_benchmark
from vldocir.data.evidence import evidence_structures
from vldocir.errors import ConfigError
from vldocir.importers.base import ImportedData, Importer, import_benchmark, open_imported, write_imported


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
            ("three", "d", 2, 1),
            ("three", "d", 3, 1),
            ("three", "d", 4, 1),
        ],
        columns=["query_id", "doc_id", "page_number", "n_elements"],
    )
    got = evidence_structures(evidence, near_max_gap=4).to_dict()
    assert got == {
        "single": "page_single",
        "multi": "page_multi",
        "adjacent": "doc_adjacent",
        "near": "doc_near",
        "far": "doc_far",
        "cross": "cross_doc",
        "three": "doc_near",
    }  # (first to last page: 2 apart)
    assert evidence_structures(evidence, near_max_gap=3).to_dict()["near"] == "doc_far"


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


def test_an_import_never_replaces_a_folder_that_is_not_a_benchmark(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not a benchmark"):
        import_benchmark(_Toy(source="nowhere"), dest, name="toy")
    assert (dest / "notes.txt").read_text() == "keep me"
    shutil.rmtree(dest)
