"""Queries the user writes (``queries=file``) or none (``queries=none``), in place of the VLM query stage.

Both have the call protocol of :class:`~vldocir.queries.query_stage.GeneratedQueries`
(the built ``documents``, ``pages``, ``elements`` tables, page images, ``near_max_gap`` ->
``(queries, qrels, report)``), so ``python -m vldocir.apps.build`` and
``python -m vldocir.apps.generate_queries`` (over an already rendered benchmark) take either, and a
``preflight(doc_ids)`` that runs before any rendering.

**The query file** (``queries.path``: ``.jsonl``, ``.csv`` or ``.parquet``), one row per query:

- ``question`` (required): the query text;
- ``answer`` (optional): a reference answer (kept, not used by retrieval);
- ``evidence`` (required): where the answer is, one or more items, each ``DOC:PAGE`` (page ``PAGE``
  of document ``DOC``, 1 = its first page) or ``DOC/ELEMENT`` (element ``ELEMENT`` of ``DOC``, an id
  of the built benchmark's ``elements`` table: ``e00042`` for HTML, ``p002-e0003`` for a PDF). A
  list of such strings (JSONL, Parquet) or one string with the items separated by ``;`` (any format);
- ``query_id`` (optional): unique, an id that can name a file (:func:`~vldocir.data.validation.id_problem`:
  no ``/`` or ``\\``, not ``..``, no control character or line break); absent, queries are numbered
  ``q0000000``, ``q0000001``, ... by row. A query file that is a symbolic link leaving its folder is not read.

Rows are numbered from 1 (a JSONL file's row is its line). The file's shape (columns, types, the
evidence syntax, unique query ids, and with ``doc_ids`` every document named) is checked by
:meth:`UserQueries.preflight`, before any rendering; every evidence item is then checked against the
built pages (an unknown document, a page past the document's end, an element the document does not
have): each problem is one :class:`~vldocir.errors.ConfigError` naming the file, the row and the value.

Each query's evidence pages and structure follow the project's grounding rules
(:func:`vldocir.data.evidence.evidence_structures`): pages in two documents ``cross_doc``;
several pages of one document ``doc_adjacent``/``doc_near``/``doc_far`` by the distance of its first
and last (``near_max_gap``); one page ``page_multi`` when two or more cited elements lie on it, else
``page_single``. A cited element's page is the page its box starts on; its qrel lists it in
``element_ids``; ``evidence_types`` come from the cited elements' types (a page cited as a whole adds
none). The query's ``source`` and ``domain`` are those of its first evidence document; ``generator``
is ``queries.generator``.

**No queries** (:class:`NoQueries`): empty ``queries`` and ``qrels`` tables; the report's method
:data:`~vldocir.data.schema.CORPUS_ONLY_METHOD` tells the validation that the benchmark is a corpus
without queries (it can be encoded, and gets queries later through ``generate_queries``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.data.evidence import evidence_structures, evidence_types
from vldocir.data.schema import CORPUS_ONLY_METHOD, EVIDENCE_STRUCTURES, TABLES
from vldocir.data.validation import id_problem, outside_target
from vldocir.errors import ConfigError
from vldocir.io import JsonlLineError, file_digest, jsonl_objects

FORMATS = (".jsonl", ".csv", ".parquet")
COLUMNS = ("question", "answer", "evidence", "query_id")
REQUIRED = ("question", "evidence")
_ITEM = re.compile(r"^(?P<doc>[A-Za-z0-9][A-Za-z0-9._-]*)(?::(?P<page>\d+)|/(?P<element>[^\s;/]+))$")


@dataclass(frozen=True)
class EvidenceItem:
    """One evidence item of a row: a whole page (``page``, 1-based) or an element of a document."""

    doc_id: str
    page: int | None = None
    element_id: str | None = None

    def __str__(self) -> str:
        return f"{self.doc_id}:{self.page}" if self.page is not None else f"{self.doc_id}/{self.element_id}"


@dataclass(frozen=True)
class QueryRow:
    """One row of the query file, its shape checked."""

    number: int  # 1-based (a JSONL file's line)
    query_id: str
    question: str
    answer: str | None
    evidence: tuple[EvidenceItem, ...]


def _records(path: Path) -> list[tuple[int, Mapping[str, Any]]]:
    """``(row number, record)`` of every row of the file."""
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(f"queries.path={path}: a query file is {', '.join(FORMATS)}")
    if not path.is_file():
        raise ConfigError(f"queries.path={path}: no such file")
    target = outside_target(path, path.parent)
    if target is not None:  # (never opened: its lines could end up in an error message or a log)
        raise ConfigError(f"queries.path={path}: a symbolic link to {target}, outside its folder; it is not read")
    if path.suffix.lower() == ".jsonl":
        try:
            return list(jsonl_objects(path))
        except JsonlLineError as error:  # a JSONL file's row is its line
            raise ConfigError(f"{path} row {error.line}: {error.reason}") from error
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False) if path.suffix == ".csv" else pd.read_parquet(path)
    except (OSError, ValueError) as error:
        raise ConfigError(f"queries.path={path}: cannot read it: {error}") from error
    return list(enumerate(frame.to_dict("records"), start=1))


def _blank(value: Any) -> bool:
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, float) and np.isnan(value))


def _evidence(value: Any, where: str) -> tuple[EvidenceItem, ...]:
    if isinstance(value, str):
        texts = [t.strip() for t in value.split(";") if t.strip()]
    elif isinstance(value, (list, tuple, np.ndarray)) and all(isinstance(t, str) for t in value):
        texts = [t.strip() for t in value]
    else:
        raise ConfigError(f"{where}: evidence must be a string or a list of strings, got {value!r}")
    if not texts:
        raise ConfigError(f"{where}: no evidence (items DOC:PAGE or DOC/ELEMENT)")
    items = []
    for text in texts:
        found = _ITEM.match(text)
        if found is None or (found["page"] is not None and int(found["page"]) < 1):
            raise ConfigError(
                f"{where}: evidence {text!r} is neither DOC:PAGE (page 1 = the first) "
                "nor DOC/ELEMENT (e.g. report/e00042)"
            )
        for kind, value in (("document", found["doc"]), ("element", found["element"])):
            if value is not None and id_problem(value):
                raise ConfigError(f"{where}: evidence {text!r}: the {kind} id {value!r} {id_problem(value)}")
        page = int(found["page"]) if found["page"] is not None else None
        items.append(EvidenceItem(found["doc"], page, found["element"]))
    return tuple(dict.fromkeys(items))  # (an item named twice is one item)


def read_query_file(path: str | Path) -> list[QueryRow]:
    """The rows of a query file (module doc), their shape checked; raises :class:`ConfigError`
    naming the file, row and problem."""
    path = Path(path).expanduser()
    records = _records(path)
    if not records:
        raise ConfigError(f"{path}: the query file has no rows")
    rows: list[QueryRow] = []
    seen: dict[str, int] = {}
    for position, (number, record) in enumerate(records):
        where = f"{path} row {number}"
        unknown = sorted(set(record) - set(COLUMNS))
        if unknown:
            raise ConfigError(f"{where}: unknown column(s) {', '.join(unknown)}; the columns are {', '.join(COLUMNS)}")
        missing = [c for c in REQUIRED if _blank(record.get(c))]
        if missing:
            raise ConfigError(f"{where}: missing column(s) or value(s): {', '.join(missing)}")
        question, answer = record["question"], record.get("answer")
        if not isinstance(question, str):
            raise ConfigError(f"{where}: question must be a string, got {question!r}")
        if not _blank(answer) and not isinstance(answer, str):
            raise ConfigError(f"{where}: answer must be a string, got {answer!r}")
        query_id = record.get("query_id")
        if _blank(query_id):
            query_id = f"q{position:07d}"
        elif not isinstance(query_id, str):
            raise ConfigError(f"{where}: query_id must be a string, got {query_id!r}")
        elif id_problem(query_id):
            raise ConfigError(f"{where}: query_id {query_id!r} {id_problem(query_id)}")
        if query_id in seen:
            raise ConfigError(f"{where}: query_id {query_id!r} is also row {seen[query_id]}'s")
        seen[query_id] = number
        evidence = _evidence(record["evidence"], where)
        answer = None if _blank(answer) else answer
        rows.append(QueryRow(number, query_id, " ".join(question.split()), answer, evidence))
    return rows


class UserQueries:
    """The user's queries from a file (``conf/queries/file.yaml``; module doc).

    Args:
        path: the query file (``.jsonl``, ``.csv`` or ``.parquet``).
        generator: the ``generator`` column of every query (who wrote them).
    """

    method = "file"

    def __init__(self, path: str | Path, generator: str = "user"):
        if not path:
            raise ConfigError("queries=file needs queries.path (a .jsonl, .csv or .parquet query file)")
        self.path = Path(path).expanduser()
        self.generator = generator

    def preflight(self, doc_ids: Sequence[str] | None) -> None:
        """Check the file's shape and, given the documents about to be built, that every evidence
        item names one of them; before any rendering."""
        rows = read_query_file(self.path)
        if doc_ids is not None:
            known = set(doc_ids)
            for row in rows:
                for item in row.evidence:
                    if item.doc_id not in known:
                        raise ConfigError(f"{self.path} row {row.number}: {_unknown_document(item, known)}")

    def __call__(
        self,
        documents: pd.DataFrame,
        pages: pd.DataFrame,
        elements: pd.DataFrame,
        images: Mapping[str, Any],
        near_max_gap: int,
        record_dir: str | Path | None = None,
    ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
        """``(queries, qrels, report)`` over the built tables (``images`` and ``record_dir`` are not
        needed: the queries are the file's)."""
        rows = read_query_file(self.path)
        docs = documents.set_index("doc_id")
        page_ids = {
            (d, int(i)): p for d, i, p in zip(pages["doc_id"], pages["page_index"], pages["page_id"], strict=True)
        }
        columns = ("doc_id", "element_id", "page_index", "element_type")
        located = {(d, e): (int(i), t) for d, e, i, t in zip(*(elements[c] for c in columns), strict=True)}
        evidence, qrels, types = [], [], {}
        for row in rows:
            cited: dict[tuple[str, int], list[str]] = {}
            row_types = []
            for item in row.evidence:
                where = f"{self.path} row {row.number}"
                if item.doc_id not in docs.index:
                    raise ConfigError(f"{where}: {_unknown_document(item, set(docs.index))}")
                if item.page is not None:
                    n_pages = int(docs.at[item.doc_id, "n_pages"])
                    if item.page > n_pages:
                        raise ConfigError(
                            f"{where}: evidence {item}: document {item.doc_id!r} has {n_pages} page(s), "
                            f"no page {item.page}"
                        )
                    cited.setdefault((item.doc_id, item.page - 1), [])
                    continue
                if (item.doc_id, item.element_id) not in located:
                    raise ConfigError(
                        f"{where}: evidence {item}: document {item.doc_id!r} has no element {item.element_id!r} "
                        "(element ids: the built benchmark's elements table)"
                    )
                index, element_type = located[(item.doc_id, item.element_id)]
                cited.setdefault((item.doc_id, index), []).append(item.element_id)
                row_types.append(element_type)
            types[row.query_id] = evidence_types(row_types)
            for (doc_id, index), element_ids in cited.items():
                evidence.append((row.query_id, doc_id, index, len(element_ids)))
                qrels.append((row.query_id, page_ids[(doc_id, index)], doc_id, element_ids))
        frame = pd.DataFrame(evidence, columns=["query_id", "doc_id", "page_number", "n_elements"])
        structures = evidence_structures(frame, near_max_gap)
        first_doc = frame.drop_duplicates("query_id").set_index("query_id")["doc_id"]
        queries = pd.DataFrame(
            {
                "query_id": [r.query_id for r in rows],
                "text": [r.question for r in rows],
                "answer": [r.answer for r in rows],
                "evidence_structure": [structures[r.query_id] for r in rows],
                "source": [docs.at[first_doc[r.query_id], "source"] for r in rows],
                "domain": [docs.at[first_doc[r.query_id], "domain"] for r in rows],
                "generator": self.generator,
                "evidence_types": [types[r.query_id] for r in rows],
            }
        )
        per_structure = queries["evidence_structure"].value_counts()
        report = {
            "method": self.method,
            "path": str(self.path),
            "sha256": file_digest(self.path),
            "generator": self.generator,
            "near_max_gap": near_max_gap,
            "counts": {
                "queries": len(queries),
                "qrels": len(qrels),
                "per_structure": {s: int(per_structure.get(s, 0)) for s in EVIDENCE_STRUCTURES},
            },
        }
        return queries, pd.DataFrame(qrels, columns=["query_id", "page_id", "doc_id", "element_ids"]), report

    @staticmethod
    def summary(report: Mapping[str, Any]) -> str:
        counts = report["counts"]
        structures = ", ".join(f"{k} {v}" for k, v in counts["per_structure"].items() if v)
        return f"queries from {report['path']}: {counts['queries']} ({structures}), {counts['qrels']} qrels"


class NoQueries:
    """No queries: the benchmark is a corpus (``conf/queries/none.yaml``; module doc)."""

    method = CORPUS_ONLY_METHOD

    def preflight(self, doc_ids: Sequence[str] | None) -> None:
        """Nothing to check."""

    def __call__(
        self,
        documents: pd.DataFrame,
        pages: pd.DataFrame,
        elements: pd.DataFrame,
        images: Mapping[str, Any],
        near_max_gap: int,
        record_dir: str | Path | None = None,
    ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
        """Empty ``queries`` and ``qrels`` tables (of the benchmark's schema) and the report."""
        empty = {name: TABLES[name].schema.empty_table().to_pandas() for name in ("queries", "qrels")}
        return empty["queries"], empty["qrels"], {"method": self.method}

    @staticmethod
    def summary(report: Mapping[str, Any]) -> str:
        return (
            "queries: none (a corpus; add queries later with python -m vldocir.apps.generate_queries "
            "benchmark=<it> queries=file queries.path=<file>)"
        )


def query_summary(stage, report: Mapping[str, Any]) -> str:
    """Any query stage's report in a few lines: the stage's own ``summary``, else the generated
    stage's (:func:`vldocir.queries.query_stage.summary`)."""
    from vldocir.queries.query_stage import summary

    return (getattr(stage, "summary", None) or summary)(report)


def _unknown_document(item: EvidenceItem, known: set[str]) -> str:
    listed = ", ".join(sorted(known)[:10]) + (", ..." if len(known) > 10 else "")
    return f"evidence {item}: no document {item.doc_id!r} (documents: {listed})"
