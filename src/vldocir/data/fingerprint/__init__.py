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

By job: this module computes the fingerprint and records validations (:class:`BenchmarkFiles`);
:mod:`~vldocir.data.fingerprint.table_stream` hashes a table (as a stream where its file allows),
:mod:`~vldocir.data.fingerprint.images` the image files, and :mod:`~vldocir.data.fingerprint.memo`
reads and writes the memo.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from itertools import chain
from pathlib import Path

import numpy as np

from vldocir.data.fingerprint.images import image_digests, image_dirs, image_file_paths, stat_paths
from vldocir.data.fingerprint.memo import RACY_WINDOW_NS, Memo, file_identity, memo_path
from vldocir.data.fingerprint.table_stream import READ_ERRORS, SortedTableFile, ipc_stream
from vldocir.data.schema import TABLES
from vldocir.data.tables import read_table, sort_canonically, table_files, table_location


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
        self.memo = Memo.load(memo_path(self.real_root), self.real_root)
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
        self._image_stats = stat_paths(self.real_root, memo.paths)
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
        stats, digests, memoizable, n_hashed = image_digests(self.real_root, paths, memo, known_stats)
        self.from_memo = self.tables_known and n_hashed == 0
        racy_tables = any(mtime_ns > time.time_ns() - RACY_WINDOW_NS for _, _, mtime_ns, _, _ in self.table_stats)
        validated = memo.validated if memo is not None else None  # (harmless if stale: it names exact files)
        if passed is not None:
            rules, started_ns = passed
            validated = self._identity(rules, paths, stats, not_after_ns=started_ns - RACY_WINDOW_NS) or validated
        updated = Memo(
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
        dirs = image_dirs(paths)
        dir_stats = stat_paths(self.real_root, dirs)
        if not_after_ns is not None:
            mtimes = chain((s[2] for s in self.table_stats), image_stats[:, 1].tolist(), dir_stats[:, 1].tolist())
            missing = (image_stats[:, 0] < 0).any() or (dir_stats[:, 0] < 0).any()
            if missing or any(mtime_ns > not_after_ns for mtime_ns in mtimes):
                return None
        digest = hashlib.blake2b(json.dumps([rules, self.table_stats]).encode(), digest_size=16)
        digest.update(np.ascontiguousarray(image_stats, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(dir_stats, dtype=np.int64).tobytes())
        return digest.hexdigest()


# -- the tables ----------------------------------------------------------------------------------


def _stat_tables(real_root: Path) -> list[tuple]:
    """(relative path, size, mtime_ns, inode, device) of every table file, in a fixed order."""
    stats = []
    for name in TABLES:
        for file in table_files(table_location(real_root, name)):
            st = file.stat()
            stats.append((str(file.relative_to(real_root)), *file_identity(st)))
    return stats


def _hash_tables(real_root: Path) -> tuple[str, list[str]]:
    """The five tables' digest, and the image files the pages reference, in canonical page order.

    Each table is hashed as the Arrow IPC stream of its canonical form (:func:`ipc_stream`). A
    table file already in canonical row order, as :func:`~vldocir.data.benchmark.write_benchmark`
    writes them, is hashed as a stream (:class:`SortedTableFile`: the same bytes, never the whole
    table in memory); any other table is read whole and sorted."""
    digest = hashlib.blake2b(digest_size=16)
    paths: list[str] = []
    for name, spec in TABLES.items():
        location = table_location(real_root, name)
        digest.update(name.encode())
        streamed = SortedTableFile.open(spec, location)
        if streamed is not None:
            attempt = digest.copy()
            try:
                streamed.hash_stream(attempt)
                if name == "pages":
                    paths = streamed.image_files()
                digest = attempt
                continue
            except READ_ERRORS:  # damaged, or a value its canonical type cannot hold: read_table names it
                pass
        table = sort_canonically(spec, read_table(location))
        if name == "pages":
            paths = image_file_paths(table)
        digest.update(ipc_stream(table))
    return digest.hexdigest(), paths
