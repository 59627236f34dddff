"""A benchmark written in the ViDoRe v3 hub layout, with a dataset card, and pushed to the hub.

The layout is the one :class:`vldocir.importers.vidore.ViDoReImporter` reads (BEIR form, v3's
underscore columns), four configs of Parquet shards ``<config>/<split>-0000i-of-0000n.parquet``:

- ``corpus``: ``corpus_id`` (the page id), ``image`` (the hub's ``Image`` feature ``{bytes, path}``,
  the stored image's bytes as they are), ``doc_id``, ``page_number_in_doc`` (1-based, as v3 numbers
  pages), ``markdown`` (the page's ``dom_text``), and ``ocr_text``;
- ``queries``: ``query_id``, ``query``, ``language`` (the query's own, else ``default_language``),
  ``query_types`` (empty: the project has none), ``content_type`` (v3's labels of the query's
  evidence types), ``answer``, ``query_generator``, and the project's ``evidence_structure``,
  ``evidence_types``, ``source``, ``domain``;
- ``qrels``: ``query_id``, ``corpus_id``, ``score`` (the grade), ``content_type`` (v3's labels of the
  evidence elements' types), ``bounding_boxes`` ``[{annotator, x1, y1, x2, y2}]`` (the evidence
  elements' boxes in the exported image's pixels; ``annotator`` 0: the construction pipeline), and
  the project's ``element_ids``;
- ``documents_metadata``: ``doc_id``, ``file_name`` (the doc id), ``title``, ``url``, ``doc_type``
  (the domain), ``source``, ``license``, ``page_number`` (pages in the document).

Ids are the project's own strings where ViDoRe v3 numbers them, so that a re-import keeps every page
id and with it the page_id tie-break of rankings. Each shard's schema carries the ``huggingface``
features metadata ``datasets`` writes (``image`` typed ``Image``), and ``README.md`` names each
config's data files (:mod:`vldocir.interop.hub_card`), so ``datasets.load_dataset(<dir>, "queries")``
opens it. Pages stream through: :data:`ROW_GROUP_ROWS` page images in memory at a time, a new shard
once one holds ``shard_bytes``. The folder is written beside ``out`` and renamed into place.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.cache import staged_directory
from vldocir.data.benchmark import Benchmark
from vldocir.data.evidence import element_boxes
from vldocir.data.tables import table_files, table_location
from vldocir.errors import ConfigError, VldocirError

SPLIT = "test"
CONFIGS = ("corpus", "queries", "qrels", "documents_metadata")
ROW_GROUP_ROWS = 100
"""Rows per Parquet row group: the hub's viewer and ``datasets`` streaming read a row group at a time,
so a group of page images stays a few MB."""
SHARD_BYTES = 500 * 2**20
"""Largest shard (uncompressed Arrow bytes, about the file size for encoded images): the hub advises
shards of at most a few hundred MB."""
ANNOTATOR = 0
"""The ``annotator`` of every exported box: the construction pipeline placed them, no person."""

CONTENT_TYPE_LABELS: dict[str, str] = {
    "text": "Text",
    "headline": "Text",
    "caption": "Text",
    "list": "Text",
    "table": "Table",
    "table_row": "Table",
    "chart": "Chart",
    "image": "Image",
    "figure": "Image",
}
"""The project's element and evidence types -> ViDoRe v3's ``content_type`` labels (any other type,
e.g. ``formula``, is ``Other``); the project's own types travel unchanged in ``evidence_types``."""

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
BOX = pa.struct(
    [("annotator", pa.int64()), ("x1", pa.int64()), ("y1", pa.int64()), ("x2", pa.int64()), ("y2", pa.int64())]
)
LABELS = pa.list_(pa.string())
SCHEMAS: dict[str, pa.Schema] = {
    "corpus": pa.schema(
        [
            ("corpus_id", pa.string()),
            ("image", IMAGE),
            ("doc_id", pa.string()),
            ("page_number_in_doc", pa.int64()),
            ("markdown", pa.string()),
            ("ocr_text", pa.string()),
        ]
    ),
    "queries": pa.schema(
        [
            ("query_id", pa.string()),
            ("query", pa.string()),
            ("language", pa.string()),
            ("query_types", LABELS),
            ("content_type", LABELS),
            ("answer", pa.string()),
            ("query_generator", pa.string()),
            ("evidence_structure", pa.string()),
            ("evidence_types", LABELS),
            ("source", pa.string()),
            ("domain", pa.string()),
        ]
    ),
    "qrels": pa.schema(
        [
            ("query_id", pa.string()),
            ("corpus_id", pa.string()),
            ("score", pa.int64()),
            ("content_type", LABELS),
            ("bounding_boxes", pa.list_(BOX)),
            ("element_ids", LABELS),
        ]
    ),
    "documents_metadata": pa.schema(
        [
            ("doc_id", pa.string()),
            ("file_name", pa.string()),
            ("title", pa.string()),
            ("url", pa.string()),
            ("doc_type", pa.string()),
            ("source", pa.string()),
            ("license", pa.string()),
            ("page_number", pa.int64()),
        ]
    ),
}


def hub_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the ``huggingface`` features metadata ``datasets`` writes into each shard
    (its ``image`` column an ``Image``, decoded to a picture on load)."""
    from datasets import Features, Image

    features = Features.from_arrow_schema(schema)
    if "image" in features:
        features["image"] = Image()
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": features.to_dict()}})})


class ShardWriter:
    """One config's rows as ``<config>/<split>-*.parquet``: row groups of ``row_group_rows``, a new
    shard once the current one holds ``shard_bytes``; :meth:`close` names them ``-0000i-of-0000n``."""

    def __init__(self, root: Path, config: str, shard_bytes: int, row_group_rows: int = ROW_GROUP_ROWS):
        self.folder, self.config = root / config, config
        self.schema = hub_schema(SCHEMAS[config])
        self.shard_bytes, self.row_group_rows = shard_bytes, row_group_rows
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.files: list[Path] = []
        self.writer: pq.ParquetWriter | None = None
        self.in_shard = 0
        self.rows = 0

    def write(self, rows: pa.Table) -> None:
        self.buffer.append(rows.select(self.schema.names).cast(self.schema))
        self.buffered += rows.num_rows
        while self.buffered >= self.row_group_rows:
            self._write_group(self.row_group_rows)

    def _write_group(self, n: int) -> None:
        table = pa.concat_tables(self.buffer) if self.buffer else self.schema.empty_table()
        group, rest = table.slice(0, n), table.slice(n)
        self.buffer, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows
        if self.writer is not None and self.in_shard and self.in_shard + group.nbytes > self.shard_bytes:
            self.writer.close()
            self.writer = None
        if self.writer is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.files.append(self.folder / f".{SPLIT}-{len(self.files):05d}.parquet")
            self.writer = pq.ParquetWriter(self.files[-1], self.schema)
            self.in_shard = 0
        self.writer.write_table(group, row_group_size=max(n, 1))
        self.in_shard += group.nbytes
        self.rows += group.num_rows

    def close(self) -> list[Path]:
        if self.buffered or not self.files:
            self._write_group(self.buffered)
        self.writer.close()
        named = []
        for i, file in enumerate(self.files):
            target = self.folder / f"{SPLIT}-{i:05d}-of-{len(self.files):05d}.parquet"
            file.rename(target)
            named.append(target)
        return named


@dataclass
class HubExport:
    """What :func:`export_hub` wrote: the folder, rows and shards per config."""

    root: Path
    rows: dict[str, int]
    shards: dict[str, int]


def export_hub(
    bench: Benchmark,
    out: str | Path,
    *,
    force: bool = False,
    default_language: str = "english",
    shard_bytes: int = SHARD_BYTES,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> HubExport:
    """Write ``bench`` into ``out`` in the ViDoRe v3 hub layout with its dataset card (module docstring).

    ``out`` must not exist or be empty, unless ``force`` (then it is replaced once the export is
    complete); it may not hold the benchmark itself. Written in a staging folder beside ``out``."""
    from vldocir.interop.hub_card import dataset_card

    out = Path(out).expanduser().absolute()
    root = bench.root.resolve()
    if out.resolve() == root or root.is_relative_to(out.resolve()) or out.resolve().is_relative_to(root):
        raise ConfigError(f"out={out} overlaps the benchmark's own folder {root}: choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"out={out} exists and is not empty: choose another folder, or force=true to replace it")
    with staged_directory(out) as staging:  # renamed into place only once complete
        rows, shards = _write_configs(bench, staging, default_language, shard_bytes, row_group_rows)
        (staging / "README.md").write_text(dataset_card(bench, rows, default_language))
    return HubExport(out, rows, shards)


def _write_configs(
    bench: Benchmark, root: Path, default_language: str, shard_bytes: int, row_group_rows: int
) -> tuple[dict[str, int], dict[str, int]]:
    pages = bench.arrow("pages", ["page_id", "doc_id", "page_index", "width", "height"]).to_pandas()
    image_size: dict[str, tuple[int, int]] = {}
    writers = {c: ShardWriter(root, c, shard_bytes, row_group_rows) for c in CONFIGS}
    for chunk in _corpus_chunks(bench, row_group_rows, image_size):
        writers["corpus"].write(chunk)
    writers["queries"].write(_queries(bench, default_language))
    writers["qrels"].write(_qrels(bench, pages, image_size))
    writers["documents_metadata"].write(_documents(bench))
    shards = {c: len(w.close()) for c, w in writers.items()}
    return {c: w.rows for c, w in writers.items()}, shards


def _corpus_chunks(bench: Benchmark, rows: int, image_size: dict[str, tuple[int, int]]) -> Iterator[pa.Table]:
    """The corpus config, ``rows`` pages at a time, read from the pages table's files batch by batch
    (in the table's order: page_id); ``image_size`` collects each image's pixel size for the boxes."""
    from PIL import Image

    columns = ["page_id", "doc_id", "page_index", "image", "dom_text", "ocr_text"]
    for file in table_files(table_location(bench.root, "pages")):
        for batch in pq.ParquetFile(file).iter_batches(batch_size=rows, columns=columns):
            out: dict[str, list] = {name: [] for name in SCHEMAS["corpus"].names}
            for page in batch.to_pylist():
                image = page["image"] or {}
                data, path = image.get("bytes"), image.get("path")
                if not data and path:
                    data = _read_image(bench.root / path, page["page_id"])
                name = page["page_id"] + (Path(path).suffix if path else "")
                if data:
                    with Image.open(io.BytesIO(data)) as opened:  # (the header only)
                        image_size[page["page_id"]] = opened.size
                out["corpus_id"].append(page["page_id"])
                out["image"].append({"bytes": data, "path": name} if data else None)
                out["doc_id"].append(page["doc_id"])
                out["page_number_in_doc"].append(page["page_index"] + 1)
                out["markdown"].append(page["dom_text"])
                out["ocr_text"].append(page["ocr_text"])
            yield pa.Table.from_pydict(out, schema=SCHEMAS["corpus"])


def _read_image(path: Path, page_id: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise VldocirError(f"page {page_id}: its image {path} cannot be read ({error.strerror or error})") from error


def content_types(types) -> list[str]:
    """ViDoRe v3's ``content_type`` labels (sorted, distinct) of the project's evidence or element types."""
    return sorted({CONTENT_TYPE_LABELS.get(str(t), "Other") for t in (types if types is not None else [])})


def _queries(bench: Benchmark, default_language: str) -> pa.Table:
    columns = ["query_id", "text", "answer", "evidence_structure", "source", "domain", "generator", "evidence_types"]
    queries = bench.arrow("queries", [*columns, "language"]).to_pandas()
    types = [list(t) if t is not None else [] for t in queries["evidence_types"]]
    frame = pd.DataFrame(
        {
            "query_id": queries["query_id"],
            "query": queries["text"],
            "language": queries["language"].fillna(default_language),
            "query_types": [[] for _ in range(len(queries))],
            "content_type": [content_types(t) for t in types],
            "answer": queries["answer"],
            "query_generator": queries["generator"],
            "evidence_structure": queries["evidence_structure"],
            "evidence_types": types,
            "source": queries["source"],
            "domain": queries["domain"],
        }
    )
    return pa.Table.from_pandas(frame, schema=SCHEMAS["queries"], preserve_index=False)


def _qrels(bench: Benchmark, pages: pd.DataFrame, image_size: dict[str, tuple[int, int]]) -> pa.Table:
    """The qrels with v3's labels and boxes of their evidence elements on the qrel's page (boxes scaled
    from page pixels to the exported image's pixels; an element split over columns or pages gives its
    fragments there)."""
    qrels = bench.arrow("qrels", ["query_id", "page_id", "doc_id", "element_ids", "grade"]).to_pandas()
    cited = {
        (d, e)
        for d, ids in zip(qrels["doc_id"], qrels["element_ids"], strict=True)
        for e in (ids if ids is not None else [])
    }
    located = _cited_elements(bench, cited)
    page = pages.set_index("page_id")
    labels, boxes, ids = [], [], []
    for row in qrels.itertuples(index=False):
        element_ids = list(row.element_ids) if row.element_ids is not None else []
        found = [located[(row.doc_id, e)] for e in element_ids if (row.doc_id, e) in located]
        index = page.at[row.page_id, "page_index"]
        on_page = [
            box
            for e in found
            if e["bbox"] is not None
            for p, box in element_boxes(e["page_index"], e["bbox"], e.get("fragments"))
            if p == index
        ]
        width, height = page.at[row.page_id, "width"], page.at[row.page_id, "height"]
        pixels = image_size.get(row.page_id)
        sx = pixels[0] / width if pixels and width and not pd.isna(width) else 1.0
        sy = pixels[1] / height if pixels and height and not pd.isna(height) else 1.0
        boxes.append([_box(box, sx, sy) for box in on_page])
        labels.append(content_types([e["element_type"] for e in found]))
        ids.append(element_ids)
    frame = pd.DataFrame(
        {
            "query_id": qrels["query_id"],
            "corpus_id": qrels["page_id"],
            "score": qrels["grade"].astype("int64"),
            "content_type": labels,
            "bounding_boxes": boxes,
            "element_ids": ids,
        }
    )
    return pa.Table.from_pandas(frame, schema=SCHEMAS["qrels"], preserve_index=False)


def _cited_elements(bench: Benchmark, cited: set[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """The elements ``cited`` names, read batch by batch (a full benchmark has millions of elements)."""
    import pyarrow.compute as pc

    columns = ["doc_id", "element_id", "page_index", "bbox", "element_type"]
    wanted = pa.array(sorted({e for _, e in cited}), pa.string())
    found = {}
    for file in table_files(table_location(bench.root, "elements")):
        parquet = pq.ParquetFile(file)
        split = ["fragments"] if "fragments" in parquet.schema_arrow.names else []  # (an optional column)
        for batch in parquet.iter_batches(batch_size=65536, columns=columns + split):
            for element in batch.filter(pc.is_in(batch.column("element_id"), value_set=wanted)).to_pylist():
                if (element["doc_id"], element["element_id"]) in cited:
                    found[(element["doc_id"], element["element_id"])] = element
    return found


def _box(bbox, sx: float, sy: float) -> dict[str, int]:
    """An element's box ``[x0, y0, x1, y1]`` in page pixels as v3's box in image pixels."""
    x0, y0, x1, y1 = bbox
    return {
        "annotator": ANNOTATOR,
        "x1": round(x0 * sx),
        "y1": round(y0 * sy),
        "x2": round(x1 * sx),
        "y2": round(y1 * sy),
    }


def _documents(bench: Benchmark) -> pa.Table:
    docs = bench.documents
    frame = pd.DataFrame(
        {
            "doc_id": docs["doc_id"],
            "file_name": docs["doc_id"],
            "title": docs["title"],
            "url": docs["url"],
            "doc_type": docs["domain"],
            "source": docs["source"],
            "license": docs["license"],
            "page_number": docs["n_pages"].astype("int64"),
        }
    )
    return pa.Table.from_pandas(frame, schema=SCHEMAS["documents_metadata"], preserve_index=False)


def push_to_hub(folder: str | Path, repo_id: str, *, private: bool = True, endpoint: str | None = None) -> str:
    """Upload an exported ``folder`` to the dataset repository ``repo_id`` (created when missing) with
    ``huggingface_hub``; the token comes from the environment variable ``HF_TOKEN`` only and is passed
    to the client, never written. Returns the commit's URL."""
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        raise ConfigError(
            f"push={repo_id} needs a Hugging Face token with write access in the environment variable HF_TOKEN"
        )
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"push={repo_id} is not a dataset repository name <org>/<name>")
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message="vldocir export_benchmark: the benchmark in the ViDoRe v3 hub layout with its card",
        )
    except Exception as error:  # HTTP, auth, network: one line naming the repository (never the token)
        detail = " ".join(str(error).replace(token, "<HF_TOKEN>").split())
        raise VldocirError(f"push={repo_id}: the upload failed: {detail}") from error
    return str(getattr(commit, "commit_url", commit))
