"""BEIR-format text benchmarks (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

The BEIR layout (Thakur et al., 2021; also what mteb's text retrieval tasks ship on the hub):

- ``corpus.jsonl`` (or ``.jsonl.gz``): one passage per line, ``{"_id", "title", "text", "metadata"}``;
- ``queries.jsonl``: ``{"_id", "text", "metadata"}``, the queries of every split;
- ``qrels/<split>.tsv``: tab-separated with the header ``query-id corpus-id score`` (a file without
  the header, whose first line is a judgement, is read too, and so is TREC's ``query-id 0 corpus-id
  score``); graded scores (dbpedia-entity: 0/1/2), integers as BEIR and trec_eval define them (``1.7``
  or ``2**70`` is refused naming the line). A score of 0 is an explicit non-relevant judgement: not
  evidence.

Every file is read inside the folder (a symbolic link out of it is refused) and every bad line is one
error naming file and line (:mod:`vldocir.importers.source_files`): not UTF-8, not a JSON object, no
``_id``; an empty corpus, queries or qrels file, a damaged ``.gz``.

Each passage becomes a text-only document of one page (``page_id`` = ``doc_id`` = its ``_id``;
no image, ``dom_text`` = title and text, ``ocr_text`` null, ``width``/``height`` null), so a query
with several relevant passages is ``cross_doc``. Grades are kept (``qrels.grade``). Queries of other
splits are left out (``queries.not_in_split``). ``qrels`` may live in another repository (BEIR's own
hub copies keep them in ``BeIR/<name>-qrels``): ``qrels_source``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vldocir.importers.base import ImportedData, Importer, ImporterError, fetch
from vldocir.importers.source_files import integer_grade, json_lines, source_file, text_lines

CHUNK_ROWS = 50_000


def _find(root: Path, *names: str) -> Path:
    for name in names:
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file() or candidate.is_symlink():
                return source_file(root, candidate)
    raise ImporterError(f"{root}: none of {', '.join(names)} (or .gz) found: not a BEIR-format folder")


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of a JSON-lines file whose every record is an object with an ``_id``."""
    for number, record in json_lines(path):
        if record.get("_id") is None or isinstance(record["_id"], (dict, list)) or not str(record["_id"]).strip():
            raise ImporterError(f"{path}:{number}: the record has no _id")
        for key in ("title", "text"):
            if record.get(key) is not None and not isinstance(record[key], str):
                raise ImporterError(f"{path}:{number}: '{key}' is a {type(record[key]).__name__}, not a string")
        yield number, record


QRELS_HEADER = ["query-id", "corpus-id", "score"]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_qrels_tsv(path: Path) -> pd.DataFrame:
    """``query-id corpus-id score``, with BEIR's header line or without one (some BEIR-style sets ship
    their qrels without it: a first line whose third field is a number and whose first two are not
    BEIR's column names is a judgement), or TREC's four columns ``query-id 0 corpus-id score``
    (whitespace-separated, no header). Ids as strings, grades integers (:func:`integer_grade`); any
    other line is refused naming it, and so is a file without a judgement."""
    query, page, grade = [], [], []
    layout, n_fields = None, 3
    for number, raw in text_lines(path):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if layout is None:  # the first line decides: BEIR's header, a headerless BEIR judgement or TREC's
            tabs, words = line.split("\t"), line.split()
            if [f.strip() for f in tabs[:3]] == QRELS_HEADER:  # (columns after BEIR's three are ignored)
                layout, n_fields = "beir", len(tabs)
                continue
            if len(tabs) == 3 and _is_number(tabs[2]) and tabs[:2] != QRELS_HEADER[:2]:
                layout = "beir"
            elif len(words) == 4 and _is_number(words[3]):
                layout = "trec"
            elif len(tabs) >= 3:
                raise ImporterError(
                    f"{path}:{number}: header {[f.strip() for f in tabs]} is not BEIR's 'query-id corpus-id score' "
                    "(nor a judgement: BEIR 'query-id corpus-id score' or TREC 'query-id 0 corpus-id score')"
                )
            else:
                raise ImporterError(
                    f"{path}:{number}: neither BEIR's header 'query-id corpus-id score' (tab-separated) nor a "
                    f"judgement (BEIR 'query-id corpus-id score' or TREC 'query-id 0 corpus-id score'): {line[:80]!r}"
                )
        fields = [f.strip() for f in line.split("\t")] if layout == "beir" else line.split()
        if layout == "trec":
            fields = [fields[0], fields[2], fields[3]] if len(fields) == 4 else fields
        elif len(fields) == n_fields:
            fields = fields[:3]
        if len(fields) != 3 or not fields[0] or not fields[1]:
            expected = "query-id corpus-id score, tab-separated" if layout == "beir" else "query-id 0 corpus-id score"
            raise ImporterError(f"{path}:{number}: not a judgement ({expected}): {line[:80]!r}")
        query.append(fields[0])
        page.append(fields[1])
        grade.append(integer_grade(fields[2], f"{path}:{number}"))
    if not query:
        raise ImporterError(f"{path}: no judgements (an empty file, or a header only)")
    return pd.DataFrame({"query_id": query, "page_id": page, "grade": pd.Series(grade, dtype="int64")})


@dataclass
class BeirImporter(Importer):
    """A BEIR-format folder or hub dataset; ``split`` picks ``qrels/<split>.tsv``."""

    split: str = "test"
    qrels_source: str | None = None
    qrels_revision: str | None = None
    source_name: str | None = None
    """The documents' and queries' source label (default: the dataset's name)."""
    license: str | None = None

    format = "beir"

    def hub_sources(self) -> list[tuple[str, str, str | None]]:
        qrels = [("qrels_source", str(self.qrels_source), self.qrels_revision)] if self.qrels_source else []
        return [*super().hub_sources(), *qrels]

    def read(self) -> ImportedData:
        root = fetch(self.source, self.revision)
        qrels_root = fetch(self.qrels_source, self.qrels_revision) if self.qrels_source else root
        qrels_file = _find(qrels_root, f"qrels/{self.split}.tsv", f"{self.split}.tsv")
        name = self.source_name or str(self.source).rstrip("/").split("/")[-1]
        data = ImportedData(
            pages=self._passages(_find(root, "corpus.jsonl")),
            queries=pd.DataFrame(),
            qrels=read_qrels_tsv(qrels_file),
            qrels_file=qrels_file,
            source=name,
            info={
                **self.provenance(),
                "split": self.split,
                "qrels": str(qrels_file.relative_to(qrels_root)),
            },
            notes=[
                "BEIR passages are documents of one text-only page each: a query with several relevant "
                "passages is cross_doc; dom_text is the passage's title and text"
            ],
        )
        queries_file = _find(root, "queries.jsonl")
        queries = pd.DataFrame(
            [{"query_id": str(q["_id"]), "text": q.get("text")} for _, q in _records(queries_file)],
            columns=["query_id", "text"],
        )
        if queries.empty:
            raise ImporterError(f"{queries_file}: no queries (an empty file)")
        in_split = queries["query_id"].isin(data.qrels["query_id"])
        data.drop("queries", "not_in_split", int((~in_split).sum()))
        data.queries = queries[in_split].assign(language=None, generator="beir")
        return data

    def _passages(self, path: Path) -> Iterator[pd.DataFrame]:
        rows, n_passages = [], 0
        for _, record in _records(path):
            title, text = record.get("title") or "", record.get("text") or ""
            passage_id = str(record["_id"])
            rows.append(
                {
                    "page_id": passage_id,
                    "doc_id": passage_id,
                    "page_number": 0,
                    "dom_text": f"{title}\n{text}" if title else text,
                }
            )
            if len(rows) >= CHUNK_ROWS:
                n_passages += len(rows)
                yield pd.DataFrame(rows)
                rows = []
        if not rows and not n_passages:
            raise ImporterError(f"{path}: no passages (an empty file)")
        if rows:
            yield pd.DataFrame(rows)
