"""Content-keyed artifact cache with a stated policy (DESIGN.md §1, STYLE.md #8).

An artifact (an index, a set of embedding shards, ...) lives in ``<root>/<kind>/<key>/``, where the
key hashes everything that determines it. A finished artifact holds ``artifact.json`` (what went
into the key); a directory without it is partial and never read as finished.

Policies:
- ``reuse``: use a finished artifact; rebuild a partial one from scratch.
- ``resume``: like ``reuse``, but a stage that builds in parts (encoding shards) keeps the parts
  already written and continues.
- ``overwrite``: rebuild everything this job touches.

Integrity. ``artifact.json`` records every file the artifact is made of (relative path, byte size,
blake2b digest) and a check of itself, written when it is published. :meth:`ArtifactCache.lookup`
checks them before the artifact is used, under the stated ``integrity`` policy (``cache_integrity``
in the config):

- cheap checks, always: ``artifact.json`` parses, passes its own check and names this kind and key
  (not a copy of another key's), every recorded file is present with its recorded size, and no
  unrecorded file lies in the directory (a stale file a reader could pick up);
- full checks, the digests of every recorded file: ``full`` always, ``cheap`` never, ``auto`` (the
  default) when the artifact's recorded files total at most :data:`FULL_CHECK_MAX_BYTES` (BM25
  indexes, query embeddings, id maps, reduced benchmarks of the mini; about a second of hashing).

The caller's own ``verify`` then checks what only it knows (id maps against the benchmark, vectors
against their shard.json). Under ``reuse`` and ``resume`` an artifact that fails any of this is
reported in one warning line naming the damaged file and rebuilt; an artifact.json recording no
files is treated the same way. Artifacts built in parts over hours (page-embedding shards) vouch
for each part themselves (:mod:`vldocir.retrieval.embeddings`); :func:`damaged_artifacts` runs
every check over a whole cache (``python -m vldocir.store --verify``).

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
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vldocir.errors import VldocirError
from vldocir.io import atomic_write_json, file_digest, naming_path
from vldocir.leases import LEASES_DIR, Leases, host_name, pid_alive

log = logging.getLogger(__name__)

POLICIES = ("reuse", "resume", "overwrite")
INTEGRITY_LEVELS = ("auto", "full", "cheap")
DONE_FILE = "artifact.json"
DIGEST = "blake2b"
FULL_CHECK_MAX_BYTES = 4 << 30
"""Under ``integrity=auto`` an artifact whose files total at most this is digest-checked on every
lookup: blake2b reads about 1 GB/s, so a few seconds at most, against a rebuild or search that
takes longer (a paper-scale BM25 index is 1-3 GB)."""
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


def read_json(path: Path) -> Any:
    """A JSON file of an artifact; a missing or unreadable one raises :class:`CorruptArtifactError`."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CorruptArtifactError(path, "is missing") from None
    except (OSError, ValueError) as error:
        raise CorruptArtifactError(path, f"is unreadable ({type(error).__name__}: {error})") from None


def content_key(parts: Any) -> str:
    """A stable 16-hex-digit hash of a JSON-serialisable description."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


# -- staging directories ---------------------------------------------------------------------------
def staging_path(final: Path) -> Path:
    """A fresh staging directory name beside ``final``: ``.<name>.staging-<host>-<pid>-<ns>``."""
    return final.with_name(f".{final.name}.staging-{host_name()}-{os.getpid()}-{time.time_ns()}")


def _writer_of(staging: Path) -> tuple[str, int] | None:
    """(host, pid) from a staging name; ``None`` for names of older schemes that lack the host."""
    suffix = staging.name.rpartition(".staging-")[2]
    parts = suffix.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or not parts[0]:
        return None
    return parts[0], int(parts[1])


def _last_touched(path: Path) -> float:
    """Latest mtime of the directory and its entries (a file being written updates its own mtime)."""
    times = [path.stat().st_mtime]
    for child in path.iterdir():
        with suppress(FileNotFoundError):
            times.append(child.stat().st_mtime)
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
    host, now = host_name(), time.time()
    for path in parent.iterdir():
        if not (path.name.startswith(".") and ".staging-" in path.name and path.is_dir()):
            continue
        writer = _writer_of(path)
        try:
            dead = (writer is not None and writer[0] == host and not pid_alive(writer[1])) or now - _last_touched(
                path
            ) > max_age_s
        except FileNotFoundError:  # its writer finished (renamed it) or another cleaner got it
            continue
        if dead:
            log.info("removing stale staging directory %s (its writer is gone)", path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextmanager
def staged_directory(final: str | Path) -> Iterator[Path]:
    """Yield a new, empty staging directory beside ``final`` (``.<name>.staging-<host>-<pid>-<ns>``,
    :func:`staging_path`); when the block succeeds it becomes ``final`` (an existing
    ``final`` is moved aside and deleted after the rename). When the block fails or is interrupted
    (an exception, Ctrl-C, SIGTERM as :class:`vldocir.subprocesses.Terminated`), the staging
    directory is deleted and ``final`` is as it was: no half-written output. Staging directories
    beside ``final`` whose writer is dead (a SIGKILL) are removed first. A ``final`` that is a symbolic
    link (``data/bench -> /scratch/bench``) is staged beside its target, so the link stays."""
    final = Path(final).expanduser()
    if final.is_symlink():
        final = final.resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(final.parent)
    staging = staging_path(final)
    aside = None
    try:
        with naming_path(staging):
            staging.mkdir()
            yield staging
        if final.exists():
            aside = staging_path(final)  # a staging name: removed as debris if this process dies here
            os.replace(final, aside)
        os.replace(staging, final)
    finally:
        if aside is not None and not final.exists():  # interrupted between the two renames: put it back
            os.replace(aside, final)
            aside = None
        shutil.rmtree(staging, ignore_errors=True)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


# -- what an artifact is made of ------------------------------------------------------------------
def _files_in(directory: Path) -> list[str]:
    """Relative paths of the regular files under ``directory`` (``artifact.json`` left out), sorted."""
    found = []
    for parent, _, names in os.walk(directory):
        for name in names:
            relative = (Path(parent) / name).relative_to(directory).as_posix()
            # .nfs*: NFS's stand-in for a file deleted while open, which no reader opens by name
            if relative != DONE_FILE and not name.startswith(".nfs"):
                found.append(relative)
    return sorted(found)


def file_records(directory: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes": size, "blake2b": digest}}`` for every file of an artifact."""
    return {
        name: {"bytes": (directory / name).stat().st_size, DIGEST: file_digest(directory / name, DIGEST)}
        for name in _files_in(directory)
    }


def _record_check(record: dict) -> str:
    """The digest ``artifact.json`` carries of the rest of itself, so that its own damage names it."""
    return content_key({k: v for k, v in record.items() if k != "check"})


def check_artifact(path: Path, kind: str, key: str, integrity: str = "auto") -> dict:
    """Check a finished artifact against its ``artifact.json``; returns that record.

    The cheap checks always, the digests as ``integrity`` says (see the module docstring). Raises
    :class:`CorruptArtifactError` naming the first damaged file.
    """
    record = read_json(path / DONE_FILE)
    if isinstance(record, dict) and record.get("check") != _record_check(record):
        raise CorruptArtifactError(
            path / DONE_FILE, "lacks its own check or fails it (changed, or of an older version)"
        )
    if not isinstance(record, dict) or (record.get("kind"), record.get("key")) != (kind, key):
        found = (record.get("kind"), record.get("key")) if isinstance(record, dict) else None
        raise CorruptArtifactError(path / DONE_FILE, f"is the record of {found}, not of {kind} {key}")
    files = record.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("bytes"), int) and isinstance(f.get(DIGEST), str)
        for f in files.values()
    ):
        raise CorruptArtifactError(path / DONE_FILE, f"records no byte size and {DIGEST} of the artifact's files")
    for name, facts in files.items():
        file = path / name
        if not file.is_file():
            raise CorruptArtifactError(file, f"is missing ({DONE_FILE} records it)")
        if file.stat().st_size != facts["bytes"]:
            raise CorruptArtifactError(
                file, f"is {file.stat().st_size} bytes; {DONE_FILE} records {facts['bytes']} (truncated or overwritten)"
            )
    for name in _files_in(path):
        if name not in files:
            raise CorruptArtifactError(path / name, f"is not one of the files {DONE_FILE} records (a stale file)")
    total = sum(facts["bytes"] for facts in files.values())
    if integrity == "full" or (integrity == "auto" and total <= FULL_CHECK_MAX_BYTES):
        for name, facts in files.items():
            if file_digest(path / name, DIGEST) != facts[DIGEST]:
                raise CorruptArtifactError(
                    path / name, f"its {DIGEST} differs from the one {DONE_FILE} records: its bytes have changed"
                )
    return record


def damaged_artifacts(
    root: Path, integrity: str = "full", checkers: dict[str, Callable[[Path, str], list[str]]] | None = None
) -> list[tuple[Path, str]]:
    """Every damaged finished artifact under the cache ``root``: (its directory, what is wrong).

    Artifacts of the kinds in ``checkers`` are judged by ``checkers[kind](directory, integrity)``
    (a list of problems), the others by :func:`check_artifact`. Unfinished artifacts (no
    ``artifact.json``: not built yet, or caches of another design) and hidden directories (staging,
    partial builds, work claims) are not damage.
    """
    checkers = checkers or {}
    found: list[tuple[Path, str]] = []
    kinds = (
        sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith("."))
        if Path(root).is_dir()
        else []
    )
    for kind_dir in kinds:
        for path in sorted(p for p in kind_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if kind_dir.name in checkers:
                found += [(path, problem) for problem in checkers[kind_dir.name](path, integrity)]
            elif (path / DONE_FILE).is_file():
                try:
                    check_artifact(path, kind_dir.name, path.name, integrity)
                except CorruptArtifactError as error:
                    found.append((path, str(error)))
    return found


@dataclass
class ArtifactCache:
    root: Path
    policy: str = "resume"
    events: list[dict] = field(default_factory=list)
    """Every lookup this job made: kind, key, ``hit`` / ``miss`` / ``overwrite`` / ``corrupt``; goes to the manifest."""
    integrity: str = "auto"
    """When :meth:`lookup` checks digests: ``auto``, ``full`` or ``cheap`` (the module docstring)."""
    leases: Leases | None = None
    """The claims that keep concurrent jobs from building one artifact twice; ``<root>/.leases/`` by default."""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"cache_policy must be one of {POLICIES}, got {self.policy!r}")
        if self.integrity not in INTEGRITY_LEVELS:
            raise ValueError(f"cache_integrity must be one of {INTEGRITY_LEVELS}, got {self.integrity!r}")
        self.root = Path(self.root)
        if self.leases is None:
            self.leases = Leases(self.root / LEASES_DIR)

    def key_for(self, kind: str, **parts: Any) -> str:
        return content_key({"kind": kind, **parts})

    def directory(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def record(self, kind: str, key: str, status: str) -> None:
        self.events.append({"kind": kind, "key": key, "status": status})

    def check(self, kind: str, key: str, verify: Callable[[Path], Any] | None = None) -> Path:
        """The finished artifact's directory after :func:`check_artifact` and ``verify(path)``
        (both raise :class:`CorruptArtifactError` for a damaged artifact)."""
        path = self.directory(kind, key)
        check_artifact(path, kind, key, self.integrity)
        if verify is not None:
            verify(path)
        return path

    def lookup(self, kind: str, key: str, verify: Callable[[Path], Any] | None = None) -> Path | None:
        """The finished artifact's directory if the policy allows using it, else ``None``.

        The artifact's files are checked against ``artifact.json`` (:func:`check_artifact`), then
        ``verify(path)`` checks what the caller knows (it raises :class:`CorruptArtifactError`).
        A damaged artifact is reported (one warning naming the damaged file and the damage) and
        treated as missing, so that the caller rebuilds it (:meth:`build` replaces it).
        """
        path = self.directory(kind, key)
        if (path / DONE_FILE).is_file() and self.policy != "overwrite":
            try:
                self.check(kind, key, verify)
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

    @contextmanager
    def build_once(self, kind: str, key: str, description: dict) -> Iterator[Path | None]:
        """:meth:`build` by one job at a time: the job claims ``<kind>/<key>`` (:mod:`vldocir.leases`)
        for the whole block, so compute the artifact inside it. A job that finds it claimed waits,
        and yields ``None`` when the other one finished the artifact meanwhile (read it through
        :meth:`check`)."""
        final = self.directory(kind, key)
        finished = lambda: self.policy != "overwrite" and (final / DONE_FILE).is_file()  # noqa: E731
        with self.leases.single_flight(f"{kind}/{key}", finished) as claim:
            if claim is None:
                yield None
                return
            with self.build(kind, key, description) as staging:
                yield staging

    def partial_directory(self, kind: str, key: str) -> Path:
        return self.root / kind / f".{key}.partial"

    @contextmanager
    def build_in_parts(self, kind: str, key: str, description: dict) -> Iterator[Path | None]:
        """Like :meth:`build`, for an artifact written part by part over a long time.

        The staging directory is ``<root>/<kind>/.<key>.partial/`` and outlives a failed or killed
        build: under policy ``resume`` the next build gets it back with the parts written so far
        (what counts as a finished part is the caller's record); ``reuse`` and ``overwrite`` empty
        it first. One job at a time builds a key: it claims the unit ``<kind>/<key>`` for the whole
        block (:mod:`vldocir.leases`); a job that finds it claimed waits, and yields ``None`` when
        the other one finished the artifact meanwhile (the caller reads that one). The claim of a
        job that died lapses, and the job that takes it over continues its partial build.
        """
        final = self.directory(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        finished = lambda: self.policy != "overwrite" and (final / DONE_FILE).is_file()  # noqa: E731
        with self.leases.single_flight(f"{kind}/{key}", finished) as claim:
            if claim is None:
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
        record = {"kind": kind, "key": key, "description": description, "files": file_records(staging)}
        record = json.loads(json.dumps(record, default=str))  # as it reads back
        atomic_write_json({**record, "check": _record_check(record)}, staging / DONE_FILE)
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
