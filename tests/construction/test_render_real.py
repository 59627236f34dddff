"""The renderer on real pages nobody here wrote (``../shared/real-html/``: Wikipedia, arXiv by
LaTeXML, an SEC proxy statement; see its README). The pages are read where they lie, never copied
into the repository; the tests skip, saying why, when the folder is absent. ``$VLDOCIR_REAL_HTML``
names another copy of the folder.

Each document is rendered once (module fixture). Checked on every one: no formula element is
empty and every formula source of the HTML (MathJax's TeX, MathML alttext) is some formula's text;
no element lies beyond the page's sides and nothing is listed as overflowing; every image that
shows nothing is listed with a status that the file system confirms; no clean-up rule removed a
formula, data table or figure; every cut between pages runs through background-coloured rows.
"""

from __future__ import annotations

import html
import os
import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from vldocir.construction.render import (
    ChromiumNotFoundError,
    RenderConfig,
    find_chromium,
    load_layout,
    render_batch,
    render_report,
)
from vldocir.construction.render.images import local_path

REAL = Path(os.environ.get("VLDOCIR_REAL_HTML") or Path(__file__).resolve().parents[3] / "shared" / "real-html")
DOCS = {  # folder -> source
    "wikipedia-a": "wikipedia",
    "wikipedia-b": "wikipedia",
    "arxiv-1708.00137": "arxiv",
    "arxiv-1707.08043": "arxiv",
    "sec-def14a-893739": "sec",
}


def _skip_reason() -> str | None:
    if not REAL.is_dir():
        return f"the real pages are absent ({REAL}; set $VLDOCIR_REAL_HTML to a copy of ../shared/real-html)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    try:
        find_chromium(None)
    except ChromiumNotFoundError as exc:
        return f"no Chromium to render with: {exc}"
    return None


SKIP = _skip_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    docs = [(d, s, REAL / d / "index.html") for d, s in DOCS.items() if (REAL / d / "index.html").is_file()]
    if not docs:
        pytest.skip(f"no real page found under {REAL}")
    report = render_batch(docs, out, RenderConfig(timeout_s=120), progress=False)
    assert report.failed == [], report.errors
    return {d: load_layout(out / d) for d, _, _ in docs}


def _doc(rendered, name):
    if name not in rendered:
        pytest.skip(f"{REAL / name} is absent")
    return rendered[name]


def _sources(name: str) -> list[str]:
    """The formula sources in the HTML, read with regular expressions (independently of the
    browser): MathJax's TeX (aria-label of mjx-math) and MathML's alttext."""
    text = (REAL / name / "index.html").read_text(encoding="utf-8", errors="replace")
    found = re.findall(r'class="mjx-math"[^>]*?aria-label="([^"]*)"', text)
    found += re.findall(r'<math\b[^>]*?alttext="([^"]*)"', text)
    return [" ".join(html.unescape(s).split()) for s in found if s.strip()]


@pytest.mark.parametrize("name", list(DOCS))
def test_formulas_are_kept_with_their_text(rendered, name):
    doc = _doc(rendered, name)
    formulas = [e for e in doc.elements if e.element_type == "formula"]
    assert all(e.text.strip() for e in formulas), [e.element_id for e in formulas if not e.text.strip()]
    sources = _sources(name)
    texts = " ".join(e.text for e in formulas)
    missing = [s for s in sources if s not in texts]
    assert not missing, (len(missing), len(sources), missing[:5])
    if name.startswith("arxiv") or name == "wikipedia-a":
        assert len(sources) > 50 and formulas
    print(f"\n{name}: {len(formulas)} formula elements, {len(sources)} formula sources in the HTML, all kept")


@pytest.mark.parametrize("name", list(DOCS))
def test_nothing_lies_beyond_the_page_sides(rendered, name):
    doc = _doc(rendered, name)
    assert doc.overflow == [], doc.overflow
    for e in doc.elements:
        assert e.doc_bbox[0] >= 0 and e.doc_bbox[2] <= doc.page_width, (e.element_id, e.doc_bbox)


@pytest.mark.parametrize("name", list(DOCS))
def test_images_that_show_nothing_are_listed(rendered, name):
    doc = _doc(rendered, name)
    root = REAL / name
    for f in doc.images.get("failed", []):
        path = local_path(f["url"], root)
        if f["status"] == "missing":
            assert path is not None and not path.exists(), f
        elif f["status"] == "blocked":
            assert path is None, f
        assert f["element_id"], f
    if name.startswith("sec"):
        # the filing's images were not shipped: every one is listed as missing
        names = re.findall(r'<img[^>]*?src="([^"]+)"', (root / "index.html").read_text(errors="replace"))
        assert names and all(not (root / n).exists() for n in names)
        listed = sorted(f["url"].rsplit("/", 1)[-1] for f in doc.images["failed"])
        assert listed == sorted(names) and {f["status"] for f in doc.images["failed"]} == {"missing"}
        assert any("image(s) show nothing: missing 6" in w for w in doc.warnings), doc.warnings


@pytest.mark.parametrize("name", list(DOCS))
def test_no_rule_removes_a_formula_table_or_figure(rendered, name):
    doc = _doc(rendered, name)
    assert doc.cleanup, "no removal record"
    for r in doc.cleanup:
        assert not {"formula", "table", "figure"} & set(r["content"]), r


@pytest.mark.parametrize("name", list(DOCS))
def test_every_cut_runs_through_background_rows(rendered, name):
    """The last row of each page's content and the first row of the next page are background:
    no cut passes through a text line or a table rule."""
    from PIL import Image

    doc = _doc(rendered, name)
    bg = np.array(doc.background)
    bad = []
    for p, q in pairwise(doc.pages):
        with Image.open(doc.directory / p.image) as a, Image.open(doc.directory / q.image) as b:
            last = np.asarray(a.convert("RGB"))[p.content_height - 1].astype(int)
            first = np.asarray(b.convert("RGB"))[0].astype(int)
        for row, where in ((last, "end"), (first, "start")):
            if (np.abs(row - bg) > 8).any():
                bad.append((p.page_index, where, p.cut_reason))
    assert not bad, bad


def test_per_source_rules_on_the_real_pages(rendered):
    """What each source's rules are for, on its real page."""
    if "sec-def14a-893739" in rendered:
        doc = rendered["sec-def14a-893739"]
        removed = {r["rule"]: r for r in doc.cleanup if r["kind"] == "page_rule"}
        assert removed["sec:page_break"]["removed"] == 32  # every <hr style="page-break-after:always">
        assert removed["sec:page_number"]["removed"] >= 29  # the footers 1-29
        lines = [line for p in doc.pages for line in p.dom_text.split("\n")]
        assert not [line for line in lines if re.fullmatch(r"\d{1,2}", line)]
        assert "(Proposal No. 1)" in lines and "(Proposal No. 2)" in lines  # headings, no running head
        assert "sec:running_head" not in removed
    for name in ("wikipedia-a", "wikipedia-b"):
        if name in rendered:
            text = "\n".join(p.dom_text for p in rendered[name].pages)
            for chrome in (
                "[edit]",
                "Jump to",
                "From Wikipedia, the free encyclopedia",
                "Retrieved from",
                "Log in",
                "Categories:",
            ):
                assert chrome not in text, (name, chrome)
    if "wikipedia-a" in rendered:
        doc = rendered["wikipedia-a"]
        shown = {r["rule"]: r for r in doc.cleanup}
        assert (
            shown["mediawiki:show_mathml"]["changed"] == 66 and shown["mediawiki:dead_fallback_image"]["removed"] == 66
        )
    for name in ("arxiv-1708.00137", "arxiv-1707.08043"):
        if name in rendered:
            doc = rendered[name]
            aria = next(r for r in doc.cleanup if r["rule"].startswith('[aria-hidden="true"]'))
            assert aria["removed"] == 0 and aria["kept_formula"] > 400, aria  # MathJax's renderings
            assert "Generated by" not in "\n".join(p.dom_text for p in doc.pages)
    report = render_report(rendered.values())
    assert {t: report["removed_content"][t] for t in ("formula", "table", "figure")} == {
        "formula": 0,
        "table": 0,
        "figure": 0,
    }
    print(
        "\nrender report:",
        {k: report[k] for k in ("formulas", "fit", "overflow", "removed_content")},
        "images failed:",
        report["images"]["failed"],
    )
