"""Loading an unchanged benchmark again neither validates nor hashes (the load memo).

``load_benchmark`` records in the fingerprint memo (``$VLDOCIR_CACHE_DIR/fingerprints``) the
identity of the files a validation passed with; a later load with the same identity skips
validation, and any change to a table file, an image file or an image directory validates again.
Each test copies the small synthetic benchmark, stores its page images as files in one folder per
document, and dates every file and folder an hour back (recent files are never memoized).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vldocir.data import benchmark as benchmark_module
from vldocir.data import fingerprint
from vldocir.data.benchmark import BenchmarkError, load_benchmark
from vldocir.data.fingerprint import images
from vldocir.data.fingerprint.memo import Memo

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def backdate(root: Path, when_ns: int = HOUR_AGO_NS) -> None:
    """Date every file and folder under ``root`` (and ``root``) at ``when_ns``, deepest first."""
    for path in [*sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True), root]:
        if not path.is_symlink():
            os.utime(path, ns=(when_ns, when_ns))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VLDOCIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def bench_dir(small_bench_dir, tmp_path, cache_dir) -> Path:
    """The small benchmark, each page image a file ``pages/<doc_id>/<page_id>.png``, all aged."""
    root = tmp_path / "bench"
    shutil.copytree(small_bench_dir, root)
    pages = pq.read_table(root / "pages.parquet")
    rng = np.random.default_rng(0)
    images = []
    for page_id, doc_id in zip(pages.column("page_id").to_pylist(), pages.column("doc_id").to_pylist(), strict=True):
        relative = f"pages/{doc_id}/{page_id}.png"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(rng.bytes(300))
        images.append({"bytes": None, "path": relative})
    index = pages.schema.get_field_index("image")
    pq.write_table(
        pages.set_column(index, "image", pa.array(images, pages.schema.field("image").type)), root / "pages.parquet"
    )
    backdate(root)
    return root


@pytest.fixture
def work(monkeypatch) -> dict[str, int]:
    """How often validation runs, and how many tables and image files the fingerprint reads."""
    counts = {"validations": 0, "table_hashes": 0, "image_hashes": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(benchmark_module, "validate_tables", counting("validations", benchmark_module.validate_tables))
    monkeypatch.setattr(fingerprint, "_hash_tables", counting("table_hashes", fingerprint._hash_tables))
    monkeypatch.setattr(images, "_hash_file", counting("image_hashes", images._hash_file))
    return counts


def load_twice(root: Path, work: dict[str, int]):
    first = load_benchmark(root)
    for key in work:
        work[key] = 0
    return first, load_benchmark(root)


def an_image(root: Path) -> Path:
    return sorted((root / "pages").rglob("*.png"))[3]


def test_second_load_neither_validates_nor_hashes(bench_dir, work):
    first, second = load_twice(bench_dir, work)
    assert first.load_timings["validate_from_memo"] is False
    assert second.fingerprint == first.fingerprint == fingerprint.compute_fingerprint(bench_dir)
    assert work == {"validations": 0, "table_hashes": 0, "image_hashes": 0}
    timings = second.load_timings
    assert timings["validate_from_memo"] is True and timings["fingerprint_from_memo"] is True
    assert timings["validate_s"] >= 0 and timings["fingerprint_s"] >= 0


def test_touched_table_is_validated_again(bench_dir, work):
    first, _ = load_twice(bench_dir, work)
    later = HOUR_AGO_NS + 60 * 10**9
    os.utime(bench_dir / "queries.parquet", ns=(later, later))
    again = load_benchmark(bench_dir)
    assert work["validations"] == 1 and again.load_timings["validate_from_memo"] is False
    assert work["table_hashes"] == 1 and again.fingerprint == first.fingerprint  # same content


def test_table_made_invalid_is_rejected_every_time(bench_dir, work):
    load_twice(bench_dir, work)
    documents = pq.read_table(bench_dir / "documents.parquet")
    pq.write_table(documents.take(pa.array([0, 0, *range(1, documents.num_rows)])), bench_dir / "documents.parquet")
    backdate(bench_dir)  # an aged, invalid table: not even the racy rule stands between it and the memo
    for _ in range(2):
        with pytest.raises(BenchmarkError, match="duplicate id"):
            load_benchmark(bench_dir)
    assert work["validations"] == 2


def test_image_change_is_seen(bench_dir, work):
    first, _ = load_twice(bench_dir, work)
    image = an_image(bench_dir)
    image.write_bytes(bytes(b ^ 0xFF for b in image.read_bytes()))  # same size, same inode
    backdate(bench_dir, HOUR_AGO_NS + 60 * 10**9)
    again = load_benchmark(bench_dir)
    assert work["validations"] == 1 and again.fingerprint != first.fingerprint
    assert again.load_timings["fingerprint_from_memo"] is False


def test_image_moved_out_and_linked_back_is_rejected(bench_dir, tmp_path, work):
    """The image keeps its size, mtime and inode (the link is followed), but its folder changed:
    validation runs again and refuses a path that resolves outside the benchmark."""
    load_twice(bench_dir, work)
    image = an_image(bench_dir)
    outside = tmp_path / "elsewhere.png"
    os.rename(image, outside)
    image.symlink_to(outside)
    with pytest.raises(BenchmarkError, match="resolves outside the benchmark directory"):
        load_benchmark(bench_dir)
    assert work["validations"] == 1


def test_deleted_image_is_rejected(bench_dir, work):
    load_twice(bench_dir, work)
    an_image(bench_dir).unlink()
    with pytest.raises(BenchmarkError, match="does not exist"):
        load_benchmark(bench_dir)


def test_damaged_memo_means_validate_again(bench_dir, cache_dir, work, caplog):
    first, _ = load_twice(bench_dir, work)
    (memo,) = (cache_dir / "fingerprints").iterdir()
    memo.write_bytes(memo.read_bytes()[: memo.stat().st_size // 2])  # truncated
    again = load_benchmark(bench_dir)
    assert "unreadable" in caplog.text
    assert work["validations"] == 1 and again.fingerprint == first.fingerprint
    work["validations"] = 0
    assert load_benchmark(bench_dir).load_timings["validate_from_memo"] is True  # rebuilt
    assert work["validations"] == 0


def test_memo_vouching_for_other_files_is_not_trusted(bench_dir, cache_dir, work):
    """A readable memo whose validated identity is not today's (here: forged) validates again."""
    load_twice(bench_dir, work)
    (path,) = (cache_dir / "fingerprints").iterdir()
    real_root = Path(os.path.realpath(bench_dir))
    memo = Memo.load(path, real_root)
    memo.validated = "0" * 32
    memo.save(path, real_root)
    assert load_benchmark(bench_dir).load_timings["validate_from_memo"] is False
    assert work["validations"] == 1


def test_memo_without_its_validation_record_validates_again(bench_dir, cache_dir, work, caplog):
    """A memo whose header lacks ``validated`` (not even null) is unreadable: rebuilt, never trusted."""
    first, _ = load_twice(bench_dir, work)
    (path,) = (cache_dir / "fingerprints").iterdir()
    table = pq.read_table(path)
    header = json.loads(table.schema.metadata[b"vldocir.fingerprint"])
    del header["validated"]
    pq.write_table(table.replace_schema_metadata({"vldocir.fingerprint": json.dumps(header)}), path)
    again = load_benchmark(bench_dir)
    assert again.load_timings["validate_from_memo"] is False and work["validations"] == 1
    assert "unreadable (KeyError: 'validated')" in caplog.text and again.fingerprint == first.fingerprint
    work["validations"] = 0
    assert load_benchmark(bench_dir).load_timings["validate_from_memo"] is True and work["validations"] == 0


def test_invalid_benchmark_is_never_memoized(bench_dir, cache_dir, work):
    qrels = pq.read_table(bench_dir / "qrels.parquet")
    pq.write_table(qrels.slice(1), bench_dir / "qrels.parquet")  # the first query loses its evidence
    backdate(bench_dir)
    with pytest.raises(BenchmarkError):
        load_benchmark(bench_dir)
    memos = list((cache_dir / "fingerprints").glob("*.parquet")) if cache_dir.exists() else []
    assert all(Memo.load(m, Path(os.path.realpath(bench_dir))).validated is None for m in memos)
    with pytest.raises(BenchmarkError):
        load_benchmark(bench_dir)
    assert work["validations"] == 2


@pytest.mark.parametrize("fresh", ["table", "image"])
def test_recently_written_files_are_validated_again(bench_dir, work, fresh):
    """A file written within the racy window may change again without its mtime ticking."""
    if fresh == "table":
        pq.write_table(pq.read_table(bench_dir / "queries.parquet"), bench_dir / "queries.parquet")  # mtime: now
    else:
        image = an_image(bench_dir)
        image.write_bytes(image.read_bytes())
    _, again = load_twice(bench_dir, work)
    assert work["validations"] == 1 and again.load_timings["validate_from_memo"] is False


def test_memo_false_always_validates(bench_dir, work):
    load_twice(bench_dir, work)
    load_benchmark(bench_dir, memo=False)
    assert work["validations"] == 1


def test_other_rules_validate_again(bench_dir, work, monkeypatch):
    load_twice(bench_dir, work)
    monkeypatch.setattr(benchmark_module, "rules_digest", lambda: "edited rules")
    load_benchmark(bench_dir)
    assert work["validations"] == 1


def test_validate_false_leaves_the_fingerprint_for_later(bench_dir, work):
    bench = load_benchmark(bench_dir, validate=False)
    assert bench.load_timings == {} and work["table_hashes"] == 0
    assert bench.fingerprint == fingerprint.compute_fingerprint(bench_dir)
