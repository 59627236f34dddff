"""Evidence-configuration sampling over a rendered benchmark (paper §3.3, first stage).

Chooses the page(s) each VLM-generated query will be written from, before any query exists; no
facts are planted. Inputs are the benchmark's ``documents``, ``pages`` (``dom_text`` or
``ocr_text``, ``width``, ``height``) and ``elements`` (``bbox``, ``element_type``) tables.

- **Visual-content score of a page** (:func:`visual_scores`): the sum over its elements of
  ``type weight x (box area clipped to the page) / (page area)``, plus ``diversity_weight x (distinct
  weighted element types on the page) / (weighted types known)``. Images, figures, charts (3.0),
  tables and formulas (2.5) weigh more than text, lists and captions (1.0) and headlines (0.5);
  ``table_row`` weighs 0 because its box lies inside its table's box; ``media`` and ``embed`` (a
  player showing no picture, a frame whose document is not read: :data:`CONTENTLESS_TYPES`) weigh 0
  because they carry no text, nothing a query could be written from and grounded in. A full page
  of prose scores about 0.8, a page half covered by a table about 1.6.
- **Page-Single / Page-Multi**: a page drawn uniformly from its document's ``top_pages`` (5) pages
  by that score. Page-Multi means several evidence elements on one page (paper §3.1), so its
  candidates are those top pages holding at least ``min_multi_elements`` elements other than
  headlines and :data:`CONTENTLESS_TYPES`.
- **Doc-Adjacent / Doc-Near / Doc-Far**: every page pair of a document, scored by the TF-IDF cosine
  similarity of the two pages' text (one vectorizer per source) plus ``richness_weight x`` the mean
  of the two pages' visual scores scaled to [0, 1] within the source (to avoid low-content pages);
  classified by page distance with :func:`vldocir.data.evidence.pair_structure`, the
  thresholds the synthetic generator uses; each document's ``pairs_per_document`` best pairs per class.
- **Cross-Doc**: each document's nearest neighbour (cosine) among the documents of its source, over
  sentence-transformers embeddings of its start text (the first ``start_chars`` characters of its
  first ``start_pages`` pages); then the same page-pair score across the two documents. The paper
  pairs by start text only (no domain constraint), and so does this.

Budgets: ``configs_per_structure`` per source x structure, filled round-robin over the source's
documents (or document pairs) in a seeded order, so one long document cannot take the budget. A
cell with fewer candidates than its budget gets all of them, with a warning
(:func:`config_shortfall`: a source with one short document has no Doc-Far pair, one without words
in its pages' text no page pairs at all, only its single-page configurations). Output: one row per
configuration (:data:`CONFIG_COLUMNS`), deterministic for a seed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.data.evidence import NEAR_MAX_GAP, page_id, pair_structure
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import VldocirError

log = logging.getLogger(__name__)

CONFIG_COLUMNS = [
    "config_id",
    "structure",
    "source",
    "doc_ids",
    "page_indices",
    "page_ids",
    "score",
    "text_similarity",
    "doc_similarity",
    "visual_scores",
    "element_ids",
]
"""``doc_ids``, ``page_indices``, ``page_ids``, ``visual_scores`` and ``element_ids`` (the candidate
evidence element ids, one list per page) are aligned lists, one entry per evidence page. ``score``:
the page's visual score (single-page structures) or the pair score (the others);
``text_similarity``: the pair's TF-IDF cosine (NaN for single pages); ``doc_similarity``: the
start-text cosine of the two documents (Cross-Doc only, else NaN)."""

DEFAULT_TYPE_WEIGHTS = {
    "image": 3.0,
    "figure": 3.0,
    "chart": 3.0,
    "table": 2.5,
    "formula": 2.5,
    "list": 1.0,
    "caption": 1.0,
    "text": 1.0,
    "headline": 0.5,
    "table_row": 0.0,
    "media": 0.0,
    "embed": 0.0,
}
CONTENTLESS_TYPES = ("media", "embed")
"""Element types of the renderer (``render/layout.py``) that carry no text (a player showing no
picture, a frame whose document is not read): weight 0 by default, and never counted as elements of
a Page-Multi page."""


class EvidenceSamplingError(VldocirError, ValueError):
    """The benchmark cannot be sampled (no elements, no page text, unknown text column)."""


@dataclass
class EvidenceSamplingSpec:
    seed: int = 0
    configs_per_structure: int | dict[str, int] = 8
    """Per source x structure; an int for every structure or ``{structure: n}``."""
    top_pages: int = 5
    pairs_per_document: int = 3
    """Best pairs kept per document (per document pair for Cross-Doc) and pair class."""
    text_column: str = "dom_text"
    start_chars: int = 1000
    start_pages: int = 2
    richness_weight: float = 0.1
    diversity_weight: float = 0.1
    min_multi_elements: int = 2
    type_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TYPE_WEIGHTS))
    default_type_weight: float = 1.0
    """Weight of an element type not in ``type_weights``."""
    near_max_gap: int | None = None
    """``None``: the value the benchmark was built with (``benchmark.json``), else NEAR_MAX_GAP."""

    def budget(self, structure: str) -> int:
        if isinstance(self.configs_per_structure, Mapping):
            return int(self.configs_per_structure.get(structure, 0))
        return int(self.configs_per_structure)


def benchmark_near_max_gap(info: Mapping[str, Any]) -> int:
    """The Doc-Near threshold a benchmark was built with (synthetic and rendered builds record it)."""
    built = info.get("built_by") or {}
    value = built.get("near_max_gap", (built.get("spec") or {}).get("near_max_gap"))
    return int(value) if value is not None else NEAR_MAX_GAP


# -- scores -----------------------------------------------------------------------------------------
def visual_scores(pages: pd.DataFrame, elements: pd.DataFrame, spec: EvidenceSamplingSpec) -> pd.DataFrame:
    """``pages`` (``doc_id, page_index, width, height``) with ``visual_score`` (float) and
    ``n_elements``, ``n_multi_elements`` (neither headlines nor :data:`CONTENTLESS_TYPES`) added;
    ``elements`` needs ``doc_id, page_index, bbox ([x0, y0, x1, y1] page pixels), element_type``."""
    out = pages[["doc_id", "page_index", "width", "height"]].copy()
    if elements.empty:
        return out.assign(visual_score=0.0, n_elements=0, n_multi_elements=0)
    el = elements[["doc_id", "page_index", "bbox", "element_type"]].merge(out, on=["doc_id", "page_index"], how="inner")
    boxes = np.stack([np.asarray(b, dtype=np.float64) for b in el["bbox"]])  # (n, 4)
    w, h = el["width"].to_numpy(np.float64), el["height"].to_numpy(np.float64)
    dx = np.clip(np.minimum(boxes[:, 2], w) - np.maximum(boxes[:, 0], 0), 0, None)
    dy = np.clip(np.minimum(boxes[:, 3], h) - np.maximum(boxes[:, 1], 0), 0, None)
    weights = el["element_type"].map(lambda t: spec.type_weights.get(t, spec.default_type_weight)).to_numpy(np.float64)
    el = el.assign(
        weighted=weights * dx * dy / (w * h),
        weighted_type=np.where(weights > 0, el["element_type"], None),
        multi=~el["element_type"].isin(("headline", *CONTENTLESS_TYPES)),
    )
    per_page = el.groupby(["doc_id", "page_index"]).agg(
        area=("weighted", "sum"),
        types=("weighted_type", "nunique"),
        n_elements=("element_type", "size"),
        n_multi_elements=("multi", "sum"),
    )
    known = max(1, sum(1 for v in spec.type_weights.values() if v > 0))
    per_page["visual_score"] = per_page["area"] + spec.diversity_weight * per_page["types"] / known
    out = out.merge(
        per_page[["visual_score", "n_elements", "n_multi_elements"]].reset_index(),
        on=["doc_id", "page_index"],
        how="left",
    )
    return out.fillna({"visual_score": 0.0, "n_elements": 0, "n_multi_elements": 0}).astype(
        {"n_elements": int, "n_multi_elements": int}
    )


def top_pages(scored: pd.DataFrame, k: int) -> pd.DataFrame:
    """Each document's ``k`` pages with elements, highest visual score first (ties: earlier page)."""
    ranked = scored[scored["n_elements"] > 0].sort_values(
        ["doc_id", "visual_score", "page_index"], ascending=[True, False, True], kind="mergesort"
    )
    return ranked.groupby("doc_id", sort=False).head(k)


def tfidf_matrix(texts: list[str]):
    """L2-normalised TF-IDF rows ``(n_pages, vocab)`` (sparse) of one source's page texts; ``None``
    when they hold no word (empty, or stop words only): there is nothing to compare pages by."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english")
    try:
        return vectorizer.fit_transform(texts)
    except ValueError:  # "empty vocabulary": sklearn's only ValueError for a list of strings
        return None


def pair_scores(tfidf, rows_a: np.ndarray, rows_b: np.ndarray, richness: np.ndarray, weight: float):
    """All pairs of ``rows_a x rows_b``: (TF-IDF cosine ``(len(a), len(b))``, score = cosine +
    ``weight`` x mean richness of the two pages). ``richness`` is per row of ``tfidf``, in [0, 1]."""
    cosine = np.asarray((tfidf[rows_a] @ tfidf[rows_b].T).todense())
    return cosine, cosine + weight * (richness[rows_a][:, None] + richness[rows_b][None, :]) / 2


# -- selection --------------------------------------------------------------------------------------
def _round_robin(rng: np.random.Generator, groups: dict[Any, list], budget: int) -> list:
    """Take one item per group in turn (groups in a seeded order, each group's items in order)."""
    keys = sorted(groups)
    queues = [list(groups[keys[i]]) for i in rng.permutation(len(keys))]
    taken: list = []
    while len(taken) < budget and any(queues):
        for queue in queues:
            if queue and len(taken) < budget:
                taken.append(queue.pop(0))
    return taken


class _Source:
    """One source's pages: row positions, TF-IDF rows, visual scores, elements per page."""

    def __init__(self, scored: pd.DataFrame, texts: list[str], element_ids: dict[tuple[str, int], list[str]]):
        self.scored = scored.reset_index(drop=True)
        self.row = {
            (d, int(p)): i
            for i, (d, p) in enumerate(zip(self.scored["doc_id"], self.scored["page_index"], strict=True))
        }
        self.tfidf = tfidf_matrix(texts)
        score = self.scored["visual_score"].to_numpy(np.float64)
        self.richness = score / score.max() if score.max() > 0 else score
        self.element_ids = element_ids
        self.doc_pages: dict[str, list[int]] = {}
        for d, p in sorted(self.row):
            if element_ids.get((d, p)):
                self.doc_pages.setdefault(d, []).append(p)

    def pages_of(self, doc_id: str) -> list[int]:
        """The document's pages that hold elements (candidate evidence), in order."""
        return self.doc_pages.get(doc_id, [])

    def ranked_pairs(self, doc_a: str, doc_b: str, spec: EvidenceSamplingSpec, near_max_gap: int) -> dict[str, list]:
        """``{structure: [(score, cosine, (doc_a, page), (doc_b, page)), ...]}`` best first, at most
        ``pairs_per_document`` each; within one document (``doc_a == doc_b``) classed by distance.
        Nothing for a source whose pages hold no word (:func:`tfidf_matrix`)."""
        pa_, pb_ = self.pages_of(doc_a), self.pages_of(doc_b)
        if not pa_ or not pb_ or self.tfidf is None:
            return {}
        rows_a = np.array([self.row[(doc_a, p)] for p in pa_])
        rows_b = np.array([self.row[(doc_b, p)] for p in pb_])
        cosine, score = pair_scores(self.tfidf, rows_a, rows_b, self.richness, spec.richness_weight)
        out: dict[str, list] = {}
        for i, a in enumerate(pa_):
            for j, b in enumerate(pb_):
                structure = "cross_doc" if doc_a != doc_b else (pair_structure(b - a, near_max_gap) if b > a else None)
                if structure:
                    out.setdefault(structure, []).append(
                        (float(score[i, j]), float(cosine[i, j]), (doc_a, a), (doc_b, b))
                    )
        for structure, pairs in out.items():  # best first; ties by page positions (deterministic)
            out[structure] = sorted(pairs, key=lambda t: (-t[0], t[2][1], t[3][1]))[: spec.pairs_per_document]
        return out

    def row_of(
        self,
        structure: str,
        source: str,
        pages: list[tuple[str, int]],
        score: float,
        text_similarity: float = float("nan"),
        doc_similarity: float = float("nan"),
    ) -> dict:
        return {
            "structure": structure,
            "source": source,
            "doc_ids": [d for d, _ in pages],
            "page_indices": [int(p) for _, p in pages],
            "page_ids": [page_id(d, p) for d, p in pages],
            "score": float(score),
            "text_similarity": float(text_similarity),
            "doc_similarity": float(doc_similarity),
            "visual_scores": [float(self.scored.at[self.row[k], "visual_score"]) for k in pages],
            "element_ids": [list(self.element_ids[k]) for k in pages],
        }


def start_texts(pages: pd.DataFrame, text_column: str, start_pages: int, start_chars: int) -> pd.Series:
    """Per ``doc_id``: the first ``start_chars`` characters of its first ``start_pages`` pages' text."""
    head = pages[pages["page_index"] < start_pages].sort_values(["doc_id", "page_index"])
    joined = head.groupby("doc_id")[text_column].agg(lambda t: "\n".join(x for x in t if x))
    return joined.str.slice(0, start_chars)


def nearest_documents(doc_ids: list[str], texts: list[str], encoder) -> list[tuple[str, str, float]]:
    """Each document's nearest other document by cosine of ``encoder`` embeddings of ``texts``;
    returns the distinct unordered pairs ``(doc_a, doc_b, cosine)`` with ``doc_a < doc_b``.
    ``encoder``: anything with ``encode_pages(list[str]) -> list[(1, d) arrays]``
    (:class:`vldocir.retrieval.encoders.SentenceTransformerEncoder`)."""
    if len(doc_ids) < 2:
        return []
    vectors = np.concatenate(encoder.encode_pages(texts), axis=0).astype(np.float64)  # (n_docs, d)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
    sim = vectors @ vectors.T
    np.fill_diagonal(sim, -np.inf)
    pairs = {}
    for i, j in enumerate(np.argmax(sim, axis=1)):  # argmax: ties go to the earlier document
        a, b = sorted((doc_ids[i], doc_ids[int(j)]))
        pairs[(a, b)] = float(sim[i, j])
    return [(a, b, s) for (a, b), s in sorted(pairs.items())]


def sample_evidence_configs(
    documents: pd.DataFrame,
    pages: pd.DataFrame,
    elements: pd.DataFrame,
    spec: EvidenceSamplingSpec,
    encoder=None,
    near_max_gap: int = NEAR_MAX_GAP,
) -> pd.DataFrame:
    """The evidence configurations of every source x structure (:data:`CONFIG_COLUMNS`).

    ``encoder`` embeds document start texts for Cross-Doc (``None``: no Cross-Doc configurations).
    Raises :class:`EvidenceSamplingError` for a benchmark without elements or without page text.
    """
    if elements.empty:
        raise EvidenceSamplingError(
            "the benchmark has no elements: evidence configurations need the element boxes "
            "of a rendered benchmark (elements table: doc_id, element_id, page_index, bbox, element_type)"
        )
    if spec.text_column not in pages.columns:
        raise EvidenceSamplingError(f"pages have no column {spec.text_column!r} (text_column: dom_text or ocr_text)")
    pages = pages.assign(**{spec.text_column: pages[spec.text_column].fillna("").astype(str)})
    if not pages[spec.text_column].str.strip().any():
        raise EvidenceSamplingError(
            f"no page has text in {spec.text_column!r}: TF-IDF page pairs and start-text "
            "document pairs need page text (try text_column=ocr_text or dom_text)"
        )
    rng = np.random.default_rng(spec.seed)
    scored = visual_scores(pages, elements, spec).merge(
        pages[["doc_id", "page_index", spec.text_column]], on=["doc_id", "page_index"]
    )
    scored = scored.merge(documents[["doc_id", "source"]], on="doc_id").sort_values(["source", "doc_id", "page_index"])
    ordered = elements.sort_values(["doc_id", "page_index", "element_id"], kind="mergesort")
    element_ids = {(d, int(p)): list(g) for (d, p), g in ordered.groupby(["doc_id", "page_index"])["element_id"]}
    top = top_pages(scored, spec.top_pages)
    rows: list[dict] = []
    for source, group in scored.groupby("source", sort=True):
        src = _Source(group, list(group[spec.text_column]), element_ids)
        if src.tfidf is None:
            log.warning(
                "no %s page has words in %r: its documents get single-page configurations only",
                source,
                spec.text_column,
            )
        doc_ids = sorted(group["doc_id"].unique())
        source_top = top[top["source"] == source]
        for structure in ("page_single", "page_multi"):
            candidates = (
                source_top
                if structure == "page_single"
                else source_top[source_top["n_multi_elements"] >= spec.min_multi_elements]
            )
            groups = {}
            for doc_id, doc_top in candidates.groupby("doc_id", sort=True):
                picked = list(doc_top["page_index"])
                groups[doc_id] = [(doc_id, int(picked[i])) for i in rng.permutation(len(picked))]  # uniform draw order
            for key in _round_robin(rng, groups, spec.budget(structure)):
                rows.append(src.row_of(structure, source, [key], src.scored.at[src.row[key], "visual_score"]))
        within: dict[str, dict[str, list]] = {s: {} for s in ("doc_adjacent", "doc_near", "doc_far")}
        for doc_id in doc_ids:
            for structure, ranked in src.ranked_pairs(doc_id, doc_id, spec, near_max_gap).items():
                within[structure][doc_id] = ranked
        for structure, groups in within.items():
            for score, cosine, a, b in _round_robin(rng, groups, spec.budget(structure)):
                rows.append(src.row_of(structure, source, [a, b], score, cosine))
        if encoder is not None and spec.budget("cross_doc") > 0:
            starts = start_texts(group, spec.text_column, spec.start_pages, spec.start_chars)
            with_text = [d for d in doc_ids if d in starts.index and starts[d].strip()]
            cross: dict[tuple[str, str], list] = {}
            for doc_a, doc_b, similarity in nearest_documents(with_text, [starts[d] for d in with_text], encoder):
                ranked = src.ranked_pairs(doc_a, doc_b, spec, near_max_gap).get("cross_doc", [])
                cross[(doc_a, doc_b)] = [(similarity, *t) for t in ranked]
            for similarity, score, cosine, a, b in _round_robin(rng, cross, spec.budget("cross_doc")):
                rows.append(src.row_of("cross_doc", source, [a, b], score, cosine, similarity))
    configs = pd.DataFrame(rows, columns=CONFIG_COLUMNS[1:])
    configs["structure"] = pd.Categorical(configs["structure"], categories=list(EVIDENCE_STRUCTURES), ordered=True)
    configs = configs.sort_values(["source", "structure"], kind="mergesort").reset_index(drop=True)
    configs["structure"] = configs["structure"].astype(str)
    configs.insert(0, "config_id", [f"ec{i:06d}" for i in range(len(configs))])
    short = config_shortfall(config_counts(configs), spec, documents["source"].unique(), encoder is not None)
    if short:
        log.warning(
            "fewer candidates than the budget (documents too short or too few): %s",
            "; ".join(f"{cell}: {n} of {budget}" for cell, (n, budget) in short.items()),
        )
    return configs


def config_counts(configs: pd.DataFrame) -> pd.DataFrame:
    """Configurations per source (rows) x structure (columns, paper order), zeros included."""
    table = pd.crosstab(configs["source"], configs["structure"]) if len(configs) else pd.DataFrame()
    return table.reindex(columns=list(EVIDENCE_STRUCTURES), fill_value=0).fillna(0).astype(int)


def config_shortfall(
    counts: pd.DataFrame, spec: EvidenceSamplingSpec, sources=(), cross_doc: bool = True
) -> dict[str, tuple[int, int]]:
    """``{"source/structure": (configurations, budget)}`` for every cell below its budget.

    ``counts``: :func:`config_counts`'s table (sources x structures); ``sources``: sources that may
    have no row in it (documents that gave no configuration at all); ``cross_doc``: whether Cross-Doc
    was sampled (an encoder was given), else its cells are not counted short."""
    counts = counts.reindex(
        index=sorted(set(counts.index) | set(sources)), columns=list(EVIDENCE_STRUCTURES), fill_value=0
    ).fillna(0)
    return {
        f"{source}/{structure}": (int(n), spec.budget(structure))
        for (source, structure), n in counts.stack().items()
        if n < spec.budget(structure) and (structure != "cross_doc" or cross_doc)
    }


# -- the stage --------------------------------------------------------------------------------------
def run_evidence_sampling(benchmark: str | Path, spec: EvidenceSamplingSpec, encoder, out_dir: str | Path):
    """Sample the configurations of the benchmark at ``benchmark`` and write ``configs.parquet``
    and ``manifest.json`` (spec, benchmark name and fingerprint, threshold, encoder, counts) into
    ``out_dir``. Returns ``(configs, counts, out_dir)``."""
    import pyarrow as pa

    from vldocir.data.benchmark import load_benchmark
    from vldocir.io import atomic_write_json, atomic_write_parquet

    bench = load_benchmark(benchmark)
    gap = spec.near_max_gap if spec.near_max_gap is not None else benchmark_near_max_gap(bench.info)
    configs = sample_evidence_configs(bench.documents, bench.pages, bench.elements, spec, encoder, gap)
    counts = config_counts(configs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(pa.Table.from_pandas(configs, preserve_index=False), out_dir / "configs.parquet")
    atomic_write_json(
        {
            "benchmark": bench.name,
            "fingerprint": bench.fingerprint,
            "near_max_gap": gap,
            "spec": asdict(spec),
            "encoder": encoder.describe() if encoder is not None else None,
            "counts": {s: {e: int(n) for e, n in row.items()} for s, row in counts.iterrows()},
        },
        out_dir / "manifest.json",
    )
    return configs, counts, out_dir
