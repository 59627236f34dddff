"""Content-keyed artifact cache with a stated policy (DESIGN.md §1, STYLE.md #8).

An artifact (an index, a set of embedding shards, ...) lives in ``<root>/<kind>/<key>/``, where the
key hashes everything that determines it. A finished artifact holds ``artifact.json`` (what went
into the key); a directory without it is partial and never read as finished.

Policies:
- ``reuse``: use a finished artifact; rebuild a partial one from scratch.
- ``resume``: like ``reuse``, but a stage that builds in parts (encoding shards) keeps the parts
  already written and continues.
- ``overwrite``: rebuild everything this job touches.

Under ``reuse`` and ``resume`` a finished artifact that fails its integrity check (``verify``
given to :meth:`ArtifactCache.lookup`) is reported by path and rebuilt.

Staging directories. Every artifact (and every embedding shard) is written into a hidden staging
directory beside its final place, ``.<name>.staging-<host>-<pid>-<ns>``, and renamed into place.
A writer killed with SIGKILL (or a preempted SLURM job) leaves its staging directory behind;
:func:`remove_stale_staging` deletes those whose writer is known to be dead: on this host, a pid
that no longer exists; from any host (a shared filesystem), anything untouched for 24 hours.
An artifact that takes hours to build in parts (document-context vectors) stages instead in
``.<key>.partial/``, which is kept when its writer dies so that the next build continues it
(:meth:`ArtifactCache.build_in_parts`); ``make clean`` or deleting it by hand discards it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from vldocir.errors import VldocirError
from vldocir.io import atomic_write_json, naming_path

log = logging.getLogger(__name__)

POLICIES = ("reuse", "resume", "overwrite")
DONE_FILE = "artifact.json"
STAGING_MAX_AGE_S = 24 * 3600
"""A staging directory untouched this long is debris whatever host wrote it (no single write of
an artifact or a shard takes that long: encoding happens before the staging directory exists)."""


class CorruptArtifactError(VldocirError, RuntimeError):
    """A stored artifact (or one shard of it) is damaged: ``path`` names it, ``reason`` says how."""

    def __init__(self, path: Path | str, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self):  # raised in a worker process, re-raised in the parent (pickled)
        return type(self), (self.path, self.reason)


def content_key(parts: Any) -> str:
    """A stable 16-hex-digit hash of a JSON-serialisable description."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


# -- staging directories ---------------------------------------------------------------------------
def _host() -> str:
    # '-' separates the fields of a staging name; host names may contain it, so it is parsed from
    # the right (pid and ns never contain it). Other odd characters become '_'.
    return re.sub(r"[^A-Za-z0-9.\-]", "_", socket.gethostname()) or "unknown"


def staging_path(final: Path) -> Path:
    """A fresh staging directory name beside ``final``: ``.<name>.staging-<host>-<pid>-<ns>``."""
    return final.with_name(f".{final.name}.staging-{_host()}-{os.getpid()}-{time.time_ns()}")


def _writer_of(staging: Path) -> tuple[str, int] | None:
    """(host, pid) from a staging name; ``None`` for names of older schemes that lack the host."""
    suffix = staging.name.rpartition(".staging-")[2]
    parts = suffix.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or not parts[0]:
        return None
    return parts[0], int(parts[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _last_touched(path: Path) -> float:
    """Latest mtime of the directory and its entries (a file being written updates its own mtime)."""
    times = [path.stat().st_mtime]
    for child in path.iterdir():
        try:
            times.append(child.stat().st_mtime)
        except FileNotFoundError:
            pass
    return max(times)


def remove_stale_staging(parent: Path, max_age_s: float = STAGING_MAX_AGE_S) -> list[Path]:
    """Delete the staging directories in ``parent`` whose writer is dead; returns those removed.

    Dead means: written on this host by a pid that no longer exists, or (any host, any naming
    scheme) untouched for ``max_age_s``. A live writer's directory is never touched; only hidden
    ``*.staging-*`` directories are considered.
    """
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    host, now = _host(), time.time()
    for path in parent.iterdir():
        if not (path.name.startswith(".") and ".staging-" in path.name and path.is_dir()):
            continue
        writer = _writer_of(path)
        try:
            dead = (writer is not None and writer[0] == host and not _pid_alive(writer[1])) or now - _last_touched(
                path
            ) > max_age_s
        except FileNotFoundError:  # its writer finished (renamed it) or another cleaner got it
            continue
        if dead:
            log.info("removing stale staging directory %s (its writer is gone)", path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@dataclass
class ArtifactCache:
    root: Path
    policy: str = "resume"
    events: list[dict] = field(default_factory=list)
    """Every lookup this job made: kind, key, ``hit`` / ``miss`` / ``overwrite`` / ``corrupt``; goes to the manifest."""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"cache_policy must be one of {POLICIES}, got {self.policy!r}")
        self.root = Path(self.root)

    def key_for(self, kind: str, **parts: Any) -> str:
        return content_key({"kind": kind, **parts})

    def directory(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def record(self, kind: str, key: str, status: str) -> None:
        self.events.append({"kind": kind, "key": key, "status": status})

    def lookup(self, kind: str, key: str, verify: Callable[[Path], Any] | None = None) -> Path | None:
        """The finished artifact's directory if the policy allows using it, else ``None``.

        ``verify(path)`` raises :class:`CorruptArtifactError` for a damaged artifact: it is then
        reported (a warning naming the path and the damage) and treated as missing, so that the
        caller rebuilds it (:meth:`build` replaces it).
        """
        path = self.directory(kind, key)
        if (path / DONE_FILE).is_file() and self.policy != "overwrite":
            try:
                if verify is not None:
                    verify(path)
            except CorruptArtifactError as error:
                log.warning("cached %s artifact is damaged, rebuilding it: %s", kind, error)
                self.record(kind, key, "corrupt")
                # Unfinished from now on: the rebuild replaces it (build keeps finished ones).
                (path / DONE_FILE).unlink(missing_ok=True)
                return None
            self.record(kind, key, "hit")
            log.info("cache hit: %s %s", kind, key)
            return path
        self.record(kind, key, "overwrite" if path.exists() else "miss")
        return None

    @contextmanager
    def build(self, kind: str, key: str, description: dict) -> Iterator[Path]:
        """Yield an empty staging directory; on success it becomes the finished artifact at once."""
        final = self.directory(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(final.parent)
        staging = staging_path(final)
        staging.mkdir()
        try:
            with naming_path(final):  # a full disk names the artifact, not a nameless write
                yield staging
            self._publish(staging, kind, key, description)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def partial_directory(self, kind: str, key: str) -> Path:
        return self.root / kind / f".{key}.partial"

    @contextmanager
    def build_in_parts(self, kind: str, key: str, description: dict) -> Iterator[Path | None]:
        """Like :meth:`build`, for an artifact written part by part over a long time.

        The staging directory is ``<root>/<kind>/.<key>.partial/`` and outlives a failed or killed
        build: under policy ``resume`` the next build gets it back with the parts written so far
        (what counts as a finished part is the caller's record); ``reuse`` and ``overwrite`` empty
        it first. One job at a time builds a key (an exclusive lock on ``.<key>.lock`` beside it,
        held for the whole block): a job that waited yields ``None`` when the other one finished
        the artifact meanwhile, and the caller reads that one.
        """
        import fcntl

        final = self.directory(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(final.with_name(f".{key}.lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("another job is building %s; waiting for it", final)
                fcntl.flock(lock, fcntl.LOCK_EX)
                if (final / DONE_FILE).is_file() and self.policy != "overwrite":
                    yield None
                    return
            partial = self.partial_directory(kind, key)
            if partial.exists() and self.policy != "resume":
                shutil.rmtree(partial)
            partial.mkdir(exist_ok=True)
            with naming_path(final):
                yield partial
            self._publish(partial, kind, key, description)

    def _publish(self, staging: Path, kind: str, key: str, description: dict) -> None:
        """Mark ``staging`` finished and rename it to the artifact's place (see :meth:`build`)."""
        final = self.directory(kind, key)
        atomic_write_json({"kind": kind, "key": key, "description": description}, staging / DONE_FILE)
        if (final / DONE_FILE).is_file() and self.policy != "overwrite":
            # Another job (a parallel sweep point) finished the same artifact first, and may be
            # reading it right now: keep it. Same key, same content; ours is discarded.
            log.info("%s was finished by another job meanwhile; keeping that one", final)
            shutil.rmtree(staging, ignore_errors=True)
            return
        if final.exists():
            # Moved aside first (a staging name, so a crash here leaves only removable debris),
            # then deleted: the final name is never half deleted.
            old = staging_path(final)
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            staging.rename(final)
        except OSError:
            if not (final / DONE_FILE).is_file():  # not a concurrent writer's finished artifact
                raise
            shutil.rmtree(staging, ignore_errors=True)
