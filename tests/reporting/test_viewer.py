"""Failure viewer: static pages per query, checked in a real headless Chromium (Playwright).

Benchmarks: the text-only mini benchmark (pages drawn as page-shaped boxes of DOM text), a small
rendered one with page images stored at 1/8 of the page size (boxes must still line up), and the
shipped rendered mini benchmark (data/vl-docir-mini) when the checkout has it.
"""

from __future__ import annotations

import json
import runpy
import sys

import pandas as pd
import pytest

from helpers import newest_entry
from report_stores import IMAGE_SCALE, REPO_ROOT, TEXT_BENCH, chromium_path, evaluate_run
from vldocir import store
from vldocir.data.benchmark import load_benchmark
from vldocir.reporting.viewer import ViewerError, load, query_file_name, write_viewer

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-gpu",
]


def run_dir_of(results, benchmark):
    return newest_entry(results, benchmark, "dom_bm25", "base")


def expected_boxes(bench, query_id: str, page_id: str) -> int:
    """Cited elements of the query that lie on the page (what the viewer must draw)."""
    qrels, pages, elements = bench.qrels, bench.pages.set_index("page_id"), bench.elements
    rows = qrels[(qrels.query_id == query_id) & (qrels.page_id == page_id)]
    if rows.empty:
        return 0
    page = pages.loc[page_id]
    cited = {e for ids in rows.element_ids for e in ids}
    return int(
        (
            (elements.doc_id == page.doc_id)
            & (elements.page_index == page.page_index)
            & elements.element_id.isin(cited)
        ).sum()
    )


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium found: apt-get install chromium, or set VLDOCIR_CHROMIUM to its binary")
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def open_page(browser, path):
    """Open a file in a fresh page; returns the page and the list that collects its errors."""
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(f"console: {message.text}") if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: errors.append(f"request failed: {request.url}"))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors


@pytest.mark.slow
def test_viewer_on_the_text_only_mini_benchmark(browser, mini_results, tmp_path, monkeypatch, capsys):
    run_dir = run_dir_of(mini_results, TEXT_BENCH)
    out = tmp_path / "viewer"
    # The documented command: python -m vldocir.reporting.viewer <run dir> ...
    monkeypatch.setattr(
        sys, "argv", ["viewer", str(run_dir), "--structure", "cross_doc", "--failed", "--out", str(out)]
    )
    with pytest.raises(SystemExit) as done:
        runpy.run_module("vldocir.reporting.viewer", run_name="__main__")
    assert done.value.code == 0
    per_query = pd.read_parquet(run_dir / "per_query.parquet")
    failed = per_query[(per_query.evidence_structure == "cross_doc") & (per_query["recallall@5"] < 1)]
    assert f"{len(failed)} query pages written" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "q").iterdir()) == sorted(query_file_name(q) for q in failed.query_id)

    page, errors = open_page(browser, out / "index.html")
    assert page.locator("#queries tbody tr").count() == len(failed)
    assert page.locator("#shown").inner_text() == str(len(failed))
    page.select_option("select[name=source]", "sec")
    assert page.locator("#shown").inner_text() == str((failed.source == "sec").sum())
    assert page.locator("#queries tbody tr:visible").count() == (failed.source == "sec").sum()
    page.select_option("select[name=solved]", "solved")
    assert page.locator("#shown").inner_text() == "0"
    assert errors == []

    bench = load_benchmark(json.loads((run_dir / "manifest.json").read_text())["config"]["dataset"]["source"])
    row = failed.iloc[0]
    query_id = row.query_id
    page, errors = open_page(browser, out / "q" / query_file_name(query_id))
    evidence = list(dict.fromkeys(bench.qrels[bench.qrels.query_id == query_id].page_id))
    run = pd.read_parquet(run_dir / "run.parquet")
    top = run[run.query_id == query_id].sort_values(["score", "page_id"], ascending=[False, True]).head(5)
    assert page.locator(".retrieved .thumb").count() == 5
    assert page.locator(".thumb.correct").count() == int(row["pages_found@5"]) == top.page_id.isin(evidence).sum()
    assert page.locator(".evidence-view").count() == len(evidence) == row.n_evidence_pages
    assert page.locator(".evidence-view .bbox").count() == sum(expected_boxes(bench, query_id, p) for p in evidence) > 0
    assert page.locator(".thumb .bbox").count() == sum(
        expected_boxes(bench, query_id, p) for p in top.page_id if p in evidence
    )
    assert page.locator(".thumb .page-text").count() == 5  # text-only pages: their DOM text
    texts = [page.locator(".retrieved figcaption").nth(i).inner_text() for i in range(5)]
    assert [t.split(" ")[0] for t in texts] == ["#1", "#2", "#3", "#4", "#5"]
    assert bench.queries.set_index("query_id").loc[query_id, "answer"] in page.locator(".answer").inner_text()
    shot = tmp_path / "query-text-only.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert errors == []


@pytest.mark.slow
def test_viewer_on_a_rendered_benchmark(browser, rendered_results, tmp_path):
    run_dir = run_dir_of(rendered_results, "test-rendered")
    data = load(run_dir, k=5, structure="doc_adjacent")
    out = tmp_path / "viewer"
    write_viewer(data, out)
    bench = load_benchmark(data.bench_root)
    query_id = data.per_query.query_id.iloc[0]
    evidence = list(dict.fromkeys(bench.qrels[bench.qrels.query_id == query_id].page_id))

    page, errors = open_page(browser, out / "q" / query_file_name(query_id))
    images = page.locator(".page img")
    assert images.count() == 5 + len(evidence)
    loaded = page.evaluate(
        "Array.from(document.querySelectorAll('.page img')).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
    )
    assert all(ok and width == 2000 // IMAGE_SCALE and height == 4000 // IMAGE_SCALE for ok, width, height in loaded)
    assert all(
        src.startswith("../img/")
        for src in page.eval_on_selector_all(".page img", "els => els.map(e => e.getAttribute('src'))")
    )

    # Each evidence box sits where its element is on the page, although the image is 1/8 the size.
    pages = bench.pages.set_index("page_id")
    elements = bench.elements.set_index(["doc_id", "element_id"])
    for i, page_id in enumerate(evidence):
        view = page.locator(".evidence-view").nth(i)
        frame = view.bounding_box()
        boxes = view.locator(".bbox")
        assert boxes.count() == expected_boxes(bench, query_id, page_id) > 0
        cited = bench.qrels[(bench.qrels.query_id == query_id) & (bench.qrels.page_id == page_id)].element_ids.iloc[0]
        expected = sorted(tuple(elements.loc[(pages.loc[page_id, "doc_id"], e), "bbox"]) for e in cited)
        drawn = []
        for j in range(boxes.count()):
            box = boxes.nth(j).bounding_box()
            drawn.append(
                (
                    (box["x"] - frame["x"]) / frame["width"] * 2000,
                    (box["y"] - frame["y"]) / frame["height"] * 4000,
                    (box["x"] + box["width"] - frame["x"]) / frame["width"] * 2000,
                    (box["y"] + box["height"] - frame["y"]) / frame["height"] * 4000,
                )
            )
        for want, got in zip(expected, sorted(drawn), strict=True):
            assert got == pytest.approx(want, abs=2000 * 0.01), (page_id, want, got)
    page.screenshot(path=str(tmp_path / "query-rendered.png"), full_page=True)
    assert (tmp_path / "query-rendered.png").stat().st_size > 10_000
    assert errors == []


def test_viewer_refuses_a_changed_benchmark_or_an_unknown_k(mini_results, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(run_dir_of(mini_results, TEXT_BENCH), run_dir)
    with pytest.raises(ViewerError, match="evaluated at k in \\[3, 5, 10\\], not 7"):
        load(run_dir, k=7)
    with pytest.raises(ViewerError, match="queries not in the run's benchmark: nope"):
        load(run_dir, queries=["nope"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["benchmark"]["fingerprint"] = "0" * 32
    (run_dir / "manifest.json").write_text(json.dumps(store.seal_manifest(manifest)))  # an entry of another benchmark
    with pytest.raises(ViewerError, match="the benchmark changed"):
        load(run_dir)
    data = load(run_dir_of(mini_results, TEXT_BENCH), queries=["q0000000"], k=3)
    assert list(data.per_query.query_id) == ["q0000000"] and data.top.groupby("query_id").size().max() == 3


SHIPPED_MINI = REPO_ROOT / "data" / "vl-docir-mini"


@pytest.mark.slow
def test_viewer_on_the_shipped_rendered_mini_benchmark(browser, tmp_path):
    """The rendered mini benchmark that ships in data/vl-docir-mini (page images stored downscaled)."""
    evaluate_run(tmp_path, f"dataset.source={SHIPPED_MINI}", "dataset.build=null")
    run_dir = next((tmp_path / "results" / "runs").glob("*/dom_bm25/base/*"))
    data = load(run_dir, k=5, structure="cross_doc", limit=3)
    write_viewer(data, tmp_path / "viewer")
    bench = load_benchmark(SHIPPED_MINI)
    for query_id in data.per_query.query_id:
        page, errors = open_page(browser, tmp_path / "viewer" / "q" / query_file_name(query_id))
        evidence = list(dict.fromkeys(bench.qrels[bench.qrels.query_id == query_id].page_id))
        assert page.locator(".retrieved .thumb").count() == 5
        assert page.locator(".evidence-view .bbox").count() == sum(expected_boxes(bench, query_id, p) for p in evidence)
        # images are loading="lazy": load every one (as scrolling would), then check that each decoded
        loaded = page.evaluate("""Promise.all(Array.from(document.querySelectorAll('.page img')).map(i => {
            i.loading = 'eager';
            return i.decode().then(() => i.naturalWidth > 0, () => false);
        }))""")
        assert loaded and all(loaded), loaded
        assert errors == []
    page.screenshot(path=str(tmp_path / "query-vl-docir-mini.png"), full_page=True)
