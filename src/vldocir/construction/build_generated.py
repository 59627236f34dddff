"""Build a rendered benchmark from generated HTML: write → render → paginate → place facts →
sample queries → OCR → the five tables.

Each step keeps its artifact in ``work_dir`` and is resumable: HTML is rewritten identically from
the seed, documents already rendered (``layout.json`` present) are skipped, OCR is cached per
image. Documents that fail to render are reported and left out; the build goes on.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from PIL import Image
from tqdm.auto import tqdm

from vldocir.cache import content_key, staged_directory
from vldocir.construction.build_report import SPEC_OCR_OFF, document_warnings, ocr_coverage, sampling_shortfall
from vldocir.construction.documents import DocumentRecord
from vldocir.construction.html_docs import HtmlCorpusSpec, write_corpus
from vldocir.construction.ocr import OcrConfig, ocr_where_needed
from vldocir.construction.render import LAYOUT_VERSION, RenderConfig, load_layout, render_batch, render_report
from vldocir.construction.render.config import SPEED_ONLY
from vldocir.data.benchmark import INFO_FILE, Benchmark, load_benchmark, write_benchmark
from vldocir.data.evidence import NEAR_MAX_GAP, page_id, resolve_element_pages
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.io import atomic_path
from vldocir.queries.template_queries import DocumentInfo, PlacedFact, sample_queries

if TYPE_CHECKING:
    from vldocir.construction.shards import ShardedStages
    from vldocir.queries.query_stage import GeneratedQueries

log = logging.getLogger(__name__)


RENDER_KEY_EXCLUDED = SPEED_ONLY
"""Render settings that change how fast pages are made, not the pages: left out of the cache key."""


@dataclass
class ShippedImages:
    """How page images are stored in the benchmark directory.

    ``scale`` < 1 stores downscaled copies (a compact benchmark that ships with the code); boxes and
    ``width``/``height`` always refer to the full-size page, so a reader scales boxes by
    ``image size / (width, height)``.
    """

    scale: float = 1.0
    format: str = "png"  # png | jpeg
    jpeg_quality: int = 90


@dataclass
class RenderedBenchmarkSpec:
    name: str = "vl-docir-mini"
    seed: int = 0
    documents: dict[str, int] = field(default_factory=lambda: {"wikipedia": 6, "arxiv": 6, "pubmed": 6, "sec": 6})
    pages: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"wikipedia": (1, 8), "arxiv": (5, 15), "pubmed": (4, 12), "sec": (10, 36)}
    )
    queries_per_cell: int = 12
    """Queries per source × structure."""
    near_max_gap: int = NEAR_MAX_GAP
    generators: tuple[str, ...] = ("Qwen3-VL-32B-Instruct", "GPT-4.1-mini")
    facts_per_page: int = 6
    quirks: bool = False
    ocr: bool = True
    render_pins: dict[str, Any] = field(default_factory=dict)
    """Render settings this benchmark pins over the build's ``render`` (e.g. the mini pins the
    pagination its recorded model answers were written for: answers are keyed by page)."""


def check_out_dir(out_dir: str | Path, *inside: str | Path | None) -> None:
    """Refuse an ``out_dir`` that a build may not replace whole (a build's output replaces it once
    complete): a file, a folder holding anything but a benchmark (no ``benchmark.json``), or one
    holding one of ``inside`` (the cache, the input)."""
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out_dir={out} is a file, not a folder")
    for path in inside:
        if path is not None and Path(path).expanduser().absolute().is_relative_to(out):
            raise ConfigError(f"out_dir={out} holds {path}, which the build's output would replace: choose another")
    if out.is_dir() and not (out / INFO_FILE).is_file() and any(out.iterdir()):
        raise ConfigError(
            f"out_dir={out} exists and holds no benchmark ({INFO_FILE}); a build replaces its out_dir whole: "
            "choose a new or empty folder"
        )


def _write_page_image(source: Path, target: Path, images: ShippedImages) -> None:
    if images.scale == 1.0 and source.suffix.lstrip(".") == {"png": "png", "jpeg": "jpg"}[images.format]:
        with atomic_path(target) as tmp:
            tmp.write_bytes(source.read_bytes())
        return
    with Image.open(source) as image:
        image = image.convert("RGB")
        if images.scale != 1.0:
            size = (round(image.width * images.scale), round(image.height * images.scale))
            image = image.resize(size, Image.Resampling.LANCZOS)
        with atomic_path(target) as tmp:
            if images.format == "jpeg":
                image.save(tmp, format="JPEG", quality=images.jpeg_quality, optimize=True)
            else:
                image.save(tmp, format="PNG", optimize=True)


PAGE_COLUMNS = ["page_id", "doc_id", "page_index", "image", "width", "height", "dom_text", "full_size_path"]


def store_pages(
    doc_id: str, pages: list[tuple[int, Path, int, int, str]], out_dir: Path, images: ShippedImages
) -> list[tuple]:
    """Write the stored image of each page ``(page_index, full-size image, width, height, text)`` of
    ``doc_id`` into ``out_dir/pages/<doc_id>/`` and return their ``pages`` rows (:data:`PAGE_COLUMNS`);
    pages of an earlier build of that document into the same directory are removed."""
    suffix = ".jpg" if images.format == "jpeg" else ".png"
    rows, written = [], set()
    for page_index, source, width, height, text in pages:
        relative = f"pages/{doc_id}/page-{page_index:03d}{suffix}"
        _write_page_image(source, out_dir / relative, images)
        written.add(out_dir / relative)
        rows.append(
            (
                page_id(doc_id, page_index),
                doc_id,
                page_index,
                {"bytes": None, "path": relative},
                width,
                height,
                text,
                source,
            )
        )
    for stale in set((out_dir / "pages" / doc_id).glob("page-*")) - written:
        stale.unlink()
    return rows


def assemble_rendered(
    records: list[DocumentRecord],
    rendered_dir: Path,
    out_dir: Path,
    images: ShippedImages,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """The ``documents``, ``pages`` and ``elements`` tables of rendered documents (each
    ``rendered_dir/<doc_id>/layout.json``), writing the stored page images into ``out_dir/pages/``,
    and the render report of those documents (:func:`~vldocir.construction.render.render_report`:
    clean-up removals per rule, formulas, scaled and overflowing content, failed images), which the
    builds put into ``benchmark.json`` (``built_by.render_report``). ``pages`` keeps
    ``full_size_path`` (the render's image: OCR and query generation read it)."""
    documents, pages, elements, layouts = [], [], [], []
    for record in tqdm(records, desc="assemble tables", unit="doc"):
        layout = load_layout(rendered_dir / record.doc_id)
        layouts.append(layout)
        documents.append(
            (record.doc_id, record.source, record.domain, record.title, len(layout.pages), record.url, record.license)
        )
        pages += store_pages(
            record.doc_id,
            [(p.page_index, layout.page_path(p.page_index), p.width, p.height, p.dom_text) for p in layout.pages],
            out_dir,
            images,
        )
        elements.append(
            pd.DataFrame(
                [
                    # fragments: an element split over columns or pages, its boxes each on its page
                    (
                        record.doc_id,
                        e.element_id,
                        e.page_index,
                        e.bbox,
                        e.element_type,
                        e.spans_pages,
                        e.text,
                        e.fact,
                        e.fragments,
                    )
                    for e in layout.elements
                ],
                columns=[
                    "doc_id",
                    "element_id",
                    "page_index",
                    "bbox",
                    "element_type",
                    "spans_pages",
                    "text",
                    "fact",
                    "fragments",
                ],
            )
        )
    return (
        pd.DataFrame(documents, columns=["doc_id", "source", "domain", "title", "n_pages", "url", "license"]),
        pd.DataFrame(pages, columns=PAGE_COLUMNS),
        pd.concat(elements, ignore_index=True),
        render_report(layouts),
    )


def build_rendered_benchmark(
    spec: RenderedBenchmarkSpec,
    out_dir: str | Path,
    cache_dir: str | Path,
    render: RenderConfig | None = None,
    images: ShippedImages | None = None,
    ocr: OcrConfig | None = None,
    queries: GeneratedQueries | None = None,
    shards: ShardedStages | None = None,
) -> Benchmark:
    """Build the benchmark of ``spec`` into ``out_dir`` and load it.

    HTML and full-size renders go to ``cache_dir/build/<key>/``, the key hashing everything that
    changes them (seed, documents, page ranges, facts per page, quirks, render settings), so a
    changed spec never reuses stale renders and benchmarks differing only in how images are stored
    share one rendering. OCR text is cached per image under ``cache_dir/ocr/``.

    ``queries``: the generated-queries stage (:class:`~vldocir.queries.query_stage.GeneratedQueries`),
    which keeps its record (configurations, model outputs, candidates) in ``cache_dir/generation/<name>/``;
    ``None``: template queries over the planted facts. ``shards``: ``build.shards=N`` (N > 1): the
    HTML written here is rendered and OCRed by a job array first (:mod:`~vldocir.construction.shards`).

    The benchmark is written into a staging directory beside ``out_dir`` that becomes ``out_dir``
    only once complete (:func:`vldocir.cache.staged_directory`): a build that fails or is interrupted
    leaves no ``out_dir`` (an earlier one stays as it was); its renders stay in ``cache_dir``.
    """
    check_out_dir(out_dir, cache_dir)
    with staged_directory(out_dir) as staging:
        _build_rendered_benchmark(spec, staging, cache_dir, render, images, ocr, queries, shards)
    return load_benchmark(out_dir)


def _build_rendered_benchmark(
    spec: RenderedBenchmarkSpec,
    out_dir: Path,
    cache_dir: str | Path,
    render: RenderConfig | None,
    images: ShippedImages | None,
    ocr: OcrConfig | None,
    queries: GeneratedQueries | None,
    shards: ShardedStages | None = None,
) -> None:
    """:func:`build_rendered_benchmark` into ``out_dir``, the staging directory."""
    render = render or RenderConfig()
    if spec.render_pins:
        render = dataclasses.replace(render, **spec.render_pins)
    images = images or ShippedImages()
    html_params = {
        k: v for k, v in asdict(spec).items() if k in ("seed", "documents", "pages", "facts_per_page", "quirks")
    }
    render_params = {k: v for k, v in render.to_dict().items() if k not in RENDER_KEY_EXCLUDED}
    key = {"html": html_params, "render": render_params, "layout_version": LAYOUT_VERSION}
    work_dir = Path(cache_dir) / "build" / content_key(key)
    corpus = write_corpus(
        HtmlCorpusSpec(
            seed=spec.seed,
            documents=dict(spec.documents),
            pages={k: tuple(v) for k, v in spec.pages.items()},
            quirks=spec.quirks,
            facts_per_page=spec.facts_per_page,
        ),
        work_dir / "html",
    )
    html_docs = [(d.doc_id, d.source, d.html_path) for d in corpus]
    if shards is not None:  # build.shards=N: a job array renders and OCRs; what follows finds it done
        shard_ocr = (ocr or OcrConfig()) if spec.ocr else None
        sharded = shards(Path(cache_dir), work_dir, html_docs, [], render, None, shard_ocr)
    report = render_batch(html_docs, work_dir / "rendered", render)
    if report.failed:
        log.warning("%d document(s) failed to render and are left out: %s", len(report.failed), report.errors)

    kept = [d for d in corpus if d.doc_id not in report.failed]
    records = [
        DocumentRecord(d.doc_id, d.source, d.domain, d.title, f"synthetic://{d.doc_id}", "CC-BY-4.0") for d in kept
    ]
    document_frame, page_frame, element_frame, rendering = assemble_rendered(
        records, work_dir / "rendered", out_dir, images
    )
    facts: dict[str, list[PlacedFact]] = {}
    n_pages = dict(zip(document_frame["doc_id"], document_frame["n_pages"], strict=True))
    infos = [DocumentInfo(d.doc_id, d.source, d.domain, d.entity, int(n_pages[d.doc_id])) for d in kept]
    unplaced: dict[str, int] = {}
    by_doc = dict(tuple(element_frame.groupby("doc_id", sort=False)))
    for doc in kept:
        doc_elements = by_doc.get(doc.doc_id, element_frame.head(0))
        by_fact = doc_elements.dropna(subset=["fact"]).drop_duplicates("fact").set_index("fact")
        placed = []
        for fact in doc.facts:
            if fact.fact_id not in by_fact.index:
                unplaced[doc.doc_id] = unplaced.get(doc.doc_id, 0) + 1  # removed or not recorded: not evidence
                continue
            element = by_fact.loc[fact.fact_id]
            page = resolve_element_pages(doc_elements, doc.doc_id, [element["element_id"]])[element["element_id"]]
            placed.append(
                PlacedFact(doc.doc_id, page, element["element_id"], fact.attribute, fact.value, element["element_type"])
            )
        facts[doc.doc_id] = placed
    if unplaced:
        log.warning("%d fact(s) have no recorded element and are not used as evidence", sum(unplaced.values()))

    not_ocred = [None if spec.ocr else SPEC_OCR_OFF] * len(page_frame)
    page_frame["ocr_text"] = ocr_where_needed(
        list(page_frame["full_size_path"]), Path(cache_dir), ocr or OcrConfig(), not_ocred
    )
    if queries is None:  # template queries over the planted facts
        rng = np.random.default_rng(spec.seed)
        counts = {
            s: dict.fromkeys(EVIDENCE_STRUCTURES, spec.queries_per_cell) for s in spec.documents if spec.documents[s]
        }
        query_frame, qrels = sample_queries(rng, infos, facts, counts, spec.near_max_gap, spec.generators)
        query_report = {"method": "templates", "queries_per_cell": spec.queries_per_cell}
    else:
        page_images = dict(zip(page_frame["page_id"], page_frame["full_size_path"], strict=True))
        if shards is not None:  # build.shards=N: the model requests as job arrays too; the stage finds them cached
            args = (document_frame, page_frame, element_frame, page_images, spec.near_max_gap)
            if (query_shards := shards.queries(queries, Path(cache_dir), work_dir, *args)) is not None:
                sharded["queries"] = query_shards
        query_frame, qrels, query_report = queries(
            document_frame,
            page_frame,
            element_frame,
            page_images,
            spec.near_max_gap,
            record_dir=Path(cache_dir) / "generation" / spec.name,
        )
    tables = {
        "documents": document_frame,
        "pages": page_frame.drop(columns="full_size_path"),
        "elements": element_frame,
        "queries": query_frame,
        "qrels": qrels,
    }
    info = {
        "name": spec.name,
        "version": "1",
        "rendered": True,
        "images": {
            "stored_scale": images.scale,
            "format": images.format,
            "page_size": [render.page_width, render.page_height],
        },
        "built_by": {
            "generator": "vldocir.construction.build_generated",
            "spec": asdict(spec),
            "render": render_params,
            "failed_documents": report.errors,
            "ocr": ocr_coverage(page_frame, not_ocred),
            "render_report": rendering,
            "document_warnings": document_warnings(
                [work_dir / "rendered" / d.doc_id for d in kept],
                render_errors=report.errors,
                unplaced_facts=unplaced,
                order=[d.doc_id for d in corpus],
            ),
            "unplaced_facts": sum(unplaced.values()),
            "queries": query_report,
            "sampling_shortfall": sampling_shortfall(query_report, document_frame["source"].unique()),
            **({"shards": sharded} if shards is not None else {}),
            "rebuild": "make mini",
        },
    }
    write_benchmark(out_dir, tables, info)
