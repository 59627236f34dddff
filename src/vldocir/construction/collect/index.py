"""The document index of a collection: one row per collected document, what the build reads to know
where each document's HTML lies and what its source, domain, title, URL and licence are.

A row (:class:`IndexRow`) has ``doc_id, source, domain, title, url, license, path`` (``path``: the
document's folder relative to the index, holding ``index.html`` and its ``assets/``), plus
``n_assets``, ``failed_assets`` (``[{"url", "error"}]``: assets that could not be fetched; the
document is kept, those references left pointing at their remote URLs) and ``meta`` (per-source
extras: arXiv categories, an SEC filing's CIK and date, ...).

Written as JSONL by the collectors (:class:`DocumentIndex`, one line appended per document, so an
interrupted run loses at most the document it was writing); :func:`read_index` also reads CSV and
Parquet copies (``failed_assets`` and ``meta`` as JSON text there). Document ids are unique and
name a folder: letters, digits, ``.``, ``_``, ``-``.

Licences are stored in one spelling whatever the source wrote (:func:`canonical_license`: SPDX-like
ids, ``CC-BY-4.0``, ``CC-BY-SA-4.0``, ``CC0-1.0``; a Creative Commons licence without a version, as
PMC writes them, is ``CC-BY``, ``CC-BY-NC-ND``, ...), and filtered with :func:`license_allowed`.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vldocir.errors import ConfigError, VldocirError

log = logging.getLogger(__name__)

INDEX_FILE = "index.jsonl"
COLUMNS = ("doc_id", "source", "domain", "title", "url", "license", "path")
REQUIRED_COLUMNS = ("doc_id", "source", "path")
DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def _blank(value: Any) -> bool:
    return (
        value is None or (isinstance(value, float) and value != value) or (isinstance(value, str) and not value.strip())
    )


class IndexFileError(VldocirError, ValueError):
    """A damaged or inconsistent index (a duplicate id, a missing column); names the file."""


@dataclass
class IndexRow:
    doc_id: str
    source: str
    domain: str
    title: str
    url: str
    license: str
    path: str
    n_assets: int = 0
    failed_assets: list[dict[str, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not DOC_ID.match(str(self.doc_id)):
            raise ValueError(f"document id {self.doc_id!r} is not a folder name (letters, digits, '.', '_', '-')")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexRow:
        """A row from a mapping: ``doc_id``, ``source`` and ``path`` are required; ``domain``
        defaults to the source, ``title`` to the doc id, ``url`` and ``license`` to empty (an index
        written by hand for ``vldocir.apps.build input=...`` may leave them out)."""
        missing = [c for c in REQUIRED_COLUMNS if _blank(data.get(c))]
        if missing:
            raise ValueError(f"missing column(s) or value(s): {', '.join(missing)}")
        known = {f.name for f in fields(cls)}
        row = {k: v for k, v in data.items() if k in known and not (k in COLUMNS and _blank(v))}
        row = {k: (str(v).strip() if k in COLUMNS else v) for k, v in row.items()}
        row.setdefault("domain", row["source"])
        row.setdefault("title", row["doc_id"])
        row.setdefault("url", "")
        row.setdefault("license", "")
        for name in ("failed_assets", "meta"):  # JSON text in CSV and Parquet copies
            if isinstance(row.get(name), str):
                row[name] = json.loads(row[name]) if row[name] else ([] if name == "failed_assets" else {})
            elif row.get(name) is None:
                row.pop(name, None)
        row["n_assets"] = int(row.get("n_assets") or 0)
        return cls(**row)


class DocumentIndex:
    """``<out_dir>/index.jsonl``, appended one row at a time; ids checked unique.

    Opening it reads the rows written so far. With ``repair`` (a collector about to append), a last
    line cut short by a crash (not JSON, no newline) is removed with a warning; without it (reading
    an index, e.g. for ``vldocir.apps.build input=...``) the file is never changed and such a line is an error.
    A last line that parses is kept, newline or not.
    """

    def __init__(self, path: str | Path, repair: bool = True):
        self.path = Path(path)
        self.repair = repair
        self.rows: dict[str, IndexRow] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        good_end = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            try:
                row = IndexRow.from_dict(json.loads(line)) if line.strip() else None
            except (ValueError, TypeError) as error:
                if line.endswith(b"\n") or not self.repair:
                    raise IndexFileError(f"{self.path}:{number}: not an index row ({error})") from error
                log.warning("%s: dropping its last line, cut short by an interrupted run", self.path)
                break
            good_end += len(line)
            if row is not None:
                self._check_new(row, f"{self.path}:{number}")
                self.rows[row.doc_id] = row
        if self.repair and good_end < len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)
        elif self.repair and data and good_end == len(data) and not data.endswith(b"\n"):
            with open(self.path, "ab") as handle:  # the next row must start on a line of its own
                handle.write(b"\n")

    def _check_new(self, row: IndexRow, where: str) -> None:
        if row.doc_id in self.rows:
            raise IndexFileError(f"{where}: duplicate document id {row.doc_id!r}")

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[IndexRow]:
        return iter(self.rows.values())

    def add(self, row: IndexRow) -> None:
        """Append ``row`` (flushed and synced: the line survives a crash right after)."""
        self._check_new(row, str(self.path))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(row), ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.rows[row.doc_id] = row


def read_index(path: str | Path) -> list[IndexRow]:
    """The rows of an index file: ``.jsonl``, ``.csv`` or ``.parquet``; ids checked unique."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(DocumentIndex(path, repair=False)) if path.is_file() else _missing(path)
    if suffix not in (".csv", ".parquet"):
        raise IndexFileError(f"{path}: an index is .jsonl, .csv or .parquet")
    if not path.is_file():
        _missing(path)
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False) if suffix == ".csv" else pd.read_parquet(path)
    rows: dict[str, IndexRow] = {}
    for number, record in enumerate(frame.to_dict("records"), start=1):
        try:
            row = IndexRow.from_dict(record)
        except (ValueError, TypeError) as error:
            raise IndexFileError(f"{path}: row {number}: {error}") from error
        if row.doc_id in rows:
            raise IndexFileError(f"{path}: row {number}: duplicate document id {row.doc_id!r}")
        rows[row.doc_id] = row
    return list(rows.values())


def _missing(path: Path) -> list[IndexRow]:
    raise IndexFileError(f"{path}: no such index file")


def write_index(rows: Iterable[IndexRow], path: str | Path) -> None:
    """Write ``rows`` to ``path`` as JSONL, CSV or Parquet (by suffix), e.g. to share an index."""
    from vldocir.io import atomic_path

    path, rows = Path(path), list(rows)
    seen: set[str] = set()
    for row in rows:
        if row.doc_id in seen:
            raise IndexFileError(f"{path}: duplicate document id {row.doc_id!r}")
        seen.add(row.doc_id)
    suffix = path.suffix.lower()
    with atomic_path(path) as tmp:
        if suffix == ".jsonl":
            tmp.write_text("".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
            return
        import pandas as pd

        records = [
            {**asdict(r), "failed_assets": json.dumps(r.failed_assets), "meta": json.dumps(r.meta)} for r in rows
        ]
        frame = pd.DataFrame(records, columns=[f.name for f in fields(IndexRow)])
        if suffix == ".csv":
            frame.to_csv(tmp, index=False)
        elif suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            raise IndexFileError(f"{path}: an index is .jsonl, .csv or .parquet")


# -- licences -------------------------------------------------------------------------------------------
_CC_URL = re.compile(r"creativecommons\.org/(licenses|publicdomain)/([a-z-]+)/(\d+(?:\.\d+)?)", re.I)
_CC_TEXT = re.compile(
    r"^\s*(?:creative\s+commons\s+)?(?:cc[\s_-]*)(by(?:[\s_-]*(?:nc|nd|sa))*|0|zero)\b[\s_-]*(\d+(?:\.\d+)?)?\s*(?:international)?\s*$",
    re.I,
)
_ARXIV_URL = re.compile(r"arxiv\.org/licenses/([a-z-]+)/(\d+(?:\.\d+)?)", re.I)


def canonical_license(value: str | None) -> str:
    """One spelling of a licence, from a URL (``http://creativecommons.org/licenses/by-sa/4.0/``), a
    name (``CC BY-NC 4.0``, ``CC0``) or anything else (returned trimmed; ``""`` for none), e.g.
    ``CC-BY-SA-4.0``, ``CC-BY-NC``, ``CC0-1.0``, ``arXiv-nonexclusive-distrib-1.0``."""
    text = (value or "").strip()
    if match := _CC_URL.search(text):
        kind, name, version = match.group(1).lower(), match.group(2).lower(), match.group(3)
        if kind == "publicdomain":
            return f"CC0-{version}" if name == "zero" else f"PDM-{version}" if name == "mark" else text
        return f"CC-{name.upper()}-{version}"
    if match := _ARXIV_URL.search(text):
        return f"arXiv-{match.group(1).lower()}-{match.group(2)}"
    if match := _CC_TEXT.match(text):
        name, version = match.group(1).upper(), match.group(2)
        if name in ("0", "ZERO"):
            return f"CC0-{version}" if version else "CC0"
        name = "-".join(part for part in re.split(r"[\s_-]+", name) if part)
        return f"CC-{name}-{version}" if version else f"CC-{name}"
    return text


def license_allowed(license: str, allowed: Iterable[str]) -> bool:
    """Whether the canonical ``license`` matches one of ``allowed`` (canonical ids, ``fnmatch``
    patterns allowed: ``CC-BY-4.0``, ``CC0*``); an empty licence never matches."""
    if not license:
        return False
    return any(
        fnmatch.fnmatchcase(license, canonical_license(pattern) if "*" not in pattern else pattern)
        for pattern in allowed
    )


def check_allowed_licenses(allowed: Iterable[str], key: str) -> list[str]:
    """``allowed`` as a list, or :class:`ConfigError` naming ``key`` when it is empty or not a list."""
    if isinstance(allowed, str) or not allowed:
        raise ConfigError(f"{key}: a non-empty list of licences (e.g. [CC-BY-4.0, CC-BY-SA-4.0, CC0-1.0])")
    return [str(a) for a in allowed]
