"""Clean-up rules on pages that trap them (tests/fixtures/render/rules_*.html, written for the tests):
the SEC running-head rule tells content that recurs at page edges (a letter's date, a question asked
again) from page furniture and removes page headers laid out as tables, never a data table or a data
cell, also one-row header and footer tables with a cell that is content elsewhere, never a one-row
table that does not repeat; the navbox rule keeps a data table and says so in the removal record; the
PubReader chrome of a PubMed Central article goes (its hidden welcome trigger too) and the article
stays; Wikipedia's 'v t e' navbars go, and so do list items and lists that a removal leaves empty.

The documents are rendered once (module fixture). The browser tests are ``slow`` and are skipped,
saying why, where no Chromium is found.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from vldocir.construction.render import RenderConfig, load_layout, render_batch

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "render"
DOCS = {  # doc_id -> (source, file)
    "sec": ("sec", "rules_sec_furniture.html"),
    "navbox": ("wikipedia", "rules_navbox_table.html"),
    "pubreader": ("pubmed", "rules_pubreader.html"),
    "sec_tables": ("sec", "rules_sec_table_heads.html"),
    "lists": ("wikipedia", "rules_emptied_lists.html"),
}

from helpers import CHROMIUM, NO_CHROMIUM_REASON  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM_REASON)]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM_REASON)
    out = tmp_path_factory.mktemp("rule_defects")
    docs = [(doc_id, source, DATA / name) for doc_id, (source, name) in DOCS.items()]
    report = render_batch(docs, out, RenderConfig(timeout_s=60), progress=False)
    assert report.failed == [], report.errors
    return {doc_id: load_layout(out / doc_id) for doc_id in DOCS}


def _lines(doc) -> list[str]:
    return [line for p in doc.pages for line in p.dom_text.split("\n")]


def _painted(doc, colour, tol: int = 10) -> int:
    """How many pixels of the document's page images have ``colour``."""
    from PIL import Image

    n = 0
    for p in doc.pages:
        with Image.open(doc.directory / p.image) as im:
            px = np.asarray(im.convert("RGB")).astype(int)
        n += int((np.abs(px - np.array(colour)) <= tol).all(axis=-1).sum())
    return n


def _rules(doc, kind: str | None = None) -> dict[str, dict]:
    return {r["rule"]: r for r in doc.cleanup if kind is None or r["kind"] == kind}


def test_sec_running_heads_are_told_from_content(rendered):
    doc = rendered["sec"]
    lines = _lines(doc)
    # content that recurs at page edges stays, every time: the date (five times, three of them next
    # to a page break), the h3 question heading its answer at three page tops, the bold question at
    # three page tops and once inside a page
    assert lines.count("April 1, 2024") == 5, [line for line in lines if "2024" in line]
    assert lines.count("How do I vote my shares?") == 3
    assert lines.count("Who can vote at the annual meeting?") == 4
    assert lines[:2] == [
        "NORTHWIND HOLDINGS, INC.",
        "NOTICE OF 2024 ANNUAL MEETING OF SHAREHOLDERS AND PROXY STATEMENT",
    ]
    # the page header laid out as a table goes (nine pages), with the page numbers and breaks
    assert "2024 PROXY STATEMENT" not in "\n".join(lines + [e.text for e in doc.elements])
    assert not [line for line in lines if re.fullmatch(r"\d", line)], lines
    removed = {name: r["removed"] for name, r in _rules(doc, "page_rule").items()}
    assert removed == {"sec:running_head": 9, "sec:page_number": 9, "sec:page_break": 9}, removed
    assert _rules(doc)["sec:running_head"]["content"] == {"layout_table": 9}
    assert _painted(doc, (31, 78, 121)) == 0 and _painted(doc, (178, 34, 34)) == 0 and _painted(doc, (153, 0, 153)) == 0
    # small data tables whose header cells recur at three page bottoms stay whole
    assert [e.element_type for e in doc.elements].count("table") == 3
    for row in ("Director Age", "Luis Ortega 55", "Mei Tan 48", "Raj Patel 52"):
        assert row in lines, row
    assert lines.count("Director Age") == 3
    for r in doc.cleanup:
        assert "table" not in r["content"] and r["kept_table"] == 0, r


def test_the_navbox_rule_keeps_a_data_table_and_records_it(rendered):
    doc = rendered["navbox"]
    lines = _lines(doc)
    assert "Largest cities in Freedonia" in lines
    for row in ("Rank City Region Population", "1 Marxburg North 1,204,500", "4 Chicoton Valley 150,030"):
        assert row in lines, row
    assert [e.element_type for e in doc.elements].count("table") == 1
    assert _painted(doc, (0, 128, 128)) > 1000  # the data table's cells are drawn
    # the navboxes of link lists go, with or without role=navigation
    assert not [line for line in lines if "Rivers of" in line or "Regions of" in line or "Zeppo" in line], lines
    assert _painted(doc, (255, 140, 0)) == 0
    navbox = _rules(doc)[".navbox"]
    assert (navbox["removed"], navbox["kept_table"]) == (1, 1), navbox
    assert navbox["kept_samples"][0].startswith("Largest cities in Freedonia"), navbox
    assert navbox["content"] == {}, navbox  # a link table holds no data
    assert _rules(doc)["[role=navigation]"]["removed"] == 1
    for r in doc.cleanup:
        assert "table" not in r["content"], r


PUBREADER_CHROME = {
    "Your browser does not support": (255, 215, 0),
    "Alternative formats": (0, 188, 212),
    "Settings & Help": (0, 188, 212),
    "Facebook": (233, 30, 99),
    "PDF (707K)": (121, 85, 72),
    "logo": (255, 0, 128),
}


def test_pubreader_chrome_goes_and_the_article_stays(rendered):
    doc = rendered["pubreader"]
    text = "\n".join(_lines(doc) + [e.text for e in doc.elements])
    for chrome, colour in PUBREADER_CHROME.items():
        if chrome != "logo":
            assert chrome not in text, chrome
        assert _painted(doc, colour) == 0, chrome
    for chrome in ("Twitter", "Email", "Share", "Switch to classic view", "Download", "ePub (beta)", "A+"):
        assert chrome not in text, chrome
    assert not [e for e in doc.elements if e.element_type == "image"], "the logo SVG is drawn"
    lines = _lines(doc)
    # the welcome dialog's trigger, a hidden link reading 't', is no stray letter above the journal
    assert "t" not in lines and "t" not in [e.text for e in doc.elements]
    assert _painted(doc, (76, 175, 80)) == 0
    assert lines[:4] == [
        "Plant Soil Rep.",
        "Example Press",
        "Root hairs follow the water table in dry soils",
        "Lena Okafor, Paul Brandt, Yui Sato",
    ], lines[:6]
    for kept in ("Abstract", "Results", "Table 1.", "Plot Hair length (mm) Depth (cm)", "Dry 1.8 42", "Wet 0.9 18"):
        assert kept in lines, kept
    assert lines[-1] == "Plants in dry plots spent more of their carbon on roots than on leaves."
    rules = _rules(doc)
    assert rules[".jr-unsupported"]["removed"] == 1 and rules["#jr-ui"]["removed"] == 1
    assert rules["#jr-welcome-trigger"]["removed"] == 1 and rules["#jr-welcome-trigger"]["samples"] == ["t"]
    # the download, ePub and welcome dialogs, each with its body
    assert rules["pubmed:dialog_with_body"]["removed"] == 3 and "pubmed:dialog_title" not in rules
    assert rules["pubmed:share_links"]["removed"] == 1, rules["pubmed:share_links"]  # the box with its three links
    for r in doc.cleanup:
        assert not {"formula", "table", "figure"} & set(r["content"]) and r["kept_table"] == 0, r


def test_sec_one_row_table_heads_go_though_a_cell_is_content_elsewhere(rendered):
    doc = rendered["sec_tables"]
    lines = _lines(doc)
    text = "\n".join(lines + [e.text for e in doc.elements])
    # the header table ('Table of Contents' | '2024 PROXY STATEMENT') and the footer table (company
    # name | page number) of seven pages go, though the contents' title and the signature match a cell
    assert "2024 PROXY STATEMENT" not in text and "Table of Contents" not in text, text
    assert not [line for line in lines if re.fullmatch(r"(NORTHWIND HOLDINGS, INC\. )?\d", line)], lines
    assert _painted(doc, (31, 78, 121)) == 0 and _painted(doc, (178, 34, 34)) == 0
    rules = _rules(doc, "page_rule")
    assert rules["sec:running_head"]["removed"] == 7 and rules["sec:running_head"]["content"] == {"layout_table": 7}
    assert rules["sec:page_number"]["removed"] == 7 and rules["sec:page_number"]["content"] == {"layout_table": 7}
    assert rules["sec:page_break"]["removed"] == 7
    # what matches a cell stays where it is content, and so do one-row tables that do not repeat: the
    # contents' rows (the last two at a page bottom, their numbers no page numbers) and two at page edges
    assert lines.count("NORTHWIND HOLDINGS, INC.") == 2 and lines.count("TABLE OF CONTENTS") == 1
    for kept in (
        "Proxy Summary 3",
        "Proposal No. 2: Ratification of Auditors 5",
        "Other Matters 7",
        "PROPOSAL NO. 2 RATIFICATION OF THE APPOINTMENT OF INDEPENDENT AUDITORS",
        "The Board recommends a vote FOR Proposal No. 2.",
    ):
        assert kept in lines, kept
    assert [e.element_type for e in doc.elements].count("table") == 6
    assert _painted(doc, (0, 128, 128)) > 1000
    for r in doc.cleanup:
        assert "table" not in r["content"] and r["kept_table"] == 0, r


def test_navbars_and_list_items_left_empty_go(rendered):
    doc = rendered["lists"]
    lines = _lines(doc)
    # no 'v t e' list (in a sidebar, in a kept navbox's title), no bullet with nothing after it
    assert not {"v", "t", "e", "v t e"} & set(lines + [e.text for e in doc.elements]), lines
    assert _painted(doc, (255, 0, 255)) == 0
    rules = _rules(doc)
    assert rules[".navbar"]["removed"] == 2 and rules[".navbar"]["kind"] == "selector"
    # the four print-hidden links go by their rule, with the four items (one through the paragraph the link
    # was all of) and the one list they emptied
    noprint = {r["kind"]: r["removed"] for r in doc.cleanup if r["rule"] == ".noprint"}
    assert noprint == {"selector": 4, "emptied": 5}, noprint
    # the lists' other items, an item holding only a picture, the navbox's data table and the sidebar stay
    for kept in (
        "The flag: three bands of green, white and gold.",
        "Official website of Freedonia",
        "Freedonia at the Atlas of Places",
        "Largest cities in Freedonia",
        "4 Chicoton Valley 150,030",
        "Constitution Parliament",
    ):
        assert kept in lines, kept
    assert [e.element_type for e in doc.elements].count("image") == 1
    assert [e.element_type for e in doc.elements].count("list") == 2
    assert _rules(doc)[".navbox"]["kept_table"] == 1
