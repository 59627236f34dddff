"""Atomic file writes: a reader sees the old file or the new one, never half of one.

A write that fails without naming its file (a full disk: ``OSError(28, 'No space left on device')``
from a flush, numpy's ``60053 requested and 2016 written``) is re-raised as :class:`WriteError`,
which names the file and the free space on its filesystem (:func:`naming_path`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.errors import VldocirError

SPACE_ERRORS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file too large"}
"""The write errors that a size or space limit causes, and how a message says each."""
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")
"""numpy's report of a write the kernel cut short (``ndarray.tofile``, ``np.save``): no errno, no file."""


def free_space(path: str | Path) -> str:
    """``'2.0 MB free on /x'``: the space left to unprivileged writers on the filesystem holding
    ``path`` (its nearest existing ancestor), and that filesystem's mount point."""
    probe = Path(os.path.abspath(path))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return f"free space on {probe} unknown"
    mount = probe
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return f"{_size(free)} free on {mount}"


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def describe_os_error(error: OSError) -> str:
    """One line for an ``OSError``: what failed and the path; for a size or space limit, the free
    space of that path's filesystem too."""
    if isinstance(error, WriteError):
        return str(error)
    detail = " ".join(str(error.strerror or error).split())
    if error.filename is None:
        return detail
    if error.errno in SPACE_ERRORS:  # a copy (shutil) names its source, then the file it writes
        written = error.filename2 if error.filename2 is not None else error.filename
        return f"{SPACE_ERRORS[error.errno]} writing {written} ({free_space(written)})"
    where = f"{error.filename}" + (f" -> {error.filename2}" if error.filename2 is not None else "")
    return f"{detail}: {where}"


class WriteError(VldocirError, OSError):
    """A write of ``filename`` that failed, e.g. on a full disk; ``errno`` is the original's (None
    for a short write that reported none). Still an ``OSError``: callers that catch those keep
    working."""

    def __init__(self, path: str | Path, code: int | None, detail: str):
        super().__init__(code, detail, str(path))
        if code in SPACE_ERRORS:
            self.message = f"{SPACE_ERRORS[code]} writing {path} ({free_space(path)})"
        else:  # a short write reports no errno: it is almost always the disk or a size limit, say the space
            self.message = f"cannot write {path}: {detail} ({free_space(path)})"

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # raised in a worker process, re-raised in the parent (pickled)
        return type(self), (self.filename, self.errno, self.strerror)


@contextmanager
def naming_path(path: str | Path) -> Iterator[None]:
    """Re-raise a failed write of the block that names no file (a full disk, a quota, a size limit,
    a short write) as a :class:`WriteError` naming ``path`` (the file or staging directory the block
    writes). Any other ``OSError`` passes unchanged: one naming its file, a network error, ..."""
    try:
        yield
    except WriteError:
        raise
    except OSError as error:
        detail = " ".join(str(error.strerror or error).split())
        if error.filename is not None or not (error.errno in SPACE_ERRORS or SHORT_WRITE.search(detail)):
            raise
        raise WriteError(path, error.errno, detail) from error


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
        with naming_path(target):
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


class JsonlLineError(VldocirError, ValueError):
    """A line of a JSON Lines file that is not a JSON object: ``line`` (from 1) and ``reason``."""

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


def jsonl_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` of each non-blank line of a JSON Lines file (numbered from 1).

    A line that is not JSON, or not a JSON object, raises :class:`JsonlLineError`; callers add the
    file and their own error type."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise JsonlLineError(number, f"not JSON ({error})") from error
            if not isinstance(record, dict):
                raise JsonlLineError(number, "not a JSON object")
            yield number, record
