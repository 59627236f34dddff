"""Every kind of artifact a run writes under the cache root, every file of it, every damage: repaired
with the numbers of a clean run, or stopped by a one-line error naming the damaged file (and then
repaired by the rerun); never other numbers without an error.

The reference cache is built once per module by the real code, in process: BM25 over DOM text, the
offline all-MiniLM-L6-v2 encoder over OCR text (a page store of 5 shards, query embeddings,
document context), a reranker over the BM25 run, the reduced corpus, and the fingerprint memos of
the benchmarks loaded. Each kind gets a second key too (other parameters or another benchmark), to
take stale files from. Each case damages a copy of the reference cache and calls the code that reads
the damaged kind. tests/test_artifact_integrity.py checks the page store's repair in detail.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from helpers import compose_cfg, mini_subset, minilm_overrides
from vldocir.cache import DONE_FILE, ArtifactCache, CorruptArtifactError, check_artifact
from vldocir.data.benchmark import load_benchmark
from vldocir.data.reduced import open_reduced
from vldocir.errors import VldocirError
from vldocir.retrieval.bm25 import BM25Retriever
from vldocir.retrieval.context import DocumentContext
from vldocir.retrieval.rerank import Rerank, Reranker
from vldocir.retrieval.settings import RunJob
from vldocir.store.cli import damaged_cache

BAD = 2  # the page shard whose files stand for every shard's (pages 10..14); shard 3 is copied over it
DEPTH = 21
BM25_FILES = [
    "artifact.json",
    "page_ids.json",
    "bm25/data.csc.index.npy",
    "bm25/indices.csc.index.npy",
    "bm25/indptr.csc.index.npy",
    "bm25/params.index.json",
    "bm25/vocab.index.json",
    "bm25/vocab.tokenizer.json",
]
RAGGED = ["artifact.json", "vectors.npy", "offsets.npy", "shard.json"]
SHARD = f"shards/{BAD:05d}"
KINDS = {  # kind -> (its files, the id map a swap damages, what reads it)
    "bm25-index": (BM25_FILES, "page_ids.json", "bm25"),
    "page-embeddings": (
        ["artifact.json", "store.json", "page_ids.json", *(f"{SHARD}/{f}" for f in RAGGED[1:])],
        "page_ids.json",
        "dense",
    ),
    "query-embeddings": ([*RAGGED, "query_ids.json"], "query_ids.json", "dense"),
    "doc-context": ([*RAGGED, "doc_ids.json"], "doc_ids.json", "ctx"),
    "rerank-scores": (["scores.json", "segments/*.jsonl"], "segments/*.jsonl", "rerank"),
    "reduced": (
        [
            "artifact.json",
            "benchmark.json",
            "documents.parquet",
            "pages.parquet",
            "elements.parquet",
            "queries.parquet",
            "qrels.parquet",
        ],
        None,
        "reduced",
    ),
    "fingerprints": (["*"], None, "fingerprints"),  # one memo per benchmark directory: all damaged at once
}


# -- the reference ----------------------------------------------------------------------------------
class PixelReranker(Reranker):
    """A reranker without a model: a score from the query text and a thumbnail of the page image."""

    batch_size = 4

    def __init__(self, name: str = "pixels"):
        self.name = name

    def cache_params(self):
        return {"reranker": self.name}

    def score(self, queries, images):
        return [
            int(hashlib.blake2b(q.encode() + image.resize((8, 8)).tobytes()).hexdigest()[:8], 16) / 2**32
            for q, image in zip(queries, images, strict=True)
        ]


class Readers:
    """The code each kind is read by, over one cache root; dense retrievers are built once."""

    def __init__(self, subset_dir: Path, other_parent: Path):
        self.bench = load_benchmark(subset_dir)
        self.other_parent = other_parent
        self.queries = dict(zip(self.bench.queries["query_id"], self.bench.queries["text"], strict=True))
        self.dense = {}
        for dtype in ("float16", "bfloat16"):
            cfg = compose_cfg(
                *minilm_overrides(),
                f"dataset.source={subset_dir}",
                "retriever.model.shard_size=5",
                f"retriever.model.storage_dtype={dtype}",
            )
            self.dense[dtype] = instantiate(cfg.retriever.model)
        self.bm25_input = None

    def bm25(self, cache: ArtifactCache, retriever: BM25Retriever | None = None, bench=None):
        bench = bench or load_benchmark(self.bench.root)  # the fingerprint memo is read here
        return (retriever or BM25Retriever()).retrieve(bench, self.queries, DEPTH, cache).to_pandas()

    def dense_run(self, cache: ArtifactCache, context: DocumentContext | None = None, dtype: str = "float16"):
        retriever = self.dense[dtype]
        retriever.context, retriever.stats = context, {}
        return retriever.retrieve(self.bench, self.queries, DEPTH, cache).to_pandas()

    def rerank(self, cache: ArtifactCache, name: str = "pixels"):
        job = RunJob(self.bench, self.queries, DEPTH, cache, retriever=None, inputs=[self.bm25_input])
        return Rerank(PixelReranker(name), top_n=3, progress=False).make_run(job).to_pandas()

    def reduced(self, cache: ArtifactCache, parent=None):
        reduced = open_reduced(parent or self.bench, cache.root)
        return reduced.fingerprint, self.bm25(cache, bench=reduced)

    def read(self, kind: str, cache: ArtifactCache):
        reader = KINDS[kind][2]
        if reader in ("bm25", "fingerprints"):
            return self.bm25(cache)
        if reader in ("dense", "ctx"):
            return self.dense_run(cache, DocumentContext(n_ctx=2, workers=1) if reader == "ctx" else None)
        return getattr(self, reader)(cache)


@pytest.fixture(scope="module")
def reference(subset_dir, tmp_path_factory):
    """The reference cache (each kind under two keys), what each kind's reader gives over it, and
    the directory of each kind's artifact those readers read."""
    root = tmp_path_factory.mktemp("damage")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLDOCIR_CACHE_DIR", str(root / "cache"))  # where a run keeps its fingerprint memos
        other_parent = mini_subset(root / "other", ["wikipedia-00001"], name="other")
        readers = Readers(subset_dir, other_parent)
        cache = ArtifactCache(root / "cache")
        readers.bm25_input = BM25Retriever().retrieve(readers.bench, readers.queries, DEPTH, cache)
        results, main = {}, {"reduced": readers.bench.fingerprint}
        for kind in KINDS:  # each kind's artifact is the first of its kind its reader looks up
            start = len(cache.events)
            results[kind] = readers.read(kind, cache)
            for event in cache.events[start:]:
                main.setdefault(event["kind"], event["key"])
        # Second keys: stale files come from them.
        readers.bm25(cache, BM25Retriever(text_field="ocr_text"))
        readers.dense_run(cache, DocumentContext(n_ctx=2, workers=1), dtype="bfloat16")
        readers.rerank(cache, name="another reranker")
        readers.reduced(cache, load_benchmark(other_parent))
        assert readers.dense["float16"].encode_pages(readers.bench, cache).n_shards == 5
        yield {"cache": root / "cache", "readers": readers, "results": results, "main": main}


def artifact_dir(reference, cache_dir: Path, kind: str) -> Path:
    return cache_dir / kind if kind == "fingerprints" else cache_dir / kind / reference["main"][kind]


def other_dir(reference, cache_dir: Path, kind: str) -> Path:
    mine = reference["main"][kind]
    return next(p for p in sorted((cache_dir / kind).iterdir()) if not p.name.startswith(".") and p.name != mine)


def files_of(directory: Path, pattern: str) -> list[Path]:
    found = sorted(p for p in directory.glob(pattern) if p.is_file())
    assert found, f"{directory} has no {pattern}"
    return found


# -- damages ----------------------------------------------------------------------------------------
def flip(path: Path) -> None:
    """Flip bits of 8 bytes in the middle of the file: the lowest bit of every other byte (a digit
    stays a digit), bit 6 of the others (in binary numbers, an exponent or high mantissa bit)."""
    raw = bytearray(path.read_bytes())
    for at in range(len(raw) // 2, min(len(raw) // 2 + 8, len(raw))):
        raw[at] ^= 0x01 if at % 2 == 0 else 0x40
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def swap_ids(path: Path) -> None:
    """Two entries of an id map exchanged, the file size unchanged (only content checks see it)."""
    if path.suffix == ".jsonl":  # a score-cache segment: two lines' pages exchanged
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        i, j = next((i, j) for i in range(len(rows)) for j in range(i) if rows[i]["p"] != rows[j]["p"])
        rows[i]["p"], rows[j]["p"] = rows[j]["p"], rows[i]["p"]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return
    ids = json.loads(path.read_text())
    i, j = next((i, j) for i in range(len(ids)) for j in range(i) if ids[i] != ids[j] and len(ids[i]) == len(ids[j]))
    ids[i], ids[j] = ids[j], ids[i]
    path.write_text(json.dumps(ids))


FILE_DAMAGES = {"flipped": flip, "truncated": truncate, "deleted": Path.unlink, "stale": None}
CASES = [
    pytest.param(kind, name, damage, id=f"{kind}:{name}:{damage}")
    for kind, (names, _, _) in KINDS.items()
    for name in names
    for damage in FILE_DAMAGES
    if not (kind == "fingerprints" and damage == "stale")
]
CASES += [
    pytest.param(kind, ids, "swapped ids", id=f"{kind}:{ids}:swapped") for kind, (_, ids, _) in KINDS.items() if ids
]
CASES += [pytest.param("page-embeddings", SHARD, "shard copied", id="page-embeddings:shard 3 copied over shard 2")]


def unseen(kind: str, name: str, how: str) -> bool:
    """Damage that no reader can tell from an artifact not yet (or not wholly) built, or that changes
    nothing anyone reads: it may pass without a report (its numbers are still checked)."""
    return (
        kind == "fingerprints"  # memos of file digests: a damaged one is hashed again
        or (kind == "page-embeddings" and name == DONE_FILE)  # only its existence is read
        or (how == "deleted" and (name in (DONE_FILE, "store.json", "scores.json") or kind == "rerank-scores"))
    )


def damage(reference, cache_dir: Path, kind: str, name: str, how: str) -> list[Path]:
    """Damage a copy's artifact of ``kind``; returns the paths changed (a stale copy of identical
    bytes changes nothing)."""
    directory = artifact_dir(reference, cache_dir, kind)
    if how == "shard copied":
        shutil.rmtree(directory / SHARD)
        shutil.copytree(directory / f"shards/{BAD + 1:05d}", directory / SHARD)
        return [directory / SHARD]
    targets = files_of(directory, name)
    for target in targets:
        if how == "swapped ids":
            swap_ids(target)
        elif how == "stale":
            source = other_dir(reference, cache_dir, kind) / target.relative_to(directory)
            if kind == "rerank-scores" and target.suffix == ".jsonl":
                source = files_of(other_dir(reference, cache_dir, kind), name)[0]
            if source.read_bytes() == target.read_bytes():  # e.g. the same page order under another key
                targets = [t for t in targets if t != target]
            shutil.copyfile(source, target)
        else:
            FILE_DAMAGES[how](target)
    return targets


def same(found, expected) -> None:
    if isinstance(expected, tuple):  # the reduced corpus: its fingerprint and a run over it
        assert found[0] == expected[0]
        found, expected = found[1], expected[1]
    assert found[["query_id", "page_id", "rank"]].equals(expected[["query_id", "page_id", "rank"]])
    np.testing.assert_allclose(found["score"], expected["score"], rtol=1e-5, atol=1e-6)


def attempt(reference, kind: str, cache_dir: Path):
    try:
        return reference["readers"].read(kind, ArtifactCache(cache_dir)), None
    except VldocirError as error:
        return None, error


@pytest.mark.parametrize(("kind", "name", "how"), CASES)
def test_damage_is_repaired_or_named_never_other_numbers(kind, name, how, reference, tmp_path, monkeypatch, caplog):
    cache_dir = tmp_path / "cache"
    shutil.copytree(reference["cache"], cache_dir)
    monkeypatch.setenv("VLDOCIR_CACHE_DIR", str(cache_dir))
    damaged = damage(reference, cache_dir, kind, name, how)
    expected = reference["results"][kind]

    with caplog.at_level(logging.WARNING):
        found, error = attempt(reference, kind, cache_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    stopped = error is not None
    if stopped:  # one line naming the file; the artifact was dropped, so the rerun repairs it
        message = str(error)
        assert "\n" not in message and any(str(path) in message for path in damaged), message
        found, error = attempt(reference, kind, cache_dir)
        assert error is None, f"the rerun did not repair it: {error}"
    same(found, expected)
    # Damage was reported (an error, or a warning while it was repaired), naming the damaged file, in one line.
    assert all("\n" not in w for w in warnings), warnings
    if damaged and not unseen(kind, name, how) and not stopped:
        assert any(str(path) in w for w in warnings for path in damaged), warnings


def test_the_cases_cover_every_kind_and_every_file_a_run_writes(reference):
    """A new artifact kind, or a new file of one, fails here until the cases above cover it."""
    cache_dir = reference["cache"]
    # Hidden directories hold coordination state (work claims), never an artifact a reader trusts.
    assert {p.name for p in cache_dir.iterdir() if p.is_dir() and not p.name.startswith(".")} == set(KINDS)
    for kind, (names, _, _) in KINDS.items():
        directory = artifact_dir(reference, cache_dir, kind)
        files = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
        if kind == "page-embeddings":  # every shard holds the files shard BAD stands for
            files = {f if not f.startswith("shards/") else f"{SHARD}/{Path(f).name}" for f in files}
        assert files == {f for f in files if any(f == name or Path(f).match(name) for name in names)}, kind
        assert {n for n in names if "*" not in n} <= files, kind


def test_store_verify_reports_damaged_cache_artifacts(reference, tmp_path):
    cache_dir = tmp_path / "cache"
    shutil.copytree(reference["cache"], cache_dir)
    assert damaged_cache(cache_dir) == []
    bm25 = artifact_dir(reference, cache_dir, "bm25-index")
    flip(bm25 / "bm25" / "data.csc.index.npy")
    store = artifact_dir(reference, cache_dir, "page-embeddings")
    swap_ids(store / "page_ids.json")
    shutil.rmtree(store / SHARD)
    shutil.copytree(store / f"shards/{BAD + 1:05d}", store / SHARD)
    (segment,) = files_of(artifact_dir(reference, cache_dir, "rerank-scores"), "segments/*.jsonl")
    swap_ids(segment)
    found = damaged_cache(cache_dir)
    assert [path for path, _ in found] == [bm25, store, segment.parents[1]], found
    text = "\n".join(problem for _, problem in found)
    assert str(bm25 / "bm25" / "data.csc.index.npy") in text and str(store / "page_ids.json") in text
    assert str(segment) in text


def test_a_stale_unrecorded_file_and_a_copied_record_are_damage(tmp_path):
    cache = ArtifactCache(tmp_path)
    for key in ("a", "b"):
        with cache.build("kind", key, {}) as staging:
            (staging / "data.json").write_text(json.dumps([key]))
    check_artifact(tmp_path / "kind" / "a", "kind", "a")
    (tmp_path / "kind" / "a" / "extra.npy").write_bytes(b"from another key")
    with pytest.raises(CorruptArtifactError, match=r"extra\.npy: is not one of the files"):
        check_artifact(tmp_path / "kind" / "a", "kind", "a")
    shutil.copyfile(tmp_path / "kind" / "b" / DONE_FILE, tmp_path / "kind" / "a" / DONE_FILE)
    with pytest.raises(CorruptArtifactError, match="is the record of"):
        check_artifact(tmp_path / "kind" / "a", "kind", "a")
    assert cache.lookup("kind", "a") is None and cache.events[-1]["status"] == "corrupt"
    assert cache.lookup("kind", "b") == tmp_path / "kind" / "b"


@pytest.mark.parametrize(("integrity", "found"), [("full", True), ("auto", True), ("cheap", False)])
def test_digests_are_checked_as_the_integrity_policy_says(integrity, found, tmp_path):
    cache = ArtifactCache(tmp_path, integrity=integrity)
    with cache.build("kind", "k", {}) as staging:
        (staging / "ids.json").write_text('["p1", "p2"]')
    (tmp_path / "kind" / "k" / "ids.json").write_text('["p2", "p1"]')  # same size
    assert (cache.lookup("kind", "k") is None) == found
