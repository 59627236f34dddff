"""The results store (DESIGN.md §5): content-keyed entries, published atomically, verified on use.

Layout::

    results/runs/<benchmark>/<retriever>/<setting>/<entry>/
        run.parquet        the top-`depth` pages per query (the expensive part)
        per_query.parquet  every metric at every k for every query, with the query's attributes
        metrics.json       aggregates and breakdowns (vldocir.evaluation.aggregate.summarise)
        manifest.json      how it was made (``benchmark.root``: where the benchmark was opened), plus
                           `store`: the run key, the evaluation key and the size and SHA-256 of
                           each of the three files above

An entry's name reads ``depth<D>_k<k1-k2-...>_<run key>``: one entry per run (benchmark
fingerprint, retriever parameters, setting parameters, depth) and evaluation (ks). Variants never
share a directory, so nothing is ever written over: a sweep over depth, ks or parameters leaves one
entry per point, and :func:`list_runs` (or ``python -m vldocir.store``) lists them all.

Publishing writes the four files into a hidden staging directory beside the entry
(``.<entry>.staging-<host>-<pid>-<ns>``; those of dead writers are removed by the next publish)
and renames it into place in one step, so a kill or a full disk at any moment leaves either no entry or a complete
one. Two writers of the same entry cannot mix files: the first rename wins, and the second keeps
the winner if it verifies and holds the same metrics, or publishes beside it under a suffixed name
(last-complete-wins for readers, both kept). A directory that is not a verified entry (placed by
hand, damaged) is never deleted or written into; it is reported and left alone.

What an entry vouches for (:meth:`Entry.problems`): the size and SHA-256 of each of the three
files, the manifest's own SHA-256 (``store.manifest_sha256``, over its canonical JSON without that
field: a changed byte anywhere in it, ``run.query_flags`` or ``ks`` included, is found), and its
place (``store.entry``, ``store.place``: an entry copied over another, or into another setting's
directory, is not the entry its path names). Cheap checks always (sizes, the manifest, the small
files' checksums, the place); ``run.parquet`` is hashed in full where a run is used: on reuse (also as
the input run of a setting), on export, by the viewer and ``python -m vldocir.store --verify``.

A stored run is reused only when its manifest names the same run key *and* the entry verifies in
full; the new evaluation links (or copies) that file into its own entry and checks that the linked
file still has the checksum it was verified with. Reports read entries through :func:`list_runs`
(cheap checks). Entries of store format 2 (written before the manifest vouched for itself and its
place) are checked as they were: files only.

The command line, ``python -m vldocir.store`` (the index, ``--verify``, ``export`` of a run as a TREC
run file), is :mod:`vldocir.store.cli`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.cache import remove_stale_staging, staging_path
from vldocir.data.runs import read_run, write_run
from vldocir.errors import VldocirError
from vldocir.io import file_digest
from vldocir.manifest import is_secret_value

log = logging.getLogger(__name__)

RUN_FILE = "run.parquet"
PER_QUERY_FILE = "per_query.parquet"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
VOUCHED_FILES = (RUN_FILE, PER_QUERY_FILE, METRICS_FILE)
STORE_FORMAT = 3
LEGACY_FORMATS = (2,)  # entries whose manifest does not vouch for itself: their files are still checked
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
INDEX_COLUMNS = ["benchmark", "retriever", "setting", "depth", "ks", "run_key", "fingerprint", "created_at", "path"]


class StoreError(VldocirError, RuntimeError):
    """The store refuses an operation (unsafe name, a path outside the store, a failed write)."""


def check_name(what: str, value: str) -> str:
    """A benchmark, retriever or setting name used as a directory: ``[A-Za-z0-9._-]+``, not ``.``/``..``,
    and no secret (vldocir.manifest's rule by value): a name is written everywhere, so it is refused, unechoed."""
    text = str(value)
    if is_secret_value(text):
        raise StoreError(
            f"{what} cannot name a results-store directory: its value looks like a secret (a token, credentials, "
            "or a secret environment variable's value); secrets come from the environment only"
        )
    if not SAFE_NAME.fullmatch(text) or text in (".", ".."):
        raise StoreError(
            f"{what} {text!r} cannot name a results-store directory: use letters, digits, '.', '_' and '-' only"
        )
    return text


def setting_directory(results_dir: str | Path, benchmark: str, retriever: str, setting: str) -> Path:
    """``<results_dir>/runs/<benchmark>/<retriever>/<setting>``, refusing names that would leave the store."""
    root = Path(results_dir).resolve() / "runs"
    path = (
        root
        / check_name("benchmark name", benchmark)
        / check_name("retriever id", retriever)
        / check_name("setting id", setting)
    )
    if not path.resolve().is_relative_to(root):  # a symlinked component pointing elsewhere
        raise StoreError(f"{path} resolves outside the results store {root}; refusing to write there")
    return path


def entry_name(depth: int, ks: Sequence[int], run_key: str) -> str:
    return f"depth{int(depth)}_k{'-'.join(str(int(k)) for k in ks)}_{run_key}"


def file_record(path: Path) -> dict[str, Any]:
    """What the manifest vouches for about a file: its size and SHA-256."""
    return {"bytes": path.stat().st_size, "sha256": file_digest(path, "sha256")}


def manifest_digest(manifest: dict) -> str:
    """SHA-256 of ``manifest`` as JSON (keys sorted, compact), without ``store.manifest_sha256``."""
    body = json.loads(json.dumps(manifest, default=str))
    if isinstance(body.get("store"), dict):
        body["store"].pop("manifest_sha256", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal_manifest(manifest: dict) -> dict:
    """Set ``store.manifest_sha256`` (:func:`manifest_digest`); returns ``manifest``."""
    manifest.setdefault("store", {})["manifest_sha256"] = manifest_digest(manifest)
    return manifest


# -- entries ---------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One published entry of the store."""

    path: Path

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.path / MANIFEST_FILE).read_text())

    @property
    def record(self) -> dict:
        record = self.manifest.get("store", {}) if isinstance(self.manifest, dict) else None
        return record if isinstance(record, dict) else {}

    @property
    def in_store(self) -> bool:
        """Whether the entry lies in a store (``<results>/runs/<benchmark>/<retriever>/<setting>/<entry>``),
        where its place is checked; a copy elsewhere (e.g. for the viewer) is checked for content only."""
        return len(self.path.parents) > 3 and self.path.parents[3].name == "runs"

    @property
    def run_key(self) -> str | None:
        return self.record.get("run_key")

    def problems(self, full: bool = False) -> list[str]:
        """What is wrong with the entry (empty when it verifies): the manifest's own checksum and the
        entry's place (in a store), the files' sizes and the small files' checksums always; the
        checksum of ``run.parquet`` only with ``full`` (it can be hundreds of MB)."""
        try:
            record = self.record
        except (OSError, ValueError) as error:  # (JSON and UTF-8 decoding errors are ValueErrors)
            return [f"{MANIFEST_FILE} unreadable ({type(error).__name__}: {error})"]
        try:
            return self._problems(record, full)
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            return [f"{MANIFEST_FILE} is malformed ({type(error).__name__}: {error})"]

    def _problems(self, record: dict, full: bool) -> list[str]:
        fmt = record.get("format")
        if fmt not in (STORE_FORMAT, *LEGACY_FORMATS) or not isinstance(record.get("files"), dict):
            return [f"{MANIFEST_FILE} vouches for no files (not an entry of this store format)"]
        if fmt == STORE_FORMAT:
            if record.get("manifest_sha256") != manifest_digest(self.manifest):
                return [f"{MANIFEST_FILE} does not match its own checksum (store.manifest_sha256)"]
            if self.in_store:
                place, name = tuple(self.path.parent.parts[-3:]), str(record["entry"])
                if tuple(record["place"]) != place or not re.fullmatch(re.escape(name) + r"(\.\d+)?", self.path.name):
                    return [
                        f"{MANIFEST_FILE} is that of the entry {'/'.join(record['place'])}/{name}, "
                        f"not of {'/'.join(place)}/{self.path.name} (copied over it?)"
                    ]
        found = []
        if not (self.manifest.get("benchmark") or {}).get("root"):
            found.append(f"{MANIFEST_FILE} records no benchmark.root")
        for name in VOUCHED_FILES:
            vouched, path = record["files"].get(name), self.path / name
            if vouched is None:
                found.append(f"{MANIFEST_FILE} does not vouch for {name}")
            elif not path.is_file():
                found.append(f"{name} is missing")
            elif path.stat().st_size != vouched["bytes"]:
                found.append(f"{name} has {path.stat().st_size} bytes, the manifest vouches for {vouched['bytes']}")
            elif (full or name != RUN_FILE) and file_digest(path, "sha256") != vouched["sha256"]:
                found.append(f"{name} does not match the checksum in {MANIFEST_FILE}")
        return found

    def verify(self, full: bool = False) -> bool:
        return not self.problems(full)


def _entries_in(setting_dir: Path) -> list[Path]:
    if not setting_dir.is_dir():
        return []
    return sorted(p for p in setting_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def find_run(setting_dir: Path, run_key: str) -> Entry | None:
    """A stored entry whose run was made from ``run_key`` and whose ``run.parquet`` verifies in full.

    Entries that name the key but fail verification are reported and skipped (never deleted).
    """
    for path in _entries_in(setting_dir):
        if not (path / MANIFEST_FILE).is_file():
            continue
        entry = Entry(path)
        try:
            if entry.run_key != run_key:
                continue
        except (OSError, ValueError):
            continue
        problems = entry.problems(full=True)
        if not problems:
            return entry
        log.warning("not reusing the run in %s: %s", path, "; ".join(problems))
    return None


def newest_entry_in(setting_dir: Path, k: int | None = None) -> Path | None:
    """The most recently published verified entry under ``<benchmark>/<retriever>/<setting>``;
    with ``k``, the newest of those evaluated at ``k`` if there is one."""
    verified = [Entry(p) for p in _entries_in(setting_dir) if (p / MANIFEST_FILE).is_file() and Entry(p).verify()]
    fitting = [e for e in verified if k in e.record.get("ks", ())] or verified
    if not fitting:
        return None
    newest = max(fitting, key=lambda entry: entry.record.get("created_at") or "")
    if len(verified) > 1:
        log.info("%s holds %d entries; using %s", setting_dir, len(verified), newest.path.name)
    return newest.path


def other_parameters(setting_dir: Path, run_key: str, fingerprint: str, depth: int) -> list[Path]:
    """Entries beside a new run with the same benchmark content and depth but another run key:
    the retriever's or setting's parameters differ under the same ids (e.g. another checkpoint)."""
    found = []
    for path in _entries_in(setting_dir):
        try:
            record = Entry(path).record
        except (OSError, ValueError):
            continue
        if (
            record.get("fingerprint") == fingerprint
            and record.get("depth") == depth
            and record.get("run_key") not in (None, run_key)
        ):
            found.append(path)
    return found


def read_stored_run(entry: Entry, columns: Sequence[str] | None = None) -> pa.Table:
    return read_run(entry.path / RUN_FILE, columns)


# -- publishing ------------------------------------------------------------------------------------


def _write_file(staging: Path, name: str, write: Callable[[Path], None]) -> None:
    """Write one file of an entry into its staging directory (one step of :func:`publish`)."""
    write(staging / name)


def _commit(staging: Path, final: Path) -> None:
    """Rename the filled staging directory into place: the one step that publishes an entry.

    ``os.rename`` of a directory onto an existing non-empty one fails (POSIX), so a concurrent
    writer's entry is never replaced.
    """
    os.rename(staging, final)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # no second copy of a large run; entries are never modified in place
    except OSError:
        shutil.copyfile(source, target)


def publish(
    setting_dir: Path,
    name: str,
    *,
    run: pa.Table | None,
    reused: Entry | None,
    per_query: pd.DataFrame,
    metrics: dict,
    manifest: dict,
) -> Path:
    """Publish an entry named ``name`` under ``setting_dir``; returns its directory.

    ``run`` is the new run, or ``None`` with ``reused`` the entry whose verified run is linked in.
    ``manifest`` gets its ``store`` record (keys, files, checksums) here.
    """
    if (run is None) == (reused is None):
        raise ValueError("publish needs exactly one of a new run or a reused entry")
    if reused is not None and reused.path == setting_dir / name and _holds(reused, metrics):
        # The stored run re-evaluated at the same ks, to the same metrics: nothing to write. (Its
        # run.parquet was verified in full by find_run; the small files are checked here.)
        log.info("%s already holds this result (an identical evaluation); kept as it is", reused.path)
        manifest["store"] = {
            **manifest.get("store", {}),
            **{k: reused.record[k] for k in ("format", "created_at", "files", "entry", "place") if k in reused.record},
        }
        return reused.path
    setting_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(setting_dir)  # debris of writers killed earlier (never a live writer's)
    staging = staging_path(setting_dir / name)
    staging.mkdir()
    try:
        try:
            if run is not None:
                _write_file(staging, RUN_FILE, lambda p: write_run(run, p))
            else:
                _write_file(staging, RUN_FILE, lambda p: _link_or_copy(reused.path / RUN_FILE, p))
            table = pa.Table.from_pandas(per_query, preserve_index=False)
            _write_file(staging, PER_QUERY_FILE, lambda p: pq.write_table(table, p))
            _write_file(
                staging, METRICS_FILE, lambda p: p.write_text(json.dumps(metrics, indent=2, default=str) + "\n")
            )
            record = dict(manifest.get("store", {}))
            record.pop("manifest_sha256", None)
            record.update(
                format=STORE_FORMAT,
                created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
                files={f: file_record(staging / f) for f in VOUCHED_FILES},
                entry=name,
                place=list(setting_dir.parts[-3:]),
            )
            if reused is not None and record["files"][RUN_FILE]["sha256"] != reused.record["files"][RUN_FILE]["sha256"]:
                raise StoreError(
                    f"{reused.path / RUN_FILE} changed after it was verified (its checksum is no longer the one "
                    f"{reused.path / MANIFEST_FILE} vouches for); nothing was published: rerun to compute the run again"
                )
            manifest["store"] = record
            sealed = seal_manifest(json.loads(json.dumps(manifest, default=str)))
            manifest["store"]["manifest_sha256"] = sealed["store"]["manifest_sha256"]
            _write_file(
                staging, MANIFEST_FILE, lambda p: p.write_text(json.dumps(sealed, indent=2, default=str) + "\n")
            )
            return _commit_entry(staging, setting_dir / name, metrics)
        except OSError as error:
            reason = "the disk is full" if error.errno == errno.ENOSPC else str(error)
            raise StoreError(
                f"could not publish the results-store entry {setting_dir / name}: {reason}. Nothing was "
                "published and the store's other entries are intact; free space and rerun "
                "(cached artifacts are reused)."
            ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _same_metrics(entry: Entry, metrics: dict) -> bool:
    return json.loads((entry.path / METRICS_FILE).read_text()) == json.loads(json.dumps(metrics, default=str))


def _holds(entry: Entry, metrics: dict) -> bool:
    """Whether ``entry`` verifies (sizes, small files' checksums) and holds exactly ``metrics``."""
    try:
        return not entry.problems() and _same_metrics(entry, metrics)
    except (OSError, ValueError):  # (json.JSONDecodeError is a ValueError)
        return False


def _commit_entry(staging: Path, final: Path, metrics: dict) -> Path:
    """Rename ``staging`` to ``final``; if ``final`` exists, keep it when it is the same result,
    else publish beside it (``<name>.2``, ``<name>.3``, ...): nothing is ever replaced."""
    target = final
    for attempt in range(2, 1000):
        try:
            _commit(staging, target)
            if target != final:
                log.warning(
                    "%s already exists and differs from this result; published beside it as %s", final, target.name
                )
            return target
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY) and not target.exists():
                raise
        existing = Entry(target)
        problems = (
            existing.problems(full=True) if (target / MANIFEST_FILE).is_file() else ["no manifest.json (not an entry)"]
        )
        if not problems and _same_metrics(existing, metrics):
            log.info("%s already holds this result (an identical evaluation); kept as it is", target)
            return target
        if problems:
            log.warning(
                "%s is in the way and is not a verified entry (%s); left untouched", target, "; ".join(problems)
            )
        target = final.with_name(f"{final.name}.{attempt}")
    raise StoreError(f"could not find a free name for {final}")


# -- reading ---------------------------------------------------------------------------------------


def list_runs(results_dir: str | Path, verify: bool = True) -> pd.DataFrame:
    """Every verified entry of the store, newest last within each (benchmark, retriever, setting).

    Columns: benchmark, retriever, setting, depth, ks (tuple), run_key, fingerprint, created_at,
    path. Directories that do not verify are left out with a warning naming them.
    """
    rows = []
    for manifest_path in sorted(Path(results_dir, "runs").glob(f"*/*/*/*/{MANIFEST_FILE}")):
        entry = Entry(manifest_path.parent)
        if entry.path.name.startswith("."):
            continue
        problems = entry.problems() if verify else []
        if problems:
            log.warning("skipping %s: %s", entry.path, "; ".join(problems))
            continue
        record = entry.record
        rows.append(
            {
                "benchmark": entry.path.parents[2].name,
                "retriever": entry.path.parents[1].name,
                "setting": entry.path.parent.name,
                "depth": record.get("depth"),
                "ks": tuple(record.get("ks", ())),
                "run_key": record.get("run_key"),
                "fingerprint": record.get("fingerprint"),
                "created_at": record.get("created_at"),
                "path": entry.path,
            }
        )
    index = pd.DataFrame(rows, columns=INDEX_COLUMNS)
    return index.sort_values(["benchmark", "retriever", "setting", "created_at"], kind="stable", ignore_index=True)


def select(index: pd.DataFrame, *, ks: Sequence[int] = (), depth: int | None = None) -> pd.DataFrame:
    """One entry per (benchmark, retriever, setting): among those whose ks include ``ks``, the ones
    of ``depth`` if any, then the newest. Adds ``alternatives``: how many other entries it had."""
    if index.empty:
        return index.assign(alternatives=pd.Series(dtype=int))
    chosen = []
    for _, group in index.groupby(["benchmark", "retriever", "setting"], sort=True):
        candidates = group[[set(ks) <= set(row_ks) for row_ks in group.ks]]
        if candidates.empty:
            candidates = group  # still show the run; the missing k's cells say so
        if depth is not None and (candidates.depth == depth).any():
            candidates = candidates[candidates.depth == depth]
        best = candidates.sort_values("created_at", kind="stable").iloc[-1]
        chosen.append({**best.to_dict(), "alternatives": len(group) - 1})
    return pd.DataFrame(chosen, columns=[*index.columns, "alternatives"])


def unverified(results_dir: str | Path) -> list[tuple[Path, list[str]]]:
    """Directories under ``runs/`` that hold result files but are not verified entries (files placed
    by hand in a setting directory or in an entry, damaged entries)."""
    found = []
    runs = Path(results_dir, "runs")
    for path in sorted({p.parent for pattern in ("*/*/*/*", "*/*/*/*/*") for p in runs.glob(pattern) if p.is_file()}):
        if any(part.startswith(".") for part in path.relative_to(runs).parts):
            continue
        depth = len(path.relative_to(runs).parts)
        problems = Entry(path).problems(full=True) if depth == 4 else ["files outside an entry"]
        if problems:
            found.append((path, problems))
    return found


def resolve_entry(run: str | Path, results_dir: str | Path | None = None) -> tuple[Entry, str]:
    """The verified entry ``run`` names, and how it was chosen.

    ``run`` is an entry directory, a ``<benchmark>/<retriever>/<setting>`` directory (its newest
    verified entry), or ``<benchmark>/<retriever>/<setting>`` relative to ``<results_dir>/runs``.
    The entry's ``run.parquet`` is hashed in full: an entry that does not verify is refused.
    """
    path = Path(run)
    if not path.is_dir() and len(path.parts) == 3 and results_dir is not None:
        path = Path(results_dir) / "runs" / path
    if not path.is_dir():
        raise StoreError(f"{run} is neither an entry nor a <benchmark>/<retriever>/<setting> directory of the store")
    how = "the entry named"
    if not (path / MANIFEST_FILE).is_file():
        newest = newest_entry_in(path)
        if newest is None:
            raise StoreError(f"{path} holds no verified entry (python -m vldocir.store --verify lists what is wrong)")
        count = sum(1 for p in _entries_in(path) if (p / MANIFEST_FILE).is_file())
        path, how = newest, f"the newest verified of {count} entries"
    entry = Entry(path)
    problems = entry.problems(full=True)
    if problems:
        raise StoreError(f"{path} is not a verified entry: {'; '.join(problems)}")
    return entry, how
