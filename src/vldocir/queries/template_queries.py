"""Template queries over planted facts, for generated benchmarks.

Given where each fact sits (document, page, element), sample the evidence of a query for each of
the six structures and phrase it from templates. The page of a fact is the page its element was
resolved to (``resolve_element_pages``), the same mapping the VLM generation stage applies to the
element ids a model cites, so generated and synthetic queries are grounded by one code path.

Structures: page_single (one fact), page_multi (two facts of one page), doc_adjacent (facts on
consecutive pages), doc_near (2..near_max_gap pages apart), doc_far (more than near_max_gap apart;
:func:`~vldocir.data.evidence.pair_structure`),
cross_doc (one fact in each of two documents of the same source, preferably the same domain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from vldocir.data.evidence import evidence_types, page_id, pair_structure
from vldocir.errors import ConfigError

QUERY_COLUMNS = ["query_id", "text", "answer", "evidence_structure", "source", "domain", "generator", "evidence_types"]
QREL_COLUMNS = ["query_id", "page_id", "doc_id", "element_ids"]

_SINGLE_FORMS = ("What is the {a} of {e}?", "Which {a} is reported for {e}?", "State the {a} given for {e}.")
_PAIR_FORMS = ("What are the {a1} and the {a2} of {e}?", "Report both the {a1} and the {a2} recorded for {e}.")
_CROSS_FORMS = ("Compare the {a1} of {e1} with the {a2} of {e2}.", "What are the {a1} of {e1} and the {a2} of {e2}?")


@dataclass(frozen=True)
class PlacedFact:
    """A fact and where it was rendered: the element that states it and that element's page."""

    doc_id: str
    page_index: int
    element_id: str
    attribute: str
    value: str
    element_type: str


@dataclass(frozen=True)
class DocumentInfo:
    doc_id: str
    source: str
    domain: str
    entity: str
    n_pages: int


class _Sampler:
    def __init__(self, rng, documents: Sequence[DocumentInfo], facts: dict[str, list[PlacedFact]], near_max_gap: int):
        self.rng = rng
        self.info = {d.doc_id: d for d in documents}
        self.near_max_gap = near_max_gap
        self.by_page: dict[str, dict[int, list[PlacedFact]]] = {}
        for doc_id, doc_facts in facts.items():
            pages: dict[int, list[PlacedFact]] = {}
            for fact in doc_facts:
                pages.setdefault(fact.page_index, []).append(fact)
            self.by_page[doc_id] = pages
        self.by_domain: dict[tuple[str, str], list[str]] = {}
        for d in documents:
            if self.by_page.get(d.doc_id):
                self.by_domain.setdefault((d.source, d.domain), []).append(d.doc_id)

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def fact_on(self, doc_id: str, page: int) -> PlacedFact | None:
        facts = self.by_page[doc_id].get(page)
        return self.pick(facts) if facts else None

    def evidence(self, structure: str, doc_id: str) -> tuple[list[PlacedFact], str] | None:
        """The evidence facts and the query text, or ``None`` when this document cannot host it."""
        info = self.info[doc_id]
        pages = sorted(self.by_page[doc_id])
        if not pages:
            return None
        if structure == "page_single":
            fact = self.fact_on(doc_id, self.pick(pages))
            return [fact], self.pick(_SINGLE_FORMS).format(a=fact.attribute, e=info.entity)
        if structure == "page_multi":
            facts = self.by_page[doc_id][self.pick(pages)]
            if len(facts) < 2:
                return None
            i, j = self.rng.choice(len(facts), size=2, replace=False)
            return self._pair(facts[int(i)], facts[int(j)], info)
        if structure in ("doc_adjacent", "doc_near", "doc_far"):
            pairs = [
                (a, b) for a in pages for b in pages if b > a and pair_structure(b - a, self.near_max_gap) == structure
            ]
            if not pairs:
                return None
            a, b = self.pick(pairs)
            return self._pair(self.fact_on(doc_id, a), self.fact_on(doc_id, b), info)
        if structure == "cross_doc":
            partners = [d for d in self.by_domain.get((info.source, info.domain), []) if d != doc_id] or [
                d for (s, _), ds in self.by_domain.items() if s == info.source for d in ds if d != doc_id
            ]
            if not partners:
                return None
            other = self.info[self.pick(partners)]
            f1 = self.fact_on(doc_id, self.pick(pages))
            f2 = self.fact_on(other.doc_id, self.pick(sorted(self.by_page[other.doc_id])))
            text = self.pick(_CROSS_FORMS).format(a1=f1.attribute, a2=f2.attribute, e1=info.entity, e2=other.entity)
            return [f1, f2], text
        raise ValueError(f"unknown evidence structure {structure!r}")

    def _pair(self, f1: PlacedFact, f2: PlacedFact, info: DocumentInfo):
        if f1.attribute == f2.attribute:  # "the X and the X" is not a two-fact question
            return None
        return [f1, f2], self.pick(_PAIR_FORMS).format(a1=f1.attribute, a2=f2.attribute, e=info.entity)


def sample_queries(
    rng: np.random.Generator,
    documents: Sequence[DocumentInfo],
    facts: dict[str, list[PlacedFact]],
    counts: dict[str, dict[str, int]],
    near_max_gap: int,
    generators: Sequence[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sample ``counts[source][structure]`` queries; returns the ``queries`` and ``qrels`` tables."""
    sampler = _Sampler(rng, documents, facts, near_max_gap)
    queries, qrels = [], []
    total = sum(sum(v.values()) for v in counts.values())
    bar = tqdm(total=total, desc="sample queries", unit="query", disable=total < 2000)
    for source, per_structure in counts.items():
        candidates = [d.doc_id for d in documents if d.source == source and sampler.by_page.get(d.doc_id)]
        for structure, n in per_structure.items():
            made = attempts = 0
            while made < n:
                attempts += 1
                if not candidates or attempts > 50 * n + 1000:
                    raise ConfigError(
                        f"cannot place {n} {structure} queries in the {source} documents "
                        "(too few or too short documents for this structure): add documents or pages to "
                        "spec.documents / spec.pages, or lower spec.queries_per_cell"
                    )
                doc_id = sampler.pick(candidates)
                picked = sampler.evidence(structure, doc_id)
                if picked is None:
                    continue
                evidence, text = picked
                query_id = f"q{len(queries):07d}"
                made += 1
                types = evidence_types(f.element_type for f in evidence)
                generator = generators[0] if len(generators) == 1 else generators[int(rng.random() < 0.22)]
                answer = "; ".join(f.value for f in evidence)
                queries.append(
                    (query_id, text, answer, structure, source, sampler.info[doc_id].domain, generator, types)
                )
                cited: dict[tuple[str, int], list[str]] = {}
                for f in evidence:
                    cited.setdefault((f.doc_id, f.page_index), []).append(f.element_id)
                for (ev_doc, ev_page), element_ids in cited.items():
                    qrels.append((query_id, page_id(ev_doc, ev_page), ev_doc, element_ids))
                bar.update()
    bar.close()
    return pd.DataFrame(queries, columns=QUERY_COLUMNS), pd.DataFrame(qrels, columns=QREL_COLUMNS)
