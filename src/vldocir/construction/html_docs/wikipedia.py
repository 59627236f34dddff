"""The Wikipedia look: an encyclopaedia article (:func:`_wikipedia`) and its stylesheet."""

from __future__ import annotations

import numpy as np

from vldocir.construction.html_docs.document import PAGE_CSS_HEIGHT, _Doc, _quirks_block
from vldocir.construction.html_docs.drawings import _dimension_drawing, _img
from vldocir.construction.html_docs.text import _base, _cap, _esc, _near, _references, _sentences
from vldocir.construction.synthetic import _entity_name

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

_WIKI_SECTIONS = (
    "History",
    "Geography",
    "Organisation",
    "Economy",
    "Culture",
    "Landmarks",
    "Notable people",
    "Events",
    "Reception",
    "Legacy",
    "Transport",
    "Education",
)
_WIKI_SUBSECTIONS = ("Early period", "Modern era", "Recent developments", "Overview", "Records", "Administration")
_WIKI_INDICATORS = (
    "Registered associations",
    "Annual visitors",
    "Listed buildings",
    "Annual rainfall (mm)",
    "Public libraries",
    "Schools",
    "Hospital beds",
    "Bus lines",
    "Parks and gardens",
)

_WIKI_NOUNS = {
    "Arts": "art museum",
    "Entertainment": "theatre company",
    "Science": "research institute",
    "Technology": "technology park",
    "Geography": "town",
    "Sports": "football club",
    "History": "historic fortress",
    "Politics": "administrative district",
    "Economics": "trading port",
}


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
        fixed = [
            ("Type", _cap(noun)),
            ("Established", str(int(doc.rng.integers(1200, 1990)))),
            ("Region", _entity_name(doc.rng)),
            ("Official language", "Lingua " + _entity_name(doc.rng)),
        ]
        facts = doc.facts_for("table_row", "table_row", 5, 230 + 27 * 9)
        rows = [f'<tr><th scope="row">{_esc(k)}</th><td>{_esc(v)}</td></tr>' for k, v in fixed]
        for fact in facts:
            row = (
                f'<tr data-fact="{fact.fact_id}"><th scope="row">{_esc(_cap(fact.attribute))}</th>'
                f"<td>{_esc(fact.value)}</td></tr>"
            )
            rows.insert(int(doc.rng.integers(len(rows) + 1)), row)
        image = _img(doc.png(220, 150), 260, 177, f"View of {doc.entity}")
        markup = (
            f'<table class="infobox"><caption>{_esc(doc.entity)}</caption>'
            f'<tr><td colspan="2" class="infobox-image">{image}</td></tr>' + "".join(rows) + "</table>\n"
        )
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
        doc.table(
            ("Indicator", "Value", "Year of record"), rows, caption=f"Key figures for {doc.entity}", cls="wikitable"
        )

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
    nav = "".join(
        f'<a href="#">{t}</a>'
        for t in (
            "Main page",
            "Contents",
            "Current events",
            "Random article",
            "About",
            "Contact us",
            "Help",
            "Community portal",
            "Recent changes",
            "Upload file",
            "What links here",
        )
    )
    doc.add(f'<div id="mw-navigation"><div class="logo">Wikipedia</div>{nav}</div>\n')
    doc.add(
        '<div id="siteNotice">Help us improve articles about places and institutions. '
        '<a href="#">Take part in the survey</a>.</div>\n'
    )
    doc.add(
        f'<div id="content">\n<h1 id="firstHeading">{_esc(doc.entity)}</h1>\n'
        '<div id="siteSub">From Wikipedia, the free encyclopedia</div>\n',
        60,
    )
    infobox()
    lead = [f"{_cap(doc.entity)} is a {noun} in the field of {doc.domain.lower()}.", *_sentences(doc, 3, noun)]
    doc.paragraph(lead)
    for _ in range(int(doc.rng.integers(1, 3))):
        paragraph()

    refs, refs_h = _references(doc, int(min(30, 4 + 2 * target_height / PAGE_CSS_HEIGHT)), "wikipedia")
    n_sections = int(np.clip(round(target_height / 1300), 2, len(_WIKI_SECTIONS)))
    sections = list(doc.rng.permutation(_WIKI_SECTIONS))[:n_sections]
    toc = "".join(f"<li>{_esc(s)}</li>" for s in [*sections, "References"])
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
    doc.add(
        f'<div id="catlinks">Categories: <a href="#">{_esc(doc.domain)}</a> | <a href="#">{_esc(noun.title())}s</a></div>\n'
    )
    doc.add("</div>\n")
    return doc.entity
