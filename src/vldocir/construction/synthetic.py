"""A deterministic synthetic benchmark in the shape of VL-DocIR, text only.

Documents of the four sources' kinds about invented entities carry invented facts, one fact per
element; queries ask for one or more facts, and their evidence pages follow from where those
elements sit, for all six evidence structures. Documents of one source share their attribute
vocabulary and layout, so the right page is not given away by rare words.

This is the text-only mode: pages have DOM text and element boxes on a nominal 2000x4000 page but
no image (``benchmark.json`` says ``"rendered": false``). It makes benchmarks from a few documents
up to the paper's size for tests and scale benchmarks.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from vldocir.data.benchmark import Benchmark, write_benchmark
from vldocir.data.evidence import NEAR_MAX_GAP, page_id
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.queries.template_queries import DocumentInfo, PlacedFact, sample_queries

log = logging.getLogger(__name__)

PAGE_WIDTH, PAGE_HEIGHT = 2000, 4000

SOURCE_DOMAINS: dict[str, list[str]] = {
    "wikipedia": [
        "Arts",
        "Entertainment",
        "Science",
        "Technology",
        "Geography",
        "Sports",
        "History",
        "Politics",
        "Economics",
    ],
    "arxiv": [
        "Astrophysics",
        "Condensed Matter Physics",
        "Quantitative Biology",
        "Electrical Engineering",
        "General Computer Science",
        "Artificial Intelligence",
        "Statistics",
    ],
    "pubmed": [
        "Surgical Case Reports",
        "Public Health Reports",
        "Environmental Reports",
        "Medical Reports",
        "Chemistry",
        "Bioinformatics",
    ],
    "sec": ["Financial Reports"],
}

# Attributes per source: (attribute phrase, unit or value kind, element type). Shared by all
# documents of a source, as real documents of one kind share their sections and table layouts.
SOURCE_ATTRIBUTES: dict[str, list[tuple[str, str, str]]] = {
    "wikipedia": [
        ("founding year", "year", "text"),
        ("population", "count", "table_row"),
        ("area", "km2", "table_row"),
        ("elevation", "m", "table_row"),
        ("annual attendance", "count", "text"),
        ("first recorded name", "name", "text"),
        ("longest serving director", "name", "text"),
        ("number of members", "count", "table_row"),
        ("main river length", "km", "text"),
        ("budget", "usd", "table_row"),
        ("record score", "count", "text"),
        ("home venue capacity", "count", "table_row"),
        ("founder", "name", "text"),
        ("height of the tower", "m", "image"),
        ("year of the great reform", "year", "text"),
        ("number of exhibits", "count", "text"),
    ],
    "arxiv": [
        ("reported accuracy", "pct", "table_row"),
        ("training set size", "count", "text"),
        ("number of parameters", "count", "table_row"),
        ("observed redshift", "float", "text"),
        ("critical temperature", "K", "table_row"),
        ("learning rate", "float", "table_row"),
        ("peak luminosity", "float", "image"),
        ("sample size", "count", "text"),
        ("error rate", "pct", "table_row"),
        ("band gap", "eV", "table_row"),
        ("signal to noise ratio", "float", "image"),
        ("convergence time", "s", "text"),
        ("baseline score", "pct", "table_row"),
        ("lattice constant", "nm", "text"),
        ("number of epochs", "count", "text"),
        ("coupling strength", "float", "text"),
    ],
    "pubmed": [
        ("patient age", "years", "text"),
        ("hemoglobin level", "g/dL", "table_row"),
        ("follow-up duration", "months", "text"),
        ("tumor diameter", "mm", "image"),
        ("dose administered", "mg", "table_row"),
        ("cohort size", "count", "text"),
        ("hospital stay", "days", "text"),
        ("white cell count", "count", "table_row"),
        ("blood pressure", "mmHg", "table_row"),
        ("recovery rate", "pct", "text"),
        ("exposure concentration", "ppm", "table_row"),
        ("incidence rate", "pct", "image"),
        ("body mass index", "float", "table_row"),
        ("operating time", "minutes", "text"),
        ("sequencing depth", "count", "text"),
        ("odds ratio", "float", "table_row"),
    ],
    "sec": [
        ("base salary of the chief executive", "usd", "table_row"),
        ("annual bonus of the chief financial officer", "usd", "table_row"),
        ("total shareholder return", "pct", "image"),
        ("number of board members", "count", "text"),
        ("votes cast for the auditor ratification", "count", "table_row"),
        ("stock award value", "usd", "table_row"),
        ("audit fees", "usd", "table_row"),
        ("annual meeting date", "date", "text"),
        ("pay ratio", "count", "text"),
        ("option award value", "usd", "table_row"),
        ("independent director retainer", "usd", "table_row"),
        ("shares outstanding", "count", "text"),
        ("pension value change", "usd", "table_row"),
        ("votes against the say on pay proposal", "count", "table_row"),
        ("record date", "date", "text"),
        ("number of committee meetings", "count", "text"),
    ],
}

_SYLLABLES = (
    "ka lo mi ran tor vel sen dra qua lith mon per zu fen gal hor ix ne ost pra ru sol ten ur vax wen yor zel".split()
)
_FIRST_NAMES = (
    "Ada Bruno Celia Dario Elin Farid Greta Hugo Ines Jonas Kira Lars Mona Nils Olga Pavel Rosa Sven Tara Ugo".split()
)
_LAST_NAMES = (
    "Arnott Brask Corvin Dahl Ebner Falk Grun Holt Iver Janek Kovac Lund Marek Nordin Orla Pires Quist Rahm Soto Thal"
).split()
_FILLER = (
    "the analysis below summarises the main observations of this section . further details are reported in the "
    "appendix and in the accompanying material . the results were reviewed by an independent committee . values are "
    "rounded to the precision used in the original records . several comparisons with earlier work are discussed . "
    "the methodology follows the procedure described in the introduction . measurements were repeated to confirm them ."
).split(" . ")


def _value(rng: np.random.Generator, kind: str) -> str:
    if kind == "year":
        return str(int(rng.integers(1650, 2025)))
    if kind == "date":
        return f"{int(rng.integers(1, 29))} {['March', 'April', 'May', 'June'][int(rng.integers(4))]} 2025"
    if kind == "name":
        return (
            f"{_FIRST_NAMES[int(rng.integers(len(_FIRST_NAMES)))]} {_LAST_NAMES[int(rng.integers(len(_LAST_NAMES)))]}"
        )
    if kind == "pct":
        return f"{rng.uniform(5, 99):.1f} percent"
    if kind == "float":
        return f"{rng.uniform(0.01, 9.9):.3f}"
    if kind == "count":
        return f"{int(rng.integers(3, 500_000)):,}"
    if kind == "usd":
        return f"${int(rng.integers(50, 9_000)) * 1000:,}"
    return f"{rng.uniform(1, 900):.1f} {kind}"


@dataclass
class SyntheticSpec:
    """What to generate. Counts are per source; ``queries`` per source and structure.

    ``near_max_gap``: Doc-Near evidence pages are 2..near_max_gap pages apart, Doc-Far more than
    that (Doc-Adjacent: consecutive pages).
    """

    name: str = "synthetic"
    seed: int = 0
    documents: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCE_DOMAINS, 6))
    pages: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"wikipedia": (1, 10), "arxiv": (5, 25), "pubmed": (5, 20), "sec": (20, 40)}
    )
    queries: dict[str, dict[str, int]] = field(
        default_factory=lambda: {s: dict.fromkeys(EVIDENCE_STRUCTURES, 12) for s in SOURCE_DOMAINS}
    )
    facts_per_page: int = 6
    filler_per_fact: int = 2
    near_max_gap: int = NEAR_MAX_GAP
    with_text: bool = True
    generators: tuple[str, ...] = ("Qwen3-VL-32B-Instruct", "GPT-4.1-mini")
    ocr_noise: float | None = None
    """With a rate, each page also gets ``ocr_text``: its DOM text with OCR-like character errors
    at that rate (:func:`ocr_like`), so that OCR-BM25 runs on a text-only benchmark; ``None``:
    no OCR text. Drawn from a generator of its own, so the rest of the benchmark is unchanged."""


# Confusions typical of OCR on rendered text: similar glyphs swapped (l/1/I, O/0, S/5, B/8, e/c, ...).
_OCR_CONFUSIONS = dict(zip(b"lI1O0oS5B8ecigZ2", b"1ll0O05S8Bcelq2Z", strict=True))
_OCR_TABLE = np.arange(256, dtype=np.uint8)
for _glyph, _read_as in _OCR_CONFUSIONS.items():
    _OCR_TABLE[_glyph] = _read_as
_OCR_CONFUSABLE = np.arange(256, dtype=np.uint8) != _OCR_TABLE


def ocr_like(text: str, rng: np.random.Generator, rate: float) -> str:
    """``text`` as an OCR engine might read it back: each confusable character (a glyph with a
    look-alike, see ``_OCR_CONFUSIONS``) is misread with probability ``rate``, and each space is
    lost (two words run together) with probability ``rate / 2``. Non-ASCII characters are kept."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    if not len(raw):
        return text
    draws = rng.random(len(raw))
    misread = _OCR_CONFUSABLE[raw] & (draws < rate)
    out = np.where(misread, _OCR_TABLE[raw], raw)
    keep = ~((raw == ord(" ")) & (draws < rate / 2))
    return out[keep].tobytes().decode("utf-8")


def spec_record(spec: SyntheticSpec) -> dict:
    """``spec`` as JSON values (tuples as lists), as ``benchmark.json`` records it under
    ``built_by.spec``: a later use of the same directory can tell whether it was generated from it."""
    return json.loads(json.dumps(asdict(spec), default=_plain))


def _plain(value):
    """JSON for the OmegaConf containers a spec instantiated by Hydra holds."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    raise TypeError(f"cannot record {type(value).__name__} in a spec")


def spec_differences(recorded: dict, spec: SyntheticSpec) -> list[str]:
    """The fields of ``spec`` whose values differ from a recorded :func:`spec_record`."""
    wanted = spec_record(spec)
    return sorted(k for k in set(wanted) | set(recorded) if wanted.get(k) != recorded.get(k))


def _ocr_texts(dom_texts: list[str], spec: SyntheticSpec) -> list[str] | None:
    """Each page's OCR text (``spec.ocr_noise``), from a generator of its own: None without a rate."""
    if spec.ocr_noise is None:
        return None
    rng = np.random.default_rng([spec.seed, 1])
    return [ocr_like(text, rng, spec.ocr_noise) for text in dom_texts]


def _entity_name(rng: np.random.Generator) -> str:
    n = int(rng.integers(2, 4))
    return "".join(_SYLLABLES[int(i)] for i in rng.integers(len(_SYLLABLES), size=n)).capitalize()


def generate(spec: SyntheticSpec, out_dir: str | Path) -> Benchmark:
    """Write the synthetic benchmark described by ``spec`` to ``out_dir`` and return it loaded."""
    rng = np.random.default_rng(spec.seed)
    docs, pages, elements = [], [], []
    facts: dict[str, list[PlacedFact]] = {}

    total_docs = sum(spec.documents.values())
    bar = tqdm(total=total_docs, desc="synthesise documents", unit="doc", disable=total_docs < 200)
    for source, n_docs in spec.documents.items():
        domains = SOURCE_DOMAINS[source]
        attributes = SOURCE_ATTRIBUTES[source]
        lo, hi = spec.pages[source]
        for d in range(n_docs):
            doc_id = f"{source}-{d:05d}"
            domain = domains[d % len(domains)]
            entity = _entity_name(rng)
            n_pages = int(rng.integers(lo, hi + 1))
            docs.append((doc_id, source, domain, f"{entity}", n_pages, f"https://example.org/{doc_id}", "CC-BY-4.0"))
            doc_facts = []
            for p in range(n_pages):
                page_lines = [f"{entity} section {p + 1}"] if spec.with_text else []
                for f in range(spec.facts_per_page):
                    attr, kind, etype = attributes[int(rng.integers(len(attributes)))]
                    value = _value(rng, kind)
                    element_id = f"e{p:03d}{f:02d}"
                    y0 = 200 + f * (PAGE_HEIGHT - 400) / spec.facts_per_page
                    elements.append((doc_id, element_id, p, [100.0, y0, 1900.0, y0 + 300.0], etype))
                    doc_facts.append(PlacedFact(doc_id, p, element_id, attr, value, etype))
                    if spec.with_text:
                        page_lines.append(f"The {attr} of {entity} is {value}.")
                        page_lines.extend(
                            _FILLER[int(i)] for i in rng.integers(len(_FILLER), size=spec.filler_per_fact)
                        )
                text = " ".join(page_lines) if spec.with_text else ""
                pages.append((page_id(doc_id, p), doc_id, p, PAGE_WIDTH, PAGE_HEIGHT, text))
            facts[doc_id] = doc_facts
            bar.update()
    bar.close()

    documents = [DocumentInfo(d[0], d[1], d[2], d[3], d[4]) for d in docs]
    queries, qrels = sample_queries(rng, documents, facts, spec.queries, spec.near_max_gap, spec.generators)

    tables = {
        "documents": pd.DataFrame(docs, columns=["doc_id", "source", "domain", "title", "n_pages", "url", "license"]),
        "pages": pd.DataFrame(pages, columns=["page_id", "doc_id", "page_index", "width", "height", "dom_text"]).assign(
            image=None, ocr_text=_ocr_texts([p[5] for p in pages], spec)
        ),
        "elements": pd.DataFrame(elements, columns=["doc_id", "element_id", "page_index", "bbox", "element_type"]),
        "queries": queries,
        "qrels": qrels,
    }
    info = {
        "name": spec.name,
        "version": "synthetic-1",
        "rendered": False,
        "built_by": {
            "generator": "vldocir.construction.synthetic",
            "seed": spec.seed,
            "mode": "text-only (page text synthesised, no page images)",
            "near_max_gap": spec.near_max_gap,
            **({"ocr_noise": spec.ocr_noise} if spec.ocr_noise is not None else {}),
            "spec": spec_record(spec),
        },
    }
    return write_benchmark(out_dir, tables, info)
