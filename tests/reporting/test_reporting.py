"""Paper tables: published numbers, the row -> run manifest, reproduced cells, marks, the check.

The acceptance test of the issue is ``test_table13_recomputed_from_tables_16_and_2``: the Macro and
Micro RecallAll@5 of Table 13 for Table 16's nine models, recomputed from Table 16's source x
structure cells and Table 2's query counts with the harness's own aggregation code.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from helpers import newest_entry
from report_stores import MANIFEST, PAPER_DIR, REPO_ROOT, TEXT_BENCH
from vldocir import store
from vldocir.evaluation.aggregate import balanced_by, summarise
from vldocir.evaluation.metrics import metric_columns
from vldocir.queries.cleaning import false_omission_rate
from vldocir.reporting import check as check_module
from vldocir.reporting.formats import ranks, to_latex, to_markdown
from vldocir.reporting.paper import load_spec, metric_label
from vldocir.reporting.report_tasks import compose_report, run
from vldocir.reporting.store_view import ResultsView, StoredRun, choose_benchmark
from vldocir.reporting.tables import LAYOUTS, build_tables


@pytest.fixture(scope="module")
def spec():
    return load_spec(MANIFEST, PAPER_DIR)


@pytest.fixture(scope="module")
def empty_results(tmp_path_factory):
    return tmp_path_factory.mktemp("empty-results")


@pytest.fixture(scope="module")
def published_tables(spec, empty_results):
    return build_tables(spec, ResultsView(empty_results, spec.benchmark))


@pytest.fixture(scope="module")
def mini_tables(spec, mini_results):
    return build_tables(spec, ResultsView(mini_results, TEXT_BENCH))


@pytest.fixture(scope="module")
def multi_tables(spec, multi_results):
    return build_tables(spec, ResultsView(multi_results, TEXT_BENCH))


def cell(table, row, column):
    cells = table.cells
    hit = cells[(cells["row"] == tuple(row)) & (cells["column"] == column)]
    assert len(hit) == 1, f"{table.name}: no single cell {row} / {column}"
    return hit.iloc[0]


# -- the published numbers in the repository --------------------------------------------------------


def test_paper_copy_is_complete_and_unchanged(spec):
    """results/paper holds every CSV with the checksum recorded when it was copied, each one a table or
    figure of conf/paper_tables.yaml renders, and the README says where each comes from."""
    sums = dict(line.split("  ")[::-1] for line in (PAPER_DIR / "SHA256SUMS").read_text().splitlines() if line)
    csvs = sorted(p.name for p in PAPER_DIR.glob("*.csv"))
    assert sorted(n for n in sums if n.endswith(".csv")) == csvs
    used = {entry["csv"] for entry in (*spec.tables.values(), *spec.figures.values()) if entry.get("csv")}
    assert used == set(csvs), "a published CSV that no report reads, or a report whose CSV is not in results/paper"
    for name, digest in sums.items():
        assert hashlib.sha256((PAPER_DIR / name).read_bytes()).hexdigest() == digest, name
    readme = (PAPER_DIR / "README.md").read_text()
    for name in csvs:
        assert f"`{name}`" in readme, f"README.md does not describe {name}"


def test_table13_recomputed_from_tables_16_and_2(spec):
    """Macro / Micro RecallAll@5 of Table 13 from Table 16 (source x structure RecallAll@5) and
    Table 2 (queries per source x structure), with the harness's aggregation code on a per-query
    frame in which each (source, structure) cell has as many rows as Table 2 gives it queries.

    Macro is :func:`balanced_by` over one group holding every query (Eq. 7 is Eq. 9 with g = all),
    one column per model; :func:`summarise` itself is run for the ensemble, to show it agrees."""
    t16 = spec.csv("table16_source_structure_recallall5.csv")
    t2 = spec.csv("table2_queries.csv")
    t2 = t2[t2["evidence_structure"] != "Total"]
    t13 = spec.csv("table13_overall.csv").set_index(["model", "aggregate"])
    table16_rows = spec.tables["table16_source_structure_recallall5"]["rows"]
    table13_rows = spec.tables["table13_overall"]["rows"]

    cells = [
        (spec.source_id(source), spec.structure_id(label), int(n))
        for label, row in zip(t2["evidence_structure"], t2.to_dict("records"), strict=True)
        for source, n in row.items()
        if source not in ("evidence_structure", "total")
    ]
    counts = [n for *_, n in cells]
    per_query = pd.DataFrame(
        {
            "evidence_structure": np.repeat([structure for _, structure, _ in cells], counts),
            "source": np.repeat([source for source, _, _ in cells], counts),
        }
    )
    assert len(per_query) == 271_760
    models = list(dict.fromkeys(t16["model"]))
    for model in models:  # each query gets its cell's RecallAll@5 (as a fraction, like per_query.parquet)
        value = {
            (spec.source_id(r["source"]), s): r[s] / 100
            for r in t16[t16["model"] == model].to_dict("records")
            for s in spec.structures
        }
        per_query[model] = np.repeat([value[(source, structure)] for source, structure, _ in cells], counts)

    macro, empty = balanced_by(per_query.assign(everything="all"), "everything", models)
    assert not empty and int(macro.loc["all", "n_structures"]) == 6
    micro = per_query[models].mean() * 100

    checked = 0
    for model in models:
        # Table 16's "ColNomic (Normal&Ctx&Rank)" is Table 13's "ColNomic (Ensemble)": the same run.
        same_run = [label for label, entry in table13_rows.items() if entry == table16_rows[model]]
        assert len(same_run) == 1, model
        for aggregate, value in (("Macro", macro.loc["all", model]), ("Micro", micro[model])):
            assert value == pytest.approx(t13.loc[(same_run[0], aggregate), "recallall@5"], abs=0.05), (
                model,
                aggregate,
            )
            checked += 1
    assert checked == 18

    # The same numbers through summarise, the function that writes metrics.json.
    ensemble = per_query[["evidence_structure", "source"]].assign(
        domain="-",
        evidence_type="-",
        generator="-",
        in_run=True,
        n_evidence_pages=1,
        n_evidence_docs=1,
        **{"pages_found@5": 1, "docs_found@5": 1},
        **dict.fromkeys(metric_columns([5]), 0.0),
    )
    ensemble["recallall@5"] = per_query["ColNomic (Normal&Ctx&Rank)"]
    aggregates = summarise(ensemble, [5])["aggregates"]
    assert aggregates["macro"]["recallall@5"] == pytest.approx(macro.loc["all", "ColNomic (Normal&Ctx&Rank)"])
    assert aggregates["micro"]["recallall@5"] == pytest.approx(micro["ColNomic (Normal&Ctx&Rank)"])
    assert aggregates["macro"]["recallall@5"] == pytest.approx(70.04, abs=0.05)


def test_published_figures_agree_with_the_tables(spec):
    """Fig. 2 is the best of Table 16 per cell; Table 5 is Table 16's ensemble averaged over sources."""
    t16 = spec.csv("table16_source_structure_recallall5.csv")
    t16["source"] = t16["source"].map(spec.source_id)
    best = t16.groupby("source")[spec.structures].max()
    fig2 = spec.csv("fig2_source_structure_recallall5.csv")
    fig2["source"] = fig2["source"].map(spec.source_id)
    pd.testing.assert_frame_equal(fig2.set_index("source").sort_index(), best.sort_index(), check_names=False)

    ensemble = t16[t16["model"] == "ColNomic (Normal&Ctx&Rank)"][spec.structures].mean()
    t5 = spec.csv("table5_structure.csv")
    for label, value in zip(t5["evidence_structure"], t5["recallall@5"], strict=True):
        assert ensemble[spec.structure_id(label)] == pytest.approx(value, abs=0.051)


def test_false_omission_rate_reproduces_every_printed_for(spec):
    for record in spec.csv("cleaning_confusion.csv").to_dict("records"):
        assert false_omission_rate(record) == pytest.approx(record["reported_for"], abs=5e-5), record["method"]


# -- tables from the published numbers alone ---------------------------------------------------------


def test_without_runs_every_table_renders_and_every_cell_is_missing(spec, published_tables):
    assert list(published_tables) == list(spec.tables)
    for name, table in published_tables.items():
        csv = spec.csv(spec.tables[name]["csv"])
        assert table.cells["reproduced"].isna().all(), name
        assert table.cells["published"].notna().sum() > 0, name
        checked = check_module.check_table(table)
        assert set(checked["check"]) == {"MISSING"}, name
        markdown = to_markdown(table)
        assert "missing / " in markdown and " / 0.00" not in markdown.replace("missing / 0.00", "")
        if "model" in csv.columns and name != "table4_settings":
            assert len(table.rows) == len(csv), name
    # Every printed number of the published tables is a cell.
    t13 = published_tables["table13_overall"]
    printed = spec.csv("table13_overall.csv")
    assert len(t13.cells) == len(printed) * len([c for c in printed.columns if "@" in c]) == 50 * 12
    assert len(published_tables["table4_settings"].cells) == 30 * 2
    assert published_tables["table4_settings"].cells["published"].isna().sum() == 8  # Q-Split, ColPali and ColNomic


def test_published_marks_follow_the_paper(published_tables):
    t13 = published_tables["table13_overall"]
    md = to_markdown(t13)
    macro_rows = [line for line in md.splitlines() if line.startswith("| ColNomic (Ensemble) | Macro")]
    assert "missing / **80.64**" in macro_rows[0]  # best Macro RecallAll@10
    assert "missing / <ins>79.60</ins>" in md  # ColNomic (B+Ctx), second
    assert "missing / *78.67*" in md  # Ctx + OCR-BM25 (RRF), third
    # Table 16 ranks within each source; Table 14 marks only the best (bold).
    t16 = published_tables["table16_source_structure_recallall5"]
    r = ranks(t16.cells, "published")
    best = t16.cells[r == 1]
    assert ("Wikipedia", "ColQwen2.5 (Rerank)") in set(best[best["column"] == "Cross-Doc"]["row"])
    t14 = to_markdown(published_tables["table14_source_macro"])
    assert "**80.85**" in t14 and "<ins>" not in t14


def test_latex_tables_are_well_formed(published_tables):
    for name, table in published_tables.items():
        tex = to_latex(table)
        assert tex.count(r"\begin{") == tex.count(r"\end{"), name
        for env in ("table", "tabular"):
            assert tex.count(rf"\begin{{{env}}}") == tex.count(rf"\end{{{env}}}") == 1, name
        n_columns = len(re.search(r"\\begin\{tabular\}\{([lr]+)\}", tex).group(1))
        body = tex.split(r"\toprule")[1].split(r"\bottomrule")[0]
        rows = [line for line in body.splitlines() if line.endswith(r"\\")]
        assert len(rows) == len(table.rows) + 1, name
        for line in rows:
            assert len(re.findall(r"(?<!\\)&", line)) == n_columns - 1, f"{name}: {line}"
        assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}"), name


@pytest.mark.slow  # starts pdflatex; the structural checks above are the fallback without it
@pytest.mark.skipif(
    shutil.which("pdflatex") is None, reason="needs pdflatex (scripts/setup.sh installs texlive-latex-recommended)"
)
def test_latex_tables_compile(published_tables, tmp_path):
    pdflatex = shutil.which("pdflatex")
    body = "\n".join(rf"\input{{{name}.tex}}\clearpage" for name in published_tables)
    for name, table in published_tables.items():
        (tmp_path / f"{name}.tex").write_text(to_latex(table))
    (tmp_path / "all.tex").write_text(
        "\\documentclass{article}\n\\usepackage[landscape,margin=1cm]{geometry}\n\\usepackage{booktabs,graphicx,xcolor}\n"
        f"\\begin{{document}}\n{body}\n\\end{{document}}\n"
    )
    done = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "all.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]


# -- tables with the mini benchmark's run ------------------------------------------------------------


def test_mini_run_fills_its_rows(spec, mini_results, mini_tables):
    run = StoredRun(newest_entry(mini_results, TEXT_BENCH, "dom_bm25", "base"), TEXT_BENCH, "dom_bm25", "base")
    metrics = json.loads((run.path / "metrics.json").read_text())
    t13 = mini_tables["table13_overall"]
    for aggregate, name in (("Macro", "macro"), ("Micro", "micro")):
        for metric, value in metrics["aggregates"][name].items():
            c = cell(t13, ("DOM-BM25", aggregate), metric_label(metric))
            assert c["reproduced"] == pytest.approx(value)
            assert c["run"] == str(run.path)
    assert t13.n_rows_reproduced == 2
    others = t13.cells[t13.cells["row"].map(lambda r: r[0] != "DOM-BM25")]
    assert others["reproduced"].isna().all(), "rows without a run must be missing, never zero"
    assert f"no run {TEXT_BENCH}/colnomic7b/base" in set(others["status"].str.split(" \\(").str[0])

    # Table 15: domain Macro; Table 19/20: Macro and Micro over one generator's queries.
    assert cell(mini_tables["table15_domain_macro"], ("DOM-BM25",), "RecallAll@10")["reproduced"] == pytest.approx(
        metrics["aggregates"]["domain_macro"]["recallall@10"]
    )
    per_query = pd.read_parquet(run.path / "per_query.parquet")
    for table, generator in (("table19_gpt41mini", "GPT-4.1-mini"), ("table20_qwen3vl", "Qwen3-VL-32B-Instruct")):
        expected = summarise(per_query[per_query["generator"] == generator], metrics["ks"])["aggregates"]
        for aggregate, name in (("Macro", "macro"), ("Micro", "micro")):
            assert cell(mini_tables[table], ("DOM-BM25", aggregate), "RecallAll@5")["reproduced"] == pytest.approx(
                expected[name]["recallall@5"]
            )

    # Count tables come from any run's per-query rows.
    t2 = mini_tables["table2_queries"]
    assert cell(t2, ("Total",), "Total")["reproduced"] == len(per_query) == 288
    assert (
        cell(t2, ("Cross-Doc",), "SEC")["reproduced"]
        == ((per_query.source == "sec") & (per_query.evidence_structure == "cross_doc")).sum()
    )
    t11 = mini_tables["table11_domain_structure"]
    assert cell(t11, ("Total",), "Total")["reproduced"] == 288
    md = to_markdown(t13)
    assert re.search(r"\| DOM-BM25 \| Macro \| [0-9.]+ / 47\.81 \([+-][0-9.]+\)", md)


def test_multi_runs_fill_source_structure_and_marks(spec, multi_results, multi_tables):
    t16 = multi_tables["table16_source_structure_recallall5"]
    run = StoredRun(
        newest_entry(multi_results, TEXT_BENCH, "colqwen25", "ctx-n256"), TEXT_BENCH, "colqwen25", "ctx-n256"
    )
    metrics = json.loads((run.path / "metrics.json").read_text())
    value = metrics["breakdowns"]["source_structure"]["sec"]["cross_doc"]["recallall@5"]
    assert cell(t16, ("SEC Proxy Reports", "ColQwen2.5 (Ctx)"), "Cross-Doc")["reproduced"] == pytest.approx(value)
    # Table 5 (ensemble) has no run; Table 18's reduced rows look for another benchmark.
    assert multi_tables["table5_structure"].cells["reproduced"].isna().all()
    t18 = multi_tables["table18_reduced"]
    assert cell(t18, ("Page-Single", "ColQwen"), "SEC")["reproduced"] == pytest.approx(
        metrics_of(multi_results, "colqwen25", "base")["breakdowns"]["source_structure"]["sec"]["page_single"][
            "recallall@5"
        ]
    )
    assert f"{TEXT_BENCH}-reduced/colqwen25/base" in cell(t18, ("Page-Single", "ColQwen Reduced"), "SEC")["status"]

    # Marks among reproduced values: ranks within each column (and aggregate), ties share a rank.
    t13 = multi_tables["table13_overall"]
    r = ranks(t13.cells, "reproduced")
    for _, group in t13.cells.assign(rank=r).groupby([t13.cells["row"].str[1], "column"]):
        values = group.dropna(subset=["reproduced"])
        assert len(values) == 4  # DOM-BM25, OCR-BM25, ColQwen2.5, ColQwen2.5 (Ctx)
        rounded = values["reproduced"].round(2)
        assert (values["rank"] == rounded.rank(ascending=False, method="min")).all()
    md = to_markdown(t13)
    assert md.count("**") // 2 >= 24  # a best reproduced and a best published value per column and aggregate


def metrics_of(results, retriever, setting):
    return json.loads((newest_entry(results, TEXT_BENCH, retriever, setting) / "metrics.json").read_text())


def test_evidence_type_groups_use_the_harness_balancing(spec, multi_tables, multi_results):
    t17 = multi_tables["table17_evidence_type"]
    per_query = pd.read_parquet(newest_entry(multi_results, TEXT_BENCH, "colqwen25", "base") / "per_query.parquet")
    text = per_query[per_query["evidence_type"] == "text"]
    expected = text.groupby("evidence_structure")["recallall@5"].mean().mean() * 100
    assert cell(t17, ("Text", "ColQwen2.5"), "RecallAll@5")["reproduced"] == pytest.approx(expected)
    image = per_query[per_query["evidence_type"].isin(["image", "image+text"])]
    expected = image.groupby("evidence_structure")["recallall@5"].mean().mean() * 100
    assert cell(t17, ("Image", "ColQwen2.5"), "RecallAll@5")["reproduced"] == pytest.approx(expected)


def test_cleaning_tables_read_reproduced_confusion_matrices(spec, tmp_path):
    counts = {
        "actual_removed_pred_removed": 305,
        "actual_removed_pred_kept": 135,
        "actual_kept_pred_removed": 140,
        "actual_kept_pred_kept": 860,
    }
    (tmp_path / "cleaning").mkdir()
    (tmp_path / "cleaning" / "llm_combined.json").write_text(json.dumps(counts))
    tables = build_tables(spec, ResultsView(tmp_path, spec.benchmark), ["table8_llm_combined", "table10_knn"])
    checked = check_module.check_table(tables["table8_llm_combined"]).set_index("column")["check"]
    assert checked["P as P"] == "OK" and checked["N as N"] == "DIFF" and checked["Total"] == "DIFF"
    assert checked["FOR"] == "DIFF"  # 135 / (135 + 860) = 0.1357 vs 0.1360
    assert set(check_module.check_table(tables["table10_knn"])["check"]) == {"MISSING"}


# -- choosing the benchmark, the check and the command line ---------------------------------------------


def test_choose_benchmark(spec, empty_results, mini_results, multi_results, tmp_path):
    assert choose_benchmark(empty_results, spec) == ("vl-docir", None)
    name, note = choose_benchmark(mini_results, spec)
    assert name == TEXT_BENCH and "no runs of the paper's benchmark vl-docir" in note
    assert choose_benchmark(mini_results, spec, "other") == (
        "other",
        "the cells made from runs are runs on other, not on the paper's vl-docir",
    )
    shutil.copytree(mini_results / "runs" / TEXT_BENCH, tmp_path / "runs" / "vl-docir")
    for path in (tmp_path / "runs" / "vl-docir").glob(f"*/*/*/{store.MANIFEST_FILE}"):  # filed as vl-docir runs
        manifest = json.loads(path.read_text())
        manifest["store"]["place"][0] = "vl-docir"
        path.write_text(json.dumps(store.seal_manifest(manifest)))
    shutil.copytree(multi_results / "runs" / TEXT_BENCH, tmp_path / "runs" / TEXT_BENCH)
    assert choose_benchmark(tmp_path, spec) == ("vl-docir", None)


def test_cell_status():
    assert check_module.cell_status(48.37, 48.40, 0.05) == "OK"
    assert check_module.cell_status(48.37, 48.43, 0.05) == "DIFF"
    assert check_module.cell_status(48.37, math.nan, 0.05) == "MISSING"
    assert check_module.cell_status(math.nan, 48.0, 0.05) == "UNPUBLISHED"
    assert check_module.cell_status(86196, 86196, 0) == "OK"


def test_check_without_runs_reports_every_cell_missing(spec, empty_results, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLDOCIR_BENCHMARK", str(tmp_path / "absent"))  # no benchmark either (Table 1)
    code = run(compose_report([f"paths.results_dir={empty_results}", "do=[check]"]))
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if re.match(r"^(OK|DIFF|MISSING|UNPUBLISHED) ", line)]
    assert lines and all(line.startswith("MISSING ") for line in lines)
    total = int(re.search(rf"of (\d+) cells in {len(spec.tables)} tables", out).group(1))
    assert len(lines) == total and f"0 OK, 0 DIFF, {total} MISSING" in out
    assert "python run.py dataset=vldocir retriever=colnomic7b setting=ctx n_ctx=512" in out


def test_check_with_the_mini_run(mini_results, mini_tables, capsys):
    code = run(compose_report([f"paths.results_dir={mini_results}", "do=[check]", "quiet=true"]))
    out = capsys.readouterr().out
    assert code == 1, "the mini benchmark is not the paper's: its cells differ"
    assert "Note: the store has no runs of the paper's benchmark vl-docir" in out
    assert re.search(r"^DIFF +table13_overall +DOM-BM25 \| Macro \| nDCG@3 ", out, re.M)
    assert re.search(r"^MISSING +table13_overall +ColNomic \| Macro ", out, re.M)
    assert not re.search(r"^OK ", out, re.M), "quiet=true leaves out the OK cells"
    # One tolerance for every cell (tolerance=): a loose one turns every reproduced cell into OK.
    checked = check_module.check(mini_tables, tolerance=1e9)
    assert set(checked["check"]) == {"OK", "MISSING"}
    assert (checked["check"] == "OK").sum() == checked["reproduced"].notna().sum()


def _printed_command(line: str) -> tuple[str, list[str]]:
    """(store path, run.py overrides) of a line of ``Runs that would fill the MISSING cells``."""
    path, rest = line.split(maxsplit=1)
    return path, rest.split("python run.py ", 1)[1].split("   # ", 1)[0].split()


@pytest.mark.parametrize(("benchmark", "dataset"), [("vl-docir-mini", "mini"), ("vl-docir", "vldocir")])
def test_missing_run_commands_run_as_printed_on_the_benchmark_of_their_row(spec, empty_results, benchmark, dataset):
    """Each printed command composes with the real config into the run its row names: the
    benchmark's own dataset (the mini's for a store of mini runs), its reduced corpus for Table 18's
    Reduced rows, the row's retriever and setting ids."""
    from helpers import compose_cfg

    lines = check_module.missing_commands(spec, ResultsView(empty_results, benchmark), spec.tables)
    commands = dict(_printed_command(line) for line in lines)
    assert f"{benchmark}-reduced/colqwen25/base" in commands and f"{benchmark}/colnomic7b/ctx-n512" in commands
    assert f"dataset={dataset}" in commands[f"{benchmark}/colnomic7b/ctx-n512"]
    for path in (
        f"{benchmark}-reduced/colqwen25/base",
        f"{benchmark}/colnomic7b/ctx-n512",
        f"{benchmark}/ocr_bm25/base",
    ):
        cfg = compose_cfg(*commands[path])
        assert f"{cfg.dataset.name}/{cfg.retriever.id}/{cfg.setting.id}" == path


def test_check_says_tables_6_to_10_come_from_the_labelled_set(spec, mini_results, tmp_path, capsys):
    """Beside a store of runs on one benchmark, the cleaning tables are the cleaning stage's files,
    made from the labelled queries (here the shipped set, its recorded answers), not from those runs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from vldocir.queries.cleaning import run_cleaning

    shutil.copytree(mini_results, tmp_path / "results")
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="cleaning_ablations",
            return_hydra_config=True,
            overrides=[
                f"paths.root_dir={REPO_ROOT}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                f"paths.results_dir={tmp_path / 'results'}",
                "cleaning.methods=[llm_rating]",
            ],
        )
    HydraConfig.instance().set_config(cfg)
    run_cleaning(cfg.cleaning)
    run(compose_report([f"paths.results_dir={tmp_path / 'results'}", "do=[check]", "quiet=true"]))
    out = capsys.readouterr().out
    assert re.search(
        rf"^  table6_llm_rating .* from the cleaning ablations' labelled set labelled-synthetic.csv \(144 queries\), "
        rf"not runs on {TEXT_BENCH}$",
        out,
        re.M,
    )
    assert re.search(r"^  table7_llm_classifier .* labelled queries \(no results/cleaning files yet\)", out, re.M)
    assert re.search(rf"^  table13_overall .* from runs on {TEXT_BENCH}$", out, re.M)
    assert re.search(rf"^  table18_reduced .* from runs on {TEXT_BENCH} and {TEXT_BENCH}-reduced$", out, re.M)
    assert f"the cells made from runs are runs on {TEXT_BENCH}" in out


def test_manifest_entries_have_renderers_and_existing_experiments(spec):
    from vldocir.reporting.figures import FIGURES

    assert all(entry["layout"] in LAYOUTS for entry in spec.tables.values())
    assert set(spec.figures) == set(FIGURES)
    for name, entry in {**spec.tables, **spec.figures}.items():
        for experiment in entry.get("experiments", []):
            assert (REPO_ROOT / "conf" / "experiment" / f"{experiment}.yaml").is_file(), (name, experiment)
        if entry.get("csv"):
            assert (PAPER_DIR / entry["csv"]).is_file(), name
