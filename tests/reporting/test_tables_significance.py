"""Significance markers of the paper tables: each marked or unmarked cell of ``make tables`` is what
``paired_tests`` + ``correct`` give when run directly on the stored per-query rows of the cell's run
and of the table's declared baseline run."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from report_stores import MANIFEST, PAPER_DIR, TEXT_BENCH
from vldocir.evaluation.significance import correct, paired_tests
from vldocir.reporting import compare, significance_marks
from vldocir.reporting.formats import to_latex, to_markdown, write_tables
from vldocir.reporting.paper import PaperSpecError, RunRef, load_spec, metric_label
from vldocir.reporting.significance_marks import MARK_HIGHER, MARK_LOWER, mark_significance
from vldocir.reporting.store_view import ResultsView, StoredRun
from vldocir.reporting.tables import LAYOUTS, build_table, build_tables
from vldocir.store import PER_QUERY_FILE

TESTED = ["ndcgall@10", "recallall@10"]  # conf/paper_tables.yaml: significance.metric of Table 13


@pytest.fixture(scope="module")
def spec():
    return load_spec(MANIFEST, PAPER_DIR)


@pytest.fixture(scope="module")
def view(multi_results):
    return ResultsView(multi_results, TEXT_BENCH)


@pytest.fixture(scope="module")
def t13(spec, view):
    return build_table("table13_overall", spec, view)


def expected_markers(spec, view, entry) -> dict[tuple, str]:
    """(row, column) -> marker, computed directly: every tested cell's p-value, Holm across the table."""
    sig = entry["significance"]
    base = view.get(spec.row_ref(entry, sig["baseline"]))
    keys, p_values, differences = [], [], []
    for label in entry["rows"]:
        run = view.get(spec.row_ref(entry, label))
        if run is None or label == sig["baseline"]:
            continue
        result = paired_tests(run.per_query, base.per_query, TESTED, n_permutations=10000, seed=0)
        result = result.set_index(["aggregate", "metric"])
        for aggregate_label, aggregate in entry["aggregates"].items():
            for metric in TESTED:
                keys.append(((label, aggregate_label), metric_label(metric)))
                p_values.append(result.loc[(aggregate, metric), "p_randomization"])
                differences.append(result.loc[(aggregate, metric), "difference"])
    reject, _ = correct(np.array(p_values), "holm", 0.05)
    return {
        key: (MARK_HIGHER if d > 0 else MARK_LOWER) if r else ""
        for key, r, d in zip(keys, reject, differences, strict=True)
    }


def markers_of(table) -> dict[tuple, str]:
    cells = table.cells
    return {(row, column): m for row, column, m in zip(cells["row"], cells["column"], cells["marker"], strict=True)}


def test_markers_equal_paired_tests_and_holm(spec, view, t13):
    expected = expected_markers(spec, view, spec.tables["table13_overall"])
    found = markers_of(t13)
    assert len(expected) == 3 * 2 * 2  # three rows with a run besides the baseline, Macro + Micro, two metrics
    assert {key: found[key] for key in expected} == expected
    assert any(expected.values()) and not all(expected.values()), "the fixture needs a marked and an unmarked cell"
    # Only the declared metrics are tested; the baseline's own row and rows without a run are never marked.
    untested = {key: m for key, m in found.items() if key not in expected}
    assert not any(untested.values())
    assert f"across the table's {len(expected)} comparisons" in t13.significance
    assert "Holm" in t13.significance and "10,000 sign-flip permutations" in t13.significance


def test_markers_are_rendered_with_their_note(t13, tmp_path):
    marked = t13.cells[t13.cells["marker"] != ""].iloc[0]
    value = f"{marked['reproduced']:.{marked['decimals']}f}"
    markdown, latex = to_markdown(t13), to_latex(t13)
    assert f"{value}{marked['marker']} / " in markdown
    sign = r"\sighigher{}" if marked["marker"] == MARK_HIGHER else r"\siglower{}"
    assert f"{value}{sign} / " in latex and r"\providecommand{\sighigher}" in latex
    assert "baseline OCR-BM25" in markdown and "baseline OCR-BM25" in latex
    unmarked = t13.cells[(t13.cells["marker"] == "") & t13.cells["reproduced"].notna()].iloc[0]
    assert f"{unmarked['reproduced']:.{unmarked['decimals']}f} / " in markdown
    write_tables({"table13_overall": t13}, tmp_path)
    assert (tmp_path / "table13_overall.md").read_text() == markdown


def test_settings_table_tests_against_each_familys_base(spec, view):
    t4 = build_table("table4_settings", spec, view)
    settings = spec.tables["table4_settings"]["rows"]["ColQwen2.5"]
    run_base, run_ctx = (view.get(RunRef.from_entry(settings[name])) for name in ("Base", "Ctx"))
    result = paired_tests(run_ctx.per_query, run_base.per_query, TESTED, seed=0).set_index(["aggregate", "metric"])
    # ColQwen2.5 Ctx against Base is the table's only comparison with both runs: no correction to apply.
    assert "across the table's 4 comparisons" in t4.significance
    p = np.array([result.loc[(a, m), "p_randomization"] for a in ("macro", "micro") for m in TESTED])
    reject, _ = correct(p, "holm", 0.05)
    found = t4.cells[t4.cells["column"].str.startswith("Ctx ") & (t4.cells["row"].str[0] == "ColQwen2.5")]
    assert (found["marker"] != "").tolist() == list(reject)


def test_runs_on_other_queries_are_not_marked(spec, view, tmp_path):
    entry = spec.tables["table13_overall"]
    _, cells = LAYOUTS["aggregates"]("table13_overall", entry, spec, view)
    base = view.get(spec.row_ref(entry, "OCR-BM25"))
    # The baseline's entry as a run of five queries fewer (a copy: the store refuses an edited entry).
    shutil.copytree(base.path, tmp_path / "entry")
    rows = pd.read_parquet(base.path / PER_QUERY_FILE)
    rows.iloc[5:].to_parquet(tmp_path / "entry" / PER_QUERY_FILE)
    fewer = StoredRun(tmp_path / "entry", base.benchmark, base.retriever, base.setting)
    for test in cells.attrs["tests"]:
        if test is not None and test["baseline"] is not None:
            test["baseline"] = fewer
    markers, note = mark_significance(entry, cells)
    assert not any(markers)
    assert note.startswith("No significance markers")
    assert "12 whose run covers other queries than the baseline's" in note


def test_tables_without_a_baseline_run_say_so(spec, view):
    tables = build_tables(spec, view, ["table14_source_macro", "table16_source_structure_recallall5"])
    # No ColNomic (Ensemble) run here: DOM-BM25 and OCR-BM25, 2 cells each, have nothing to be compared with.
    assert "4 whose baseline has no run here" in tables["table14_source_macro"].significance
    assert not (tables["table14_source_macro"].cells["marker"] != "").any()
    assert tables["table16_source_structure_recallall5"].significance == ""  # declares no test


def test_a_baseline_that_is_no_row_is_refused(spec, view):
    entry = {**spec.tables["table13_overall"], "significance": {"baseline": "No such row"}}
    spec.tables["table13_bad"] = entry
    try:
        with pytest.raises(PaperSpecError, match="No such row"):
            build_table("table13_bad", spec, view)
        entry["significance"] = {"baseline": "OCR-BM25", "corection": "holm"}
        with pytest.raises(PaperSpecError, match="corection"):
            build_table("table13_bad", spec, view)
    finally:
        del spec.tables["table13_bad"]


def test_results_are_cached_where_do_compare_caches_them(spec, view, multi_results, t13, tmp_path):
    cached = build_table("table13_overall", spec, view, cache_dir=tmp_path)
    assert cached.cells["marker"].tolist() == t13.cells["marker"].tolist()
    files = sorted((tmp_path / compare.CACHE_KIND).glob("*.json"))
    assert len(files) == 3  # one per row with a run, against the baseline
    # `do=compare runs=[<run>] baseline=<OCR-BM25>` with its default parameters finds the same result.
    base = compare.load_run(f"{TEXT_BENCH}/ocr_bm25/base", multi_results)
    run = compare.load_run(f"{TEXT_BENCH}/dom_bm25/base", multi_results)
    params = compare.Params(TESTED, "holm", 0.05, 10000, 0.95, 0, False)
    assert tmp_path / compare.CACHE_KIND / f"{compare.cache_key(base, [run], params)}.json" in files
    stamps = [path.stat().st_mtime_ns for path in files]
    significance_marks._PAIRED.clear()  # a new `make tables` process: only the files remain
    again = build_table("table13_overall", spec, view, cache_dir=tmp_path)
    assert again.cells["marker"].tolist() == t13.cells["marker"].tolist()
    assert [path.stat().st_mtime_ns for path in files] == stamps, "a cached comparison was recomputed"
