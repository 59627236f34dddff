"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the file the permissions a plain open() would (0666 less umask).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_parquet(table: pa.Table, target: str | Path, **kwargs: Any) -> None:
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp, **kwargs)


def atomic_write_json(obj: Any, target: str | Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def atomic_write_text(text: str, target: str | Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def file_digest(path: str | Path, algorithm: str = "sha256", chunk_bytes: int = 8 << 20) -> str:
    """Hex digest of a file's bytes, streamed in ``chunk_bytes`` pieces (never whole in memory).

    hashlib releases the GIL while hashing large buffers, so digests computed in a worker thread
    overlap with other work (e.g. the search over the previous shard).
    """
    import hashlib

    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()
