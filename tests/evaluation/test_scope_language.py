"""Search scope (corpus | document), evaluation per language, and Macro over the structures present.

a) Macro on a benchmark lacking two structures, by hand, and the line the report prints about it;
b) the pipeline on a small graded, two-language text benchmark lacking page_multi and doc_near:
   the by-language breakdown, ``eval.language=fr`` (its own store entry), a mistyped language;
   ``setting=doc_scope`` (pages of the query's documents only, RecallAll@k >= the corpus run's,
   filed as its own entry beside the corpus run) and graded nDCG through the store;
c) :func:`scope_to_documents` on a partial input run: an exact prefix of the within-document ranking.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytrec_eval

from helpers import evaluate
from vldocir import store
from vldocir.data.benchmark import load_benchmark, write_benchmark
from vldocir.data.runs import make_run, read_run, write_run
from vldocir.data.schema import IMAGE_TYPE, TABLES
from vldocir.errors import ConfigError
from vldocir.evaluation.aggregate import summarise
from vldocir.evaluation.console import format_report
from vldocir.evaluation.metrics import metric_columns
from vldocir.retrieval.fusion import ranked_lists
from vldocir.retrieval.settings import scope_to_documents

# ----------------------------------------------------------------------------------------------
# a) Macro over the structures present
# ----------------------------------------------------------------------------------------------


def frame_of(rows: list[tuple[str, float]], k: int = 3) -> pd.DataFrame:
    """Per-query rows as per_query_metrics makes them: (structure, value of every metric)."""
    records = []
    for i, (structure, value) in enumerate(rows):
        record = {
            "query_id": f"q{i}",
            "evidence_structure": structure,
            "source": "wikipedia",
            "domain": "Arts",
            "generator": "gen",
            "evidence_type": "text",
            "n_evidence_pages": 2,
            "n_evidence_docs": 1,
            "in_run": True,
            f"pages_found@{k}": 1,
            f"docs_found@{k}": 1,
        }
        records.append(record | {c: float(value) for c in metric_columns([k])})
    return pd.DataFrame(records)


def test_macro_is_over_the_structures_present():
    # No page_multi, no doc_near. Means: page_single (1 + 0 + 1) / 3 = 2/3, doc_adjacent 1,
    # doc_far (0 + 0) / 2 = 0, cross_doc 1/2 -> Macro = (2/3 + 1 + 0 + 1/2) / 4 = 13/24 = 54.1667 %
    # (over six structures, zeros filled in, it would be 13/36 = 36.11 %); Micro = 4/8 = 50 %.
    frame = frame_of(
        [
            ("cross_doc", 1),
            ("page_single", 1),
            ("doc_far", 0),
            ("page_single", 0),
            ("doc_adjacent", 1),
            ("page_single", 1),
            ("doc_far", 0),
            ("cross_doc", 0),
        ]
    )
    metrics = summarise(frame, [3])
    assert metrics["aggregates"]["macro"]["recallall@3"] == pytest.approx(100 * 13 / 24, abs=1e-4)
    assert metrics["aggregates"]["micro"]["recallall@3"] == pytest.approx(50.0)
    assert metrics["macro_structures"] == ["page_single", "doc_adjacent", "doc_far", "cross_doc"]  # paper order
    assert metrics["empty"]["structures"] == ["page_multi", "doc_near"]
    assert list(metrics["breakdowns"]["structure"]) == metrics["macro_structures"]
    report = format_report(metrics, "somewhere", reused=False)
    assert (
        "No queries for: page_multi, doc_near; Macro is the mean over the 4 structure(s) present "
        "(page_single, doc_adjacent, doc_far, cross_doc)"
    ) in report


def test_all_structures_present_prints_no_note():
    frame = frame_of(
        [(s, 1) for s in ("page_single", "page_multi", "doc_adjacent", "doc_near", "doc_far", "cross_doc")]
    )
    metrics = summarise(frame, [3])
    assert metrics["empty"]["structures"] == [] and "No queries for" not in format_report(metrics, "x", False)


# ----------------------------------------------------------------------------------------------
# b) the pipeline on a small graded, two-language benchmark
# ----------------------------------------------------------------------------------------------

DOCS = {"d1": ("wikipedia", "Arts", 8), "d2": ("arxiv", "Physics", 6), "d3": ("wikipedia", "History", 4)}
# Words placed on pages beyond each page's own filler word. q4's words fill d2/d3 pages more densely
# than its evidence pages in d1, so the corpus run ranks those first and the document scope helps.
WORDS = {
    "d1_p0": "apple orchard",
    "d1_p1": "zebra",
    "d1_p6": "yak",
    "d1_p3": "copper mine",
    "d1_p5": "violin",
    "d1_p7": "glacier",
    "d2_p0": "zebra yak zebra yak comet",
    "d2_p1": "quantum",
    "d2_p2": "quantum field",
    "d2_p3": "zebra yak zebra yak glacier moraine",
    "d2_p4": "neutrino",
    "d2_p5": "comet tail",
    "d3_p0": "copper",
    "d3_p1": "castle",
    "d3_p2": "river delta castle",
    "d3_p3": "zebra yak zebra yak",
}
# query: (structure, language, text, {page: grade}); q1 also has a grade-0 qrel (not evidence).
QUERIES = {
    "q01": ("page_single", "en", "apple orchard", {"d1_p0": 1, "d1_p1": 0}),
    "q02": ("page_single", "en", "river delta", {"d3_p2": 1}),
    "q03": ("doc_adjacent", "en", "quantum field", {"d2_p1": 1, "d2_p2": 2}),
    "q04": ("doc_far", "en", "zebra yak", {"d1_p1": 2, "d1_p6": 1}),
    "q05": ("cross_doc", "en", "copper mine", {"d1_p3": 1, "d3_p0": 1}),
    "q06": ("page_single", "fr", "neutrino", {"d2_p4": 1}),
    "q07": ("doc_adjacent", "fr", "castle", {"d3_p1": 1, "d3_p2": 1}),
    "q08": ("doc_far", "fr", "comet", {"d2_p0": 1, "d2_p5": 3}),
    "q09": ("cross_doc", "fr", "glacier", {"d1_p7": 3, "d2_p3": 1}),
    "q10": ("page_single", None, "violin", {"d1_p5": 1}),
}
LANGUAGES = {"en": 5, "fr": 4, "unknown": 1}
STRUCTURES = {"page_single": 4, "doc_adjacent": 2, "doc_far": 2, "cross_doc": 2}  # counted by hand above


def write_graded_bench(root: Path, name: str = "graded-two-lang") -> Path:
    docs = pd.DataFrame(
        [
            {"doc_id": d, "source": s, "domain": dom, "title": d, "n_pages": n, "url": None, "license": "CC-BY"}
            for d, (s, dom, n) in DOCS.items()
        ]
    )
    page_ids = [f"{d}_p{i}" for d, (_, _, n) in DOCS.items() for i in range(n)]
    pages = pa.table(
        {
            "page_id": page_ids,
            "doc_id": [p.split("_")[0] for p in page_ids],
            "page_index": pa.array([int(p.split("_p")[1]) for p in page_ids], pa.int32()),
            "image": pa.array([None] * len(page_ids), IMAGE_TYPE),
            "width": pa.array([2000] * len(page_ids), pa.int32()),
            "height": pa.array([4000] * len(page_ids), pa.int32()),
            "dom_text": [f"filler{p.replace('_', '')} " + WORDS.get(p, "") for p in page_ids],
            "ocr_text": [f"filler{p.replace('_', '')} " + WORDS.get(p, "") for p in page_ids],
        }
    )
    queries = pd.DataFrame(
        [
            {
                "query_id": q,
                "text": text,
                "answer": "a",
                "evidence_structure": s,
                "source": DOCS[next(iter(g))[:2]][0],
                "domain": DOCS[next(iter(g))[:2]][1],
                "generator": "hand",
                "evidence_types": ["text"],
                "language": lang,
            }
            for q, (s, lang, text, g) in QUERIES.items()
        ]
    )
    qrels = pd.DataFrame(
        [
            {"query_id": q, "page_id": p, "doc_id": p[:2], "element_ids": [], "grade": grade}
            for q, (_, _, _, g) in QUERIES.items()
            for p, grade in g.items()
        ]
    )
    tables = {
        "documents": docs,
        "pages": pages,
        "elements": TABLES["elements"].schema.empty_table(),
        "queries": queries,
        "qrels": qrels,
    }
    write_benchmark(root, tables, {"name": name, "version": "test"})
    return root


@pytest.fixture
def graded_bench(isolated_paths) -> Path:
    return write_graded_bench(isolated_paths / "graded")


def _on(bench: Path, *overrides: str):
    return evaluate(f"dataset.source={bench}", "dataset.name=graded-two-lang", *overrides)


def test_language_breakdown_and_one_language(graded_bench, isolated_paths, capsys):
    whole = _on(graded_bench)
    assert whole.metrics["n_queries"] == 10
    by_language = whole.metrics["breakdowns"]["language"]
    assert {lang: row["n_queries"] for lang, row in by_language.items()} == LANGUAGES
    assert {s: row["n_queries"] for s, row in whole.metrics["breakdowns"]["structure"].items()} == STRUCTURES
    assert whole.metrics["empty"]["structures"] == ["page_multi", "doc_near"]
    per_query = pq.read_table(whole.entry / store.PER_QUERY_FILE).to_pandas().set_index("query_id")
    assert per_query.loc["q06", "language"] == "fr" and per_query.loc["q10", "language"] == "unknown"
    out = capsys.readouterr().out
    assert "RecallAll@k by language" in out and "Macro is the mean over the 4 structure(s) present" in out

    french = _on(graded_bench, "eval.language=fr")
    assert french.entry.parents[2].name == "graded-two-lang.lang-fr"  # its own benchmark in the store
    assert french.metrics["language"] == "fr" and french.metrics["n_queries"] == 4
    fr_rows = pq.read_table(french.entry / store.PER_QUERY_FILE).to_pandas()
    assert sorted(fr_rows["query_id"]) == ["q06", "q07", "q08", "q09"]
    # The same per-query values as in the all-language entry, and the same structure-balanced mean
    # as the all-language breakdown's 'fr' row (both: fr's four structures, balanced).
    for column in metric_columns([3, 5, 10]):
        assert fr_rows.set_index("query_id")[column].to_dict() == per_query.loc[fr_rows["query_id"], column].to_dict()
        assert french.metrics["aggregates"]["macro"][column] == pytest.approx(by_language["fr"][column], abs=1e-5)
    # one run, reused: the language job searched nothing and linked the all-language entry's run
    assert french.manifest["run"]["reused"] is True
    assert french.manifest["store"]["run_key"] == whole.manifest["store"]["run_key"]
    assert french.manifest["store"]["eval_key"] != whole.manifest["store"]["eval_key"]
    assert "in language fr" in capsys.readouterr().out
    index = store.list_runs(isolated_paths / "results")
    assert sorted(index.benchmark.unique()) == ["graded-two-lang", "graded-two-lang.lang-fr"]


def test_a_language_the_benchmark_lacks_is_refused_before_any_search(graded_bench, isolated_paths):
    with pytest.raises(
        ConfigError,
        match=r"eval.language=de: no query of the benchmark is in de "
        r"\(its queries' languages are en, fr\)",
    ):
        _on(graded_bench, "eval.language=de")
    assert not (isolated_paths / "results" / "runs").exists()


def test_doc_scope_ranks_within_the_query_documents(graded_bench, isolated_paths):
    corpus = _on(graded_bench)
    scoped = _on(graded_bench, "setting=doc_scope")
    assert scoped.entry.parent.name == "doc_scope" and corpus.entry.parent.name == "base"
    assert scoped.manifest["store"]["run_key"] != corpus.manifest["store"]["run_key"]
    # the deep input run is an entry of its own (depth 1000), beside the corpus run (depth 100)
    inputs = scoped.manifest["run"]["inputs"]
    assert len(inputs) == 1 and Path(inputs[0]["entry"]).name.startswith("depth1000_")
    bench = load_benchmark(graded_bench)
    run = pq.read_table(scoped.entry / store.RUN_FILE).to_pandas()
    page_doc = bench.pages.set_index("page_id")["doc_id"]
    scope = {q: {p[:2] for p, grade in g.items() if grade > 0} for q, (_, _, _, g) in QUERIES.items()}
    assert len(run) and all(page_doc[p] in scope[q] for q, p in zip(run["query_id"], run["page_id"], strict=True))
    stats = scoped.manifest["retrieval"]["doc_scope"]
    assert stats["queries_cut"] == 0 and stats["queries"] == 10  # BM25 ranks fewer pages than the input depth

    ours = pq.read_table(scoped.entry / store.PER_QUERY_FILE).to_pandas().set_index("query_id")
    theirs = pq.read_table(corpus.entry / store.PER_QUERY_FILE).to_pandas().set_index("query_id")
    for k in (3, 5, 10):
        assert (ours[f"recallall@{k}"] >= theirs[f"recallall@{k}"]).all(), k
    # q04's words crowd the corpus run with pages of d2 and d3: the scope finds both its pages
    assert theirs.at["q04", "recallall@3"] == 0.0 and ours.at["q04", "recallall@3"] == 1.0
    assert ours.at["q04", "scope_pages"] == 8 and ours.at["q04", "scope_pages_ranked"] <= 8
    assert ours.at["q09", "scope_pages"] == 14  # cross_doc: d1 and d2

    # graded nDCG through the store: pytrec_eval on the stored corpus run, with the qrels' grades
    stored = pq.read_table(corpus.entry / store.RUN_FILE).to_pandas()
    as_dict = {
        q: {p: float(1000 - r) for p, r in zip(g["page_id"], g["rank"], strict=True)}
        for q, g in stored.groupby("query_id")
    }
    graded = {q: dict(g) for q, (_, _, _, g) in QUERIES.items()}
    measures = pytrec_eval.RelevanceEvaluator(graded, {"ndcg_cut.3,5,10"}).evaluate(as_dict)
    for query, values in measures.items():
        for k in (3, 5, 10):
            assert theirs.at[query, f"ndcg@{k}"] == pytest.approx(values[f"ndcg_cut_{k}"], abs=1e-9), (query, k)


# ----------------------------------------------------------------------------------------------
# c) an input run that holds documents in part
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_partial_input_gives_an_exact_prefix(tmp_path, seed):
    bench = load_benchmark(write_graded_bench(tmp_path / "b"))
    rng = np.random.default_rng(seed)
    page_ids = list(bench.pages["page_id"])
    query_ids = list(bench.queries["query_id"])
    scores = [rng.integers(0, 5, len(page_ids)).astype(float) for _ in query_ids]  # with ties
    full = make_run(query_ids, [page_ids] * len(query_ids), scores)
    whole, whole_stats, _ = scope_to_documents(full, bench, 100, query_ids, input_depth=len(page_ids))
    assert whole_stats["queries_cut"] == 0
    exact = ranked_lists(whole)
    assert all(
        len(exact[q]) == sum(DOCS[d][2] for d in {p[:2] for p, g in QUERIES[q][3].items() if g}) for q in query_ids
    )
    for depth in (3, 6):
        write_run(full.filter(pa.array(full.column("rank").to_numpy() <= depth)), tmp_path / "cut.parquet")
        cut = read_run(tmp_path / "cut.parquet")  # as a stored run reads: dictionary-encoded ids
        assert pa.types.is_dictionary(cut.schema.field("page_id").type)
        part, stats, flags = scope_to_documents(cut, bench, 100, query_ids, input_depth=depth)
        lists = ranked_lists(part)
        for query in query_ids:
            pages = lists.get(query, [])
            assert pages == exact[query][: len(pages)], (query, depth)  # a prefix of the exact ranking
            assert flags["scope_pages_ranked"][query] == len(pages) <= flags["scope_pages"][query]
        short = sum(flags["scope_pages_ranked"][q] < flags["scope_pages"][q] for q in query_ids)
        assert stats["queries_cut"] == short > 0  # (every query's input rows reach the input depth)
        assert stats["rows_kept"] == len(part) and json.dumps(stats)


def test_one_language_first_files_the_run_for_all(graded_bench, isolated_paths):
    english = _on(graded_bench, "eval.language=en")
    assert english.metrics["n_queries"] == 5 and english.manifest["run"]["reused"] is False
    index = store.list_runs(isolated_paths / "results")
    assert sorted(index.benchmark) == ["graded-two-lang", "graded-two-lang.lang-en"]
    whole = _on(graded_bench)  # searches nothing: the run was filed with its all-language evaluation
    assert whole.manifest["run"]["reused"] is True and whole.metrics["n_queries"] == 10
    assert whole.entry == index.set_index("benchmark").at["graded-two-lang", "path"]


def test_doc_scope_parameters_are_checked_before_any_work(graded_bench, isolated_paths):
    with pytest.raises(ConfigError, match=r"setting.method \(doc_scope\): input_depth must be an integer >= 1, got 0"):
        _on(graded_bench, "setting=doc_scope", "setting.input_depth=0")
