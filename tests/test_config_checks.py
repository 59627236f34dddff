"""The whole config is checked before any work: a bad override costs a second, not an encode.

Each case runs the real pipeline entry (``run_stage``) on a composed config and asserts that it
fails with a one-line :class:`ConfigError` naming the key, before anything is created (no
benchmark opened, no cache, no results). The checks run before a model would load: the
embedding-retriever cases point at a checkpoint directory that does not exist, so reaching the
model would fail differently.
"""

from __future__ import annotations

import pytest

from helpers import compose_cfg, run_py
from vldocir.config_checks import ConfigError, check_config, optimized_metric
from vldocir.pipeline import optimized_value, run_stage
from vldocir.tracking import NullTracker

NO_MODEL = ["retriever=colqwen25", "retriever.model.encoder.checkpoint.local_path=/nonexistent/checkpoint"]

BAD = [
    (["depth=5"], "eval.ks=[3, 5, 10] asks for k=10 but depth=5"),
    (["depth=0"], "depth must be a positive integer, got 0"),
    (["depth=-3"], "depth must be a positive integer, got -3"),
    (["depth=abc"], "depth must be a positive integer, got 'abc'"),
    (["depth=true"], "depth must be a positive integer, got True"),
    (["eval.ks=[0]"], "every k in eval.ks must be a positive integer, got 0"),
    (["eval.ks=[2.5,5]"], "every k in eval.ks must be a positive integer, got 2.5"),
    (["eval.ks=abc"], "eval.ks must be a list of positive integers such as eval.ks=[1,5,10], got 'abc'"),
    (["eval.ks=5"], "eval.ks must be a list of positive integers"),
    (["eval.ks=[]"], "eval.ks is empty"),
    (["eval.ks=[5,5]"], "eval.ks lists a cut-off twice"),
    (
        ["eval.ks=[1,3]", "optimized_metric=macro/recallall@10"],
        "optimized_metric macro/recallall@10 needs k=10, which eval.ks=[1, 3] does not compute",
    ),
    (["optimized_metric=macro/recall_all@10"], "optimized_metric must read <aggregate>/<metric>@<k or max>"),
    (
        ["optimized_metric=macro/mrr@10"],
        "optimized_metric: metric 'mrr' is not one of ndcg, recall, ndcgall, recallall",
    ),
    (["optimized_metric=mean/recallall@10"], "optimized_metric: aggregate 'mean' is not one of macro, micro"),
    (["cache_policy=keep"], "cache_policy must be one of reuse, resume, overwrite, got 'keep'"),
    (["stage=train"], "stage must be one of evaluate, encode, got 'train'"),
    (["encode.task=2", "encode.num_tasks=2"], "encode.task must be an integer in 0..1"),
    (["retriever.id=../x"], "retriever.id names a results-store directory"),
    (["setting.id=a/b"], "setting.id names a results-store directory"),
    (["+foo=1"], "+foo=... adds a top-level key that nothing reads"),
    ([*NO_MODEL, "setting=ctx", "n_ctx=0"], "retriever.model (colqwen25): n_ctx must be an integer >= 1, got 0"),
    ([*NO_MODEL, "setting=ctx", "n_ctx=abc"], "retriever.model (colqwen25): n_ctx must be an integer >= 1, got 'abc'"),
    (
        [*NO_MODEL, "setting=ctx", "retriever.model.context.kmeans_iterations=0"],
        "kmeans_iterations must be an integer >= 1, got 0",
    ),
    (
        ["setting=ctx"],
        "setting ctx-n256 scores pages with document-context vectors built from page embeddings; "
        "retriever dom_bm25 (BM25Retriever) has none",
    ),
    # a setting's input runs are composed and checked before any work too
    (["setting=bctx"], "input run 'ctx' of dom_bm25/bctx-n256: setting ctx-n256 scores pages with document-context"),
    (
        [*NO_MODEL, "setting=bctx", "n_ctx=0"],
        "input run 'ctx' of colqwen25/bctx-n0: retriever.model (colqwen25): n_ctx must be",
    ),
    (
        ["setting=rrf", "setting.fuse=nope"],
        "input run 'nope' of dom_bm25/rrf-nope-ocr_bm25: In 'config': Could not find 'setting/nope'",
    ),
    (
        ["setting=rrf", "setting.fuse=base", "setting.method.k=-1"],
        "setting.method (rrf-base-ocr_bm25): k must be an integer >= 0, got -1",
    ),
    (["setting=rrf", "setting.fuse=base", "setting.method.inputs=[]"], "merges two or more runs, got 0"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD, ids=[" ".join(o[-2:]) for o, _ in BAD])
def test_bad_override_fails_before_any_work(isolated_paths, overrides, message):
    cfg = compose_cfg(*overrides)
    with pytest.raises(ConfigError) as raised:
        run_stage(cfg, NullTracker())
    text = str(raised.value)
    assert message in text
    assert "\n" not in text, "one line"
    assert not any((isolated_paths / sub).exists() for sub in ("cache", "results", "data")), "nothing was made"


def test_optimized_metric_follows_the_ks():
    assert optimized_metric("macro/recallall@max", [1, 3]) == ("macro", "recallall@3")
    assert optimized_metric("micro/ndcgall@5", [5, 10]) == ("micro", "ndcgall@5")
    check_config(compose_cfg("eval.ks=[1,3]"))  # the default optimized_metric (@max) adapts


def test_small_ks_evaluate_and_return_the_swept_metric(isolated_paths, small_bench_dir):
    cfg = compose_cfg(f"dataset.source={small_bench_dir}", "dataset.build=null", "eval.ks=[1,3]")
    metrics = run_stage(cfg, NullTracker())
    assert metrics["ks"] == [1, 3]
    assert optimized_value(cfg, metrics) == metrics["aggregates"]["macro"]["recallall@3"]


@pytest.mark.slow
def test_command_line_refuses_a_bad_override_in_one_line(isolated_paths):
    done = run_py("depth=5")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "run error: eval.ks=[3, 5, 10] asks for k=10 but depth=5 keeps only 5 pages per query; raise depth or lower k"
    ]
    assert not (isolated_paths / "results").exists()


@pytest.mark.slow
def test_sweep_over_small_ks_exits_zero(isolated_paths, small_bench_dir):
    done = run_py("-m", f"dataset.source={small_bench_dir}", "dataset.build=null", "eval.ks=[3],[5]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "macro/recallall@max" not in done.stderr
