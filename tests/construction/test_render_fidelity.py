"""Rendering fidelity on pages built like the real sources (tests/fixtures/render_sources/, written for
the tests): formulas of every renderer survive the clean-up and hold their source text; content
wider than the viewport is laid out, never dropped silently; images that show nothing are listed
with their URLs, lazy ones resolved to local files; the clean-up records what each rule removed;
the PubMed Central reader chrome and the SEC page furniture are gone from the DOM text and from
the page images.

The browser tests are ``slow`` and are skipped, saying why, where no Chromium is found.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from vldocir.cache import CorruptArtifactError
from vldocir.construction.render import (
    CLUTTER_RULES,
    DEFAULT_CLUTTER_SELECTORS,
    LAYOUT_FILE,
    LAYOUT_VERSION,
    PAGE_RULES,
    RenderConfig,
    Renderer,
    load_layout,
    render_batch,
    render_report,
)
from vldocir.construction.render.browser import page_script
from vldocir.construction.render.layout import RenderedDocument
from vldocir.construction.render.records import fidelity_warnings
from vldocir.construction.render.rules import DEFAULT_PAGE_RULES

SOURCES = Path(__file__).resolve().parents[1] / "fixtures" / "render_sources"
DOCS = {"pmc-article": "pubmed", "sec-proxy": "sec", "formulas": "generic", "wide": "generic"}
PAGE_W = 2000


from helpers import CHROMIUM, NO_CHROMIUM_REASON, needs_chromium  # noqa: E402

# --- helpers -----------------------------------------------------------------------------------


def _image(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _near(pixels: np.ndarray, colour, tol: int = 12) -> np.ndarray:
    return (np.abs(pixels.astype(int) - np.array(colour)) <= tol).all(axis=-1)


def _element(doc, fact: str):
    found = [e for e in doc.elements if e.fact == fact]
    assert len(found) == 1, f"{fact}: {found}"
    return found[0]


def _pixels_of(doc, e) -> np.ndarray:
    px = _image(doc.directory / doc.pages[e.page_index].image)
    x0, y0, x1, y1 = (round(v) for v in e.bbox)
    return px[y0:y1, x0:x1]


def _all_text(doc) -> str:
    return "\n".join(p.dom_text for p in doc.pages) + "\n" + "\n".join(e.text for e in doc.elements)


def _lines(doc) -> list[str]:
    return [line for p in doc.pages for line in p.dom_text.split("\n")]


def _colours_anywhere(doc, colours, tol: int = 12) -> dict:
    """colour -> how many pixels of the document's page images have it (each image decoded once)."""
    found = dict.fromkeys(colours, 0)
    for p in doc.pages:
        px = _image(doc.directory / p.image)
        # only the pixels that are not greyish can be one of these colours: test those alone
        coloured = px[(px.max(axis=-1).astype(int) - px.min(axis=-1)) > 20]
        for colour in colours:
            found[colour] += int(_near(coloured, colour, tol).sum())
    return found


def _rule(doc, rule: str) -> dict:
    found = [r for r in doc.cleanup if r["rule"] == rule]
    assert len(found) == 1, (rule, [r["rule"] for r in doc.cleanup])
    return found[0]


class _Expect(HTMLParser):
    """fact -> data-expect of the formula fixture (read independently of the browser)."""

    def __init__(self):
        super().__init__()
        self.expect: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-expect" in a:
            self.expect[a["data-fact"]] = a["data-expect"]


# --- the rules as configured (no browser) ------------------------------------------------------


def test_every_rule_names_the_page_feature_it_targets():
    for table in (CLUTTER_RULES, PAGE_RULES):
        for source, rules in table.items():
            for rule, feature in rules:
                assert rule and len(feature) >= 8, (source, rule)
    assert DEFAULT_CLUTTER_SELECTORS["wikipedia"][0] == CLUTTER_RULES["wikipedia"][0][0]
    # every page rule named in rules.py exists in page_rules.js, and the other way round
    js = page_script("page_rules.js")
    defined = set(re.findall(r"^  (\w+)\(api\) \{", js, flags=re.M))
    named = {name for rules in PAGE_RULES.values() for name, _ in rules}
    assert defined == named, (defined, named)
    cfg = RenderConfig()
    assert ("mediawiki_math", "*") in cfg.page_rules_for("sec") and ("sec_page_furniture", "sec") in cfg.page_rules_for(
        "sec"
    )
    assert ("sec_page_furniture", "sec") not in cfg.page_rules_for("pubmed")
    assert (".usa-banner", "pubmed") in cfg.clutter_rules_for("pubmed") and ("nav", "*") in cfg.clutter_rules_for(
        "pubmed"
    )
    assert cfg.page_rules == {k: list(v) for k, v in DEFAULT_PAGE_RULES.items()}
    with pytest.raises(ValueError, match="fit_min_text_scale must be in"):
        RenderConfig(fit_min_text_scale=0)


def _layout_of_version(directory: Path, version: int) -> Path:
    layout = {
        "version": version,
        "doc_id": "d",
        "source": "generic",
        "html_path": "x.html",
        "page_width": 2000,
        "page_height": 4000,
        "device_scale_factor": 2.0,
        "document_height": 10,
        "background": [255, 255, 255],
        "n_pages": 0,
        "pages": [],
        "elements": [],
        "warnings": [],
        "timings": {},
        "blocked_requests": [],
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LAYOUT_FILE).write_text(json.dumps(layout))
    return directory / LAYOUT_FILE


def test_a_layout_of_another_version_is_an_error_naming_the_file(tmp_path):
    path = _layout_of_version(tmp_path / "old", 2)
    for read in (load_layout, lambda d: render_report([d])):
        expected = f"layout version 2; this code reads version {LAYOUT_VERSION}"
        with pytest.raises(CorruptArtifactError, match=expected) as error:
            read(tmp_path / "old")
        assert error.value.path == path and "\n" not in str(error.value)
    damaged = _layout_of_version(tmp_path / "damaged", LAYOUT_VERSION)
    damaged.write_text(damaged.read_text().replace('"warnings": [], ', ""))
    with pytest.raises(CorruptArtifactError, match="does not match its checksum"):
        load_layout(tmp_path / "damaged")


def _records_only(doc_id: str, cleanup: list[dict]) -> RenderedDocument:
    return RenderedDocument(
        doc_id, "wikipedia", Path("."), "x.html", 2000, 4000, 2.0, 10, [255] * 3, [], [], cleanup=cleanup
    )


def test_rules_that_kept_a_data_table_are_counted_and_warned_about():
    """A rule that matched an element holding a data table kept it (``kept_table``): the render
    report sums it per rule over the documents, and each document's warnings name the rule."""
    navbox = {"rule": ".navbox", "source": "wikipedia", "kind": "selector", "removed": 3, "changed": 0}
    first = [
        {**navbox, "kept_table": 2, "content": {"paragraph": 1}, "kept_samples": ["Largest cities Rank City"]},
        {
            "rule": "nav",
            "source": "*",
            "kind": "selector",
            "removed": 1,
            "content": {},
        },  # an older record: no kept_table
    ]
    second = [{**navbox, "removed": 0, "kept_table": 1, "content": {}, "kept_samples": []}]
    report = render_report([_records_only("a", first), _records_only("b", second)])
    assert report["cleanup"]["selector:.navbox"] == {
        "removed": 3,
        "kept_formula": 0,
        "kept_table": 3,
        "changed": 0,
        "documents": 1,  # where it removed or changed anything
        "content": {"paragraph": 1},
    }
    assert report["cleanup"]["selector:nav"]["kept_table"] == 0
    assert fidelity_warnings({"cleanup": first}) == [
        "selector rule '.navbox' kept 2 element(s) holding a data table (\"Largest cities Rank City\")"
    ]
    assert fidelity_warnings({"cleanup": second}) == ["selector rule '.navbox' kept 1 element(s) holding a data table"]
    assert fidelity_warnings({"cleanup": first[1:]}) == []


@pytest.mark.slow
@needs_chromium
def test_the_batch_renders_a_layout_of_another_version_again(tmp_path):
    html = Path(__file__).resolve().parents[1] / "fixtures" / "render" / "malformed.html"
    out = tmp_path / "out"
    docs = [("a", "generic", html), ("b", "generic", html)]
    cfg = RenderConfig(workers=1)
    assert render_batch(docs, out, cfg, progress=False).rendered == ["a", "b"]
    stale = json.loads((out / "a" / LAYOUT_FILE).read_text())
    (out / "a" / LAYOUT_FILE).write_text(json.dumps({**stale, "version": LAYOUT_VERSION - 1}))
    again = render_batch(docs, out, cfg, progress=False)
    assert again.rendered == ["a"] and again.skipped == ["b"], again.errors
    assert load_layout(out / "a").pages
    assert json.loads((out / "a" / LAYOUT_FILE).read_text())["version"] == LAYOUT_VERSION


# --- rendering the fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM_REASON)
    out = tmp_path_factory.mktemp("fidelity")
    report = render_batch(
        [(d, s, SOURCES / d / "index.html") for d, s in DOCS.items()], out, RenderConfig(timeout_s=60), progress=False
    )
    assert report.failed == [], report.errors
    return {d: load_layout(out / d) for d in DOCS}


@pytest.mark.slow
@needs_chromium
def test_formulas_survive_and_hold_their_source_text(rendered):
    doc = rendered["formulas"]
    parser = _Expect()
    parser.feed((SOURCES / "formulas" / "index.html").read_text())
    assert len(parser.expect) == 10
    for fact, expected in parser.expect.items():
        e = _element(doc, fact)
        assert e.element_type == "formula" and e.text == expected, (fact, e.text)
        # something is drawn in the formula's box
        assert (_pixels_of(doc, e) < 128).any(), fact
    # the title's formula is drawn and part of the title's text (it was deleted once: "An -Regularized")
    title = next(e for e in doc.elements if e.element_type == "headline")
    assert title.text == "An ℓ1-Regularized Model", title.text
    assert "f-hidden" not in {e.fact for e in doc.elements}  # a hidden copy draws nothing: not recorded
    # the renderers' aria-hidden renderings were kept by the formula rule, and no rule removed a formula
    aria = _rule(doc, '[aria-hidden="true"]:not(svg *)')
    assert aria["removed"] == 0 and aria["kept_formula"] >= 6, aria
    assert all(r["content"].get("formula", 0) == 0 for r in doc.cleanup), doc.cleanup
    assert _rule(doc, "mediawiki:show_mathml")["changed"] == 1
    assert _rule(doc, "mediawiki:dead_fallback_image")["removed"] == 1
    assert _rule(doc, "katex:unstyled_html")["removed"] == 1
    assert doc.images["failed"] == []  # the dead MediaWiki fallback image went with its rule


@pytest.mark.slow
@needs_chromium
def test_wide_content_is_scaled_into_the_page(rendered):
    doc = rendered["wide"]
    assert doc.overflow == [] and not doc.warnings, (doc.overflow, doc.warnings)
    for e in doc.elements:
        assert 0 <= e.bbox[0] < e.bbox[2] <= PAGE_W, (e.fact, e.bbox)
    scaled = doc.fit["scaled"]
    tags = [s["tag"] for s in scaled]
    assert tags.count("img") == 4 and tags.count("table") >= 1 and {"svg", "pre", "div"} <= set(tags), scaled
    # the three panels are scaled together: same scale, all on the page, side by side, each drawn
    panels = [_element(doc, f"panel-{k}") for k in "abc"]
    assert len({round(p.bbox[2] - p.bbox[0]) for p in panels}) == 1
    assert panels[0].bbox[2] <= panels[1].bbox[0] and panels[1].bbox[2] <= panels[2].bbox[0]
    for p in panels:
        assert _near(_pixels_of(doc, p)[2:-2, 2:-2], (150, 60, 170)).all(), p.fact
    # the red end of the wide chart is on the page
    svg = _element(doc, "wide-svg")
    chart = _pixels_of(doc, svg)
    assert _near(chart[5:-5, -20:-5], (200, 30, 60)).all() and _near(chart[5:-5, 5:20], (30, 140, 70)).all()
    text = _all_text(doc)
    assert "END-OF-LINE" in text and "LAST-LINE of the clipped box." in text
    assert doc.fit["opened"] == 2  # the horizontal and the vertical scroll boxes
    # the element hidden off to the right by absolute positioning is clutter, not content
    assert "OFFSCREEN-RIGHT" not in text
    assert _rule(doc, "invisible")["removed"] == 1


@pytest.mark.slow
@needs_chromium
def test_without_fitting_the_overflow_is_listed(tmp_path):
    """The control: with fit_wide off, what reaches past the page is listed (the third panel,
    entirely past the right edge, as dropped), and nothing is removed for it."""
    with Renderer(RenderConfig(timeout_s=60, fit_wide=False)) as r:
        doc = r.render("wide", "generic", SOURCES / "wide" / "index.html", tmp_path)
    over = {o["element_id"]: o for o in doc.overflow}
    facts = {e.element_id: e.fact for e in doc.elements}
    listed = {facts.get(i) for i in over}
    assert {"wide-table", "wide-svg", "wide-img", "long-pre"} <= listed, doc.overflow
    dropped = [o for o in doc.overflow if o["dropped"]]
    assert len(dropped) == 1 and dropped[0]["element_type"] == "image", doc.overflow  # panel c
    assert all(o["beyond_px"] > 1 for o in doc.overflow)
    assert any("reach past the page's sides (1 not on the page at all)" in w for w in doc.warnings), doc.warnings
    assert doc.fit == {"opened": 0, "scaled": []}


@pytest.mark.slow
@needs_chromium
def test_lazy_images_resolve_and_failed_ones_are_listed(rendered):
    doc = rendered["pmc-article"]
    assert doc.images["resolved_lazy"] == 3  # data-src, data-srcset, a remote src beside a local data-src
    failed = doc.images["failed"]
    assert [(f["status"], f["url"].rsplit("/", 2)[-2:]) for f in failed] == [("lazy", ["figures", "fig3.png"])], failed
    assert failed[0]["element_id"] and failed[0]["alt"] == "Clock mutants"
    assert doc.warnings == ["1 image(s) show nothing: lazy 1"], doc.warnings
    images = [e for e in doc.elements if e.element_type == "image"]
    colours = [(20, 160, 60), (40, 70, 200), None, (200, 120, 20)]  # fig1, fig2-large, fig3 (missing), fig4
    assert len(images) == 4
    for e, colour in zip(images, colours, strict=True):
        if colour is not None:
            assert _near(_pixels_of(doc, e)[2:-2, 2:-2], colour).all(), e.element_id
    sec = rendered["sec-proxy"]
    assert [(f["status"], f["url"].rsplit("/", 1)[-1]) for f in sec.images["failed"]] == [("missing", "logo.jpg")]


PMC_CHROME = {  # text that must be gone -> the colour its element had
    "An official website of the United States government": (255, 215, 0),
    "Welcome to the new PMC website!": (0, 188, 212),
    "Log in": (0, 0, 128),
    "PMC home page": (128, 0, 0),
    "Facebook": (233, 30, 99),
    "View on publisher site": (255, 87, 34),
    "Download .nbib": (0, 150, 136),
    "Taxonomy": (121, 85, 72),
    "Open in a new tab": (255, 0, 255),
    "Follow NCBI": (96, 125, 139),
}


@pytest.mark.slow
@needs_chromium
def test_pmc_reader_chrome_is_gone_from_text_and_image(rendered):
    doc = rendered["pmc-article"]
    text, lines = _all_text(doc), _lines(doc)
    painted = _colours_anywhere(doc, [*PMC_CHROME.values(), (156, 39, 176)], tol=6)
    for chrome, colour in PMC_CHROME.items():
        assert chrome not in text, chrome
        assert painted[colour] == 0, (chrome, colour)
    for control in ("Done", "Links", "Copy", "Cite", "Go to:", "Skip to main content", "Search in PMC", "Dismiss"):
        assert control not in lines, control
    assert painted[(156, 39, 176)] == 0  # the "Done" / "Links" buttons
    # the article is all there
    assert lines[:3] == [
        "Plant Cell Rep. 2021 Mar 4;12:345. doi: 10.0000/example.2021.345",
        "Circadian control of leaf expansion in a model plant",
        "Ada Lindqvist, Tomas Ferreira, Mei Nakamura",
    ]
    for kept in (
        "Abstract",
        "1. Introduction",
        "2. Results",
        "3. Discussion",
        "Wild type 12.4 7.9",
        "Leaf area of plants grown in long days (top) and short days (bottom).",
        "The clock gates growth to the hours when water is plentiful.",
    ):
        assert kept in lines, kept
    assert [e.text for e in doc.elements if e.element_type == "formula"] == [r"k_{\mathrm{on}}"]
    assert [e.element_type for e in doc.elements].count("table_row") == 3
    # each rule's removals are recorded; none held a formula, a data table or a figure
    for rule in (
        ".usa-banner",
        ".usa-site-alert",
        ".ncbi-header",
        ".pmc-header",
        ".pmc-share",
        ".pmc-sidenav",
        "[role=dialog]:not(h1, h2, h3, h4, h5, h6)",
        ".portlet",
        ".ncbi-footer",
        ".usa-skipnav",
        "[role=search]",
    ):
        assert _rule(doc, rule)["removed"] == 1, rule
    controls = _rule(doc, "pubmed:reader_control")
    assert controls["removed"] == 4 and controls["kind"] == "page_rule" and controls["source"] == "pubmed"
    for r in doc.cleanup:
        assert not {"formula", "table", "figure"} & set(r["content"]), r


SEC_FURNITURE = {
    "2024 PROXY STATEMENT": (31, 78, 121),
    "(continued)": (128, 128, 0),
    "page number": (178, 34, 34),
    "page-break rule": (153, 0, 153),
}


@pytest.mark.slow
@needs_chromium
def test_sec_page_furniture_is_gone_from_text_and_image(rendered):
    doc = rendered["sec-proxy"]
    lines = _lines(doc)
    assert "2024 PROXY STATEMENT" not in _all_text(doc)
    assert "Election of Directors (continued)" not in lines and "Continued on next page" not in lines
    assert not [line for line in lines if re.fullmatch(r"\d", line)], lines  # the page numbers 1-6
    painted = _colours_anywhere(doc, list(SEC_FURNITURE.values()), tol=10)
    for what, colour in SEC_FURNITURE.items():
        assert painted[colour] == 0, what
    # what only looks like furniture stays: a year, section numbers, table cells
    for kept in (
        "2019",
        "(Proposal No. 1)",
        "(Proposal No. 2)",
        "Raj Patel 3 (continued)",
        "12",
        "Meetings held",
        "Audit fees $812,000 $790,000",
        "NORTHWIND HOLDINGS, INC.",
        "By order of the board of directors.",
    ):
        assert kept in lines, kept
    assert [e.element_type for e in doc.elements].count("table") == 3
    removed = {r["rule"]: r["removed"] for r in doc.cleanup if r["kind"] == "page_rule"}
    # running heads: six of "2024 PROXY STATEMENT", three footers whose last number follows the pages
    assert removed == {"sec:running_head": 9, "sec:page_number": 3, "sec:continued": 2, "sec:page_break": 7}, removed
    assert not [line for line in lines if "Proxy Statement |" in line]
    for r in doc.cleanup:
        assert not {"formula", "table", "figure"} & set(r["content"]), r


@pytest.mark.slow
@needs_chromium
def test_cuts_run_through_background_rows(rendered):
    """No cut passes through a text line or a table rule: the last content row of a page and the
    first row of the next are background-coloured."""
    for doc in rendered.values():
        bg = np.array(doc.background)
        for p, q in pairwise(doc.pages):
            last = _image(doc.directory / p.image)[p.content_height - 1].astype(int)
            first = _image(doc.directory / q.image)[0].astype(int)
            assert not (np.abs(last - bg) > 8).any() and not (np.abs(first - bg) > 8).any(), (doc.doc_id, p.page_index)


@pytest.mark.slow
@needs_chromium
def test_render_report_aggregates_the_records(rendered):
    report = render_report(rendered.values())
    assert report["documents"] == 4
    assert {t: report["removed_content"][t] for t in ("formula", "table", "figure")} == {
        "formula": 0,
        "table": 0,
        "figure": 0,
    }
    assert report["formulas"] == {"elements": 11, "empty": 0}
    assert report["images"]["failed"] == {"lazy": 1, "missing": 1}
    assert set(report["images"]["by_document"]) == {"pmc-article", "sec-proxy"}
    assert report["images"]["resolved_lazy"] == 3
    assert report["overflow"]["elements"] == 0 and report["fit"]["documents"] == 1
    assert report["cleanup"]["page_rule:sec:running_head"]["removed"] == 9
    assert report["cleanup"]["selector:.usa-banner"] == {
        "removed": 1,
        "kept_formula": 0,
        "kept_table": 0,
        "changed": 0,
        "documents": 1,
        "content": {"image": 1},
    }
    json.dumps(report)  # fit for benchmark.json
