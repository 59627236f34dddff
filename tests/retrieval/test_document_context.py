"""Document-context scoring (setting=ctx, paper Eq. 8): context vectors, exact scores, caching;
the build streamed to disk, parallel and resumable, bit for bit the sequential one."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

from helpers import SUBSET_QUERIES, evaluate, tiny_overrides
from test_search import shard, stored_fp32
from vldocir.cache import ArtifactCache, CorruptArtifactError
from vldocir.errors import ConfigError
from vldocir.retrieval import context as context_module
from vldocir.retrieval.context import DocumentContextVectors, document_context_vectors, spherical_kmeans
from vldocir.retrieval.embeddings import (
    PageEmbeddingStore,
    RaggedWriter,
    finish_if_complete,
    open_page_store,
    verify_ragged,
    write_ragged,
)
from vldocir.retrieval.search import exact_search
from vldocir.retrieval.vectors import RaggedVectors

score_multi_vector = BaseVisualRetrieverProcessor.score_multi_vector


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_spherical_kmeans_gives_unit_centroids_deterministically():
    rng = np.random.default_rng(0)
    tokens = unit(rng.standard_normal((600, 16)))
    centroids = spherical_kmeans(tokens, 8, iterations=10, seed=3)
    assert centroids.shape == (8, 16)
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(centroids, spherical_kmeans(tokens, 8, iterations=10, seed=3))
    # Clustering beats 8 arbitrary tokens at covering the document: higher mean best cosine.
    assert (tokens @ centroids.T).max(1).mean() > (tokens @ tokens[:8].T).max(1).mean()
    few = unit(rng.standard_normal((5, 16)))
    np.testing.assert_allclose(spherical_kmeans(few, 8, iterations=10, seed=3), few, atol=1e-6)


def test_context_scores_equal_page_maxsim_plus_document_maxsim():
    rng = np.random.default_rng(1)
    pages_per_doc = [3, 1, 5, 2, 4, 2, 6, 1]
    doc_of_page = np.repeat(np.arange(len(pages_per_doc)), pages_per_doc)
    pages = [unit(rng.standard_normal((int(rng.integers(6, 20)), 24))) for _ in doc_of_page]
    stored_pages = stored_fp32(pages, "float16")
    contexts = [
        spherical_kmeans(
            np.concatenate([p.numpy() for p, d in zip(stored_pages, doc_of_page, strict=True) if d == doc]), 4, 10, 0
        )
        for doc in range(len(pages_per_doc))
    ]
    context = DocumentContextVectors(
        RaggedVectors.from_list(contexts), [f"d{i}" for i in range(len(contexts))], doc_of_page
    )
    queries = [unit(rng.standard_normal((int(rng.integers(3, 9)), 24))) for _ in range(13)]

    top = exact_search(
        RaggedVectors.from_list(queries),
        shard(pages, 5),
        depth=len(pages),
        context=context.for_shard,
        query_batch_size=4,
        page_block_tokens=40,
        device="cpu",
        progress=False,
    )

    qs = [torch.from_numpy(q) for q in queries]
    page_scores = torch.cat([score_multi_vector(qs, [p], device="cpu") for p in stored_pages], dim=1)
    doc_scores = torch.cat([score_multi_vector(qs, [torch.from_numpy(c)], device="cpu") for c in contexts], dim=1)
    reference = page_scores + doc_scores[:, torch.from_numpy(doc_of_page)]
    order = torch.sort(reference, dim=1, descending=True, stable=True).indices
    np.testing.assert_array_equal(top.indices, order.numpy())
    np.testing.assert_allclose(top.scores, reference.gather(1, order).numpy(), rtol=1e-5, atol=1e-4)


def test_ctx_on_a_text_retriever_says_what_it_needs(subset_dir, isolated_paths):
    with pytest.raises(
        ConfigError, match=r"setting ctx-n4 scores pages .* retriever dom_bm25 \(BM25Retriever\) has none"
    ):
        evaluate("setting=ctx", "n_ctx=4", f"dataset.source={subset_dir}")


@pytest.mark.slow
def test_ctx_end_to_end_builds_context_vectors_once_per_n_ctx(subset_dir, tiny, isolated_paths):
    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "setting=ctx"]

    def events(manifest, kind):
        return [e["status"] for e in manifest["cache"] if e["kind"] == kind]

    metrics, manifest, run_dir = evaluate(*common, "n_ctx=4")
    assert run_dir.parent.name == "ctx-n4" and metrics["n_queries"] == SUBSET_QUERIES
    built = manifest["retrieval"]["doc_context"]
    assert built == {
        "n_ctx": 4,
        "documents": 3,
        "documents_clustered": 3,
        "documents_reused": 0,
        "workers": 1,
        "build_s": built["build_s"],
        "s_per_doc": built["s_per_doc"],
    }
    assert events(manifest, "doc-context") == ["miss"]

    _, manifest, _ = evaluate(*common, "n_ctx=8")
    assert events(manifest, "page-embeddings") == ["hit"] and events(manifest, "doc-context") == ["miss"]

    _, manifest, ctx_dir = evaluate(*common, "n_ctx=4", "depth=10")
    assert events(manifest, "page-embeddings") == ["hit"] and events(manifest, "doc-context") == ["hit"]
    assert len(list((isolated_paths / "cache" / "doc-context").glob("[!.]*"))) == 2

    # The document term moves pages of the best-matching document up: the rankings differ.
    _, _, base_dir = evaluate(*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "depth=10")
    base_run = pq.read_table(base_dir / "run.parquet").to_pandas()
    ctx_run = pq.read_table(ctx_dir / "run.parquet").to_pandas()
    assert len(base_run) == len(ctx_run) == SUBSET_QUERIES * 10
    assert not base_run[["query_id", "page_id"]].equals(ctx_run[["query_id", "page_id"]])


# -- the build: streamed, parallel, resumable -----------------------------------------------------
def synthetic_store(
    cache_dir: Path, page_doc: np.ndarray, shard_size: int = 4, dim: int = 8, seed: int = 0, dtype: str = "float16"
) -> PageEmbeddingStore:
    """A finished page store of random unit token vectors (0 to 30 per page), pages in shards of ``shard_size``."""
    rng = np.random.default_rng(seed)
    page_ids = [f"p{i:04d}" for i in range(len(page_doc))]
    store = open_page_store(ArtifactCache(cache_dir), "synthetic", {}, page_ids, shard_size, dtype)
    for index in range(store.n_shards):
        start, stop = store.shard_range(index)
        store.shard_dir(index).mkdir(parents=True)
        write_ragged(
            store.shard_dir(index),
            [unit(rng.standard_normal((int(rng.integers(0, 31)), dim))) for _ in range(start, stop)],
            dtype,
            {"first_page": start},  # as encode_shards records it: the store checks each shard's place
        )
    finish_if_complete(store, {})
    return store


def sequential_reference(store: PageEmbeddingStore, page_doc: np.ndarray, n_ctx: int, directory: Path) -> Path:
    """The build as it was before streaming: every document's tokens gathered in page order from
    fully read shards, clustered one after the other, written at once by write_ragged."""
    tokens = [[] for _ in range(page_doc.max() + 1)]
    for stored in store.shards(full=True):
        for i in range(len(stored)):
            tokens[page_doc[stored.first_index + i]].append(stored.subset(np.array([i])).fp32().numpy())
    directory.mkdir(parents=True)
    write_ragged(directory, [spherical_kmeans(np.concatenate(t), n_ctx, 5, 0) for t in tokens], store.dtype, {})
    return directory


PAGES_PER_DOC = [3, 1, 7, 2, 5, 4, 1, 6, 9, 2, 3, 4]  # straddling shards of 4, spanning three, one page alone


def corpus(tmp_path: Path, page_doc: np.ndarray | None = None, **store_options):
    page_doc = np.repeat(np.arange(len(PAGES_PER_DOC)), PAGES_PER_DOC) if page_doc is None else page_doc
    store = synthetic_store(tmp_path / "cache", page_doc, **store_options)
    return store, [f"d{i:02d}" for i in range(page_doc.max() + 1)], page_doc


def build(store, doc_ids, page_doc, n_ctx=12, policy="resume", **options):
    stats = {}
    cache = ArtifactCache(store.directory.parents[1], policy)
    built = document_context_vectors(
        store, doc_ids, page_doc, cache, n_ctx, 5, 0, progress=False, stats=stats, **options
    )
    return built, stats.get("doc_context"), cache


def artifact_files(built: DocumentContextVectors) -> dict[str, bytes]:
    directory = Path(built.vectors.source)
    return {
        name: (directory / name).read_bytes() for name in ("vectors.npy", "offsets.npy", "shard.json", "doc_ids.json")
    }


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("order", ["contiguous", "interleaved"])
def test_streamed_build_is_bit_for_bit_the_sequential_one(tmp_path, dtype, order):
    page_doc = None
    if order == "interleaved":  # a document's pages need not be adjacent in the store
        shuffled = np.random.default_rng(3).permutation(np.repeat(np.arange(len(PAGES_PER_DOC)), PAGES_PER_DOC))
        _, first, inverse = np.unique(shuffled, return_index=True, return_inverse=True)
        page_doc = np.argsort(np.argsort(first))[inverse]  # numbered by first appearance, as doc_of_page does
    store, doc_ids, page_doc = corpus(tmp_path, page_doc, dtype=dtype)
    built, stats, _ = build(store, doc_ids, page_doc)
    reference = sequential_reference(store, page_doc, 12, tmp_path / "reference")
    (reference / "doc_ids.json").write_text(json.dumps(doc_ids))
    files = artifact_files(built)
    for name, data in files.items():
        assert data == (reference / name).read_bytes(), name
    assert len(set(built.vectors.lengths.tolist())) > 1, "some documents have fewer tokens than n_ctx, some more"
    assert stats == {
        "n_ctx": 12,
        "documents": 12,
        "documents_clustered": 12,
        "documents_reused": 0,
        "workers": 1,
        "build_s": stats["build_s"],
        "s_per_doc": stats["s_per_doc"],
    }
    artifact = Path(built.vectors.source)
    assert sorted(p.name for p in artifact.iterdir()) == [
        "artifact.json",
        "doc_ids.json",
        "offsets.npy",
        "shard.json",
        "vectors.npy",
    ]
    assert not list(artifact.parent.glob(".*.partial"))


class Killed(Exception):
    pass


def kill_after(monkeypatch, chunks: int) -> None:
    """Make the build stop (as a kill would) once ``chunks`` chunks are written and recorded."""
    real = RaggedWriter.write
    count = {"n": 0}

    def write(self, *args, **kwargs):
        if count["n"] == chunks:
            raise Killed
        count["n"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RaggedWriter, "write", write)


def test_interrupted_build_resumes_where_it_stopped_and_ends_byte_identical(tmp_path, monkeypatch):
    store, doc_ids, page_doc = corpus(tmp_path)
    uninterrupted = artifact_files(build(*corpus(tmp_path / "other"))[0])

    with monkeypatch.context() as patch:
        kill_after(patch, 3)
        with pytest.raises(Killed):
            build(store, doc_ids, page_doc)
    (partial,) = (store.directory.parents[1] / "doc-context").glob(".*.partial")
    assert len((partial / "chunks.jsonl").read_text().splitlines()) == 3

    built, stats, cache = build(store, doc_ids, page_doc)
    assert artifact_files(built) == uninterrupted
    assert stats["documents_reused"] > 0 and stats["documents_clustered"] == 12 - stats["documents_reused"]
    assert [e["status"] for e in cache.events] == ["miss"] and not partial.exists()


def test_resume_redoes_chunks_whose_rows_or_page_shards_changed(tmp_path, monkeypatch):
    store, doc_ids, page_doc = corpus(tmp_path)
    with monkeypatch.context() as patch:
        kill_after(patch, 5)
        with pytest.raises(Killed):
            build(store, doc_ids, page_doc)
    (partial,) = (store.directory.parents[1] / "doc-context").glob(".*.partial")
    records = [json.loads(line) for line in (partial / "chunks.jsonl").read_text().splitlines()]
    # Rows of the second finished chunk overwritten since (a disk, a stray script) ...
    vectors = np.load(partial / "vectors.npy", mmap_mode="r+")
    offsets = np.load(partial / "offsets.npy")
    vectors[offsets[records[1]["docs"][0]]] = 0
    vectors.flush()
    del vectors
    # ... the page shard the fourth one read re-encoded with other values, and a record cut short.
    changed = records[3]["shards"][-1][0]
    rng = np.random.default_rng(9)
    lengths = np.diff(np.load(store.shard_dir(changed) / "offsets.npy"))
    first = {"first_page": store.shard_range(changed)[0]}
    write_ragged(store.shard_dir(changed), [unit(rng.standard_normal((int(n), 8))) for n in lengths], "float16", first)
    with open(partial / "chunks.jsonl", "a") as handle:
        handle.write('{"docs": [0, ')
    still_good = [r for i, r in enumerate(records) if i != 1 and changed not in [s for s, _ in r["shards"]]]

    built, stats, _ = build(store, doc_ids, page_doc)
    assert stats["documents_reused"] == sum(r["docs"][1] - r["docs"][0] for r in still_good) > 0
    reference = sequential_reference(store, page_doc, 12, tmp_path / "reference")
    assert Path(built.vectors.source, "vectors.npy").read_bytes() == (reference / "vectors.npy").read_bytes()


@pytest.mark.parametrize("policy", ["reuse", "overwrite"])
def test_a_partial_build_is_continued_under_resume_only(tmp_path, monkeypatch, policy):
    store, doc_ids, page_doc = corpus(tmp_path)
    with monkeypatch.context() as patch:
        kill_after(patch, 3)
        with pytest.raises(Killed):
            build(store, doc_ids, page_doc)
    _, stats, _ = build(store, doc_ids, page_doc, policy=policy)
    assert stats["documents_reused"] == 0 and stats["documents_clustered"] == 12


def test_a_partial_build_for_another_layout_starts_afresh(tmp_path, monkeypatch):
    store, doc_ids, page_doc = corpus(tmp_path)
    with monkeypatch.context() as patch:
        kill_after(patch, 3)
        with pytest.raises(Killed):
            build(store, doc_ids, page_doc)
    (partial,) = (store.directory.parents[1] / "doc-context").glob(".*.partial")
    np.save(partial / "offsets.npy", np.load(partial / "offsets.npy") + 1)  # not what these documents need
    built, stats, _ = build(store, doc_ids, page_doc)
    assert stats["documents_reused"] == 0
    verify_ragged(Path(built.vectors.source), full=True)


def test_a_damaged_page_shard_stops_the_build_naming_it(tmp_path):
    store, doc_ids, page_doc = corpus(tmp_path)
    vectors = np.load(store.shard_dir(2) / "vectors.npy", mmap_mode="r+")
    vectors[:] = np.nan
    vectors.flush()
    del vectors
    with pytest.raises(CorruptArtifactError, match=str(store.shard_dir(2))):
        build(store, doc_ids, page_doc)


def test_corrupt_artifact_error_survives_the_trip_from_a_worker_process():
    error = pickle.loads(pickle.dumps(CorruptArtifactError("/x/vectors.npy", "is missing")))
    assert (error.path, error.reason, str(error)) == (
        Path("/x/vectors.npy"),
        "is missing",
        "/x/vectors.npy: is missing",
    )


@pytest.mark.slow
def test_vectors_are_the_same_whatever_the_number_of_workers(tmp_path, monkeypatch):
    store, doc_ids, page_doc = corpus(tmp_path)
    one = artifact_files(build(store, doc_ids, page_doc, policy="overwrite", workers=1)[0])
    monkeypatch.setattr(context_module, "MIN_DOCS_PER_WORKER", 1)  # a pool even for 12 documents
    built, stats, _ = build(store, doc_ids, page_doc, policy="overwrite", workers=2)
    assert stats["workers"] == 2 and artifact_files(built) == one


@pytest.mark.slow
def test_a_build_killed_with_sigkill_resumes_byte_identical(tmp_path):
    store, doc_ids, page_doc = corpus(tmp_path)
    uninterrupted = artifact_files(build(*corpus(tmp_path / "other"))[0])
    script = textwrap.dedent(f"""
        import time
        import numpy as np
        from vldocir.cache import ArtifactCache
        from vldocir.retrieval import context
        from vldocir.retrieval.embeddings import PageEmbeddingStore

        chunk = context._cluster_chunk
        calls = []
        def slow_chunk(*args):  # the third chunk never ends: the kill lands mid-build, whatever the load
            calls.append(1)
            if len(calls) > 2:
                time.sleep(3600)
            return chunk(*args)
        context._cluster_chunk = slow_chunk
        store = PageEmbeddingStore(__import__("pathlib").Path({str(store.directory)!r}), {store.n_pages},
                                   {store.shard_size}, {store.dtype!r})
        context.document_context_vectors(store, {doc_ids!r}, np.array({page_doc.tolist()!r}),
                                         ArtifactCache({str(store.directory.parents[1])!r}), 12, 5, 0, workers=1,
                                         progress=False)
    """)
    process = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    record = store.directory.parents[1] / "doc-context"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        records = list(record.glob(".*.partial/chunks.jsonl"))
        if records and len(records[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the build ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()

    built, stats, _ = build(store, doc_ids, page_doc)
    assert artifact_files(built) == uninterrupted
    assert 0 < stats["documents_reused"] < 12 and stats["documents_clustered"] == 12 - stats["documents_reused"]
