"""The benchmark fingerprint sees page image bytes, yet a rerun costs one stat per file.

Each test copies the small synthetic benchmark, stores every page image as a small file under
``pages/``, and dates all files an hour back (files modified within the last two seconds are
"racy" and never memoized, see ``vldocir.data.fingerprint``). Memos go to a per-test
``VLDOCIR_CACHE_DIR``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vldocir.data import fingerprint
from vldocir.data.benchmark import compute_fingerprint, load_benchmark
from vldocir.data.fingerprint import images, memo
from vldocir.data.schema import TABLES

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def backdate(root: Path, when_ns: int = HOUR_AGO_NS) -> None:
    """Date every file under ``root`` at ``when_ns`` (so none is too recent to memoize)."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, ns=(when_ns, when_ns))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VLDOCIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def image_bench(small_bench_dir, tmp_path, cache_dir) -> Path:
    """The small benchmark with each page image in a file of 300-odd bytes."""
    root = tmp_path / "bench"
    shutil.copytree(small_bench_dir, root)
    pages = pq.read_table(root / "pages.parquet")
    (root / "pages").mkdir()
    rng = np.random.default_rng(0)
    images = []
    for page_id in pages.column("page_id").to_pylist():
        (root / "pages" / f"{page_id}.png").write_bytes(rng.bytes(300 + len(page_id)))
        images.append({"bytes": None, "path": f"pages/{page_id}.png"})
    index = pages.schema.get_field_index("image")
    pq.write_table(
        pages.set_column(index, "image", pa.array(images, pages.schema.field("image").type)), root / "pages.parquet"
    )
    backdate(root)
    load_benchmark(root)  # valid
    shutil.rmtree(cache_dir)  # each test starts without a memo
    return root


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """Every image file whose bytes the fingerprint reads (``images._hash_file`` is the only function that reads
    one)."""
    calls: list[str] = []
    real = images._hash_file

    def counting(path: str):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(images, "_hash_file", counting)
    return calls


def page_image(root: Path, n: int = 5) -> Path:
    return sorted((root / "pages").iterdir())[n]


def same_size_rewrite(path: Path) -> None:
    """New bytes of the same length, written in place (same inode)."""
    data = path.read_bytes()
    with open(path, "r+b") as file:
        file.write(bytes(b ^ 0xFF for b in data))


def test_same_size_image_change_changes_the_fingerprint(image_bench, hashed):
    before = compute_fingerprint(image_bench)
    image = page_image(image_bench)
    size = image.stat().st_size
    same_size_rewrite(image)
    assert image.stat().st_size == size
    after = compute_fingerprint(image_bench)
    assert after != before
    assert hashed.count(str(image)) == 2  # once per content


def test_touching_an_image_keeps_the_fingerprint(image_bench, hashed):
    before = compute_fingerprint(image_bench)
    image = page_image(image_bench)
    later = HOUR_AGO_NS + 60 * 10**9
    os.utime(image, ns=(later, later))
    hashed.clear()
    assert compute_fingerprint(image_bench) == before
    assert hashed == [str(image)]  # its mtime changed: read again, same digest


def test_rerun_reads_no_image_bytes(image_bench, hashed):
    n_pages = pq.read_metadata(image_bench / "pages.parquet").num_rows
    first = compute_fingerprint(image_bench)
    assert len(hashed) == n_pages
    hashed.clear()
    assert compute_fingerprint(image_bench) == first
    assert hashed == []


def test_rerun_trusts_the_stat_not_the_bytes(image_bench, cache_dir):
    """Bytes changed in place with size, mtime and inode restored: the memo is used, so the
    fingerprint cannot see it (as make and git cannot); forget the memo and it does. This could not
    pass if the rerun read the bytes."""
    first = compute_fingerprint(image_bench)
    image = page_image(image_bench)
    before = image.stat()
    same_size_rewrite(image)
    os.utime(image, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = image.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert compute_fingerprint(image_bench) == first
    shutil.rmtree(cache_dir)
    assert compute_fingerprint(image_bench) != first


def test_rerun_reads_no_table(image_bench, monkeypatch):
    first = compute_fingerprint(image_bench)
    reads: list = []
    real = fingerprint._hash_tables
    monkeypatch.setattr(fingerprint, "_hash_tables", lambda *a, **k: reads.append(a) or real(*a, **k))
    assert compute_fingerprint(image_bench) == first
    assert reads == []
    # A changed table is read again (its stat changed) and changes the fingerprint.
    queries = pq.read_table(image_bench / "queries.parquet")
    text = queries.column("text").to_pylist()
    text[0] += " (edited)"
    pq.write_table(
        queries.set_column(queries.schema.get_field_index("text"), "text", pa.array(text)),
        image_bench / "queries.parquet",
    )
    assert compute_fingerprint(image_bench) != first
    assert reads


def test_fingerprint_with_images_ignores_row_order_and_layout(image_bench, hashed):
    first = compute_fingerprint(image_bench)
    pages = pq.read_table(image_bench / "pages.parquet")
    shuffled = pages.take(pa.array(np.random.default_rng(1).permutation(pages.num_rows)))
    pq.write_table(shuffled, image_bench / "pages.parquet", row_group_size=10, compression="gzip")
    hashed.clear()
    assert compute_fingerprint(image_bench) == first
    assert hashed == []  # tables re-read, image digests found by path


def test_memo_lives_outside_the_benchmark(image_bench, cache_dir, tmp_path, monkeypatch):
    files_before = sorted(p.relative_to(image_bench) for p in image_bench.rglob("*"))
    compute_fingerprint(image_bench)
    assert sorted(p.relative_to(image_bench) for p in image_bench.rglob("*")) == files_before
    assert [p.parent for p in cache_dir.rglob("*.parquet")] == [cache_dir / "fingerprints"]
    monkeypatch.delenv("VLDOCIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert memo.memo_dir() == tmp_path / "xdg" / "vldocir" / "fingerprints"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert memo.memo_dir() == Path("~/.cache/vldocir/fingerprints").expanduser()


def test_corrupt_memo_is_ignored_and_rebuilt(image_bench, cache_dir, hashed, caplog):
    first = compute_fingerprint(image_bench)
    (memo,) = (cache_dir / "fingerprints").iterdir()
    memo.write_bytes(b"not parquet at all")
    hashed.clear()
    with caplog.at_level(logging.WARNING, logger="vldocir.data.fingerprint"):
        assert compute_fingerprint(image_bench) == first
    assert "unreadable" in caplog.text and str(memo) in caplog.text
    assert len(hashed) > 0
    pq.read_table(memo)  # rebuilt
    hashed.clear()
    assert compute_fingerprint(image_bench) == first
    assert hashed == []


def test_unwritable_cache_only_costs_time(image_bench, tmp_path, monkeypatch, caplog, hashed):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache directory cannot be created under a file")
    monkeypatch.setenv("VLDOCIR_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, logger="vldocir.data.fingerprint"):
        first = compute_fingerprint(image_bench)
        assert compute_fingerprint(image_bench) == first
    assert "cannot write the fingerprint memo" in caplog.text
    assert len(hashed) == 2 * pq.read_metadata(image_bench / "pages.parquet").num_rows


def test_recently_modified_files_are_not_memoized(image_bench, hashed):
    """A file modified within the racy window may change again without its mtime ticking."""
    compute_fingerprint(image_bench)
    image = page_image(image_bench)
    same_size_rewrite(image)  # mtime: now
    changed = compute_fingerprint(image_bench)
    hashed.clear()
    assert compute_fingerprint(image_bench) == changed
    assert hashed == [str(image)]


def test_missing_image_file_is_fingerprinted_without_validation(image_bench):
    first = compute_fingerprint(image_bench)
    page_image(image_bench).unlink()
    bench = load_benchmark(image_bench, validate=False)
    assert bench.fingerprint != first


def test_progress_bar_when_hashing_many_images(image_bench, monkeypatch, capsys):
    monkeypatch.setattr(images, "PROGRESS_MIN_FILES", 10)
    compute_fingerprint(image_bench)
    assert "fingerprint: hashing page images" in capsys.readouterr().err


def _fingerprint_by_definition(root: Path) -> str:
    """The fingerprint as defined, computed here from the files: blake2b-128 over each table (rows
    by key, columns by name, as one Arrow IPC stream, after its name); with page image files, the
    blake2b-128 of that digest and of each file's blake2b-128, in page order."""
    tables = hashlib.blake2b(digest_size=16)
    files: list[str] = []
    for name, spec in TABLES.items():
        table = fingerprint.read_table(root / f"{name}.parquet").sort_by([(k, "ascending") for k in spec.key])
        if name == "pages":
            files = [
                image["path"]
                for image in table.column("image").to_pylist()
                if image and image["path"] and not image["bytes"]
            ]
        table = table.select(sorted(table.column_names)).combine_chunks()
        tables.update(name.encode())
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1 << 20)
        tables.update(sink.getvalue())
    if not files:
        return tables.hexdigest()
    images = b"".join(hashlib.blake2b((root / path).read_bytes(), digest_size=16).digest() for path in files)
    return hashlib.blake2b(b"tables" + tables.digest() + b"images" + images, digest_size=16).hexdigest()


def test_benchmarks_without_image_files_are_fingerprinted_by_their_tables(small_bench_dir, subset_dir, cache_dir):
    """Text-only and inline-image benchmarks: the fingerprint is the tables' digest, memo or not."""
    for root in (small_bench_dir, subset_dir):
        assert compute_fingerprint(root) == _fingerprint_by_definition(root)
        assert compute_fingerprint(root) == _fingerprint_by_definition(root)  # from the memo


def test_benchmark_with_image_files_is_fingerprinted_by_tables_and_bytes(image_bench, hashed):
    expected = _fingerprint_by_definition(image_bench)
    assert compute_fingerprint(image_bench) == expected and hashed
    hashed.clear()
    assert compute_fingerprint(image_bench) == expected and hashed == []  # from the memo


def test_memo_of_another_version_is_rebuilt(image_bench, cache_dir, hashed, caplog):
    first = compute_fingerprint(image_bench)
    (path,) = (cache_dir / "fingerprints").iterdir()
    table = pq.read_table(path)
    header = json.loads(table.schema.metadata[b"vldocir.fingerprint"])
    pq.write_table(table.replace_schema_metadata({"vldocir.fingerprint": json.dumps({**header, "version": 1})}), path)
    hashed.clear()
    with caplog.at_level(logging.WARNING, logger="vldocir.data.fingerprint"):
        assert compute_fingerprint(image_bench) == first
    assert len(hashed) == pq.read_metadata(image_bench / "pages.parquet").num_rows and not caplog.text
