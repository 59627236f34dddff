"""Benchmarks out in the ViDoRe v3 hub layout (vldocir.interop.hub_layout, hub_card) and back in.

The mini exported, re-imported through the project's own ViDoRe importer (``dataset=hub``) and run with
DOM-BM25 through the real pipeline gives the same run and per-query metrics as the mini itself;
``datasets.load_dataset`` opens every config of the export; the card's counts are the benchmark's;
``push=`` uploads with ``huggingface_hub`` to a local stand-in of the hub's HTTP API, with the token
from ``HF_TOKEN`` in the request and nowhere on disk.
"""

from __future__ import annotations

import base64
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from helpers import REPO_ROOT, evaluate
from vldocir.data.benchmark import load_benchmark
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.importers.base import import_benchmark
from vldocir.importers.vidore import ViDoReImporter
from vldocir.interop.hub_layout import CONFIGS, export_hub, push_to_hub

MINI = REPO_ROOT / "data" / "vl-docir-mini"


@pytest.fixture(scope="module")
def mini():
    return load_benchmark(MINI)


@pytest.fixture(scope="module")
def hub(mini, tmp_path_factory) -> Path:
    """The mini exported in small shards: its 18 MB of page images in 4 MiB shards, row groups of 20 pages."""
    return export_hub(mini, tmp_path_factory.mktemp("export") / "hub", shard_bytes=4 * 2**20, row_group_rows=20).root


def test_re_import_and_dom_bm25_give_the_same_run_and_per_query_metrics(hub, isolated_paths):
    original = evaluate("retriever=dom_bm25")
    again = evaluate("dataset=hub", f"dataset.importer.source={hub}", "dataset.name=mini-hub", "retriever=dom_bm25")
    run = [pd.read_parquet(e.entry / "run.parquet") for e in (original, again)]
    pd.testing.assert_frame_equal(*run)  # page ids, ranks and scores: ties broken alike
    per_query = [pd.read_parquet(e.entry / "per_query.parquet") for e in (original, again)]
    assert len(per_query[0]) == 142
    pd.testing.assert_frame_equal(per_query[0], per_query[1][per_query[0].columns])
    assert original.metrics["aggregates"] == again.metrics["aggregates"]


def test_the_import_keeps_the_projects_columns_and_overrules_a_label_the_evidence_contradicts(mini, hub, tmp_path):
    copy = tmp_path / "hub"
    shutil.copytree(hub, copy)
    queries = pq.read_table(copy / "queries").to_pandas()
    single = queries.index[queries["evidence_structure"] == "page_single"][0]
    near = queries.index[queries["evidence_structure"] == "doc_near"][0]
    queries.loc[single, "evidence_structure"] = "cross_doc"  # one page: cannot be cross_doc
    queries.loc[near, "evidence_structure"] = "doc_far"  # a far label for a near pair: the source's own rule
    for file in (copy / "queries").glob("*.parquet"):
        file.unlink()
    schema = pq.read_schema(next((hub / "queries").glob("*.parquet")))
    pq.write_table(
        pa.Table.from_pandas(queries, schema=schema, preserve_index=False), copy / "queries" / "test-0.parquet"
    )

    bench = import_benchmark(ViDoReImporter(source=str(copy)), tmp_path / "imported", name="mini-hub")
    back = bench.queries.set_index("query_id")
    original = mini.queries.set_index("query_id")
    expected = original["evidence_structure"].copy()
    expected[queries.loc[near, "query_id"]] = "doc_far"
    pd.testing.assert_series_equal(back["evidence_structure"], expected)
    assert [list(t) for t in back["evidence_types"]] == [list(t) for t in original["evidence_types"]]
    assert (
        (back[["source", "domain", "generator", "answer"]] == original[["source", "domain", "generator", "answer"]])
        .all()
        .all()
    )
    assert (back["language"] == "english").all()
    pages = bench.pages.set_index("page_id")
    source_pages = mini.pages.set_index("page_id")
    assert pages.index.equals(source_pages.index)
    for column in ("doc_id", "page_index", "dom_text", "ocr_text"):
        assert pages[column].equals(source_pages[column]), column
    docs = bench.documents.set_index("doc_id")
    assert (
        (docs[["source", "title", "license"]] == mini.documents.set_index("doc_id")[["source", "title", "license"]])
        .all()
        .all()
    )
    notes = " ".join(bench.info["built_by"]["notes"])
    assert (
        "kept for 141 of 142 (1 where the shared rule says another label" in notes
        and "1 unknown or contradicting" in notes
    )


def test_datasets_opens_every_config_in_shards_of_bounded_size(mini, hub, tmp_path):
    from datasets import load_dataset

    queries = load_dataset(str(hub), "queries", split="test", cache_dir=str(tmp_path / "hf"))
    assert len(queries) == 142 and set(queries["evidence_structure"]) == set(EVIDENCE_STRUCTURES)
    corpus = load_dataset(str(hub), "corpus", split="test", cache_dir=str(tmp_path / "hf"))
    assert len(corpus) == 312 and corpus[0]["image"].size == (400, 800)  # decoded: the Image feature
    for config, rows in (("qrels", 231), ("documents_metadata", 24)):
        assert len(load_dataset(str(hub), config, split="test", cache_dir=str(tmp_path / "hf"))) == rows
    shards = sorted((hub / "corpus").glob("*.parquet"))
    assert len(shards) >= 4 and shards[0].name == f"test-00000-of-{len(shards):05d}.parquet"
    for shard in shards:
        meta = pq.ParquetFile(shard).metadata
        assert all(meta.row_group(g).num_rows <= 20 for g in range(meta.num_row_groups))
        assert shard.stat().st_size <= 4 * 2**20
    boxes = pq.read_table(hub / "qrels").to_pandas()
    first = boxes.iloc[0]
    element = mini.elements.set_index(["doc_id", "element_id"]).loc[("arxiv-00003", first["element_ids"][0])]
    assert first["bounding_boxes"][0]["x1"] == round(element["bbox"][0] * 400 / 2000)  # image pixels (scale 0.2)


def test_the_card_names_every_config_and_counts_the_queries_by_source_and_structure(mini, hub):
    text = (hub / "README.md").read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert {c["config_name"]: c["data_files"][0]["path"] for c in front["configs"]} == {
        c: f"{c}/test-*" for c in CONFIGS
    }
    assert front["license"] == ["cc-by-4.0"] and front["language"] == ["en"] and front["size_categories"] == ["n<1K"]
    assert "visual-document-retrieval" in front["task_categories"]
    table = text.split("Queries per source and structure:")[1].split("## ")[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    counts = mini.queries.groupby("source")["evidence_structure"].value_counts()
    for source in ("arxiv", "pubmed", "sec", "wikipedia"):
        cells = [int(c) for c in rows[source].split("|")[2:-1]]
        assert cells == [int(counts[source].get(s, 0)) for s in EVIDENCE_STRUCTURES] + [int(counts[source].sum())]
    assert "| **all** | 25 | 28 | 23 | 22 | 21 | 23 | **142** |" in text
    assert mini.fingerprint in text and "layout version" in text and "llm_combined" in text


def test_bad_outputs_are_refused_before_anything_is_written(mini, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"exists and is not empty.*force=true"):
        export_hub(mini, taken)
    with pytest.raises(ConfigError, match="overlaps the benchmark's own folder"):
        export_hub(mini, MINI / "hub", force=True)
    assert (taken / "keep.txt").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    export_hub(mini, taken, force=True, shard_bytes=2**30)
    assert not (taken / "keep.txt").exists() and (taken / "README.md").is_file()


class _Hub(BaseHTTPRequestHandler):
    """The part of the hub's HTTP API that ``create_repo`` and ``upload_folder`` call: every file
    uploaded inline (upload mode ``regular``), the commit's files kept in ``files``."""

    requests: ClassVar[list[tuple[str, str, str | None]]] = []
    files: ClassVar[dict[str, bytes]] = {}

    def log_message(self, *args):  # (quiet)
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.requests.append(("POST", self.path, self.headers.get("Authorization")))
        if self.path == "/api/repos/create":
            self._json({"url": f"http://{self.headers['Host']}/datasets/org/mini", "name": "org/mini"})
        elif self.path == "/api/validate-yaml":
            self._json({})
        elif "/preupload/" in self.path:
            paths = [f["path"] for f in json.loads(body)["files"]]
            self._json({"files": [{"path": p, "uploadMode": "regular", "shouldIgnore": False} for p in paths]})
        elif "/commit/" in self.path:
            for line in body.decode().splitlines():
                item = json.loads(line)
                if item.get("key") == "file":
                    self.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            url = f"http://{self.headers['Host']}/datasets/org/mini/commit/{'a' * 40}"
            self._json({"commitUrl": url, "commitOid": "a" * 40})
        else:
            self.send_error(404)

    def _json(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_push_uploads_every_file_with_the_token_from_the_environment_only(mini, tmp_path, monkeypatch):
    out = export_hub(mini, tmp_path / "hub", shard_bytes=2**30).root
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"^push=org/mini needs a Hugging Face token .* HF_TOKEN$"):
        push_to_hub(out, "org/mini")
    token = "hf_secret" + "x" * 30
    monkeypatch.setenv("HF_TOKEN", token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = push_to_hub(out, "org/mini", endpoint=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert url.endswith("/datasets/org/mini/commit/" + "a" * 40)
    local = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert _Hub.files == local
    assert {auth for _, _, auth in _Hub.requests} == {f"Bearer {token}"}
    assert not any(token.encode() in data for data in local.values())
    with pytest.raises(ConfigError, match="is not a dataset repository name"):
        push_to_hub(out, "mini")
