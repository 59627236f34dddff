"""The dataset card (``README.md``) of a benchmark exported in the hub layout.

YAML front matter as the hub reads it (``configs`` with each config's ``data_files``, so that
``datasets.load_dataset(<dir>, "<config>")`` finds the shards; ``license`` per source;
``task_categories``, ``language``, ``size_categories``), then prose: what the benchmark is, its
layout, the six evidence structures with the queries per source x structure, the licences per
source, how it was built (from ``benchmark.json``: renderer and layout version, query generators,
cleaning; or where it was imported from) and its fingerprint.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from vldocir.data.benchmark import Benchmark
from vldocir.data.evidence import NEAR_MAX_GAP
from vldocir.data.schema import EVIDENCE_STRUCTURES, UNKNOWN_DOCUMENTS_STRUCTURE

TASK_CATEGORIES = ("visual-document-retrieval", "text-retrieval")
LANGUAGE_CODES = {
    "english": "en",
    "french": "fr",
    "spanish": "es",
    "german": "de",
    "italian": "it",
    "portuguese": "pt",
    "chinese": "zh",
    "japanese": "ja",
}
"""Language names as ViDoRe spells them -> the ISO 639-1 codes the card's ``language`` takes."""

STRUCTURE_TEXT = {
    "page_single": "one page holds the answer, in one element (a paragraph, a table cell, a figure).",
    "page_multi": "one page holds the answer, but it must be put together from two or more elements of it.",
    "doc_adjacent": "the evidence lies on consecutive pages of one document (a table or an argument "
    "running over a page break).",
    "doc_near": "the evidence lies on pages of one document a few pages apart (the largest gap between "
    "consecutive evidence pages is 2 to near_max_gap).",
    "doc_far": "the evidence lies on pages of one document far apart (a gap larger than near_max_gap).",
    "cross_doc": "the evidence lies in two or more documents.",
    UNKNOWN_DOCUMENTS_STRUCTURE: "two or more evidence pages whose documents the source did not name.",
}


def size_category(n: int) -> str:
    """The hub's ``size_categories`` bucket of ``n`` rows."""
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M" if n < 10_000_000 else "10M<n<100M"


def _yaml_list(key: str, values: list[str]) -> list[str]:
    return [f"{key}:", *(f"- {_quoted(v)}" for v in values)]


def _quoted(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _licence(value) -> str:
    return str(value).strip().lower() if value is not None and not pd.isna(value) and str(value).strip() else "unknown"


def _structures(queries: pd.DataFrame) -> list[str]:
    """The six structures, and the documents-unknown label where a query carries it."""
    unknown = (queries["evidence_structure"] == UNKNOWN_DOCUMENTS_STRUCTURE).any()
    return [*EVIDENCE_STRUCTURES, *([UNKNOWN_DOCUMENTS_STRUCTURE] if unknown else [])]


def _structure_table(queries: pd.DataFrame) -> list[str]:
    """Queries per source (rows) x structure (columns), with totals."""
    columns = _structures(queries)
    counts = pd.crosstab(queries["source"].fillna("(none)"), queries["evidence_structure"])
    counts = counts.reindex(columns=columns, fill_value=0)
    lines = ["| source | " + " | ".join(columns) + " | all |", "|---" * (len(columns) + 2) + "|"]
    for source, row in counts.iterrows():
        lines.append(f"| {source} | " + " | ".join(str(int(v)) for v in row) + f" | {int(row.sum())} |")
    total = counts.sum()
    lines.append("| **all** | " + " | ".join(str(int(v)) for v in total) + f" | **{int(total.sum())}** |")
    return lines


def _built(info: dict[str, Any]) -> list[str]:
    """How the benchmark was made, from benchmark.json (generated, from documents, or imported)."""
    built = info.get("built_by") or {}
    lines = []
    if info.get("imported_from"):
        origin = info["imported_from"]
        lines.append(
            f"- Imported from `{origin.get('source')}` (format {origin.get('format')}, revision "
            f"{origin.get('revision') or ('unpinned' if str(origin.get('source')).startswith('hf://') else 'none')}) "
            "by vldocir's importer; structures labelled by the shared "
            f"rules (near_max_gap {built.get('near_max_gap')})."
        )
    if built.get("generator"):
        lines.append(f"- Built by `{built['generator']}` (rebuild: `{built.get('rebuild', 'see benchmark.json')}`).")
    render = built.get("render") or {}
    if render:
        lines.append(
            f"- Rendered with Chromium (Playwright): viewport {render.get('viewport_width_css')} CSS px at device "
            f"scale {render.get('device_scale_factor')}, pages cut at whitespace to height {render.get('page_height')} "
            + (
                f"px; layout version {built['layout_version']}."
                if built.get("layout_version") is not None
                else f"px; benchmark.json records no layout version (the exporting code's is {_layout_version()})."
            )
        )
    images = info.get("images") or {}
    if images:
        lines.append(
            f"- Page images stored as {images.get('format')} at scale {images.get('stored_scale')} of the "
            f"{'x'.join(str(v) for v in images.get('page_size', []))} page; the boxes in `qrels` are in the "
            "stored image's pixels."
        )
    spec = built.get("spec") or {}
    queries = built.get("queries") or {}
    if queries.get("method"):
        counts = queries.get("counts") or {}
        model = ((queries.get("generation") or {}).get("generator") or {}).get("model")
        recording = (queries.get("recorded") or {}).get("path")
        lines.append(
            f"- Queries: {queries['method']} over {queries.get('configs_total', 'the')} sampled evidence configurations"
            + (f" by the model `{model}`" if model else "")
            + (f", the model's answers replayed from the recording `{recording}`" if recording else "")
            + (f" (the spec names the generators {', '.join(spec['generators'])})" if spec.get("generators") else "")
            + (
                f"; {counts['generated']} generated, {counts.get('after_filter')} after the structure filter"
                if counts.get("generated")
                else ""
            )
            + "."
        )
    cleaning = queries.get("cleaning") or {}
    if cleaning:
        removed = ", ".join(f"{k} {v}" for k, v in (cleaning.get("removed") or {}).items())
        lines.append(
            f"- Cleaning: {cleaning.get('method')} (threshold {cleaning.get('threshold')}): "
            f"{cleaning.get('before')} queries before, {cleaning.get('after')} kept"
            + (f" (removed: {removed})" if removed else "")
            + "."
        )
    return lines or ["- benchmark.json records no build information."]


def _layout_version() -> str:
    try:
        from vldocir.construction.render import LAYOUT_VERSION
    except ImportError:  # (construction's browser stack not installed)
        return "unknown"
    return str(LAYOUT_VERSION)


def dataset_card(bench: Benchmark, rows: dict[str, int], default_language: str) -> str:
    """The card of ``bench`` exported with ``rows`` per config, ``default_language`` for the queries
    that state none."""
    info = bench.info
    queries = bench.arrow("queries", ["query_id", "evidence_structure", "source", "language"]).to_pandas()
    languages = queries["language"].fillna(default_language)  # as the export writes them
    codes = sorted({LANGUAGE_CODES.get(str(v).lower(), str(v).lower()) for v in languages.dropna()})
    docs = bench.documents
    licences = sorted({_licence(v) for v in docs["license"]})
    near = (
        (info.get("built_by") or {}).get("near_max_gap")
        or ((info.get("built_by") or {}).get("spec") or {}).get("near_max_gap")
        or NEAR_MAX_GAP
    )
    front = ["---", f"pretty_name: {_quoted(bench.name)}"]
    front += _yaml_list("license", licences)
    front += _yaml_list("language", codes)
    front += _yaml_list("task_categories", list(TASK_CATEGORIES))
    front += _yaml_list("size_categories", [size_category(max(rows.values()))])
    front += _yaml_list("tags", ["vldocir", "vidore", "document-retrieval", "multi-page-evidence"])
    front.append("configs:")
    for config in ("corpus", "queries", "qrels", "documents_metadata"):
        front += [f"- config_name: {config}", "  data_files:", "  - split: test", f"    path: {config}/test-*"]
    front.append("---")

    body = [
        "",
        f"# {bench.name}",
        "",
        f"A visual document retrieval benchmark made with vldocir and exported in the ViDoRe v3 "
        f"hub layout: {rows['queries']} queries over {rows['corpus']} page images of {rows['documents_metadata']} "
        f"documents, with {rows['qrels']} relevance judgements. Each query is labelled with the structure of its "
        "evidence (below), so retrievers can be scored per structure as well as overall; a query counts as found "
        "only when all its evidence pages are retrieved (RecallAll), which is what the multi-page structures test.",
        "",
        "## Layout",
        "",
        "| config | rows | columns |",
        "|---|---|---|",
        f"| `corpus` | {rows['corpus']} | `corpus_id` (the page id), `image`, `doc_id`, `page_number_in_doc` "
        "(1-based), `markdown` (the page's DOM text), `ocr_text` |",
        f"| `queries` | {rows['queries']} | `query_id`, `query`, `language`, `query_types` (empty), `content_type` "
        "(v3 labels), `answer`, `query_generator`, `evidence_structure`, `evidence_types`, `source`, `domain` |",
        f"| `qrels` | {rows['qrels']} | `query_id`, `corpus_id`, `score` (grade, > 0 is evidence), `content_type`, "
        "`bounding_boxes` `[{annotator, x1, y1, x2, y2}]` of the evidence elements, `element_ids` |",
        f"| `documents_metadata` | {rows['documents_metadata']} | `doc_id`, `file_name`, `title`, `url`, "
        "`doc_type` (domain), `source`, `license`, `page_number` (pages) |",
        "",
        "Ids are strings (the benchmark's own page and query ids) where ViDoRe v3 numbers them. Boxes have "
        "`annotator` 0: the construction pipeline placed them. One split, `test`."
        + (
            f" The benchmark states no language for {int(queries['language'].isna().sum())} queries: their "
            f"`language` is the export's default, `{default_language}`."
            if queries["language"].isna().any()
            else ""
        ),
        "",
        "```python",
        "from datasets import load_dataset",
        'queries = load_dataset("<this repository>", "queries", split="test")',
        "```",
        "",
        "## Evidence structures",
        "",
        *[
            f"- **{s}**: {STRUCTURE_TEXT[s]}".replace("near_max_gap", f"near_max_gap = {near}")
            for s in _structures(queries)
        ],
        "",
        "Queries per source and structure:",
        "",
        *_structure_table(queries),
        "",
        "## Licences",
        "",
        "| source | documents | licence |",
        "|---|---|---|",
        *[
            f"| {source} | {len(group)} | {', '.join(sorted({_licence(v) for v in group['license']}))} |"
            for source, group in docs.groupby(docs["source"].fillna("(none)"), sort=True)
        ],
        "",
        "## How it was built",
        "",
        *_built(info),
        "",
        "## Fingerprint",
        "",
        f"`{bench.fingerprint}`: vldocir's content hash of the benchmark's tables and page images "
        f"(benchmark `{bench.name}`, version {info.get('version')}). Every result vldocir stores names it; "
        "re-importing this export gives a benchmark of its own fingerprint (the tables are re-derived).",
        "",
    ]
    return "\n".join(front + body)
