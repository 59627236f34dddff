"""Where a benchmark can come from: a directory of files, a folder-per-table (hub) layout, the hub."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from vldocir.data.benchmark import BenchmarkError, load_benchmark
from vldocir.data.schema import TABLES


def test_folder_per_table_layout_loads_with_the_same_fingerprint(small_bench, small_bench_dir, tmp_path):
    """Hugging Face datasets store a table as a folder of Parquet shards."""
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copy(small_bench_dir / "benchmark.json", sharded)
    for name in TABLES:
        table = pq.read_table(small_bench_dir / f"{name}.parquet")
        (sharded / name).mkdir()
        half = table.num_rows // 2
        pq.write_table(table.slice(0, half), sharded / name / "train-00000-of-00002.parquet")
        pq.write_table(table.slice(half), sharded / name / "train-00001-of-00002.parquet")
    loaded = load_benchmark(sharded)
    assert loaded.fingerprint == small_bench.fingerprint
    assert len(loaded.qrels) == len(small_bench.qrels)


def test_hub_source_that_cannot_be_fetched_names_the_dataset(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        BenchmarkError, match=r"(?s)could not fetch dataset 'nobody/no-such-benchmark'.*local benchmark directory"
    ):
        load_benchmark("hf://nobody/no-such-benchmark", cache_dir=tmp_path)


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(BenchmarkError, match="does-not-exist does not exist"):
        load_benchmark(tmp_path / "does-not-exist")
