"""The page image files' part of the fingerprint: each file's blake2b-128 digest, taken from the memo
where the file's identity (its stat) is the memoized one, else read now on a few threads.

A rerun costs one ``stat`` per file (:func:`stat_paths`); the directories on the way to the files
(:func:`image_dirs`) are what a validation record also covers, since a file added, removed or
renamed changes its directory's mtime.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from vldocir.data.fingerprint.memo import DIGEST_SIZE, IDENTITY_FIELDS, RACY_WINDOW_NS, Memo, file_identity

PROGRESS_MIN_FILES = 1000
"""Show a progress bar when at least this many image files must be hashed."""

HASH_THREADS = 8
"""Image files are hashed by a few threads: hashlib and file reads release the GIL, and on network
filesystems the latency of many small reads dominates."""

MISSING = hashlib.blake2b(b"vldocir: image file missing or unreadable", digest_size=DIGEST_SIZE).digest()
"""The digest of an image file that cannot be read (possible only with ``validate=False``)."""


def image_file_paths(pages: pa.Table | pa.RecordBatch) -> list[str]:
    """Paths of the images read from files: those with a path and no inline bytes (as decoders and
    the viewer do, inline bytes win over the path)."""
    image = pages.column("image")
    if isinstance(image, pa.ChunkedArray):
        image = image.combine_chunks()
    bytes_, path = image.flatten()  # flatten applies struct nulls
    has_bytes = pc.fill_null(pc.greater(pc.binary_length(bytes_), 0), False)
    has_path = pc.fill_null(pc.greater(pc.utf8_length(path), 0), False)
    return path.filter(pc.and_(pc.invert(has_bytes), has_path)).to_pylist()


def stat_paths(real_root: Path, paths: list[str]) -> np.ndarray:
    """:data:`file_identity` per path (relative to the root), -1 where it cannot be stat'ed: the only
    per-file cost of a rerun, so kept to a comprehension around ``os.stat``. (n, 4) int64."""
    prefix = str(real_root) + os.sep
    stat, fields = os.stat, file_identity
    try:
        rows = [fields(stat(prefix + relative)) for relative in paths]
    except (OSError, ValueError):  # some file is missing (validate=False): one at a time
        rows = [_stat_or_missing(prefix + relative) for relative in paths]
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=len(paths) * len(IDENTITY_FIELDS))
    return flat.reshape(len(paths), len(IDENTITY_FIELDS))


def _stat_or_missing(path: str) -> tuple[int, int, int, int]:
    try:
        return file_identity(os.stat(path))
    except (OSError, ValueError):
        return -1, -1, -1, -1


def image_dirs(paths: list[str]) -> list[str]:
    """Every directory on the way to an image file, the root (``""``) included, sorted; none when
    there is no image file. A file added, removed, renamed or replaced by a link changes its
    directory's mtime."""
    dirs: set[str] = set()
    for head in {relative.rpartition("/")[0] for relative in paths}:
        while head not in dirs:
            dirs.add(head)
            if not head:
                break
            head = head.rpartition("/")[0]
    return sorted(dirs)


def image_digests(
    real_root: Path, paths: list[str], memo: Memo | None, stats: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per image file: its stat (``stats`` if already taken), its digest (from the memo where the
    stat matches, else hashed now) as an (n, 16) array, and whether the digest may be memoized;
    and how many files were hashed."""
    stats = stat_paths(real_root, paths) if stats is None else stats.copy()
    digests = np.zeros((len(paths), DIGEST_SIZE), dtype=np.uint8)
    memoizable = np.zeros(len(paths), dtype=bool)
    if memo is not None and len(memo.paths):
        hits, rows = _memo_matches(paths, stats, memo)
        digests[hits] = memo.digests[rows]
        memoizable[hits] = True
    todo = np.flatnonzero(~memoizable)
    if len(todo):
        started = time.time_ns()
        for i, (digest, st) in zip(todo.tolist(), _hash_files(real_root, [paths[i] for i in todo]), strict=True):
            digests[i] = np.frombuffer(digest, dtype=np.uint8)
            # Missing, or modified too recently to trust its mtime: hash it again next time.
            if st is not None and st[1] <= started - RACY_WINDOW_NS:
                memoizable[i] = True
                stats[i] = st  # the identity of the bytes actually read (fstat of the open file)
    return stats, digests, memoizable, len(todo)


def _memo_matches(paths: list[str], stats: np.ndarray, memo: Memo) -> tuple[np.ndarray, np.ndarray]:
    """Indices (in ``paths``, in the memo) of files whose memoized stat equals today's."""
    if memo.paths == paths:
        aligned = np.arange(len(paths))
    else:  # the tables changed: look files up by path
        where = {p: j for j, p in enumerate(memo.paths)}
        aligned = np.array([where.get(p, -1) for p in paths], dtype=np.int64)
    known = np.flatnonzero(aligned >= 0)
    rows = aligned[known]
    same = (memo.stats[rows] == stats[known]).all(axis=1) & memo.memoizable[rows] & (stats[known, 0] >= 0)
    return known[same], rows[same]


def _hash_file(path: str) -> tuple[bytes, tuple[int, int, int, int]]:
    """blake2b-128 of a file's bytes, and the (size, mtime_ns, inode, device) of what was read."""
    digest = hashlib.blake2b(digest_size=DIGEST_SIZE)
    with open(path, "rb", buffering=0) as file:
        st = os.fstat(file.fileno())
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.digest(), file_identity(st)


def _hash_batch(prefix: str, paths: list[str]) -> list[tuple[bytes, tuple | None]]:
    out = []
    for relative in paths:
        try:
            out.append(_hash_file(prefix + relative))
        except (OSError, ValueError):
            out.append((MISSING, None))
    return out


def _hash_files(real_root: Path, paths: list[str]) -> list[tuple[bytes, tuple | None]]:
    """Hash files in batches on a few threads, with a progress bar when there are many."""
    prefix = str(real_root) + os.sep
    batch = 256
    batches = [paths[i : i + batch] for i in range(0, len(paths), batch)]
    results: list[tuple[bytes, tuple | None]] = []
    with (
        ThreadPoolExecutor(max_workers=HASH_THREADS) as pool,
        tqdm(
            total=len(paths),
            desc="fingerprint: hashing page images",
            unit="file",
            disable=len(paths) < PROGRESS_MIN_FILES,
        ) as progress,
    ):
        for done in pool.map(lambda part: _hash_batch(prefix, part), batches):
            results.extend(done)
            progress.update(len(done))
    return results
