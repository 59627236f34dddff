"""The reduced corpus (paper App. B.8, Table 18): only the pages that are evidence for a query.

Checked on the shipped mini (page images as files: hard-linked, never copied) and on a subset of it
with inline images (``subset_dir``), against the parent's tables read independently with pyarrow.
Fingerprint memos go to a per-module ``VLDOCIR_CACHE_DIR``.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from helpers import MINI_DIR, compose_cfg
from vldocir.data import benchmark as benchmark_module
from vldocir.data import reduced as reduced_module
from vldocir.data.benchmark import load_benchmark
from vldocir.data.reduced import open_dataset, open_reduced, reduce_to_evidence
from vldocir.errors import ConfigError

TABLE_FILES = {
    "benchmark.json",
    "artifact.json",
    "documents.parquet",
    "pages.parquet",
    "elements.parquet",
    "queries.parquet",
    "qrels.parquet",
}


@pytest.fixture(scope="module")
def memo_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("memos")
        patch.setenv("VLDOCIR_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def mini(memo_dir):
    return load_benchmark(MINI_DIR)


@pytest.fixture(scope="module")
def mini_cache(mini, tmp_path_factory) -> Path:
    """A cache root holding the mini's reduced corpus, built once for the module."""
    root = tmp_path_factory.mktemp("cache")
    open_reduced(mini, root)
    return root


@pytest.fixture(scope="module")
def reduced_mini(mini, mini_cache):
    return open_reduced(mini, mini_cache)


def read(root: Path, table: str) -> pd.DataFrame:
    return pq.read_table(root / f"{table}.parquet").to_pandas()


def check_reduction(parent_root: Path, reduced) -> None:
    """``reduced`` holds exactly the parent's evidence pages, their documents and elements, and
    every query with all its evidence; ordinals are renumbered, the parent's kept."""
    qrels, pages = read(parent_root, "qrels"), read(parent_root, "pages")
    evidence = set(qrels["page_id"])
    assert 0 < len(evidence) < len(pages)

    kept = reduced.pages.set_index("page_id")
    assert set(kept.index) == evidence and len(kept) == len(evidence)
    parent_pages = pages.set_index("page_id").loc[sorted(evidence)]
    assert (kept.loc[parent_pages.index, "full_page_index"] == parent_pages["page_index"]).all()
    assert (kept.loc[parent_pages.index, "doc_id"] == parent_pages["doc_id"]).all()
    for _, group in kept.groupby("doc_id"):  # dense, in the parent's order
        ordered = group.sort_values("full_page_index")
        assert ordered["page_index"].tolist() == list(range(len(group)))

    documents, parent_docs = reduced.documents.set_index("doc_id"), read(parent_root, "documents").set_index("doc_id")
    assert set(documents.index) == set(parent_pages["doc_id"])
    assert (documents["n_pages"] == kept.groupby("doc_id").size().reindex(documents.index)).all()
    assert (documents["full_n_pages"] == parent_docs.loc[documents.index, "n_pages"]).all()

    elements = read(parent_root, "elements")
    on_kept = elements.merge(parent_pages.reset_index()[["doc_id", "page_index"]], on=["doc_id", "page_index"])
    assert len(reduced.elements) == len(on_kept) < len(elements)
    assert set(zip(reduced.elements["doc_id"], reduced.elements["element_id"], strict=True)) == set(
        zip(on_kept["doc_id"], on_kept["element_id"], strict=True)
    )

    # queries and qrels unchanged: every query keeps all its evidence pages, all of them present
    for table, frame, key in (
        ("queries", read(parent_root, "queries"), ["query_id"]),
        ("qrels", qrels, ["query_id", "page_id"]),
    ):
        pd.testing.assert_frame_equal(
            reduced.table(table).sort_values(key).reset_index(drop=True),
            frame.sort_values(key).reset_index(drop=True),
            check_dtype=False,
        )
    assert reduced.qrels["page_id"].isin(kept.index).all()
    load_benchmark(reduced.root)  # validates


def test_the_mini_reduces_to_its_evidence_pages(mini, reduced_mini, mini_cache):
    check_reduction(MINI_DIR, reduced_mini)
    assert reduced_mini.root == mini_cache / "reduced" / mini.fingerprint
    assert reduced_mini.name == "vl-docir-mini-reduced"
    assert reduced_mini.info["derived_from"] == {"name": "vl-docir-mini", "fingerprint": mini.fingerprint}
    assert reduced_mini.info["derivation"]["keep"] == "evidence_pages"
    assert reduced_mini.info["rendered"] is True and reduced_mini.info["images"] == mini.info["images"]
    assert reduced_mini.info["counts"]["pages"] == len(set(read(MINI_DIR, "qrels")["page_id"]))


def test_image_files_are_hard_links_to_the_parents(mini, reduced_mini):
    refs = reduced_mini.image_refs().to_pandas()
    assert len(refs) == len(reduced_mini.pages) and not refs["has_bytes"].any()

    def inode(path: Path) -> tuple[int, int]:
        st = os.stat(path)
        return st.st_dev, st.st_ino

    parent_inodes = {inode(MINI_DIR / image["path"]) for image in read(MINI_DIR, "pages")["image"]}
    for path in refs["path"]:
        assert inode(reduced_mini.root / path) == inode(MINI_DIR / path)
    # No byte duplicated: every file but the tables is one of the parent's image files.
    files = [p for p in reduced_mini.root.rglob("*") if p.is_file()]
    others = [p for p in files if inode(p) not in parent_inodes]
    assert {p.name for p in others} == TABLE_FILES
    assert len(files) - len(others) == len(reduced_mini.pages)


def test_inline_images_stay_inline(subset_dir, memo_dir, tmp_path):
    reduced = open_reduced(load_benchmark(subset_dir), tmp_path)
    check_reduction(subset_dir, reduced)
    assert {p.name for p in reduced.root.rglob("*")} == TABLE_FILES  # no image file
    parent_bytes = read(subset_dir, "pages").set_index("page_id")["image"].map(lambda i: i["bytes"])
    kept_bytes = reduced.pages.set_index("page_id")["image"].map(lambda i: i["bytes"])
    assert (kept_bytes == parent_bytes.loc[kept_bytes.index]).all()


@pytest.mark.parametrize("which", ["mini", "subset"])
def test_fingerprint_differs_from_the_parent_and_is_stable(which, mini, subset_dir, tmp_path):
    parent = mini if which == "mini" else load_benchmark(subset_dir)
    first, second = (reduce_to_evidence(parent, tmp_path / name) for name in ("a", "b"))
    assert first.fingerprint == second.fingerprint == first.info["fingerprint"]
    assert first.fingerprint != parent.fingerprint


def test_image_files_are_copied_where_hard_links_fail(mini, reduced_mini, tmp_path, monkeypatch, caplog):
    def cross_device(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(reduced_module.os, "link", cross_device)
    with caplog.at_level(logging.WARNING, logger="vldocir.data.reduced"):
        copied = reduce_to_evidence(mini, tmp_path / "copied")
    assert f"{len(reduced_mini.pages)} of {len(reduced_mini.pages)} page image files" in caplog.text
    path = copied.pages["image"].iloc[0]["path"]
    assert os.stat(copied.root / path).st_ino != os.stat(MINI_DIR / path).st_ino
    assert copied.fingerprint == reduced_mini.fingerprint


def test_a_second_open_reuses_it_and_another_parent_gets_another_directory(
    reduced_mini, mini_cache, subset_dir, monkeypatch
):
    info = (reduced_mini.root / "benchmark.json").stat()
    monkeypatch.setattr(
        reduced_module, "reduce_to_evidence", lambda *a: pytest.fail("rebuilt a cached reduced benchmark")
    )
    again = open_reduced(load_benchmark(MINI_DIR), mini_cache)
    assert again.root == reduced_mini.root and again.fingerprint == reduced_mini.fingerprint
    after = (again.root / "benchmark.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (info.st_ino, info.st_mtime_ns)
    monkeypatch.undo()

    other = open_reduced(load_benchmark(subset_dir), mini_cache)
    assert other.root.parent == reduced_mini.root.parent and other.root != reduced_mini.root
    assert other.root.name == load_benchmark(subset_dir).fingerprint


def test_an_interrupted_build_publishes_nothing_and_the_next_call_builds_it(mini, tmp_path, monkeypatch):
    real, written = benchmark_module.atomic_write_parquet, []

    def dies_on_the_third_table(table, target, **kwargs):
        if len(written) == 2:
            raise RuntimeError("killed mid-write")
        written.append(target)
        real(table, target, **kwargs)

    monkeypatch.setattr(benchmark_module, "atomic_write_parquet", dies_on_the_third_table)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        open_reduced(mini, tmp_path)
    assert len(written) == 2
    assert list((tmp_path / "reduced").iterdir()) == []  # neither the artifact nor its staging directory
    monkeypatch.undo()

    built = open_reduced(mini, tmp_path)
    assert built.root == tmp_path / "reduced" / mini.fingerprint
    check_reduction(MINI_DIR, built)


def test_a_damaged_cached_one_is_rebuilt(mini, tmp_path, caplog):
    built = open_reduced(mini, tmp_path)
    fingerprint = built.fingerprint
    (built.root / built.pages["image"].iloc[0]["path"]).unlink()
    with caplog.at_level(logging.WARNING, logger="vldocir.cache"):
        rebuilt = open_reduced(mini, tmp_path)
    assert "damaged, rebuilding" in caplog.text
    assert rebuilt.root == built.root and rebuilt.fingerprint == fingerprint


def _open_source(dataset):
    return load_benchmark(dataset["source"])


def test_the_reduced_dataset_configs_compose_and_open(isolated_paths, memo_dir, mini):
    cfg = compose_cfg("dataset=mini_reduced")
    assert cfg.dataset.name == "vl-docir-mini-reduced"
    assert cfg.dataset.derive.keep == "evidence_pages"
    assert Path(cfg.dataset.derive.parent.source) == MINI_DIR
    bench = open_dataset(cfg.dataset, Path(cfg.paths.cache_dir), _open_source)
    assert bench.name == cfg.dataset.name
    assert bench.root == Path(cfg.paths.cache_dir) / "reduced" / mini.fingerprint
    # The parent is any dataset config; the full benchmark's reduced name is what conf/paper_tables.yaml expects.
    assert compose_cfg("dataset=vldocir_reduced").dataset.name == "vl-docir-reduced"
    swapped = compose_cfg("dataset=mini_reduced", "dataset@dataset.derive.parent=synthetic_text").dataset
    assert swapped.name == "synthetic-text-reduced" and swapped.derive.parent.build is not None


def test_open_dataset_passes_plain_datasets_through_and_refuses_unknown_rules(tmp_path):
    plain = {"name": "vl-docir-mini", "source": str(MINI_DIR)}
    assert open_dataset(plain, tmp_path, lambda d: d) is plain
    with pytest.raises(ConfigError, match=r"dataset.derive.keep must be one of evidence_pages, got 'all'"):
        open_dataset({"name": "x", "derive": {"parent": plain, "keep": "all"}}, tmp_path, _open_source)
    with pytest.raises(ConfigError, match=r"dataset.derive.parent"):
        open_dataset({"name": "x", "derive": {"keep": "evidence_pages"}}, tmp_path, _open_source)


def test_a_run_on_the_reduced_mini_is_filed_under_its_own_benchmark_and_viewable(isolated_paths):
    """`python run.py dataset=mini_reduced`: the run retrieves reduced pages only, is filed under
    vl-docir-mini-reduced, and the manifest names where the benchmark was opened (the viewer uses it)."""
    from helpers import evaluate
    from vldocir.reporting.viewer import benchmark_root

    done = evaluate("dataset=mini_reduced")
    assert done.entry.parts[-4] == "vl-docir-mini-reduced"
    root = Path(done.manifest["benchmark"]["root"])
    assert root.parent == isolated_paths / "cache" / "reduced"
    kept = set(pd.read_parquet(root / "pages.parquet", columns=["page_id"]).page_id)
    assert set(pq.read_table(done.entry / "run.parquet").column("page_id").to_pylist()) <= kept
    assert benchmark_root(done.entry, done.manifest) == root
    # Load timings of the reduced benchmark, and of its parent (loaded first).
    timings = done.manifest["timings"]
    assert {"validate_s", "fingerprint_s"} <= set(timings) and {"validate_s", "fingerprint_s"} <= set(timings["parent"])
