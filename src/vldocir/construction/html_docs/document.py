"""What every source writer shares: page geometry, facts, the documents' records, each source's
text metrics, the writer :class:`_Doc` that accumulates one document's HTML with a running height
estimate (and owes facts by it), and the block of quirks that renderer robustness tests ask for.

The source writers (:mod:`.wikipedia`, :mod:`.arxiv`, :mod:`.pubmed`, :mod:`.sec`) build on this
module; :mod:`.corpus` picks one per source.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from vldocir.construction.html_docs.drawings import _img, _png, _with_attribute
from vldocir.construction.html_docs.text import _FACT_FORMS, _cap, _esc, _sentences
from vldocir.construction.synthetic import SOURCE_ATTRIBUTES, _entity_name, _value

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


# --------------------------------------------------------------------------------------------
# Layout metrics and the document writer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metrics:
    """Estimated geometry of one source's stylesheet (in the source's module), in CSS px."""

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


class _Doc:
    """Accumulates one document's HTML, its estimated height and its facts.

    Blocks ask :meth:`due` how many facts they should carry (facts are owed at a steady rate per
    estimated CSS px), draw them with :meth:`new_fact` and append themselves with :meth:`add`.
    A right float (infobox, thumbnail) lets following paragraphs flow beside it; :meth:`clear`
    settles its remaining height.
    """

    def __init__(
        self,
        rng,
        doc_id,
        source,
        domain,
        entity,
        directory: Path,
        facts_per_page: int,
        quirks: frozenset[str] = frozenset(),
    ):
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

    def text_height(
        self, text: str, *, char_px: float | None = None, line_px: float | None = None, width: float | None = None
    ) -> float:
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
        markup = (
            "<ul>"
            + "".join(f'<li data-fact="{f.fact_id}">{_esc(t)}</li>' if f else f"<li>{_esc(t)}</li>" for t, f in entries)
            + "</ul>\n"
        )
        if self._float_left > 0:
            self.flow(markup, " ".join(t for t, _ in entries), self.m.gap_px + 4 * len(entries), indent=40)
        else:
            self.add(markup, sum(item_height(t) for t, _ in entries) + self.m.gap_px)

    def table(
        self,
        headers: Sequence[str],
        rows: list[tuple[list[str], Fact | None]],
        *,
        caption: str = "",
        cls: str = "",
        row_header: bool = True,
    ) -> None:
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
            spare, extra = max(0.0, width - sum(least)), [b - a for a, b in zip(least, most, strict=True)]
            col_w = [a + spare * e / max(1.0, sum(extra)) for a, e in zip(least, extra, strict=True)]
        height = 0.0
        for r in rows:  # a row may have fewer cells than the table has columns
            n_lines = max(
                math.ceil(len(c) * char / max(char, w - pad)) if c else 1 for c, w in zip(r, col_w, strict=False)
            )
            height += max(1, n_lines) * self.m.cell_line_px + self.m.cell_pad_px
        return height

    def figure(
        self,
        body: str,
        body_height: float,
        caption: str,
        *,
        fact: Fact | None = None,
        caption_fact: Fact | None = None,
        cls: str = "",
        float_width: float | None = None,
    ) -> None:
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
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width={PAGE_CSS_WIDTH}">\n<title>{_esc(title)}</title>\n'
            f"<style>\n{css.strip()}\n</style>\n</head>\n<body>\n" + "".join(self.parts) + "</body>\n</html>\n"
        )


# --------------------------------------------------------------------------------------------
# Quirks
# --------------------------------------------------------------------------------------------


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
