"""Retrieval datasets in mteb's own hub layout (the conversions mteb evaluates: ``mteb/MMDocIRT2ITRetrieval``,
``VLM2Vec/MMLongBench-doc``, ``vidore/vidore_v3_*_mteb_format``, ...), read as mteb's loaders read them.

The layout (mteb's ``RetrievalDatasetLoader`` and the BEIR-style loaders of its image tasks): configs
named in the dataset card's ``configs:`` header (else found as ``<config>/<split>-*.parquet``), one
split each (``split``; a config with a single split is read whatever its name, as mteb does):

- one query set: ``corpus``, ``queries`` and the qrels in ``default`` (or ``qrels``), optionally
  ``top_ranked``;
- several (``subsets``: mteb's ``hf_subsets``, e.g. one per domain or language): ``<subset>-corpus``,
  ``<subset>-queries``, ``<subset>-qrels``, ``<subset>-top_ranked``. Page and query ids are then
  prefixed ``<subset>:`` (each subset numbers its own) and each query's subset is kept in the column
  ``subset_column`` (``language``, or e.g. ``domain``), so the protocol can evaluate each subset alone.

Columns, either spelling: corpus ``id`` / ``_id`` / ``corpus-id`` with ``image`` and optionally ``text``
(and ``title``); queries ``id`` / ``_id`` / ``query-id`` with ``text`` / ``query``; qrels ``query-id``,
``corpus-id``, ``score`` (graded: kept as ``qrels.grade``; score 0 is a judgement of non-relevance, not
evidence); top_ranked ``query-id``, ``corpus-ids`` (the candidates mteb ranks for the query).

Documents: mteb's corpora are pages without document ids. ``documents="top_ranked"``: a query's
top_ranked candidates are the pages of its document (MMDocIR's conversion ranks within the question's
document), so pages listed together form one document (connected groups); ``"qrels"``: the pages
judged together for a query form one (MMLongBench-Doc's conversion judges every page of the question's
document); ``"none"``: each page its own document (:data:`~vldocir.importers.base.NO_DOCUMENT_IDS`).
Pages in no group are documents of their own. Benchmark.json and the import summary say which.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from vldocir.importers.base import NO_DOCUMENT_IDS, ImportedData, Importer, ImporterError, fetch
from vldocir.importers.source_files import (
    batches,
    integer_grades,
    json_lines,
    parquet_file,
    read_parquet,
    read_text,
    source_file,
)

BATCH_ROWS = 64
"""Corpus rows read at a time (a few dozen page images in memory)."""

DOCUMENT_RULES = {
    "top_ranked": "derived from top_ranked: the candidate pages listed together for a query are one document",
    "qrels": "derived from the qrels: the pages judged together for a query are one document",
}
_ID_COLUMNS = {
    "corpus": ("id", "_id", "corpus-id", "corpus_id"),
    "queries": ("id", "_id", "query-id", "query_id"),
}


def card_configs(root: Path) -> dict[str, dict[str, list[str]]]:
    """The dataset card's ``configs:`` header: config name -> {split: [data file patterns]}."""
    card = root / "README.md"
    if not card.is_file():
        return {}
    text = read_text(source_file(root, card))
    if not text.startswith("---"):
        return {}
    try:
        header = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError as error:
        raise ImporterError(f"{card}: the YAML header cannot be read ({error})") from error
    configs = {}
    for entry in header.get("configs") or []:
        splits: dict[str, list[str]] = {}
        files = entry.get("data_files") or []
        for item in [files] if isinstance(files, (str, dict)) else files:
            split, paths = ("train", item) if isinstance(item, str) else (item.get("split", "train"), item.get("path"))
            splits.setdefault(split, []).extend([paths] if isinstance(paths, str) else list(paths or []))
        configs[entry.get("config_name", "default")] = splits
    return configs


@dataclass
class MtebFormatImporter(Importer):
    """A retrieval dataset in mteb's hub layout (see the module docstring)."""

    split: str = "test"
    subsets: list[str] | None = None
    """mteb's hf_subsets (``<subset>-corpus`` ...); None: the default configs (``corpus`` ...)."""
    subset_column: str = "language"
    """The queries column that holds each query's subset (with ``subsets``): ``language`` (mteb's
    hf_subsets are mostly languages) or ``domain`` (MMDocIR's), columns a protocol can split by."""
    page_text: bool = True
    """The corpus ``text`` as the pages' dom_text; false: images only (mteb's T2I tasks drop the text)."""
    documents: str = "top_ranked"
    """How pages are grouped into documents: top_ranked | qrels | none (the module docstring)."""
    source_name: str | None = None
    license: str | None = None

    format = "mteb"

    def read(self) -> ImportedData:
        if self.documents not in (*DOCUMENT_RULES, "none"):
            raise ImporterError(f"documents must be one of top_ranked, qrels, none; got '{self.documents}'")
        root = fetch(self.source, self.revision)
        configs = card_configs(root)
        name = self.source_name or str(self.source).rstrip("/").split("/")[-1]
        subsets = list(self.subsets) if self.subsets else [None]
        queries, qrels, groups, corpus_files, qrels_where = [], [], [], [], []
        for subset in subsets:
            prefix = f"{subset}:" if subset else ""
            if subset:
                qrels_config = f"{subset}-qrels"
            else:
                qrels_config = "default" if "default" in configs or "qrels" not in configs else "qrels"
            query_config = "query" if not subset and "query" in configs else _config(subset, "queries")
            frame = self._queries(self._read(root, configs, query_config), prefix, root, query_config)
            if subset:
                frame[self.subset_column] = subset
            queries.append(frame)
            judged_frame = self._read(root, configs, qrels_config)
            qrels_where.append(judged_frame.attrs.get("where"))
            judged = self._qrels(judged_frame, prefix, root, qrels_config)
            qrels.append(judged)
            if self.documents == "qrels":
                groups += [list(g) for _, g in judged.groupby("query_id", sort=False)["page_id"]]
            elif self.documents == "top_ranked":
                groups += self._top_ranked(root, configs, subset, prefix)
            corpus_files.append((prefix, self._files(root, configs, _config(subset, "corpus"))))
        document_of = _connected(groups)
        if self.documents == "none":
            rule = NO_DOCUMENT_IDS
        elif document_of:
            rule = DOCUMENT_RULES[self.documents] + " (pages in no group are documents of their own)"
        else:
            rule = NO_DOCUMENT_IDS + f" (no {self.documents} groups to derive documents from)"
        data = ImportedData(
            pages=self._pages(corpus_files, document_of),
            queries=pd.concat(queries, ignore_index=True),
            qrels=pd.concat(qrels, ignore_index=True),
            qrels_file=Path(qrels_where[0]) if len(qrels_where) == 1 and qrels_where[0] else root,
            source=name,
            document_ids=rule,
            info={
                **self.provenance(),
                "split": self.split,
                "subsets": list(self.subsets) if self.subsets else None,
            },
        )
        if not self.page_text:
            data.notes.append("page text not read (page_text=false): the pages are images only, as the protocol has it")
        return data

    # -- reading configs ---------------------------------------------------------------------------

    def _files(self, root: Path, configs: dict, config: str) -> list[Path]:
        splits = configs.get(config)
        if splits:
            split = self.split if self.split in splits else next(iter(splits)) if len(splits) == 1 else None
            if split is None:
                raise ImporterError(f"{root}: config '{config}' has no split '{self.split}' (it has {sorted(splits)})")
            found = sorted(
                {f for pattern in splits[split] for f in root.glob(_relative_pattern(pattern, root, config))}
            )
        else:
            found = sorted((root / config).glob(f"{self.split}-*.parquet"))
        if not found:
            raise ImporterError(
                f"{root}: no data files for config '{config}', split '{self.split}' "
                f"(neither in the card's configs nor as {config}/{self.split}-*.parquet)"
            )
        return [source_file(root, file) for file in found]  # (a link may point anywhere: only the dataset's files)

    def _read(self, root: Path, configs: dict, config: str) -> pd.DataFrame:
        frames = []
        files = self._files(root, configs, config)
        for file in files:
            if not file.name.endswith((".parquet", ".jsonl", ".jsonl.gz")):
                raise ImporterError(f"{file}: not Parquet or JSON lines")
            if file.suffix == ".parquet":  # queries and qrels never need an image column
                names = parquet_file(file).schema_arrow.names
                frames.append(read_parquet(file, [n for n in names if n != "image"]).to_pandas())
            else:
                frames.append(pd.DataFrame.from_records([record for _, record in json_lines(file)]))
        frame = pd.concat(frames, ignore_index=True)
        frame.attrs["where"] = str(files[0]) if len(files) == 1 else f"{root}: config '{config}'"
        return frame

    def _queries(self, frame: pd.DataFrame, prefix: str, root: Path, config: str) -> pd.DataFrame:
        ids = _column(frame, _ID_COLUMNS["queries"], root, config)
        text = _column(frame, ("text", "query"), root, config)
        return pd.DataFrame({"query_id": prefix + ids.astype(str), "text": text, "language": None, "generator": None})

    def _qrels(self, frame: pd.DataFrame, prefix: str, root: Path, config: str) -> pd.DataFrame:
        query = _column(frame, ("query-id", "query_id"), root, config)
        page = _column(frame, ("corpus-id", "corpus_id"), root, config)
        where = frame.attrs.get("where", f"{root}: config '{config}'")
        score = integer_grades(_column(frame, ("score",), root, config), lambda i: f"{where}: row {i}")
        return pd.DataFrame(
            {
                "query_id": prefix + query.astype(str),
                "page_id": prefix + page.astype(str),
                "grade": pd.Series(score, dtype="int64", index=frame.index),
            }
        )

    def _top_ranked(self, root: Path, configs: dict, subset: str | None, prefix: str) -> list[list[str]]:
        config = _config(subset, "top_ranked")
        if config not in configs and not (root / config).is_dir():
            return []
        frame = self._read(root, configs, config)
        lists = _column(frame, ("corpus-ids", "corpus_ids"), root, config)
        return [[prefix + str(page) for page in pages] for pages in lists]

    def _pages(self, corpus_files: list[tuple[str, list[Path]]], document_of: dict[str, str]) -> Iterator[pd.DataFrame]:
        for prefix, files in corpus_files:
            for file in files:
                names = parquet_file(file).schema_arrow.names
                id_column = next((c for c in _ID_COLUMNS["corpus"] if c in names), None)
                if id_column is None or "image" not in names:
                    raise ImporterError(
                        f"{file}: the corpus needs an id column ({', '.join(_ID_COLUMNS['corpus'])}) and 'image'"
                    )
                wanted = [id_column, "image"] + ([c for c in ("title", "text") if c in names] if self.page_text else [])
                for batch in batches(file, BATCH_ROWS, wanted):
                    rows = batch.to_pandas()
                    page_id = prefix + rows[id_column].astype(str)
                    chunk = pd.DataFrame({"page_id": page_id, "doc_id": page_id.map(lambda p: document_of.get(p, p))})
                    chunk["image"] = rows["image"]
                    if "text" in rows:
                        title = rows["title"].fillna("") if "title" in rows else ""
                        chunk["dom_text"] = (title + "\n" + rows["text"].fillna("")).str.strip()
                    yield chunk


def _relative_pattern(pattern: str, root: Path, config: str) -> str:
    """A data-file pattern of the card, refused in one line unless it stays inside the dataset folder."""
    if not isinstance(pattern, str) or pattern.startswith(("/", "\\")) or ".." in Path(pattern).parts:
        raise ImporterError(f"{root}: config '{config}' names data files outside the dataset folder ({pattern!r})")
    return pattern


def _config(subset: str | None, kind: str) -> str:
    return f"{subset}-{kind}" if subset else kind


def _column(frame: pd.DataFrame, names: tuple[str, ...], root: Path, config: str) -> pd.Series:
    for name in names:
        if name in frame:
            return frame[name]
    where = frame.attrs.get("where", f"{root}: config '{config}'")
    raise ImporterError(f"{where}: has none of the columns {list(names)} (it has {list(frame.columns)})")


def _connected(groups: list[list[str]]) -> dict[str, str]:
    """Page id -> document id, pages listed together in a group being one document (union-find);
    a document is named ``doc-<its first page id>`` (first in the first group that names it)."""
    parent: dict[str, str] = {}

    def root(page: str) -> str:
        while parent[page] != page:
            parent[page] = parent[parent[page]]
            page = parent[page]
        return page

    for group in groups:
        for page in group:
            parent.setdefault(page, page)
        for page in group[1:]:
            a, b = root(group[0]), root(page)
            if a != b:
                parent[b] = a
    return {page: f"doc-{root(page)}" for page in parent}
