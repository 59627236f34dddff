"""The user's own queries (``queries=file``) and none (``queries=none``), queries/user_queries.py:
the file's shape is checked before any rendering, evidence against the built pages, and structures
follow the grounding rules; hand-made tables, every expected structure worked out by hand and
checked again by the benchmark validation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from helpers import evaluate
from vldocir.data.benchmark import write_benchmark
from vldocir.data.tables import BenchmarkError
from vldocir.errors import ConfigError
from vldocir.queries.user_queries import NoQueries, UserQueries, read_query_file

N_PAGES = {"acme": 7, "wiki": 2}
DOCUMENTS = pd.DataFrame(
    [
        ("acme", "sec", "Financial Reports", "Acme 10-K", N_PAGES["acme"], None, None),
        ("wiki", "wikipedia", "Encyclopedia", "Some article", N_PAGES["wiki"], None, None),
    ],
    columns=["doc_id", "source", "domain", "title", "n_pages", "url", "license"],
)
PAGES = pd.DataFrame(
    [(f"{d}-p{i:03d}", d, i, None, 2000, 4000, f"text of {d} page {i}") for d, n in N_PAGES.items() for i in range(n)],
    columns=["page_id", "doc_id", "page_index", "image", "width", "height", "dom_text"],
).assign(ocr_text=None)
ELEMENTS = pd.DataFrame(
    [
        ("acme", "e00001", 0, [0.0, 0.0, 10.0, 10.0], "text"),
        ("acme", "e00002", 0, [0.0, 20.0, 10.0, 30.0], "table"),
        ("acme", "e00003", 1, [0.0, 0.0, 10.0, 10.0], "image"),
        ("wiki", "e00000", 0, [0.0, 0.0, 10.0, 10.0], "headline"),
    ],
    columns=["doc_id", "element_id", "page_index", "bbox", "element_type"],
)
# question, evidence -> (structure, {page_id: element_ids}, evidence_types, source, domain), by hand:
CASES = [
    ("one element", "acme/e00001", ("page_single", {"acme-p000": ["e00001"]}, ["text"], "sec")),
    (
        "two elements of one page",
        "acme/e00001; acme/e00002",
        ("page_multi", {"acme-p000": ["e00001", "e00002"]}, ["table", "text"], "sec"),
    ),
    ("pages 1 and 2", ["acme:1", "acme:2"], ("doc_adjacent", {"acme-p000": [], "acme-p001": []}, [], "sec")),
    ("pages 2 and 6 (gap 4)", ["acme:2", "acme:6"], ("doc_near", {"acme-p001": [], "acme-p005": []}, [], "sec")),
    ("pages 1 and 7 (gap 6)", ["acme:1", "acme:7"], ("doc_far", {"acme-p000": [], "acme-p006": []}, [], "sec")),
    (
        "a figure and another document",
        ["wiki:2", "acme/e00003"],
        ("cross_doc", {"wiki-p001": [], "acme-p001": ["e00003"]}, ["image", "text"], "wikipedia"),
    ),
    ("a page and an element on it", "acme:1;acme/e00001", ("page_single", {"acme-p000": ["e00001"]}, ["text"], "sec")),
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows_of(cases):
    return [{"question": q, "answer": f"answer {i}", "evidence": e} for i, (q, e, _) in enumerate(cases)]


def check_against_cases(queries, qrels, cases):
    assert list(queries["query_id"]) == [f"q{i:07d}" for i in range(len(cases))]
    for i, (question, _, (structure, pages, types, source)) in enumerate(cases):
        query = queries.iloc[i]
        assert (query["text"], query["evidence_structure"], list(query["evidence_types"])) == (
            question,
            structure,
            types,
        )
        assert query["source"] == source and query["generator"] == "user"
        first_doc = next(iter(pages)).split("-p")[0]  # the first evidence item's document
        assert query["domain"] == DOCUMENTS.set_index("doc_id").at[first_doc, "domain"]
        mine = qrels[qrels["query_id"] == query["query_id"]]
        assert {p: list(e) for p, e in zip(mine["page_id"], mine["element_ids"], strict=True)} == pages
        assert set(mine["doc_id"]) == {p.split("-p")[0] for p in pages}


def test_structures_pages_and_elements_follow_the_grounding_rules(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", rows_of(CASES))
    stage = UserQueries(path)
    stage.preflight(["acme", "wiki"])
    queries, qrels, report = stage(DOCUMENTS, PAGES, ELEMENTS, {}, near_max_gap=4)
    check_against_cases(queries, qrels, CASES)
    assert queries.loc[0, "answer"] == "answer 0"
    assert report["counts"] == {
        "queries": 7,
        "qrels": 11,
        "per_structure": {
            "page_single": 2,
            "page_multi": 1,
            "doc_adjacent": 1,
            "doc_near": 1,
            "doc_far": 1,
            "cross_doc": 1,
        },
    }
    assert "queries from" in stage.summary(report) and "page_single 2" in stage.summary(report)
    # the benchmark validation (an independent statement of the structure rules) accepts the tables
    bench = write_benchmark(
        tmp_path / "bench",
        {"documents": DOCUMENTS, "pages": PAGES, "elements": ELEMENTS, "queries": queries, "qrels": qrels},
        {"name": "user-queries", "built_by": {"queries": report}},
    )
    assert bench.info["counts"]["queries"] == 7
    # near_max_gap moves the Near/Far line: a gap of 4 is Far at 3
    queries3, _, _ = stage(DOCUMENTS, PAGES, ELEMENTS, {}, near_max_gap=3)
    assert queries3.loc[3, "evidence_structure"] == "doc_far" and queries3.loc[4, "evidence_structure"] == "doc_far"


def test_csv_and_parquet_give_the_same_queries(tmp_path):
    jsonl = UserQueries(write_jsonl(tmp_path / "q.jsonl", rows_of(CASES)))(DOCUMENTS, PAGES, ELEMENTS, {}, 4)
    frame = pd.DataFrame(rows_of(CASES))
    flat = frame.assign(evidence=[e if isinstance(e, str) else ";".join(e) for e in frame["evidence"]])
    flat.to_csv(tmp_path / "q.csv", index=False)
    listed = frame.assign(evidence=[e.split(";") if isinstance(e, str) else e for e in frame["evidence"]])
    listed.to_parquet(tmp_path / "q.parquet")
    for name in ("q.csv", "q.parquet"):
        queries, qrels, _ = UserQueries(tmp_path / name)(DOCUMENTS, PAGES, ELEMENTS, {}, 4)
        pd.testing.assert_frame_equal(queries, jsonl[0])
        pd.testing.assert_frame_equal(
            qrels.assign(element_ids=qrels["element_ids"].map(list)),
            jsonl[1].assign(element_ids=jsonl[1]["element_ids"].map(list)),
        )


def test_query_ids_from_the_file_and_blank_lines(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"query_id": "mine-1", "question": "  spaced   out ", "evidence": "acme:1"})
        + "\n\n"
        + json.dumps({"query_id": "mine-2", "question": "b", "evidence": "acme:2", "answer": None})
        + "\n"
    )
    rows = read_query_file(path)
    assert [(r.number, r.query_id, r.question, r.answer) for r in rows] == [
        (1, "mine-1", "spaced out", None),
        (3, "mine-2", "b", None),
    ]


BAD_ROWS = [  # (row 2 of the file, the error's text), every one naming the row
    ({"question": "x", "evidence": "acme:1", "evidnce": "typo"}, r"row 2: unknown column\(s\) evidnce"),
    ({"evidence": "acme:1"}, r"row 2: missing column\(s\) or value\(s\): question"),
    ({"question": " ", "evidence": "acme:1"}, r"row 2: missing column\(s\) or value\(s\): question"),
    ({"question": "x", "evidence": []}, r"row 2: no evidence"),
    ({"question": "x", "evidence": "acme-3"}, r"row 2: evidence 'acme-3' is neither DOC:PAGE"),
    ({"question": "x", "evidence": "acme:0"}, r"row 2: evidence 'acme:0' is neither DOC:PAGE \(page 1 = the first\)"),
    ({"question": 5, "evidence": "acme:1"}, r"row 2: question must be a string, got 5"),
    ({"question": "x", "evidence": 3}, r"row 2: evidence must be a string or a list of strings, got 3"),
    ({"question": "x", "evidence": "acme:1", "query_id": "q0000000"}, r"row 2: query_id 'q0000000' is also row 1's"),
    (
        {"question": "x", "evidence": "nobody:1"},
        r"row 2: evidence nobody:1: no document 'nobody' \(documents: acme, wiki\)",
    ),
    # ids name files and are printed one per line (data.validation.id_problem)
    ({"question": "x", "evidence": "acme:1", "query_id": "../../x"}, r"row 2: query_id '../../x' holds a path sep"),
    ({"question": "x", "evidence": "acme:1", "query_id": "a b\nc"}, r"row 2: query_id 'a b\\nc' holds the control"),
    ({"question": "x", "evidence": "acme:1", "query_id": ".."}, r"row 2: query_id '..' is '..'"),
    ({"question": "x", "evidence": "acme:1", "query_id": "a\\b"}, r"row 2: query_id 'a\\\\b' holds a path sep"),
    ({"question": "x", "evidence": "acme/..", "query_id": "q"}, r"row 2: evidence 'acme/..': the element id '..' is"),
    ({"question": "x", "evidence": "acme/e\x01", "query_id": "q"}, r"row 2: .* element id 'e\\x01' holds the control"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_ROWS)
def test_a_bad_row_is_one_error_naming_the_row_before_any_rendering(tmp_path, bad, message):
    path = write_jsonl(tmp_path / "q.jsonl", [{"question": "fine", "evidence": "acme:1"}, bad])
    with pytest.raises(ConfigError, match=message) as error:
        UserQueries(path).preflight(["acme", "wiki"])
    assert str(path) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        ("acme:8", r"row 2: evidence acme:8: document 'acme' has 7 page\(s\), no page 8"),
        ("wiki/e00099", r"row 2: evidence wiki/e00099: document 'wiki' has no element 'e00099'"),
        ("acme/e00000", r"row 2: evidence acme/e00000: document 'acme' has no element 'e00000'"),  # wiki's, not acme's
        ("gone:1", r"row 2: evidence gone:1: no document 'gone'"),  # e.g. its rendering failed
    ],
)
def test_evidence_is_checked_against_the_built_pages(tmp_path, evidence, message):
    path = write_jsonl(
        tmp_path / "q.jsonl", [{"question": "fine", "evidence": "acme:1"}, {"question": "x", "evidence": evidence}]
    )
    UserQueries(path).preflight(None)  # the shape is fine; only the built pages can tell
    with pytest.raises(ConfigError, match=message):
        UserQueries(path)(DOCUMENTS, PAGES, ELEMENTS, {}, 4)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("q.txt", "", r"a query file is .jsonl, .csv, .parquet"),
        ("missing.jsonl", None, r"no such file"),
        ("q.jsonl", "", r"the query file has no rows"),
        ("q.jsonl", '{"question": "x", "evidence": "acme:1"}\nnot json\n', r"row 2: not JSON"),
        ("q.jsonl", '["a list"]\n', r"row 1: not a JSON object"),
    ],
)
def test_an_unreadable_file_is_one_error(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(ConfigError, match=message):
        UserQueries(tmp_path / name).preflight(None)
    with pytest.raises(ConfigError, match=r"needs queries\.path"):
        UserQueries(None)


def test_no_queries_makes_a_corpus_that_validates_and_that_run_py_refuses_in_one_line(tmp_path):
    stage = NoQueries()
    stage.preflight(["acme"])
    queries, qrels, report = stage(DOCUMENTS, PAGES, ELEMENTS, {}, 4)
    assert queries.empty and qrels.empty and list(qrels.columns) == ["query_id", "page_id", "doc_id", "element_ids"]
    tables = {"documents": DOCUMENTS, "pages": PAGES, "elements": ELEMENTS, "queries": queries, "qrels": qrels}
    bench = write_benchmark(tmp_path / "corpus", tables, {"name": "corpus", "built_by": {"queries": report}})
    assert bench.info["counts"]["queries"] == 0 and bench.info["counts"]["pages"] == 9
    assert "generate_queries" in stage.summary(report)
    # without the build's word that it has no queries, empty queries are still an error
    with pytest.raises(BenchmarkError, match="the table has no rows"):
        write_benchmark(tmp_path / "broken", tables, {"name": "broken", "built_by": {"queries": {"method": "file"}}})
    with pytest.raises(ConfigError, match=r"has no queries, so there is nothing to evaluate.*generate_queries"):
        evaluate(
            f"dataset.source={tmp_path / 'corpus'}",
            "dataset.build=null",
            f"paths.results_dir={tmp_path / 'results'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
        )


def test_a_query_file_linked_from_outside_its_folder_is_not_read(tmp_path, monkeypatch):
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"question": "root:x:0:0", "evidence": "acme:1"}\n')
    (tmp_path / "mine").mkdir()
    link = tmp_path / "mine" / "q.jsonl"
    link.symlink_to(secret)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda file, *a, **k: opened.append(str(file)) or real_open(file, *a, **k))
    with pytest.raises(ConfigError, match=r"q\.jsonl: a symbolic link to .*secret\.jsonl, outside its folder") as error:
        UserQueries(link).preflight(None)
    assert "root:x:0" not in str(error.value) and "\n" not in str(error.value)
    assert not any("secret" in path or path == str(link) for path in opened), opened
    (tmp_path / "mine" / "real.jsonl").write_text(secret.read_text())
    (tmp_path / "mine" / "alias.jsonl").symlink_to("real.jsonl")  # a link that stays in its folder is followed
    assert read_query_file(tmp_path / "mine" / "alias.jsonl")[0].question == "root:x:0:0"
