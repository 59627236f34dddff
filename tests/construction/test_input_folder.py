"""A folder is enough (construction/input_folder.py): documents found by their names, ids unique and
safe, source and domain from the options or from a subfolder named after a source, the index used
when there is one; and the render command names documents the same way (a folder's index.html by
the folder)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, evaluate, make_pdf
from vldocir.construction.ingest import load_documents
from vldocir.construction.input_folder import document_id, folder_documents, safe_id, unique_document_ids
from vldocir.construction.render import __main__ as render_cli
from vldocir.construction.render.batch import BatchReport
from vldocir.data.benchmark import load_benchmark
from vldocir.data.schema import SOURCES
from vldocir.errors import ConfigError


def make_folder(root):
    """A folder as a user has it: pages saved from a browser, a collector's folder, a PDF, a source
    subfolder, and things that are not documents."""
    root.mkdir(parents=True)
    (root / "alpha.html").write_text("<html><head><title> Alpha &amp;\n Omega </title></head><body>a</body></html>")
    (root / "alpha_files").mkdir()  # a saved page's assets: not a document
    (root / "alpha_files" / "logo.png").write_bytes(b"png")
    (root / "beta").mkdir()
    (root / "beta" / "index.html").write_text("<p>no title here</p>")
    (root / "beta" / "other.html").write_text("<p>an asset of beta</p>")
    (root / "Annual Report (2024).HTM").write_text("<title>AR</title>")
    (root / "gamma.pdf").write_bytes(b"%PDF-1.4 not parsed here")
    (root / "sec").mkdir()
    (root / "sec" / "proxy.html").write_text("<title>Proxy</title>")
    (root / "sec" / "filing").mkdir()
    (root / "sec" / "filing" / "index.html").write_text("<p>x</p>")
    (root / "notes.txt").write_text("not a document")
    (root / ".hidden.html").write_text("skipped")
    return root


def test_a_folder_without_an_index_gives_its_documents(tmp_path):
    root = make_folder(tmp_path / "docs")
    index, docs = load_documents(root, "arxiv", "Finance")
    assert index is None
    found = {d.record.doc_id: (d.record.source, d.record.domain, d.record.title, d.html_path) for d in docs}
    assert found == {
        "Annual_Report_2024": ("arxiv", "Finance", "AR", root / "Annual Report (2024).HTM"),
        "alpha": ("arxiv", "Finance", "Alpha & Omega", root / "alpha.html"),
        "beta": ("arxiv", "Finance", "beta", root / "beta" / "index.html"),
        "gamma": ("arxiv", "Finance", "gamma", root / "gamma.pdf"),
        "proxy": ("sec", "Finance", "Proxy", root / "sec" / "proxy.html"),
        "filing": ("sec", "Finance", "filing", root / "sec" / "filing" / "index.html"),
    }
    assert [d.is_pdf for d in docs if d.record.doc_id == "gamma"] == [True] and all(d.problem is None for d in docs)
    # no domain given: each document's is its source
    assert {d.record.doc_id: d.record.domain for d in folder_documents(root, "pubmed")}["proxy"] == "sec"
    assert {d.record.domain for d in folder_documents(root, "pubmed")} == {"pubmed", "sec"}
    # one file is one document
    assert [d.record.doc_id for d in load_documents(root / "alpha.html", "wikipedia")[1]] == ["alpha"]


def test_an_index_when_present_is_used(tmp_path):
    root = make_folder(tmp_path / "docs")
    (root / "index.jsonl").write_text(json.dumps({"doc_id": "only", "source": "sec", "path": "alpha.html"}) + "\n")
    index, docs = load_documents(root, "arxiv")
    assert index == root / "index.jsonl" and [(d.record.doc_id, d.record.source) for d in docs] == [("only", "sec")]


def test_ids_are_safe_and_deterministic():
    assert safe_id("Zürich report") == "Zurich_report"
    assert safe_id("--a  b??c..") == "a_b_c"
    assert safe_id("x" * 250) == "x" * 200
    assert safe_id("???") == "doc-" + hashlib.sha256(b"???").hexdigest()[:8] == safe_id("???")
    assert safe_id("版") == "doc-" + hashlib.sha256("版".encode()).hexdigest()[:8]
    assert document_id("a/b/index.html") == "b" and document_id("x/report.v2.html") == "report.v2"
    assert unique_document_ids(["a/index.html", "b/index.html", "c.pdf"]) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("files", "clash"),
    [
        (["a.html", "a.pdf"], ("a.html", "a.pdf")),
        (["a/index.html", "a.html"], ("a.html", "a")),  # (listed by name: a.html before the folder a)
        (["a b.html", "a_b.htm"], ("a b.html", "a_b.htm")),
        (["sec/x.html", "x.pdf"], ("sec/x.html", "x.pdf")),
    ],
)
def test_two_documents_with_one_id_are_one_error_naming_both(tmp_path, files, clash):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("<p>x</p>")
    with pytest.raises(ConfigError, match="would both be document") as error:
        folder_documents(tmp_path, "arxiv")
    message = str(error.value)
    assert all(str(tmp_path / name) in message for name in clash) and "\n" not in message


def test_folder_problems_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"no document index in this folder .* and no documents in it"):
        load_documents(tmp_path, "arxiv")
    (tmp_path / "a.html").write_text("<p>x</p>")
    with pytest.raises(ConfigError, match="folder.source='blog' is not a source; valid sources: " + ", ".join(SOURCES)):
        load_documents(tmp_path, "blog")
    with pytest.raises(ConfigError, match=r"no folder\.source"):
        load_documents(tmp_path)


def test_the_render_command_names_folder_documents_by_their_folder(tmp_path, monkeypatch, capsys):
    """``render OUT a/index.html b/index.html`` renders documents a and b (not two 'index', one lost)."""
    asked = []

    def render_batch(docs, out_dir, config):  # records what would be rendered (no browser needed)
        asked.extend(docs)
        return BatchReport()

    monkeypatch.setattr(render_cli, "render_batch", render_batch)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text("<p>x</p>")
    assert render_cli.main([str(tmp_path / "out"), str(tmp_path / "a/index.html"), str(tmp_path / "b/index.html")]) == 0
    assert [(doc_id, source) for doc_id, source, _ in asked] == [("a", "generic"), ("b", "generic")]
    # two files that would share an id: one line, status 2, nothing rendered
    asked.clear()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.html").write_text("<p>x</p>")
    assert render_cli.main([str(tmp_path / "out"), str(tmp_path / "a/index.html"), str(tmp_path / "c/a.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("render error:") and "would both be document 'a'" in err and "\n" not in err
    assert str(tmp_path / "c/a.html") in err and asked == []


# -- end to end: a folder of 3 HTML files and a PDF, no index, no server -------------------------------
def build(args: list[str], tmp_path, cache: str = "cache", app: str = "build") -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            f"vldocir.apps.{app}",
            f"paths.cache_dir={tmp_path / cache}",
            f"paths.log_dir={tmp_path / 'logs'}",
            f"paths.data_dir={tmp_path / 'data'}",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def one_line_error(done: subprocess.CompletedProcess, app: str = "build") -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[-1].startswith(f"{app} error:"), done.stderr[-2000:]
    return lines[-1]


def write_user_folder(root):
    root.mkdir()
    (root / "alpha.html").write_text(
        "<html><head><title>Alpha harvest</title></head><body><h1>Alpha harvest notes</h1>"
        "<p>The alpha orchard picked 412 crates of pears in September.</p>"
        "<table><tr><th>Month</th><th>Crates</th></tr><tr><td>October</td><td>388</td></tr></table></body></html>"
    )
    (root / "beta").mkdir()
    (root / "beta" / "index.html").write_text(
        "<html><body><h1>Beta mill</h1><p>The beta mill ground 97 tonnes of rye.</p></body></html>"
    )
    (root / "sec").mkdir()
    (root / "sec" / "gamma.html").write_text(
        "<html><body><h1>Gamma Corp proxy</h1><p>The board of Gamma Corp has nine directors.</p></body></html>"
    )
    make_pdf(
        root / "ledger.pdf",
        [
            ["Ledger page one", "Cash on hand was 5,210 kroner."],
            ["Ledger page two", "Debts fell to 940 kroner."],
            ["Ledger page three", "The audit closed in March."],
        ],
    )
    return root


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("tesseract") is None,
    reason="needs Chromium and Tesseract (scripts/setup.sh installs both)",
)
def test_a_folder_and_a_query_file_build_a_benchmark_that_run_py_evaluates(tmp_path):
    folder = write_user_folder(tmp_path / "docs")
    fast = ["pdf.width=600", "spec.name=own-folder"]
    # 1. the corpus alone (queries=none): what a user looks at to name elements
    corpus_dir = tmp_path / "corpus"
    done = build([f"input={folder}", *fast, f"out_dir={corpus_dir}", "queries=none"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "queries: none" in done.stdout
    corpus = load_benchmark(corpus_dir)
    docs = corpus.documents.set_index("doc_id")
    assert sorted(docs.index) == ["alpha", "beta", "gamma", "ledger"] and corpus.queries.empty
    assert dict(docs["source"]) == {"alpha": "arxiv", "beta": "arxiv", "gamma": "sec", "ledger": "arxiv"}
    assert docs.at["alpha", "title"] == "Alpha harvest" and docs.at["ledger", "n_pages"] == 3
    assert corpus.info["built_by"]["input"]["folder"] == str(folder)
    elements = corpus.elements

    def element(doc_id, text):
        rows = elements[(elements["doc_id"] == doc_id) & elements["text"].str.contains(text, regex=False)]
        return f"{doc_id}/{rows.sort_values('element_id').iloc[-1]['element_id']}"

    rows = [
        ("How many crates of pears did the alpha orchard pick?", [element("alpha", "412 crates")], "page_single"),
        ("Crates in September and October?", [element("alpha", "412 crates"), element("alpha", "388")], "page_multi"),
        ("How did cash and debts change?", ["ledger:1", "ledger:2"], "doc_adjacent"),
        ("When did the audit close, and what was the cash?", ["ledger:1", "ledger:3"], "doc_near"),
        ("Rye and directors?", [element("beta", "97 tonnes"), "gamma:1"], "cross_doc"),
    ]
    queries_file = tmp_path / "q.jsonl"
    queries_file.write_text("".join(json.dumps({"question": q, "evidence": e}) + "\n" for q, e, _ in rows))

    # 2. the same folder with the query file: renders and OCR reused, no server anywhere
    out = tmp_path / "bench"
    done = build([f"input={folder}", *fast, f"out_dir={out}", "queries=file", f"queries.path={queries_file}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "queries from" in done.stdout
    bench = load_benchmark(out)
    assert list(bench.queries.sort_values("query_id")["evidence_structure"]) == [s for _, _, s in rows]
    assert set(bench.queries["generator"]) == {"user"}
    qrels = bench.qrels.set_index("query_id")
    assert qrels.loc["q0000001", "element_ids"].tolist() == [e.split("/")[1] for e in rows[1][1]]
    assert set(qrels.loc[["q0000002"], "page_id"]) == {"ledger-p000", "ledger-p001"}
    evaluation = evaluate(
        f"dataset.source={out}",
        "dataset.build=null",
        f"paths.results_dir={tmp_path / 'results'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    )
    assert evaluation.metrics["n_queries"] == len(rows)

    # 3. the same queries put on the corpus afterwards (generate_queries): the same tables
    again = tmp_path / "again"
    done = build(
        [
            f"benchmark={corpus_dir}",
            "name=own-folder",
            f"out_dir={again}",
            "queries=file",
            f"queries.path={queries_file}",
        ],
        tmp_path,
        app="generate_queries",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    regenerated = load_benchmark(again)
    for table in ("queries", "qrels"):
        assert regenerated.arrow(table).equals(bench.arrow(table)), table

    # 4. a bad row: one line naming the file, the row and the value, after the (reused) rendering
    bad = tmp_path / "bad.jsonl"
    bad.write_text(queries_file.read_text() + json.dumps({"question": "Page nine?", "evidence": "ledger:9"}) + "\n")
    done = build(
        [f"input={folder}", *fast, f"out_dir={tmp_path / 'x'}", "queries=file", f"queries.path={bad}"], tmp_path
    )
    line = one_line_error(done)
    assert f"{bad} row 6" in line and "ledger:9" in line and "has 3 page(s), no page 9" in line
    # 5. a malformed file fails before any rendering (a fresh cache stays empty of renders)
    bad.write_text(json.dumps({"question": "No evidence"}) + "\n")
    done = build(
        [f"input={folder}", *fast, f"out_dir={tmp_path / 'y'}", "queries=file", f"queries.path={bad}"],
        tmp_path,
        cache="fresh-cache",
    )
    assert "row 1: missing column(s) or value(s): evidence" in one_line_error(done)
    assert not (tmp_path / "fresh-cache" / "build").exists() and not (tmp_path / "y").exists()
