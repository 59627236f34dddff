"""Building a benchmark from your own HTML (construction/ingest.py, ``python -m vldocir.apps.build input=...``):
the document index is checked before any work, documents are rendered, OCRed and get queries
from the VLM pipeline (a real chat server on 127.0.0.1), a failing document is reported and the
batch goes on, and the harness loads the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers import ScriptedVLM, evaluate
from helpers import build_app as build
from vldocir.construction.ingest import SOURCES, load_documents
from vldocir.data.benchmark import load_benchmark
from vldocir.errors import ConfigError
from vldocir.llm_server import ChatServer

FIXTURES = (
    Path(__file__).resolve().parents[1] / "fixtures" / "render_sources"
)  # a PMC-like article and an SEC proxy (written for the tests)
COMPANIES = {"orbel": ("Orbel Holdings, Inc.", 1.2), "tarvo": ("Tarvo Industries Corp.", 2.7)}


def proxy_html(company: str, factor: float, sections: int = 14) -> str:
    """A proxy-statement-like page: director biographies, a compensation table per section."""
    parts = [f"<h1>{company} 2025 Proxy Statement</h1>"]
    for s in range(sections):
        parts.append(f"<h2>Proposal {s + 1}: Election of directors, class {s + 1}</h2>")
        for d in range(3):
            parts.append(
                f"<p>Director {d + 1} of class {s + 1} at {company}, age {40 + 3 * d + s}, has served since "
                f"{2001 + s + d}. The board recommends a vote FOR this nominee. Annual retainer "
                f"${int((110 + 7 * d + s) * factor)},000 and committee fees as described below.</p>"
            )
        rows = "".join(
            f"<tr><td>Executive {r + 1}</td><td>${int((500 + 40 * r + 9 * s) * factor)},000</td>"
            f"<td>${int((90 + 5 * r + s) * factor)},000</td></tr>"
            for r in range(5)
        )
        parts.append(
            f"<table><caption>Summary compensation, class {s + 1}</caption>"
            f"<tr><th>Name</th><th>Salary</th><th>Bonus</th></tr>{rows}</table>"
        )
    return f"<!doctype html><html><head><title>{company}</title></head><body>{''.join(parts)}</body></html>"


def write_docs(root: Path, rows: list[dict]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for doc_id, (company, factor) in COMPANIES.items():
        (root / doc_id).mkdir(exist_ok=True)
        (root / doc_id / "index.html").write_text(proxy_html(company, factor))
    (root / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


ROWS = [
    {
        "doc_id": "orbel",
        "source": "sec",
        "domain": "Financial Reports",
        "title": "Orbel Holdings 2025 proxy",
        "path": "orbel",
        "url": "https://example.org/orbel",
        "license": "public filing",
    },
    {
        "doc_id": "tarvo",
        "source": "sec",
        "domain": "Financial Reports",
        "title": "Tarvo 2025 proxy",
        "path": "tarvo/index.html",
    },
    {"doc_id": "lost", "source": "sec", "path": "missing-folder"},
]


# -- the index ----------------------------------------------------------------------------------------
def test_index_is_read_from_a_folder_or_a_file_and_paths_are_resolved(tmp_path):
    root = write_docs(tmp_path / "docs", ROWS)
    index, docs = load_documents(root)
    assert index == root / "index.jsonl"
    assert [d.record.doc_id for d in docs] == ["orbel", "tarvo", "lost"]
    assert docs[0].html_path == root / "orbel" / "index.html" and docs[1].html_path == root / "tarvo" / "index.html"
    assert docs[0].problem is None and "no HTML file at" in docs[2].problem
    assert docs[2].record.domain == "sec" and docs[2].record.title == "lost"  # defaults
    csv = tmp_path / "docs" / "other.csv"
    pd.DataFrame(ROWS[:2]).to_csv(csv, index=False)
    assert [d.record.doc_id for d in load_documents(csv)[1]] == ["orbel", "tarvo"]
    # a hand-written JSONL index whose last line has no newline is read whole and left unchanged
    text = "".join(json.dumps(r) + "\n" for r in ROWS).rstrip("\n")
    (root / "index.jsonl").write_text(text)
    assert len(load_documents(root)[1]) == 3 and (root / "index.jsonl").read_text() == text


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([ROWS[0], {**ROWS[1], "doc_id": "orbel"}], r"index.jsonl:2: duplicate document id 'orbel'"),
        (
            [{**ROWS[0], "source": "gutenberg"}],
            "unknown source 'gutenberg' for orbel; valid sources: " + ", ".join(SOURCES),
        ),
        ([{**ROWS[0], "doc_id": "a/b"}], r"index.jsonl:1: not an index row \(document id 'a/b' is not a folder name"),
        ([{"doc_id": "x", "source": "sec"}], r"missing column\(s\) or value\(s\): path"),
        ([ROWS[0], {**ROWS[1], "source": " "}], r"index.jsonl:2: .*missing column\(s\) or value\(s\): source"),
    ],
)
def test_a_bad_index_is_refused_naming_file_row_and_problem(tmp_path, rows, message):
    root = write_docs(tmp_path / "docs", rows)
    with pytest.raises(ConfigError, match=message):
        load_documents(root / "index.jsonl")


def test_a_folder_without_an_index_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no document index in this folder"):
        load_documents(tmp_path)


# -- the build ----------------------------------------------------------------------------------------
def server_args(url: str) -> list[str]:
    return [
        "queries.recorded=null",
        "queries.llm.model=test-vlm",
        f"queries.llm.base_url={url}",
        "queries.sampling.configs_per_structure=1",
        "queries.generation.queries_per_config=2",
        "queries.progress=false",
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("tesseract") is None,
    reason="needs Chromium and Tesseract (scripts/setup.sh installs both)",
)
def test_build_from_own_html_renders_ocrs_generates_and_loads(tmp_path):
    fixtures = [
        {
            "doc_id": "pmc-article",
            "source": "pubmed",
            "domain": "Medical Reports",
            "path": str(FIXTURES / "pmc-article"),
        },
        {"doc_id": "sec-proxy", "source": "sec", "domain": "Financial Reports", "path": str(FIXTURES / "sec-proxy")},
    ]
    root = write_docs(tmp_path / "docs", ROWS + fixtures)
    out = tmp_path / "bench"
    with ChatServer(responder=ScriptedVLM()) as server:
        done = build([f"input={root}", "spec.name=own-html", f"out_dir={out}", *server_args(server.url)], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        asked = len(server.requests)
    assert asked > 0 and "queries generated" in done.stdout
    bench = load_benchmark(out)
    assert bench.name == "own-html" and set(bench.documents["doc_id"]) == {"orbel", "tarvo", "pmc-article", "sec-proxy"}
    built = bench.info["built_by"]
    assert (
        built["generator"] == "vldocir.construction.ingest" and "no HTML file at" in built["failed_documents"]["lost"]
    )
    docs = bench.documents.set_index("doc_id")
    assert (
        docs.loc["orbel", "url"] == "https://example.org/orbel" and docs.loc["tarvo", "domain"] == "Financial Reports"
    )
    pages = bench.pages
    assert (pages.groupby("doc_id").size() >= 2).all(), "long documents are paginated"
    assert pages["dom_text"].str.len().gt(0).all() and pages["ocr_text"].str.len().gt(0).all()
    assert (
        pages[pages["doc_id"].isin(["orbel", "tarvo"])]["ocr_text"].str.contains("Orbel|Tarvo|Director|Executive").all()
    )
    # the reader chrome of the PMC page and the furniture of the SEC page are gone from text and OCR
    for doc_id, gone in (
        ("pmc-article", ["Welcome to the new PMC website!", "Skip to main content"]),
        ("sec-proxy", ["2024 PROXY STATEMENT", "Election of Directors (continued)"]),
    ):
        text = " ".join(pages.loc[pages["doc_id"] == doc_id, "dom_text"]) + " ".join(
            pages.loc[pages["doc_id"] == doc_id, "ocr_text"]
        )
        assert not any(g in text for g in gone), (doc_id, [g for g in gone if g in text])
    rendering = built["render_report"]
    assert rendering["documents"] == 4 and all(
        rendering["removed_content"].get(k, 0) == 0 for k in ("formula", "table", "figure")
    )
    assert not bench.elements.empty and len(bench.queries) > 0
    assert (
        set(bench.queries["generator"]) == {"test-vlm"} and bench.qrels["doc_id"].isin(bench.documents["doc_id"]).all()
    )
    # the harness evaluates it (DOM-BM25, the default retriever)
    evaluation = evaluate(
        f"dataset.source={out}",
        "dataset.build=null",
        f"paths.results_dir={tmp_path / 'results'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    )
    assert evaluation.metrics["n_queries"] == len(bench.queries)

    # a rerun resumes: nothing is rendered again and every model answer comes from the cache
    done = build(
        [
            f"input={root}",
            "spec.name=own-html",
            f"out_dir={tmp_path / 'again'}",
            *server_args("http://127.0.0.1:9/v1"),
            "queries.check_server=false",  # the server is down: the LLM cache answers
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    again = load_benchmark(tmp_path / "again")
    assert again.fingerprint == bench.fingerprint
    assert again.info["built_by"]["queries"]["usage"]["generator"]["called"] == 0


@pytest.mark.slow
def test_build_refuses_a_bad_index_in_one_line(tmp_path):
    root = write_docs(tmp_path / "docs", [ROWS[0], {**ROWS[1], "source": "blog"}])
    done = build([f"input={root}"], tmp_path, timeout=300)
    assert done.returncode == 2
    assert "build error:" in done.stderr and "unknown source 'blog'" in done.stderr and "Traceback" not in done.stderr
    done = build([f"input={root}", "queries=templates"], tmp_path, timeout=300)
    assert done.returncode == 2 and "queries=generated" in done.stderr
