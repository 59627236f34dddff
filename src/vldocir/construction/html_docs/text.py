"""Words and numbers shared by the four source writers.

Escaping and capitalisation; numbers fixed per (source, key) and near-duplicates of them, so that
the distractor rows of different documents of a source look alike; invented person names; and the
sentence banks with the helpers that draw from them. The banks are shared by all documents of a
source on purpose: the right page must not be given away by rare words.
"""

from __future__ import annotations

import html
import re
import zlib
from typing import TYPE_CHECKING

import numpy as np

from vldocir.construction.synthetic import _FILLER, _FIRST_NAMES, _LAST_NAMES, _entity_name

if TYPE_CHECKING:  # only for annotations: the document writer itself imports this module
    from vldocir.construction.html_docs.document import _Doc


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


def _jitter(doc: _Doc, number: str) -> str:
    """A near-duplicate of ``number`` (3 % off at most) in the same format."""
    x = _near(doc.rng, float(number.replace(",", "")), 0.03)
    if "." in number:
        return f"{x:.{len(number.split('.')[1])}f}"
    return f"{int(x):,}" if "," in number else str(int(x))


# --------------------------------------------------------------------------------------------
# Sentence banks (shared by all documents of a source, on purpose)
# --------------------------------------------------------------------------------------------

_FACT_FORMS = {
    "wikipedia": (
        "The {a} of {e} is {v}.",
        "{E}'s {a} is recorded as {v}.",
        "According to local records, the {a} of {e} was {v}.",
    ),
    "arxiv": (
        "We find that the {a} of {e} is {v}.",
        "For {e}, the measured {a} is {v}.",
        "In our setting, the {a} obtained with {e} equals {v}.",
    ),
    "pubmed": (
        "The {a} in the {e} case was {v}.",
        "We recorded a {a} of {v} in the {e} case.",
        "In this {e} case, the {a} was {v}.",
    ),
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


def _sentences(doc: _Doc, n: int, noun: str = "") -> list[str]:
    """``n`` filler sentences from the source's bank and the shared text-only filler."""
    shared = [_cap(f.strip().rstrip(" .")) + "." for f in _FILLER]
    bank = list(_SENTENCES[doc.source]) + shared
    chosen = doc.rng.choice(len(bank), size=min(n, len(bank)), replace=False)
    return [
        bank[int(i)].format(e=doc.entity, E=_cap(doc.entity), d=doc.domain.lower(), noun=noun or "institution")
        for i in chosen
    ]


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
