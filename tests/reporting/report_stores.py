"""Real results stores for the reporting, viewer and notebook tests (their fixtures: conftest.py).

The stores are made by the real pipeline (Hydra compose + ``vldocir.pipeline.evaluate_stage.evaluate``)
on the text-only synthetic mini benchmark (``SyntheticSpec(seed=0)``: 24 documents, 376 pages, 288
queries, generated in seconds) in the session's temp dir, once per session:

- ``mini_results``: the mini benchmark's run, ``dom_bm25/base`` (what ``python run.py`` makes),
  and nothing else;
- ``multi_results``: that run plus BM25 variants stored under the ids of paper rows
  (``colqwen25/base``, ``colqwen25/ctx-n256``, ``colqwen25/ctx-n32``, ``ocr_bm25/base``), so that
  figure panels and best/second/third marks have several reproduced runs to work with. They are
  real runs of the pipeline, only filed under other names;
- ``text_bench``: the text-only mini benchmark those runs were made on, for tests that make their
  own run of it;
- ``rendered_results``: a run on a small benchmark with page images (PIL-drawn, stored downscaled,
  half as paths and half as bytes), written with ``write_benchmark``.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

from helpers import REPO_ROOT, evaluate

TEXT_BENCH = "synthetic-text"  # the benchmark name of the text-only mini benchmark (store: results/runs/<name>/...)
MANIFEST = REPO_ROOT / "conf" / "paper_tables.yaml"
PAPER_DIR = REPO_ROOT / "results" / "paper"
IMAGE_SCALE = 8  # rendered test pages are stored at 1/8 of their page size (2000x4000 -> 250x500)

FAKE_RUNS = {  # store directory (paper row ids) -> BM25 parameters that make it differ
    ("colqwen25", "base"): ["retriever.model.k1=0.9"],
    ("colqwen25", "ctx-n256"): ["retriever.model.b=0.3"],
    ("colqwen25", "ctx-n32"): ["retriever.model.k1=2.0"],
    ("ocr_bm25", "base"): ["retriever.model.k1=1.2", "retriever.model.b=0.9"],
}


def evaluate_run(root: Path, *overrides: str) -> None:
    """``python run.py <overrides>`` with every path under ``root`` (in-process: ``helpers.evaluate``)."""
    evaluate(
        f"paths.root_dir={REPO_ROOT}",
        f"paths.data_dir={root / 'data'}",
        f"paths.cache_dir={root / 'cache'}",
        f"paths.results_dir={root / 'results'}",
        f"paths.log_dir={root / 'logs'}",
        *overrides,
    )


def build_stores(base: Path) -> dict[str, Path]:
    """The text-only mini benchmark under ``base`` and two stores of its runs: ``mini`` (its
    ``dom_bm25/base`` run alone) and ``multi`` (plus :data:`FAKE_RUNS`); ``bench``: its directory."""
    from vldocir.construction.synthetic import SyntheticSpec, generate

    root = base / "reporting-store"
    bench = generate(SyntheticSpec(name=TEXT_BENCH, seed=0), root / "data" / TEXT_BENCH)
    dataset = [f"dataset.source={bench.root}", f"dataset.name={TEXT_BENCH}", "dataset.build=null"]
    evaluate_run(root, *dataset)  # the mini benchmark's run, as `python run.py` makes it
    mini = base / "mini-results"
    shutil.copytree(root / "results", mini)
    for (retriever, setting), params in FAKE_RUNS.items():
        evaluate_run(root, *dataset, f"retriever.id={retriever}", f"setting.id={setting}", *params)
    return {"mini": mini, "multi": root / "results", "bench": bench.root}


def make_rendered_benchmark(source: Path, target: Path):
    """A copy of ``source`` whose pages have images: white pages with the element boxes drawn in
    grey, stored at 1/IMAGE_SCALE of the page size; even pages by path, odd pages as bytes."""
    from PIL import Image, ImageDraw

    from vldocir.data.benchmark import load_benchmark, write_benchmark

    bench = load_benchmark(source)
    pages = bench.pages.copy()
    elements = bench.elements
    (target / "images").mkdir(parents=True, exist_ok=True)
    images = []
    for i, page in enumerate(pages.itertuples()):
        picture = Image.new("RGB", (page.width // IMAGE_SCALE, page.height // IMAGE_SCALE), "white")
        draw = ImageDraw.Draw(picture)
        on_page = elements[(elements.doc_id == page.doc_id) & (elements.page_index == page.page_index)]
        for bbox in on_page["bbox"]:
            draw.rectangle([v / IMAGE_SCALE for v in bbox], fill=(200, 200, 200), outline=(90, 90, 90))
        draw.text((5, 5), page.page_id, fill="black")
        if i % 2 == 0:
            relative = f"images/{page.page_id}.png"
            picture.save(target / relative)
            images.append({"bytes": None, "path": relative})
        else:
            buffer = io.BytesIO()
            picture.save(buffer, format="PNG")
            images.append({"bytes": buffer.getvalue(), "path": None})
    pages["image"] = images
    tables = {name: bench.table(name) for name in ("documents", "elements", "queries", "qrels")}
    return write_benchmark(target, {**tables, "pages": pages}, {"name": "test-rendered", "rendered": True})


def build_rendered_store(root: Path) -> Path:
    """A results store with one run (dom_bm25/base) on a small rendered benchmark (a 12-document
    synthetic benchmark given page images by :func:`make_rendered_benchmark`), under ``root``."""
    from vldocir.construction.synthetic import SOURCE_DOMAINS, SyntheticSpec, generate
    from vldocir.data.schema import EVIDENCE_STRUCTURES

    spec = SyntheticSpec(
        name="text-only",
        seed=3,
        documents=dict.fromkeys(SOURCE_DOMAINS, 3),
        pages=dict.fromkeys(SOURCE_DOMAINS, (6, 9)),
        queries={s: dict.fromkeys(EVIDENCE_STRUCTURES, 2) for s in SOURCE_DOMAINS},
    )
    text_only = generate(spec, root / "text-only")
    bench = make_rendered_benchmark(text_only.root, root / "data" / "test-rendered")
    evaluate_run(root, f"dataset.source={bench.root}", "dataset.name=test-rendered", "dataset.build=null")
    return root / "results"


def chromium_path() -> str | None:
    """Chromium for Playwright: $VLDOCIR_CHROMIUM, else chromium on PATH."""
    for candidate in (os.environ.get("VLDOCIR_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None
