"""The synthetic HTML document generator: determinism, facts, per-source look, quirks, length."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from vldocir.construction.html_docs import (
    CLUTTER_SELECTORS,
    ELEMENT_TYPES,
    EXTERNAL_IMAGE_URL,
    QUIRKS,
    HtmlCorpusSpec,
    SyntheticDocument,
    write_corpus,
    write_document,
)
from vldocir.construction.synthetic import SOURCE_DOMAINS

SMALL_PAGES = {"wikipedia": (1, 3), "arxiv": (3, 4), "pubmed": (3, 4), "sec": (4, 5)}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Page(HTMLParser):
    """Collects what the tests look at: every element's tag and attributes, the text of each
    ``data-fact`` element, and the column headers of each table. Tolerates unclosed tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.fact_ids: list[str] = []
        self.fact_tag: dict[str, str] = {}
        self.fact_attrs: dict[str, dict[str, str]] = {}
        self.fact_text: dict[str, str] = {}
        self.tables: list[dict] = []  # {"class": ..., "headers": [...]}
        self.text: list[str] = []
        self._open: list[list] = []  # [fact_id, tag, depth, parts]
        self._in_thead = False
        self._th: list[str] | None = None
        self.starts: dict[str, int] = {}
        self.ends: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attrs))
        self.starts[tag] = self.starts.get(tag, 0) + 1
        if tag in VOID:
            return
        for entry in self._open:
            if entry[1] == tag:
                entry[2] += 1
        if "data-fact" in attrs:
            fid = attrs["data-fact"]
            self.fact_ids.append(fid)
            self.fact_tag[fid] = tag
            self.fact_attrs[fid] = attrs
            self._open.append([fid, tag, 1, []])
        if tag == "table":
            self.tables.append({"class": attrs.get("class", ""), "headers": []})
        elif tag == "thead":
            self._in_thead = True
        elif tag == "th" and self._in_thead:
            self._th = []

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        self.ends[tag] = self.ends.get(tag, 0) + 1
        for entry in list(self._open):
            if entry[1] == tag:
                entry[2] -= 1
                if entry[2] == 0:
                    self.fact_text[entry[0]] = "".join(entry[3])
                    self._open.remove(entry)
        if tag == "thead":
            self._in_thead = False
        elif tag == "th" and self._th is not None:
            self.tables[-1]["headers"].append("".join(self._th).strip())
            self._th = None

    def handle_data(self, data):
        self.text.append(data)
        for entry in self._open:
            entry[3].append(data)
        if self._th is not None:
            self._th.append(data)

    # helpers
    def having(self, tag: str | None = None, **attrs: str) -> list[dict[str, str]]:
        """Elements of ``tag`` whose attributes contain the given values (``class_`` matches one class)."""
        out = []
        for t, a in self.elements:
            if tag is not None and t != tag:
                continue
            ok = True
            for key, want in attrs.items():
                key = key.rstrip("_").replace("_", "-")
                if key == "class":
                    ok &= want in a.get("class", "").split()
                else:
                    ok &= a.get(key) == want
            if ok:
                out.append(a)
        return out


def parse(doc: SyntheticDocument) -> _Page:
    page = _Page()
    page.feed(doc.html_path.read_text(encoding="utf-8"))
    page.close()
    return page


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[SyntheticDocument]]:
    root = tmp_path_factory.mktemp("html_corpus")
    spec = HtmlCorpusSpec(seed=11, documents=dict.fromkeys(SOURCE_DOMAINS, 2), pages=SMALL_PAGES)
    return root, write_corpus(spec, root)


def _one(tmp_path, source: str, pages: int, seed: int = 0, **kw) -> SyntheticDocument:
    domain = SOURCE_DOMAINS[source][0]
    return write_document(np.random.default_rng(seed), f"{source}-t{pages}", source, domain, pages, tmp_path, **kw)


# ----------------------------------------------------------------------------------------------
# determinism and manifest
# ----------------------------------------------------------------------------------------------


def test_same_seed_gives_byte_identical_files_and_different_seeds_differ(tmp_path):
    spec = HtmlCorpusSpec(seed=5, documents=dict.fromkeys(SOURCE_DOMAINS, 1), pages=SMALL_PAGES, quirks=True)
    write_corpus(spec, tmp_path / "a")
    write_corpus(spec, tmp_path / "b")
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a.keys() == b.keys() and any(k.endswith(".png") for k in a)
    assert a == b
    spec.seed = 6
    write_corpus(spec, tmp_path / "c")
    c = _tree(tmp_path / "c")
    html_files = [k for k in a if k.endswith("index.html")]
    assert len(html_files) == 4
    assert all(a[k] != c.get(k) for k in html_files), "another seed must give other documents"


def test_manifest_lists_documents_with_relative_paths_and_facts(corpus):
    root, docs = corpus
    manifest = json.loads((root / "corpus.json").read_text())
    assert manifest["seed"] == 11
    assert manifest["clutter_selectors"] == {s: list(v) for s, v in CLUTTER_SELECTORS.items()}
    entries = {d["doc_id"]: d for d in manifest["documents"]}
    assert set(entries) == {d.doc_id for d in docs} and len(docs) == 8
    for doc in docs:
        entry = entries[doc.doc_id]
        assert (root / entry["html"]).resolve() == doc.html_path.resolve()
        assert not Path(entry["html"]).is_absolute()
        assert (entry["source"], entry["domain"], entry["title"], entry["entity"]) == (
            doc.source,
            doc.domain,
            doc.title,
            doc.entity,
        )
        assert entry["facts"] == [
            {"fact_id": f.fact_id, "attribute": f.attribute, "value": f.value, "element_type": f.element_type}
            for f in doc.facts
        ]
        lo, hi = SMALL_PAGES[doc.source]
        assert lo <= doc.target_pages <= hi


def test_domains_go_round_robin(tmp_path):
    docs = write_corpus(HtmlCorpusSpec(seed=1, documents={"pubmed": 7}, pages={"pubmed": (1, 1)}), tmp_path)
    domains = SOURCE_DOMAINS["pubmed"]
    assert [d.domain for d in docs] == [domains[i % len(domains)] for i in range(7)]


# ----------------------------------------------------------------------------------------------
# facts
# ----------------------------------------------------------------------------------------------

EXPECTED_TAG = {
    "text": {"p"},
    "table_row": {"tr"},
    "image": {"svg", "img"},
    "caption": {"figcaption", "caption"},
    "formula": {"div"},
    "list": {"li"},
}


def test_every_fact_is_marked_once_and_its_element_states_it(corpus):
    _, docs = corpus
    for doc in docs:
        page = parse(doc)
        ids = [f.fact_id for f in doc.facts]
        assert len(set(ids)) == len(ids)
        assert sorted(page.fact_ids) == sorted(ids), f"{doc.doc_id}: data-fact ids differ from the facts"
        assert len({f.attribute for f in doc.facts}) == len(doc.facts), "attributes must be unique per document"
        for fact in doc.facts:
            text = " ".join(page.fact_text[fact.fact_id].split())
            assert fact.value in text, f"{doc.doc_id} {fact}: value not in {text!r}"
            assert fact.attribute.casefold() in text.casefold(), f"{doc.doc_id} {fact}: attribute not in {text!r}"
            assert fact.element_type in ELEMENT_TYPES
            assert page.fact_tag[fact.fact_id] in EXPECTED_TAG[fact.element_type], (fact, page.fact_tag[fact.fact_id])
            if fact.element_type == "formula":
                assert "equation" in page.fact_attrs[fact.fact_id]["class"].split()
        # an image fact is read off the drawing: its figure's caption does not give the value away
        html = doc.html_path.read_text()
        for fact in (f for f in doc.facts if f.element_type == "image"):
            after = html[html.index(f'data-fact="{fact.fact_id}"') :]
            caption = re.search(r"<figcaption[^>]*>(.*?)</figcaption>", after, re.S).group(1)
            assert fact.value not in caption, (doc.doc_id, fact, caption)


def test_facts_are_spread_over_every_estimated_page(tmp_path):
    for source, pages in (("wikipedia", 6), ("arxiv", 8), ("pubmed", 8), ("sec", 20)):
        doc = _one(tmp_path, source, pages)
        per_page = np.bincount(list(doc.fact_pages.values()), minlength=pages)
        # the last page may be a short tail; every full page carries several facts
        assert per_page[: pages - 1].min() >= 3, (source, per_page)
        assert set(doc.fact_pages) == {f.fact_id for f in doc.facts}


def test_long_documents_use_the_source_element_types(tmp_path):
    wanted = {
        "wikipedia": {"text", "table_row", "list"},
        "arxiv": {"text", "table_row", "image", "caption", "formula"},
        "pubmed": {"text", "table_row", "image", "list"},
        "sec": {"text", "table_row", "image", "list"},
    }
    for source, types in wanted.items():
        docs = [_one(tmp_path / str(seed), source, 12, seed=seed) for seed in range(2)]
        seen = {f.element_type for d in docs for f in d.facts}
        assert types <= seen, (source, seen)
    wiki = [_one(tmp_path / f"w{seed}", "wikipedia", 8, seed=seed) for seed in range(3)]
    assert {"image", "caption"} & {f.element_type for d in wiki for f in d.facts}


# ----------------------------------------------------------------------------------------------
# the look of each source
# ----------------------------------------------------------------------------------------------


def test_wikipedia_has_infobox_sections_figure_table_references_and_clutter(tmp_path):
    doc = _one(tmp_path, "wikipedia", 4)
    page = parse(doc)
    assert doc.title == doc.entity
    infobox = [t for t in page.tables if "infobox" in t["class"].split()]
    assert len(infobox) == 1
    assert page.having("h1", id="firstHeading") and len(page.having("h2")) >= 3
    assert len(page.having("span", class_="mw-editsection")) == len(page.having("h2")) + len(page.having("h3"))
    assert page.having("div", id="mw-navigation") and page.having("div", id="siteNotice")
    assert page.having("div", class_="navbox") and page.having("table", class_="wikitable")
    assert page.having("figure", class_="thumb") and page.having("figcaption")
    assert page.having("ol", class_="references")
    assert any(f.element_type == "table_row" for f in doc.facts)
    assert CLUTTER_SELECTORS["wikipedia"] == (
        "#siteNotice",
        "#mw-navigation",
        ".mw-editsection",
        ".navbox",
        "#catlinks",
    )


def test_arxiv_has_abstract_equations_results_tables_plots_references(tmp_path):
    doc = _one(tmp_path, "arxiv", 8)
    page = parse(doc)
    assert page.having("div", class_="ltx_abstract") and page.having("div", class_="ltx_authors")
    equations = page.having("div", class_="equation")
    assert len(equations) >= 2
    assert re.search(r"\w+ = .*\d\.\d", "".join(page.text))
    results = [t for t in page.tables if t["class"] == "results"]
    assert results and all(t["headers"] == ["Method", "Metric", "Value", "Std."] for t in results)
    assert page.having("svg") and page.having("polyline")
    headings = [h for h in ("1 Introduction", "3 Method", "5 Results", "References") if h in "".join(page.text)]
    assert len(headings) == 4
    assert page.having("ol", class_="references")


def test_pubmed_has_structured_abstract_lab_table_imaging_and_cookie_banner(tmp_path):
    doc = _one(tmp_path, "pubmed", 6)
    page = parse(doc)
    text = "".join(page.text)
    assert all(part in text for part in ("Background", "Case presentation", "Conclusion", "Discussion"))
    assert any(t["headers"] == ["Parameter", "Value", "Reference range"] for t in page.tables)
    assert page.having("svg") and page.having("figure")
    assert page.having("div", class_="cookie-banner") and page.having("ol", class_="references")
    assert doc.title.endswith("a case report")


def test_sec_tables_repeat_their_structure_across_companies(tmp_path):
    a, b = (_one(tmp_path / str(seed), "sec", 20, seed=seed) for seed in (1, 2))
    assert a.entity != b.entity
    pa, pb = parse(a), parse(b)

    def headers(page, cls):
        return [tuple(t["headers"]) for t in page.tables if t["class"] == cls]

    for cls in ("summary-compensation", "director-compensation", "vote-results", "beneficial-ownership", "kv"):
        ha, hb = headers(pa, cls), headers(pb, cls)
        assert ha and hb, cls
        assert set(ha) == set(hb) and len(set(ha)) == 1, f"{cls}: headers must be identical across companies"
    text_a = "".join(pa.text)
    assert "NOTICE OF 2025 ANNUAL MEETING" in text_a and "Table of contents" in text_a
    assert pa.having("ol", class_="toc")
    # near-duplicate numbers: a director's cash fees lie within a few percent of the other company's
    fees = []
    for doc in (a, b):
        html = doc.html_path.read_text()
        table = html[html.index('class="director-compensation"') :]
        fees.append(int(re.search(r"<td>([\d,]+)</td>", table).group(1).replace(",", "")))
    assert abs(fees[0] - fees[1]) / max(fees) < 0.1, fees


# ----------------------------------------------------------------------------------------------
# quirks and URLs
# ----------------------------------------------------------------------------------------------

URL = re.compile(r"""(?:https?:)?//[^\s"'<>)]+""", re.IGNORECASE)


def test_no_url_without_quirks_and_every_image_exists(corpus):
    _, docs = corpus
    for doc in docs:
        html = doc.html_path.read_text()
        assert not URL.findall(html), f"{doc.doc_id} names a URL"
        page = parse(doc)
        assert not page.having(None, data_quirk="lazy-image")
        for img in page.having("img"):
            assert (doc.html_path.parent / img["src"]).is_file(), img
            assert (doc.html_path.parent / img["src"]).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        for a in page.having("a"):
            assert a["href"] == "#"
        assert page.starts.get("p", 0) == page.ends.get("p", 0)


def test_quirks_add_lazy_missing_external_images_and_an_unclosed_p(tmp_path):
    for source in SOURCE_DOMAINS:
        doc = _one(tmp_path, source, 3, quirks=True)
        html = doc.html_path.read_text()
        page = parse(doc)
        lazy = page.having("img", data_quirk="lazy-image")
        assert len(lazy) == 1 and lazy[0]["loading"] == "lazy"
        assert (doc.html_path.parent / lazy[0]["src"]).is_file()
        missing = page.having("img", data_quirk="missing-image")
        assert len(missing) == 1 and not (doc.html_path.parent / missing[0]["src"]).exists()
        external = page.having("img", data_quirk="external-image")
        assert len(external) == 1 and external[0]["src"] == EXTERNAL_IMAGE_URL
        assert URL.findall(html) == [EXTERNAL_IMAGE_URL]
        assert len(page.having("p", data_quirk="unclosed-p")) == 1
        assert page.starts["p"] == page.ends.get("p", 0) + 1, "exactly one <p> must stay unclosed"
        # the quirks sit near the end, below the first screen, and carry no facts
        assert html.index('data-quirk="lazy-image"') > len(html) // 2
        assert sorted(page.fact_ids) == sorted(f.fact_id for f in doc.facts)


def test_quirks_can_be_chosen_one_by_one(tmp_path):
    doc = _one(tmp_path, "wikipedia", 2, quirks=["external_image"])
    page = parse(doc)
    assert page.having("img", data_quirk="external-image")
    assert not page.having("img", data_quirk="lazy-image") and not page.having("p", data_quirk="unclosed-p")
    assert set(QUIRKS) == {"lazy_image", "missing_image", "external_image", "unclosed_p"}
    with pytest.raises(ValueError, match="unknown quirks"):
        _one(tmp_path, "wikipedia", 2, quirks=["flashing_banner"])


# ----------------------------------------------------------------------------------------------
# length
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "targets"),
    [("wikipedia", (1, 4, 10)), ("arxiv", (5, 12, 25)), ("pubmed", (5, 12, 25)), ("sec", (20, 40, 60))],
)
def test_target_pages_controls_length(tmp_path, source, targets):
    docs = [_one(tmp_path, source, n) for n in targets]
    sizes = [d.html_path.stat().st_size for d in docs]
    facts = [len(d.facts) for d in docs]
    assert sizes == sorted(sizes) and len(set(sizes)) == 3, sizes
    assert facts == sorted(facts) and len(set(facts)) == 3, facts
    for doc, n in zip(docs, targets, strict=True):
        assert 0.85 * n <= doc.estimated_pages <= 1.15 * n + 0.1, (n, doc.estimated_pages)
        assert 3 * n <= len(doc.facts) <= 10 * n, (n, len(doc.facts))


def test_unknown_source_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown source"):
        write_document(np.random.default_rng(0), "x", "blog", "Misc", 1, tmp_path)
