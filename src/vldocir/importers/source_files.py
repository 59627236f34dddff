"""An importer's source files on local disk: read only inside the source folder, every bad byte one line.

What a folder someone hands over may hold, and what an importer then says (each an
:class:`~vldocir.importers.base.ImporterError`: one line naming the file, and the line or row where
there is one, that the apps print with exit status 2):

- :func:`source_file`: a file of the source whose path resolves outside the source folder (a symbolic
  link to ``/etc/passwd``, a name with ``..``) is refused before it is opened. Inside means the folder
  itself or, for a Hugging Face hub snapshot, its repository's ``blobs/`` (the snapshot's files are
  links into it): :func:`vldocir.data.validation.allowed_roots`.
- :func:`text_lines` / :func:`read_text`: UTF-8 text, ``.gz`` decompressed; bytes that are not UTF-8
  (named by line) and a damaged or truncated ``.gz`` are one line each.
- :func:`parquet_file` / :func:`read_parquet`: a file Parquet cannot read (empty, truncated, not
  Parquet) is one line.
- :func:`integer_grade`: a relevance grade is an integer, as BEIR's qrels and trec_eval define it,
  within the benchmark schema's 32-bit ``qrels.grade``: ``1.7`` or ``0.5`` (which a cast would make 1
  or 0, changing the query) and ``2**70`` are refused naming the row.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator
from numbers import Integral, Real
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.data.validation import allowed_roots, outside_target
from vldocir.importers.base import MAX_GRADE, ImporterError

_INTEGER = re.compile(r"^[+-]?\d+$")
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` (symbolic links resolved) lies inside the source folder ``root``."""
    return any(outside_target(path, allowed) is None for allowed in allowed_roots(root))


def source_file(root: Path, path: Path) -> Path:
    """``path``, refused in one line when it resolves outside ``root`` (module docstring)."""
    if not inside(root, path):
        raise ImporterError(
            f"{path}: resolves outside the source folder {root} (a symbolic link or '..'); refusing to read it"
        )
    return path


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file (``.gz``: decompressed), bad bytes one line.
    Each line is decoded alone, so a bad byte is named by its own line."""
    try:
        with _open_bytes(path) as lines:
            for number, raw in enumerate(lines, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ImporterError(f"{path}:{number}: not UTF-8 text ({_decode_problem(error)})") from error
                yield number, line.lstrip("\ufeff") if number == 1 else line
    except _GZIP_ERRORS as error:
        raise ImporterError(f"{path}: a damaged or truncated gzip file ({error or type(error).__name__})") from error


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of a JSON-lines file (``.gz``: decompressed), blank lines skipped; a
    line that is not JSON, or not a JSON object, is refused in one line naming it."""
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ImporterError(f"{path}:{number}: not a JSON line ({error.msg})") from None
        except RecursionError:
            raise ImporterError(f"{path}:{number}: not a JSON line (nested too deeply)") from None
        if not isinstance(record, dict):
            raise ImporterError(f"{path}:{number}: a JSON {type(record).__name__}, not an object")
        yield number, record


def read_text(path: Path) -> str:
    """The whole of a UTF-8 text file (``.gz``: decompressed), bad bytes one line naming their line."""
    return "".join(line for _, line in text_lines(path))


def _decode_problem(error: UnicodeDecodeError) -> str:
    return f"byte 0x{error.object[error.start]:02x} at column {error.start + 1}"


def parquet_file(path: Path) -> pq.ParquetFile:
    """``path`` opened as Parquet; an empty, truncated or foreign file one line."""
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ImporterError(f"{path}: not a readable Parquet file ({' '.join(str(error).split())})") from error


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A whole Parquet file (``columns``: only those), damage one line naming the file."""
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ImporterError(f"{path}: not a readable Parquet file ({' '.join(str(error).split())})") from error


def batches(path: Path, batch_size: int, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """A Parquet file's rows in batches; a file damaged past its footer (a truncated row group) one line."""
    reader = parquet_file(path)
    try:
        yield from reader.iter_batches(batch_size=batch_size, columns=columns)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ImporterError(f"{path}: a damaged Parquet file ({' '.join(str(error).split())})") from error


def integer_grade(value, where: str) -> int:
    """``value`` as a relevance grade (module docstring); ``where`` names the row in the error."""
    grade: int | None = None
    if isinstance(value, str):
        text = value.strip()
        grade = int(text) if _INTEGER.match(text) and len(text) <= 20 else None
        if grade is None:
            try:  # "1.0" is the integer 1; "1.7" is not one
                number = float(text)
            except ValueError:
                raise ImporterError(f"{where}: the grade {value!r} is not an integer") from None
            grade = int(number) if math.isfinite(number) and number.is_integer() else None
    elif isinstance(value, Real) and not isinstance(value, bool) and _whole(value):
        grade = int(value)
    if grade is None:
        raise ImporterError(
            f"{where}: the grade {value!r} is not an integer (BEIR and trec_eval grades are integers; "
            "a fractional grade would be cut to another one)"
        )
    if abs(grade) > MAX_GRADE:
        raise ImporterError(f"{where}: the grade {value!r} is out of range (at most {MAX_GRADE})")
    return grade


def _whole(value: Real) -> bool:
    return isinstance(value, Integral) or (math.isfinite(float(value)) and float(value).is_integer())


def integer_grades(values, where) -> list[int]:
    """:func:`integer_grade` of each value; ``where(i)`` names row ``i`` (0-based) in an error."""
    return [integer_grade(value, where(i)) for i, value in enumerate(values)]
