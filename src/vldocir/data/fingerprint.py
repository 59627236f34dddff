"""The benchmark fingerprint: a content hash of the five tables and of the page image files.

Every cache key downstream starts from it, so it must change whenever anything a retriever sees
changes, an image file's bytes included, and it must stay cheap to recompute at paper scale
(388,548 image files). Both parts are therefore memoized outside the benchmark directory (which may
be read-only), in ``$VLDOCIR_CACHE_DIR/fingerprints/`` or else
``${XDG_CACHE_HOME:-~/.cache}/vldocir/fingerprints/``, one Parquet file per benchmark directory:

- the tables' digest, keyed by the table files' (path, size, mtime_ns, inode, device);
- each image file's digest, keyed by its (path, size, mtime_ns, inode, device).

The first fingerprint reads every image byte once; a rerun costs one ``stat`` per file. Like make
and git, this trusts file metadata: a file rewritten with the same size and mtime in the same inode
is not seen. Files modified within :data:`RACY_WINDOW_NS` of being hashed are not memoized (their
mtime may not have ticked yet; git calls them "racily clean"), so they are hashed again next time.
A missing or unreadable memo only costs time (it is rebuilt); it never changes the fingerprint.

The memo also remembers that validation passed (:func:`vldocir.data.benchmark.load_benchmark`), so
that loading an unchanged benchmark again neither validates nor hashes: :class:`BenchmarkFiles`
records the *identity* of everything validation looked at (the table files, the image files and
the directories holding them, each by :data:`file_identity`, plus the rules' own digest) once
validation has passed, and reports a later load whose identity is the same. Any change to a table,
an image file or an image directory (a file added, removed, renamed or replaced by a link changes
its directory's mtime) means "validate again". A memo never turns an invalid benchmark into a valid
one: it is written only after validation passed, and not at all while any of those files is racily
recent (it may have changed during validation).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from vldocir.data.schema import TABLES
from vldocir.data.tables import read_table, sort_canonically, table_files, table_location
from vldocir.io import atomic_write_parquet

log = logging.getLogger(__name__)

MEMO_VERSION = 2
"""Bumped whenever what a memo holds, or how a digest is computed, changes."""

RACY_WINDOW_NS = 2_000_000_000
"""Files modified less than this before being hashed are not memoized (coarse-mtime filesystems)."""

PROGRESS_MIN_FILES = 1000
"""Show a progress bar when at least this many image files must be hashed."""

HASH_THREADS = 8
"""Image files are hashed by a few threads: hashlib and file reads release the GIL, and on network
filesystems the latency of many small reads dominates."""

DIGEST_SIZE = 16
"""blake2b-128 per file: collisions are out of reach, and the memo stays small (16 bytes a file)."""

MISSING = hashlib.blake2b(b"vldocir: image file missing or unreadable", digest_size=DIGEST_SIZE).digest()
"""The digest of an image file that cannot be read (possible only with ``validate=False``)."""

IDENTITY_FIELDS = ("size", "mtime_ns", "ino", "dev")
file_identity = attrgetter("st_size", "st_mtime_ns", "st_ino", "st_dev")
"""The one rule by which the memo recognises an unchanged file (table, image or directory): these
fields of its ``os.stat`` (links followed). ``IDENTITY_FIELDS`` names them, in the memo's columns."""


def memo_dir() -> Path:
    """Where fingerprint memos live: outside the benchmark, which may be read-only or shared."""
    cache = os.environ.get("VLDOCIR_CACHE_DIR")
    if cache:
        return Path(cache).expanduser() / "fingerprints"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg).expanduser() / "vldocir" / "fingerprints"


def memo_path(real_root: Path) -> Path:
    """One memo per benchmark directory, named by a hash of its resolved path."""
    return memo_dir() / f"{hashlib.blake2b(str(real_root).encode(), digest_size=16).hexdigest()}.parquet"


def compute_fingerprint(root: str | Path) -> str:
    """Hash of the five tables' contents (canonical row order and column types, all columns) and of
    the bytes of every page image stored as a file (a page whose image is inline is covered by the
    pages table itself).

    Independent of how the tables were written (row order, row groups, compression, int widths). A
    benchmark without image files has the tables' digest for its fingerprint.
    """
    return BenchmarkFiles(root).fingerprint()


class BenchmarkFiles:
    """One look at a benchmark directory's files through its memo (see the module docstring).

    Made before validation: it loads the memo and stats the table files. :meth:`validated` says
    whether the memo vouches that these very files passed validation; :meth:`fingerprint` computes
    the fingerprint, reading only what changed since the memo was written, and updates the memo,
    recording a validation that has just passed.
    """

    def __init__(self, root: str | Path):
        self.real_root = Path(os.path.realpath(root))
        self.memo = _Memo.load(memo_path(self.real_root), self.real_root)
        self.table_stats = _stat_tables(self.real_root)
        self.tables_known = self.memo is not None and self.memo.table_stats == self.table_stats
        """Whether the memo's tables digest (and the image paths the tables list) are today's."""
        self.from_memo: bool | None = None
        """After :meth:`fingerprint`: True when no table and no image byte had to be read."""
        self._image_stats: np.ndarray | None = None  # taken by validated(), reused by fingerprint()

    def validated(self, rules: str) -> bool:
        """Whether the memo records that validation under ``rules`` (a digest of the validation
        code) passed with exactly these table files, image files and image directories."""
        memo = self.memo
        if not self.tables_known or memo.validated is None:
            return False
        self._image_stats = _stat_paths(self.real_root, memo.paths)
        return memo.validated == self._identity(rules, memo.paths, self._image_stats)

    def fingerprint(self, passed: tuple[str, int] | None = None) -> str:
        """The fingerprint (:func:`compute_fingerprint`). ``passed=(rules, started_ns)``: validation
        under ``rules``, started at ``started_ns`` (``time.time_ns()``), has just passed; the memo
        records it unless a file it covers was modified since (or just before) it started."""
        memo = self.memo
        if self.tables_known:
            tables_digest, paths = memo.tables_digest, memo.paths
        else:
            tables_digest, paths = _hash_tables(self.real_root)
        known_stats = self._image_stats if self.tables_known else None
        stats, digests, memoizable, n_hashed = _image_digests(self.real_root, paths, memo, known_stats)
        self.from_memo = self.tables_known and n_hashed == 0
        racy_tables = any(mtime_ns > time.time_ns() - RACY_WINDOW_NS for _, _, mtime_ns, _, _ in self.table_stats)
        validated = memo.validated if memo is not None else None  # (harmless if stale: it names exact files)
        if passed is not None:
            rules, started_ns = passed
            validated = self._identity(rules, paths, stats, not_after_ns=started_ns - RACY_WINDOW_NS) or validated
        updated = _Memo(
            None if racy_tables else self.table_stats, tables_digest, paths, stats, digests, memoizable, validated
        )
        if memo != updated:
            updated.save(memo_path(self.real_root), self.real_root)
        if not paths:
            return tables_digest
        return hashlib.blake2b(
            b"tables" + bytes.fromhex(tables_digest) + b"images" + digests.tobytes(), digest_size=16
        ).hexdigest()

    def _identity(
        self, rules: str, paths: list[str], image_stats: np.ndarray, not_after_ns: int | None = None
    ) -> str | None:
        """A digest of ``rules`` and of the identity of the table files, the image files
        (``image_stats``, in ``paths`` order) and every directory on the way to an image file.
        With ``not_after_ns``: None when any of them was modified after it, or is missing."""
        dirs = _image_dirs(paths)
        dir_stats = _stat_paths(self.real_root, dirs)
        if not_after_ns is not None:
            mtimes = chain((s[2] for s in self.table_stats), image_stats[:, 1].tolist(), dir_stats[:, 1].tolist())
            missing = (image_stats[:, 0] < 0).any() or (dir_stats[:, 0] < 0).any()
            if missing or any(mtime_ns > not_after_ns for mtime_ns in mtimes):
                return None
        digest = hashlib.blake2b(json.dumps([rules, self.table_stats]).encode(), digest_size=16)
        digest.update(np.ascontiguousarray(image_stats, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(dir_stats, dtype=np.int64).tobytes())
        return digest.hexdigest()


# ----------------------------------------------------------------------------------------------
# The tables
# ----------------------------------------------------------------------------------------------


def _stat_tables(real_root: Path) -> list[tuple]:
    """(relative path, size, mtime_ns, inode, device) of every table file, in a fixed order."""
    stats = []
    for name in TABLES:
        for file in table_files(table_location(real_root, name)):
            st = file.stat()
            stats.append((str(file.relative_to(real_root)), *file_identity(st)))
    return stats


def _hash_tables(real_root: Path) -> tuple[str, list[str]]:
    """The five tables' digest, and the image files the pages reference, in canonical page order."""
    digest = hashlib.blake2b(digest_size=16)
    paths: list[str] = []
    for name, spec in TABLES.items():
        table = sort_canonically(spec, read_table(table_location(real_root, name)))
        if name == "pages":
            paths = _image_files(table)
        table = table.select(sorted(table.column_names)).combine_chunks()
        digest.update(name.encode())
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1 << 20)
        digest.update(sink.getvalue())
    return digest.hexdigest(), paths


def _image_files(pages: pa.Table) -> list[str]:
    """Paths of the images read from files: those with a path and no inline bytes (as decoders and
    the viewer do, inline bytes win over the path)."""
    bytes_, path = pages.column("image").combine_chunks().flatten()  # flatten applies struct nulls
    has_bytes = pc.fill_null(pc.greater(pc.binary_length(bytes_), 0), False)
    has_path = pc.fill_null(pc.greater(pc.utf8_length(path), 0), False)
    return path.filter(pc.and_(pc.invert(has_bytes), has_path)).to_pylist()


# ----------------------------------------------------------------------------------------------
# The image files
# ----------------------------------------------------------------------------------------------


def _stat_paths(real_root: Path, paths: list[str]) -> np.ndarray:
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


def _image_dirs(paths: list[str]) -> list[str]:
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


def _image_digests(
    real_root: Path, paths: list[str], memo: "_Memo | None", stats: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per image file: its stat (``stats`` if already taken), its digest (from the memo where the
    stat matches, else hashed now) as an (n, 16) array, and whether the digest may be memoized;
    and how many files were hashed."""
    stats = _stat_paths(real_root, paths) if stats is None else stats.copy()
    digests = np.zeros((len(paths), DIGEST_SIZE), dtype=np.uint8)
    memoizable = np.zeros(len(paths), dtype=bool)
    if memo is not None and len(memo.paths):
        hits, rows = _memo_matches(paths, stats, memo)
        digests[hits] = memo.digests[rows]
        memoizable[hits] = True
    todo = np.flatnonzero(~memoizable)
    if len(todo):
        started = time.time_ns()
        for i, (digest, st) in zip(todo.tolist(), _hash_files(real_root, [paths[i] for i in todo])):
            digests[i] = np.frombuffer(digest, dtype=np.uint8)
            # Missing, or modified too recently to trust its mtime: hash it again next time.
            if st is not None and st[1] <= started - RACY_WINDOW_NS:
                memoizable[i] = True
                stats[i] = st  # the identity of the bytes actually read (fstat of the open file)
    return stats, digests, memoizable, len(todo)


def _memo_matches(paths: list[str], stats: np.ndarray, memo: "_Memo") -> tuple[np.ndarray, np.ndarray]:
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


# ----------------------------------------------------------------------------------------------
# The memo
# ----------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Memo:
    """What one benchmark directory's memo file holds."""

    table_stats: list[tuple] | None
    """The table files' stats when ``tables_digest`` was computed; None: never trust it."""
    tables_digest: str
    paths: list[str]
    """Image files in canonical page order (what the tables reference)."""
    stats: np.ndarray
    """(size, mtime_ns, inode, device) per path."""
    digests: np.ndarray
    """(n, 16) uint8: each file's blake2b-128."""
    memoizable: np.ndarray
    """Per path: may the digest be reused (False: missing, or modified too recently)?"""
    validated: str | None = None
    """The identity (:meth:`BenchmarkFiles._identity`) of files that passed validation, if any."""

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, _Memo)
            and self.table_stats == other.table_stats
            and self.tables_digest == other.tables_digest
            and self.paths == other.paths
            and np.array_equal(self.stats, other.stats)
            and np.array_equal(self.digests[self.memoizable], other.digests[other.memoizable])
            and np.array_equal(self.memoizable, other.memoizable)
            and self.validated == other.validated
        )

    @classmethod
    def load(cls, path: Path, real_root: Path) -> "_Memo | None":
        """The memo, or None when there is none or it cannot be used (then it is rebuilt)."""
        if not path.is_file():
            return None
        try:
            table = pq.read_table(path)
            header = json.loads(table.schema.metadata[b"vldocir.fingerprint"])
            if header["version"] != MEMO_VERSION or header["root"] != str(real_root):
                return None  # another format, or (improbably) another directory's hash
            table_stats = None if header["table_stats"] is None else [tuple(s) for s in header["table_stats"]]
            n = table.num_rows
            stats = (
                np.stack([table.column(f).to_numpy().astype(np.int64) for f in IDENTITY_FIELDS], axis=1)
                if n
                else np.zeros((0, len(IDENTITY_FIELDS)), np.int64)
            )
            digest = table.column("digest").combine_chunks()
            if digest.type != pa.binary(DIGEST_SIZE):
                raise ValueError(f"digest column of type {digest.type}")
            memoizable = digest.is_valid().to_numpy(zero_copy_only=False)
            digests = np.frombuffer(pc.fill_null(digest, bytes(DIGEST_SIZE)).buffers()[1], dtype=np.uint8)
            digests = digests[: n * DIGEST_SIZE].reshape(n, DIGEST_SIZE)
            validated = header["validated"]
            if validated is not None and not isinstance(validated, str):
                raise ValueError(f"validated is {type(validated).__name__}")
            return cls(
                table_stats,
                str(header["tables_digest"]),
                table.column("path").to_pylist(),
                stats,
                digests,
                memoizable,
                validated,
            )
        except Exception as error:  # a memo is only a shortcut: any damage means "rebuild it"
            log.warning("fingerprint memo %s is unreadable (%s: %s); rebuilding it", path, type(error).__name__, error)
            return None

    def save(self, path: Path, real_root: Path) -> None:
        """Write atomically; a cache directory that cannot be written only costs the next run time."""
        header = {
            "version": MEMO_VERSION,
            "root": str(real_root),
            "table_stats": self.table_stats,
            "tables_digest": self.tables_digest,
            "validated": self.validated,
        }
        columns = {"path": pa.array(self.paths, pa.string())}
        for k, name in enumerate(IDENTITY_FIELDS):
            columns[name] = pa.array(self.stats[:, k], pa.int64())
        values = pa.py_buffer(np.ascontiguousarray(self.digests).tobytes())
        validity = pa.array(self.memoizable).buffers()[1] if not self.memoizable.all() else None
        columns["digest"] = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(DIGEST_SIZE), len(self.paths), [validity, values]
        )
        table = pa.table(columns).replace_schema_metadata({"vldocir.fingerprint": json.dumps(header)})
        try:
            atomic_write_parquet(table, path)
        except OSError as error:
            log.warning("cannot write the fingerprint memo %s (%s); the next fingerprint will hash again", path, error)
