"""The arXiv look: a paper as rendered by ar5iv/LaTeXML (:func:`_arxiv`) and its stylesheet."""

from __future__ import annotations

import math
import re
import zlib

import numpy as np

from vldocir.construction.html_docs.document import PAGE_CSS_HEIGHT, _Doc, _quirks_block
from vldocir.construction.html_docs.drawings import _line_plot
from vldocir.construction.html_docs.text import _base, _cap, _esc, _jitter, _number, _person, _references, _sentences
from vldocir.construction.synthetic import SOURCE_ATTRIBUTES, _entity_name, _value

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

_ARXIV_SECTIONS = (
    "Introduction",
    "Related work",
    "Method",
    "Experimental setup",
    "Results",
    "Ablation studies",
    "Discussion",
    "Conclusion",
)
_ARXIV_METHODS = (
    "Linear baseline",
    "Random forest",
    "ResNet-50",
    "Transformer-base",
    "Gaussian process",
    "Kernel SVM",
    "MLP ensemble",
)
_ARXIV_FORMULAS = (
    "E = m c^2 + {v} k",
    "L(θ) = Σ_i ℓ(x_i, y_i) + {v} ‖θ‖²",
    "H = −J Σ s_i s_j + {v} Σ s_i",
    "ρ(r) = ρ_0 exp(−r / {v})",
    "τ = {v} · (T − T_c)^(−ν)",
    "y = W x + {v} b",
)
_ARXIV_TITLES = (
    "{E}: a scalable approach to {d}",
    "On the stability of {E} in {d}",
    "{E}: revisiting a classical problem of {d}",
    "Learning with {E}: evidence from {d}",
)
_NUMERIC = frozenset({"float", "K", "eV", "s", "nm", "km", "m", "km2", "mm", "g/dL", "mg", "ppm", "mmHg"})


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
        doc.add(
            f'<div class="equation"{attr}><span class="math">{_esc(formula)}</span>{note}'
            f'<span class="eqno">({n})</span></div>\n',
            27 + 24,
        )

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
        caption = (
            f"Table {doc.numbers['table']}: Results of {doc.entity} and baselines on the "
            f"{doc.domain.lower()} benchmark."
        )
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
            ours = [target * math.exp(-(((x - xs[peak]) / 25) ** 2)) * 0.97 for x in xs]
            ours[peak] = target
            scale = target / max(max(ys) for _, ys in curves)
            curves = [(m, [y * scale * 0.8 for y in ys]) for m, ys in curves]
            body = _line_plot(
                xs,
                [(f"{_cap(doc.entity)} (ours)", ours), *curves],
                "Training step (×1000)",
                _cap(doc.base_attribute[fact.fact_id]),
                f"{_cap(fact.attribute)} of {doc.entity}",
                mark=(0, peak, fact.value),
            )
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
    doc.add(
        f'<div class="ltx_authors">{_esc(authors)}<br><span class="affil">Institute of {_esc(doc.domain)}, '
        f"University of {_esc(_entity_name(doc.rng))}</span></div>\n",
        70,
    )
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


def _near_value(doc: _Doc, key: str, kind: str) -> str:
    """A distractor value of ``kind``: fixed per (source, key) across documents, then jittered."""
    value = _value(np.random.default_rng(zlib.crc32(f"{doc.source}|{key}".encode())), kind)
    return re.sub(r"\d[\d,]*(?:\.\d+)?", lambda m: _jitter(doc, m.group()), value, count=1)
