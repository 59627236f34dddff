"""The PubMed Central look: a clinical case report (:func:`_pubmed`) and its stylesheet."""

from __future__ import annotations

from vldocir.construction.html_docs.document import PAGE_CSS_HEIGHT, _Doc, _quirks_block
from vldocir.construction.html_docs.drawings import _bar_plot, _dimension_drawing, _img
from vldocir.construction.html_docs.text import _base, _cap, _esc, _near, _number, _person, _references, _sentences

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

_PUBMED_SECTIONS = (
    "Introduction",
    "Case presentation",
    "Laboratory findings",
    "Imaging",
    "Treatment",
    "Outcome and follow-up",
    "Discussion",
    "Conclusion",
)
_PUBMED_LABS = (
    ("Sodium", "mmol/L", 135, 145, "135-145"),
    ("Potassium", "mmol/L", 3.5, 5.1, "3.5-5.1"),
    ("Creatinine", "mg/dL", 0.6, 1.3, "0.6-1.3"),
    ("C-reactive protein", "mg/L", 1, 80, "<5"),
    ("Platelet count", "10^3/uL", 150, 400, "150-400"),
    ("Alanine aminotransferase", "U/L", 10, 90, "7-56"),
    ("Glucose", "mg/dL", 70, 160, "70-99"),
    ("Lactate", "mmol/L", 0.5, 3, "0.5-2.2"),
)
_PUBMED_CONDITIONS = {
    "Surgical Case Reports": "appendiceal mass",
    "Public Health Reports": "outbreak-associated infection",
    "Environmental Reports": "solvent exposure",
    "Medical Reports": "recurrent fever",
    "Chemistry": "heavy-metal intoxication",
    "Bioinformatics": "rare germline variant",
}


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
        doc.table(
            ("Parameter", "Value", "Reference range"),
            rows,
            caption=f"Table {doc.numbers['table']}. Laboratory and treatment parameters",
        )

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
            body = _bar_plot(
                years,
                vals,
                labels,
                hi,
                "Year",
                _cap(doc.base_attribute[fact.fact_id]),
                f"{_cap(fact.attribute)}, {doc.entity} case series",
            )
            caption = (
                f"Figure {n}. {_cap(fact.attribute)} in the {doc.entity} case series by year; 2024 is highlighted."
            )
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

    doc.add(
        '<div class="usa-banner">An official website of the United States government. Here\'s how you know.</div>\n'
    )
    doc.add(
        '<div class="cookie-banner">This site uses cookies to improve your experience. '
        "<button>Accept</button><button>Manage</button></div>\n"
    )
    doc.add("<main>\n")
    year = int(doc.rng.integers(2015, 2025))
    doc.add(
        f'<div class="journal">J Case Rep. {year}; {int(doc.rng.integers(1, 30))}({int(doc.rng.integers(1, 12))}). '
        f"Published online {int(doc.rng.integers(1, 28))} May {year}.</div>\n",
        21,
    )
    doc.add(f"<h1>{_esc(title)}</h1>\n", doc.text_height(title, char_px=12.5, line_px=35) + 14)
    authors = ", ".join(_person(doc.rng) for _ in range(int(doc.rng.integers(3, 7))))
    doc.add(f'<div class="authors">{_esc(authors)}</div>\n', 38)
    doc.add('<section class="abstract"><h2 style="margin-top:0">Abstract</h2>\n', 46)
    with doc.column(width=828):
        for part in ("Background", "Case presentation", "Conclusion"):
            doc.add(f"<h3>{part}</h3>\n", 34)
            doc.paragraph(_sentences(doc, 3))
    doc.add(
        '<p class="keywords"><b>Keywords:</b> case report; '
        + _esc(doc.domain.lower())
        + "; "
        + _esc(condition)
        + "</p></section>\n",
        40,
    )

    refs, refs_h = _references(doc, int(min(35, 8 + target_height / PAGE_CSS_HEIGHT)), "pubmed")
    body_end = target_height - refs_h - 50
    specials = {
        "Laboratory findings": (lab_table,),
        "Imaging": (lambda: imaging(photo_ok=False),),
        "Outcome and follow-up": (timeline, lab_table),
    }
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
