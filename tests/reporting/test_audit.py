"""The query audit of App. A.7: Wilson interval against statsmodels and the paper, the stratified
sampler, export on the shipped mini (sheet + HTML with boxes), import of filled sheets, the census
on benchmarks with a broken box, a spanning element and a misplaced evidence page, and vldocir.apps.audit."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from helpers import MINI_DIR, REPO_ROOT, compose_cfg, mini_subset
from vldocir.data.benchmark import load_benchmark
from vldocir.reporting.audit import (
    SHEET_COLUMNS,
    AuditSheetError,
    census,
    export_review,
    import_review,
    sample_queries,
    wilson_interval,
)

PAPER_COUNTS = {"page_single": 30, "page_multi": 30, "doc_adjacent": 30, "doc_near": 30, "doc_far": 30, "cross_doc": 50}


# -- Wilson ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("successes", "n"), [(746, 800), (0, 10), (10, 10), (1, 1), (40, 50), (177, 200), (3, 7)])
def test_wilson_matches_statsmodels(successes, n):
    expected = proportion_confint(successes, n, alpha=0.05, method="wilson")
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-12)


def test_wilson_reproduces_the_papers_interval_and_edges():
    low, high = wilson_interval(746, 800)
    assert (round(100 * low, 1), round(100 * high, 1)) == (91.3, 94.8)
    assert wilson_interval(0, 20)[0] == 0.0 and 0 < wilson_interval(0, 20)[1] < 1
    assert wilson_interval(20, 20)[1] == 1.0 and 0 < wilson_interval(20, 20)[0] < 1
    assert wilson_interval(5, 10, 0.9) == pytest.approx(proportion_confint(5, 10, alpha=0.1, method="wilson"))
    with pytest.raises(ValueError, match="n > 0"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match=r"0\.\.n"):
        wilson_interval(11, 10)


def test_table12_rows_each_within_their_interval():
    table = pd.read_csv(REPO_ROOT / "results" / "paper" / "table12_audit.csv")
    rows = table[table["source"] != "Total"]
    assert rows["correct"].sum() == 746 and rows["total"].sum() == 800
    for row in rows.itertuples():
        assert wilson_interval(row.correct, row.total) == pytest.approx(
            proportion_confint(row.correct, row.total, method="wilson"), abs=1e-12
        )


# -- the sampler -------------------------------------------------------------------------------------
def synthetic_queries(per_stratum: dict[str, int]) -> pd.DataFrame:
    rows = [
        {"query_id": f"{source}-{structure}-{i:03d}", "source": source, "evidence_structure": structure}
        for source in ("arxiv", "pubmed", "sec", "wikipedia")
        for structure, n in per_stratum.items()
        for i in range(n)
    ]
    return pd.DataFrame(rows)


def test_sampler_takes_the_papers_counts_seeded_and_short_strata_whole():
    queries = synthetic_queries(
        {"page_single": 100, "page_multi": 100, "doc_adjacent": 100, "doc_near": 100, "doc_far": 12, "cross_doc": 300}
    )
    sample, strata = sample_queries(queries, PAPER_COUNTS, seed=0)
    sizes = sample.groupby(["source", "evidence_structure"]).size()
    assert sizes[("sec", "cross_doc")] == 50 and sizes[("arxiv", "page_single")] == 30
    assert sizes[("wikipedia", "doc_far")] == 12  # short: all taken
    assert len(sample) == 4 * (4 * 30 + 12 + 50) == sample["query_id"].nunique()
    short = [(s.source, s.evidence_structure) for s in strata if s.short]
    assert short == [(source, "doc_far") for source in ("arxiv", "pubmed", "sec", "wikipedia")]
    again, _ = sample_queries(queries.sample(frac=1, random_state=3), PAPER_COUNTS, seed=0)
    assert list(again["query_id"]) == list(sample["query_id"])  # input order does not matter
    other, _ = sample_queries(queries, PAPER_COUNTS, seed=1)
    assert set(other["query_id"]) != set(sample["query_id"])
    # one stratum's count changes nothing else
    fewer, _ = sample_queries(queries, {**PAPER_COUNTS, "cross_doc": 10}, seed=0)
    keep = sample["evidence_structure"] != "cross_doc"
    assert list(fewer.loc[fewer["evidence_structure"] != "cross_doc", "query_id"]) == list(sample.loc[keep, "query_id"])


def test_sampler_errors():
    queries = synthetic_queries({"page_single": 5, "cross_doc": 5})
    with pytest.raises(ValueError, match="unknown evidence structures"):
        sample_queries(queries, {"page_single": 1, "cross_doc": 1, "crossdoc": 1}, 0)
    with pytest.raises(ValueError, match="no count given"):
        sample_queries(queries, {"page_single": 1}, 0)
    sample, _ = sample_queries(queries, {"page_single": 0, "cross_doc": 2}, 0)
    assert set(sample["evidence_structure"]) == {"cross_doc"}


# -- export and import on the mini -------------------------------------------------------------------
@pytest.fixture(scope="module")
def mini():
    return load_benchmark(MINI_DIR)


@pytest.fixture(scope="module")
def exported(mini, tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    counts = dict.fromkeys(PAPER_COUNTS, 3)
    return out, export_review(mini, out, counts, seed=0)


def test_export_writes_the_sheet_and_an_offline_page_with_boxes(mini, exported):
    out, record = exported
    sheet = pd.read_csv(out / "sheet.csv", dtype=str, keep_default_na=False)
    assert list(sheet.columns) == SHEET_COLUMNS and len(sheet) == 4 * 6 * 3 == len(record["query_ids"])
    assert (sheet["verdict"] == "").all() and (sheet["comment"] == "").all()
    queries = mini.queries.set_index("query_id")
    assert list(sheet["question"]) == list(queries.loc[sheet["query_id"], "text"])
    qrels = mini.qrels
    page = (out / "review" / "index.html").read_text()
    assert "http://" not in page and "https://" not in page  # offline: no remote resources
    elements = mini.elements.set_index(["doc_id", "element_id"])
    pages = mini.pages.set_index("page_id")
    for query_id in sheet["query_id"]:
        section = re.search(rf'<section class="audit-query" id="{query_id}">(.*?)</section>', page, re.S).group(1)
        rows = qrels[qrels["query_id"] == query_id]
        images = re.findall(r'<img src="([^"]+)"', section)
        assert len(images) == len(rows) and all((out / "review" / src).is_file() for src in images)
        # one box per cited element lying on its stored page
        expected = sum(
            int(elements.loc[(r.doc_id, e), "page_index"] == pages.loc[r.page_id, "page_index"])
            for r in rows.itertuples()
            for e in r.element_ids
        )
        assert section.count('class="bbox"') == expected > 0
    assert all(
        page_id.split(" ")[0] in set(qrels["page_id"])
        for cell in sheet["evidence_pages"]
        for page_id in cell.split("; ")
    )


def fill(out, verdicts: dict[str, str] | None = None, default="correct", issues: dict[str, str] | None = None):
    sheet = pd.read_csv(out / "sheet.csv", dtype=str, keep_default_na=False)
    sheet["verdict"] = [(verdicts or {}).get(q, default) for q in sheet["query_id"]]
    sheet["issue"] = [(issues or {}).get(q, "") for q in sheet["query_id"]]
    path = out / "filled.csv"
    sheet.to_csv(path, index=False)
    return path, sheet


def test_import_all_correct(mini, exported):
    out, _record = exported
    path, _ = fill(out)
    result = import_review(mini, out, path)
    overall = result["accuracy"]["overall"]
    assert overall["correct"] == overall["total"] == 72 and overall["accuracy"] == 1.0
    assert (overall["wilson_low"], overall["wilson_high"]) == pytest.approx(proportion_confint(72, 72, method="wilson"))
    assert len(result["accuracy"]["strata"]) == 24
    assert (out / "report.json").is_file() and "| **Total** | 72/72 | 100.0 |" in (out / "report.md").read_text()
    assert "Bounding-box census" in (out / "report.md").read_text()


def test_import_some_incorrect(mini, exported):
    out, _record = exported
    sheet = pd.read_csv(out / "sheet.csv", dtype=str, keep_default_na=False)
    cross = list(sheet.loc[(sheet["evidence_structure"] == "cross_doc") & (sheet["source"] == "pubmed"), "query_id"])
    single = list(sheet.loc[sheet["evidence_structure"] == "page_single", "query_id"])[:1]
    wrong = cross[:2] + single
    path, _ = fill(out, dict.fromkeys(wrong, "Incorrect "), issues={cross[0]: "e", single[0]: "F"})
    acc = import_review(mini, out, path)["accuracy"]
    assert (acc["overall"]["correct"], acc["overall"]["total"]) == (69, 72)
    assert (acc["overall"]["wilson_low"], acc["overall"]["wilson_high"]) == pytest.approx(
        proportion_confint(69, 72, method="wilson")
    )
    stratum = next(c for c in acc["strata"] if (c["source"], c["evidence_structure"]) == ("pubmed", "cross_doc"))
    assert (stratum["correct"], stratum["total"]) == (1, 3) and stratum["accuracy"] == pytest.approx(1 / 3)
    assert (stratum["wilson_low"], stratum["wilson_high"]) == pytest.approx(proportion_confint(1, 3, method="wilson"))
    assert stratum["issues"] == {"F": 0, "E": 1, "U": 0, "N": 0}
    structure = next(c for c in acc["structures"] if c["evidence_structure"] == "cross_doc")
    assert (structure["correct"], structure["total"]) == (10, 12)
    assert acc["overall"]["issues"] == {"F": 1, "E": 1, "U": 0, "N": 0}


def test_import_names_the_bad_rows(mini, exported):
    out, _record = exported
    path, sheet = fill(out)
    sheet.loc[4, "verdict"] = "maybe"
    sheet.loc[7, "verdict"] = ""
    sheet.loc[9, "issue"] = "E"  # on a correct verdict
    extra = sheet.iloc[[0]].assign(query_id="q9999999")
    pd.concat([sheet, extra]).to_csv(path, index=False)
    with pytest.raises(AuditSheetError) as error:
        import_review(mini, out, path)
    message = str(error.value)
    assert f"line 6 (query_id {sheet.loc[4, 'query_id']}): verdict 'maybe' is not correct or incorrect" in message
    assert f"line 9 (query_id {sheet.loc[7, 'query_id']}): verdict missing" in message
    assert "line 11" in message and "issue E given for a correct verdict" in message
    assert "line 74 (query_id q9999999): query id not in the audit sample" in message
    sheet.iloc[1:].to_csv(path, index=False)
    with pytest.raises(AuditSheetError, match=f"1 sampled queries have no row: {sheet.loc[0, 'query_id']}"):
        import_review(mini, out, path)


# -- the census --------------------------------------------------------------------------------------
def test_census_finds_a_broken_box_a_spanning_element_and_a_wrong_page(tmp_path):
    root = mini_subset(tmp_path / "src", ["arxiv-00003", "pubmed-00000", "wikipedia-00001"])
    bench = load_benchmark(root)
    tables = {name: bench.table(name).copy() for name in ("documents", "pages", "elements", "queries", "qrels")}
    qrels, elements, pages = tables["qrels"], tables["elements"], tables["pages"]
    clean = census(bench)
    assert clean["overall"]["consistent"] == clean["overall"]["queries"] == len(tables["queries"])

    # three one-page queries citing elements no other query cites
    cites = qrels.explode("element_ids")
    shared = cites.duplicated(["doc_id", "element_ids"], keep=False)
    alone = set(cites.loc[shared, "query_id"])
    q_box, q_span, q_page = sorted(q for q, g in qrels.groupby("query_id") if len(g) == 1 and q not in alone)[:3]

    def cited(query_id):
        row = qrels[qrels["query_id"] == query_id].iloc[0]
        return (elements["doc_id"] == row.doc_id) & (elements["element_id"] == row.element_ids[0])

    width = float(pages.loc[pages["doc_id"] == qrels.loc[qrels.query_id == q_box, "doc_id"].iloc[0], "width"].iloc[0])
    box = cited(q_box)
    elements.loc[box, "bbox"] = pd.Series(
        [np.array([10.0, 10.0, width + 50.0, 60.0], dtype=np.float32)], index=elements.index[box]
    )
    elements.loc[cited(q_span), "spans_pages"] = True
    # q_page's qrel names another page of the same document than the one its element lies on
    row = qrels[qrels["query_id"] == q_page].iloc[0]
    element_page = int(elements.loc[cited(q_page), "page_index"].iloc[0])
    other = pages[(pages["doc_id"] == row.doc_id) & (pages["page_index"] != element_page)]["page_id"].iloc[0]
    qrels.loc[qrels["query_id"] == q_page, "page_id"] = other
    from vldocir.data.benchmark import write_benchmark

    broken = write_benchmark(tmp_path / "broken", tables, {"name": "broken", "version": "test"})
    result = census(broken)
    overall = result["overall"]
    assert (overall["out_of_range"], overall["spanning"], overall["page_mismatch"], overall["missing"]) == (1, 1, 1, 0)
    assert overall["consistent"] == overall["queries"] - 3
    moved = len(row.element_ids)  # every element q_page cites lies on its old page
    assert result["elements"] == {"spanning": 1, "out_of_range": 1, "page_mismatch": moved, "missing": 0}
    found = {(ex["check"], ex["query_id"]) for ex in result["examples"]}
    assert found == {("out_of_range", q_box), ("spanning", q_span), ("page_mismatch", q_page)}
    example = next(ex for ex in result["examples"] if ex["check"] == "page_mismatch")
    assert example["stored_page_id"] == other and example["element_page_id"] != other
    only = census(broken, structures=["cross_doc"])
    assert only["overall"]["queries"] == int((tables["queries"]["evidence_structure"] == "cross_doc").sum())


def test_census_says_when_spans_are_not_recorded(small_bench):
    result = census(small_bench)
    assert result["spans_recorded"] is False and result["overall"]["spanning"] is None


# -- the command -------------------------------------------------------------------------------------
def test_audit_config_composes():
    cfg = compose_cfg(config_dir=REPO_ROOT / "conf")  # run.py's config still composes (shared groups)
    assert cfg.dataset.name == "vl-docir-mini"
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        audit = compose(config_name="audit", overrides=["do=import"], return_hydra_config=True)
    HydraConfig.instance().set_config(audit)
    assert dict(audit.counts) == PAPER_COUNTS and audit.do == "import"
    assert audit.sheet == f"{audit.out_dir}/sheet.csv" and audit.out_dir.endswith("/audit/vl-docir-mini")


@pytest.mark.slow
def test_audit_py_export_then_import(tmp_path, isolated_paths):
    import os
    import subprocess
    import sys

    def audit(*args):
        return subprocess.run(
            [sys.executable, "-m", "vldocir.apps.audit", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "HYDRA_FULL_ERROR": "1"},
            timeout=300,
        )

    done = audit(
        "counts.page_single=2",
        "counts.page_multi=2",
        "counts.doc_adjacent=2",
        "counts.doc_near=2",
        "counts.doc_far=2",
        "counts.cross_doc=2",
    )
    assert done.returncode == 0, done.stderr
    out = isolated_paths / "results" / "audit" / "vl-docir-mini"
    assert "sampled 48 queries" in done.stdout and (out / "review" / "index.html").is_file()
    failed = audit("do=import")
    assert failed.returncode == 2 and "line 2 (query_id" in failed.stderr and "Traceback" not in failed.stderr
    fill(out)
    done = audit("do=import", f"sheet={out / 'filled.csv'}")
    assert done.returncode == 0, done.stderr
    assert "| **Total** | 48/48 | 100.0 |" in done.stdout and (out / "report.md").is_file()
