"""The fingerprint hashes a table file in canonical order as a stream (vldocir.data.fingerprint.table_stream
``SortedTableFile``): the bytes must be those of the in-memory IPC stream (``ipc_stream``), for every
column type the benchmarks hold, with nulls at every level, empty lists and batch boundaries anywhere;
a file in any other order, with a repeated key, or in shards is hashed from memory."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vldocir.data.fingerprint import table_stream
from vldocir.data.fingerprint.images import image_file_paths
from vldocir.data.schema import BBOX_TYPE, IMAGE_TYPE, TABLES
from vldocir.data.tables import read_table, sort_canonically


def _pages(n: int, seed: int = 0) -> pa.Table:
    """Pages with nulls everywhere they may be, plus extra columns of the other types."""
    rng = np.random.default_rng(seed)
    maybe = rng.random((12, n)) < 0.3

    def texts(mask, k):
        return [None if m else "x" * int(rng.integers(0, 40)) + f"{k}-{i}" for i, m in enumerate(mask)]

    images = [
        None if maybe[0, i] else {"bytes": None if maybe[1, i] else bytes([i % 256]) * (i % 7), "path": f"img/{i}.png"}
        for i in range(n)
    ]
    return pa.table(
        {
            "page_id": [f"p{i:05d}" for i in range(n)],
            "doc_id": [f"d{i // 5}" for i in range(n)],
            "page_index": pa.array([i % 5 for i in range(n)], pa.int32()),
            "image": pa.array(images, IMAGE_TYPE),
            "width": pa.array([None if m else i for i, m in enumerate(maybe[2])], pa.int32()),
            "height": pa.array(list(range(n)), pa.int32()),
            "dom_text": texts(maybe[3], "dom"),
            "ocr_text": pa.array([None] * n, pa.string()),
            "page_number": pa.array(range(n), pa.int64()),
            "score": pa.array([None if m else i / 3 for i, m in enumerate(maybe[4])], pa.float64()),
            "large": pa.array(texts(maybe[6], "large"), pa.large_string()),
            "tags": pa.array(
                [None if m else [f"t{j}" if j % 4 else None for j in range(i % 4)] for i, m in enumerate(maybe[7])],
                pa.list_(pa.string()),
            ),
            "box": pa.array([None if m else [i, 1.5, 2, 3] for i, m in enumerate(maybe[8])], BBOX_TYPE),
            "nothing": pa.nulls(n),
            "flag": pa.array([i % 3 == 0 for i in range(n)]),
            "stamp": pa.array([None if m else i * 10**9 for i, m in enumerate(maybe[9])], pa.timestamp("ns")),
        }
    )


def _qrels(n: int) -> pa.Table:
    return pa.table(
        {
            "query_id": [f"q{i // 3:04d}" for i in range(n)],
            "page_id": [f"p{i % 3}" for i in range(n)],
            "doc_id": [f"d{i}" for i in range(n)],
            "element_ids": pa.array([[] for _ in range(n)], pa.list_(pa.string())),  # (all empty, as imports write)
            "grade": pa.array([1 + i % 2 for i in range(n)], pa.int32()),
        }
    )


def _digests(path, name: str, batch_rows: int) -> tuple[str, str]:
    streamed = table_stream.SortedTableFile.open(TABLES[name], path, batch_rows=batch_rows)
    assert streamed is not None
    digest = hashlib.blake2b(digest_size=16)
    streamed.hash_stream(digest)
    in_memory = table_stream.ipc_stream(sort_canonically(TABLES[name], read_table(path)))
    return digest.hexdigest(), hashlib.blake2b(in_memory, digest_size=16).hexdigest()


@pytest.mark.parametrize(("n", "batch_rows", "row_group"), [(1, 4096, None), (9, 1, 2), (100, 3, 7), (257, 8, 64)])
def test_streamed_pages_hash_as_the_in_memory_stream(tmp_path, n, batch_rows, row_group):
    path = tmp_path / "pages.parquet"
    pq.write_table(_pages(n, seed=n), path, row_group_size=row_group)
    streamed, in_memory = _digests(path, "pages", batch_rows)
    assert streamed == in_memory


def test_streamed_image_files_are_the_in_memory_ones(tmp_path):
    path = tmp_path / "pages.parquet"
    pq.write_table(_pages(50), path, row_group_size=8)
    streamed = table_stream.SortedTableFile.open(TABLES["pages"], path, batch_rows=7)
    assert streamed.image_files() == image_file_paths(read_table(path))


def test_two_key_tables_and_lists_that_are_all_empty(tmp_path):
    path = tmp_path / "qrels.parquet"
    pq.write_table(_qrels(40), path, row_group_size=16)
    streamed, in_memory = _digests(path, "qrels", 5)
    assert streamed == in_memory


def test_files_not_in_strict_key_order_or_in_shards_are_hashed_from_memory(tmp_path):
    pages = _pages(20)
    pq.write_table(pages.take(list(reversed(range(20)))), tmp_path / "pages.parquet")
    assert table_stream.SortedTableFile.open(TABLES["pages"], tmp_path / "pages.parquet") is None
    qrels = _qrels(6)
    repeated = pa.concat_tables([qrels.slice(0, 1), qrels.slice(0, 5)])  # a key twice, in order
    pq.write_table(repeated, tmp_path / "qrels.parquet")
    assert table_stream.SortedTableFile.open(TABLES["qrels"], tmp_path / "qrels.parquet") is None
    (tmp_path / "documents").mkdir()
    assert table_stream.SortedTableFile.open(TABLES["documents"], tmp_path / "documents") is None


def test_a_boolean_column_with_nulls_is_hashed_from_memory(tmp_path):
    """(The in-memory stream hashes the value bits under nulls, which differ between reads.)"""
    pages = _pages(30).append_column("maybe", pa.array([None if i % 4 else i % 3 == 0 for i in range(30)]))
    pq.write_table(pages, tmp_path / "pages.parquet")
    assert table_stream.SortedTableFile.open(TABLES["pages"], tmp_path / "pages.parquet") is None
