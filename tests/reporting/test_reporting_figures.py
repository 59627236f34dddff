"""Paper figures (PDF + PNG of a fixed size), from the published numbers or reproduced runs, and
the W&B mirror of tables and figures when a sweep ends (offline)."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image

from report_stores import MANIFEST, PAPER_DIR, REPO_ROOT, TEXT_BENCH
from vldocir.reporting.figures import DPI, FIGURES, SIZES, fig2_source_structure, render_figures
from vldocir.reporting.paper import load_spec
from vldocir.reporting.report_tasks import TablesOnSweepEnd
from vldocir.reporting.store_view import ResultsView

FIGURE_NAMES = set(load_spec(MANIFEST, PAPER_DIR).figures)  # every figure of conf/paper_tables.yaml


@pytest.fixture(scope="module")
def spec():
    return load_spec(MANIFEST, PAPER_DIR)


def assert_images(results: dict, out_dir) -> None:
    assert set(results) == FIGURE_NAMES == set(FIGURES) == set(SIZES)
    for name, result in results.items():
        assert result.pdf.read_bytes()[:5] == b"%PDF-" and result.pdf.stat().st_size > 5_000, name
        with Image.open(result.png) as image:
            width, height = SIZES[name]
            assert image.size == (round(width * DPI), round(height * DPI)), name
            pixels = np.asarray(image.convert("L"), dtype=float)
        assert pixels.std() > 10 and (pixels < 128).mean() > 0.005, f"{name} looks empty"
    assert (out_dir / ".gitignore").is_file()


def test_figures_from_the_published_numbers(spec, tmp_path):
    view = ResultsView(tmp_path / "no-results", spec.benchmark)
    results = render_figures(spec, view, tmp_path / "figures")
    assert_images(results, tmp_path / "figures")
    for name, result in results.items():
        assert result.origin.startswith("published"), (name, result.origin)
    assert "Tables 19 and 20 (9 of" in results["fig12_generators"].origin  # matched by run, not by name


@pytest.mark.slow  # an offline W&B run (wandb starts its service process) and every figure: ~10-15 s
def test_sweep_end_renders_from_reproduced_runs_and_logs_to_wandb(spec, multi_results, tmp_path, monkeypatch, capsys):
    """When a sweep ends, the Hydra callback renders the tables and figures from the results store
    (here: runs under paper ids, so every figure has reproduced runs) and logs them to an offline
    W&B run: one W&B table per paper table, one image per figure."""

    results = tmp_path / "results"
    shutil.copytree(multi_results, results)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "vldocir-tests")
    monkeypatch.setenv("VLDOCIR_LOG_DIR", str(tmp_path / "logs"))
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = OmegaConf.create(
        {"paths": {"root_dir": str(REPO_ROOT), "results_dir": str(results)}, "dataset": {"name": TEXT_BENCH}}
    )
    capsys.readouterr()
    TablesOnSweepEnd(wandb=True).on_multirun_end(config)
    printed = capsys.readouterr().out

    # Tables and figures in the results directory, each figure drawn from the reproduced runs.
    assert {p.stem for p in (results / "tables").glob("*.md")} == set(spec.tables) | {"README"}
    assert {p.stem for p in (results / "tables").glob("*.tex")} == set(spec.tables)
    assert (results / "tables" / ".gitignore").read_text().strip().endswith("*")  # generated, not committed
    index = (results / "tables" / "README.md").read_text()
    assert "8 of 50 rows reproduced" in index  # Table 13: DOM-BM25, OCR-BM25, ColQwen2.5 (base, Ctx) x Macro, Micro
    for name in FIGURE_NAMES:
        with Image.open(results / "figures" / f"{name}.png") as image:
            assert image.size == (round(SIZES[name][0] * DPI), round(SIZES[name][1] * DPI)), name
        assert (results / "figures" / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    origins = dict(re.findall(r"^  (fig\S+) +(.+)$", printed, re.M))
    assert set(origins) == FIGURE_NAMES
    for name in FIGURE_NAMES - {"fig8_families"}:
        assert origins[name].startswith("reproduced"), (name, origins[name])
    # Fig. 8: only the ColQwen2.5 panel has runs (colqwen25/base, ctx-n256); the others stay published.
    assert origins["fig8_families"] == (
        f"reproduced on {TEXT_BENCH}: ColQwen2.5; published (Table 13): ColPali v1.3, ColNomic"
    )
    assert "2 of 5 n_ctx runs" in origins["fig10_nctx"]
    assert "no domain has 100 Cross-Doc queries" in origins["fig9_domain_crossdoc"]

    # Fig. 2 shows, per source x structure, the best RecallAll@5 over the runs in the store.
    figure, _ = fig2_source_structure(
        "fig2_source_structure", spec.figures["fig2_source_structure"], spec, ResultsView(results, TEXT_BENCH)
    )
    shown = [text.get_text() for text in figure.axes[0].texts]
    runs = [json.loads(path.read_text()) for path in (results / "runs" / TEXT_BENCH).glob("*/*/*/metrics.json")]
    assert len(runs) == 5
    expected = [
        f"{max(m['breakdowns']['source_structure'][source][structure]['recallall@5'] for m in runs):.1f}"
        for source in spec.sources
        for structure in spec.structures
    ]
    assert shown == expected

    # The offline W&B run.
    runs = sorted((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    files = runs[0] / "files"
    logged_tables = {p.name.rsplit("_", 2)[0] for p in (files / "media" / "table" / "tables").glob("*.table.json")}
    assert logged_tables == set(spec.tables)
    logged_figures = {p.name.rsplit("_", 2)[0] for p in (files / "media" / "images" / "figures").glob("*.png")}
    assert logged_figures == FIGURE_NAMES
    t13 = json.loads(next((files / "media" / "table" / "tables").glob("table13_overall_*.table.json")).read_text())
    assert t13["columns"] == ["Model", "Aggregate", "column", "published", "reproduced", "difference", "check", "run"]
    rows = {(r[0], r[1], r[2]): r for r in t13["data"]}
    assert rows[("DOM-BM25", "Macro", "RecallAll@10")][6] == "DIFF"
    assert (
        rows[("ColNomic", "Macro", "RecallAll@10")][4] is None
        and rows[("ColNomic", "Macro", "RecallAll@10")][6] == "MISSING"
    )
