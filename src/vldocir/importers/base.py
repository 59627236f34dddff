"""The importer interface: foreign data in, a benchmark of this project's five tables out.

An importer is a small dataclass of its options (``source``: a local path or ``hf://<org>/<name>``,
``revision``, then its own, e.g. ``split`` or ``languages``) whose :meth:`Importer.read` turns the
source into an :class:`ImportedData`: pandas tables *close to* the benchmark schema
(:mod:`vldocir.data.schema`), plus what it dropped and why. :func:`write_imported` does the rest,
the same way for every format:

- ``pages`` (a DataFrame, or an iterable of DataFrame / Arrow chunks consumed once, so that a corpus
  of 26,000 page images never sits in memory): ``page_id``, ``doc_id``, optionally ``page_number``
  (the page's position in its document as the source numbers it, 0- or 1-based alike: distances
  between evidence pages are measured on it; absent: order of appearance in the document), ``image`` (encoded
  bytes, or a ``datasets.Image`` struct ``{bytes, path}``) or ``image_file`` (a file to copy), and
  ``dom_text`` (the source's text layer or provided text: a PDF's text layer, ViDoRe v3's markdown,
  a BEIR passage), ``ocr_text``, ``width``/``height`` (read from the image when absent). Images are
  written as files under ``images/`` (the bytes as given: no re-encoding), and texts and extra
  columns wait on disk in sorted runs until the pages table is written from them in page_id order,
  batch by batch (:class:`~vldocir.data.benchmark.SortedBatches`): what an import holds per page is
  its ids, numbers, image path and size. ``page_index`` is renumbered densely within each document
  (``page_number`` stays as a column).
- ``documents`` (optional): ``doc_id``, ``source``, ``domain``, ``title``, ``url``, ``license``;
  documents named by pages but missing here get :attr:`ImportedData.source`; ``n_pages`` is counted.
- ``queries``: ``query_id``, ``text``, ``answer``, and optionally ``source``, ``domain``
  (absent: those of the query's first evidence document), ``generator``, ``language``,
  ``evidence_types``; further columns (``query_types``, ...) are kept.
- ``qrels``: ``query_id``, ``page_id``, optionally ``grade`` (default 1), ``element_ids`` and
  ``n_elements`` (evidence elements on that page: two or more on a query's one page make it
  ``page_multi``); further columns are kept.
- ``elements`` (optional): ``page_id``, ``element_id``, ``bbox``, ``element_type``.

``queries`` and ``qrels`` may also be callables returning the DataFrame, called once the pages have
streamed by (formats whose queries come row by row with their page images, ViDoRe v1's QA form).

:func:`write_imported` then, counting every row it leaves out by table and reason (``dropped``):
drops pages with a repeated id or a repeated page number in their document, pages without an
image in a corpus that has images, and qrels with grade <= 0 (not evidence) or of unknown queries;
collapses repeated (query, page) qrels (largest grade); drops the queries whose text is blank,
that have no evidence left, or one of whose evidence pages is not in the corpus (their evidence
would be incomplete); labels each query's evidence structure with the shared rule
(:func:`vldocir.data.evidence.evidence_structures`; a source that carries its own ``evidence_structure``,
vldocir's hub export, keeps it where it is of the kind the rule finds); and writes the tables with
:func:`vldocir.data.benchmark.write_benchmark` and a ``benchmark.json`` holding ``imported_from``
(format, source, revision, licence), the declared ``sources`` and ``built_by`` (the importer's spec,
``near_max_gap`` and the ``structure_rules`` that labelled the queries, counts kept, dropped per
table and reason, the distribution per structure, per language and per structure within each
language (``structures_per_language``: a query translated into six languages is one query of each
language's set), the source labels no mapping table names (``unmapped_labels``), the documents
without a text layer, how document ids were found, notes). Without document ids
(:data:`NO_DOCUMENT_IDS`) a multi-page query is ``multi_page_docs_unknown``.

Every ``hf://`` source must be pinned to a commit (:meth:`Importer.check_pinned`, run before any
read), unless ``allow_unpinned``. Source labels become evidence types only through a mapping table
(:meth:`ImportedData.evidence_types`, :data:`EVIDENCE_TYPE_VOCABULARY`).

Importers count what only they can see with :meth:`ImportedData.drop` (``unanswerable``,
``evidence_page_zero`` for a page 0 in a 1-indexed list, ``evidence_page_past_document_end``,
``language_not_selected``, ...). :func:`import_benchmark` runs an importer into a directory (staged,
renamed into place) and :func:`open_imported` is the pipeline's first-use import, cached and refused
when the config's importer spec differs from the one recorded.
"""

from __future__ import annotations

import abc
import dataclasses
import io
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vldocir.data.benchmark import INFO_FILE, Benchmark, SortedBatches, load_benchmark, write_benchmark
from vldocir.data.evidence import NEAR_MAX_GAP, evidence_structures, structure_rules
from vldocir.data.schema import (
    DECLARED_SOURCES_KEY,
    EVIDENCE_STRUCTURES,
    IMAGE_TYPE,
    UNKNOWN_DOCUMENTS_STRUCTURE,
)
from vldocir.errors import ConfigError, VldocirError

log = logging.getLogger(__name__)

HUB_PREFIX = "hf://"
PINNED_REVISION = re.compile(r"^[0-9a-f]{40}$")
"""A hub revision that names one commit (a branch or tag such as ``main`` moves)."""
EVIDENCE_TYPE_VOCABULARY = ("text", "layout", "table", "chart", "image", "metadata", "other")
"""The evidence types an imported query may carry: every importer maps its source's labels onto these
through a table of its own (:meth:`ImportedData.evidence_types`); a label missing from the table is
left out and counted (``built_by.unmapped_labels``), never passed through."""
IMPORT_VERSION = 2
"""Bumped whenever what :func:`write_imported` writes for the same input changes (2: the largest-gap
structure rule, multi_page_docs_unknown, mapped evidence types, merged duplicate texts); an import of
another version is not reused (:func:`open_imported`)."""
IMAGES_PER_FOLDER = 1000
RUN_ROWS = 4096
"""Pages per sorted run of texts on disk while an import streams (a run is held whole before it is written)."""
RUN_READ_ROWS = 256
"""Rows read at a time from each run while the runs are merged into the pages table."""
BLOCK_ROWS = 1024
"""Pages per batch (row group) of the written pages table."""


class ImporterError(VldocirError, ValueError):
    """A source an importer cannot read; the message names the dataset or file and what is wrong."""


def fetch(source: str, revision: str | None = None, allow_patterns: list[str] | None = None) -> Path:
    """A local folder holding ``source``: the folder itself, or for ``hf://<org>/<name>`` the hub
    snapshot (``huggingface_hub.snapshot_download``, as a user would fetch it; offline with
    ``HF_HUB_OFFLINE=1`` it is read from the hub cache)."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        from huggingface_hub import snapshot_download

        repo_id = text[len(HUB_PREFIX) :]
        try:
            return Path(
                snapshot_download(
                    repo_id=repo_id, repo_type="dataset", revision=revision, allow_patterns=allow_patterns
                )
            )
        except Exception as error:  # offline, gated, missing: say which dataset and how to fix it
            detail = " ".join(str(error).split())
            raise ImporterError(
                f"could not fetch dataset '{repo_id}' (revision {revision or 'main'}) from the Hugging Face hub: "
                f"{detail}. Download it once with network access, or point the importer's source at a local copy"
            ) from error
    path = Path(text).expanduser()
    if not path.exists():
        raise ImporterError(f"import source {path} does not exist")
    return path


@dataclass
class ImportedData:
    """Foreign data as tables close to the benchmark schema (see the module docstring)."""

    pages: pd.DataFrame | pa.Table | Iterable[pd.DataFrame | pa.Table]
    queries: pd.DataFrame | Callable[[], pd.DataFrame]
    qrels: pd.DataFrame | Callable[[], pd.DataFrame]
    source: str
    """The source label of documents and queries that name none (e.g. ``vidore_v3_hr``)."""
    documents: pd.DataFrame | None = None
    elements: pd.DataFrame | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """``format``, ``source``, ``revision``, ``license`` and anything else worth recording."""
    document_ids: str = "from the source"
    """How documents were identified, said in benchmark.json and the summary: ``from the source``,
    ``derived from <what>``, or :data:`NO_DOCUMENT_IDS` (each page its own document; a reason may follow it)."""
    notes: list[str] = field(default_factory=list)
    dropped: dict[str, Counter] = field(default_factory=dict)
    unmapped_labels: Counter = field(default_factory=Counter)
    """Source labels that no mapping table names, with how often they were seen (left out)."""
    qrels_file: Path | None = None
    """The file the judgements came from, named when none of them is usable (else the source is)."""

    def drop(self, table: str, reason: str, n: int = 1) -> None:
        """Count ``n`` rows of ``table`` left out for ``reason``."""
        if n:
            self.dropped.setdefault(table, Counter())[reason] += int(n)

    def evidence_types(self, labels: Iterable[Any], table: dict[str, str | None]) -> list[str]:
        """The distinct evidence types (sorted) of a query's source ``labels`` through an importer's
        mapping ``table`` (keys lower-case; a value None: a label that names no evidence type, such as
        a form's placeholder, dropped on purpose). A label the table lacks is counted in
        :attr:`unmapped_labels` and left out."""
        types = set()
        for label in labels:
            if label is None or (isinstance(label, float) and label != label):
                continue
            text = str(label).strip()
            if not text:
                continue
            if text.lower() not in table:
                self.unmapped_labels[text] += 1
                continue
            if table[text.lower()] is not None:
                types.add(table[text.lower()])
        return sorted(types)

    def name_rows(self, reason: str, rows: list[str], limit: int = 10) -> None:
        """A note naming the rows left out for ``reason`` (at most ``limit``, then how many more)."""
        if rows:
            more = f"; and {len(rows) - limit} more" if len(rows) > limit else ""
            self.notes.append(f"{reason} ({len(rows)}): " + "; ".join(rows[:limit]) + more)


NO_DOCUMENT_IDS = (
    f"none in the source: each page is its own document, so a multi-page query is {UNKNOWN_DOCUMENTS_STRUCTURE}"
)


@dataclass
class Importer(abc.ABC):
    """One format's importer: its options as dataclass fields, :meth:`read` the data."""

    source: str
    revision: str | None = None
    near_max_gap: int = NEAR_MAX_GAP
    """Largest page distance of a doc_near pair (:func:`~vldocir.data.evidence.pair_structure`)."""
    allow_unpinned: bool = False
    """Read an ``hf://`` source at a revision that is not a commit (``main``, a tag, null): refused
    otherwise (:meth:`check_pinned`). Left out of :meth:`spec`: it does not change what is read."""

    format: ClassVar[str] = ""

    @abc.abstractmethod
    def read(self) -> ImportedData:
        """The source's data as :class:`ImportedData`."""

    def provenance(self, **overrides: Any) -> dict[str, Any]:
        """Where an import comes from, the first keys of its :attr:`ImportedData.info`: ``format``,
        ``source``, ``revision`` and ``license`` (the importer's, where it has one), then ``overrides``."""
        origin = {"format": self.format, "source": str(self.source), "revision": self.revision}
        return origin | {"license": getattr(self, "license", None)} | overrides

    def spec(self) -> dict[str, Any]:
        """What determines the import, recorded in benchmark.json and compared on reuse."""
        cls = type(self)
        spec = {"_target_": f"{cls.__module__}.{cls.__qualname__}", **dataclasses.asdict(self)}
        spec.pop("allow_unpinned", None)
        return spec

    def hub_sources(self) -> list[tuple[str, str, str | None]]:
        """``(option, source, revision)`` of every source the importer reads (BEIR adds its qrels')."""
        return [("source", str(self.source), self.revision)]

    def check_pinned(self) -> None:
        """Refuse, in one line, an ``hf://`` source whose revision is not a full commit, unless
        :attr:`allow_unpinned`: a branch moves, and a benchmark's numbers must name what they read."""
        for option, source, revision in self.hub_sources():
            if not source.startswith(HUB_PREFIX) or PINNED_REVISION.match(str(revision or "")):
                continue
            if self.allow_unpinned:
                log.warning("reading %s at revision %s, not a pinned commit (allow_unpinned)", source, revision)
                continue
            where = "revision" if option == "source" else f"{option.removesuffix('source')}revision"
            raise ImporterError(
                f"dataset.importer.{option}={source} is read at revision {revision or 'null'}, not a pinned commit: "
                f"set dataset.importer.{where} to a full 40-character commit (the configs' pins and where they "
                "come from: docs/evaluation.md, Public benchmarks), or dataset.importer.allow_unpinned=true"
            )


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


def _chunks(pages) -> Iterator[pd.DataFrame]:
    if isinstance(pages, (pd.DataFrame, pa.Table, pa.RecordBatch)):
        pages = [pages]
    for chunk in pages:
        yield chunk.to_pandas() if isinstance(chunk, (pa.Table, pa.RecordBatch)) else chunk


def _image_bytes(value) -> bytes | None:
    if isinstance(value, dict):
        value = value.get("bytes")
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return bytes(value) if len(value) else None


_EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif", "TIFF": "tif", "BMP": "bmp"}


class _PageWriter:
    """Writes page images to files as chunks stream by, and the pages' texts and extra columns to
    sorted runs on disk (``runs``, :data:`RUN_ROWS` rows each). Keeps per page only its ids,
    numbers, image path, size and whether it has text (Python lists): no image bytes, no text, so
    what an import holds grows by a few hundred bytes a page whatever the pages hold."""

    META = ("page_id", "doc_id", "page_number", "path", "width", "height", "has_text")

    def __init__(self, root: Path, runs: Path, data: ImportedData):
        self.root, self.runs, self.data = root, runs, data
        self.meta: dict[str, list] = {c: [] for c in self.META}
        self.pending: list[pa.Table] = []  # texts and extra columns of kept rows not yet in a run
        self.run_of: list[int] = []  # per kept row: its run and its position there (runs sorted by page_id)
        self.position: list[int] = []
        self.run_files: list[Path] = []
        self.seen: set[str] = set()
        self.numbers: dict[str, set[int]] = {}
        self.next_number: Counter = Counter()
        self.n_images = 0

    def write(self, chunk: pd.DataFrame) -> None:
        from PIL import Image, UnidentifiedImageError

        has = set(chunk.columns)
        kept = []
        for position, row in enumerate(chunk.to_dict("records")):
            page_id, doc_id = str(row["page_id"]), str(row["doc_id"])
            if page_id in self.seen:
                self.data.drop("pages", "duplicate_page_id")
                continue
            number = row.get("page_number") if "page_number" in has else None
            number = self.next_number[doc_id] if number is None or pd.isna(number) else int(number)
            self.next_number[doc_id] = max(self.next_number[doc_id], number + 1)
            if number in self.numbers.setdefault(doc_id, set()):
                self.data.drop("pages", "duplicate_page_number")
                continue
            image = _image_bytes(row.get("image")) if "image" in has else None
            if image is None and "image_file" in has and row.get("image_file"):
                image = Path(row["image_file"]).read_bytes()
            path, width, height = None, _int(row.get("width")), _int(row.get("height"))
            if image is not None:
                try:
                    with Image.open(io.BytesIO(image)) as opened:  # (reads the header only)
                        width, height, kind = opened.width, opened.height, opened.format
                except (UnidentifiedImageError, OSError):
                    self.data.drop("pages", "unreadable_image")
                    continue
                folder, extension = self.n_images // IMAGES_PER_FOLDER, _EXTENSIONS.get(kind, "img")
                path = f"images/{folder:04d}/{self.n_images:07d}.{extension}"
                target = self.root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(image)
                self.n_images += 1
            self.seen.add(page_id)
            self.numbers[doc_id].add(number)
            # has_text is appended below, for the chunk's kept rows at once
            for column, value in zip(self.META[:-1], (page_id, doc_id, number, path, width, height), strict=True):
                self.meta[column].append(value)
            kept.append(position)
        extra = [c for c in chunk.columns if c not in _PAGE_INPUT_COLUMNS]
        columns = pa.Table.from_pandas(chunk.iloc[kept][extra].reset_index(drop=True), preserve_index=False)
        arrays, names = (list(columns.columns), list(columns.column_names)) if extra else ([], [])
        for column in ("dom_text", "ocr_text"):
            values = [_text(v) for v in chunk[column].iloc[kept]] if column in has else [None] * len(kept)
            arrays.append(pa.array(values, pa.string()))
            names.append(column)
        rest = pa.Table.from_arrays(arrays, names=names)
        text = pc.utf8_trim_whitespace(pc.fill_null(rest.column("dom_text"), ""))
        self.meta["has_text"] += pc.greater(pc.utf8_length(text), 0).to_pylist()
        self.pending.append(rest)
        if sum(t.num_rows for t in self.pending) >= RUN_ROWS:
            self._flush()

    def _flush(self) -> None:
        """The pending rows, sorted by page_id, as the next run file."""
        if not self.pending:
            return
        rows = pa.concat_tables(self.pending, promote_options="permissive")
        self.pending = []
        if not rows.num_rows:
            return
        first = len(self.run_of)
        order = pc.sort_indices(pa.array(self.meta["page_id"][first:], pa.string())).to_numpy()
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        self.run_of += [len(self.run_files)] * len(order)
        self.position += position.tolist()
        file = self.runs / f"run-{len(self.run_files):05d}.parquet"
        pq.write_table(rows.take(order), file, row_group_size=RUN_READ_ROWS)
        self.run_files.append(file)

    def finish(self) -> pd.DataFrame:
        """The kept pages' small fields (``_row``: the row's number among those written), after the
        drop of pages without an image in a corpus that has images."""
        self._flush()
        meta = pd.DataFrame(self.meta)
        meta["_row"] = np.arange(len(meta))
        self.meta = {}
        with_image = meta["path"].notna().to_numpy()
        if with_image.any() and not with_image.all():
            self.data.drop("pages", "missing_image", int((~with_image).sum()))
            meta = meta[with_image].reset_index(drop=True)
        return meta

    def rest_schema(self) -> pa.Schema:
        """The texts' and extra columns' schema over all runs (types promoted as a concatenation does)."""
        schemas = [pq.read_schema(file) for file in self.run_files]
        if not schemas:
            return pa.schema([("dom_text", pa.string()), ("ocr_text", pa.string())])
        return pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")

    def rest(self, rows: np.ndarray, schema: pa.Schema) -> Iterator[pa.Table]:
        """The texts and extra columns of ``rows`` (``_row`` numbers, in page_id order),
        :data:`BLOCK_ROWS` at a time: a merge of the runs, each read forward a row group at a time."""
        run_of, position = np.asarray(self.run_of)[rows], np.asarray(self.position)[rows]
        readers = [_RunReader(file, schema) for file in self.run_files]
        for start in range(0, len(rows), BLOCK_ROWS):
            runs, positions = run_of[start : start + BLOCK_ROWS], position[start : start + BLOCK_ROWS]
            parts, where = [], np.empty(len(runs), dtype=np.int64)
            offset = 0
            for run in np.unique(runs):
                mine = np.flatnonzero(runs == run)  # (ascending positions: the run is sorted as the output)
                parts.append(readers[run].take(positions[mine]))
                where[mine] = offset + np.arange(len(mine))
                offset += len(mine)
            block = pa.concat_tables(parts) if parts else schema.empty_table()
            yield block.take(pa.array(where))


class _RunReader:
    """One sorted run, read forward: :meth:`take` rows at increasing positions."""

    def __init__(self, file: Path, schema: pa.Schema):
        self.schema = schema
        self.batches = pq.ParquetFile(file).iter_batches(batch_size=RUN_READ_ROWS, use_threads=False)
        self.buffer, self.start = schema.empty_table(), 0

    def take(self, positions: np.ndarray) -> pa.Table:
        while self.start + self.buffer.num_rows <= positions[-1]:
            batch = _conform(pa.Table.from_batches([next(self.batches)]), self.schema)
            self.buffer = pa.concat_tables([self.buffer, batch]).combine_chunks()
        taken = self.buffer.take(pa.array(positions - self.start))
        keep_from = int(positions[-1]) + 1 - self.start  # (later calls ask for later rows only)
        self.buffer, self.start = self.buffer.slice(keep_from), int(positions[-1]) + 1
        return taken


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns, in order and type; a column it lacks is null."""
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


_PAGE_INPUT_COLUMNS = {
    "page_id",
    "doc_id",
    "page_number",
    "page_index",
    "image",
    "image_file",
    "width",
    "height",
    "dom_text",
    "ocr_text",
}


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _text(value) -> str | None:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return None
    return str(value)


def _keep(frame: pd.DataFrame, mask, data: ImportedData, table: str, reason: str) -> pd.DataFrame:
    """``frame[mask]``, counting the rows left out."""
    mask = np.asarray(mask, dtype=bool)
    data.drop(table, reason, int((~mask).sum()))
    return frame[mask]


MAX_GRADE = 2**31 - 1
"""The largest grade a qrel may have (``qrels.grade`` is int32); BEIR and trec_eval grades are integers."""


def _qrels(data: ImportedData, query_ids: pd.Series) -> pd.DataFrame:
    qrels = data.qrels.copy()
    qrels["query_id"] = qrels["query_id"].astype(str)
    qrels["page_id"] = qrels["page_id"].astype(str)
    if "grade" in qrels:  # (importers check their grades where they can name the file's row; this is the backstop)
        grades = qrels["grade"].fillna(1)
        whole = pd.to_numeric(grades, errors="coerce")
        bad = whole.isna() | (whole != np.floor(whole)) | (whole.abs() > MAX_GRADE)
        if bad.any():
            at = int(np.flatnonzero(bad.to_numpy())[0])
            raise ImporterError(
                f"{_origin(data)}: qrels row {at} (query {qrels['query_id'].iloc[at]}, page "
                f"{qrels['page_id'].iloc[at]}): the grade {grades.iloc[at]!r} is not an integer of at most {MAX_GRADE}"
            )
        qrels["grade"] = whole.astype("int64")
    else:
        qrels["grade"] = 1
    if "element_ids" not in qrels:
        qrels["element_ids"] = None
    qrels = _keep(qrels, qrels["grade"] > 0, data, "qrels", "not_relevant")
    qrels = _keep(qrels, qrels["query_id"].isin(query_ids), data, "qrels", "unknown_query")
    if qrels.duplicated(["query_id", "page_id"]).any():  # repeated page numbers collapse
        n_before = len(qrels)
        qrels = qrels.sort_values("grade", ascending=False, kind="stable")
        merged = qrels.groupby(["query_id", "page_id"], sort=False)["element_ids"].agg(_union)
        qrels = qrels.drop_duplicates(["query_id", "page_id"]).drop(columns="element_ids")
        qrels = qrels.join(merged, on=["query_id", "page_id"])
        data.drop("qrels", "duplicate", n_before - len(qrels))
    return qrels


def _origin(data: ImportedData) -> str:
    """Where an import's judgements came from, for an error: the qrels file, else the source."""
    return str(data.qrels_file or data.info.get("source") or data.source)


def _union(values) -> list[str] | None:
    ids = [e for v in values if v is not None and not (isinstance(v, float)) for e in v]
    return sorted(set(ids)) if ids else None


def write_imported(
    data: ImportedData,
    out_dir: str | Path,
    *,
    name: str,
    near_max_gap: int = NEAR_MAX_GAP,
    importer: dict[str, Any] | None = None,
    version: str | None = None,
) -> Benchmark:
    """Write ``data`` as benchmark ``name`` into ``out_dir`` (see the module docstring)."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix=".pages-", dir=root))
    try:
        return _write_imported(data, root, runs, name, near_max_gap, importer, version)
    finally:
        shutil.rmtree(runs, ignore_errors=True)


def _write_imported(data, root, runs, name, near_max_gap, importer, version) -> Benchmark:
    writer = _PageWriter(root, runs, data)
    for chunk in _chunks(data.pages):
        writer.write(chunk)
    pages = writer.finish()
    if pages.empty:
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(data.dropped.get("pages", {}).items()))
        raise ImporterError(
            f"{data.info.get('source') or data.source}: no page to import"
            + (f" (left out: {dropped})" if dropped else " (the corpus is empty)")
        )
    without_text = _documents_without_text(pages)
    pages["page_index"] = pages.groupby("doc_id")["page_number"].rank(method="first").astype("int32") - 1

    documents = data.documents.copy() if data.documents is not None else pd.DataFrame({"doc_id": []})
    documents["doc_id"] = documents["doc_id"].astype(str)
    documents = documents.drop_duplicates("doc_id")
    known = set(documents["doc_id"])
    missing = sorted(set(pages["doc_id"]) - known)
    documents = pd.concat([documents, pd.DataFrame({"doc_id": missing})], ignore_index=True)
    documents = _keep(documents, documents["doc_id"].isin(pages["doc_id"]), data, "documents", "no_pages")
    for column in ("source", "domain", "title", "url", "license"):
        documents[column] = documents.get(column)
    documents["source"] = documents["source"].fillna(data.source)
    documents["n_pages"] = documents["doc_id"].map(pages.groupby("doc_id").size()).astype("int32")

    if callable(data.queries):
        data.queries = data.queries()
    if callable(data.qrels):
        data.qrels = data.qrels()
    queries = data.queries.copy()
    queries["query_id"] = queries["query_id"].astype(str)
    queries = _keep(queries, ~queries.duplicated("query_id"), data, "queries", "duplicate_query_id")
    blank = queries["text"].isna() | (queries["text"].astype("string").str.strip() == "")
    queries = _keep(queries, ~blank.to_numpy(), data, "queries", "blank_text")
    qrels = _qrels(data, queries["query_id"])

    page_doc = pages.set_index("page_id")["doc_id"]
    outside = qrels.loc[~qrels["page_id"].isin(page_doc.index), "query_id"].unique()
    queries = _keep(queries, ~queries["query_id"].isin(outside), data, "queries", "evidence_not_in_corpus")
    queries = _keep(queries, queries["query_id"].isin(qrels["query_id"]), data, "queries", "no_evidence")
    if queries.empty:
        dropped = ", ".join(
            f"{table} {n} {reason}"
            for table in ("queries", "qrels")
            for reason, n in data.dropped.get(table, {}).items()
        )
        raise ImporterError(
            f"{_origin(data)}: no query is left with evidence in the corpus"
            + (f" (left out: {dropped})" if dropped else " (no queries)")
        )
    qrels = qrels[qrels["query_id"].isin(queries["query_id"])].copy()
    qrels["doc_id"] = qrels["page_id"].map(page_doc)
    qrels["page_number"] = qrels["page_id"].map(pages.set_index("page_id")["page_number"])
    if "n_elements" not in qrels:
        qrels["n_elements"] = qrels["element_ids"].map(lambda ids: len(ids) if ids is not None else 1)
    documents_known = not data.document_ids.startswith(NO_DOCUMENT_IDS)  # (a reason may follow the phrase)
    structures = queries["query_id"].map(evidence_structures(qrels, near_max_gap, documents_known=documents_known))
    if "evidence_structure" in queries:  # (a source that labels its own: vldocir's hub export)
        structures = _declared_structures(queries["evidence_structure"], structures, data)
    queries["evidence_structure"] = structures

    doc_info = documents.set_index("doc_id")
    first = qrels.sort_values(["query_id", "page_number"]).drop_duplicates("query_id")
    first_doc = first.set_index("query_id")["doc_id"]
    for column in ("source", "domain"):
        inherited = queries["query_id"].map(first_doc).map(doc_info[column])
        queries[column] = queries[column].fillna(inherited) if column in queries else inherited
    for column in ("answer", "generator", "language"):
        queries[column] = queries.get(column)
    if "evidence_types" not in queries:
        queries["evidence_types"] = [[] for _ in range(len(queries))]

    elements = _elements(data, pages)
    qrels = qrels.drop(columns=["page_number"]).rename(columns={"n_elements": "n_evidence_elements"})
    pages_table = _pages_table(pages, writer)

    sources = sorted(set(documents["source"].dropna()) | set(queries["source"].dropna()))
    built_by = {
        "importer": importer,
        "import_version": IMPORT_VERSION,
        "near_max_gap": near_max_gap,
        "document_ids": data.document_ids,
        "kept": {"documents": len(documents), "pages": len(pages), "queries": len(queries), "qrels": len(qrels)},
        "dropped": {table: dict(sorted(counts.items())) for table, counts in sorted(data.dropped.items())},
        "structure_rules": _structure_rules(near_max_gap, importer),
        "structures": _structure_counts(queries),
        "languages": {str(k): int(v) for k, v in queries["language"].value_counts().sort_index().items()},
        "structures_per_language": {
            str(language): _structure_counts(group) for language, group in queries.groupby("language", sort=True)
        }
        if queries["language"].nunique() >= 2
        else {},
        "unmapped_labels": dict(sorted(data.unmapped_labels.items())),
        "grades": {str(k): int(v) for k, v in qrels["grade"].value_counts().sort_index().items()},
        "documents_without_text": {"count": len(without_text), "doc_ids": without_text[:20]},
        "notes": list(data.notes),
    }
    info = {
        "name": name,
        "version": version or str(data.info.get("revision") or "unversioned"),
        DECLARED_SOURCES_KEY: sources,
        "rendered": bool(pages["path"].notna().any()),
        "imported_from": {k: data.info.get(k) for k in ("format", "source", "revision", "license")}
        | {k: v for k, v in data.info.items() if k not in ("format", "source", "revision", "license")},
        "built_by": built_by,
    }
    tables = {"documents": documents, "pages": pages_table, "elements": elements, "queries": queries, "qrels": qrels}
    return write_benchmark(root, tables, info)


_STRUCTURE_KIND = {
    "page_single": "one page",
    "page_multi": "one page",
    "doc_adjacent": "consecutive pages",
    "doc_near": "pages apart",
    "doc_far": "pages apart",
    "cross_doc": "documents",
    UNKNOWN_DOCUMENTS_STRUCTURE: "documents unknown",
}
"""What the evidence itself fixes of a structure: the labels of one kind differ only in what a source
may know better than the rule (elements its boxes do not show; the near_max_gap it was built with)."""


def _declared_structures(declared: pd.Series, ruled: pd.Series, data: ImportedData) -> pd.Series:
    """A source's own ``evidence_structure`` where it is a known label of the kind the shared rule
    finds (:data:`_STRUCTURE_KIND`), else the rule's; both cases are said in the notes."""
    declared = declared.astype(object).where(declared.notna(), None)
    kind_of = declared.map(_STRUCTURE_KIND)
    kept = kind_of.notna() & (kind_of == ruled.map(_STRUCTURE_KIND))
    differing = int((kept & (declared != ruled)).sum())
    data.notes.append(
        f"the source labels its queries' evidence_structure: kept for {int(kept.sum())} of {len(declared)} "
        f"({differing} where the shared rule says another label of the same kind)"
        + (
            f"; {int((~kept).sum())} unknown or contradicting the evidence labelled by the rule"
            if (~kept).any()
            else ""
        )
    )
    return declared.where(kept, ruled)


def _structure_rules(near_max_gap: int, importer: dict[str, Any] | None) -> dict[str, Any]:
    """The shared rules, and where an importer counts the source's labels as elements, that too."""
    rules = structure_rules(near_max_gap)
    if (importer or {}).get("page_multi_from_labels"):
        rules["page_multi"] += " (page_multi_from_labels: each distinct evidence label counts as an element)"
    return rules


def _structure_counts(queries: pd.DataFrame) -> dict[str, int]:
    """Queries per evidence structure: the six always, the documents-unknown label when it occurs."""
    counts = queries["evidence_structure"].value_counts()
    out = {s: int(counts.get(s, 0)) for s in EVIDENCE_STRUCTURES}
    if counts.get(UNKNOWN_DOCUMENTS_STRUCTURE, 0):
        out[UNKNOWN_DOCUMENTS_STRUCTURE] = int(counts[UNKNOWN_DOCUMENTS_STRUCTURE])
    return out


def _elements(data: ImportedData, pages: pd.DataFrame) -> pd.DataFrame:
    columns = ["doc_id", "element_id", "page_index", "bbox", "element_type"]
    if data.elements is None or not len(data.elements):
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in columns}).astype({"page_index": "int32"})
    elements = data.elements.copy()
    elements["page_id"] = elements["page_id"].astype(str)
    located = pages.set_index("page_id")[["doc_id", "page_index"]]
    elements = _keep(elements, elements["page_id"].isin(located.index), data, "elements", "page_not_in_corpus")
    elements = elements.join(located, on="page_id")
    return elements[columns + [c for c in elements.columns if c not in columns and c != "page_id"]]


def _documents_without_text(pages: pd.DataFrame) -> list[str]:
    """Documents none of whose pages has text (image-only slide decks, scans): said, not hidden."""
    per_doc = pages["has_text"].astype(bool).groupby(pages["doc_id"]).any()
    return sorted(per_doc.index[~per_doc])


def _pages_table(pages: pd.DataFrame, writer: _PageWriter) -> SortedBatches:
    """The pages table in page_id order, streamed: the small fields from ``pages``, the texts and
    extra columns merged from the writer's runs, :data:`BLOCK_ROWS` rows at a time."""
    images = pa.array([{"bytes": None, "path": p} if p is not None else None for p in pages["path"]], IMAGE_TYPE)
    small = pa.Table.from_pandas(pages.drop(columns=["path", "has_text", "_row"]), preserve_index=False)
    small = small.append_column("image", images).replace_schema_metadata(None)
    order = pc.sort_indices(small.column("page_id"))
    small, rows = small.take(order), pages["_row"].to_numpy()[order.to_numpy()]
    rest = writer.rest_schema()
    schema = pa.schema([*small.schema, *rest])

    def batches() -> Iterator[pa.Table]:
        start = 0
        for block in writer.rest(rows, rest):
            yield pa.Table.from_arrays([*small.slice(start, block.num_rows).columns, *block.columns], schema=schema)
            start += block.num_rows

    return SortedBatches(schema, batches())


# ----------------------------------------------------------------------------------------------
# Running an importer; the pipeline's first-use import
# ----------------------------------------------------------------------------------------------


def import_benchmark(importer: Importer, dest: str | Path, *, name: str, replace: bool = False) -> Benchmark:
    """Run ``importer`` into ``dest``: written in a staging directory beside it and renamed into
    place, so an interrupted import leaves no half benchmark, only its staging directory
    (``.<name>.importing-*``, removed when the import fails in process). Two jobs importing at once
    both import; the first rename wins and the other job uses its result. ``replace``: an earlier
    import in ``dest`` is replaced (moved aside, then deleted once the new one is in place)."""
    dest = Path(dest)
    if dest.is_dir() and any(dest.iterdir()) and not (dest / INFO_FILE).is_file():
        raise ConfigError(f"{dest} exists and is not a benchmark: the import would replace it; empty or move it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.importing-{uuid.uuid4().hex[:8]}"
    old = dest.parent / f".{dest.name}.replaced-{uuid.uuid4().hex[:8]}"
    importer.check_pinned()
    try:
        data = importer.read()
        write_imported(data, staging, name=name, near_max_gap=importer.near_max_gap, importer=importer.spec())
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
        if replace and (dest / INFO_FILE).is_file():
            os.replace(dest, old)
        try:
            os.replace(staging, dest)
        except OSError:
            if not (dest / INFO_FILE).is_file():
                raise
            log.info("%s was imported by another job meanwhile; using it", dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return load_benchmark(dest)


def recorded_importer(dest: Path) -> dict | None:
    return _built_by(dest).get("importer")


def _built_by(dest: Path) -> dict:
    try:
        built = json.loads((dest / INFO_FILE).read_text()).get("built_by", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return built if isinstance(built, dict) else {}


def open_imported(importer: Importer, dest: str | Path, *, name: str) -> Benchmark:
    """The imported benchmark in ``dest``: imported on first use, reused afterwards. One imported
    by another importer spec is refused (a ``dataset.importer.*`` override never silently reuses
    what an earlier spec wrote there), and so is one an earlier :data:`IMPORT_VERSION` wrote (its
    labels follow older rules)."""
    dest = Path(dest)
    if not (dest / INFO_FILE).is_file():
        log.info("importing %s into %s (first use)", name, dest)
        return import_benchmark(importer, dest, name=name)
    version = _built_by(dest).get("import_version")
    if version is not None and version != IMPORT_VERSION:
        raise ConfigError(
            f"benchmark {dest} was written by import version {version}, this code writes {IMPORT_VERSION} (structure "
            f"rules, evidence types and merges changed): import it again with python -m vldocir.apps.import_benchmark "
            f"dataset=<this dataset> overwrite=true, or delete that directory"
        )
    recorded, wanted = recorded_importer(dest), json.loads(json.dumps(importer.spec()))
    if recorded is not None and recorded != wanted:
        differing = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
        raise ConfigError(
            f"benchmark {dest} was imported with another dataset.importer spec (differs in: {', '.join(differing)}); "
            "delete that directory to import it again, or give this spec its own dataset.name"
        )
    return load_benchmark(dest)


def summary(bench: Benchmark) -> str:
    """What an import kept and dropped, per structure (and the rules that labelled them), per language
    (and per structure within each language), the labels no mapping table names: printed by the import
    app."""
    built = bench.info.get("built_by", {})
    kept = built.get("kept", {})
    structures = built.get("structures", {})
    lines = [
        f"imported {bench.name} ({bench.info.get('imported_from', {}).get('source')}) into {bench.root}",
        f"  kept: {', '.join(f'{v} {k}' for k, v in kept.items())}",
        "  per structure: " + ", ".join(f"{s} {n}" for s, n in structures.items()),
    ]
    rules = built.get("structure_rules")
    if rules:
        lines += [
            "  structure rules (benchmark.json built_by.structure_rules):",
            f"    within a document: {rules.get('within_document')} (near_max_gap {rules.get('near_max_gap')})",
            f"    one page: {rules.get('page_multi')}",
            f"    documents: {rules.get('documents')}",
        ]
    empty = [s for s, n in structures.items() if not n]
    if empty:
        lines.append(f"  structures without queries (Macro averages the others): {', '.join(empty)}")
    if structures.get(UNKNOWN_DOCUMENTS_STRUCTURE):
        lines.append(
            f"  {structures[UNKNOWN_DOCUMENTS_STRUCTURE]} queries are {UNKNOWN_DOCUMENTS_STRUCTURE} (several pages, "
            "documents unknown): left out of structure Macro"
        )
    if built.get("languages"):
        lines.append("  per language: " + ", ".join(f"{k} {v}" for k, v in built["languages"].items()))
    per_language = built.get("structures_per_language") or {}
    if per_language:
        lines.append("  per structure counts every language's copy of a query; one query set per language:")
        lines += [
            f"    {language}: " + ", ".join(f"{s} {n}" for s, n in counts.items())
            for language, counts in per_language.items()
        ]
    for table, counts in built.get("dropped", {}).items():
        lines.append(f"  dropped {table}: " + ", ".join(f"{n} {reason}" for reason, n in counts.items()))
    if built.get("unmapped_labels"):
        lines.append(
            "  unmapped labels (no evidence type; left out): "
            + ", ".join(f"{label!r} {n}" for label, n in built["unmapped_labels"].items())
        )
    lines.append(f"  document ids: {built.get('document_ids')}")
    without = built.get("documents_without_text", {})
    if without.get("count"):
        lines.append(f"  documents without a text layer: {without['count']} (e.g. {', '.join(without['doc_ids'][:5])})")
    lines += [f"  note: {note}" for note in built.get("notes", [])]
    return "\n".join(lines)
