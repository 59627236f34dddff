"""Deterministic synthetic HTML documents in the look of the four VL-DocIR sources.

The text-only generator (:mod:`vldocir.construction.synthetic`) invents facts about invented entities and
places them on nominal pages. This module writes the same kind of facts into real, self-contained
HTML documents that a headless browser renders into page images: a Wikipedia article, an arXiv
paper, a PubMed case report and an SEC proxy statement, each styled after its source as seen at
1000 CSS px wide (a rendered page is 2000 CSS px tall; device scale 2 gives 2000x4000 px pages).

Facts
    Every fact is stated in exactly one element that carries ``data-fact="<fact_id>"``; that
    element's own text holds the attribute phrase and the value, e.g.
    ``<p data-fact="f0007">The population of Varnolith is 12,345.</p>`` or
    ``<tr data-fact="f0012"><th>Population</th><td>12,345</td>...</tr>``. The element type of a fact
    (:data:`ELEMENT_TYPES`) says how it is shown: running ``text`` (``<p>``), a ``table_row``
    (``<tr>``), an ``image`` (the inline ``<svg>`` of a ``<figure>``: its title names the attribute
    and a plotted label or dimension gives the value, which the caption does not repeat), a
    ``caption`` (the ``<figcaption>`` of a picture), a ``formula`` (``<div class="equation">``) or
    a ``list`` item (``<li>``). These are elements a renderer records by themselves (a bare
    ``<figure>`` would not be). Attributes are unique within a document: when one comes back it is
    qualified ("population of the Kalo district"), so that a question about it has one answer.

Length
    ``target_pages`` is met with a running height estimate (CSS px) of every element, from each
    source's text metrics (:class:`_Metrics`, measured with Chromium and the Liberation fonts).
    Clutter that the renderer removes (:data:`CLUTTER_SELECTORS`) counts as zero height. Facts are
    spaced by the same estimate, about ``facts_per_page`` per page, so every page carries several.

Similarity
    Documents of one source share their section names, table headers, sentence banks and the
    numbers of their distractor rows (near-duplicates drawn around a base fixed per source and row
    label, :func:`_base`), so the right page is not given away by layout or rare words.

Quirks
    ``quirks`` adds, for renderer robustness tests, a lazy-loaded image, an image whose file is
    missing, an external image (``http://example.invalid/x.png``, to be blocked) and an unclosed
    ``<p>``; each such element carries ``data-quirk``. Without quirks no document names any URL.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from vldocir.construction.synthetic import (
    _FILLER,
    _FIRST_NAMES,
    _LAST_NAMES,
    SOURCE_ATTRIBUTES,
    SOURCE_DOMAINS,
    _entity_name,
    _value,
)

log = logging.getLogger(__name__)

PAGE_CSS_WIDTH, PAGE_CSS_HEIGHT, DEVICE_SCALE = 1000, 2000, 2
"""Viewport width and page height in CSS px, and the device scale the renderer uses."""

ELEMENT_TYPES: tuple[str, ...] = ("text", "table_row", "image", "caption", "formula", "list")

QUIRKS: tuple[str, ...] = ("lazy_image", "missing_image", "external_image", "unclosed_p")

EXTERNAL_IMAGE_URL = "http://example.invalid/x.png"
"""The only URL any document names, and only with the ``external_image`` quirk."""

CLUTTER_SELECTORS: dict[str, tuple[str, ...]] = {
    "wikipedia": ("#siteNotice", "#mw-navigation", ".mw-editsection", ".navbox", "#catlinks"),
    "arxiv": (".ltx_page_footer",),
    "pubmed": (".usa-banner", ".cookie-banner"),
    "sec": (),
}
"""Per source, the CSS selectors of page clutter that the renderer removes before it measures."""

DEFAULT_PAGES: dict[str, tuple[int, int]] = {"wikipedia": (1, 10), "arxiv": (5, 25), "pubmed": (5, 25), "sec": (20, 60)}


@dataclass
class Fact:
    fact_id: str
    attribute: str
    value: str
    element_type: str


@dataclass
class SyntheticDocument:
    doc_id: str
    source: str
    domain: str
    title: str
    entity: str
    html_path: Path
    facts: list[Fact]
    target_pages: int = 0
    estimated_pages: float = 0.0
    """The generator's own height estimate in pages; the rendered count is the renderer's."""
    fact_pages: dict[str, int] = field(default_factory=dict)
    """Estimated 0-based page of each fact (for sanity checks against the rendering)."""


@dataclass
class HtmlCorpusSpec:
    """What :func:`write_corpus` writes: documents per source, page ranges per source, the seed."""

    seed: int = 0
    documents: dict[str, int] = field(default_factory=lambda: {s: 2 for s in SOURCE_DOMAINS})
    pages: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_PAGES))
    quirks: bool | Iterable[str] = False
    facts_per_page: int = 6


# --------------------------------------------------------------------------------------------
# Layout metrics and the document writer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metrics:
    """Estimated geometry of one source's stylesheet (below), in CSS px."""

    width: float  # the running-text column
    char_px: float  # mean advance of a body-text character
    line_px: float  # body line height
    gap_px: float  # vertical margin of a paragraph
    cell_char_px: float  # mean character advance in table cells
    cell_line_px: float
    cell_pad_px: float  # vertical padding and border of a table row
    h2_px: float
    h3_px: float


# Calibrated against Chromium 156 with the Liberation fonts (which the stylesheets name first) at
# 1000 CSS px wide, clutter hidden: the estimate runs 2-5 % above the rendered height.
_METRICS: dict[str, _Metrics] = {
    "wikipedia": _Metrics(775, 6.9, 22.4, 7, 6.2, 18.8, 9, 52, 40),
    "arxiv": _Metrics(780, 7.0, 24.0, 6, 7.0, 21.0, 9, 57, 45),
    "pubmed": _Metrics(860, 7.1, 25.6, 6, 6.6, 21.0, 13, 57, 38),
    "sec": _Metrics(880, 5.75, 20.0, 6, 6.0, 17.0, 7, 50, 41),
}

_QUALIFIERS = {
    "wikipedia": "{attribute} of the {name} district",
    "arxiv": "{attribute} in experiment {n}",
    "pubmed": "{attribute} at follow-up visit {n}",
    "sec": "{attribute} for the {name} subsidiary",
}
_NUMERIC = frozenset({"float", "K", "eV", "s", "nm", "km", "m", "km2", "mm", "g/dL", "mg", "ppm", "mmHg"})


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _number(value: str) -> float:
    """The leading number of a value string ("$1,234,000" -> 1234000.0)."""
    match = re.search(r"\d[\d,]*(?:\.\d+)?", value)
    return float(match.group().replace(",", "")) if match else 0.0


def _base(source: str, key: str, lo: float, hi: float) -> float:
    """A number fixed per (source, key): every document of a source draws near the same base."""
    return float(np.random.default_rng(zlib.crc32(f"{source}|{key}".encode())).uniform(lo, hi))


def _near(rng: np.random.Generator, base: float, spread: float = 0.04) -> float:
    return base * (1.0 + rng.uniform(-spread, spread))


def _person(rng: np.random.Generator) -> str:
    return f"{_FIRST_NAMES[int(rng.integers(len(_FIRST_NAMES)))]} {_LAST_NAMES[int(rng.integers(len(_LAST_NAMES)))]}"


class _Doc:
    """Accumulates one document's HTML, its estimated height and its facts.

    Blocks ask :meth:`due` how many facts they should carry (facts are owed at a steady rate per
    estimated CSS px), draw them with :meth:`new_fact` and append themselves with :meth:`add`.
    A right float (infobox, thumbnail) lets following paragraphs flow beside it; :meth:`clear`
    settles its remaining height.
    """

    def __init__(self, rng, doc_id, source, domain, entity, directory: Path, facts_per_page: int,
                 quirks: frozenset[str] = frozenset()):
        self.rng, self.doc_id, self.source, self.domain, self.entity = rng, doc_id, source, domain, entity
        self.dir = directory
        self.quirks = quirks
        self.m = _METRICS[source]
        self.parts: list[str] = []
        self.height = 0.0
        self.facts: list[Fact] = []
        self.fact_y: dict[str, float] = {}
        self.value_kind: dict[str, str] = {}  # fact id -> value kind (``_value``'s argument)
        self.base_attribute: dict[str, str] = {}  # fact id -> attribute before qualification
        self.numbers = {"figure": 0, "table": 0, "equation": 0, "image": 0}  # running numbers
        self._spacing = PAGE_CSS_HEIGHT / max(1, facts_per_page)
        self._credit = 0.0
        self._float_left = 0.0
        self._float_width = 0.0
        self._used: dict[str, int] = {}  # attribute of SOURCE_ATTRIBUTES -> times drawn
        self._attributes: set[str] = set()  # the (qualified) attributes of this document's facts
        self._pending: list[Fact] = []

    # -- randomness --------------------------------------------------------------------------
    def pick(self, items: Sequence):
        return items[int(self.rng.integers(len(items)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # -- height, facts -----------------------------------------------------------------------
    def add(self, markup: str, height: float = 0.0) -> None:
        """Append markup that is ``height`` CSS px tall (0 for clutter the renderer removes)."""
        for fact in self._pending:
            self.fact_y[fact.fact_id] = self.height + height / 2
        self._pending.clear()
        self.parts.append(markup)
        self.height += height
        self._credit += height / self._spacing

    def due(self, capacity: int, height: float) -> int:
        """How many facts (at most ``capacity``) a block about ``height`` px tall should carry."""
        n = max(0, min(capacity, math.floor(self._credit + height / self._spacing)))
        self._credit -= n
        return n

    def new_fact(self, wants: str, placed_as: str, kinds: Iterable[str] | None = None) -> Fact | None:
        """Invent a fact from this source's attributes of element type ``wants``.

        Unused attributes come first; a repeated one is qualified so attributes stay unique.
        ``None`` when the source has no such attribute.
        """
        kinds = None if kinds is None else set(kinds)
        pool = [a for a in SOURCE_ATTRIBUTES[self.source] if a[2] == wants and (kinds is None or a[1] in kinds)]
        if not pool:
            return None
        fresh = [a for a in pool if a[0] not in self._used]
        pool_attribute, kind, _ = self.pick(fresh or pool)
        count = self._used.get(pool_attribute, 0) + 1
        self._used[pool_attribute] = count
        attribute = pool_attribute
        while attribute in self._attributes:  # a repeat: qualify it (again, should the name repeat too)
            attribute = _QUALIFIERS[self.source].format(attribute=pool_attribute, name=_entity_name(self.rng), n=count)
            count += 1
        self._attributes.add(attribute)
        fact = Fact(f"f{len(self.facts):04d}", attribute, _value(self.rng, kind), placed_as)
        self.facts.append(fact)
        self.value_kind[fact.fact_id] = kind
        self.base_attribute[fact.fact_id] = pool_attribute
        self._pending.append(fact)
        return fact

    def facts_for(self, wants: str, placed_as: str, capacity: int, height: float, kinds=None) -> list[Fact]:
        facts = [self.new_fact(wants, placed_as, kinds) for _ in range(self.due(capacity, height))]
        return [f for f in facts if f is not None]

    # -- geometry ----------------------------------------------------------------------------
    def lines(self, text: str, width: float, char_px: float) -> int:
        return max(1, math.ceil(len(text) * char_px / (0.96 * width)))

    def text_height(self, text: str, *, char_px: float | None = None, line_px: float | None = None,
                    width: float | None = None) -> float:
        char_px = char_px or self.m.char_px
        line_px = line_px or self.m.line_px
        return self.lines(text, width or self.m.width, char_px) * line_px

    def small_text_height(self, text: str, width: float, scale: float = 1.0) -> float:
        """Height of text set in the smaller type of captions, table cells and references."""
        return self.text_height(text, char_px=scale * self.m.cell_char_px, line_px=self.m.cell_line_px, width=width)

    def flow(self, markup: str, text: str, gap: float, *, indent: float = 0.0) -> None:
        """Add a block of running text, narrower while it sits beside a right float."""
        char_px, line_px = self.m.char_px, self.m.line_px
        full = self.m.width - indent
        if self._float_left <= 0:
            self.add(markup, self.text_height(text, width=full) + gap)
            return
        narrow = full - self._float_width
        n_lines = self.lines(text, narrow, char_px)
        beside = min(n_lines, max(0, math.floor(self._float_left / line_px)))
        rest_chars = max(0, len(text) - beside * 0.96 * narrow / char_px)
        height = beside * line_px + (math.ceil(rest_chars * char_px / (0.96 * full)) * line_px) + gap
        self._float_left -= height
        self.add(markup, height)

    def beside(self, markup: str, height: float) -> None:
        """Add a narrow block that fits beside a right float (it uses up the float's height)."""
        self._float_left -= height
        self.add(markup, height)

    @contextmanager
    def column(self, **changes) -> Iterator[None]:
        """Temporarily change the metrics (a narrower or smaller-type block, e.g. an abstract)."""
        saved = self.m
        self.m = replace(saved, **changes)
        try:
            yield
        finally:
            self.m = saved

    def float_right(self, markup: str, height: float, width: float) -> None:
        self.clear()
        self._float_left, self._float_width = height, width
        self.add(markup, 0.0)  # the text beside it adds the height (and :meth:`clear` the rest)

    @property
    def floating(self) -> bool:
        """Whether a right float still has height left beside which text flows."""
        return self._float_left > 0

    def clear(self) -> None:
        if self._float_left > 0:
            self.height += self._float_left
            self._credit += self._float_left / self._spacing
        self._float_left = 0.0

    # -- generic blocks ----------------------------------------------------------------------
    def heading(self, level: int, text: str, *, suffix: str = "") -> None:
        """An ``h2`` clears floats (every stylesheet says so); an ``h3`` may sit beside one."""
        markup = f"<h{level}>{_esc(text)}{suffix}</h{level}>\n"
        if level <= 2:
            self.clear()
            self.add(markup, self.m.h2_px)
        else:
            self.beside(markup, self.m.h3_px)

    def paragraph(self, sentences: list[str]) -> None:
        """A paragraph of filler sentences; when a fact is due, one more sentence states it."""
        text = " ".join(sentences)
        fact = self.new_fact("text", "text") if self.due(1, self.text_height(text) + self.m.gap_px) else None
        if fact is not None:
            sentences = list(sentences)
            sentences.insert(int(self.rng.integers(len(sentences) + 1)), self.fact_sentence(fact))
            text = " ".join(sentences)
        attrs = f' data-fact="{fact.fact_id}"' if fact else ""
        self.flow(f"<p{attrs}>{_esc(text)}</p>\n", text, self.m.gap_px)

    def fact_sentence(self, fact: Fact) -> str:
        form = self.pick(_FACT_FORMS[self.source])
        return form.format(a=fact.attribute, e=self.entity, E=_cap(self.entity), v=fact.value)

    def bullets(self, items: list[str], *, max_facts: int = 2) -> None:
        """A list whose items are ``items`` plus up to ``max_facts`` "Attribute: value" fact items."""

        def item_height(text: str) -> float:
            return self.text_height(text, width=self.m.width - 40) + 4

        entries: list[tuple[str, Fact | None]] = [(t, None) for t in items]
        for fact in self.facts_for("text", "list", max_facts, sum(map(item_height, items))):
            entry = (f"{_cap(fact.attribute)}: {fact.value}", fact)
            entries.insert(int(self.rng.integers(len(entries) + 1)), entry)
        markup = "<ul>" + "".join(
            f'<li data-fact="{f.fact_id}">{_esc(t)}</li>' if f else f"<li>{_esc(t)}</li>" for t, f in entries
        ) + "</ul>\n"
        if self._float_left > 0:
            self.flow(markup, " ".join(t for t, _ in entries), self.m.gap_px + 4 * len(entries), indent=40)
        else:
            self.add(markup, sum(item_height(t) for t, _ in entries) + self.m.gap_px)

    def table(self, headers: Sequence[str], rows: list[tuple[list[str], Fact | None]], *, caption: str = "",
              cls: str = "", row_header: bool = True) -> None:
        """A table; rows carrying a fact get ``data-fact`` on their ``<tr>``."""
        self.clear()
        width = self.m.width
        markup = [f'<table class="{cls}">' if cls else "<table>"]
        if caption:
            markup.append(f"<caption>{_esc(caption)}</caption>")
        head = "".join(f'<th scope="col">{_esc(h)}</th>' for h in headers)
        markup.append(f"<thead><tr>{head}</tr></thead><tbody>")
        for cells, fact in rows:
            attr = f' data-fact="{fact.fact_id}"' if fact else ""
            first = f'<th scope="row">{_esc(cells[0])}</th>' if row_header else f"<td>{_esc(cells[0])}</td>"
            markup.append(f"<tr{attr}>{first}" + "".join(f"<td>{_esc(c)}</td>" for c in cells[1:]) + "</tr>")
        markup.append("</tbody></table>\n")
        height = self.table_height([list(headers)] + [c for c, _ in rows], width)
        if caption:
            height += self.small_text_height(caption, width) + 4
        self.add("".join(markup), height + 2 * self.m.gap_px)

    def table_height(self, rows: list[list[str]], width: float) -> float:
        """Estimate a table's height like CSS auto layout: every column gets its longest word, and
        the width left over is shared in proportion to what each column would need unwrapped."""
        char, pad = self.m.cell_char_px, 16.0
        n_cols = max(len(r) for r in rows)
        cols = [[r[i] for r in rows if i < len(r)] for i in range(n_cols)]
        least = [max(len(w) for c in col for w in (c.split() or [""])) * char + pad for col in cols]
        most = [max(len(c) for c in col) * char + pad for col in cols]
        if sum(most) <= width:
            col_w = most
        else:
            spare, extra = max(0.0, width - sum(least)), [b - a for a, b in zip(least, most)]
            col_w = [a + spare * e / max(1.0, sum(extra)) for a, e in zip(least, extra)]
        height = 0.0
        for r in rows:
            n_lines = max(math.ceil(len(c) * char / max(char, w - pad)) if c else 1 for c, w in zip(r, col_w))
            height += max(1, n_lines) * self.m.cell_line_px + self.m.cell_pad_px
        return height

    def figure(self, body: str, body_height: float, caption: str, *, fact: Fact | None = None,
               caption_fact: Fact | None = None, cls: str = "", float_width: float | None = None) -> None:
        """A ``<figure>`` of ``body`` (an ``<svg>`` or ``<img>``) and a caption.

        An image fact (``fact``) marks the drawing itself, whose own text (title, value label)
        states it; the caption then must not repeat the value. A caption fact marks the caption.
        """
        self.numbers["figure"] += 1
        if fact is not None:
            body = _with_attribute(body, "data-fact", fact.fact_id)
        fig_attr = f' class="{cls}"' if cls else ""
        cap_attr = f' data-fact="{caption_fact.fact_id}"' if caption_fact else ""
        markup = f"<figure{fig_attr}>{body}<figcaption{cap_attr}>{_esc(caption)}</figcaption></figure>\n"
        cap_width = (float_width - 16) if float_width else self.m.width * 0.9
        height = body_height + self.small_text_height(caption, cap_width) + 16 + 2 * self.m.gap_px
        if float_width:
            self.float_right(markup, height, float_width)
        else:
            self.clear()
            self.add(markup, height)

    def png(self, width: int, height: int, palette: str = "photo") -> str:
        """Write a small deterministic PNG beside ``index.html`` and return its file name."""
        self.numbers["image"] += 1
        name = f"img-{self.numbers['image']:03d}.png"
        (self.dir / name).write_bytes(_png(self.rng, width, height, palette))
        return name

    def fill(self, until: float, blocks: Sequence[tuple[float, Callable[[], None]]], limit: int = 100_000) -> None:
        """Add blocks drawn by weight until the estimated height reaches ``until``; the first block
        should be the smallest (a paragraph): it alone is used in the last 300 px."""
        weights = np.array([w for w, _ in blocks], dtype=float)
        p = weights / weights.sum()
        for _ in range(limit):
            if self.height >= until:
                return
            if until - self.height < 300:  # close to the end: the first (smallest) block, not a big one
                blocks[0][1]()
            else:
                blocks[int(self.rng.choice(len(blocks), p=p))][1]()

    def html(self, title: str, css: str) -> str:
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width={PAGE_CSS_WIDTH}\">\n<title>{_esc(title)}</title>\n"
            f"<style>\n{css.strip()}\n</style>\n</head>\n<body>\n" + "".join(self.parts) + "</body>\n</html>\n"
        )


# --------------------------------------------------------------------------------------------
# Images: tiny PNGs and inline SVG drawings
# --------------------------------------------------------------------------------------------


def _png(rng: np.random.Generator, width: int, height: int, palette: str) -> bytes:
    """A deterministic RGB PNG: a gradient with a few soft blobs (a "photo" or a "scan")."""
    y, x = np.mgrid[0:height, 0:width].astype(float)
    if palette == "scan":
        img = np.full((height, width, 3), 20.0)
        img += 60 * np.exp(-(((x - width / 2) / (width / 2.6)) ** 2 + ((y - height / 2) / (height / 2.4)) ** 2))[..., None]
    else:
        top, bottom = rng.uniform(90, 220, 3), rng.uniform(30, 160, 3)
        img = top + (bottom - top) * (y / height)[..., None]
    for _ in range(int(rng.integers(3, 7))):
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(8, width / 3)
        color = rng.uniform(0, 255, 3) if palette != "scan" else np.full(3, rng.uniform(120, 230))
        weight = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
        img = img * (1 - weight) + color * weight
    raw = np.clip(img, 0, 255).astype(np.uint8)
    scanlines = b"".join(b"\x00" + raw[row].tobytes() for row in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(scanlines, 9)) + chunk(b"IEND", b"")


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= value)


def _tick(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:.3g}"


def _title(text: str, w: float, size: int = 12, fill: str = "#000") -> tuple[list[str], float]:
    """A drawing's title as SVG text lines wrapped by words, and the height they take.

    Every line but the last ends with a space, so the drawing's text content (what the renderer
    and the tests read) holds the title as one unbroken phrase.
    """
    per_line = max(10, int(w / (0.56 * size)))
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= per_line:
            lines[-1] += " " + word
        else:
            lines.append(word)
    out = [
        f'<text x="{w / 2:.0f}" y="{4 + size + i * (size + 3)}" font-size="{size}" font-weight="bold" '
        f'text-anchor="middle" fill="{fill}">{_esc(line + (" " if i < len(lines) - 1 else ""))}</text>'
        for i, line in enumerate(lines)
    ]
    return out, 8 + len(lines) * (size + 3)


def _axes(w: int, h: int, top: float, ymax: float, xlabel: str, ylabel: str) -> list[str]:
    """Axes, y ticks and axis labels of a plot whose plot area is x 70..w-20, y top+8..h-50."""
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    out = [f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#333"/>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>']
    for i in range(5):
        v = ymax * i / 4
        yy = y1 - (y1 - y0) * i / 4
        out.append(f'<line x1="{x0 - 4}" y1="{yy:.1f}" x2="{x0}" y2="{yy:.1f}" stroke="#333"/>')
        out.append(f'<text x="{x0 - 7}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{_tick(v)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{h - 10}" font-size="13" text-anchor="middle">{_esc(xlabel)}</text>')
    out.append(f'<text transform="translate(16,{(y0 + y1) / 2:.0f}) rotate(-90)" font-size="13" '
               f'text-anchor="middle">{_esc(ylabel)}</text>')
    return out


def _svg(w: int, h: int, inner: list[str], label: str) -> str:
    return (f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{_esc(label)}" '
            f'font-family="sans-serif">' + "".join(inner) + "</svg>")


def _bar_plot(categories: list[str], values: list[float], labels: list[str], highlight: int | None,
              xlabel: str, ylabel: str, title: str, w: int = 600, h: int = 320) -> str:
    """Bars with a value label above each; the ``highlight`` bar is drawn darker."""
    out, top = _title(title, w)
    ymax = _nice_max(max(values) * 1.15)
    out += _axes(w, h, top, ymax, xlabel, ylabel)
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    slot = (x1 - x0) / len(values)
    for i, (cat, v, lab) in enumerate(zip(categories, values, labels)):
        bh = (y1 - y0) * v / ymax
        bx = x0 + i * slot + slot * 0.2
        fill = "#1f4e79" if i == highlight else "#9dbcd4"
        cx = bx + slot * 0.3
        out.append(f'<rect x="{bx:.1f}" y="{y1 - bh:.1f}" width="{slot * 0.6:.1f}" height="{bh:.1f}" fill="{fill}"/>')
        out.append(f'<text x="{cx:.1f}" y="{y1 - bh - 4:.1f}" font-size="11" text-anchor="middle">{_esc(lab)}</text>')
        out.append(f'<text x="{cx:.1f}" y="{y1 + 15}" font-size="11" text-anchor="middle">{_esc(cat)}</text>')
    return _svg(w, h, out, title)


def _line_plot(xs: list[float], series: list[tuple[str, list[float]]], xlabel: str, ylabel: str, title: str,
               mark: tuple[int, int, str] | None = None, w: int = 600, h: int = 320) -> str:
    """Line series with a legend; ``mark`` = (series index, point index, label) annotates a point."""
    out, top = _title(title, w)
    ymax = _nice_max(max(max(ys) for _, ys in series) * 1.1)
    out += _axes(w, h, top, ymax, xlabel, ylabel)
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    colors = ("#1f4e79", "#c0504d", "#4f9a4f", "#8064a2")

    def px(i: int) -> float:
        return x0 + (x1 - x0) * (i / max(1, len(xs) - 1))

    def py(v: float) -> float:
        return y1 - (y1 - y0) * v / ymax

    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{y1 + 15}" font-size="11" text-anchor="middle">{x:g}</text>')
    for k, (name, ys) in enumerate(series):
        pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(ys))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[k % 4]}" stroke-width="2"/>')
        out.append(f'<rect x="{x1 - 150}" y="{y0 + 4 + 16 * k}" width="12" height="3" fill="{colors[k % 4]}"/>')
        out.append(f'<text x="{x1 - 134}" y="{y0 + 9 + 16 * k}" font-size="11">{_esc(name)}</text>')
    if mark is not None:
        k, i, label = mark
        cx, cy = px(i), py(series[k][1][i])
        anchor, dx = ("end", -8) if i > len(xs) / 2 else ("start", 8)
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="#000"/>')
        out.append(f'<text x="{cx + dx:.1f}" y="{cy - 8:.1f}" font-size="12" font-weight="bold" '
                   f'text-anchor="{anchor}">{_esc(label)}</text>')
    return _svg(w, h, out, title)


def _dimension_drawing(label: str, style: str, title: str, w: int = 260, h: int = 300) -> str:
    """A tower elevation (``style="tower"``) or a scan with a lesion (``"scan"``), with a
    dimension line labelled ``label``, under ``title``."""
    if style == "scan":
        heading, top = _title(title, w, 11, "#fff")
        mid = (top + h) / 2
        inner = [f'<rect width="{w}" height="{h}" fill="#111"/>', *heading,
                 f'<ellipse cx="{w / 2}" cy="{mid:.1f}" rx="{w * 0.4}" ry="{(h - top) * 0.44:.1f}" fill="#555"/>',
                 f'<ellipse cx="{w * 0.58}" cy="{mid - 10:.1f}" rx="{w * 0.12}" ry="{h * 0.09}" fill="#ccc"/>',
                 f'<line x1="{w * 0.46}" y1="{mid + 30:.1f}" x2="{w * 0.7}" y2="{mid + 30:.1f}" stroke="#ff0" stroke-width="2"/>',
                 f'<text x="{w * 0.58}" y="{mid + 50:.1f}" font-size="13" fill="#ff0" text-anchor="middle">{_esc(label)}</text>']
    else:
        heading, top = _title(title, w, 11)
        peak = top + 12
        inner = [f'<rect width="{w}" height="{h}" fill="#eef3f8"/>', *heading,
                 f'<polygon points="{w * 0.42},{h - 20} {w * 0.47},{peak + 12} {w * 0.53},{peak + 12} {w * 0.58},{h - 20}" fill="#7a6a58"/>',
                 f'<rect x="{w * 0.455}" y="{peak}" width="{w * 0.09}" height="14" fill="#5b4d3f"/>',
                 f'<line x1="{w * 0.72}" y1="{peak}" x2="{w * 0.72}" y2="{h - 20}" stroke="#000"/>',
                 f'<text x="{w * 0.75}" y="{(peak + h) / 2:.0f}" font-size="13">{_esc(label)}</text>']
    return _svg(w, h, inner, title)


def _with_attribute(markup: str, name: str, value: str) -> str:
    """``markup`` with ``name="value"`` added to its first (root) element."""
    return re.sub(r"^<([a-zA-Z]+)", lambda m: f'<{m.group(1)} {name}="{_esc(value)}"', markup, count=1)


def _img(src: str, width: int, height: int, alt: str, extra: str = "") -> str:
    return f'<img src="{_esc(src)}" width="{width}" height="{height}" alt="{_esc(alt)}"{extra}>'


# --------------------------------------------------------------------------------------------
# Sentence banks (shared by all documents of a source, on purpose)
# --------------------------------------------------------------------------------------------

_FACT_FORMS = {
    "wikipedia": ("The {a} of {e} is {v}.", "{E}'s {a} is recorded as {v}.",
                  "According to local records, the {a} of {e} was {v}."),
    "arxiv": ("We find that the {a} of {e} is {v}.", "For {e}, the measured {a} is {v}.",
              "In our setting, the {a} obtained with {e} equals {v}."),
    "pubmed": ("The {a} in the {e} case was {v}.", "We recorded a {a} of {v} in the {e} case.",
               "In this {e} case, the {a} was {v}."),
    "sec": ("The {a} of {e} was {v}.", "{E} reports a {a} of {v}.", "For {e}, the {a} was {v}."),
}

_SENTENCES = {
    "wikipedia": (
        "{E} has been described in several regional surveys of {d}.",
        "The name of {e} appears in records kept by the regional archive.",
        "During the following decades the {noun} expanded its activities considerably.",
        "Local historians have published a number of studies on the period.",
        "A restoration programme was completed after a public consultation.",
        "The council of {e} meets four times a year to review its plans.",
        "Visitors usually arrive during the summer season.",
        "Documents relating to this period are held in the municipal library.",
        "Several buildings from the early period survive in altered form.",
        "In the twentieth century the {noun} became known beyond the region.",
        "The governing board publishes an annual report on its activities.",
        "Disputes over the boundaries were settled by arbitration.",
        "A number of festivals are organised each year.",
        "The regional newspaper covered these events in detail.",
    ),
    "arxiv": (
        "We evaluate {e} on the standard benchmarks used in {d}.",
        "Our approach builds on prior work on probabilistic models and extends it to the regime considered here.",
        "The remaining hyperparameters are kept fixed throughout all experiments.",
        "Error bars denote one standard deviation over five independent runs.",
        "This observation is consistent with the theoretical analysis of the previous section.",
        "We note that the improvement is not explained by the larger model size alone.",
        "Details of the preprocessing pipeline are given in the appendix.",
        "All baseline methods are tuned with the same computational budget.",
        "A full derivation of the estimator is provided in the supplementary material.",
        "Compared with earlier results, {e} is both simpler and more stable.",
        "We leave a more detailed study of this effect to future work.",
        "All measurements were taken at the same nominal operating point.",
        "The asymptotic behaviour follows directly from the bound stated above.",
        "Table and figure numbers refer to the main text unless stated otherwise.",
    ),
    "pubmed": (
        "The patient had no relevant family history.",
        "Physical examination revealed mild tenderness in the right upper quadrant.",
        "Informed consent was obtained from the patient for publication of this report.",
        "The differential diagnosis included infectious and neoplastic causes.",
        "Symptoms improved gradually over the following days.",
        "Similar presentations of {e} have been reported only rarely in the literature.",
        "Histopathological examination confirmed the diagnosis.",
        "No complications were observed during the postoperative period.",
        "The multidisciplinary team reviewed the case at its weekly meeting.",
        "Medication was adjusted according to renal function.",
        "This case highlights the importance of early imaging in {d}.",
        "Vital signs remained stable throughout the admission.",
        "The patient was discharged with written instructions and a follow-up plan.",
        "Serial measurements were compared with the values obtained on admission.",
    ),
    "sec": (
        "The Board of Directors recommends that shareholders vote FOR this proposal.",
        "Our compensation program is designed to attract, retain and motivate talented executives.",
        "The Compensation Committee reviews the peer group annually with its independent consultant.",
        "Each director nominee has consented to serve if elected.",
        "Proxies will be voted as directed by the shareholder.",
        "The Audit Committee has reviewed and discussed the audited financial statements with management.",
        "Shareholders of record at the close of business on the record date are entitled to vote.",
        "A majority of the votes cast is required to approve this proposal.",
        "Broker non-votes and abstentions will have no effect on the outcome of this proposal.",
        "{E} maintains a clawback policy consistent with the applicable listing standards.",
        "Our directors are expected to attend the annual meeting of shareholders.",
        "No director or executive officer has a material interest in this proposal.",
        "The Nominating and Governance Committee considers the diversity of experience of each candidate.",
        "Amounts shown reflect the grant date fair value computed in accordance with the applicable accounting standard.",
    ),
}

_WIKI_NOUNS = {
    "Arts": "art museum", "Entertainment": "theatre company", "Science": "research institute",
    "Technology": "technology park", "Geography": "town", "Sports": "football club",
    "History": "historic fortress", "Politics": "administrative district", "Economics": "trading port",
}


def _sentences(doc: _Doc, n: int, noun: str = "") -> list[str]:
    """``n`` filler sentences from the source's bank and the shared text-only filler."""
    shared = [_cap(f.strip().rstrip(" .")) + "." for f in _FILLER]
    bank = list(_SENTENCES[doc.source]) + shared
    chosen = doc.rng.choice(len(bank), size=min(n, len(bank)), replace=False)
    return [bank[int(i)].format(e=doc.entity, E=_cap(doc.entity), d=doc.domain.lower(), noun=noun or "institution")
            for i in chosen]


def _references(doc: _Doc, n: int, style: str) -> tuple[str, float]:
    """An ordered reference list of ``n`` invented works; returns (markup, estimated height)."""
    items, height = [], 0.0
    for i in range(n):
        authors = ", ".join(_person(doc.rng) for _ in range(int(doc.rng.integers(1, 4))))
        year = int(doc.rng.integers(1990, 2025))
        work = " ".join(_entity_name(doc.rng).lower() for _ in range(3))
        volume, page = int(doc.rng.integers(1, 40)), int(doc.rng.integers(1, 900))
        if style == "wikipedia":
            text = f'{authors} ({year}). "On the {work}". Regional Review. {volume}: {page}.'
        elif style == "arxiv":
            text = f"[{i + 1}] {authors}. A study of {work}. In Proceedings of the Conference on {doc.domain}, {year}."
        else:
            text = f"{authors}. {_cap(work)}: a report. J Case Rep. {year};{volume}:{page}. doi:10.{1000 + page}/jcr.{year}.{i + 1}"
        items.append(f"<li>{_esc(text)}</li>")
        height += doc.small_text_height(text, doc.m.width - 40, scale=0.85) + 3
    return '<ol class="references">' + "".join(items) + "</ol>\n", height + 2 * doc.m.gap_px


# --------------------------------------------------------------------------------------------
# Wikipedia
# --------------------------------------------------------------------------------------------

_WIKI_CSS = """
body{margin:0;background:#f6f6f6;color:#202122;font-family:"Liberation Sans",Arial,sans-serif;font-size:14px;line-height:1.6}
#mw-navigation{position:absolute;top:0;left:0;width:160px;padding:12px 8px;font-size:12.5px}
#mw-navigation .logo{font-family:"Liberation Serif",serif;font-size:18px;margin-bottom:16px}
#mw-navigation a{display:block;color:#0645ad;text-decoration:none;margin:3px 0}
#siteNotice{margin-left:176px;padding:8px;background:#eaf3ff;border:1px solid #a7d7f9;font-size:13px;text-align:center}
#content{margin-left:176px;padding:16px 24px 24px;background:#fff;border:1px solid #a7d7f9;border-right:0;min-height:400px}
#firstHeading{margin:0 0 4px;font-family:"Liberation Serif",Georgia,serif;font-size:28.8px;font-weight:normal;line-height:1.3;border-bottom:1px solid #a2a9b1}
#siteSub{font-size:12.5px;color:#54595d;margin:0 0 10px}
h2{clear:both;margin:18px 0 6px;font-family:"Liberation Serif",Georgia,serif;font-size:21px;font-weight:normal;line-height:1.3;border-bottom:1px solid #a2a9b1}
h3{margin:14px 0 4px;font-size:16.5px;line-height:1.3}
p{margin:7px 0}
a{color:#0645ad;text-decoration:none}
.mw-editsection{margin-left:8px;font-family:"Liberation Sans",Arial,sans-serif;font-size:13px;font-weight:normal;color:#54595d}
table{border-collapse:collapse}
.infobox{float:right;clear:right;width:280px;margin:0 0 12px 16px;border:1px solid #a2a9b1;background:#f8f9fa;font-size:12.5px;line-height:1.5}
.infobox caption{font-size:16px;font-weight:bold;padding:4px}
.infobox th,.infobox td{padding:3px 6px;text-align:left;vertical-align:top;border-top:1px solid #eaecf0}
.infobox .infobox-image{text-align:center}
.wikitable{clear:both;margin:12px 0;border:1px solid #a2a9b1;background:#f8f9fa;font-size:13px;line-height:1.45}
.wikitable caption{font-weight:bold;padding:4px}
.wikitable th,.wikitable td{border:1px solid #a2a9b1;padding:4px 8px;text-align:left}
.wikitable thead th{background:#eaecf0}
figure{margin:0}
figure.thumb{float:right;clear:right;width:262px;margin:4px 0 12px 16px;padding:3px;border:1px solid #c8ccd1;background:#f8f9fa}
figure.thumb figcaption{font-size:12.5px;line-height:1.5;padding:3px}
#toc{display:inline-block;margin:8px 0;padding:7px 16px 7px 7px;border:1px solid #a2a9b1;background:#f8f9fa;font-size:13px}
#toc ol{margin:0 0 0 20px;padding:0}
ul,ol{margin:4px 0 4px 24px;padding:0 0 0 16px}
.references{font-size:12.5px;line-height:1.5}
.navbox{clear:both;margin-top:16px;border:1px solid #a2a9b1;padding:4px;font-size:12px;text-align:center;background:#fdfdfd}
.navbox .navbox-title{background:#ccf;font-weight:bold;padding:2px}
#catlinks{margin-top:12px;border:1px solid #a2a9b1;background:#f8f9fa;padding:6px;font-size:12.5px}
"""

_WIKI_SECTIONS = ("History", "Geography", "Organisation", "Economy", "Culture", "Landmarks", "Notable people",
                  "Events", "Reception", "Legacy", "Transport", "Education")
_WIKI_SUBSECTIONS = ("Early period", "Modern era", "Recent developments", "Overview", "Records", "Administration")
_WIKI_INDICATORS = ("Registered associations", "Annual visitors", "Listed buildings", "Annual rainfall (mm)",
                    "Public libraries", "Schools", "Hospital beds", "Bus lines", "Parks and gardens")


def _wikipedia(doc: _Doc, target_height: float) -> str:
    """An article: title, floated infobox (table-row facts), lead, contents box, sections with
    ``[edit]`` links, paragraphs, key-figure tables, floated thumbnails (image or caption facts),
    bullet lists, references; clutter: navigation sidebar, site notice, navbox, categories.
    Returns the title."""
    noun = _WIKI_NOUNS.get(doc.domain, "place")
    edit = '<span class="mw-editsection">[<a href="#">edit</a>]</span>'

    def paragraph():
        doc.paragraph(_sentences(doc, int(doc.rng.integers(3, 7)), noun))

    def infobox():
        fixed = [("Type", _cap(noun)), ("Established", str(int(doc.rng.integers(1200, 1990)))),
                 ("Region", _entity_name(doc.rng)), ("Official language", "Lingua " + _entity_name(doc.rng))]
        facts = doc.facts_for("table_row", "table_row", 5, 230 + 27 * 9)
        rows = [f'<tr><th scope="row">{_esc(k)}</th><td>{_esc(v)}</td></tr>' for k, v in fixed]
        for fact in facts:
            row = (f'<tr data-fact="{fact.fact_id}"><th scope="row">{_esc(_cap(fact.attribute))}</th>'
                   f"<td>{_esc(fact.value)}</td></tr>")
            rows.insert(int(doc.rng.integers(len(rows) + 1)), row)
        image = _img(doc.png(220, 150), 260, 177, f"View of {doc.entity}")
        markup = (f'<table class="infobox"><caption>{_esc(doc.entity)}</caption>'
                  f'<tr><td colspan="2" class="infobox-image">{image}</td></tr>' + "".join(rows) + "</table>\n")
        doc.float_right(markup, 230 + 27 * len(rows), 296)

    def data_table():
        n_rows = int(doc.rng.integers(4, 8))
        facts = doc.facts_for("table_row", "table_row", 3, (n_rows + 2) * 28)
        labels = list(doc.rng.permutation(_WIKI_INDICATORS))[: max(1, n_rows - len(facts))]

        def year() -> str:
            return str(int(doc.rng.integers(1990, 2024)))

        rows = [([lab, f"{_near(doc.rng, _base('wikipedia', lab, 20, 5000)):,.0f}", year()], None) for lab in labels]
        for fact in facts:
            rows.insert(int(doc.rng.integers(len(rows) + 1)), ([_cap(fact.attribute), fact.value, year()], fact))
        doc.numbers["table"] += 1
        doc.table(("Indicator", "Value", "Year of record"), rows, caption=f"Key figures for {doc.entity}",
                  cls="wikitable")

    def thumb():
        """A floated thumbnail: an elevation drawing (an image fact) or a photo (maybe a caption fact)."""
        fact_due = doc.due(1, 300) > 0
        fact = doc.new_fact("image", "image") if fact_due and doc.chance(0.4) else None
        if fact is not None:
            body = _dimension_drawing(fact.value, "tower", f"{_cap(fact.attribute)} of {doc.entity}", 256, 280)
            caption = f"Elevation drawing of {doc.entity}, with the height of its tower."
            doc.figure(body, 280, caption, fact=fact, cls="thumb", float_width=282)
            return
        caption_fact = doc.new_fact("text", "caption") if fact_due else None
        caption = f"A view of {doc.entity} from the {doc.pick(('north', 'south', 'river', 'old town', 'main square'))}."
        if caption_fact is not None:
            caption += f" The {caption_fact.attribute} is {caption_fact.value}."
        body = _img(doc.png(200, 140), 256, 179, f"View of {doc.entity}")
        doc.figure(body, 179, caption, caption_fact=caption_fact, cls="thumb", float_width=282)

    def illustrated():
        """A thumbnail and the paragraphs that flow beside it, as in an article's sections."""
        if doc.floating:  # no stacked floats: their layout is beyond the estimate
            return paragraph()
        thumb()
        for _ in range(3):
            paragraph()
            if not doc.floating:
                break

    def key_facts():
        items = [s.rstrip(".") for s in _sentences(doc, int(doc.rng.integers(2, 4)), noun)]
        doc.bullets(items, max_facts=2)

    def subsection():
        doc.heading(3, doc.pick(_WIKI_SUBSECTIONS), suffix=edit)

    # Clutter first (zero height: the renderer removes it), then the article.
    nav = "".join(f'<a href="#">{t}</a>' for t in ("Main page", "Contents", "Current events", "Random article",
                                                     "About", "Contact us", "Help", "Community portal",
                                                     "Recent changes", "Upload file", "What links here"))
    doc.add(f'<div id="mw-navigation"><div class="logo">Wikipedia</div>{nav}</div>\n')
    doc.add('<div id="siteNotice">Help us improve articles about places and institutions. '
            '<a href="#">Take part in the survey</a>.</div>\n')
    doc.add(f'<div id="content">\n<h1 id="firstHeading">{_esc(doc.entity)}</h1>\n'
            '<div id="siteSub">From Wikipedia, the free encyclopedia</div>\n', 60)
    infobox()
    lead = [f"{_cap(doc.entity)} is a {noun} in the field of {doc.domain.lower()}."] + _sentences(doc, 3, noun)
    doc.paragraph(lead)
    for _ in range(int(doc.rng.integers(1, 3))):
        paragraph()

    refs, refs_h = _references(doc, int(min(30, 4 + 2 * target_height / PAGE_CSS_HEIGHT)), "wikipedia")
    n_sections = int(np.clip(round(target_height / 1300), 2, len(_WIKI_SECTIONS)))
    sections = list(doc.rng.permutation(_WIKI_SECTIONS))[:n_sections]
    toc = "".join(f"<li>{_esc(s)}</li>" for s in sections + ["References"])
    doc.beside(f'<div id="toc"><b>Contents</b><ol>{toc}</ol></div>\n', 30 + 21 * (len(sections) + 1))
    body_end = target_height - refs_h - 60
    for i, name in enumerate(sections):
        doc.heading(2, name, suffix=edit)
        until = doc.height + (body_end - doc.height) / (n_sections - i)
        if i == 0:  # every article has at least one figure and one data table
            illustrated()
        else:
            paragraph()
        if i == 1:
            data_table()
        doc.fill(until, [(5, paragraph), (1.2, data_table), (1.5, illustrated), (1, key_facts), (0.8, subsection)])
    _quirks_block(doc)
    doc.heading(2, "References", suffix=edit)
    doc.add(f'<div class="reflist">{refs}</div>\n', refs_h)
    links = " · ".join(f'<a href="#">{_entity_name(doc.rng)}</a>' for _ in range(14))
    doc.add(f'<div class="navbox"><div class="navbox-title">{_esc(noun.title())}s of the region</div>{links}</div>\n')
    doc.add(f'<div id="catlinks">Categories: <a href="#">{_esc(doc.domain)}</a> | <a href="#">{_esc(noun.title())}s</a></div>\n')
    doc.add("</div>\n")
    return doc.entity


# --------------------------------------------------------------------------------------------
# arXiv
# --------------------------------------------------------------------------------------------

_ARXIV_CSS = """
body{margin:0;background:#fff;color:#000;font-family:"Liberation Serif","Times New Roman",serif;font-size:17px;line-height:1.41}
.ltx_page_main{max-width:780px;margin:0 auto;padding:28px 20px 40px}
h1.ltx_title{font-size:28px;line-height:1.25;text-align:center;margin:8px 0 14px}
.ltx_authors{text-align:center;font-size:16px;line-height:1.5;margin-bottom:18px}
.ltx_authors .affil{font-size:14px;color:#333}
.ltx_abstract{margin:0 40px 18px;font-size:15.5px}
.ltx_abstract h6{font-size:16px;text-align:center;margin:0 0 6px}
h2{font-size:22px;margin:22px 0 8px;line-height:1.25}
h3{font-size:18.5px;margin:16px 0 6px;line-height:1.25}
p{margin:5px 0;text-align:justify}
ul,ol{margin:6px 0;padding-left:32px}
.equation{display:flex;justify-content:space-between;align-items:center;margin:12px 0;font-style:italic}
.equation .math{flex:1;text-align:center;font-size:18px}
.equation .eq-note{font-style:normal;font-size:13px;color:#444;margin:0 8px}
.equation .eqno{font-style:normal}
table.results{margin:14px auto;border-collapse:collapse;font-size:15px;line-height:1.4}
table.results caption{caption-side:top;font-size:14.5px;padding:4px;text-align:left}
table.results th,table.results td{padding:3px 10px;text-align:left}
table.results thead th{border-top:2px solid #000;border-bottom:1px solid #000}
table.results tbody tr:last-child th,table.results tbody tr:last-child td{border-bottom:2px solid #000}
figure{margin:14px 0;text-align:center}
figure figcaption{font-size:14.5px;line-height:1.45;text-align:left;margin:4px 30px}
ol.references{font-size:14.5px;line-height:1.45;padding-left:10px;list-style:none}
.ltx_page_footer{margin-top:30px;font-size:12px;color:#777;text-align:center;border-top:1px solid #ccc;padding-top:6px}
"""

_ARXIV_SECTIONS = ("Introduction", "Related work", "Method", "Experimental setup", "Results", "Ablation studies",
                   "Discussion", "Conclusion")
_ARXIV_METHODS = ("Linear baseline", "Random forest", "ResNet-50", "Transformer-base", "Gaussian process",
                  "Kernel SVM", "MLP ensemble")
_ARXIV_FORMULAS = ("E = m c^2 + {v} k", "L(θ) = Σ_i ℓ(x_i, y_i) + {v} ‖θ‖²", "H = −J Σ s_i s_j + {v} Σ s_i",
                   "ρ(r) = ρ_0 exp(−r / {v})", "τ = {v} · (T − T_c)^(−ν)", "y = W x + {v} b")
_ARXIV_TITLES = ("{E}: a scalable approach to {d}", "On the stability of {E} in {d}",
                 "{E}: revisiting a classical problem of {d}", "Learning with {E}: evidence from {d}")


def _arxiv(doc: _Doc, target_height: float) -> str:
    """A paper: title, authors, abstract, numbered sections and subsections, equations (formula
    facts), results tables with a row per method (table-row facts on the paper's own rows), line
    plots (a marked peak is an image fact; else the caption may carry a fact), references and an
    appendix; clutter: the LaTeXML footer. Returns the title."""
    title = doc.pick(_ARXIV_TITLES).format(E=_cap(doc.entity), d=doc.domain.lower())
    section_no = [0, 0]

    def paragraph():
        doc.paragraph(_sentences(doc, int(doc.rng.integers(3, 7))))

    def equation():
        doc.numbers["equation"] += 1
        n = doc.numbers["equation"]
        fact = doc.new_fact("text", "formula", kinds=_NUMERIC) if doc.due(1, 60) else None
        coeff = fact.value if fact else f"{doc.rng.uniform(0.01, 9.9):.3f}"
        formula = doc.pick(_ARXIV_FORMULAS).format(v=coeff)
        note = f'<span class="eq-note">{_esc(fact.attribute)} of {_esc(doc.entity)}</span>' if fact else ""
        attr = f' data-fact="{fact.fact_id}"' if fact else ""
        doc.add(f'<div class="equation"{attr}><span class="math">{_esc(formula)}</span>{note}'
                f'<span class="eqno">({n})</span></div>\n', 27 + 24)

    def results_table():
        """Rows per method: baselines (shared across papers) on the metric of this table's first fact."""
        methods = list(doc.rng.permutation(_ARXIV_METHODS))[: int(doc.rng.integers(3, 6))]
        facts = doc.facts_for("table_row", "table_row", 3, (len(methods) + 5) * 26)
        metrics = {a: k for a, k, t in SOURCE_ATTRIBUTES["arxiv"] if t == "table_row"}
        metric = doc.base_attribute[facts[0].fact_id] if facts else doc.pick(sorted(metrics))

        def std() -> str:
            return f"±{doc.rng.uniform(0.05, 1.5):.2f}"

        rows = [([m, metric, _near_value(doc, f"{m}|{metric}", metrics[metric]), std()], None) for m in methods]
        rows += [([f"{_cap(doc.entity)} (ours)", f.attribute, f.value, std()], f) for f in facts]
        doc.numbers["table"] += 1
        caption = (f"Table {doc.numbers['table']}: Results of {doc.entity} and baselines on the "
                   f"{doc.domain.lower()} benchmark.")
        doc.table(("Method", "Metric", "Value", "Std."), rows, caption=caption, cls="results")

    def plot():
        """A line plot: its marked peak is an image fact, or its caption carries a text fact."""
        fact_due = doc.due(1, 420) > 0
        fact = doc.new_fact("image", "image") if fact_due and doc.chance(0.5) else None
        n = doc.numbers["figure"] + 1
        xs = [float(x) for x in range(0, 100, 10)]
        curves = []
        for m in list(doc.rng.permutation(_ARXIV_METHODS))[:2]:  # baselines: one shape per method, everywhere
            level = _base("arxiv", f"{m}|curve", 0.5, 4)
            curves.append((m, [level * (1 - math.exp(-x / 30)) + doc.rng.uniform(0, 0.3) for x in xs]))
        if fact is not None:
            target = _number(fact.value)
            peak = int(doc.rng.integers(3, len(xs) - 2))
            ours = [target * math.exp(-((x - xs[peak]) / 25) ** 2) * 0.97 for x in xs]
            ours[peak] = target
            scale = target / max(max(ys) for _, ys in curves)
            curves = [(m, [y * scale * 0.8 for y in ys]) for m, ys in curves]
            body = _line_plot(xs, [(f"{_cap(doc.entity)} (ours)", ours)] + curves, "Training step (×1000)",
                              _cap(doc.base_attribute[fact.fact_id]), f"{_cap(fact.attribute)} of {doc.entity}",
                              mark=(0, peak, fact.value))
            caption = f"Figure {n}: {_cap(fact.attribute)} of {doc.entity} and two baselines; the peak is marked."
            doc.figure(body, 320, caption, fact=fact)
            return
        caption_fact = doc.new_fact("text", "caption") if fact_due else None
        body = _line_plot(xs, curves, "Training step (×1000)", "Score", "Training curves of the baselines")
        caption = f"Figure {n}: Training curves of the baselines on the {doc.domain.lower()} benchmark."
        if caption_fact is not None:
            caption += f" For reference, the {caption_fact.attribute} of {doc.entity} is {caption_fact.value}."
        doc.figure(body, 320, caption, caption_fact=caption_fact)

    def subsection():
        section_no[1] += 1
        name = doc.pick(("Setup", "Analysis", "Variants", "Observations", "Sensitivity"))
        doc.heading(3, f"{section_no[0]}.{section_no[1]} {name}")

    doc.add('<div class="ltx_page_main">\n')
    doc.add(f'<h1 class="ltx_title">{_esc(title)}</h1>\n', doc.text_height(title, char_px=13, line_px=35) + 22)
    authors = ", ".join(_person(doc.rng) for _ in range(int(doc.rng.integers(2, 6))))
    doc.add(f'<div class="ltx_authors">{_esc(authors)}<br><span class="affil">Institute of {_esc(doc.domain)}, '
            f'University of {_esc(_entity_name(doc.rng))}</span></div>\n', 70)
    doc.add('<div class="ltx_abstract"><h6>Abstract</h6>\n', 30)
    with doc.column(width=700, char_px=7.0, line_px=21.9):
        doc.paragraph(_sentences(doc, 5))
    doc.add("</div>\n", 18)

    refs, refs_h = _references(doc, int(min(40, 8 + 1.5 * target_height / PAGE_CSS_HEIGHT)), "arxiv")
    appendix_h = 450.0  # after the references, so that the last page carries facts too
    body_end = target_height - refs_h - 50 - appendix_h
    specials = {"Method": (equation, equation), "Results": (results_table, plot), "Ablation studies": (results_table,)}
    for i, name in enumerate(_ARXIV_SECTIONS):
        section_no[:] = [i + 1, 0]
        doc.heading(2, f"{i + 1} {name}")
        until = doc.height + (body_end - doc.height) / (len(_ARXIV_SECTIONS) - i)
        paragraph()
        for block in specials.get(name, ()):
            block()
        if name in ("Introduction", "Related work", "Conclusion"):
            doc.fill(until, [(8, paragraph), (1, subsection), (0.8, plot)])
        else:
            doc.fill(until, [(5, paragraph), (1.5, equation), (1.2, results_table), (1.2, plot), (1, subsection)])
    _quirks_block(doc)
    doc.heading(2, "References")
    doc.add(refs, refs_h)
    doc.heading(2, "Appendix A Additional results")
    paragraph()
    doc.fill(target_height, [(2, paragraph), (1, results_table)])
    doc.add('<div class="ltx_page_footer">Generated by LaTeXML from the source of this paper.</div>\n')
    doc.add("</div>\n")
    return title


def _jitter(doc: _Doc, number: str) -> str:
    """A near-duplicate of ``number`` (3 % off at most) in the same format."""
    x = _near(doc.rng, float(number.replace(",", "")), 0.03)
    if "." in number:
        return f"{x:.{len(number.split('.')[1])}f}"
    return f"{int(x):,}" if "," in number else str(int(x))


def _near_value(doc: _Doc, key: str, kind: str) -> str:
    """A distractor value of ``kind``: fixed per (source, key) across documents, then jittered."""
    value = _value(np.random.default_rng(zlib.crc32(f"{doc.source}|{key}".encode())), kind)
    return re.sub(r"\d[\d,]*(?:\.\d+)?", lambda m: _jitter(doc, m.group()), value, count=1)


# --------------------------------------------------------------------------------------------
# PubMed
# --------------------------------------------------------------------------------------------

_PUBMED_CSS = """
body{margin:0;background:#fff;color:#212121;font-family:"Liberation Sans",Arial,sans-serif;font-size:16px;line-height:1.6}
.usa-banner{background:#f0f0f0;font-size:12px;padding:4px 20px}
.cookie-banner{position:fixed;left:0;right:0;bottom:0;padding:14px 20px;background:#1b1b1b;color:#fff;font-size:14px}
.cookie-banner button{margin-left:12px}
main{max-width:860px;margin:0 auto;padding:20px 50px 40px}
.journal{font-size:13px;color:#5c5c5c;margin-bottom:6px}
h1{font-size:27px;line-height:1.3;margin:4px 0 10px;color:#205493}
.authors{font-size:15px;margin-bottom:14px}
.abstract{background:#f1f6fb;padding:10px 16px;margin-bottom:16px}
.abstract h3{font-size:16px;margin:8px 0 2px}
h2{font-size:21px;margin:22px 0 8px;color:#205493;line-height:1.3}
h3{font-size:17px;margin:14px 0 6px;line-height:1.3}
p{margin:5px 0}
ul,ol{margin:6px 0;padding-left:32px}
table{border-collapse:collapse;margin:12px 0;font-size:14px;line-height:1.5;width:100%}
table caption{text-align:left;font-weight:bold;padding:4px 0}
th,td{border:1px solid #c7c7c7;padding:5px 8px;text-align:left}
thead th{background:#e8eef5}
figure{margin:14px 0}
figure figcaption{font-size:14px;line-height:1.5;margin-top:4px}
ol.references{font-size:14px;line-height:1.5}
"""

_PUBMED_SECTIONS = ("Introduction", "Case presentation", "Laboratory findings", "Imaging", "Treatment",
                    "Outcome and follow-up", "Discussion", "Conclusion")
_PUBMED_LABS = (("Sodium", "mmol/L", 135, 145, "135-145"), ("Potassium", "mmol/L", 3.5, 5.1, "3.5-5.1"),
                ("Creatinine", "mg/dL", 0.6, 1.3, "0.6-1.3"), ("C-reactive protein", "mg/L", 1, 80, "<5"),
                ("Platelet count", "10^3/uL", 150, 400, "150-400"), ("Alanine aminotransferase", "U/L", 10, 90, "7-56"),
                ("Glucose", "mg/dL", 70, 160, "70-99"), ("Lactate", "mmol/L", 0.5, 3, "0.5-2.2"))
_PUBMED_CONDITIONS = {"Surgical Case Reports": "appendiceal mass", "Public Health Reports": "outbreak-associated infection",
                      "Environmental Reports": "solvent exposure", "Medical Reports": "recurrent fever",
                      "Chemistry": "heavy-metal intoxication", "Bioinformatics": "rare germline variant"}


def _pubmed(doc: _Doc, target_height: float) -> str:
    """A case report: journal line, title, authors, structured abstract, the case sections with
    paragraphs, laboratory tables (table-row facts), imaging figures (a measured scan or a chart is
    an image fact; else the caption may carry a fact), day-by-day timelines (list facts),
    references; clutter: government banner, cookie banner. Returns the title."""
    condition = _PUBMED_CONDITIONS.get(doc.domain, "unusual presentation")
    title = f"{_cap(doc.entity)} syndrome presenting as {condition}: a case report"

    def paragraph():
        doc.paragraph(_sentences(doc, int(doc.rng.integers(3, 7))))

    def lab_table():
        labs = list(doc.rng.permutation(len(_PUBMED_LABS)))[: int(doc.rng.integers(3, 7))]
        rows = []
        for i in labs:
            name, unit, lo, hi, ref = _PUBMED_LABS[int(i)]
            x = _near(doc.rng, _base("pubmed", name, lo, hi), 0.05)
            rows.append(([name, f"{x:.1f} {unit}", ref], None))
        for fact in doc.facts_for("table_row", "table_row", 3, (len(rows) + 4) * 32):
            rows.insert(int(doc.rng.integers(len(rows) + 1)), ([_cap(fact.attribute), fact.value, "-"], fact))
        doc.numbers["table"] += 1
        doc.table(("Parameter", "Value", "Reference range"), rows,
                  caption=f"Table {doc.numbers['table']}. Laboratory and treatment parameters")

    def imaging(photo_ok: bool = True):
        """An imaging figure: a measured scan or a chart (an image fact), else a scan or an
        ultrasound photo whose caption may carry a text fact."""
        fact_due = doc.due(1, 360) > 0
        fact = doc.new_fact("image", "image") if fact_due and doc.chance(0.5) else None
        n = doc.numbers["figure"] + 1
        if fact is not None and doc.value_kind[fact.fact_id] == "mm":
            body = _dimension_drawing(fact.value, "scan", f"{_cap(fact.attribute)}, {doc.entity} case", 300, 300)
            caption = f"Figure {n}. Axial computed tomography of the {doc.entity} case; the lesion is measured."
            doc.figure(body, 300, caption, fact=fact)
        elif fact is not None:
            years = [str(y) for y in range(2018, 2025)]
            vals = [_near(doc.rng, _number(fact.value), 0.25) for _ in years]
            hi = len(years) - 1
            vals[hi] = _number(fact.value)
            labels = [f"{v:.1f}" for v in vals]
            labels[hi] = fact.value
            body = _bar_plot(years, vals, labels, hi, "Year", _cap(doc.base_attribute[fact.fact_id]),
                             f"{_cap(fact.attribute)}, {doc.entity} case series")
            caption = f"Figure {n}. {_cap(fact.attribute)} in the {doc.entity} case series by year; 2024 is highlighted."
            doc.figure(body, 320, caption, fact=fact)
        else:
            caption_fact = doc.new_fact("text", "caption") if fact_due else None
            day = int(doc.rng.integers(1, 20))
            if photo_ok and doc.chance(0.5):
                caption = f"Figure {n}. Ultrasound image obtained on day {day} of admission."
                body, height = _img(doc.png(240, 180, "scan"), 320, 240, "Ultrasound image"), 240
            else:
                caption = f"Figure {n}. Contrast-enhanced computed tomography on day {day}; the lesion is measured."
                size = _near(doc.rng, _base("pubmed", "lesion", 8, 60), 0.2)  # a distractor measurement
                body, height = _dimension_drawing(f"{size:.1f} mm", "scan", "Contrast-enhanced CT", 300, 300), 300
            if caption_fact is not None:
                caption += f" The {caption_fact.attribute} was {caption_fact.value}."
            doc.figure(body, height, caption, caption_fact=caption_fact)

    def timeline():
        events = _sentences(doc, int(doc.rng.integers(2, 4)))
        items = [f"Day {int(doc.rng.integers(1, 60))}: {s.rstrip('.')}" for s in events]
        doc.bullets(items, max_facts=2)

    doc.add('<div class="usa-banner">An official website of the United States government. '
            "Here's how you know.</div>\n")
    doc.add('<div class="cookie-banner">This site uses cookies to improve your experience. '
            "<button>Accept</button><button>Manage</button></div>\n")
    doc.add("<main>\n")
    year = int(doc.rng.integers(2015, 2025))
    doc.add(f'<div class="journal">J Case Rep. {year}; {int(doc.rng.integers(1, 30))}({int(doc.rng.integers(1, 12))}). '
            f"Published online {int(doc.rng.integers(1, 28))} May {year}.</div>\n", 21)
    doc.add(f"<h1>{_esc(title)}</h1>\n", doc.text_height(title, char_px=12.5, line_px=35) + 14)
    authors = ", ".join(_person(doc.rng) for _ in range(int(doc.rng.integers(3, 7))))
    doc.add(f'<div class="authors">{_esc(authors)}</div>\n', 38)
    doc.add('<section class="abstract"><h2 style="margin-top:0">Abstract</h2>\n', 46)
    with doc.column(width=828):
        for part in ("Background", "Case presentation", "Conclusion"):
            doc.add(f"<h3>{part}</h3>\n", 34)
            doc.paragraph(_sentences(doc, 3))
    doc.add('<p class="keywords"><b>Keywords:</b> case report; ' + _esc(doc.domain.lower()) + "; "
            + _esc(condition) + "</p></section>\n", 40)

    refs, refs_h = _references(doc, int(min(35, 8 + target_height / PAGE_CSS_HEIGHT)), "pubmed")
    body_end = target_height - refs_h - 50
    specials = {"Laboratory findings": (lab_table,), "Imaging": (lambda: imaging(photo_ok=False),),
                "Outcome and follow-up": (timeline, lab_table)}
    for i, name in enumerate(_PUBMED_SECTIONS):
        doc.heading(2, name)
        until = doc.height + (body_end - doc.height) / (len(_PUBMED_SECTIONS) - i)
        paragraph()
        for block in specials.get(name, ()):
            block()
        if name in ("Introduction", "Discussion", "Conclusion"):
            doc.fill(until, [(8, paragraph), (0.6, timeline)])
        else:
            doc.fill(until, [(5, paragraph), (1.3, lab_table), (1.2, imaging), (0.8, timeline)])
    _quirks_block(doc)
    doc.heading(2, "References")
    doc.add(refs, refs_h)
    doc.add("</main>\n")
    return title


# --------------------------------------------------------------------------------------------
# SEC proxy statement
# --------------------------------------------------------------------------------------------

_SEC_CSS = """
body{margin:0;background:#fff;color:#000;font-family:"Liberation Serif","Times New Roman",serif;font-size:14px;line-height:1.43}
.filing{max-width:880px;margin:0 auto;padding:30px 40px}
.cover{text-align:center;padding:40px 0 30px;border-bottom:3px double #000}
.cover .company{font-size:30px;font-weight:bold;letter-spacing:1px}
.cover .notice{font-size:18px;margin-top:14px}
h2{font-size:19px;text-transform:uppercase;margin:24px 0 8px;color:#00305e;line-height:1.3}
h3{font-size:16px;margin:14px 0 6px;line-height:1.3}
p{margin:5px 0 5px;text-align:justify}
table{width:100%;border-collapse:collapse;margin:10px 0;font-size:13px;line-height:1.3}
table caption{text-align:left;font-weight:bold;padding:4px 0;color:#00305e}
th,td{padding:3px 6px;border-bottom:1px solid #999;text-align:right}
th[scope=row],td:first-child,thead th:first-child{text-align:left}
thead th{border-bottom:2px solid #000;vertical-align:bottom;background:#e9eef4}
ul,ol{margin:6px 0;padding-left:32px}
.toc li{margin:2px 0}
figure{margin:12px 0;text-align:center}
figure figcaption{font-size:13px;line-height:1.3}
.page-number{text-align:center;font-size:12px;margin-top:18px;color:#333}
hr.page-break{border:0;border-top:1px solid #bbb;margin:6px 0 18px}
"""

_SEC_SECTIONS = (
    "Proxy summary", "Proposal 1: Election of directors", "Corporate governance", "Director compensation",
    "Proposal 2: Ratification of the independent auditor", "Compensation discussion and analysis",
    "Executive compensation tables", "Pay versus performance", "Proposal 3: Advisory vote on executive compensation",
    "Security ownership of certain beneficial owners and management", "Voting results of the 2024 annual meeting",
    "Questions and answers about the annual meeting",
)
_SEC_OFFICERS = ("Chief Executive Officer", "Chief Financial Officer", "Chief Operating Officer", "General Counsel",
                 "Chief Technology Officer")
_SEC_SCT = ("Name and principal position", "Year", "Salary ($)", "Bonus ($)", "Stock awards ($)", "Option awards ($)",
            "Non-equity incentive ($)", "All other compensation ($)", "Total ($)")
_SEC_DIRECTOR = ("Name", "Fees earned or paid in cash ($)", "Stock awards ($)", "All other compensation ($)", "Total ($)")
_SEC_VOTES = ("Proposal", "Votes for", "Votes against", "Abstentions", "Broker non-votes")
_SEC_OWNERSHIP = ("Name of beneficial owner", "Shares beneficially owned", "Percent of class")
_SEC_KV = ("Item", "Fiscal 2024", "Fiscal 2023")
_SEC_KV_LABELS = ("Salary of the chief operating officer", "Non-equity incentive of the chief executive",
                  "Audit-related fees", "Tax fees", "All other fees", "Perquisites of the general counsel",
                  "Committee chair retainer", "Lead independent director fee", "Deferred compensation earnings")
_SEC_HOLDERS = ("Northgate Capital Partners", "Elm Street Advisors", "Harbor Index Trust")
_SEC_QUESTIONS = ("Who can vote at the annual meeting?", "How do I vote my shares?", "What is a broker non-vote?",
                  "Can I change my vote after I submit my proxy?", "Who pays for the solicitation of proxies?",
                  "What constitutes a quorum?", "How can I attend the annual meeting?")
_SEC_PROPOSALS = ("Election of directors (average)", "Ratification of the independent auditor",
                  "Advisory vote on executive compensation", "Approval of the equity incentive plan")


def _sec(doc: _Doc, target_height: float) -> str:
    """A proxy statement: cover, letter, table of contents, the proposals and disclosure sections,
    with the same tables in every filing (summary compensation, director compensation, voting
    results, beneficial ownership: distractors with near-duplicate numbers; "Item | Fiscal 2024 |
    Fiscal 2023" tables: table-row facts), director bios, highlights lists, a pay-versus-performance
    chart (image fact), printed page footers, no clutter. Returns the title."""
    company = f"{_cap(doc.entity)} Holdings, Inc."
    title = f"{company} 2025 Proxy Statement"
    directors = [_person(doc.rng) for _ in range(int(doc.rng.integers(8, 12)))]
    officers = [(_person(doc.rng), t) for t in _SEC_OFFICERS]
    bios = list(directors)
    section = ["Proxy summary"]  # the current section, named in table captions
    page = [1, PAGE_CSS_HEIGHT * 0.95]

    def money(key: str, lo: float, hi: float, spread: float = 0.04) -> str:
        return f"{round(_near(doc.rng, _base('sec', key, lo, hi), spread), -3):,.0f}"

    def page_footer():
        if doc.height >= page[1]:
            doc.add(f'<div class="page-number">{_esc(company)} | 2025 Proxy Statement | {page[0]}</div>'
                    '<hr class="page-break">\n', 35)
            page[0] += 1
            page[1] = doc.height + PAGE_CSS_HEIGHT * 0.95

    def paragraph():
        doc.paragraph(_sentences(doc, int(doc.rng.integers(3, 8))))

    def highlights():
        doc.bullets([s.rstrip(".") for s in _sentences(doc, int(doc.rng.integers(2, 4)))], max_facts=2)

    def kv_table(caption: str = ""):
        """An "Item | Fiscal 2024 | Fiscal 2023" table: fact rows among near-duplicate distractor rows."""
        caption = caption or f"{section[0].split(': ')[-1].capitalize()}: key figures"
        labels = list(doc.rng.permutation(_SEC_KV_LABELS))[: int(doc.rng.integers(3, 6))]
        rows = []
        for lab in labels:
            current = money(lab, 20_000, 900_000)
            rows.append(([lab, "$" + current, "$" + _jitter(doc, current)], None))
        for fact in doc.facts_for("table_row", "table_row", 3, (len(rows) + 4) * 24):
            prior = _jitter(doc, f"{_number(fact.value):,.0f}")
            prior = ("$" if fact.value.startswith("$") else "") + prior
            rows.insert(int(doc.rng.integers(len(rows) + 1)), ([_cap(fact.attribute), fact.value, prior], fact))
        doc.table(_SEC_KV, rows, caption=caption, cls="kv")

    def summary_compensation():
        rows = []
        for name, position in officers:
            for year in (2024, 2023, 2022):
                amounts = [money(f"{position}|{col}|{year}", 0 if col.startswith("Bonus") else 200_000, 3_000_000)
                           for col in _SEC_SCT[2:-1]]
                total = sum(int(a.replace(",", "")) for a in amounts)
                label = f"{name}, {position}" if year == 2024 else ""
                rows.append(([label, str(year), *amounts, f"{total:,}"], None))
        doc.table(_SEC_SCT, rows, caption="Summary compensation table", cls="summary-compensation", row_header=False)
        kv_table("Summary compensation table: key elements")

    def director_compensation():
        rows = []
        for name in directors:
            fees, stock = money("dir|fees", 80_000, 140_000), money("dir|stock", 150_000, 220_000)
            other = money("dir|other", 0, 20_000, 0.5)
            total = sum(int(x.replace(",", "")) for x in (fees, stock, other))
            rows.append(([name, fees, stock, other, f"{total:,}"], None))
        doc.table(_SEC_DIRECTOR, rows, caption="Director compensation table", cls="director-compensation")

    def vote_results():
        ranges = ((4e7, 9e7), (1e6, 2e7), (1e5, 1e6), (1e6, 6e6))  # for, against, abstentions, broker non-votes
        rows = []
        for proposal in _SEC_PROPOSALS:
            counts = [_near(doc.rng, _base("sec", f"{proposal}|{c}", lo, hi)) for c, (lo, hi) in zip(_SEC_VOTES[1:], ranges)]
            rows.append(([proposal, *(f"{int(n):,}" for n in counts)], None))
        doc.table(_SEC_VOTES, rows, caption="Voting results", cls="vote-results")
        kv_table("Voting and meeting details")

    def ownership():
        holders = list(_SEC_HOLDERS) + directors[:6] + ["All directors and executive officers as a group"]
        rows = []
        for holder in holders:
            shares = _near(doc.rng, _base("sec", f"own|{holder[:8]}", 1e4, 2e7))
            rows.append(([holder, f"{int(shares):,}", f"{doc.rng.uniform(0.1, 9.5):.1f}%"], None))
        doc.table(_SEC_OWNERSHIP, rows, caption="Beneficial ownership table", cls="beneficial-ownership")

    def pay_versus_performance():
        """Return of the company against its peers by year; the marked last point is an image fact."""
        fact = doc.new_fact("image", "image") if doc.due(1, 400) else None
        xs = [2020.0, 2021.0, 2022.0, 2023.0, 2024.0]
        peer = [_near(doc.rng, _base("sec", f"peer|{x}", 80, 160)) for x in xs]
        ours = [_near(doc.rng, p, 0.15) for p in peer]
        mark, title = None, f"Cumulative total shareholder return of {company}"
        if fact is not None:
            ours[-1] = _number(fact.value)
            mark, title = (0, len(xs) - 1, fact.value), f"{_cap(fact.attribute)} of {company}"
        body = _line_plot(xs, [(company, ours), ("Peer group index", peer)], "Fiscal year", "Return (%)", title,
                          mark=mark)
        doc.figure(body, 320, "Compensation actually paid versus cumulative total shareholder return", fact=fact)

    def director_bio():
        if not bios:
            return paragraph()
        name = bios.pop(0)
        doc.heading(3, name)
        doc.paragraph([f"{name}, age {int(doc.rng.integers(45, 76))}, has served as a director since "
                       f"{int(doc.rng.integers(2005, 2024))}."] + _sentences(doc, 3))

    def question():
        doc.heading(3, doc.pick(_SEC_QUESTIONS))
        paragraph()

    doc.add('<div class="filing">\n')
    doc.add(f'<div class="cover"><div class="company">{_esc(company.upper())}</div>'
            '<div class="notice">NOTICE OF 2025 ANNUAL MEETING OF SHAREHOLDERS AND PROXY STATEMENT</div></div>\n', 156)
    doc.paragraph([f"Dear Shareholders of {company}:"] + _sentences(doc, 5))
    toc = "".join(f"<li>{_esc(s)} ........ {3 + 4 * i}</li>" for i, s in enumerate(_SEC_SECTIONS))
    doc.add(f'<h2>Table of contents</h2><ol class="toc">{toc}</ol>\n', doc.m.h2_px + 22 * len(_SEC_SECTIONS) + 10)

    specials: dict[str, tuple[Callable[[], None], ...]] = {
        "Proxy summary": (highlights,),
        "Proposal 1: Election of directors": (director_bio, director_bio),
        "Director compensation": (director_compensation, kv_table),
        "Proposal 2: Ratification of the independent auditor": (kv_table,),
        "Executive compensation tables": (summary_compensation,),
        "Pay versus performance": (pay_versus_performance,),
        "Security ownership of certain beneficial owners and management": (ownership,),
        "Voting results of the 2024 annual meeting": (vote_results,),
    }
    fill_blocks = {
        "Proposal 1: Election of directors": [(6, director_bio), (1, paragraph)],
        "Director compensation": [(4, paragraph), (1, director_compensation), (1.5, kv_table)],
        "Executive compensation tables": [(3, paragraph), (1, summary_compensation), (1, kv_table)],
        "Pay versus performance": [(4, paragraph), (1, pay_versus_performance), (1, kv_table)],
        "Security ownership of certain beneficial owners and management": [(4, paragraph), (1, ownership)],
        "Voting results of the 2024 annual meeting": [(3, paragraph), (1, vote_results)],
        "Questions and answers about the annual meeting": [(1, question)],
    }
    default_blocks = [(6, paragraph), (1.3, kv_table), (1, highlights)]
    body_end = target_height - 60
    for i, name in enumerate(_SEC_SECTIONS):
        section[0] = name
        doc.heading(2, name)
        until = doc.height + (body_end - doc.height) / (len(_SEC_SECTIONS) - i)
        for block in specials.get(name, (paragraph,)):
            block()
            page_footer()
        blocks = [(w, (lambda b=b: (b(), page_footer()))) for w, b in fill_blocks.get(name, default_blocks)]
        doc.fill(until, blocks)
    _quirks_block(doc)
    secretary = _person(doc.rng)
    doc.add(f'<p class="signature">By order of the Board of Directors, {_esc(secretary)}, Corporate Secretary</p>\n', 40)
    doc.add("</div>\n")
    return title


# --------------------------------------------------------------------------------------------
# Quirks, documents, corpus
# --------------------------------------------------------------------------------------------

_KINDS: dict[str, tuple[Callable[[_Doc, float], str], str]] = {
    "wikipedia": (_wikipedia, _WIKI_CSS),
    "arxiv": (_arxiv, _ARXIV_CSS),
    "pubmed": (_pubmed, _PUBMED_CSS),
    "sec": (_sec, _SEC_CSS),
}


def _quirk_set(quirks: bool | Iterable[str] | None) -> frozenset[str]:
    if quirks is True:
        return frozenset(QUIRKS)
    if not quirks:
        return frozenset()
    chosen = frozenset(quirks)
    unknown = chosen - set(QUIRKS)
    if unknown:
        raise ValueError(f"unknown quirks {sorted(unknown)}; known: {QUIRKS}")
    return chosen


_QUIRKS_HEIGHT = 280.0


def _quirks_block(doc: _Doc) -> None:
    """Elements that a renderer must survive; they carry ``data-quirk`` and no facts.

    Each kind adds them just before its back matter, far below the first screen.
    """
    quirks = doc.quirks
    if not quirks:
        return
    parts = ['<div class="vldocir-quirks">']
    if "lazy_image" in quirks:
        lazy = ' loading="lazy" data-quirk="lazy-image"'
        parts.append(_img(doc.png(160, 100), 320, 200, "Lazily loaded image", lazy))
    if "missing_image" in quirks:
        parts.append(_img("missing-image.png", 320, 200, "Image whose file is missing", ' data-quirk="missing-image"'))
    if "external_image" in quirks:
        parts.append(_img(EXTERNAL_IMAGE_URL, 320, 200, "External image", ' data-quirk="external-image"'))
    if "unclosed_p" in quirks:
        parts.append('<p data-quirk="unclosed-p">' + _esc(" ".join(_sentences(doc, 2))))  # never closed, on purpose
    parts.append("</div>\n")
    doc.clear()
    doc.add("".join(parts), _QUIRKS_HEIGHT)


def write_document(
    rng: np.random.Generator, doc_id: str, source: str, domain: str, target_pages: int, out_dir: str | Path,
    *, quirks: bool | Iterable[str] = False, facts_per_page: int = 6,
) -> SyntheticDocument:
    """Write ``out_dir/<doc_id>/index.html`` (and its images) and return the document and its facts.

    ``target_pages`` is the approximate number of 2000-CSS-px pages the document renders to.
    """
    if source not in _KINDS:
        raise ValueError(f"unknown source {source!r}; known: {sorted(_KINDS)}")
    quirk_set = _quirk_set(quirks)
    directory = Path(out_dir) / doc_id
    directory.mkdir(parents=True, exist_ok=True)
    entity = _entity_name(rng)
    doc = _Doc(rng, doc_id, source, domain, entity, directory, facts_per_page, quirk_set)
    build, css = _KINDS[source]
    # Aim a little short of the last page's end: the estimate runs ~3 % high and fill overshoots by
    # up to one block, and a few stray pixels would otherwise make an (almost) empty extra page.
    height = (max(1, target_pages) - 0.05) * PAGE_CSS_HEIGHT - (_QUIRKS_HEIGHT if quirk_set else 0)
    title = build(doc, height)
    doc.clear()
    html_path = directory / "index.html"
    html_path.write_text(doc.html(title, css), encoding="utf-8")
    pages = {f: int(y // PAGE_CSS_HEIGHT) for f, y in doc.fact_y.items()}
    return SyntheticDocument(doc_id, source, domain, title, entity, html_path, doc.facts, target_pages,
                             round(doc.height / PAGE_CSS_HEIGHT, 3), pages)


def write_corpus(spec: HtmlCorpusSpec, out_dir: str | Path) -> list[SyntheticDocument]:
    """Write every document of ``spec`` under ``out_dir`` plus a ``corpus.json`` manifest.

    Each document has its own generator, seeded by (seed, source, index), so the same spec gives
    byte-identical files and adding documents of one source leaves the others unchanged.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages = {**DEFAULT_PAGES, **dict(getattr(spec, "pages", {}) or {})}
    quirks = getattr(spec, "quirks", False)
    facts_per_page = getattr(spec, "facts_per_page", 6)
    sources = list(SOURCE_DOMAINS)
    documents: list[SyntheticDocument] = []
    for source, n_docs in spec.documents.items():
        lo, hi = pages[source]
        domains = SOURCE_DOMAINS[source]
        for d in range(n_docs):
            rng = np.random.default_rng([spec.seed, sources.index(source), d])
            target = int(rng.integers(lo, hi + 1))
            doc = write_document(rng, f"{source}-{d:05d}", source, domains[d % len(domains)], target, out,
                                 quirks=quirks, facts_per_page=facts_per_page)
            documents.append(doc)
    manifest = {
        "generator": "vldocir.construction.html_docs",
        "seed": spec.seed,
        "page_css": {"width": PAGE_CSS_WIDTH, "height": PAGE_CSS_HEIGHT, "device_scale": DEVICE_SCALE},
        "clutter_selectors": {s: list(v) for s, v in CLUTTER_SELECTORS.items()},
        "quirks": sorted(_quirk_set(quirks)),
        "documents": [
            {
                "doc_id": d.doc_id, "source": d.source, "domain": d.domain, "title": d.title, "entity": d.entity,
                "html": d.html_path.relative_to(out).as_posix(), "target_pages": d.target_pages,
                "estimated_pages": d.estimated_pages, "facts": [asdict(f) for f in d.facts],
            }
            for d in documents
        ],
    }
    (out / "corpus.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote %d synthetic HTML documents to %s", len(documents), out)
    return documents
