"""``make tables`` with runs of several benchmarks in one store: the paper tables compare the mini
benchmark's runs (never an imported one's), and every other benchmark's runs are listed under a
section of their own (README.md, other_runs.md, other_runs.tex, the console) with the numbers of
their ``metrics.json``, whatever structures and ks they have, and the protocol's main score. mteb result
files exported from the store (``mteb_results=<folder>``) come back as external rows (†) beside the runs
of their benchmark, matched by task name, in ``make tables`` and ``do=compare``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import REPO_ROOT, Evaluation, evaluate
from report_stores import MANIFEST, PAPER_DIR, TEXT_BENCH
from vldocir.reporting.paper import load_spec
from vldocir.reporting.report_tasks import compose_report, run
from vldocir.reporting.store_view import choose_benchmark
from vldocir.store import cli as store_cli

TOY = REPO_ROOT / "tests" / "fixtures" / "importers" / "beir_toy"  # its README: 2 page_single, 1 cross_doc
BEIR = ["dataset=beir_dbpedia_entity", f"dataset.importer.source={TOY}", "dataset.importer.revision=null"]
HEADLINE = ("ndcgall", "recallall")


def evaluate_run(root: Path, *overrides: str) -> Evaluation:
    """``python run.py <overrides>`` with every path under ``root`` (in-process), and what it made."""
    paths = {"data": "data", "cache": "cache", "results": "results", "log": "logs"}
    return evaluate(f"paths.root_dir={REPO_ROOT}", *(f"paths.{k}_dir={root / v}" for k, v in paths.items()), *overrides)


def _sections(markdown: str) -> dict[str, str]:
    """``### <name>`` sections of a Markdown text, by name."""
    parts = markdown.split("\n### ")[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def _rows(section: str) -> tuple[list[str], dict[tuple[str, str, str], list[str]]]:
    """The header and the rows (run, entry, aggregate) -> cells of the first table of a section."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1].strip("`"), cells[2])] = cells[3:]
    return header, rows


def _expected(entry: Path, ks: list[int], main: str | None = None) -> dict[str, list[str]]:
    """Macro and Micro cells of a store entry as the report prints them, from its metrics.json; with
    ``main``, the protocol's main score last."""
    metrics = json.loads((entry / "metrics.json").read_text())
    aggregates = metrics["aggregates"]
    last = [f"{metrics['protocol']['mean'][main]:.2f}"] if main else []
    return {
        label: [
            "–" if f"{m}@{k}" not in aggregates[key] else f"{aggregates[key][f'{m}@{k}']:.2f}"
            for m in HEADLINE
            for k in ks
        ]
        + last
        for label, key in (("Macro", "macro"), ("Micro", "micro"))
    }


def _paper_tables(tables: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(tables.glob("table*.*"))}


def test_make_tables_lists_each_benchmarks_runs_under_its_own_benchmark(text_bench, tmp_path, capsys):
    root = tmp_path / "store"
    mini = [f"dataset.source={text_bench}", f"dataset.name={TEXT_BENCH}", "dataset.build=null"]
    mapped = evaluate_run(root, *mini)  # dom_bm25/base: a paper row's run
    variant = evaluate_run(root, *mini, "retriever.id=bm25_k09", "retriever.model.k1=0.9")  # no paper row's
    spec = load_spec(MANIFEST, PAPER_DIR)
    report = [f"paths.root_dir={REPO_ROOT}", f"paths.results_dir={root / 'results'}", "do=[tables]"]

    assert run(compose_report([*report, f"out_dir={tmp_path / 'before'}"])) == 0
    before = _paper_tables(tmp_path / "before" / "tables")
    assert not (tmp_path / "before" / "tables" / "other_runs.md").read_text().count("\n### ")

    beir = evaluate_run(root, *BEIR, "retriever=dom_bm25")  # dom_bm25/base again, on the imported benchmark
    short = evaluate_run(root, *BEIR, "dataset.name=beir-k13", "retriever=dom_bm25", "eval.ks=[1,3]")
    # One mapped run each; "beir-..." sorts first, but an imported benchmark is not compared with the paper.
    assert choose_benchmark(root / "results", spec)[0] == TEXT_BENCH
    mteb_dir = tmp_path / "mteb"  # the BEIR run (mteb's DBPedia) and the mini's mapped run, as mteb results
    assert store_cli.main(["export", "--format", "mteb", str(beir.entry), str(mapped.entry), str(mteb_dir)]) == 0
    capsys.readouterr()
    assert run(compose_report([*report, f"mteb_results={mteb_dir}"])) == 0
    printed = capsys.readouterr().out
    tables = root / "results" / "tables"
    assert _paper_tables(tables) == before, "the paper tables do not change"

    readme = (tables / "README.md").read_text()
    compared = readme.split("## Other runs in the store", 1)[1].split("## Runs on other benchmarks", 1)[0]
    header, rows = _rows(compared)
    assert header == ["Run", "Entry", "Aggregate", "nDCGAll@5", "nDCGAll@10", "RecallAll@5", "RecallAll@10"]
    mapped_key = json.loads((mapped.entry / "manifest.json").read_text())["store"]["run_key"]
    external = ("vldocir/dom_bm25 †", f"{mapped_key}/VLDocIR-{TEXT_BENCH}.json")
    assert set(rows) == {(*r, a) for r in [("bm25_k09/base", variant.entry.name), external] for a in ("Macro", "Micro")}
    for aggregate, cells in _expected(variant.entry, [5, 10]).items():
        assert rows[("bm25_k09/base", variant.entry.name, aggregate)] == cells
    for aggregate, cells in _expected(mapped.entry, [5, 10]).items():  # the mapped run, through mteb's file
        assert rows[(*external, aggregate)] == cells
    assert "† External: an mteb result file" in compared
    assert mapped.entry.name not in compared

    for text in (readme, (tables / "other_runs.md").read_text()):
        sections = _sections(text)
        assert list(sections) == ["beir-dbpedia-entity", "beir-k13"]
        header, rows = _rows(sections["beir-dbpedia-entity"])
        assert header[3:] == ["nDCGAll@5", "nDCGAll@10", "RecallAll@5", "RecallAll@10", "Main nDCG@10"]
        beir_key = json.loads((beir.entry / "manifest.json").read_text())["store"]["run_key"]
        external = ("vldocir/dom_bm25 †", f"{beir_key}/DBPedia.json")  # matched by protocol.mteb_task
        assert set(rows) == {
            (*r, a) for r in [("dom_bm25/base", beir.entry.name), external] for a in ("Macro", "Micro")
        }
        for aggregate, cells in _expected(beir.entry, [5, 10], "ndcg@10").items():
            assert rows[("dom_bm25/base", beir.entry.name, aggregate)] == cells
            assert rows[(*external, aggregate)] == cells
        assert "Main score: nDCG@10, the protocol's (mteb DBPedia (BEIR)" in sections["beir-dbpedia-entity"]
        # Asked for 1 and 3; the protocol's main score (nDCG@10) adds 10: those columns too, @5 empty.
        header, rows = _rows(sections["beir-k13"])
        assert header[3:] == [*(f"{m}@{k}" for m in ("nDCGAll", "RecallAll") for k in (1, 3, 5, 10)), "Main nDCG@10"]
        expected = _expected(short.entry, [1, 3, 5, 10], "ndcg@10")
        assert expected["Macro"][2] == "–" and "–" not in [*expected["Macro"][:2], expected["Macro"][3]]
        for aggregate, cells in expected.items():
            assert rows[("dom_bm25/base", short.entry.name, aggregate)] == cells
        about = sections["beir-dbpedia-entity"]
        fingerprint = json.loads((beir.entry / "manifest.json").read_text())["benchmark"]["fingerprint"]
        assert f"Imported from `{TOY}` (format beir" in about and f"`{fingerprint}`" in about
        assert "Queries kept: 3; dropped: 1 evidence_not_in_corpus, 1 no_evidence, 1 not_in_split." in about
        assert (
            "Macro is the mean over the structures with queries: page_single 2, cross_doc 1 "
            "(none for page_multi, doc_adjacent, doc_near, doc_far)."
        ) in about

    latex = (tables / "other_runs.tex").read_text()
    assert r"\label{tab:other_runs:beir-dbpedia-entity}" in latex and r"\label{tab:other_runs:beir-k13}" in latex
    macro = _expected(short.entry, [1, 3, 5, 10])["Macro"]
    assert f"{short.entry.name.replace('_', chr(92) + '_')} & Macro & " + " & ".join(macro).replace("–", "--") in latex
    assert latex.count(r"\begin{table}") == latex.count(r"\end{table}") == 3
    assert "External: an mteb result file" in latex
    assert (
        "Runs on other benchmarks: beir-dbpedia-entity" in printed and "Runs on other benchmarks: beir-k13" in printed
    )

    # do=compare: the external rows of the baseline's benchmark follow the tested ones, never tested.
    compare = [*report[:2], "do=compare", f"baseline={mapped.entry}", f"runs=[{variant.entry}]"]
    compare += [f"mteb_results={mteb_dir}", "significance.n_permutations=100", f"out_dir={tmp_path / 'cmp'}"]
    capsys.readouterr()
    assert run(compose_report(compare)) == 0
    printed = capsys.readouterr().out
    external = printed.split("External rows (mteb result files", 1)[1]
    macro = json.loads((mapped.entry / "metrics.json").read_text())["aggregates"]["macro"]
    assert f"vldocir/dom_bm25 †   ndcgall@10                  macro  {macro['ndcgall@10']:.2f}" in external
    assert "not significance-tested" in external and "DBPedia" not in external
    (markdown,) = (tmp_path / "cmp" / "compare").glob("comparison_*.md")
    assert "vldocir/dom_bm25 †" in markdown.read_text()


def test_a_store_of_imported_runs_only_is_not_compared_with_the_paper(tmp_path, capsys):
    root = tmp_path / "store"
    beir = evaluate_run(root, *BEIR, "retriever=dom_bm25")
    spec = load_spec(MANIFEST, PAPER_DIR)
    name, note = choose_benchmark(root / "results", spec)
    assert name == spec.benchmark and "imported benchmarks only (beir-dbpedia-entity)" in note
    assert choose_benchmark(root / "results", spec, "beir-dbpedia-entity")[0] == "beir-dbpedia-entity"
    report = [
        f"paths.root_dir={REPO_ROOT}",
        f"paths.results_dir={root / 'results'}",
        "do=[tables]",
        "only=[table13_overall]",
    ]
    assert run(compose_report(report)) == 0
    sections = _sections((root / "results" / "tables" / "README.md").read_text())
    _, rows = _rows(sections["beir-dbpedia-entity"])
    assert rows[("dom_bm25/base", beir.entry.name, "Macro")] == _expected(beir.entry, [5, 10], "ndcg@10")["Macro"]
    shutil.rmtree(root / "results" / "runs" / "beir-dbpedia-entity")
    assert run(compose_report([*report, "other_runs=true"])) == 0
    assert not (root / "results" / "tables" / "other_runs.md").exists(), "nothing to list: no stale file"
