"""BEIR-format text benchmarks (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

The BEIR layout (Thakur et al., 2021; also what mteb's text retrieval tasks ship on the hub):

- ``corpus.jsonl`` (or ``.jsonl.gz``): one passage per line, ``{"_id", "title", "text", "metadata"}``;
- ``queries.jsonl``: ``{"_id", "text", "metadata"}``, the queries of every split;
- ``qrels/<split>.tsv``: tab-separated with the header ``query-id corpus-id score`` (a file without
  the header, whose first line is a judgement, is read too); graded scores (dbpedia-entity: 0/1/2).
  A score of 0 is an explicit non-relevant judgement: not evidence.

Each passage becomes a text-only document of one page (``page_id`` = ``doc_id`` = its ``_id``;
no image, ``dom_text`` = title and text, ``ocr_text`` null, ``width``/``height`` null), so a query
with several relevant passages is ``cross_doc``. Grades are kept (``qrels.grade``). Queries of other
splits are left out (``queries.not_in_split``). ``qrels`` may live in another repository (BEIR's own
hub copies keep them in ``BeIR/<name>-qrels``): ``qrels_source``.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vldocir.importers.base import ImportedData, Importer, ImporterError, fetch

CHUNK_ROWS = 50_000


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _find(root: Path, *names: str) -> Path:
    for name in names:
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise ImporterError(f"{root}: none of {', '.join(names)} (or .gz) found: not a BEIR-format folder")


def _jsonl(path: Path) -> Iterator[dict]:
    with _open_text(path) as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ImporterError(f"{path}:{number}: not a JSON line ({error.msg})") from error


QRELS_HEADER = ["query-id", "corpus-id", "score"]


def _headerless(first_line: str) -> bool:
    """Whether a qrels file's first line is a judgement, not a header: its third field is a number and
    its first two are not BEIR's column names (some BEIR-style sets ship their qrels without one)."""
    fields = first_line.rstrip("\r\n").split("\t")
    if len(fields) < 3 or fields[:2] == QRELS_HEADER[:2]:
        return False
    try:
        float(fields[2])
    except ValueError:
        return False
    return True


def read_qrels_tsv(path: Path) -> pd.DataFrame:
    """``query-id corpus-id score``, with BEIR's header line or without one (:func:`_headerless`),
    ids as strings, scores as integers."""
    with _open_text(path) as handle:
        text = handle.read()
    headerless = _headerless(text.split("\n", 1)[0])
    frame = pd.read_csv(
        io.StringIO(text),
        sep="\t",
        dtype=str,
        keep_default_na=False,
        header=None if headerless else "infer",
        names=QRELS_HEADER if headerless else None,
    )
    wanted = QRELS_HEADER
    if list(frame.columns[:3]) != wanted:
        raise ImporterError(f"{path}: header {list(frame.columns)} is not BEIR's 'query-id corpus-id score'")
    try:
        grade = pd.to_numeric(frame["score"]).astype("int64")
    except ValueError as error:
        raise ImporterError(f"{path}: a score is not an integer ({error})") from error
    return pd.DataFrame({"query_id": frame["query-id"], "page_id": frame["corpus-id"], "grade": grade})


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
            source=name,
            info={
                "format": self.format,
                "source": str(self.source),
                "revision": self.revision,
                "license": self.license,
                "split": self.split,
                "qrels": str(qrels_file.relative_to(qrels_root)),
            },
            notes=[
                "BEIR passages are documents of one text-only page each: a query with several relevant "
                "passages is cross_doc; dom_text is the passage's title and text"
            ],
        )
        queries = pd.DataFrame(
            [{"query_id": str(q["_id"]), "text": q.get("text")} for q in _jsonl(_find(root, "queries.jsonl"))],
            columns=["query_id", "text"],
        )
        in_split = queries["query_id"].isin(data.qrels["query_id"])
        data.drop("queries", "not_in_split", int((~in_split).sum()))
        data.queries = queries[in_split].assign(language=None, generator="beir")
        return data

    def _passages(self, path: Path) -> Iterator[pd.DataFrame]:
        rows = []
        for record in _jsonl(path):
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
                yield pd.DataFrame(rows)
                rows = []
        if rows:
            yield pd.DataFrame(rows)
