"""The fingerprint memo: what the fingerprint and a passed validation remember of a benchmark's files.

One Parquet file per benchmark directory (:func:`memo_path`), outside the benchmark: the tables'
digest keyed by the table files' identities, each image file's digest keyed by its identity
(:data:`file_identity`), and the identity of the files a validation passed with. A file modified
within :data:`RACY_WINDOW_NS` of being hashed is not memoized. A memo that cannot be read is only
rebuilt (:meth:`Memo.load`); one that cannot be written only costs the next run time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.io import atomic_write_parquet

log = logging.getLogger(__name__)

MEMO_VERSION = 2
"""Bumped whenever what a memo holds, or how a digest is computed, changes."""

RACY_WINDOW_NS = 2_000_000_000
"""Files modified less than this before being hashed are not memoized (coarse-mtime filesystems)."""

DIGEST_SIZE = 16
"""blake2b-128 per file: collisions are out of reach, and the memo stays small (16 bytes a file)."""

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


@dataclass(eq=False)
class Memo:
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
    """The identity (:meth:`vldocir.data.fingerprint.BenchmarkFiles._identity`) of files that passed
    validation, if any."""

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Memo)
            and self.table_stats == other.table_stats
            and self.tables_digest == other.tables_digest
            and self.paths == other.paths
            and np.array_equal(self.stats, other.stats)
            and np.array_equal(self.digests[self.memoizable], other.digests[other.memoizable])
            and np.array_equal(self.memoizable, other.memoizable)
            and self.validated == other.validated
        )

    @classmethod
    def load(cls, path: Path, real_root: Path) -> Memo | None:
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
