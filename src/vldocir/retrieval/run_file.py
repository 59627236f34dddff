"""A run made elsewhere, evaluated as a retriever: a TREC run file or a Parquet run.

    python run.py retriever=run_file retriever.path=/runs/mysystem.trec retriever.id=mysystem

``retrieve`` reads the file, checks its ids against the benchmark, ranks each query's pages by
their own scores (at the file's precision; ties by page_id, vldocir's rule) and cuts them at
``depth``; from there the run is evaluated, aggregated and filed in the results store like any
other (``conf/retriever/run_file.yaml``). The file is only read, never written.

- **Formats.** ``trec``: ``qid Q0 docid rank score tag`` per line (trec_eval's; the rank column
  is ignored, as trec_eval ignores it). ``parquet``: columns ``query_id``, ``page_id``, ``score``
  (any other column, e.g. ``rank``, is ignored), such as a stored ``run.parquet``. ``auto``:
  Parquet when the file starts with Parquet's magic bytes, else TREC.
- **Ids.** A query or page id the benchmark does not have is an error naming up to 10 of them and
  their count; with ``on_unknown_ids=drop`` those rows are left out, counted in the manifest
  (``retrieval.unknown_ids``) and logged. Benchmark queries absent from the file are evaluated as
  empty rankings (0 on every metric, ``in_run = False`` in ``per_query.parquet``).
- **Scores.** Stored runs hold float32 scores; a float64 file is converted without changing its
  order (:func:`vldocir.data.runs.float32_keeping_order`); the manifest says what the conversion
  did (``retrieval.score_conversion``).
- **Key.** :meth:`cache_params` holds the file's SHA-256 and size (not its path), so an edited file
  is a new run and never a stale reuse, and the same file moved elsewhere is the same run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark
from vldocir.data.runs import TrecRunError, read_trec_run, run_from_rows
from vldocir.errors import ConfigError
from vldocir.io import file_digest
from vldocir.retrieval.base import Retriever

log = logging.getLogger(__name__)

FORMATS = ("auto", "trec", "parquet")
ON_UNKNOWN_IDS = ("error", "drop")
SHOWN_IDS = 10
PARQUET_MAGIC = b"PAR1"


class RunFileError(ConfigError):
    """The run file named by ``retriever.path`` cannot be evaluated (missing, malformed, other ids)."""


class RunFileRetriever(Retriever):
    """Serve the run in ``path`` (see the module docstring).

    Args:
        path: the run file (``retriever.path``).
        format: ``auto`` | ``trec`` | ``parquet``.
        on_unknown_ids: ``error`` | ``drop`` (rows naming queries or pages the benchmark lacks).
    """

    def __init__(self, path: str | None = None, format: str = "auto", on_unknown_ids: str = "error"):
        # Checked when used (cache_params, the pipeline's first call), so that a bad value is one
        # line from run.py rather than Hydra's instantiation traceback.
        self.path, self.format, self.on_unknown_ids = path, format, on_unknown_ids
        self.stats: dict[str, Any] = {}
        self._identity: tuple[Path, int, int, str] | None = None  # (path, bytes, mtime_ns, sha256)

    def _file(self) -> Path:
        if self.path is None or not str(self.path).strip() or str(self.path) == "???":
            raise RunFileError(
                "retriever.path is not set: name the run file, e.g. python run.py retriever=run_file "
                "retriever.path=/runs/mysystem.trec retriever.id=mysystem"
            )
        if self.format not in FORMATS:
            raise RunFileError(f"retriever.format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.on_unknown_ids not in ON_UNKNOWN_IDS:
            raise RunFileError(
                f"retriever.on_unknown_ids must be one of {', '.join(ON_UNKNOWN_IDS)}, got {self.on_unknown_ids!r}"
            )
        path = Path(str(self.path)).expanduser().resolve()
        if not path.is_file():
            raise RunFileError(f"retriever.path={self.path}: no such file")
        return path

    def _resolved_format(self, path: Path) -> str:
        if self.format != "auto":
            return self.format
        with open(path, "rb") as handle:
            return "parquet" if handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC else "trec"

    def cache_params(self) -> dict[str, Any]:
        path = self._file()
        stat = path.stat()
        if self._identity is None or self._identity[:3] != (path, stat.st_size, stat.st_mtime_ns):
            self._identity = (path, stat.st_size, stat.st_mtime_ns, file_digest(path, "sha256"))
        return {
            "run_file": {
                "sha256": self._identity[3],
                "bytes": stat.st_size,
                "format": self._resolved_format(path),
                "on_unknown_ids": self.on_unknown_ids,
            }
        }

    def _unchanged(self, path: Path) -> None:
        """The file still has the size and mtime it had when it was hashed for the run key."""
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) != self._identity[1:3]:
            raise RunFileError(
                f"retriever.path={path} changed after its run key was computed; run again "
                "(the new content is a new run)"
            )

    def retrieve(self, bench: Benchmark, queries: dict[str, str], depth: int, cache: ArtifactCache) -> pa.Table:
        """The file's top ``depth`` pages of each query in ``queries``, as a run (``RUN_SCHEMA``)."""
        if self._identity is None:  # called without the pipeline, which asks for the run key first
            self.cache_params()
        path, size, _, sha256 = self._identity
        params = {
            "sha256": sha256,
            "bytes": size,
            "format": self._resolved_format(path),
            "on_unknown_ids": self.on_unknown_ids,
        }
        self._unchanged(path)
        rows = self._read(path, params["format"])
        self._unchanged(path)
        if not rows.num_rows:
            raise RunFileError(f"retriever.path={path} holds no rows")
        stats: dict[str, Any] = {
            "run_file": {"path": str(path), **params},
            "rows_read": rows.num_rows,
            "queries_in_file": len(pc.unique(rows.column("query_id"))),
        }
        if "tag" in rows.column_names:
            tags = pc.unique(rows.column("tag")).to_pylist()
            stats["tags"] = tags[:SHOWN_IDS] + ([f"... {len(tags)} tags"] if len(tags) > SHOWN_IDS else [])
        unknown: dict[str, Any] = {}
        rows = self._known(
            rows,
            "query_id",
            pa.array(bench.queries["query_id"].astype(str), pa.string()),
            "query",
            path,
            bench,
            unknown,
        )
        rows = self._known(
            rows, "page_id", bench.arrow("pages", ["page_id"]).column("page_id"), "page", path, bench, unknown
        )
        if unknown:
            stats["unknown_ids"] = {**unknown, "action": "dropped (retriever.on_unknown_ids=drop)"}
        asked = pc.is_in(rows.column("query_id"), value_set=pa.array(list(queries), pa.string()))
        if not pc.all(asked).as_py():  # a setting that asks for some of the queries only
            stats["rows_of_queries_not_asked"] = rows.num_rows - pc.sum(asked).as_py()
            rows = rows.filter(asked)
        self._refuse_duplicates(rows, path)
        run, made = run_from_rows(rows.select(["query_id", "page_id", "score"]), list(queries), depth)
        present = len(pc.unique(run.column("query_id")))
        stats.update(
            rows_kept=made["rows_kept"],
            rows_beyond_depth=made["rows_in"] - made["rows_kept"],
            queries_in_run=present,
            queries_missing=len(queries) - present,
            score_conversion=made["score_conversion"],
        )
        conversion = made["score_conversion"]
        if conversion["changed_rows"]:
            log.warning(
                "%s: %d pair(s) of distinct scores become equal in float32 and page_id would rank them the "
                "other way round; %d score(s) of %d quer(ies) were changed by the least amount that keeps the "
                "file's order (%s); see retrieval.score_conversion in the manifest",
                path,
                conversion["reordered_pairs"],
                conversion["changed_rows"],
                conversion["changed_queries"],
                conversion["method"],
            )
        if stats["queries_missing"]:
            log.warning(
                "%s has no rows for %d of the %d queries: they score 0 (in_run = False in per_query.parquet)",
                path,
                stats["queries_missing"],
                len(queries),
            )
        self.stats = stats
        return run

    def _read(self, path: Path, format: str) -> pa.Table:
        """``query_id``, ``page_id`` (string) and ``score`` (float64), plus ``tag`` for TREC."""
        if format == "trec":
            try:
                return read_trec_run(path)
            except TrecRunError as error:
                raise RunFileError(f"retriever.path: {error}") from error
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as error:
            raise RunFileError(f"retriever.path={path} is not a readable Parquet file ({error})") from error
        missing = [c for c in ("query_id", "page_id", "score") if c not in table.column_names]
        if missing:
            raise RunFileError(
                f"retriever.path={path}: a Parquet run needs columns query_id, page_id, score; "
                f"{', '.join(missing)} missing (it has {', '.join(table.column_names)})"
            )
        try:
            table = pa.table(
                {
                    "query_id": pc.cast(table.column("query_id"), pa.string()),
                    "page_id": pc.cast(table.column("page_id"), pa.string()),
                    "score": pc.cast(table.column("score"), pa.float64()),
                }
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise RunFileError(f"retriever.path={path}: ids must be strings and scores numbers ({error})") from error
        for column in table.column_names:
            if table.column(column).null_count:
                raise RunFileError(f"retriever.path={path}: {table.column(column).null_count} row(s) have no {column}")
        nan = pc.is_nan(table.column("score"))
        if pc.any(nan).as_py():
            first = int(np.flatnonzero(nan.to_numpy(zero_copy_only=False))[0])
            raise RunFileError(
                f"retriever.path={path}: {pc.sum(nan).as_py()} score(s) are NaN, the first in row {first}"
            )
        return table

    def _known(
        self,
        rows: pa.Table,
        column: str,
        known: pa.Array,
        what: str,
        path: Path,
        bench: Benchmark,
        unknown: dict[str, Any],
    ) -> pa.Table:
        """``rows`` whose ``column`` is one of ``known``; the others are an error, or dropped and counted."""
        inside = pc.is_in(rows.column(column), value_set=known)
        n_rows = rows.num_rows - pc.sum(inside).as_py()
        if not n_rows:
            return rows
        ids = pc.unique(pc.filter(rows.column(column), pc.invert(inside))).to_pylist()
        message = (
            f"{path} names {len(ids)} {what} id(s) that benchmark {bench.name} does not have "
            f"({n_rows} row(s)): {', '.join(map(str, ids[:SHOWN_IDS]))}"
            + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")
        )
        if self.on_unknown_ids == "error":
            raise RunFileError(
                f"retriever.path: {message}. Was the run made on another benchmark? "
                "retriever.on_unknown_ids=drop leaves those rows out"
            )
        log.warning("%s; left out (retriever.on_unknown_ids=drop)", message)
        unknown[f"{what}_ids"] = {"ids": len(ids), "rows": n_rows, "examples": ids[:SHOWN_IDS]}
        return rows.filter(inside)

    @staticmethod
    def _refuse_duplicates(rows: pa.Table, path: Path) -> None:
        """A page listed twice for one query has no single rank: refuse it, naming the first one."""
        q, p = (
            pc.dictionary_encode(rows.column(c).combine_chunks()).indices.to_numpy() for c in ("query_id", "page_id")
        )
        key = q.astype(np.int64) * (1 << 32) + p
        unique, first_seen, counts = np.unique(key, return_index=True, return_counts=True)
        if len(unique) == len(key):
            return
        row = int(first_seen[np.argmax(counts > 1)])
        raise RunFileError(
            f"retriever.path={path} lists page {rows.column('page_id')[row].as_py()} more than once for "
            f"query {rows.column('query_id')[row].as_py()} ({len(key) - len(unique)} duplicate row(s)); "
            "keep one row per query and page"
        )
