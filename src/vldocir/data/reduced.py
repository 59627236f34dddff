"""The reduced corpus (paper App. B.8, Table 18): a benchmark holding only the pages that are
evidence for at least one query (38,551 of VL-DocIR's 388,548 pages).

It is derived from any benchmark (its *parent*) and is a benchmark of its own, named
``<parent name>-reduced``, validated and fingerprinted like any other:

- ``pages``: the parent's pages cited by at least one qrel; ``elements``: those on kept pages;
  ``documents``: those with a kept page; ``queries`` and ``qrels``: unchanged (every query keeps all
  its evidence by construction).
- ``page_id`` and ``doc_id`` are the parent's, so runs and per-query metrics on the reduced corpus
  compare with those on the full one row for row. Ordinals cannot all stay: the loader requires a
  document's pages to be numbered ``0..n_pages-1`` with ``n_pages`` the pages present. So
  ``page_index`` (pages and elements) is renumbered densely within each document, in the parent's
  order, and ``n_pages`` counts the kept pages; the parent's values stay in the extra columns
  ``full_page_index`` and ``full_n_pages`` (a parent that already has them, itself derived, passes
  them on: they always name the original corpus). Consecutive evidence stays consecutive, so
  Doc-Adjacent queries stay valid.
- Page image files are hard links to the parent's (no byte is copied; the loader only accepts
  regular files inside the benchmark directory, so neither absolute paths nor symbolic links out of
  it would load). Where a hard link is impossible (another filesystem, a link-protected file) the
  file is copied, with a warning. Inline image bytes stay inline: the pages table holds them.
- ``benchmark.json`` keeps the parent's descriptive keys (``rendered``, ``images``, ...), and adds
  ``derived_from: {name, fingerprint}`` and ``derivation: {keep, version}``.

The fingerprint covers the tables and the image bytes (:mod:`vldocir.data.fingerprint`): it differs
from the parent's (fewer pages) and is the same for every build from the same parent.

:func:`open_reduced` builds it once per parent into ``<cache_root>/reduced/<parent fingerprint>/``
(staged and renamed into place by :class:`vldocir.cache.ArtifactCache`) and reuses it afterwards;
:func:`open_dataset` does so for a dataset config whose ``derive`` names its parent
(``conf/dataset/*_reduced.yaml``).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from vldocir.cache import ArtifactCache, CorruptArtifactError
from vldocir.data.benchmark import INFO_FILE, Benchmark, load_benchmark, write_benchmark
from vldocir.data.tables import BenchmarkError, table_location
from vldocir.errors import ConfigError

log = logging.getLogger(__name__)

KEEP_RULES = ("evidence_pages",)
"""What a derived dataset may keep (``dataset.derive.keep``)."""

DERIVATION_VERSION = 1
"""Bumped whenever what :func:`reduce_to_evidence` writes changes; a cached reduced benchmark of
another version is rebuilt."""

CACHE_KIND = "reduced"
NAME_SUFFIX = "-reduced"
INFO_KEYS_NOT_INHERITED = ("name", "counts", "fingerprint", "built_by", "derived_from", "derivation")
"""Keys of the parent's ``benchmark.json`` that describe the parent itself, not its content."""


def reduce_to_evidence(parent: Benchmark, dest: Path) -> Benchmark:
    """Write into ``dest`` the benchmark of ``parent``'s evidence pages (see the module docstring)
    and return it, loaded and validated."""
    dest = Path(dest)
    qrels = parent.arrow("qrels")
    evidence = pc.unique(qrels.column("page_id").combine_chunks())
    pages = _kept_pages(parent, evidence)
    if pages.num_rows != len(evidence):  # the parent validated, so every qrel's page exists
        raise BenchmarkError(
            "pages", None, f"{len(evidence) - pages.num_rows} evidence pages of {parent.root} are missing"
        )

    # Renumber each document's kept pages 0..k-1 in the parent's order.
    pages = pages.sort_by([("doc_id", "ascending"), ("page_index", "ascending")])
    keys = pages.select(["doc_id", "page_index"]).to_pandas()
    renumbered = keys.groupby("doc_id", sort=False).cumcount().to_numpy(np.int32)
    page_map = keys.rename(columns={"page_index": "full"}).assign(new=renumbered)
    pages = _renumber(pages, renumbered)

    documents = parent.arrow("documents")
    kept_counts = page_map.groupby("doc_id").size()
    documents = documents.filter(
        pc.is_in(documents.column("doc_id"), pa.array(kept_counts.index.tolist(), pa.string()))
    )
    n_pages = kept_counts.reindex(documents.column("doc_id").to_pylist()).to_numpy(np.int32)
    if "full_n_pages" not in documents.column_names:
        documents = documents.append_column("full_n_pages", documents.column("n_pages").cast(pa.int32()))
    documents = documents.set_column(
        documents.schema.get_field_index("n_pages"), "n_pages", pa.array(n_pages, pa.int32())
    )

    elements = _kept_elements(parent.arrow("elements"), page_map)

    info = {k: v for k, v in parent.info.items() if k not in INFO_KEYS_NOT_INHERITED}
    info = {
        "name": parent.name + NAME_SUFFIX,
        **info,
        "derived_from": {"name": parent.name, "fingerprint": parent.fingerprint},
        "derivation": {"keep": "evidence_pages", "version": DERIVATION_VERSION},
    }
    dest.mkdir(parents=True, exist_ok=True)
    _link_images(parent, pages, dest)
    tables = {
        "documents": documents,
        "pages": pages,
        "elements": elements,
        "queries": parent.arrow("queries"),
        "qrels": qrels,
    }
    reduced = write_benchmark(dest, tables, info)
    log.info(
        "reduced %s to its %d evidence pages (of %d) in %s",
        parent.name,
        pages.num_rows,
        parent.info.get("counts", {}).get("pages", -1),
        dest,
    )
    return reduced


def open_reduced(parent: Benchmark, cache_root: Path) -> Benchmark:
    """The reduced benchmark of ``parent``, built on first use into
    ``<cache_root>/reduced/<parent fingerprint>/`` and reused afterwards.

    A finished one whose files do not match its ``artifact.json`` (:func:`vldocir.cache.check_artifact`),
    that no longer loads (a table or image file deleted or damaged), whose content no longer has the
    fingerprint its ``benchmark.json`` records, or that was written by another
    :data:`DERIVATION_VERSION`, is reported and rebuilt. An interrupted build leaves only a staging
    directory, which the next build removes.
    """
    cache = ArtifactCache(Path(cache_root), policy="reuse")
    key = parent.fingerprint
    found: list[Benchmark] = []

    def verify(path: Path) -> None:
        try:
            bench = load_benchmark(path)
        except BenchmarkError as error:
            raise CorruptArtifactError(path, str(error)) from error
        if bench.fingerprint != bench.info.get("fingerprint"):
            raise CorruptArtifactError(
                path / INFO_FILE, "records another fingerprint than its tables and images have: they have changed"
            )
        expected = {"name": parent.name, "fingerprint": key}
        version = bench.info.get("derivation", {}).get("version")
        if bench.info.get("derived_from") != expected or version != DERIVATION_VERSION:
            raise CorruptArtifactError(
                path, f"{INFO_FILE} does not describe the reduction of {expected} by version {DERIVATION_VERSION}"
            )
        found.append(bench)

    if cache.lookup(CACHE_KIND, key, verify) is not None:
        return found[0]
    log.info(
        "building the reduced corpus of %s (fingerprint %s) into %s (first use)",
        parent.name,
        key,
        cache.directory(CACHE_KIND, key),
    )
    description = {
        "parent": {"name": parent.name, "fingerprint": key, "root": str(parent.root)},
        "keep": "evidence_pages",
        "version": DERIVATION_VERSION,
    }
    with cache.build(CACHE_KIND, key, description) as staging:
        reduce_to_evidence(parent, staging)
    return load_benchmark(cache.directory(CACHE_KIND, key))


def open_dataset(
    dataset: Mapping[str, Any], cache_dir: Path, open_parent: Callable[[Mapping[str, Any]], Benchmark]
) -> Benchmark:
    """The benchmark a dataset config names: ``open_parent(dataset)`` for a plain one; for a derived
    one (``derive: {parent: <a dataset config>, keep: evidence_pages}``), the reduced benchmark of
    its parent (opened the same way, so a parent may itself be built on first use or derived),
    cached under ``cache_dir`` (:func:`open_reduced`)."""
    derive = dataset.get("derive")
    if derive is None:
        return open_parent(dataset)
    keep = derive.get("keep")
    if keep not in KEEP_RULES:
        raise ConfigError(f"dataset.derive.keep must be one of {', '.join(KEEP_RULES)}, got {keep!r}")
    if derive.get("parent") is None:
        raise ConfigError(
            "dataset.derive.parent must name the dataset config to derive from (e.g. /dataset/mini@derive.parent)"
        )
    parent = open_dataset(derive["parent"], cache_dir, open_parent)
    bench = open_reduced(parent, cache_dir)
    bench.load_timings = {**bench.load_timings, "parent": parent.load_timings}  # the parent was loaded too
    return bench


# ----------------------------------------------------------------------------------------------
# The tables
# ----------------------------------------------------------------------------------------------


def _kept_pages(parent: Benchmark, page_ids: pa.Array) -> pa.Table:
    """The parent's pages whose id is in ``page_ids``, all columns, read batch by batch (inline
    image bytes of the pages left out are never held in memory together)."""
    source = ds.dataset(table_location(parent.root, "pages"), format="parquet")
    return source.to_table(filter=pc.field("page_id").isin(page_ids))


def _renumber(table: pa.Table, page_index: np.ndarray) -> pa.Table:
    """``page_index`` set to the new ordinals, the parent's kept in ``full_page_index``."""
    if "full_page_index" not in table.column_names:
        table = table.append_column("full_page_index", table.column("page_index").cast(pa.int32()))
    return table.set_column(table.schema.get_field_index("page_index"), "page_index", pa.array(page_index, pa.int32()))


def _kept_elements(elements: pa.Table, page_map: pd.DataFrame) -> pa.Table:
    """The elements on kept pages, renumbered like their pages. ``page_map``: doc_id, full (the
    parent's page_index), new."""
    keys = elements.select(["doc_id", "page_index"]).to_pandas()
    keys["row"] = np.arange(len(keys))
    keys["page_index"] = keys["page_index"].astype(np.int64)
    kept = keys.merge(
        page_map.astype({"full": np.int64}), left_on=["doc_id", "page_index"], right_on=["doc_id", "full"]
    )
    kept = kept.sort_values("row")
    return _renumber(elements.take(pa.array(kept["row"].to_numpy())), kept["new"].to_numpy(np.int32))


# ----------------------------------------------------------------------------------------------
# The image files
# ----------------------------------------------------------------------------------------------


def _link_images(parent: Benchmark, pages: pa.Table, dest: Path) -> None:
    """Hard-link into ``dest`` each image file the kept pages read (same relative path); copy where
    linking fails. Pages with inline bytes read no file (inline bytes win over a path)."""
    refs = parent.image_refs().to_pandas()
    refs = refs[refs["page_id"].isin(pages.column("page_id").to_pylist()) & ~refs["has_bytes"].astype(bool)]
    paths = sorted({p for p in refs["path"].dropna().tolist() if p})
    copied = 0
    for relative in paths:
        # Resolved: a hub snapshot's files are symbolic links into its blobs/ folder.
        source, target = os.path.realpath(parent.root / relative), dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            continue
        try:
            os.link(source, target)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES, errno.ENOTSUP):
                raise
            shutil.copy2(source, target)  # (keeps the mtime: the fingerprint memo trusts it)
            copied += 1
    if copied:
        log.warning(
            "%d of %d page image files of %s could not be hard-linked into %s (another filesystem?) and were copied",
            copied,
            len(paths),
            parent.name,
            dest,
        )
