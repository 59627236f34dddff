"""Runs made elsewhere: ``retriever=run_file`` evaluates a TREC or Parquet run like any other run,
``python -m vldocir.store export`` writes a stored run as a TREC run file, and ``make tables``
lists the runs no paper row uses.

Oracles: trec_eval (pytrec-eval-terrier) on the same files and on the exported ones, with qrels
built from the benchmark's qrels table; the files' own float64 order, checked row by row.

trec_eval's rules, checked here (``test_trec_eval_reads_float32_and_breaks_ties_by_docid_descending``):
it reads scores into a C float (float32) and orders equal ones by docid *descending*. vldocir ranks
by the file's own (float64) scores and orders equal ones by page_id ascending. The two agree on
every query where no two scores are equal in float32; an exported run carries vldocir's tie order
in its scores, so trec_eval agrees on every query.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import pytrec_eval

from helpers import MINI_DIR, REPO_ROOT, evaluate, run_py
from vldocir import store
from vldocir.data.benchmark import load_benchmark
from vldocir.data.runs import (
    TrecRunError,
    float32_keeping_order,
    read_run,
    read_trec_run,
    run_from_rows,
    write_trec_run,
)
from vldocir.data.schema import RUN_SCHEMA
from vldocir.errors import ConfigError
from vldocir.retrieval.run_file import RunFileError
from vldocir.store import cli as store_cli

KS = (3, 5, 10)
MINI = "vl-docir-mini"


# -- helpers -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mini():
    return load_benchmark(MINI_DIR)


@pytest.fixture(scope="module")
def qrels(mini) -> dict[str, dict[str, int]]:
    """trec_eval's qrels, from the benchmark's qrels table (every evidence page has gain 1)."""
    out: dict[str, dict[str, int]] = {}
    for query, page in zip(mini.qrels["query_id"], mini.qrels["page_id"], strict=True):
        out.setdefault(str(query), {})[str(page)] = 1
    return out


def paths(root: Path) -> list[str]:
    return [
        f"paths.results_dir={root / 'results'}",
        f"paths.cache_dir={root / 'cache'}",
        f"paths.log_dir={root / 'logs'}",
    ]


def evaluate_file(root: Path, path: Path, *overrides: str):
    return evaluate("retriever=run_file", f"retriever.path={path}", *paths(root), *overrides)


def write_lines(path: Path, rows, tag: str = "mysys") -> Path:
    """``rows``: (query, page, score); scores written as the shortest text that reads back exactly."""
    path.write_text("".join(f"{q} Q0 {p} {i} {float(s)!r} {tag}\n" for i, (q, p, s) in enumerate(rows)))
    return path


def parse_trec(path: Path) -> dict[str, dict[str, float]]:
    """The run as trec_eval reads it (its own reader here: split on whitespace, float() the score)."""
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        query, _, page, _, score, _ = line.split()
        run.setdefault(query, {})[page] = float(score)
    return run


def trec_eval(qrels, run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    measures = {f"ndcg_cut.{','.join(map(str, KS))}", f"recall.{','.join(map(str, KS))}"}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


def same_as_trec_eval(ours: pd.DataFrame, theirs: dict, queries) -> list[tuple[str, int]]:
    """(query, k) pairs where our nDCG@k or Recall@k differs from trec_eval's."""
    differ = []
    for query in queries:
        for k in KS:
            if (
                abs(ours.at[query, f"ndcg@{k}"] - theirs[query][f"ndcg_cut_{k}"]) > 1e-9
                or abs(ours.at[query, f"recall@{k}"] - theirs[query][f"recall_{k}"]) > 1e-9
            ):
                differ.append((query, k))
    return differ


def float32_steps(values: np.ndarray) -> np.ndarray:
    """float32 values as integers in the same order, consecutive floats one apart."""
    bits = values.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(bits >= 0, bits, np.iinfo(np.int32).min - bits)


def tied_float64_rows(bench, seed: int = 0, n_queries: int = 120) -> list[tuple[str, str, float]]:
    """Per query (the first ``n_queries``; the others are absent), its evidence pages and 20 other
    pages, scored in one of three ways by query: distinct float32-exact scores (no tie anywhere);
    integers 0-3 (ties); or 0-3 plus 0, 1 or 2 nanounits, so distinct float64 scores that are equal
    in float32 (ties for trec_eval, not for the file), where page_id would often rank them the
    other way round. Rows in shuffled order (the file's order is not its ranking)."""
    rng = np.random.default_rng(seed)
    pages = bench.pages["page_id"].to_numpy(dtype=object)
    evidence = bench.qrels.groupby("query_id")["page_id"].apply(list).to_dict()
    rows = []
    for i, query in enumerate(bench.queries["query_id"][:n_queries]):
        others = [p for p in rng.choice(pages, 20, replace=False) if p not in evidence[query]]
        candidates = rng.permutation(np.array(evidence[query] + others, dtype=object))
        if i % 3 == 0:
            scores = rng.permutation(len(candidates)) * 0.5 - 3.0
        elif i % 3 == 1:
            scores = rng.integers(0, 4, len(candidates)).astype(float)
        else:
            scores = rng.integers(0, 4, len(candidates)) + rng.permutation(len(candidates)) % 3 * 1e-9
        rows += [(query, page, float(score)) for page, score in zip(candidates, scores, strict=True)]
    return rows


@pytest.fixture(scope="module")
def stored(tmp_path_factory, mini):
    """One results store: DOM-BM25 (a paper row, as `python run.py` makes it) and the tied float64
    TREC file evaluated as retriever.id=mysystem."""
    root = tmp_path_factory.mktemp("run-file-store")
    bm25 = evaluate(*paths(root))
    trec = write_lines(root / "mysystem.trec", tied_float64_rows(mini))
    mine = evaluate_file(root, trec, "retriever.id=mysystem")
    return {"root": root, "results": root / "results", "bm25": bm25, "mine": mine, "trec": trec}


# -- the reader and the conversion ------------------------------------------------------------------


def _first_for_trec_eval(scores: dict[str, float]) -> str:
    """The page trec_eval ranks first."""
    for page in scores:
        if (
            pytrec_eval.RelevanceEvaluator({"q": {page: 1}}, {"recall.1"}).evaluate({"q": scores})["q"]["recall_1"]
            == 1.0
        ):
            return page
    raise AssertionError(scores)


def test_trec_eval_reads_float32_and_breaks_ties_by_docid_descending():
    """The facts the tie handling rests on (trec_eval's TEXT_RESULTS keeps a float; comp_sim_docno)."""
    assert _first_for_trec_eval({"a": 1.0, "b": 1.0}) == "b"
    assert _first_for_trec_eval({"b": 1.0, "a": 1.0}) == "b"
    assert _first_for_trec_eval({"d10": 1.0, "d9": 1.0}) == "d9"  # byte order, not numeric
    assert _first_for_trec_eval({"a": 1.0 + 1e-6, "b": 1.0}) == "a"
    assert _first_for_trec_eval({"a": 1.0 + 1e-9, "b": 1.0}) == "b"  # equal in float32: a tie
    assert _first_for_trec_eval({"a": 2.0**24 + 1, "b": 2.0**24}) == "b"


def test_read_trec_run_formats(tmp_path):
    text = "q1 Q0 p2 1 2.5 run\nq1 Q0 p1 2 0.1 run\n\nq2 Q0 p1 1 -3e-5 run\n"
    expected = {
        "query_id": ["q1", "q1", "q2"],
        "page_id": ["p2", "p1", "p1"],
        "score": [2.5, 0.1, -3e-5],
        "tag": ["run"] * 3,
    }
    variants = {
        "space": text,
        "tab": text.replace(" ", "\t"),
        "crlf": text.replace("\n", "\r\n"),
        "mixed": "q1  Q0\tp2 1 2.5 run \nq1 Q0 p1 2 0.1 run\n   \nq2 Q0 p1 1 -3e-5 run",
    }
    for name, content in variants.items():
        path = tmp_path / f"{name}.trec"
        path.write_bytes(content.encode())
        table = read_trec_run(path)
        assert table.to_pydict() == expected, name
        assert table.schema.field("score").type == pa.float64(), name
    precise = tmp_path / "precise.trec"
    precise.write_text("q Q0 a 1 0.1000000000000000055511151231257827 t\nq Q0 b 2 1.0000000000000002 t\n")
    assert read_trec_run(precise).column("score").to_pylist() == [0.1, 1.0000000000000002]  # correctly rounded


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            "q1 Q0 p1 1 2.5 run\nq1 Q0 p2 2 1.5\n",
            "line 2: expected 6 whitespace-separated columns .* found 5: 'q1 Q0 p2 2 1.5'",
        ),
        ("q1 Q0 p1 1 2.5 run extra\n", "line 1: expected 6 .* found 7"),
        ("\nq1 Q0 p1 1 2.5 run\nq1 Q0 p2 2 high run\n", "line 3: the score \\(5th column\\) 'high' is not a number"),
        ("q1 Q0 p1 1 nan run\n", "line 1: the score .* 'nan' is not a number"),
    ],
)
def test_malformed_trec_lines_are_named(tmp_path, content, problem):
    path = tmp_path / "bad.trec"
    path.write_text(content)
    with pytest.raises(TrecRunError, match=f"{path}, {problem}"):
        read_trec_run(path)
    path.write_bytes(b"q1 Q0 p\xff 1 2.5 run\n")
    with pytest.raises(TrecRunError, match=f"{path}, line 1: not UTF-8 text"):
        read_trec_run(path)


@pytest.mark.parametrize("seed", range(5))
def test_float32_keeps_every_float64_order(seed):
    """Random float64 scores crowded into few float32 values: the float32 run ranks every query
    exactly as the float64 scores (ties by page_id) do; equal scores stay equal; queries a plain
    cast does not reorder keep the cast values."""
    rng = np.random.default_rng(seed)
    n_queries, per_query = 50, 40
    q = np.repeat(np.arange(n_queries), per_query)
    pages = np.array([f"p{i:03d}" for i in range(200)], dtype=object)
    page = np.concatenate([rng.choice(pages, per_query, replace=False) for _ in range(n_queries)])
    base = rng.integers(-3, 3, size=len(q)).astype(np.float64) * 10.0 ** rng.integers(-3, 3, size=len(q))
    score = base + rng.integers(0, 4, size=len(q)) * 1e-10 * np.abs(base + 1)
    rows = pa.table({"query_id": [f"q{i:02d}" for i in q], "page_id": page.tolist(), "score": score})
    query_ids = [f"q{i:02d}" for i in range(n_queries)]
    run, made = run_from_rows(rows, query_ids)
    conversion = made["score_conversion"]
    assert conversion["reordered_pairs"] > 0 and conversion["changed_rows"] > 0  # a plain cast would not do

    frame = rows.to_pandas()
    expected = frame.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True])
    got = run.to_pandas()
    got_order = got.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True])
    key = ["query_id", "page_id"]
    assert (
        got_order[key].to_numpy().tolist() == expected.sort_values(["query_id"], kind="stable")[key].to_numpy().tolist()
    )
    assert got[key].to_numpy().tolist() == got_order[key].to_numpy().tolist(), "rows are stored in rank order"
    merged = frame.merge(got, on=key)
    pairs = merged.groupby(["query_id", "score_x"])["score_y"].nunique()
    assert (pairs == 1).all(), "equal float64 scores stay equal"
    unchanged = merged.groupby("query_id").apply(
        lambda g: (g.score_y == g.score_x.astype(np.float32)).all(), include_groups=False
    )
    assert unchanged.sum() == n_queries - conversion["changed_queries"]


def test_float32_overflow_falls_back_to_dense_ranks():
    # -1e300 > -1e301, both -inf in float32, page order says the other way round: no float32 below -inf.
    score = np.array([5.0, -1e300, -1e301, -1e301])
    out, stats = float32_keeping_order(score, np.zeros(4, int), np.array([True, True, False, True]))
    assert out.tolist() == [-1.0, -2.0, -3.0, -3.0] and stats["method"].endswith(
        "dense ranks for queries below float32's range"
    )


# -- evaluating a run file ----------------------------------------------------------------------------


def test_trec_run_with_ties_and_float64_scores_equals_trec_eval(stored, mini, qrels):
    """retriever=run_file on a file with ties and float64-only differences: per query, trec_eval's
    nDCG@k and Recall@k on the same file wherever the tie order agrees (no tie in the query), and
    on every query once the ties are ordered by vldocir's rule; absent queries score 0."""
    entry = stored["mine"].entry
    assert entry.parent == stored["results"] / "runs" / MINI / "mysystem" / "base"
    ours = pd.read_parquet(entry / store.PER_QUERY_FILE).set_index("query_id")
    rows = tied_float64_rows(mini)
    frame = pd.DataFrame(rows, columns=["query_id", "page_id", "score"])
    in_file = list(dict.fromkeys(frame.query_id))
    as_float32 = frame.assign(score=frame.score.astype(np.float32))
    tied = set(as_float32[as_float32.duplicated(["query_id", "score"], keep=False)].query_id)  # ties for trec_eval
    untied = [q for q in in_file if q not in tied]
    assert len(untied) == 40 and len(tied) == 80

    as_written = trec_eval(qrels, parse_trec(stored["trec"]))
    assert same_as_trec_eval(ours, as_written, untied) == []
    # vldocir's tie rule as an independent oracle: rank by (score desc, page_id asc), give trec_eval the ranks.
    ranked = frame.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True])
    ranked["position"] = ranked.groupby("query_id").cumcount()
    by_rule = {q: dict(zip(g.page_id, -g.position.astype(float), strict=True)) for q, g in ranked.groupby("query_id")}
    assert same_as_trec_eval(ours, trec_eval(qrels, by_rule), in_file) == []

    absent = [q for q in mini.queries["query_id"] if q not in set(in_file)]
    assert (
        len(absent) == len(mini.queries) - 120 > 0
        and not ours.loc[absent, "in_run"].any()
        and ours.loc[in_file, "in_run"].all()
    )
    assert (ours.loc[absent, [f"ndcg@{k}" for k in KS]].to_numpy() == 0).all()

    # float32 alone would have reordered: the conversion changed scores, and says so.
    retrieval = stored["mine"].manifest["retrieval"]
    conversion = retrieval["score_conversion"]
    assert (
        conversion["input_dtype"] == "float64" and conversion["reordered_pairs"] > 0 and conversion["changed_rows"] > 0
    )
    assert (
        retrieval["rows_read"] == len(rows)
        and retrieval["queries_in_file"] == 120
        and retrieval["queries_missing"] == len(mini.queries) - 120
    )
    assert retrieval["run_file"]["format"] == "trec" and retrieval["tags"] == ["mysys"]
    # trec_eval on the file differs on queries of both kinds of tie: equal scores, and float64 scores equal in float32.
    differ = {q for q, _ in same_as_trec_eval(ours, as_written, tied)}
    assert {in_file.index(q) % 3 for q in differ} == {1, 2}


def test_depth_cuts_each_query_at_the_files_own_order(stored, mini, tmp_path):
    result = evaluate_file(tmp_path, stored["trec"], "depth=5", "eval.ks=[1,5]")
    run = read_run(result.entry / store.RUN_FILE).to_pandas()
    frame = pd.DataFrame(tied_float64_rows(mini), columns=["query_id", "page_id", "score"])
    top = frame.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True]).groupby("query_id").head(5)
    assert sorted(zip(run.query_id, run.page_id, strict=True)) == sorted(zip(top.query_id, top.page_id, strict=True))
    assert run.groupby("query_id")["rank"].apply(list).map(lambda r: r == [1, 2, 3, 4, 5]).all()
    assert result.manifest["retrieval"]["rows_beyond_depth"] == len(frame) - len(top)


def test_unknown_ids_are_an_error_or_dropped_and_counted(stored, mini, tmp_path):
    rows = tied_float64_rows(mini, n_queries=20)
    pages = [(rows[0][0], f"nope-{i:02d}", 1.0) for i in range(12)]
    with pytest.raises(
        RunFileError,
        match=r"names 12 page id\(s\) that benchmark vl-docir-mini does not have \(12 row\(s\)\): "
        r"nope-00, nope-01, .*nope-09 and 2 more\. Was the run made on another benchmark\? "
        r"retriever.on_unknown_ids=drop leaves those rows out",
    ):
        evaluate_file(tmp_path, write_lines(tmp_path / "pages.trec", rows + pages))
    path = write_lines(
        tmp_path / "foreign.trec", rows + pages + [("q-nope", rows[0][1], 1.0), ("q-nope", "nope-00", 1.0)]
    )
    with pytest.raises(
        RunFileError, match=r"names 1 query id\(s\) that benchmark vl-docir-mini does not have \(2 row\(s\)\): q-nope\."
    ):
        evaluate_file(tmp_path, path)
    dropped = evaluate_file(tmp_path, path, "retriever.on_unknown_ids=drop")
    unknown = dropped.manifest["retrieval"]["unknown_ids"]
    assert unknown["page_ids"] == {"ids": 12, "rows": 12, "examples": [f"nope-{i:02d}" for i in range(10)]}
    assert unknown["query_ids"] == {"ids": 1, "rows": 2, "examples": ["q-nope"]} and unknown["action"].startswith(
        "dropped"
    )
    clean = evaluate_file(tmp_path, write_lines(tmp_path / "clean.trec", rows))
    assert dropped.metrics["aggregates"] == clean.metrics["aggregates"]


def test_bad_values_fail_in_one_line(stored, tmp_path):
    with pytest.raises(ConfigError, match=r"retriever\.path is not set: name the run file"):
        evaluate("retriever=run_file", *paths(tmp_path))
    with pytest.raises(RunFileError, match="no such file"):
        evaluate_file(tmp_path, tmp_path / "missing.trec")
    with pytest.raises(RunFileError, match=r"retriever\.format must be one of auto, trec, parquet"):
        evaluate_file(tmp_path, stored["trec"], "retriever.format=csv")
    with pytest.raises(RunFileError, match=r"retriever\.on_unknown_ids must be one of error, drop"):
        evaluate_file(tmp_path, stored["trec"], "retriever.on_unknown_ids=keep")
    bad = tmp_path / "bad.trec"
    bad.write_text("q0000000 Q0 arxiv-00000-p000 1 1.0 t\nq0000000 Q0 arxiv-00000-p001 2 1.0\n")
    with pytest.raises(RunFileError, match=f"retriever.path: {bad}, line 2: expected 6"):
        evaluate_file(tmp_path, bad)
    twice = write_lines(
        tmp_path / "twice.trec", [("q0000001", "arxiv-00000-p001", 2.0), ("q0000001", "arxiv-00000-p001", 1.0)]
    )
    with pytest.raises(RunFileError, match="lists page arxiv-00000-p001 more than once for query q0000001"):
        evaluate_file(tmp_path, twice)
    assert not (tmp_path / "results" / "runs").exists() or not list(
        (tmp_path / "results" / "runs").rglob("manifest.json")
    )


def test_a_file_edited_after_its_run_key_is_refused(mini, tmp_path):
    from vldocir.retrieval.run_file import RunFileRetriever

    path = write_lines(tmp_path / "r.trec", tied_float64_rows(mini, n_queries=3))
    retriever = RunFileRetriever(str(path))
    key = retriever.cache_params()
    write_lines(path, tied_float64_rows(mini, seed=5, n_queries=3))
    os.utime(path, ns=(1, 1))
    with pytest.raises(RunFileError, match="changed after its run key was computed"):
        retriever.retrieve(mini, dict.fromkeys(mini.queries["query_id"], ""), 100, None)
    assert RunFileRetriever(str(path)).cache_params() != key


def test_parquet_runs_and_a_stored_run_parquet(stored, tmp_path):
    """A stored run.parquet (float32, dictionary ids) evaluated as a run file reproduces its entry."""
    bm25 = stored["bm25"]
    again = evaluate_file(tmp_path, bm25.entry / store.RUN_FILE, "retriever.id=copy")
    assert again.manifest["retrieval"]["run_file"]["format"] == "parquet"
    assert again.metrics["aggregates"] == bm25.metrics["aggregates"]
    assert read_run(again.entry / store.RUN_FILE).equals(read_run(bm25.entry / store.RUN_FILE))


# -- the store: keys, hand-placed files, the user's file ---------------------------------------------------


def test_a_changed_file_is_a_new_run_and_nothing_is_overwritten(stored, mini, tmp_path):
    rows = tied_float64_rows(mini, seed=1)
    path = write_lines(tmp_path / "mine.trec", rows)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    first = evaluate_file(tmp_path, path)
    assert evaluate_file(tmp_path, path).manifest["run"]["reused"], "the same content is the same run"
    moved = tmp_path / "elsewhere.trec"
    moved.write_bytes(path.read_bytes())
    assert evaluate_file(tmp_path, moved).manifest["run"]["key"] == first.manifest["run"]["key"], (
        "keyed by content, not path"
    )
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before, "the user's file is only read"

    changed = write_lines(path, [*rows[:-1], (rows[-1][0], rows[-1][1], rows[-1][2] + 1.0)])
    second = evaluate_file(tmp_path, changed)
    assert second.manifest["run"]["key"] != first.manifest["run"]["key"] and not second.manifest["run"]["reused"]
    index = store.list_runs(tmp_path / "results")
    assert sorted(Path(p) for p in index.path) == sorted({first.entry, second.entry})
    assert all(store.Entry(Path(p)).verify(full=True) for p in index.path)


def test_a_run_file_placed_in_the_store_by_hand_is_left_alone(stored, tmp_path, caplog):
    """Where the entry of a run file would go, a directory placed by hand holding that very file:
    the evaluation publishes beside it, reads the file and touches nothing of it."""
    name = stored["mine"].entry.name
    hand = tmp_path / "results" / "runs" / MINI / "mysystem" / "base" / name
    hand.mkdir(parents=True)
    placed = hand / "mysystem.trec"
    placed.write_bytes(stored["trec"].read_bytes())
    loose = hand.parent / "run.trec"  # a file straight in the setting directory
    loose.write_bytes(b"placed by hand")
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (placed, loose)}

    with caplog.at_level("WARNING"):
        result = evaluate_file(tmp_path, placed, "retriever.id=mysystem")
    assert "is in the way and is not a verified entry" in caplog.text
    assert result.entry == hand.with_name(name + ".2") and store.Entry(result.entry).verify(full=True)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    assert sorted(p.name for p in hand.iterdir()) == ["mysystem.trec"]
    assert result.metrics == stored["mine"].metrics
    assert [p for p, _ in store.unverified(tmp_path / "results")] == [hand.parent, hand]


# -- export ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["bm25", "mine"])
def test_an_exported_run_round_trips_through_trec_eval(stored, qrels, tmp_path, capsys, run):
    """The exported file gives trec_eval our per-query nDCG@k and Recall@k on every query, ties
    included; read back as a run file it ranks every query as the entry does. With --exact-scores
    it holds the stored scores themselves, and trec_eval breaks the ties its own way."""
    entry = stored[run].entry
    ours = pd.read_parquet(entry / store.PER_QUERY_FILE).set_index("query_id")
    stored_run = read_run(entry / store.RUN_FILE)
    stored_frame = stored_run.to_pandas()
    query_order = list(dict.fromkeys(stored_run.column("query_id").to_pylist()))
    tied = stored_frame.duplicated(["query_id", "score"]).sum()
    assert tied, "the case where trec_eval's tie rule differs"

    out = tmp_path / "exported.trec"
    assert store_cli.main(["export", str(entry), str(out)]) == 0
    assert re.search(r"^  [1-9]\d* score\(s\) lowered by float32 steps", capsys.readouterr().out, re.M)
    theirs = trec_eval(qrels, parse_trec(out))
    assert set(theirs) == set(ours.index[ours.in_run])
    assert same_as_trec_eval(ours, theirs, list(theirs)) == []
    lines = out.read_text().splitlines()
    assert len(lines) == stored_run.num_rows and lines[0].split()[5] == f"{entry.parents[1].name}.base"
    back = run_from_rows(read_trec_run(out), query_order)[0].to_pandas()
    assert back[["query_id", "page_id", "rank"]].equals(
        stored_frame[["query_id", "page_id", "rank"]].astype(back.dtypes[:3].to_dict())
    )
    steps = float32_steps(stored_frame.score.to_numpy()) - float32_steps(back.score.to_numpy())
    assert (steps >= 0).all() and (steps > 0).sum() > 0 and steps.max() <= 64  # a few float32 steps, never up

    exact = tmp_path / "exact.trec"
    assert store_cli.main(["export", str(entry), str(exact), "--exact-scores"]) == 0
    assert "pair(s) of tied pages left tied" in capsys.readouterr().out
    assert run_from_rows(read_trec_run(exact), query_order)[0].equals(stored_run.cast(RUN_SCHEMA))
    if run == "mine":  # (DOM-BM25's few ties are below the top 10)
        assert same_as_trec_eval(ours, trec_eval(qrels, parse_trec(exact)), list(theirs)), "trec_eval's own tie order"


def test_export_finds_runs_and_refuses_to_overwrite(stored, tmp_path, capsys):
    results = stored["results"]
    out = tmp_path / "a.trec"
    argv = ["export", f"{MINI}/mysystem/base", str(out), "--results-dir", str(results), "--tag", "final"]
    assert store_cli.main(argv) == 0
    assert "the newest verified of 1 entries" in capsys.readouterr().out
    assert {line.split()[5] for line in out.read_text().splitlines()} == {"final"}
    before = out.read_bytes()
    assert store_cli.main(["export", str(stored["mine"].entry.parent), str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_bytes() == before
    assert store_cli.main(["export", str(stored["mine"].entry), str(stored["mine"].entry / "x.trec")]) == 2
    assert "inside the results store" in capsys.readouterr().err and not (stored["mine"].entry / "x.trec").exists()
    assert store_cli.main(["export", str(tmp_path), str(tmp_path / "b.trec")]) == 2
    assert "holds no verified entry" in capsys.readouterr().err
    with pytest.raises(ValueError, match="one word without whitespace"):
        write_trec_run(read_run(stored["mine"].entry / store.RUN_FILE), tmp_path / "c.trec", "two words")


# -- reports --------------------------------------------------------------------------------------------


def test_make_tables_lists_the_runs_no_paper_row_uses(stored, tmp_path, capsys):
    from vldocir.reporting.report_tasks import compose_report, run

    results = tmp_path / "results"
    shutil.copytree(stored["results"], results)
    # A run filed under dom_bm25/base with another run key: the newest, so the paper row (Table 13's
    # DOM-BM25) uses it, and the first DOM-BM25 run becomes one of the other runs.
    variant = evaluate_file(tmp_path, stored["trec"], "retriever.id=dom_bm25")
    capsys.readouterr()
    assert (
        run(
            compose_report(
                [f"paths.results_dir={results}", f"benchmark={MINI}", "do=[tables]", "only=[table13_overall]"]
            )
        )
        == 0
    )
    printed = capsys.readouterr().out
    readme = (results / "tables" / "README.md").read_text()
    section = readme.split("## Other runs in the store", 1)[1]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    listed = {(r[0].strip("| "), r[1].strip("`"), r[2]): r[3:] for r in rows}
    mine, bm25 = stored["mine"], stored["bm25"]
    assert set(listed) == {
        ("mysystem/base", mine.entry.name, "Macro"),
        ("mysystem/base", mine.entry.name, "Micro"),
        ("dom_bm25/base", bm25.entry.name, "Macro"),
        ("dom_bm25/base", bm25.entry.name, "Micro"),
    }
    assert ("dom_bm25/base", variant.entry.name, "Macro") not in listed, (
        "the paper row's run is in the paper tables, not here"
    )
    table13 = (results / "tables" / "table13_overall.md").read_text()
    assert f"{variant.metrics['aggregates']['macro']['recallall@10']:.2f} / " in table13
    for result in (mine, bm25):
        for label, key in (("Macro", "macro"), ("Micro", "micro")):
            cells = [c.strip(" |") for c in listed[(f"{result.entry.parents[1].name}/base", result.entry.name, label)]]
            values = result.metrics["aggregates"][key]
            assert cells == [f"{values[c]:.2f}" for c in ("ndcgall@5", "ndcgall@10", "recallall@5", "recallall@10")]
    assert "Other runs in the store (no paper row uses them" in printed and "mysystem/base" in printed
    assert "| Run | Entry | Aggregate | nDCGAll@5 | nDCGAll@10 | RecallAll@5 | RecallAll@10 |" in section

    assert (
        run(
            compose_report(
                [
                    f"paths.results_dir={results}",
                    f"benchmark={MINI}",
                    "do=[tables]",
                    "only=[table13_overall]",
                    "other_runs=false",
                ]
            )
        )
        == 0
    )
    assert "Other runs" not in (results / "tables" / "README.md").read_text()


# -- the command lines ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_py_and_the_export_command(stored, tmp_path):
    results = tmp_path / "results"
    done = run_py("retriever=run_file", *paths(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("run error: retriever.path is not set")

    done = run_py("retriever=run_file", f"retriever.path={stored['trec']}", "retriever.id=mysystem", *paths(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    entry = Path(store.list_runs(results).path.iloc[0])
    assert entry.name == stored["mine"].entry.name
    assert json.loads((entry / store.METRICS_FILE).read_text()) == stored["mine"].metrics

    out = tmp_path / "mysystem.trec"
    done = subprocess.run(
        [sys.executable, "-m", "vldocir.store", "export", f"{MINI}/mysystem/base", str(out)],
        cwd=REPO_ROOT,
        env={**os.environ, "VLDOCIR_RESULTS_DIR": str(results)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().splitlines()[0].endswith(" mysystem.base")


def test_an_empty_run_keeps_its_float32_order_without_error():
    """No rows: nothing to cast or separate (an empty run read from elsewhere used to raise IndexError)."""
    cast, stats = float32_keeping_order(
        np.array([], dtype=np.float64), np.array([], dtype=np.int64), np.array([], bool)
    )
    assert cast.dtype == np.float32 and cast.size == 0
    assert stats["changed_rows"] == 0 and stats["merged_pairs"] == 0
