"""The build's report on its documents (construction/build_report.py): per-document warnings from
the renderings' records, documents left out with their reason (an empty document is one, never a
blank page: render/batch.py), the evidence-sampling shortfall of a source with too few or too short
documents (queries/evidence_configs.py, which samples what it can instead of failing), the
printed summary, and a build from HTML whose sources are an empty file, an invisible page and an
image without words next to a real article (fixtures tests/fixtures/render/report_*.html)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers import ScriptedVLM
from vldocir.construction.build_report import (
    FAILURE_KINDS,
    document_warnings,
    layout_warnings,
    sampling_shortfall,
    summary,
)
from vldocir.construction.render import RenderedDocument, RenderedElement
from vldocir.construction.render.batch import EMPTY_DOCUMENT, is_blank
from vldocir.queries.cleaning import QueryCleaningSpec
from vldocir.queries.evidence_configs import EvidenceSamplingSpec, config_counts, sample_evidence_configs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "render"


def element(element_id: str, element_type: str = "text", text: str = "words", page: int = 0) -> RenderedElement:
    box = [0.0, 100.0 * page, 1000.0, 100.0 * page + 80.0]
    return RenderedElement(element_id, element_type, page, box, False, text, None, True, False, box)


def rendering(doc_id: str = "d", elements=(), **records) -> RenderedDocument:
    return RenderedDocument(
        doc_id=doc_id,
        source="wikipedia",
        directory=Path("."),
        html_path="x.html",
        page_width=2000,
        page_height=4000,
        device_scale_factor=2.0,
        document_height=4000,
        background=[255, 255, 255],
        pages=[],
        elements=list(elements),
        **records,
    )


# -- what counts as an empty document ----------------------------------------------------------------
def test_a_rendering_is_blank_without_text_and_without_an_image_that_shows():
    assert is_blank(rendering())
    assert is_blank(rendering(elements=[element("e0", "text", "  \n ")]))
    assert not is_blank(rendering(elements=[element("e0", "text", "A word")]))
    picture = element("e1", "image", "")
    assert not is_blank(rendering(elements=[picture]))  # an image without words is content
    assert not is_blank(rendering(elements=[element("e2", "formula", "")]))
    failed = {"count": 1, "failed": [{"url": "x.png", "status": "missing", "element_id": "e1", "alt": ""}]}
    assert is_blank(rendering(elements=[picture], images=failed))  # an image that shows nothing is not


# -- warnings of one rendering --------------------------------------------------------------------------
def test_layout_warnings_name_content_removals_kept_tables_images_scaling_overflow_and_other_render_warnings():
    doc = rendering(
        elements=[element("e0"), element("e1", "formula", ""), element("e2", "formula", "x^2")],
        cleanup=[
            # 40 links of a navigation box: no content element, no warning
            {"rule": "nav", "kind": "selector", "removed": 40, "content": {"paragraph": 3}, "samples": ["Home"]},
            {
                "rule": "navbox",
                "kind": "page_rule",
                "removed": 1,
                "content": {"table": 1, "headline": 1},
                "samples": ["", "Rank City Population"],
            },
            {"rule": "invisible", "kind": "invisible", "removed": 2, "kept_formula": 1, "content": {}},
            # a navbox holding a ranked table: kept whole
            {
                "rule": ".navbox",
                "kind": "selector",
                "removed": 0,
                "kept_table": 1,
                "content": {},
                "kept_samples": ["Largest cities Rank City"],
            },
        ],
        fit={"opened": 1, "scaled": [{"tag": "table", "scale": 0.62}, {"tag": "pre", "scale": 0.5}]},
        overflow=[
            {"element_id": "e0", "beyond_px": 120.0, "dropped": False},
            {"element_id": "e9", "beyond_px": 340.4, "dropped": True},
        ],
        images={
            "count": 5,
            "failed": [
                {"url": "a.png", "status": "missing", "element_id": "e3"},
                {"url": "b.png", "status": "blocked", "element_id": None},
                {"url": "c.png", "status": "missing", "element_id": "e4"},
            ],
        },
        warnings=[
            "images or fonts still loading after 10 s",
            "clean-up removed formula/table/figure elements: {'page_rule:navbox': 1}",  # said by removed_content
            "3 image(s) show nothing: blocked 1, missing 2",  # said by failed_images
            # said by kept_table
            "selector rule '.navbox' kept 1 element(s) holding a data table (\"Largest cities Rank City\")",
        ],
    )
    warnings = layout_warnings(doc)
    assert [w["kind"] for w in warnings] == [
        "removed_content",
        "kept_table",
        "failed_images",
        "scaled_content",
        "overflow",
        "empty_formulas",
        "render",
    ]
    details = {w["kind"]: w["detail"] for w in warnings}
    assert details["removed_content"] == "page_rule rule 'navbox' removed 1 table (\"Rank City Population\")"
    assert details["kept_table"] == (
        "selector rule '.navbox' kept 1 element(s) holding a data table (\"Largest cities Rank City\")"
    )
    assert details["failed_images"] == "3 of 5 image(s) show nothing (blocked 1, missing 2; first: a.png)"
    assert details["scaled_content"] == "2 element(s) scaled to fit the page width (down to 0.50)"
    assert details["overflow"] == "2 element(s) reach past the page's sides (up to 340 px; 1 not on the page at all)"
    assert details["empty_formulas"] == "1 formula(s) recorded without text"
    assert details["render"] == "images or fonts still loading after 10 s"
    assert layout_warnings(rendering(elements=[element("e0")])) == []


def test_document_warnings_classify_left_out_documents_and_follow_the_build_order():
    clean, scaled = rendering("clean", [element("e0")]), rendering("scaled", fit={"scaled": [{"scale": 0.8}]})
    found = document_warnings(
        [clean, scaled],
        left_out={"gone": "no HTML file at /x/gone.html"},
        render_errors={"blank": f"{EMPTY_DOCUMENT}: nothing visible", "slow": "DocumentTimeout: slow: 30 s"},
        pdf_failed={"bad-pdf": "bad.pdf: damaged or unreadable PDF (PDFium: Data format error)"},
        no_text_layer=["scan"],
        unplaced_facts={"clean": 0, "scaled": 2},
        order=["slow", "scaled", "clean", "blank", "scan", "bad-pdf"],
    )
    assert list(found) == ["slow", "scaled", "blank", "scan", "bad-pdf", "gone"]  # order; then the rest
    kinds = {doc_id: [w["kind"] for w in ws] for doc_id, ws in found.items()}
    assert kinds == {
        "slow": ["render_failed"],
        "scaled": ["scaled_content", "unplaced_facts"],
        "blank": ["empty_document"],
        "scan": ["no_text_layer"],
        "bad-pdf": ["pdf_failed"],
        "gone": ["missing_file"],
    }
    assert found["blank"][0]["detail"] == "nothing visible" and "DocumentTimeout" in found["slow"][0]["detail"]
    json.dumps(found)  # benchmark.json holds it as it is


def test_the_summary_has_one_line_per_document_counts_per_kind_totals_and_the_sampling_shortfall():
    built_by = {
        "document_warnings": {
            "wiki-a": [
                {"kind": "failed_images", "detail": "..."},
                {"kind": "removed_content", "detail": "..."},
                {"kind": "removed_content", "detail": "..."},
            ],
            "empty-b": [{"kind": "empty_document", "detail": "no visible text and no image"}],
            "wiki-c": [{"kind": "overflow", "detail": "..."}],
        },
        "sampling_shortfall": {"sec/doc_far": "0 of 2", "sec/doc_near": "1 of 2"},
    }
    lines = summary(built_by).splitlines()
    assert lines == [
        "build report: 3 document(s) with warnings, 1 left out",
        "  wiki-a: removed_content 2, failed_images 1",
        "  empty-b: LEFT OUT, empty_document: no visible text and no image",
        "  wiki-c: overflow 1",
        "  totals: empty_document 1, removed_content 2, failed_images 1, overflow 1",
        "  evidence sampling below budget (too few or too short documents): sec/doc_far 0 of 2; sec/doc_near 1 of 2",
    ]
    short = summary(built_by, max_documents=1).splitlines()
    assert short[1].startswith("  wiki-a:") and short[2].startswith("  ... and 2 more document(s)")
    assert short[3] == lines[4], "totals count every document, listed or not"
    assert summary({"failed_documents": {}}) == "build report: no document warnings"
    assert set(FAILURE_KINDS) == {"missing_file", "empty_document", "render_failed", "pdf_failed"}


# -- evidence sampling with a source that has too little ----------------------------------------------
def test_a_source_without_words_gets_its_single_page_configurations_and_the_shortfall_is_reported():
    """Before: ``EvidenceSamplingError: no pubmed page has text`` and nothing was built."""
    words = ["harbour ferry quay tonnage", "lighthouse surveyor drawing", "shipyard ferry terminal", "quay dredged"]
    documents = pd.DataFrame(
        {"doc_id": ["wiki", "pic", "bare"], "source": ["wikipedia", "pubmed", "sec"], "domain": ["x"] * 3}
    )
    pages = pd.DataFrame(
        {
            "doc_id": ["wiki"] * 4 + ["pic", "bare"],
            "page_index": [0, 1, 2, 3, 0, 0],
            "width": 2000,
            "height": 4000,
            "dom_text": [*words, "", "the of and"],  # the sec page: stop words only
        }
    )
    elements = pd.DataFrame(
        [
            (doc, f"e{i}{k}", page, [0.0, 0.0, 1000.0, 400.0 * (k + 1)], kind)
            for i, (doc, page) in enumerate([("wiki", 0), ("wiki", 1), ("wiki", 2), ("wiki", 3)])
            for k, kind in enumerate(["text", "table"])
        ]
        + [("pic", "e90", 0, [0.0, 0.0, 1800.0, 1400.0], "image"), ("bare", "e95", 0, [0.0, 0.0, 900.0, 60.0], "text")],
        columns=["doc_id", "element_id", "page_index", "bbox", "element_type"],
    )
    spec = EvidenceSamplingSpec(configs_per_structure=1)
    configs = sample_evidence_configs(documents, pages, elements, spec, encoder=None, near_max_gap=2)
    counts = config_counts(configs)
    # wikipedia: 4 pages, gaps 1..3 -> adjacent (1), near (2), far (3 > near_max_gap 2)
    assert counts.loc["wikipedia"].to_dict() == {
        "page_single": 1,
        "page_multi": 1,
        "doc_adjacent": 1,
        "doc_near": 1,
        "doc_far": 1,
        "cross_doc": 0,
    }
    # one page each, one element: a single-page configuration, no pair
    assert counts.loc["pubmed"].to_dict() == {**dict.fromkeys(counts.columns, 0), "page_single": 1}
    assert counts.loc["sec"].to_dict() == {**dict.fromkeys(counts.columns, 0), "page_single": 1}
    report = {"configs": {s: row.to_dict() for s, row in counts.iterrows()}, "sampling": vars(spec)}
    expected = {
        f"{source}/{structure}": "0 of 1"
        for source in ("pubmed", "sec")
        for structure in ("page_multi", "doc_adjacent", "doc_near", "doc_far", "cross_doc")
    }
    expected |= {"wikipedia/cross_doc": "0 of 1"}  # no encoder: no Cross-Doc pair anywhere
    expected |= {f"arxiv/{s}": "0 of 1" for s in counts.columns}  # a source whose documents all failed
    assert sampling_shortfall(report, ["wikipedia", "pubmed", "sec", "arxiv"]) == dict(sorted(expected.items()))
    assert sampling_shortfall({"method": "none"}, ["sec"]) == {}


# -- a build from HTML: empty documents fail, the others are built and reported ------------------------
@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("tesseract") is None,
    reason="needs Chromium and Tesseract (scripts/setup.sh installs both)",
)
def test_a_build_reports_every_documents_warnings_and_survives_sources_whose_only_document_is_empty(tmp_path):
    from vldocir.construction.ingest import build_from_html
    from vldocir.construction.render import LAYOUT_FILE, RenderConfig
    from vldocir.llm import ChatClient
    from vldocir.llm_server import ChatServer
    from vldocir.queries.query_stage import GeneratedQueries
    from vldocir.queries.vlm_generation import GenerationSpec

    rows = [
        {"doc_id": "harbours", "source": "wikipedia", "path": str(FIXTURES / "report_warnings.html")},
        {"doc_id": "picture", "source": "pubmed", "path": str(FIXTURES / "report_image_only.html")},
        {"doc_id": "invisible", "source": "arxiv", "path": str(FIXTURES / "report_invisible.html")},
        {"doc_id": "empty", "source": "sec", "path": str(FIXTURES / "report_empty.html")},
        {"doc_id": "lost", "source": "sec", "path": str(tmp_path / "nowhere.html")},
    ]
    index = tmp_path / "index.jsonl"
    index.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def build(out: Path, url: str):
        client = ChatClient(model="test-vlm", base_url=url, cache_dir=tmp_path / "llm", timeout_s=60, max_retries=0)
        stage = GeneratedQueries(
            EvidenceSamplingSpec(configs_per_structure=1),
            GenerationSpec(queries_per_config=2),
            QueryCleaningSpec(method="none"),
            describer=client,
            generator=client,
            progress=False,
        )
        return build_from_html(index, out, tmp_path / "cache", "report-test", stage, render=RenderConfig(workers=1))

    with ChatServer(responder=ScriptedVLM()) as server:
        bench = build(tmp_path / "bench", server.url)
        layouts = {
            d: next((tmp_path / "cache" / "build").glob(f"*/rendered/{d}/{LAYOUT_FILE}"))
            for d in ("empty", "invisible")
        }
        stamps = {d: p.stat().st_mtime_ns for d, p in layouts.items()}
        again = build(tmp_path / "again", server.url)  # a rerun
    built = bench.info["built_by"]
    assert set(bench.documents["doc_id"]) == {"harbours", "picture"}
    failed = built["failed_documents"]
    assert set(failed) == {"invisible", "empty", "lost"}
    assert failed["empty"].startswith(EMPTY_DOCUMENT) and failed["invisible"].startswith(EMPTY_DOCUMENT)
    warnings = built["document_warnings"]
    kinds = {doc_id: sorted({w["kind"] for w in ws}) for doc_id, ws in warnings.items()}
    assert kinds == {
        "harbours": ["failed_images", "overflow", "scaled_content"],  # the lost drawing; the 3200 px table
        "invisible": ["empty_document"],
        "empty": ["empty_document"],
        "lost": ["missing_file"],
    }
    assert list(warnings) == ["harbours", "invisible", "empty", "lost"], "in the index's order"
    assert "report_lost_drawing.png" in next(w["detail"] for w in warnings["harbours"] if w["kind"] == "failed_images")
    # the image-only source has one page and no words: single-page configurations, the rest reported short
    shortfall = built["sampling_shortfall"]
    assert {"pubmed/doc_adjacent", "wikipedia/doc_adjacent"} <= set(shortfall)
    assert "pubmed/page_single" not in shortfall and built["queries"]["configs"]["pubmed"]["page_single"] == 1
    printed = summary(built)
    for doc_id in warnings:
        assert f"\n  {doc_id}: " in printed
    assert "empty: LEFT OUT, empty_document" in printed and "pubmed/doc_adjacent 0 of 1" in printed

    # the rerun rendered nothing again: the empty documents' renderings stayed cached and failed again
    assert {d: p.stat().st_mtime_ns for d, p in layouts.items()} == stamps
    assert again.info["built_by"]["failed_documents"] == failed
    assert again.info["built_by"]["document_warnings"] == warnings and again.fingerprint == bench.fingerprint
