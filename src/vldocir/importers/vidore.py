"""ViDoRe benchmarks (v1, v2, v3) from their hub layout: Parquet shards read row group by row group.

Two forms, read from the datasets' own cards and mteb's loaders:

- **v1, QA form** (:class:`ViDoReQAImporter`; e.g. ``vidore/docvqa_test_subsampled``): one
  ``data/<split>-*.parquet`` table, one row per query with its page image: ``questionId``,
  ``query``, ``image``, ``docId``, ``image_filename``, ``page``, ``answer`` (often null: these are
  retrieval queries, not unanswerable ones), ``source``. A page is identified by its
  ``image_filename``; rows naming a page already seen share it. Documents: ``docId`` where given,
  else derived from the file name; one evidence page per row, rows of one text merged (below).
- **BEIR form** (:class:`ViDoReImporter`): the configs ``corpus``, ``queries``, ``qrels`` (and v3's
  ``documents_metadata``) as ``<config>/<split>-*.parquet``. v1 ``_beir`` and v2 use hyphens
  (``corpus-id``, ``query-id``), v3 underscores (``corpus_id``, ``doc_id``, ``markdown``,
  ``page_number_in_doc``; queries with ``language``, ``query_types``, ``content_type``,
  ``answer``, ``query_generator``; qrels with a graded ``score``, ``content_type`` and
  ``bounding_boxes`` ``[{annotator, x1, y1, x2, y2}]``). Column names are read either way.

Documents: v3's ``doc_id``; else a ``doc-id`` / ``doc_id`` column; else derived from
``image_filename`` (``<document>_page_<n>.png`` and the like); else none (v1 ``_beir``): each page
is then its own document, multi-page queries are ``cross_doc``, and benchmark.json and the summary
say so. Page text: v3's ``markdown`` is the page's ``dom_text`` (the dataset's own text of the
page); v1/v2 carry none. Graded scores are kept (``qrels.grade``), score 0 is not evidence.
A single evidence page is ``page_multi`` when its boxes show two or more elements (the most boxes
one annotator drew on it) or its ``content_type`` lists two or more kinds. Queries keep
``language`` (as the dataset spells it, e.g. ``english``) and their other attributes;
``languages: [..]`` keeps only those (the rest counted as ``language_not_selected``). v3's
``content_type`` becomes ``evidence_types`` through :data:`CONTENT_TYPES` (its form placeholder
``N/A (If relevance score=0)`` names no type and is dropped; an unknown label is counted).

vldocir's own export in this layout (:mod:`vldocir.interop.hub_layout`) adds the project's columns,
read back where present: the corpus' ``ocr_text``; the queries' ``evidence_types`` (the project's
types as they are, instead of ``content_type``'s), ``evidence_structure`` (kept where it agrees with
the evidence: :func:`vldocir.importers.base.write_imported`), ``source`` and ``domain``; the documents'
``title`` and ``source``. Its string ids are kept as they are, so a re-import has the same page ids.

The QA form repeats a query text once per relevant page (docvqa: 500 rows, 451 texts, up to 12 pages
for one text); ViDoRe's evaluation and mteb's BEIR copy score each text once with all its pages, so
rows with the same text are merged into the first row's query (counted as
``queries: merged_duplicate_text``, said in the notes).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vldocir.importers.base import NO_DOCUMENT_IDS, ImportedData, Importer, ImporterError, fetch
from vldocir.importers.source_files import batches, integer_grades, parquet_file, read_parquet, source_file

BATCH_ROWS = 64
"""Corpus rows read at a time: a few dozen page images in memory, whatever the corpus size."""

CONTENT_TYPES: dict[str, str | None] = {
    "text": "text",
    "table": "table",
    "chart": "chart",
    "infographic": "image",  # a designed graphic read as a picture, not a data chart
    "image": "image",
    "mixed": "other",
    "other": "other",
    "n/a (if relevance score=0)": None,  # the annotation form's placeholder, not a modality
}
"""ViDoRe v3 ``content_type`` labels (lower-cased; the card's values) -> evidence type."""

_PAGE_IN_NAME = re.compile(r"^(?P<doc>.+?)[_\-. ]*(?:page|pg|p)[_\-. ]*(?P<page>\d+)$", re.IGNORECASE)


def split_files(root: Path, config: str | None, split: str, required: bool = True) -> list[Path]:
    """The Parquet shards of one config and split in a hub dataset's layout (none: refused, or with
    ``required=False`` an empty list); a shard resolving outside ``root`` is refused in one line."""
    base = root / config if config else root / "data"
    found = sorted(base.glob(f"{split}-*.parquet")) or sorted((base / split).glob("*.parquet"))
    if not found and config:
        found = sorted((root / "data").glob(f"{config}/{split}-*.parquet"))
    if not found and not required:
        return []
    if not found:
        where = f"config '{config}'" if config else "the default config"
        raise ImporterError(
            f"{root}: no Parquet files for {where}, split '{split}' "
            f"(looked for {base.relative_to(root)}/{split}-*.parquet)"
        )
    return [source_file(root, f) for f in found]


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.rename(columns={c: c.replace("-", "_") for c in frame.columns})


def _read(files: list[Path], needed: tuple[str, ...] = (), grades: str | None = None) -> pd.DataFrame:
    """The shards as one frame (column names with underscores), each refused in one line naming it
    when it cannot be read or lacks a ``needed`` column; ``grades``: the column of relevance grades,
    each an integer (:func:`~vldocir.importers.source_files.integer_grade`, naming the file's row)."""
    frames = []
    for file in files:
        frame = _normalized(read_parquet(file).to_pandas())
        missing = [c for c in needed if c not in frame]
        if missing:
            raise ImporterError(f"{file}: lacks the column(s) {missing} (it has {list(frame.columns)})")
        if grades is not None:
            frame[grades] = integer_grades(frame[grades], lambda i, file=file: f"{file}: row {i}")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _columns(file: Path) -> set[str]:
    """A shard's column names, underscored (from its footer: no row read)."""
    return set(_normalized(pd.DataFrame(columns=parquet_file(file).schema_arrow.names)).columns)


def _batches(files: list[Path], wanted: set[str]) -> Iterator[pd.DataFrame]:
    """Row batches of the shards, only the ``wanted`` columns (hyphen or underscore spelling)."""
    for file in files:
        names = parquet_file(file).schema_arrow.names
        columns = [c for c in names if c.replace("-", "_") in wanted]
        for batch in batches(file, BATCH_ROWS, columns):
            yield _normalized(batch.to_pandas())


def document_from_filename(name: str) -> tuple[str, int | None] | None:
    """``(document, page number)`` from a page image's file name such as ``report_page_12.png``,
    ``doc-p3.jpg`` or ``x.pdf_page_3``; None when the name shows no page number."""
    stem = Path(str(name)).name
    stem = re.sub(r"\.(png|jpe?g|webp|tiff?|bmp|gif)$", "", stem, flags=re.IGNORECASE)
    match = _PAGE_IN_NAME.match(stem)
    if not match:
        return None
    return match.group("doc"), int(match.group("page"))


def _number(value) -> int | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    found = re.search(r"\d+", str(value))
    return int(found.group()) if found else None


def _box_elements(boxes) -> int:
    """Elements a qrel's boxes show: the most boxes any one annotator drew on the page."""
    if boxes is None or not len(boxes):
        return 0
    per_annotator: dict = {}
    for box in boxes:
        annotator = box.get("annotator") if isinstance(box, dict) else None
        per_annotator[annotator] = per_annotator.get(annotator, 0) + 1
    return max(per_annotator.values())


def _distinct(values) -> list[str]:
    return sorted({str(v) for v in values}) if values is not None and len(values) else []


def _kinds(values) -> int:
    """Kinds of content a qrel's ``content_type`` lists (placeholders that name none not counted)."""
    return len([v for v in _distinct(values) if CONTENT_TYPES.get(v.strip().lower(), v) is not None])


def _name_of(source: str) -> str:
    return str(source).rstrip("/").split("/")[-1]


@dataclass
class ViDoReImporter(Importer):
    """ViDoRe v1 ``_beir``, v2 and v3 (the ``corpus`` / ``queries`` / ``qrels`` configs)."""

    split: str = "test"
    languages: list[str] | None = None
    """Keep only queries in these languages (as the dataset spells them); None: all."""
    source_name: str | None = None
    """The documents' and queries' source label (default: the dataset's name)."""
    license: str | None = None

    format = "vidore"

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        corpus_files = split_files(root, "corpus", self.split)
        corpus_columns = _columns(corpus_files[0])
        name = self.source_name or _name_of(self.source)
        queries = _read(split_files(root, "queries", self.split), ("query_id", "query"))
        qrels_files = split_files(root, "qrels", self.split)
        qrels = _read(qrels_files, ("query_id", "corpus_id", "score"), grades="score")
        if "corpus_id" not in corpus_columns or "image" not in corpus_columns:
            raise ImporterError(
                f"{corpus_files[0]}: the 'corpus' config needs 'corpus-id'/'corpus_id' and 'image' columns"
            )
        if "doc_id" in corpus_columns:
            document_ids = "from the source (doc_id)"
        elif "image_filename" in corpus_columns:
            document_ids = (
                "derived from image_filename (<document>_page_<n>); pages whose name shows none are their own"
            )
        else:
            document_ids = NO_DOCUMENT_IDS
        data = ImportedData(
            pages=self._pages(corpus_files, corpus_columns),
            queries=pd.DataFrame(),
            qrels=pd.DataFrame(),
            source=name,
            documents=self._documents(root),
            document_ids=document_ids,
            qrels_file=qrels_files[0] if len(qrels_files) == 1 else qrels_files[0].parent,
            info={
                **self.provenance(format="vidore_v3" if "markdown" in corpus_columns else "vidore_beir"),
                "split": self.split,
            },
        )
        if "markdown" not in corpus_columns:
            data.notes.append(
                "the source has no page text: dom_text and ocr_text are empty (text retrievers need an OCR pass first)"
            )
        data.queries = self._queries(queries, data)
        data.qrels = self._qrels(qrels)
        return data

    def _pages(self, files: list[Path], columns: set[str]) -> Iterator[pd.DataFrame]:
        wanted = {"corpus_id", "image", "doc_id", "markdown", "ocr_text", "page_number_in_doc", "image_filename"}
        for batch in _batches(files, wanted):
            page_id = batch["corpus_id"].astype(str)
            if "doc_id" in batch:
                doc_id = batch["doc_id"].astype(str)
                number = batch.get("page_number_in_doc")
            elif "image_filename" in batch:
                parsed = [document_from_filename(n) for n in batch["image_filename"]]
                doc_id = pd.Series([p[0] if p else f"page-{i}" for p, i in zip(parsed, page_id, strict=True)])
                number = pd.Series([p[1] if p else 0 for p in parsed])
            else:
                doc_id, number = page_id, 0  # each page its own document
            chunk = pd.DataFrame({"page_id": page_id, "doc_id": doc_id, "image": batch["image"]})
            chunk["page_number"] = number
            chunk["dom_text"] = batch.get("markdown")
            chunk["ocr_text"] = batch.get("ocr_text")
            if "image_filename" in batch:
                chunk["image_filename"] = batch["image_filename"]
            yield chunk

    def _documents(self, root: Path) -> pd.DataFrame | None:
        files = split_files(root, "documents_metadata", self.split, required=False)
        if not files:
            return None
        meta = _read(files)
        if "doc_id" not in meta:
            return None
        return pd.DataFrame(
            {
                "doc_id": meta["doc_id"].astype(str),
                "title": meta["title"] if "title" in meta else meta.get("file_name"),
                "url": meta.get("url"),
                "license": meta.get("license"),
                "domain": meta.get("doc_type"),
                "source": meta.get("source"),
            }
        )

    def _queries(self, queries: pd.DataFrame, data: ImportedData) -> pd.DataFrame:
        out = pd.DataFrame({"query_id": queries["query_id"].astype(str), "text": queries["query"]})
        out["answer"] = queries.get("answer")
        out["language"] = queries.get("language")
        out["generator"] = queries.get("query_generator")
        if "evidence_types" in queries:  # (vldocir's export: the project's own types)
            out["evidence_types"] = queries["evidence_types"].map(
                lambda v: [str(t) for t in v] if v is not None else []
            )
        elif "content_type" in queries:
            out["evidence_types"] = [data.evidence_types(_distinct(v), CONTENT_TYPES) for v in queries["content_type"]]
        for column in ("evidence_structure", "source", "domain"):  # (vldocir's export)
            if column in queries:
                out[column] = queries[column]
        for column in ("query_types", "query_format", "source_type"):
            if column in queries:
                out[column] = queries[column].map(lambda v: list(v) if isinstance(v, np.ndarray) else v)
        if self.languages is not None:
            keep = out["language"].isin(list(self.languages))
            data.drop("queries", "language_not_selected", int((~keep).sum()))
            out = out[keep]
        return out

    def _qrels(self, qrels: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(
            {
                "query_id": qrels["query_id"].astype(str),
                "page_id": qrels["corpus_id"].astype(str),
                "grade": qrels["score"].astype("int64"),  # (integers: checked as read, naming the row)
            }
        )
        boxes = qrels["bounding_boxes"].map(_box_elements) if "bounding_boxes" in qrels else 0
        kinds = qrels["content_type"].map(_kinds) if "content_type" in qrels else 0
        out["n_elements"] = np.maximum(np.maximum(boxes, kinds), 1)
        return out


def _merge_duplicate_texts(rows: list[dict], data: ImportedData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The QA form's rows as queries and qrels, rows with the same query text merged into the first
    one's query (its id and answer) with all their pages: ``(queries, qrels)``."""
    frame = pd.DataFrame(rows, columns=["query_id", "text", "answer", "page_id", "source_label"])
    key = frame["text"].where(frame["text"].notna(), "\0" + frame["query_id"].astype(str))  # (no text: alone)
    frame["merged_into"] = frame.groupby(key, sort=False)["query_id"].transform("first")
    repeated = frame["merged_into"] != frame["query_id"]
    data.drop("queries", "merged_duplicate_text", int(repeated.sum()))
    if repeated.any():
        pages = frame.groupby("merged_into")["page_id"].nunique()
        data.notes.append(
            f"{int(repeated.sum())} query rows repeat an earlier row's query text: merged into that query with "
            f"all their pages, as ViDoRe and mteb score them ({int((pages >= 2).sum())} queries have two or more "
            f"pages, up to {int(pages.max())})"
        )
    queries = frame[~repeated].drop(columns=["page_id", "source_label", "merged_into"])
    qrels = pd.DataFrame({"query_id": frame["merged_into"], "page_id": frame["page_id"], "grade": 1})
    return queries.assign(language=None, generator=None), qrels


@dataclass
class ViDoReQAImporter(Importer):
    """ViDoRe v1 in its QA form: one row per query with its page image (``data/<split>-*.parquet``)."""

    split: str = "test"
    source_name: str | None = None
    license: str | None = None

    format = "vidore_v1_qa"

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        files = split_files(root, None, self.split)
        needed = {"query", "image", "image_filename"}
        for file in files:
            columns = _columns(file)
            if not needed <= columns:
                raise ImporterError(f"{file}: the QA form needs the columns {sorted(needed)}; found {sorted(columns)}")
        name = self.source_name or _name_of(self.source)
        data = ImportedData(
            pages=iter(()),
            queries=pd.DataFrame(),
            qrels=pd.DataFrame(),
            source=name,
            document_ids="from the source (docId)" if "docId" in columns else "derived from image_filename",
            info={
                **self.provenance(),
                "split": self.split,
            },
            notes=["the source has no page text: dom_text and ocr_text are empty (text retrievers need an OCR pass)"],
        )
        rows: list[dict] = []
        data.pages = self._pages(files, rows, data)
        # The queries come with the pages: their tables are made once the pages have streamed by.
        merged = functools.cache(lambda: _merge_duplicate_texts(rows, data))
        data.queries = lambda: merged()[0]
        data.qrels = lambda: merged()[1]
        return data

    def _pages(self, files: list[Path], rows: list[dict], data: ImportedData) -> Iterator[pd.DataFrame]:
        seen: set[str] = set()
        wanted = {"questionId", "query", "image", "docId", "image_filename", "page", "answer", "source"}
        shared = 0
        for batch in _batches(files, wanted):
            pages = []
            for row in batch.to_dict("records"):
                page_id = str(row["image_filename"])
                query_id = str(row["questionId"]) if row.get("questionId") is not None else f"q{len(rows)}"
                rows.append(
                    {
                        "query_id": query_id,
                        "text": row["query"],
                        "answer": row.get("answer"),
                        "page_id": page_id,
                        "source_label": row.get("source"),
                    }
                )
                if page_id in seen:
                    shared += 1
                    continue
                seen.add(page_id)
                parsed = document_from_filename(page_id)
                doc_id = str(row["docId"]) if row.get("docId") is not None else (parsed[0] if parsed else page_id)
                number = _number(row.get("page"))
                pages.append(
                    {
                        "page_id": page_id,
                        "doc_id": doc_id,
                        "image": row["image"],
                        "page_number": number if number is not None else (parsed[1] if parsed else None),
                    }
                )
            if pages:
                yield pd.DataFrame(pages)
        if shared:
            data.notes.append(f"{shared} query rows share their page image with an earlier row (one page each)")
