"""Settings as operators over runs: round robin and RRF merges (hand-computed, ranx), input runs
resolved through the results store (filed as entries, computed once, reused), and bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from ranx import Run, fuse

from helpers import compose_cfg, evaluate, tiny_overrides
from vldocir.data.runs import make_run, read_run
from vldocir.launch import input_overrides
from vldocir.retrieval.fusion import (
    ranked_lists,
    reciprocal_rank_fusion,
    round_robin,
    round_robin_lists,
    rrf_scores,
)
from vldocir.retrieval.settings import ReciprocalRankFusion, RoundRobin, RunSpec, parse_inputs


def run_of(lists: dict[str, list[str]]) -> pa.Table:
    """A run holding each query's list in that order (distinct descending scores)."""
    return make_run(list(lists), list(lists.values()), [np.arange(len(v), 0, -1) for v in lists.values()])


# --- round robin ----------------------------------------------------------------------------------


def test_round_robin_of_unequal_lists_by_hand():
    a, b, c = ["p1", "p2", "p3", "p4", "p5"], ["p2", "p6"], ["p7", "p1", "p8"]
    # turn 1: p1 (a), p2 (b), p7 (c); turn 2: a's p2 taken, b's p6, c's p1 taken; turn 3: p3, p8; then a's rest
    assert round_robin_lists([a, b, c]) == ["p1", "p2", "p7", "p6", "p3", "p8", "p4", "p5"]
    assert round_robin_lists([a, b, c], depth=4) == ["p1", "p2", "p7", "p6"]
    # stable: the same lists in another order give the order of that list first
    assert round_robin_lists([b, a]) == ["p2", "p1", "p6", "p3", "p4", "p5"]
    assert round_robin_lists([[], ["x"], []]) == ["x"]
    assert round_robin_lists([]) == []


def test_round_robin_of_runs_keeps_every_query_and_orders_by_score():
    base = run_of({"q1": ["a", "b", "c"], "q2": ["x"]})
    ctx = run_of({"q1": ["c", "a", "d"], "q3": ["y", "z"]})
    merged = round_robin([base, ctx], depth=10, query_ids=["q1", "q2", "q3", "q4"])
    assert ranked_lists(merged) == {"q1": ["a", "c", "b", "d"], "q2": ["x"], "q3": ["y", "z"]}
    # scores decrease strictly down each list, so the evaluation's score order is the merged order
    frame = merged.to_pandas()
    for _, group in frame.groupby("query_id"):
        assert (np.diff(group.sort_values("rank")["score"].to_numpy()) < 0).all()
    assert ranked_lists(round_robin([base, ctx], depth=2)) == {"q1": ["a", "c"], "q2": ["x"], "q3": ["y", "z"]}


def test_input_ties_follow_the_evaluation_order():
    """Within an input, equal scores are ordered by page_id (the rule everywhere): the merge reads that order."""
    tied = make_run(["q"], [["b", "a", "c"]], [[1.0, 1.0, 0.5]])
    assert ranked_lists(tied) == {"q": ["a", "b", "c"]}
    assert ranked_lists(round_robin([tied, run_of({"q": ["c"]})], depth=5)) == {"q": ["a", "c", "b"]}


# --- reciprocal rank fusion ---------------------------------------------------------------------


def test_rrf_by_hand():
    scores = rrf_scores([["a", "b"], ["b", "c"]], k=60)
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62})
    fused = reciprocal_rank_fusion([run_of({"q": ["a", "b"]}), run_of({"q": ["b", "c"]})], depth=10)
    assert ranked_lists(fused) == {"q": ["b", "a", "c"]}


@pytest.mark.parametrize("k", [60, 1])
def test_rrf_equals_ranx(k):
    rng = np.random.default_rng(7)
    pages = [f"p{i:03d}" for i in range(60)]
    runs = []
    for _ in range(3):
        lists = {f"q{q}": list(rng.choice(pages, size=int(rng.integers(5, 40)), replace=False)) for q in range(25)}
        runs.append(run_of(lists))
    ours = ranked_lists(reciprocal_rank_fusion(runs, depth=100, k=k))
    theirs = fuse(
        [Run({q: {p: float(len(v) - i) for i, p in enumerate(v)} for q, v in ranked_lists(r).items()}) for r in runs],
        method="rrf",
        params={"k": k},
    ).to_dict()
    assert set(ours) == set(theirs)
    for q, fused in theirs.items():
        # ranx's scores, ordered by our rule (score descending, then page id)
        expected = sorted(fused, key=lambda p: (-fused[p], p))
        assert ours[q] == expected, q
        assert [round(fused[p], 12) for p in ours[q]] == sorted((round(v, 12) for v in fused.values()), reverse=True)


# --- input specs and overrides ---------------------------------------------------------------------


def test_run_specs_parse_from_yaml_forms():
    assert RunSpec.parse("base") == RunSpec("base")
    assert RunSpec.parse("ocr_bm25:base") == RunSpec("base", "ocr_bm25")
    assert RunSpec.parse({"setting": "ctx", "overrides": ["n_ctx=512"]}) == RunSpec("ctx", None, ("n_ctx=512",))
    for bad in ({"retriever": "x"}, {"setting": "a", "depth": 3}, 3):
        with pytest.raises(ValueError, match="an input run is"):
            RunSpec.parse(bad)
    with pytest.raises(ValueError, match="at least 1"):
        parse_inputs([])
    with pytest.raises(ValueError, match="must be a list"):
        parse_inputs("base")


def test_input_overrides_keep_the_job_and_drop_its_setting():
    job = [
        "retriever=colqwen25",
        "retriever.model.encoder.dtype=float32",
        "setting=bctx",
        "setting.id=mine",
        "n_ctx=32",
        "depth=50",
        "dataset.source=/x",
        "+setting.extra=1",
    ]
    assert input_overrides(job, RunSpec("ctx")) == [
        "retriever=colqwen25",
        "retriever.model.encoder.dtype=float32",
        "n_ctx=32",
        "depth=50",
        "dataset.source=/x",
        "setting=ctx",
    ]
    assert input_overrides(job, RunSpec("base", "ocr_bm25", ("retriever.model.k1=1.2",))) == [
        "n_ctx=32",
        "depth=50",
        "dataset.source=/x",
        "retriever=ocr_bm25",
        "setting=base",
        "retriever.model.k1=1.2",
    ]


# --- through the pipeline -----------------------------------------------------------------------------


def test_rrf_hybrid_files_its_inputs_and_reuses_them(isolated_paths):
    """setting=rrf of DOM-BM25 and OCR-BM25: both inputs become entries of their own, the fused run
    equals ranx's fusion of those entries, and a rerun (or a job that names an input) searches nothing."""
    first = evaluate("setting=rrf", "setting.fuse=base")
    assert first.entry.parent.name == "rrf-base-ocr_bm25"
    inputs = first.manifest["run"]["inputs"]
    assert [(i["retriever"], i["setting"], i["reused"]) for i in inputs] == [
        ("dom_bm25", "base", False),
        ("ocr_bm25", "base", False),
    ]
    events = [(e["kind"], e["status"]) for e in first.manifest["cache"]]
    assert events == [("run", "miss"), ("bm25-index", "miss"), ("run", "miss"), ("bm25-index", "miss"), ("run", "miss")]

    stored = [read_run(f"{i['entry']}/run.parquet") for i in inputs]
    fused = read_run(first.entry / "run.parquet")
    theirs = fuse(
        [Run({q: {p: float(len(v) - i) for i, p in enumerate(v)} for q, v in ranked_lists(r).items()}) for r in stored],
        method="rrf",
        params={"k": 60},
    ).to_dict()
    ours = ranked_lists(fused)
    assert {q: sorted(v, key=lambda p: (-v[p], p))[:100] for q, v in theirs.items()} == ours
    for i in inputs:  # each input entry records what it is an input of, with its own config
        manifest = json.loads((isolated_paths / "results" / i["entry"] / "manifest.json").read_text())
        assert manifest["input_of"] == "dom_bm25/rrf-base-ocr_bm25"
        assert manifest["config"]["retriever"]["id"] == i["retriever"]

    again = evaluate("setting=rrf", "setting.fuse=base")
    assert [(e["kind"], e["status"]) for e in again.manifest["cache"]] == [("run", "hit")] * 3
    assert again.entry == first.entry
    # the input is exactly the run `python run.py retriever=ocr_bm25` makes: reused, not searched
    alone = evaluate("retriever=ocr_bm25")
    assert alone.manifest["run"]["reused"] and alone.entry == isolated_paths / "results" / inputs[1]["entry"]
    per_query = pd.read_parquet(first.entry / "per_query.parquet")
    assert len(per_query) == first.metrics["n_queries"]


def test_round_robin_of_another_retriever_and_a_depth_sweep(isolated_paths):
    """Any list of runs: base of DOM-BM25 then OCR-BM25, as inputs given on the command line; the
    inputs follow the job's depth."""
    over = [
        "setting=bctx",
        "setting.id=dom-then-ocr",
        "setting.method.inputs=[base,ocr_bm25:base]",
        "depth=20",
        "eval.ks=[5,10]",
    ]
    done = evaluate(*over)
    inputs = done.manifest["run"]["inputs"]
    dom, ocr = (read_run(f"{i['entry']}/run.parquet") for i in inputs)
    assert {len(g) for _, g in dom.to_pandas().groupby("query_id")} == {20}
    expected = round_robin([dom, ocr], depth=20)
    assert ranked_lists(read_run(done.entry / "run.parquet")) == ranked_lists(expected)


def test_a_setting_that_names_its_own_store_directory_is_a_cycle(isolated_paths):
    from vldocir.config_checks import ConfigError

    with pytest.raises(ConfigError, match=r"cycle: dom_bm25/bctx-n256 -> dom_bm25/bctx-n256"):
        evaluate("setting=bctx", "setting.id=bctx-n256", "setting.method.inputs=[bctx,base]")
    assert not (isolated_paths / "results").exists()


@pytest.mark.parametrize("merge", [RoundRobin, ReciprocalRankFusion])
def test_a_merge_takes_two_or_more_distinct_runs(merge):
    with pytest.raises(ValueError, match=r"got one \(ocr_bm25:base\).*\(retriever=ocr_bm25 setting=base\)$"):
        merge(["ocr_bm25:base"])
    with pytest.raises(ValueError, match="names input run 'base' twice"):
        merge(["base", {"setting": "base"}, "ctx"])
    # the same setting with other overrides is another run
    assert len(merge(["base", {"setting": "base", "overrides": ["depth=5"]}]).inputs()) == 2


def test_a_fusion_of_one_run_is_refused_before_any_work(isolated_paths):
    """`setting=rrf 'setting.method.inputs=[base]'` would file the base run as rrf-ctx-n256-ocr_bm25."""
    from vldocir.config_checks import ConfigError

    with pytest.raises(
        ConfigError, match=r"^setting.method \(rrf-ctx-n256-ocr_bm25\): merges two or more runs, got one"
    ):
        evaluate("setting=rrf", "setting.method.inputs=[base]")
    assert not (isolated_paths / "results").exists()


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["setting=rrf", "setting.method.inputs=[base,ocr_bm25:base]"], "setting.id=rrf-base-ocr_bm25.base"),
        (
            ["setting=ensemble", "setting.method.inputs=[base,ocr_bm25:base]"],
            "setting.id=round_robin-base-ocr_bm25.base",
        ),
        (["setting=rerank", "setting.method.input=ocr_bm25:base"], "setting.id=rerank-ocr_bm25.base"),
        (
            ["setting=doc_scope", "setting.method.input=ocr_bm25:base"],
            "e.g. setting.id=doc_scope-ocr_bm25.base_depth_1000",
        ),
        (
            [
                "setting=base",
                "setting.method._target_=vldocir.retrieval.settings.RoundRobin",
                "+setting.method.inputs=[base,ocr_bm25:base]",
            ],
            "setting.method._target_, setting.method.inputs",
        ),
    ],
)
def test_an_override_of_what_the_id_names_needs_an_id_of_its_own(isolated_paths, overrides, says):
    from vldocir.config_checks import ConfigError
    from vldocir.pipeline.jobs import check_inputs

    with pytest.raises(ConfigError, match=r"changes what setting.id=\S+ names") as refused:
        check_inputs(compose_cfg(*overrides), overrides)
    assert says in str(refused.value) and "\n" not in str(refused.value)
    named = [*overrides, "setting.id=mine"]
    check_inputs(compose_cfg(*named), named)  # with an id of its own it is a run like any other


def test_knobs_and_parameters_keep_the_id_honest(isolated_paths):
    """The setting files' own knobs change the id with the inputs; a parameter (k) is a variant of
    the named run, kept beside it in the store as every parameter variant is."""
    from vldocir.pipeline.jobs import check_inputs

    for overrides in (["setting=rrf", "setting.fuse=base"], ["setting=rrf", "setting.fuse=base", "setting.method.k=3"]):
        check_inputs(compose_cfg(*overrides), overrides)
    assert compose_cfg("setting=rrf", "setting.fuse=base").setting.id == "rrf-base-ocr_bm25"


def test_an_input_whose_overrides_change_what_its_id_names_is_refused_naming_it(isolated_paths):
    from vldocir.config_checks import ConfigError
    from vldocir.pipeline.jobs import check_inputs

    inner = "{setting:rrf,overrides:['setting.method.inputs=[base,ocr_bm25:base]']}"
    over = ["setting=bctx", "setting.id=outer", f"setting.method.inputs=[base,{inner}]"]
    with pytest.raises(
        ConfigError, match=r"^input run 'rrf setting.method.inputs=\[base,ocr_bm25:base\]' of dom_bm25/outer: "
    ):
        check_inputs(compose_cfg(*over), over)


def test_an_input_on_another_dataset_fails_in_the_checks_before_any_work(isolated_paths):
    from vldocir.config_checks import ConfigError
    from vldocir.pipeline.jobs import check_inputs

    over = [
        "setting=bctx",
        "setting.id=mixed",
        "setting.method.inputs=[base,{setting:base,overrides:['dataset=synthetic_text']}]",
    ]
    says = (
        r"input run 'base dataset=synthetic_text' of dom_bm25/mixed is on another dataset \(synthetic-text\); "
        r"a setting combines runs of one benchmark"
    )
    with pytest.raises(ConfigError, match=says):
        check_inputs(compose_cfg(*over), over)
    with pytest.raises(ConfigError, match=says):
        evaluate(*over)
    assert not (isolated_paths / "results").exists()


# --- the acceptance sweep: every setting, two n_ctx, one encode ----------------------------------------


@pytest.mark.slow
def test_sweep_of_every_setting_encodes_once_and_computes_each_run_once(subset_dir, tiny, isolated_paths, tmp_path):
    """`-m retriever=colqwen25 setting=base,ctx,bctx,rerank,ensemble n_ctx=32,128` (tiny checkpoints):
    the corpus is encoded once and every distinct run (base, ctx per n_ctx, rerank, bctx and ensemble
    per n_ctx) is computed once over the ten jobs, as the jobs' manifests (their cache events) show."""
    from helpers import run_py
    from test_rerank import tiny_rerank_overrides
    from tiny_models import build_tiny_jina_reranker_m0

    jina = build_tiny_jina_reranker_m0(tmp_path / "jina")
    rerank_overrides = [o for o in tiny_rerank_overrides(jina) if o.startswith("reranker.")]
    done = run_py(
        "-m",
        *tiny_overrides("colqwen25", tiny),
        f"dataset.source={subset_dir}",
        *rerank_overrides,
        "setting=base,ctx,bctx,rerank,ensemble",
        "n_ctx=32,128",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    manifests = [json.loads(p.read_text()) for p in (isolated_paths / "logs" / "multirun").rglob("manifest.json")]
    assert len(manifests) == 10
    events = [e for m in manifests for e in m["cache"]]
    page_misses = [e for e in events if e["kind"] == "page-embeddings" and e["status"] != "hit"]
    assert len(page_misses) == 1, page_misses  # the corpus is encoded by the first job only
    runs = {}
    for e in events:
        if e["kind"] == "run":
            runs.setdefault(e["key"], []).append(e["status"])
    # base, rerank (n_ctx does not change them), ctx x2, bctx x2, ensemble x2
    assert len(runs) == 8
    assert all(statuses.count("miss") == 1 for statuses in runs.values()), runs
    context_builds = [e for e in events if e["kind"] == "doc-context" and e["status"] != "hit"]
    assert len(context_builds) == 2  # one set of context vectors per n_ctx
    by_setting = {(m["config"]["setting"]["id"]) for m in manifests}
    assert by_setting == {
        "base",
        "rerank",
        "ctx-n32",
        "ctx-n128",
        "bctx-n32",
        "bctx-n128",
        "ensemble-n32",
        "ensemble-n128",
    }
    ensemble = next(m for m in manifests if m["config"]["setting"]["id"] == "ensemble-n32")
    assert [i["setting"] for i in ensemble["run"]["inputs"]] == ["base", "ctx-n32", "rerank"]
    # the ensemble is the round robin of its stored inputs
    inputs = [read_run(f"{i['entry']}/run.parquet") for i in ensemble["run"]["inputs"]]
    assert ranked_lists(read_run(f"{ensemble['entry']}/run.parquet")) == ranked_lists(round_robin(inputs, depth=100))
