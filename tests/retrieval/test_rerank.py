"""The rerank setting: hand-checked orderings, the on-disk score cache (reuse, resume), bad pages,
and both rerankers end to end on real pages of the mini benchmark with tiny offline checkpoints.

Toy runs are scored by :class:`ScriptedReranker`, which recognises each page by its decoded image
and returns scores written in the test, so every expected ordering is checked by hand.
"""

from __future__ import annotations

import functools
import hashlib
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from helpers import OUTSIDE_SUBSET_QUERY_IDS, SUBSET_QUERY_IDS, compose_cfg, mini_subset
from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import Benchmark, load_benchmark
from vldocir.retrieval.checkpoints import ModelLoadError
from vldocir.retrieval.fusion import ordered_run, ranked_lists
from vldocir.retrieval.rerank import (
    BadRerankPagesError,
    ColEngineReranker,
    JinaRerankerM0,
    PageImages,
    Rerank,
    Reranker,
    UnknownPageError,
    rerank_list,
)
from vldocir.retrieval.settings import RunJob, RunSpec

JINA_COMMIT = "94bfe0aeb2d4dd7978362699cddd5893d4e0adc8"
A, W, V = "arxiv-00003-p{:03d}", "wikipedia-00000-p{:03d}", "wikipedia-00001-p{:03d}"
Q1, Q2, Q3, Q4, Q5 = SUBSET_QUERY_IDS[:5]  # queries of the subset benchmark (any will do)
OUTSIDE = OUTSIDE_SUBSET_QUERY_IDS[0]  # a query of the mini that the subset does not have


def tiny_rerank_overrides(jina_dir: Path) -> list[str]:
    """``run.py`` overrides for ``setting=rerank`` with the tiny Jina stand-in on CPU (a user's
    local copy plus the opt-in), for an end-to-end pipeline test."""
    key = "reranker.model"
    return [
        "setting=rerank",
        f"{key}.checkpoint.local_path={jina_dir}",
        f"{key}.checkpoint.trust_remote_code=true",
        f"{key}.dtype=float32",
        f"{key}.device=cpu",
        "setting.method.progress=false",
    ]


# -- a scripted reranker ------------------------------------------------------------------------------
@cache
def _page_by_image(root: str) -> dict[str, str]:
    images = PageImages(load_benchmark(root))
    return {_digest(images.load(p)): p for p in images.inputs.page_ids}


def _digest(image) -> str:
    return hashlib.blake2b(image.tobytes(), digest_size=16).hexdigest()


def default_score(query: str, page: str) -> float:
    return int(hashlib.md5(f"{query}|{page}".encode()).hexdigest()[:8], 16) / 2**32


class ScriptedReranker(Reranker):
    """Scores ``scores[(query text, page_id)]`` (else :func:`default_score`), the page recognised by
    its image; counts the pairs it scores and raises after ``fail_after`` calls."""

    def __init__(
        self,
        bench: Benchmark,
        scores: dict | None = None,
        batch_size: int = 2,
        fail_after: int | None = None,
        name: str = "scripted",
    ):
        self.page_of = _page_by_image(str(bench.root))
        self.table, self.batch_size, self.fail_after, self.name = scores or {}, batch_size, fail_after, name
        self.calls, self.pairs = 0, []

    def cache_params(self):
        return {"reranker": self.name}

    def score(self, queries, images):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("stopped mid-run")
        self.calls += 1
        pages = [self.page_of[_digest(image)] for image in images]
        self.pairs += list(zip(queries, pages, strict=True))
        return [self.table.get((q, p), default_score(q, p)) for q, p in zip(queries, pages, strict=True)]


def job_for(
    bench: Benchmark,
    run,
    cache: ArtifactCache,
    query_ids: list[str],
    depth: int = 100,
    same_text: dict[str, str] | None = None,
) -> RunJob:
    """A job over ``query_ids``; ``same_text``: query -> another query whose text it is given."""
    texts = dict(zip(bench.queries["query_id"], bench.queries["text"], strict=True))
    texts |= {q: texts[other] for q, other in (same_text or {}).items()}
    return RunJob(bench, {q: texts[q] for q in query_ids}, depth, cache, retriever=None, inputs=[run])


@pytest.fixture(scope="module")
def bench(subset_dir) -> Benchmark:
    return load_benchmark(subset_dir)


@pytest.fixture(scope="module")
def text(bench) -> dict[str, str]:
    return dict(zip(bench.queries["query_id"], bench.queries["text"], strict=True))


# -- orderings ------------------------------------------------------------------------------------------
def test_rerank_list_hand_checked():
    items = ["a", "b", "c", "d", "e"]
    # the first three reordered by score, the rest kept in input order
    assert rerank_list(items, {"a": 0.1, "b": 0.9, "c": 0.5}, top_n=3, depth=5) == ["b", "c", "a", "d", "e"]
    # ties by page_id, whatever the input order
    assert rerank_list(["c", "b", "a"], {"a": 0.5, "b": 0.5, "c": 0.7}, top_n=3, depth=3) == ["c", "a", "b"]
    # fewer candidates than top_n: all reranked
    assert rerank_list(["x", "y"], {"x": 0.2, "y": 0.3}, top_n=25, depth=100) == ["y", "x"]
    # depth cuts after reranking
    assert rerank_list(items, {"a": 0.1, "b": 0.9, "c": 0.5}, top_n=3, depth=2) == ["b", "c"]
    # a head page without a score (a skipped bad page) is left out; the rest moves up
    assert rerank_list(items, {"a": 0.1, "c": 0.5}, top_n=3, depth=5) == ["c", "a", "d", "e"]
    assert rerank_list([], {}, top_n=3, depth=5) == []


def test_toy_run_is_reranked_by_hand(bench, text, tmp_path):
    q1, q2, q3, outside = Q1, Q2, Q3, OUTSIDE
    run = ordered_run(
        [q1, q2, outside],
        [
            [A.format(0), A.format(1), A.format(2), A.format(3), A.format(4)],
            [W.format(0), W.format(1)],
            [V.format(0)],
        ],
    )
    scores = {
        (text[q1], A.format(0)): 0.2,
        (text[q1], A.format(1)): 0.9,
        (text[q1], A.format(2)): 0.2,
        (text[q1], A.format(3)): 5.0,  # beyond top_n: never scored, keeps its place
        (text[q2], W.format(0)): 0.1,
        (text[q2], W.format(1)): 0.3,
    }
    reranker = ScriptedReranker(bench, scores)
    job = job_for(bench, run, ArtifactCache(tmp_path), [q1, q2, q3])
    out = Rerank(reranker, top_n=3).make_run(job)

    lists = ranked_lists(out)
    assert lists == {
        q1: [A.format(1), A.format(0), A.format(2), A.format(3), A.format(4)],  # p000/p002 tie: by page_id
        q2: [W.format(1), W.format(0)],
    }  # fewer than top_n; q3 (absent from the input) and outside: no rows
    for _, group in out.to_pandas().groupby("query_id"):
        assert list(group["rank"]) == list(range(1, len(group) + 1))
        assert (np.diff(group["score"].to_numpy()) < 0).all(), "scores strictly decrease down each list"
    assert sorted(p for _, p in reranker.pairs) == sorted(
        [A.format(0), A.format(1), A.format(2), W.format(0), W.format(1)]
    )
    stats = job.stats["rerank"]
    assert (stats["pairs"], stats["pairs_scored"], stats["pairs_cached"], stats["queries"]) == (5, 5, 0, 3)


def test_depth_cuts_after_reranking(bench, text, tmp_path):
    q = Q1
    run = ordered_run([q], [[A.format(i) for i in range(6)]])
    scores = {(text[q], A.format(i)): float(i) for i in range(6)}  # reversed by the reranker
    job = job_for(bench, run, ArtifactCache(tmp_path), [q], depth=4)
    out = Rerank(ScriptedReranker(bench, scores), top_n=3).make_run(job)
    assert ranked_lists(out)[q] == [A.format(2), A.format(1), A.format(0), A.format(3)]


# -- the score cache ----------------------------------------------------------------------------------
def _toy_run(bench, query_ids: list[str], n: int = 6):
    pages = list(bench.pages["page_id"])
    return ordered_run(query_ids, [pages[i : i + n] for i in range(len(query_ids))])


def test_second_rerank_scores_nothing_and_other_top_n_reuse_scores(bench, tmp_path):
    queries = [Q1, Q5, Q2]  # Q5 is given Q1's text: the two are scored once
    run = ordered_run(queries, [[A.format(i) for i in range(5)]] * 3)
    cache = ArtifactCache(tmp_path)
    job_for = functools.partial(globals()["job_for"], same_text={Q5: Q1})
    first = ScriptedReranker(bench)
    job = job_for(bench, run, cache, queries)
    expected = Rerank(first, top_n=4).make_run(job)
    assert (job.stats["rerank"]["pairs"], job.stats["rerank"]["pairs_scored"]) == (8, 8)
    assert len(first.pairs) == 8

    again = ScriptedReranker(bench)
    job = job_for(bench, run, cache, queries)
    assert Rerank(again, top_n=4).make_run(job).equals(expected)
    assert again.calls == 0 and job.stats["rerank"]["pairs_cached"] == 8 and job.stats["rerank"]["pairs_scored"] == 0
    assert cache.events[-1]["status"] == "hit"

    smaller = ScriptedReranker(bench)
    Rerank(smaller, top_n=2).make_run(job_for(bench, run, cache, queries))
    assert smaller.calls == 0
    larger = ScriptedReranker(bench)
    job = job_for(bench, run, cache, queries)
    Rerank(larger, top_n=5).make_run(job)
    assert sorted(p for _, p in larger.pairs) == [A.format(4), A.format(4)]  # two distinct texts
    assert (job.stats["rerank"]["pairs_cached"], job.stats["rerank"]["pairs_scored"]) == (8, 2)

    other = ScriptedReranker(bench, name="another model")  # another reranker: its own scores
    Rerank(other, top_n=4).make_run(job_for(bench, run, cache, queries))
    assert len(other.pairs) == 8


def test_interrupted_rerank_resumes_where_it_stopped(bench, tmp_path):
    queries = [Q1, Q2, Q3]
    run = _toy_run(bench, queries, n=5)
    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(KeyboardInterrupt):
        Rerank(ScriptedReranker(bench, batch_size=2, fail_after=3), top_n=5).make_run(
            job_for(bench, run, cache, queries)
        )
    (segment,) = (tmp_path / "cache" / "rerank-scores").glob("*/segments/*.jsonl")
    assert len(segment.read_text().splitlines()) == 6, "three batches of two were on disk before the stop"
    with open(segment, "a") as handle:
        handle.write('{"q": "abc", "p": "arxiv-0')  # a writer killed mid-line

    resumed = ScriptedReranker(bench, batch_size=2)
    job = job_for(bench, run, cache, queries)
    out = Rerank(resumed, top_n=5).make_run(job)
    assert (job.stats["rerank"]["pairs_cached"], job.stats["rerank"]["pairs_scored"]) == (6, 9)
    assert len(resumed.pairs) == 9

    fresh = Rerank(ScriptedReranker(bench, batch_size=4), top_n=5).make_run(
        job_for(bench, run, ArtifactCache(tmp_path / "b"), queries)
    )
    assert out.equals(fresh), "resuming gives the run an uninterrupted rerank gives"


def test_overwrite_policy_scores_again(bench, tmp_path):
    queries = [Q2]
    run = _toy_run(bench, queries, n=3)
    Rerank(ScriptedReranker(bench), top_n=3).make_run(job_for(bench, run, ArtifactCache(tmp_path), queries))
    again = ScriptedReranker(bench)
    Rerank(again, top_n=3).make_run(job_for(bench, run, ArtifactCache(tmp_path, policy="overwrite"), queries))
    assert len(again.pairs) == 3


# -- bad pages --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broken_bench(tmp_path_factory) -> Benchmark:
    root = mini_subset(
        tmp_path_factory.mktemp("broken") / "b",
        ["arxiv-00003", "wikipedia-00000"],
        corrupt_page="arxiv-00003-p002",
        name="mini-broken",
    )
    return load_benchmark(root)


class ConstantReranker(Reranker):
    def cache_params(self):
        return {"reranker": "constant"}

    def score(self, queries, images):
        return [float(image.size[0]) for image in images]


def test_undecodable_candidate_stops_naming_it_and_keeps_scores(broken_bench, tmp_path):
    q = broken_bench.queries["query_id"].iloc[0]
    run = ordered_run([q], [[A.format(0), A.format(1), A.format(2), A.format(3)]])
    reranker = ConstantReranker()
    reranker.batch_size = 2
    with pytest.raises(BadRerankPagesError, match="arxiv-00003-p002") as error:
        Rerank(reranker, top_n=4).make_run(job_for(broken_bench, run, ArtifactCache(tmp_path), [q]))
    assert "setting.method.on_bad_page=skip" in str(error.value)
    (segment,) = tmp_path.glob("rerank-scores/*/segments/*.jsonl")
    assert [json.loads(line)["p"] for line in segment.read_text().splitlines()] == [A.format(0), A.format(1)]


def test_undecodable_candidate_is_skipped_on_request_and_recorded(broken_bench, tmp_path):
    q = broken_bench.queries["query_id"].iloc[0]
    run = ordered_run([q], [[A.format(0), A.format(1), A.format(2), A.format(3), A.format(4)]])
    job = job_for(broken_bench, run, ArtifactCache(tmp_path), [q])
    out = Rerank(ConstantReranker(), top_n=4, on_bad_page="skip").make_run(job)
    assert ranked_lists(out)[q] == [A.format(0), A.format(1), A.format(3), A.format(4)]  # equal scores: by page_id
    assert [b["page_id"] for b in job.stats["rerank"]["skipped_pages"]] == [A.format(2)]


def test_page_missing_from_the_benchmark_is_named(bench, tmp_path):
    run = ordered_run([Q2], [[A.format(0), "nowhere-p000"]])
    with pytest.raises(UnknownPageError, match="nowhere-p000"):
        Rerank(ConstantReranker(), top_n=2, on_bad_page="skip").make_run(
            job_for(bench, run, ArtifactCache(tmp_path), [Q2])
        )


# -- configuration ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reranker", "setting_id", "reranker_class"),
    [("jina_m0", "rerank", JinaRerankerM0), ("colqwen25", "rerank-colqwen25", ColEngineReranker)],
)
def test_setting_files_compose_and_instantiate(reranker, setting_id, reranker_class, tmp_path):
    cfg = compose_cfg("retriever=colqwen25", "setting=rerank", f"reranker={reranker}")
    setting = instantiate(cfg.setting.method)
    assert cfg.setting.id == setting_id and isinstance(setting.reranker, reranker_class)
    assert setting.inputs() == (RunSpec("base"),) and setting.top_n == 25 and not setting.uses_retriever
    params = setting.cache_params()
    assert params["top_n"] == 25
    if reranker == "jina_m0":
        assert params["reranker"]["hub_id"] == "jinaai/jina-reranker-m0" and params["reranker"]["commit"] == JINA_COMMIT
        assert setting.reranker.checkpoint.remote_code and not setting.reranker.checkpoint.trust_remote_code
    other = instantiate(
        compose_cfg(
            "retriever=colqwen25",
            "setting=rerank",
            f"reranker={reranker}",
            "setting.method.top_n=10",
            "setting.method.input=ocr_bm25:base",
        ).setting.method
    )
    assert other.cache_params() != params and other.inputs() == (RunSpec("base", "ocr_bm25"),)


def test_tiny_overrides_compose(tmp_path):
    setting = instantiate(compose_cfg("retriever=colqwen25", *tiny_rerank_overrides(tmp_path)).setting.method)
    assert setting.reranker.checkpoint.local_path == str(tmp_path) and setting.reranker.checkpoint.trust_remote_code


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_n": 0}, "top_n"),
        ({"top_n": True}, "top_n"),
        ({"on_bad_page": "ignore"}, "on_bad_page"),
        ({"reranker": object()}, "Reranker"),
    ],
)
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Rerank(**{"reranker": ConstantReranker(), **kwargs})


def test_remote_code_needs_the_opt_in_and_names_the_setting_key(tmp_path):
    reranker = instantiate(compose_cfg("retriever=colqwen25", "setting=rerank").setting.method.reranker)
    with pytest.raises(ModelLoadError, match=r"reranker\.model\.checkpoint\.trust_remote_code=true") as error:
        reranker.prepare()
    assert "retriever.model" not in str(error.value) and reranker.model is None


# -- both rerankers end to end with tiny checkpoints ---------------------------------------------------
@pytest.fixture(scope="module")
def tiny_jina(tmp_path_factory) -> Path:
    from tiny_models import build_tiny_jina_reranker_m0

    return build_tiny_jina_reranker_m0(tmp_path_factory.mktemp("jina") / "jina-reranker-m0")


def _jina(directory: Path, trust: bool = True) -> JinaRerankerM0:
    return JinaRerankerM0(
        {
            "hub_id": "jinaai/jina-reranker-m0",
            "revision": JINA_COMMIT,
            "local_path": str(directory),
            "remote_code": True,
            "trust_remote_code": trust,
        },
        dtype="float32",
        device="cpu",
        batch_size=3,
    )


def test_tiny_jina_checkpoint_is_refused_without_the_opt_in(tiny_jina):
    reranker = _jina(tiny_jina, trust=False)
    with pytest.raises(ModelLoadError, match="trust_remote_code=true"):
        reranker.score(["a question"], [None])
    assert reranker.model is None


@pytest.mark.slow
def test_jina_m0_reranks_real_pages_through_its_own_compute_score(bench, text, tiny_jina, tmp_path):
    from transformers import AutoModel

    queries = [Q1, Q2]
    run = _toy_run(bench, queries, n=7)
    cache = ArtifactCache(tmp_path)
    reranker = _jina(tiny_jina)
    job = job_for(bench, run, cache, queries)
    out = Rerank(reranker, top_n=5, progress=False).make_run(job)

    # Oracle: the model's own compute_score, with the processor its hub code loads itself.
    oracle = AutoModel.from_pretrained(str(tiny_jina), trust_remote_code=True).eval()
    images = PageImages(bench)
    lists, expected = ranked_lists(run), {}
    for q in queries:
        head = lists[q][:5]
        scores = oracle.compute_score([[text[q], images.load(p)] for p in head], max_length=2048, doc_type="image")
        order = sorted(zip(scores, head, strict=True), key=lambda sp: (-sp[0], sp[1]))
        expected[q] = [p for _, p in order] + lists[q][5:]
    assert ranked_lists(out) == expected
    assert job.stats["rerank"]["pairs_scored"] == 10
    assert job.stats["rerank"]["reranker"]["local_path"] == str(tiny_jina)

    fresh = _jina(tiny_jina)
    job = job_for(bench, run, cache, queries)
    assert Rerank(fresh, top_n=5, progress=False).make_run(job).equals(out)
    assert fresh.model is None, "every score came from the cache: no model was loaded"
    assert job.stats["rerank"]["pairs_cached"] == 10


@pytest.fixture(scope="module")
def tiny_colqwen(tmp_path_factory) -> Path:
    from tiny_models import build_tiny_colqwen25

    return build_tiny_colqwen25(tmp_path_factory.mktemp("colqwen") / "colqwen25")


def test_colengine_reranker_scores_exact_maxsim_of_the_model_vectors(bench, text, tiny_colqwen, tmp_path):
    from vldocir.retrieval.encoders import ColEngineEncoder

    def encoder():
        return ColEngineEncoder(
            "colpali_engine.models.ColQwen2_5",
            "colpali_engine.models.ColQwen2_5_Processor",
            {"hub_id": "vidore/colqwen2.5-v0.2", "local_path": str(tiny_colqwen)},
            processor_kwargs={"max_num_visual_tokens": 64},
            dtype="float32",
            device="cpu",
        )

    queries = [Q2, Q3, Q4]
    run = _toy_run(bench, queries, n=6)
    job = job_for(bench, run, ArtifactCache(tmp_path), queries)
    out = Rerank(ColEngineReranker(encoder(), batch_size=4), top_n=4, progress=False).make_run(job)

    # Oracle: MaxSim in numpy over the encoder's vectors, each page encoded alone.
    reference, images = encoder(), PageImages(bench)
    lists = ranked_lists(run)
    for q in queries:
        (query,) = reference.encode_queries([text[q]])
        head = lists[q][:4]
        maxsim = {p: float((query @ reference.encode_pages([images.load(p)])[0].T).max(axis=1).sum()) for p in head}
        assert ranked_lists(out)[q] == rerank_list(lists[q], maxsim, 4, 100)
    assert job.stats["rerank"]["pairs_scored"] == 12
