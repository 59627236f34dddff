"""Imports stream their pages (texts in sorted runs on disk, merged into a pages table written batch
by batch; vldocir.importers.base) and the fingerprint streams sorted table files: the benchmarks
written are the very ones the whole-table writer wrote. Their fingerprints below were recorded from
that writer, and an import with runs and blocks of a few rows (so that the merge crosses runs and
skips dropped pages) writes the same tables, frame for frame, as one with a single run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import test_importer_base
from helpers import REPO_ROOT
from importer_fixtures import write_vidore_v1_qa, write_vidore_v2, write_vidore_v3
from vldocir.data.schema import TABLES
from vldocir.importers import base
from vldocir.importers.base import import_benchmark, write_imported
from vldocir.importers.beir import BeirImporter
from vldocir.importers.vidore import ViDoReImporter, ViDoReQAImporter

# By the whole-table writer and fingerprint, from these fixtures. The three ViDoRe entries below were
# recorded again when issue 38 changed their queries and qrels (v3: content types mapped, a three-page
# run doc_adjacent, the placeholder no second kind; v1 BEIR: multi_page_docs_unknown; v1 QA: two rows
# of repeated texts, merged): the previous import code, run on the new fixtures, writes the same
# documents, pages and elements tables frame for frame, and queries and qrels differ only there.
RECORDED = {
    "toy": "ffcb87c568e3348263cf7a23af07ff6c",
    "beir_toy": "cc99b0a39cfb87fccb1538633f59bb4b",
    "vidore_v3": "170bcd1e954ab509a237da46aa8828f8",
    "vidore_v2": "8bf85b0029a006fa6a7cc0cca8c0db81",
    "vidore_v1_beir": "67c9ad77b2be6c15537db791b2765900",
    "vidore_v1_qa": "3343db65b438240c3c54786a33242ba7",
}


def _import(name: str, tmp_path):
    out = tmp_path / f"out-{name}"
    if name == "toy":
        return write_imported(test_importer_base._toy(), out, name="toy")
    if name == "beir_toy":
        source = REPO_ROOT / "tests" / "fixtures" / "importers" / "beir_toy"
        return import_benchmark(BeirImporter(source=str(source)), out, name="toy")
    if name == "vidore_v3":
        return import_benchmark(ViDoReImporter(source=str(write_vidore_v3(tmp_path / "v3"))), out, name="v3")
    if name == "vidore_v1_qa":
        source = write_vidore_v1_qa(tmp_path / "docvqa_test_subsampled")
        return import_benchmark(ViDoReQAImporter(source=str(source)), out, name="qa")
    with_filenames = name == "vidore_v2"
    source = write_vidore_v2(tmp_path / f"v2_{with_filenames}", with_filenames=with_filenames)  # (the source label)
    return import_benchmark(ViDoReImporter(source=str(source)), out, name="v2")


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_imports_write_what_the_whole_table_writer_wrote(name, tmp_path):
    bench = _import(name, tmp_path)
    assert bench.fingerprint == RECORDED[name]
    assert not [p for p in bench.root.iterdir() if p.name.startswith(".pages-")]  # (the runs are removed)


@pytest.mark.parametrize("name", ["toy", "vidore_v3"])
def test_runs_and_blocks_of_a_few_rows_write_the_same_tables(name, tmp_path, monkeypatch):
    whole = _import(name, tmp_path / "whole")
    monkeypatch.setattr(base, "RUN_ROWS", 2)
    monkeypatch.setattr(base, "RUN_READ_ROWS", 1)
    monkeypatch.setattr(base, "BLOCK_ROWS", 3)
    small = _import(name, tmp_path / "small")
    assert small.fingerprint == whole.fingerprint == RECORDED[name]
    for table in TABLES:
        assert pq.read_table(small.root / f"{table}.parquet").equals(pq.read_table(whole.root / f"{table}.parquet"))
    assert pq.ParquetFile(small.root / "pages.parquet").num_row_groups > 1
