"""The reports that need the benchmark or an imported audit rather than runs: Table 1 (documents and
pages per source), Fig. 7 (evidence-type combinations), Table 12 (the audit with Wilson intervals),
and ``make check`` over them (in-process: ``report_tasks.run`` with a composed config).

Table 1 and Fig. 7 are checked on a benchmark written here whose numbers are counted by hand; Table
12 on an audit of the shipped mini, exported, filled and imported as ``vldocir.apps.audit`` does,
with the Wilson intervals against statsmodels.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from helpers import MINI_DIR, REPO_ROOT
from report_stores import MANIFEST, PAPER_DIR
from vldocir.data.benchmark import load_benchmark, write_benchmark
from vldocir.errors import ConfigError
from vldocir.reporting import check as check_module
from vldocir.reporting.audit import AuditSheetError, export_review, import_review
from vldocir.reporting.benchmark_view import locate_benchmark
from vldocir.reporting.figures import evidence_type_counts, fig7_evidence_types, render_figures
from vldocir.reporting.paper import load_spec
from vldocir.reporting.report_tasks import compose_report, run
from vldocir.reporting.store_view import ResultsView
from vldocir.reporting.tables import build_tables

NAME = "hand-counted"
DOCUMENTS = [  # doc_id, source, domain, n_pages
    ("w1", "wikipedia", "Arts", 1),
    ("w2", "wikipedia", "Sports", 3),
    ("a1", "arxiv", "Astrophysics", 4),
    ("p1", "pubmed", "Chemistry", 2),
    ("s1", "sec", "Financial Reports", 10),
]
QUERIES = [  # query_id, evidence document (page 0), evidence types as generation lists them
    ("q1", "w1", ["text"]),
    ("q2", "w2", ["text"]),
    ("q3", "a1", ["table_row"]),
    ("q4", "a1", ["image", "text"]),
    ("q5", "p1", ["caption", "text"]),
    ("q6", "s1", ["text", "table_row"]),
]
# Counted by hand from the two lists above.
TABLE1 = {  # printed source -> (documents, mean pages per document)
    "Wikipedia": (2, 2.0),
    "arXiv": (1, 4.0),
    "PubMed": (1, 2.0),
    "SEC Proxy": (1, 10.0),
    "Total": (5, 4.0),
}
COMBINATIONS = {"text": 2, "caption+text": 1, "image+text": 1, "table_row": 1, "table_row+text": 1}
PER_TYPE = {"text": 5, "table_row": 2, "caption": 1, "image": 1}


@pytest.fixture(scope="module")
def spec():
    return load_spec(MANIFEST, PAPER_DIR)


@pytest.fixture(scope="module")
def hand_bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("hand") / NAME
    documents = pd.DataFrame(
        [
            {"doc_id": d, "source": s, "domain": m, "title": d, "n_pages": n, "url": "", "license": ""}
            for d, s, m, n in DOCUMENTS
        ]
    )
    pages = pd.DataFrame(
        [
            {
                "page_id": f"{d}-p{i}",
                "doc_id": d,
                "page_index": i,
                "image": None,
                "width": 2000,
                "height": 4000,
                "dom_text": f"page {i} of {d}",
                "ocr_text": "",
            }
            for d, _, _, n in DOCUMENTS
            for i in range(n)
        ]
    )
    source = {d: s for d, s, _, _ in DOCUMENTS}
    queries = pd.DataFrame(
        [
            {
                "query_id": q,
                "text": f"question {q}",
                "answer": "a",
                "evidence_structure": "page_single",
                "source": source[d],
                "domain": "-",
                "generator": "hand",
                "evidence_types": types,
            }
            for q, d, types in QUERIES
        ]
    )
    qrels = pd.DataFrame([{"query_id": q, "page_id": f"{d}-p0", "doc_id": d, "element_ids": []} for q, d, _ in QUERIES])
    elements = pd.DataFrame(
        {
            "doc_id": pd.Series(dtype=str),
            "element_id": pd.Series(dtype=str),
            "page_index": pd.Series(dtype="int32"),
            "bbox": pd.Series(dtype=object),
            "element_type": pd.Series(dtype=str),
        }
    )
    tables = {"documents": documents, "pages": pages, "elements": elements, "queries": queries, "qrels": qrels}
    return write_benchmark(root, tables, {"name": NAME, "rendered": False}).root


def hand_view(tmp_path, bench_root) -> ResultsView:
    view = ResultsView(tmp_path / "results", NAME)
    view.bench = locate_benchmark(NAME, view.benchmark_dir(), requested=bench_root)
    return view


def cells_by(table) -> dict[tuple, float]:
    return {
        (row[0], column): value
        for row, column, value in zip(table.cells["row"], table.cells["column"], table.cells["reproduced"], strict=True)
    }


# -- Table 1 ---------------------------------------------------------------------------------------
def test_table1_counts_documents_and_pages_per_source(spec, hand_bench, tmp_path):
    table = build_tables(spec, hand_view(tmp_path, hand_bench), ["table1_sources"])["table1_sources"]
    got = cells_by(table)
    for source, (documents, pages) in TABLE1.items():
        assert got[(source, "Docs")] == documents, source
        assert got[(source, "Avg. Pages")] == pytest.approx(pages), source
    published = dict(
        zip(zip(table.cells["row"].str[0], table.cells["column"], strict=True), table.cells["published"], strict=True)
    )
    assert published[("Total", "Docs")] == 29641 and published[("SEC Proxy", "Avg. Pages")] == 41.97
    assert table.n_rows_reproduced == 5 and f"the documents table of `{NAME}`" in table.reproduced_from
    checked = check_module.check_table(table)
    assert set(checked["check"]) == {"DIFF"}  # five documents are not the paper's 29,641
    assert set(check_module.check_table(table, tolerance=1e9)["check"]) == {"OK"}


def test_table1_without_the_benchmark_is_missing_and_says_why(spec, tmp_path, monkeypatch):
    monkeypatch.delenv("VLDOCIR_BENCHMARK", raising=False)
    view = ResultsView(tmp_path / "results", "vl-docir")
    paths = {"data_dir": str(tmp_path / "data"), "root_dir": str(REPO_ROOT)}
    view.bench = locate_benchmark("vl-docir", None, paths=paths, dataset_dir=REPO_ROOT / "conf" / "dataset")
    table = build_tables(spec, view, ["table1_sources"])["table1_sources"]
    assert table.cells["reproduced"].isna().all() and view.bench.dataset == "vldocir"
    status = set(table.cells["status"])
    assert len(status) == 1
    (why,) = status
    assert why.startswith("benchmark vl-docir not available here") and "conf/dataset/vldocir.yaml" in why


def test_locating_the_benchmark(hand_bench, tmp_path, monkeypatch):
    paths = {"data_dir": str(tmp_path / "data"), "root_dir": str(REPO_ROOT)}
    datasets = REPO_ROOT / "conf" / "dataset"
    # The dataset entry of that name (the mini's source is in the repository) ...
    mini = locate_benchmark("vl-docir-mini", None, paths=paths, dataset_dir=datasets)
    assert mini.root == MINI_DIR and mini.dataset == "mini" and "conf/dataset/mini.yaml" in mini.found
    # ... VLDOCIR_BENCHMARK for the full benchmark ...
    monkeypatch.setenv("VLDOCIR_BENCHMARK", str(hand_bench))
    assert locate_benchmark("vl-docir", None, paths=paths, dataset_dir=datasets).root == hand_bench
    # ... but the directory the runs recorded comes first, and an explicit benchmark_dir before that.
    assert locate_benchmark("vl-docir", MINI_DIR, paths=paths, dataset_dir=datasets).root == MINI_DIR
    assert locate_benchmark("vl-docir", MINI_DIR, requested=hand_bench).root == hand_bench
    unknown = locate_benchmark("nowhere", None, paths=paths, dataset_dir=datasets)
    assert unknown.root is None and "no conf/dataset entry is named so" in unknown.found
    with pytest.raises(ConfigError, match=r"benchmark_dir=.*: not a benchmark directory"):
        locate_benchmark("vl-docir", None, requested=tmp_path)


# -- Figure 7 --------------------------------------------------------------------------------------
def test_fig7_plots_the_evidence_type_combinations(spec, hand_bench, tmp_path):
    queries = load_benchmark(hand_bench).queries
    combinations, per_type = evidence_type_counts(queries)
    assert combinations.to_dict() == COMBINATIONS and list(combinations.index) == list(COMBINATIONS)
    assert per_type.to_dict() == PER_TYPE and list(per_type.index) == list(PER_TYPE)

    view = hand_view(tmp_path, hand_bench)
    figure, origin = fig7_evidence_types("fig7_evidence_types", spec.figures["fig7_evidence_types"], spec, view)
    assert origin.startswith(f"reproduced: queries table of {NAME} (6 queries)")
    axes = {ax.get_ylabel() or ax.get_xlabel(): ax for ax in figure.axes}
    heights = [bar.get_height() for bar in axes["Queries per combination"].patches]
    assert heights == list(COMBINATIONS.values())
    widths = [bar.get_width() for bar in axes["Queries per type"].patches]
    assert widths == list(PER_TYPE.values())
    labels = [t.get_text() for t in axes["Queries per type"].get_yticklabels()]
    assert labels == ["Text", "Table Row", "Image Caption", "Image"]  # the paper's names (labels.element_types)
    # The dot matrix: one black dot per type of each combination.
    matrix = axes["Evidence-type combination"]
    members = sum(len(label.split("+")) for label in COMBINATIONS)
    dark = sum(len(c.get_offsets()) for c in matrix.collections if tuple(c.get_facecolor()[0][:3]) == (0.0, 0.0, 0.0))
    assert dark == members

    made = render_figures(spec, view, tmp_path / "figures", ["fig7_evidence_types"])["fig7_evidence_types"]
    assert made.pdf.read_bytes()[:5] == b"%PDF-" and made.png.stat().st_size > 10_000


def test_fig7_without_the_benchmark_draws_the_published_combinations(spec, tmp_path):
    view = ResultsView(tmp_path / "results", "vl-docir")
    figure, origin = fig7_evidence_types("fig7_evidence_types", spec.figures["fig7_evidence_types"], spec, view)
    assert origin.startswith("published: the three commonest combinations")
    bars = next(ax for ax in figure.axes if ax.get_ylabel() == "Queries per combination")
    # facts.md: text only 90,248 queries; table row 40,955; image+text 28,932.
    assert [bar.get_height() for bar in bars.patches] == [90248, 40955, 28932]


# -- Table 12 --------------------------------------------------------------------------------------
AUDIT_COUNTS = {"page_single": 2, "page_multi": 1, "doc_adjacent": 1, "doc_near": 1, "doc_far": 1, "cross_doc": 2}


@pytest.fixture(scope="module")
def imported_audit(tmp_path_factory):
    """An audit of the shipped mini in ``<results>/audit/vl-docir-mini`` (where vldocir.apps.audit writes
    it): two PubMed Cross-Doc queries and one arXiv Page-Single query judged incorrect."""
    results = tmp_path_factory.mktemp("audit-results")
    out = results / "audit" / "vl-docir-mini"
    mini = load_benchmark(MINI_DIR)
    export_review(mini, out, AUDIT_COUNTS, seed=0)
    sheet = pd.read_csv(out / "sheet.csv", dtype=str, keep_default_na=False)
    cross = list(sheet.loc[(sheet["source"] == "pubmed") & (sheet["evidence_structure"] == "cross_doc"), "query_id"])
    single = list(sheet.loc[(sheet["source"] == "arxiv") & (sheet["evidence_structure"] == "page_single"), "query_id"])
    assert len(cross) == 2 and len(single) == 2
    wrong = {cross[0]: "E", cross[1]: "N", single[0]: "F"}
    sheet["verdict"] = ["incorrect" if q in wrong else "correct" for q in sheet["query_id"]]
    sheet["issue"] = [wrong.get(q, "") for q in sheet["query_id"]]
    sheet.to_csv(out / "filled.csv", index=False)
    import_review(mini, out, out / "filled.csv")
    return results


def test_table12_from_the_imported_audit(spec, imported_audit):
    view = ResultsView(imported_audit, "vl-docir-mini")
    table = build_tables(spec, view, ["table12_audit"])["table12_audit"]
    cells = {
        (row, column): (published, reproduced)
        for row, column, published, reproduced in zip(
            table.cells["row"], table.cells["column"], table.cells["published"], table.cells["reproduced"], strict=True
        )
    }
    assert len(table.rows) == 25 and table.n_rows_reproduced == 25
    n = sum(AUDIT_COUNTS.values()) * 4  # every stratum of the mini has enough queries
    assert cells[(("Total", None), "Correct")] == (746, n - 3)
    assert cells[(("Total", None), "Total")] == (800, n)
    for issue, count in {"F": 1, "E": 1, "U": 0, "N": 1}.items():
        assert cells[(("Total", None), issue)][1] == count, issue
    assert cells[(("PubMed", "Cross-Doc"), "Correct")] == (40, 0)
    assert cells[(("PubMed", "Cross-Doc"), "E")] == (10, 1)
    assert cells[(("arXiv", "Page-Single"), "Correct")] == (29, 1)
    assert cells[(("SEC", "Doc-Far"), "Total")] == (30, 1)

    # Accuracy and Wilson 95%: the paper's total as printed (93.25%, 91.3-94.8), ours against statsmodels.
    published = [cells[(("Total", None), c)][0] for c in ("Accuracy (%)", "Wilson 95% low", "Wilson 95% high")]
    assert [round(published[0], 2), round(published[1], 1), round(published[2], 1)] == [93.25, 91.3, 94.8]
    low, high = proportion_confint(n - 3, n, alpha=0.05, method="wilson")
    assert cells[(("Total", None), "Accuracy (%)")][1] == pytest.approx(100 * (n - 3) / n)
    assert cells[(("Total", None), "Wilson 95% low")][1] == pytest.approx(100 * low)
    assert cells[(("Total", None), "Wilson 95% high")][1] == pytest.approx(100 * high)
    low, high = proportion_confint(1, 2, alpha=0.05, method="wilson")
    assert cells[(("arXiv", "Page-Single"), "Wilson 95% low")][1] == pytest.approx(100 * low)
    assert cells[(("arXiv", "Page-Single"), "Wilson 95% high")][1] == pytest.approx(100 * high)
    # A stratum both judge fully correct has the same accuracy: OK there, DIFF on the counts.
    checked = check_module.check_table(table).set_index(["row", "column"])["check"]
    assert checked[(("Wikipedia", "Page-Multi"), "Accuracy (%)")] == "OK"
    assert checked[(("Wikipedia", "Page-Multi"), "Total")] == "DIFF"


def test_table12_without_an_audit_names_the_command(spec, tmp_path):
    table = build_tables(spec, ResultsView(tmp_path, "vl-docir"), ["table12_audit"])["table12_audit"]
    assert table.cells["reproduced"].isna().all()
    (why,) = set(table.cells["status"])
    assert f"no imported audit {tmp_path / 'audit' / 'vl-docir' / 'report.json'}" in why
    assert "python -m vldocir.apps.audit dataset=vldocir do=import" in why


# -- make check / make tables over the three ---------------------------------------------------------
def test_make_check_and_tables_cover_table1_fig7_and_table12(imported_audit, capsys):
    """``make check BENCHMARK=vl-docir-mini`` and ``make tables`` with no run in the store: Table 1 and
    Fig. 7 from the mini itself (found through conf/dataset/mini.yaml), Table 12 from its imported audit."""
    overrides = [
        f"paths.results_dir={imported_audit}",
        "benchmark=vl-docir-mini",
        "only=[table1_sources,table12_audit,fig7_evidence_types]",
    ]
    code = run(compose_report([*overrides, "do=[check]"]))
    out = capsys.readouterr().out
    assert code == 1  # the mini is not the paper's benchmark
    assert f"Benchmark tables (Table 1, Figs. 5-7): {MINI_DIR} (conf/dataset/mini.yaml)" in out
    mini = load_benchmark(MINI_DIR)
    documents = mini.documents
    wikipedia = documents[documents["source"] == "wikipedia"]
    assert re.search(rf"^DIFF +table1_sources +Wikipedia \| Docs +{len(wikipedia)} vs 11988 ", out, re.M)
    mean = f"{documents['n_pages'].mean():.2f}"
    assert re.search(rf"^DIFF +table1_sources +Total \| Avg\. Pages +{mean} vs 13\.11 ", out, re.M)
    n = sum(AUDIT_COUNTS.values()) * 4
    assert re.search(rf"^DIFF +table12_audit +Total \| Correct +{n - 3} vs 746 ", out, re.M)
    assert re.search(r"^OK +table12_audit +Wikipedia \| Page-Multi \| Accuracy \(%\) +100\.00 vs 100\.00 ", out, re.M)
    assert re.search(r"of 235 cells in 2 tables", out)  # 5 x 2 (Table 1) + 25 x 9 (Table 12)
    assert "MISSING" not in out.split("Summary:")[0]

    code = run(compose_report([*overrides, "do=[tables,figures]"]))
    out = capsys.readouterr().out
    assert code == 0
    table1 = (imported_audit / "tables" / "table1_sources.md").read_text()
    assert f"| Wikipedia | {len(wikipedia)} / 11988 (" in table1
    table12 = (imported_audit / "tables" / "table12_audit.md").read_text()
    assert f"| Total |  | {n - 3} / 746 ({n - 3 - 746}) | {n} / 800 ({n - 800}) |" in table12
    assert re.search(r"^  fig7_evidence_types +reproduced: queries table of vl-docir-mini \(142 queries\)", out, re.M)
    assert (imported_audit / "figures" / "fig7_evidence_types.png").is_file()
    assert (imported_audit / "figures" / "fig7_evidence_types.pdf").is_file()


def test_make_check_without_benchmark_or_audit_says_what_is_needed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLDOCIR_BENCHMARK", str(tmp_path / "absent"))
    code = run(compose_report([f"paths.results_dir={tmp_path}", "do=[check]", "only=[table1_sources,table12_audit]"]))
    out = capsys.readouterr().out
    assert code == 0  # missing cells alone do not fail
    block = out.split("Other inputs the MISSING cells need (2):\n")[1].split("\n\n")[0].splitlines()
    assert block[0].split()[0] == "table1_sources" and f"points to {tmp_path / 'absent'}" in block[0]
    assert block[1].split()[0] == "table12_audit" and "do=import" in block[1]
    assert "0 OK, 0 DIFF, 235 MISSING" in out


def test_a_damaged_audit_report_is_one_error_naming_the_file(spec, tmp_path):
    path = tmp_path / "audit" / "vl-docir" / "report.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"accuracy": {"overall": {"correct": 3}}}')
    with pytest.raises(AuditSheetError, match=rf"^{re.escape(str(path))}: not a report of .*do=import"):
        build_tables(spec, ResultsView(tmp_path, "vl-docir"), ["table12_audit"])
