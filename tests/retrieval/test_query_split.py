"""Query splitting (setting=qsplit): sub-queries from a real chat server (vldocir.llm_server), searched
with DOM-BM25 on three documents of the shipped mini benchmark, merged round robin."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest
from hydra.utils import instantiate

from helpers import compose_cfg
from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import load_benchmark
from vldocir.data.runs import make_run
from vldocir.errors import ConfigError
from vldocir.llm import ChatClient
from vldocir.llm_server import ChatServer, Recorded, Reply
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.bm25 import BM25Retriever
from vldocir.retrieval.query_split import (
    FAILURES,
    QuerySplit,
    QuerySplitError,
    parse_subqueries,
    prompt_text,
    render_prompt,
)
from vldocir.retrieval.settings import RunJob

KEY = "sk-test-qsplit-0123456789"
DEPTH = 10


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", KEY)


@pytest.fixture(scope="module")
def bench(subset_dir):
    return load_benchmark(subset_dir)


@pytest.fixture(scope="module")
def queries(bench) -> dict[str, str]:
    return dict(zip(bench.queries.query_id, bench.queries.text, strict=True))


def question(request: Recorded) -> str:
    """The query a Q-Split prompt asks about."""
    return re.search(r"Question:\n(.*?)\n\n", request.text(), re.S).group(1)


def halves(text: str) -> list[str]:
    words = text.rstrip("?.").split()
    return [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]


def split_in_halves(request: Recorded) -> Reply:
    return Reply(json.dumps(halves(question(request))))


def llm(url: str, cache_dir, **kwargs) -> ChatClient:
    options = dict(
        model="test-model",
        base_url=url,
        api_env_var="VLDOCIR_TEST_LLM_KEY",
        timeout_s=10.0,  # generous: a loaded CI machine must not turn a slow answer into a retry
        max_retries=1,
        backoff_s=0.01,
        backoff_max_s=0.02,
        concurrency=4,
        cache_dir=cache_dir,
    )
    return ChatClient(**{**options, **kwargs})


def job(bench, queries, tmp_path, retriever=None, depth=DEPTH) -> RunJob:
    return RunJob(
        bench=bench,
        queries=dict(queries),
        depth=depth,
        cache=ArtifactCache(tmp_path / "artifacts"),
        retriever=retriever or BM25Retriever(),
    )


def lists_of(run: pa.Table) -> dict[str, list[str]]:
    frame = run.to_pandas().sort_values(["query_id", "rank"])
    return {q: list(g.page_id) for q, g in frame.groupby("query_id")}


def by_hand(*lists: list[str], depth: int) -> list[str]:
    """Round robin written out independently of vldocir.retrieval.fusion."""
    out: list[str] = []
    for position in range(max(map(len, lists))):
        for items in lists:
            if position < len(items) and items[position] not in out and len(out) < depth:
                out.append(items[position])
    return out


# -- parsing and prompts -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('["a b", "c d"]', ["a b", "c d"]),
        ('```json\n["a b", "c d"]\n```', ["a b", "c d"]),
        ('Here are the sub-queries:\n["a b", "c d"]\nHope this helps.', ["a b", "c d"]),
        ('Sub-queries [2 of them]: ["a b", "c d"] (done)', ["a b", "c d"]),
        ('<think>maybe ["x"]? no.</think>\n["a b", "c d"]', ["a b", "c d"]),
        ('{"sub_queries": ["a b", "c d"]}', ["a b", "c d"]),
        ('[" a b ", "", "A B", "c d"]', ["a b", "c d"]),
    ],
)
def test_parse_accepts_a_json_list_of_strings(answer, expected):
    assert parse_subqueries(answer, limit=4) == (expected, None, False)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("a b; c d", "malformed"),
        ('["a b", ', "malformed"),
        ('["a b", 3]', "malformed"),
        ('[["a b"], ["c d"]]', "malformed"),
        ('{"one": ["a"], "two": ["b"]}', "malformed"),
        ("", "malformed"),
        ("[]", "empty"),
        ('["", "  "]', "empty"),
    ],
)
def test_parse_rejects_what_is_not_a_list_of_queries(answer, reason):
    assert parse_subqueries(answer, limit=4) == (None, reason, False)


def test_parse_keeps_at_most_limit():
    assert parse_subqueries('["a", "b", "c"]', limit=2) == (["a", "b"], None, True)


@pytest.mark.parametrize("variant", [1, 2, 3])
def test_prompt_files_ship_with_the_package(variant):
    text = prompt_text(variant)
    assert text.startswith("<!--") and f"variant {variant}" in text.split("-->")[0]
    message = render_prompt(text, "Is {x} in {query}?", 4)
    assert "<!--" not in message and "Question:\nIs {x} in {query}?\n\n" in message
    assert "{max_subqueries}" not in message and ("at most 4" in message) == (variant != 1)


# -- the setting ---------------------------------------------------------------------------------
class FixedLists(Retriever):
    """Returns the given ranked list for each search id (a hand-made oracle for the merge)."""

    def __init__(self, lists: dict[str, list[str]]):
        self.lists, self.searched = lists, []

    def cache_params(self):
        return {}

    def retrieve(self, bench, queries, depth, cache):
        self.searched.append(dict(queries))
        ids = list(queries)
        return make_run(
            ids, [self.lists[q][:depth] for q in ids], [list(range(len(self.lists[q][:depth]), 0, -1)) for q in ids]
        )


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        # lists: original [p1 p2 p3], s1 [p2 p4], s2 [p5 p1 p6]; round robin by position, duplicates skipped
        (3, ["p1", "p2", "p5", "p4"]),  # p1 p2 p5 | (p2) p4 (p1) | p3 ... cut at depth 4
        (2, ["p2", "p5", "p4", "p1"]),  # p2 p5 | p4 p1 | p6
    ],
)
def test_round_robin_merge_by_hand(bench, tmp_path, variant, expected):
    retriever = FixedLists({"q": ["p1", "p2", "p3"], "q#s1": ["p2", "p4"], "q#s2": ["p5", "p1", "p6"]})
    with ChatServer([Reply('["first part", "second part"]')]) as server:
        setting = QuerySplit(llm(server.url, None), variant=variant, progress=False)
        the_job = job(bench, {"q": "first part and second part"}, tmp_path, retriever, depth=4)
        run = setting.make_run(the_job)
    assert lists_of(run) == {"q": expected}
    assert run.column("rank").to_pylist() == [1, 2, 3, 4] and run.column("score").to_pylist() == [4, 3, 2, 1]
    searched = {"q#s1": "first part", "q#s2": "second part"} | (
        {"q": "first part and second part"} if variant == 3 else {}
    )
    assert retriever.searched == [searched], "one retrieve call for all sub-queries"
    assert the_job.query_flags["qsplit_n"] == {"q": 2} and the_job.query_flags["qsplit_failed"] == {"q": False}


def test_split_searches_sub_queries_with_bm25(bench, queries, tmp_path):
    with ChatServer(responder=split_in_halves) as server:
        setting = QuerySplit(llm(server.url, tmp_path / "llm"), variant=3, progress=False)
        the_job = job(bench, queries, tmp_path)
        run = setting.make_run(the_job)
    assert len(server.requests) == len(set(queries.values())), "one request per distinct query text"
    searches = {}
    for qid, text in queries.items():
        searches[qid] = text
        searches.update({f"{qid}#s{n}": half for n, half in enumerate(halves(text), start=1)})
    separate = lists_of(BM25Retriever().retrieve(bench, searches, DEPTH, ArtifactCache(tmp_path / "artifacts")))
    merged = lists_of(run)
    for qid in queries:
        expected = by_hand(*(separate.get(s, []) for s in (qid, f"{qid}#s1", f"{qid}#s2")), depth=DEPTH)
        assert merged.get(qid, []) == expected, qid
    assert set(run.column("query_id").to_pylist()) <= set(queries)
    assert the_job.stats["query_split"]["failed"] == dict.fromkeys(FAILURES, 0)
    assert the_job.stats["query_split"]["subqueries"] == 2 * len(queries)
    assert all(n == 2 for n in the_job.query_flags["qsplit_n"].values())


def test_failed_splits_are_searched_unsplit_flagged_and_asked_again_next_run(bench, queries, tmp_path):
    ids = list(queries)
    texts = list(queries.values())
    unique = [q for q in ids if texts.count(queries[q]) == 1]  # replies go by text
    malformed, empty, truncated, oversized, broken, fine = unique[:6]
    replies = {
        queries[malformed]: Reply("Sub-queries: first, then second"),
        queries[empty]: Reply("[]"),
        queries[truncated]: Reply('["the first half", "the sec', finish_reason="length"),
        queries[oversized]: Reply(json.dumps(["word " * 500])),
        queries[broken]: Reply(status=500),
    }
    fixed = {"now": False}

    def respond(request):
        return (not fixed["now"] and replies.get(question(request))) or split_in_halves(request)

    with ChatServer(responder=respond) as server:
        client = llm(server.url, tmp_path / "llm", max_retries=2, max_answer_bytes=1000)
        setting = QuerySplit(client, variant=2, progress=False)
        the_job = job(bench, queries, tmp_path)
        run = setting.make_run(the_job)
        assert sum(question(r) == queries[broken] for r in server.requests) == 3, "the 500 was retried twice"
        base = lists_of(BM25Retriever().retrieve(bench, queries, DEPTH, ArtifactCache(tmp_path / "artifacts")))
        merged = lists_of(run)
        failed = {malformed: "malformed", empty: "empty", truncated: "truncated", oversized: "oversized"}
        failed[broken] = "llm_error"
        for qid in failed:
            assert merged[qid] == base[qid], "a query that could not be split is searched as it is"
        flags = the_job.query_flags
        assert {q for q, failure in flags["qsplit_failed"].items() if failure} == set(failed)
        assert {q: flags["qsplit_failure"][q] for q in failed} == failed
        assert flags["qsplit_n"][malformed] == 0 and flags["qsplit_n"][fine] == 2
        stats = the_job.stats["query_split"]
        assert stats["failed"] == {**dict.fromkeys(FAILURES, 1)} and stats["split"] == len(ids) - 5
        assert stats["llm"]["failed"] == 1 and stats["llm"]["retries"] == 2
        assert stats["llm"]["unusable"] == {"empty": 1, "malformed": 1, "oversized": 1, "truncated": 1}

        # the server is fixed: the next run asks exactly the five failed ones again, and splits them
        fixed["now"], asked = True, len(server.requests)
        again = job(bench, queries, tmp_path)
        QuerySplit(llm(server.url, tmp_path / "llm", max_answer_bytes=1000), variant=2, progress=False).make_run(again)
        assert sorted(question(r) for r in server.requests[asked:]) == sorted(queries[q] for q in failed)
        assert not any(again.query_flags["qsplit_failed"].values())
        assert again.stats["query_split"]["llm"]["cached"] == len(set(texts)) - 5


def test_timeout_then_success_splits(bench, queries, tmp_path):
    one = dict(list(queries.items())[:1])
    # The first answer is held a minute, so only the timeout ends it; the second comes at once, well
    # within the 2 s bound however loaded the machine.
    with ChatServer([Reply('["late"]', delay_s=60), Reply('["in time", "second"]')], max_delay_s=60) as server:
        the_job = job(bench, one, tmp_path)
        QuerySplit(llm(server.url, tmp_path / "llm", timeout_s=2.0), variant=3, progress=False).make_run(the_job)
    assert len(server.requests) == 2
    assert the_job.query_flags["qsplit_n"] == {next(iter(one)): 2}


def test_server_down_with_a_warm_cache_gives_the_same_run(bench, queries, tmp_path):
    with ChatServer(responder=split_in_halves) as server:
        first = QuerySplit(llm(server.url, tmp_path / "llm"), variant=3, progress=False).make_run(
            job(bench, queries, tmp_path)
        )
    assert len(server.requests) == len(set(queries.values()))
    replay = QuerySplit(llm(server.url, tmp_path / "llm"), variant=3, progress=False)  # the server is down now
    the_job = job(bench, queries, tmp_path)
    assert replay.make_run(the_job).equals(first)
    usage = the_job.stats["query_split"]["llm"]
    assert usage["requests"] == 0 and usage["cached"] == len(set(queries.values()))
    assert not any(the_job.query_flags["qsplit_failed"].values())


def test_too_many_failures_stop_the_job(bench, queries, tmp_path):
    server = ChatServer().start()
    server.stop()
    setting = QuerySplit(llm(server.url, None, max_retries=0), variant=3, max_failed_fraction=0.5, progress=False)
    the_job = job(bench, queries, tmp_path)
    with pytest.raises(QuerySplitError, match=rf"failed for {len(queries)} of {len(queries)} queries"):
        setting.make_run(the_job)
    assert the_job.stats["query_split"]["failed"]["llm_error"] == len(queries)


def test_the_key_stays_out_of_the_cache_and_the_run_key(bench, queries, tmp_path):
    with ChatServer(responder=split_in_halves) as server:
        setting = QuerySplit(llm(server.url, tmp_path / "llm"), variant=3, progress=False)
        the_job = job(bench, dict(list(queries.items())[:3]), tmp_path)
        setting.make_run(the_job)
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    written = "".join(p.read_text() for p in (tmp_path / "llm").rglob("*") if p.is_file())
    assert written and KEY not in written
    params = json.dumps(setting.cache_params())
    assert KEY not in params and server.url not in params
    assert KEY not in json.dumps(the_job.stats, default=str)


def test_cache_params_cover_variant_prompt_and_sampling():
    def params(**kwargs):
        client = ChatClient(**{"model": "m", "base_url": "http://127.0.0.1:9/v1", **kwargs.pop("llm", {})})
        return QuerySplit(client, **kwargs).cache_params()

    base = params()
    assert base["prompt_sha256"] != params(variant=2)["prompt_sha256"]
    assert {"variant", "max_subqueries", "prompt_sha256", "llm"} <= set(base)
    for changed in (
        dict(variant=2),
        dict(max_subqueries=3),
        dict(llm={"model": "n"}),
        dict(llm={"temperature": 0.3}),
        dict(llm={"max_tokens": 9}),
        dict(llm={"params": {"seed": 1}}),
    ):
        assert params(**changed) != base, changed
    for same in (
        dict(llm={"base_url": "http://elsewhere/v1"}),
        dict(llm={"timeout_s": 1, "concurrency": 1}),
        dict(max_failed_fraction=0.2),
        dict(progress=False),
    ):
        assert params(**same) == base, same
    assert params(variant=1, max_subqueries=4) == params(variant=1, max_subqueries=6), "variant 1 keeps at most 2"
    with pytest.raises(ConfigError, match="variant"):
        params(variant=4)


@pytest.mark.parametrize(
    ("overrides", "setting_id", "variant"),
    [
        ((), "qsplit", 3),
        (("setting.method.variant=2",), "qsplit-v2", 2),
        (("setting.method.variant=1",), "qsplit-v1", 1),
    ],
)
def test_config_composes_and_instantiates(isolated_paths, monkeypatch, overrides, setting_id, variant):
    monkeypatch.setenv("VLDOCIR_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    cfg = compose_cfg("setting=qsplit", *overrides)
    assert cfg.setting.id == setting_id
    setting = instantiate(cfg.setting.method)
    assert isinstance(setting, QuerySplit) and setting.variant == variant
    assert setting.llm.base_url == "http://127.0.0.1:9/v1" and setting.llm.api_env_var == "OPENAI_API_KEY"
    assert str(setting.llm.cache_dir) == str(isolated_paths / "cache" / "llm")


# -- through the pipeline ------------------------------------------------------------------------------
def test_qsplit_end_to_end_flags_failed_splits_in_per_query(subset_dir, isolated_paths, monkeypatch):
    """`python run.py setting=qsplit` (DOM-BM25) against the local server: the entry's per_query.parquet
    carries the flags, the manifest the failure counts; a rerun with the server gone reuses the stored
    run and keeps its flags."""
    import pandas as pd

    from helpers import evaluate

    bench = load_benchmark(subset_dir)
    broken = bench.queries.text.iloc[0]
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", KEY)
    over = [
        f"dataset.source={subset_dir}",
        "setting=qsplit",
        "setting.method.llm.api_env_var=VLDOCIR_TEST_LLM_KEY",
        "setting.method.llm.timeout_s=20",
        "setting.method.llm.max_retries=2",
        "setting.method.max_failed_fraction=0.5",
    ]
    with ChatServer(
        responder=lambda r: Reply("no list here") if question(r) == broken else split_in_halves(r)
    ) as server:
        first = evaluate(*over, f"setting.method.llm.base_url={server.url}")
    assert first.entry.parent.name == "qsplit"
    per_query = pd.read_parquet(first.entry / "per_query.parquet").set_index("query_id")
    failed = set(per_query.index[per_query.qsplit_failed])
    assert failed == set(bench.queries.query_id[bench.queries.text == broken])
    assert (per_query.loc[list(failed), "qsplit_failure"] == "malformed").all()
    assert (per_query.drop(index=list(failed)).qsplit_n == 2).all()  # the two halves (variant 3 searches the query too)
    assert first.manifest["retrieval"]["query_split"]["failed"]["malformed"] == len(failed)
    assert first.manifest["run"]["query_flags"] == ["qsplit_failed", "qsplit_failure", "qsplit_n"]

    again = evaluate(*over, "setting.method.llm.base_url=http://127.0.0.1:9/v1", "eval.ks=[5,10]")  # nothing listens
    assert again.manifest["run"]["reused"]
    flags = pd.read_parquet(again.entry / "per_query.parquet").set_index("query_id")
    assert set(flags.index[flags.qsplit_failed]) == failed
