"""Embedding retrievers end to end with tiny offline checkpoints: encode -> store -> search -> evaluate.

The checkpoints are random but real (tests/tiny_models.py): they load through the same
``from_pretrained`` calls, processors and model classes as the hub checkpoints named in
``conf/retriever/``. Only ``checkpoint.local_path`` and the dtype differ from a user's run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hydra.utils import instantiate

from helpers import (
    MINI_DIR,
    REPO_ROOT,
    compose_cfg,
    evaluate,
    mini_subset,
    minilm_overrides,
    newest_entry,
    run_py,
    tiny_overrides,
)
from vldocir import store
from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import load_benchmark
from vldocir.retrieval.checkpoints import ModelLoadError
from vldocir.retrieval.embeddings import BadPagesError

RETRIEVER_CONFIGS = sorted(p.stem for p in (REPO_ROOT / "conf" / "retriever").glob("*.yaml"))


def page_store_dirs(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "page-embeddings").iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("name", RETRIEVER_CONFIGS)
def test_every_retriever_config_instantiates_the_class_and_checkpoint_it_names(name):
    cfg = compose_cfg(f"retriever={name}")
    assert cfg.retriever.id == name
    retriever = instantiate(cfg.retriever.model)  # models load lazily: nothing is fetched here
    model = cfg.retriever.model
    assert type(retriever).__name__ == model._target_.rsplit(".", 1)[-1]
    if "encoder" not in model:
        return
    encoder, named = retriever.encoder, model.encoder
    assert type(encoder).__name__ == named._target_.rsplit(".", 1)[-1]
    assert getattr(encoder, "model_class", None) == named.get("model_class")
    # retriever=mteb leaves the revision to mteb's registry: the commit its ModelMeta pins
    revision = named.checkpoint.revision or (encoder.meta.revision if named._target_.endswith(".MtebEncoder") else None)
    assert encoder.checkpoint.hub_id == named.checkpoint.hub_id and encoder.checkpoint.revision == revision
    assert retriever.cache_params()["encoder"]["hub_id"] == named.checkpoint.hub_id


@pytest.mark.slow
@pytest.mark.parametrize("name", ["colqwen25", "colpali13", "gme_qwen2vl"])
def test_tiny_checkpoint_end_to_end_on_the_mini_benchmark(name, tiny, isolated_paths):
    metrics, manifest, run_dir = evaluate(*tiny_overrides(name, tiny), f"dataset.source={MINI_DIR}", "depth=50")
    assert {p.name for p in run_dir.iterdir()} >= {
        store.RUN_FILE,
        store.PER_QUERY_FILE,
        store.METRICS_FILE,
        store.MANIFEST_FILE,
    }
    run = pq.read_table(run_dir / store.RUN_FILE).to_pandas()
    n_queries = len(pq.read_table(MINI_DIR / "queries.parquet", columns=["query_id"]))
    n_pages = len(pq.read_table(MINI_DIR / "pages.parquet", columns=["page_id"]))
    assert metrics["n_queries"] == n_queries and run["query_id"].nunique() == n_queries
    assert run.groupby("query_id").size().eq(50).all()
    retrieval = manifest["retrieval"]
    assert retrieval["encode_pages"]["pages_encoded"] == n_pages and retrieval["encode_pages"]["pages_per_s"] > 0
    assert retrieval["encode_pages"]["gpu_s"] == 0.0 and retrieval["search"]["device"] == "cpu"
    encoder = retrieval["encoder"]
    hub_id = compose_cfg(f"retriever={name}").retriever.model.encoder.checkpoint.hub_id
    assert encoder["local_path"] == str(tiny[name]) and encoder["hub_id"] == hub_id
    if name == "colqwen25":  # the cap is stated in the config and recorded with what it produced
        assert encoder["processor_kwargs"] == {"max_num_visual_tokens": 64}
        assert encoder["image_processor_max_pixels"] == 64 * 28 * 28
        assert 0 < encoder["visual_tokens_per_page"]["max"] <= 64
    store_dir = Path(retrieval["page_embeddings"]["dir"])
    meta = json.loads((store_dir / "store.json").read_text())
    assert meta["n_pages"] == n_pages and (store_dir / "artifact.json").is_file()
    vectors = np.load(store_dir / "shards" / "00000" / "vectors.npy", mmap_mode="r")
    assert vectors.dtype == np.float16
    dims = {"colqwen25": 128, "colpali13": 128, "gme_qwen2vl": 64}
    assert vectors.shape[1] == dims[name]


def _encode_subset(subset_dir, tiny, cache_dir: Path, *extra: str):
    cfg = compose_cfg(
        *tiny_overrides("colqwen25", tiny),
        f"dataset.source={subset_dir}",
        "retriever.model.shard_size=5",
        f"paths.cache_dir={cache_dir}",
        *extra,
    )
    retriever = instantiate(cfg.retriever.model)
    bench = load_benchmark(subset_dir)
    return retriever, bench, ArtifactCache(cache_dir, cfg.cache_policy)


def test_interrupted_encoding_resumes_without_reencoding_and_gives_identical_embeddings(subset_dir, tiny, tmp_path):
    retriever, bench, cache = _encode_subset(subset_dir, tiny, tmp_path / "a")
    real_encode = retriever.encoder.encode_pages
    calls = []

    def dying_encode(pages):  # the job is killed while encoding the third shard
        calls.append(len(pages))
        if len(calls) > 2:
            raise KeyboardInterrupt("killed")
        return real_encode(pages)

    retriever.encoder.encode_pages = dying_encode
    with pytest.raises(KeyboardInterrupt):
        retriever.encode_pages(bench, cache)
    (store_dir,) = page_store_dirs(tmp_path / "a")
    finished = {
        d.name: (d / "vectors.npy").stat().st_mtime_ns
        for d in (store_dir / "shards").iterdir()
        if not d.name.startswith(".")
    }
    assert sorted(finished) == ["00000", "00001"] and not (store_dir / "artifact.json").exists()
    assert not [d for d in (store_dir / "shards").iterdir() if d.name.startswith(".")], "an interrupted write cleans up"

    # A process killed with SIGKILL leaves its half-written staging directory behind: it is ignored.
    debris = store_dir / "shards" / ".00002.staging-999999-1"
    debris.mkdir()
    (debris / "vectors.npy").write_bytes(b"\x93NUMPY truncated")

    retriever.encoder.encode_pages = lambda pages: (calls.append(len(pages)), real_encode(pages))[1]
    calls.clear()
    store_ = retriever.encode_pages(bench, cache)
    assert sum(calls) == 21 - 10, "only the 11 pages of the three missing shards are encoded"
    assert retriever.stats["encode_pages"]["shards_reused"] == 2 and store_.complete
    assert all((store_dir / "shards" / n / "vectors.npy").stat().st_mtime_ns == t for n, t in finished.items())

    fresh, _, fresh_cache = _encode_subset(subset_dir, tiny, tmp_path / "b")
    fresh_store = fresh.encode_pages(bench, fresh_cache)
    assert fresh_store.directory.name == store_dir.name
    for shard in range(store_.n_shards):
        for file in ("vectors.npy", "offsets.npy"):
            assert (store_.shard_dir(shard) / file).read_bytes() == (fresh_store.shard_dir(shard) / file).read_bytes()


def test_cache_key_follows_processor_settings_not_batch_sizes(subset_dir, tiny, tmp_path):
    def key(*extra):
        retriever, bench, cache = _encode_subset(subset_dir, tiny, tmp_path, *extra)
        return cache.key_for("page-embeddings", **retriever._page_key_parts(bench))

    base = key()
    assert key("retriever.model.encoder.processor_kwargs.max_num_visual_tokens=32") != base
    assert key("retriever.model.encoder.dtype=bfloat16") != base
    assert key("retriever.model.storage_dtype=bfloat16") != base
    assert key("retriever.model.encoder.checkpoint.revision=v1") != base
    assert (
        key(
            "retriever.model.encoder.batch_size=3",
            "retriever.model.search.query_batch_size=2",
            "retriever.model.encoder.device=cpu",
        )
        == base
    )


@pytest.mark.slow
def test_multirun_over_three_settings_encodes_the_corpus_once(subset_dir, tiny, isolated_paths):
    done = run_py(
        "-m",
        *tiny_overrides("colqwen25", tiny),
        f"dataset.source={subset_dir}",
        "setting=ctx",
        "n_ctx=2,4,8",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cache = isolated_paths / "cache"
    (store_dir,) = page_store_dirs(cache)
    assert len(list((store_dir / "shards").glob("*/shard.json"))) == 1  # 21 pages, shard size 1024
    assert len(list((cache / "doc-context").glob("[!.]*"))) == 3  # one set of context vectors per n_ctx
    runs = isolated_paths / "results" / "runs" / "mini-subset" / "colqwen25"
    assert sorted(p.name for p in runs.iterdir()) == ["ctx-n2", "ctx-n4", "ctx-n8"]
    entries = [newest_entry(isolated_paths / "results", "mini-subset", "colqwen25", f"ctx-n{n}") for n in (2, 4, 8)]
    manifests = [json.loads((entry / store.MANIFEST_FILE).read_text()) for entry in entries]
    page_events = [[e["status"] for e in m["cache"] if e["kind"] == "page-embeddings"] for m in manifests]
    assert page_events == [["miss"], ["hit"], ["hit"]]
    assert ["encode_pages" in m["retrieval"] for m in manifests] == [True, False, False]
    assert manifests[0]["retrieval"]["encode_pages"]["pages_encoded"] == 21


@pytest.mark.slow
def test_job_array_encodes_shards_in_separate_processes_then_search_reuses_them(subset_dir, tiny, isolated_paths):
    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "retriever.model.shard_size=4"]
    done = run_py(
        "-m",
        "stage=encode",
        *common,
        "encode.num_tasks=2",
        "encode.task=0,1",
        "hydra/launcher=submitit_local",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (store_dir,) = page_store_dirs(isolated_paths / "cache")
    tasks = sorted(p.name for p in (store_dir / "tasks").iterdir())
    assert tasks == ["task-0000-of-0002.json", "task-0001-of-0002.json"]
    encoded = [json.loads((store_dir / "tasks" / t).read_text())["encode"] for t in tasks]
    assert [e["shards_encoded"] for e in encoded] == [3, 3]  # shards 0,2,4 and 1,3,5
    assert (store_dir / "artifact.json").is_file()

    done = run_py(*common)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads(
        (newest_entry(isolated_paths / "results", "mini-subset", "colqwen25", "base") / store.MANIFEST_FILE).read_text()
    )
    assert [e["status"] for e in manifest["cache"] if e["kind"] == "page-embeddings"] == ["hit"]
    assert "encode_pages" not in manifest["retrieval"]


@pytest.fixture(scope="module")
def broken_subset_dir(tmp_path_factory) -> Path:
    return mini_subset(
        tmp_path_factory.mktemp("broken") / "b",
        ["arxiv-00003", "wikipedia-00000"],
        corrupt_page="arxiv-00003-p002",
        name="mini-broken",
    )


def test_undecodable_page_stops_before_search_and_names_it(broken_subset_dir, tiny, isolated_paths):
    with pytest.raises(BadPagesError, match="arxiv-00003-p002") as error:
        evaluate(*tiny_overrides("colqwen25", tiny), f"dataset.source={broken_subset_dir}")
    assert "on_bad_page=skip" in str(error.value)
    (store_dir,) = page_store_dirs(isolated_paths / "cache")
    assert (store_dir / "artifact.json").is_file(), "the other pages' embeddings are kept"
    assert not (isolated_paths / "results" / "runs" / "mini-broken").exists()


def test_undecodable_page_is_skipped_on_request_and_recorded(broken_subset_dir, tiny, isolated_paths):
    _, manifest, run_dir = evaluate(
        *tiny_overrides("colqwen25", tiny), f"dataset.source={broken_subset_dir}", "retriever.model.on_bad_page=skip"
    )
    assert [b["page_id"] for b in manifest["retrieval"]["skipped_pages"]] == ["arxiv-00003-p002"]
    run = pq.read_table(run_dir / store.RUN_FILE)
    assert "arxiv-00003-p002" not in set(run.column("page_id").to_pylist())
    assert run.num_rows > 0


@pytest.mark.slow
def test_model_missing_offline_names_the_hub_id_and_the_local_path_option(subset_dir, isolated_paths):
    done = run_py(
        "retriever=colqwen25",
        f"dataset.source={subset_dir}",
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(isolated_paths / "hf")},
    )
    assert done.returncode != 0
    assert "vidore/colqwen2.5-v0.2" in done.stderr and "checkpoint.local_path=" in done.stderr


def test_remote_code_models_need_an_explicit_opt_in(subset_dir, isolated_paths):
    retriever = instantiate(compose_cfg("retriever=jina_v4_mv").retriever.model)
    with pytest.raises(ModelLoadError, match="trust_remote_code=true"):
        retriever.encoder.encode_queries(["a question"])


def test_ocr_dense_with_a_sentence_transformers_model(subset_dir, isolated_paths):
    metrics, manifest, _run_dir = evaluate(
        *minilm_overrides(),
        f"dataset.source={subset_dir}",
    )
    assert manifest["retrieval"]["encoder"]["page_input"] == "ocr_text"
    store_dir = Path(manifest["retrieval"]["page_embeddings"]["dir"])
    assert np.load(store_dir / "shards" / "00000" / "vectors.npy").shape == (21, 384)
    # A real text embedder finds the evidence of these template queries far above chance (21 pages;
    # the metrics are percentages).
    assert metrics["aggregates"]["micro"]["recall@10"] > 60


def test_rankings_do_not_depend_on_batch_sizes_or_decode_threads(subset_dir, tiny, tmp_path):
    runs = []
    for name, batches in (
        (
            "a",
            [
                "retriever.model.encoder.batch_size=1",
                "retriever.model.search.query_batch_size=1",
                "retriever.model.search.page_block_tokens=10",
                "retriever.model.decode_workers=1",
            ],
        ),
        (
            "b",
            [
                "retriever.model.encoder.batch_size=7",
                "retriever.model.encoder.query_batch_size=5",
                "retriever.model.search.query_batch_size=64",
                "retriever.model.decode_workers=4",
            ],
        ),
    ):
        retriever, bench, cache = _encode_subset(subset_dir, tiny, tmp_path / name, *batches)
        queries = dict(zip(bench.queries["query_id"], bench.queries["text"], strict=True))
        runs.append(retriever.retrieve(bench, queries, 21, cache).to_pandas())
    a, b = runs
    assert a[["query_id", "page_id", "rank"]].equals(b[["query_id", "page_id", "rank"]])
    np.testing.assert_allclose(a["score"], b["score"], rtol=1e-4, atol=1e-4)


def test_broken_model_output_names_the_page_and_keeps_finished_shards(subset_dir, tiny, tmp_path):
    retriever, bench, cache = _encode_subset(subset_dir, tiny, tmp_path)
    real_encode = retriever.encoder.encode_pages
    calls = []

    def nan_on_third_shard(pages):
        calls.append(1)
        out = real_encode(pages)
        if len(calls) == 3:
            out[1][0, 0] = np.nan
        return out

    retriever.encoder.encode_pages = nan_on_third_shard
    store_, _ = retriever.page_store(bench, cache)
    with pytest.raises(ValueError, match=f"non-finite values for page {store_.page_ids()[11]}"):
        retriever.encode_pages(bench, cache)
    assert [store_.has_shard(s) for s in range(store_.n_shards)] == [True, True, False, False, False]


# run.py in a child process that SIGKILLs itself when it starts writing its third shard (the store's
# write_ragged wrapped, nothing else changed): two shards finished, the third's staging directory made.
KILLED_AT_THE_THIRD_SHARD = r"""
import os, runpy, signal, sys
from vldocir.retrieval import embeddings

write, calls = embeddings.write_ragged, []

def write_ragged(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return write(*args, **kwargs)

embeddings.write_ragged = write_ragged
sys.argv = ["run.py", *sys.argv[1:]]
runpy.run_path("run.py", run_name="__main__")
"""


@pytest.mark.slow
def test_encode_job_killed_with_sigkill_resumes_at_the_missing_shards(tiny, isolated_paths):
    """A run.py encode job is SIGKILLed while it writes its third shard (the kill lands there
    whatever the machine's speed); the same command resumes at the missing shards and the store is
    byte-identical to one encoded without interruption."""
    import os
    import signal
    import subprocess
    import sys

    args = [
        "stage=encode",
        *tiny_overrides("colqwen25", tiny),
        f"dataset.source={MINI_DIR}",
        "retriever.model.shard_size=8",
        "retriever.model.encoder.batch_size=1",
    ]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_THE_THIRD_SHARD, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "HYDRA_FULL_ERROR": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (store_dir,) = page_store_dirs(isolated_paths / "cache")
    before = {p.parent.name: p.stat().st_mtime_ns for p in store_dir.glob("shards/*/vectors.npy")}
    n_shards = -(-len(pq.read_table(MINI_DIR / "pages.parquet", columns=["page_id"])) // 8)  # shard_size=8
    assert sorted(before) == ["00000", "00001"] and n_shards > 3 and not (store_dir / "artifact.json").exists()
    assert [d.name.split(".staging-")[0] for d in (store_dir / "shards").glob(".*")] == [".00002"]  # the debris

    done = run_py(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (store_dir / "artifact.json").is_file()
    assert all((store_dir / "shards" / name / "vectors.npy").stat().st_mtime_ns == t for name, t in before.items())
    (record,) = (store_dir / "tasks").iterdir()
    encoded = json.loads(record.read_text())["encode"]
    assert encoded["shards_reused"] == len(before) and encoded["shards_encoded"] == n_shards - len(before)
    assert not list((store_dir / "shards").glob(".*")), "the killed job's staging directory is removed"

    # ... and the resumed store is byte-identical to one encoded without interruption.
    cfg = compose_cfg(*args[1:], f"paths.cache_dir={isolated_paths / 'fresh'}")
    fresh = instantiate(cfg.retriever.model).encode_pages(
        load_benchmark(MINI_DIR), ArtifactCache(isolated_paths / "fresh")
    )
    assert fresh.directory.name == store_dir.name
    for shard in range(fresh.n_shards):
        for file in ("vectors.npy", "offsets.npy"):
            assert (fresh.shard_dir(shard) / file).read_bytes() == (
                store_dir / "shards" / f"{shard:05d}" / file
            ).read_bytes()
