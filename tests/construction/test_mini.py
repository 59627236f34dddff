"""The embedded mini benchmark: what ships, that `python run.py` finds it sensible, and that it
rebuilds from its seed with the real renderer to the same structure."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest
from PIL import Image

from helpers import MINI_DIR as SHIPPED
from helpers import REPO_ROOT, newest_entry
from vldocir.data.benchmark import load_benchmark
from vldocir.data.schema import EVIDENCE_STRUCTURES


@pytest.fixture(scope="module")
def mini():
    return load_benchmark(SHIPPED)


def test_shipped_mini_benchmark_is_valid_and_covers_the_design(mini):
    docs, queries = mini.documents, mini.queries
    assert mini.info["rendered"] is True
    assert docs.groupby("source").size().to_dict() == {"arxiv": 6, "pubmed": 6, "sec": 6, "wikipedia": 6}
    assert docs["domain"].nunique() >= 8
    assert docs["n_pages"].min() >= 1 and docs["n_pages"].max() > 30 and docs["n_pages"].max() <= 40
    assert 120 <= len(queries) <= 350
    cells = queries.groupby(["source", "evidence_structure"]).size()
    assert len(cells) == 4 * len(EVIDENCE_STRUCTURES) and cells.min() >= 3
    # made by the VLM query pipeline, from answers written by hand and labelled so
    report = mini.info["built_by"]["queries"]
    assert report["method"] == "generated" and report["counts"]["after_cleaning"] == len(queries)
    assert set(queries["generator"]) == {"recorded-by-hand"} and report["recorded"]["generator"] == "recorded-by-hand"
    assert report["counts"]["generated"] > report["counts"]["after_filter"] > report["counts"]["after_cleaning"]
    pages = mini.pages
    assert pages["dom_text"].str.len().min() > 0
    assert pages["ocr_text"].notna().all(), "the shipped mini carries Tesseract text for the OCR baselines"


def test_shipped_page_images_are_downscaled_copies_of_full_pages(mini):
    pages = mini.pages
    scale = mini.info["images"]["stored_scale"]
    for row in pages.sample(8, random_state=0).itertuples():
        with Image.open(mini.root / row.image["path"]) as image:
            assert image.size == (round(row.width * scale), round(row.height * scale))
    assert (pages["width"] == 2000).all() and (pages["height"] == 4000).all()


@pytest.mark.slow
def test_default_run_is_sensible_on_the_mini_benchmark(isolated_paths):
    done = subprocess.run([sys.executable, "run.py"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = pd.read_json(
        newest_entry(isolated_paths / "results", "vl-docir-mini", "dom_bm25", "base") / "metrics.json", typ="series"
    )
    by_structure = metrics["breakdowns"]["structure"]
    # single-page evidence is easier for BM25 than distributed evidence, by more than 10 points on average
    single = sum(by_structure[s]["recallall@5"] for s in ("page_single", "page_multi")) / 2
    distributed = sum(by_structure[s]["recallall@5"] for s in ("doc_adjacent", "doc_near", "doc_far", "cross_doc")) / 4
    assert single > distributed + 10, by_structure
    assert by_structure["cross_doc"]["recallall@5"] == min(v["recallall@5"] for v in by_structure.values())
    assert 0 < by_structure["cross_doc"]["recallall@5"] < 100


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (apt-get install chromium)")
def test_mini_rebuilds_from_its_seed_with_the_same_structure(mini, tmp_path):
    """Documents, page counts, element-to-page mapping and qrels match; pixels are not compared."""
    out = tmp_path / "rebuilt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vldocir.apps.build",
            f"out_dir={out}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.log_dir={tmp_path / 'logs'}",
            "spec.name=vl-docir-mini",
            "spec.ocr=false",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = load_benchmark(out)

    def same(table, columns, key):
        a = getattr(mini, table)[columns].sort_values(key).reset_index(drop=True)
        b = getattr(rebuilt, table)[columns].sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_dtype=False)

    same("documents", ["doc_id", "source", "domain", "n_pages"], ["doc_id"])
    same("elements", ["doc_id", "element_id", "page_index", "element_type"], ["doc_id", "element_id"])
    same("queries", ["query_id", "text", "evidence_structure", "source"], ["query_id"])

    def qrels(b):
        return b.qrels.assign(element_ids=b.qrels["element_ids"].map(tuple))[["query_id", "page_id", "element_ids"]]

    pd.testing.assert_frame_equal(
        qrels(mini).sort_values(["query_id", "page_id"]).reset_index(drop=True),
        qrels(rebuilt).sort_values(["query_id", "page_id"]).reset_index(drop=True),
    )
