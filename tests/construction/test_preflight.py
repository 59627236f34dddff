"""Failing before the work: the query stage's pre-flight (queries/query_stage.py,
``GeneratedQueries.preflight``) and the client's server check behind it (``ChatClient.check_server``),
against the real config, a port where nothing listens and a chat server on 127.0.0.1
(vldocir.llm_server); and the collector's pre-flight (construction/collect/http.py ``check_hosts``,
``Summary.nothing_fetched``), with the real resolver on names under ``.invalid`` (RFC 6761: they
never resolve, and the lookup fails locally) and the recorded API server of test_collect."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from collect_server import RecordedServer
from helpers import CONFIG_DIR, MINI_DIR, REPO_ROOT
from test_collect import compose as compose_collect
from vldocir.construction.collect.collector import Summary, collect_from_config
from vldocir.errors import ConfigError
from vldocir.llm import ChatClient
from vldocir.llm_server import ChatServer, Reply
from vldocir.queries.query_stage import Replay

MINI_RECORDING = REPO_ROOT / "data" / "generation" / "vl-docir-mini.recorded-by-hand.json"


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def query_stage(tmp_path: Path, *overrides: str):
    """``queries`` of ``python -m vldocir.apps.build <overrides>``, instantiated (no model is loaded)."""
    from hydra.core.hydra_config import HydraConfig

    overrides = (f"paths.cache_dir={tmp_path / 'cache'}", "queries.progress=false", *overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("build", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # paths.root_dir is Hydra's runtime directory
    return instantiate(cfg.queries)


def client_of(model: str) -> ChatClient:
    return ChatClient(model=model, base_url="http://127.0.0.1:9/v1")


def failure_without_waiting(call, monkeypatch) -> str:
    """The ConfigError ``call`` raises, checked to come without a wait: nothing sleeps on the way (no
    retry, no backoff, no poll), which is what failing at once means whatever the machine's load."""
    waits, sleep = [], time.sleep

    def recorded(seconds):
        if seconds > 0:  # sleep(0) only yields (the chat server's reply without a delay)
            waits.append(seconds)
        sleep(seconds)

    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", recorded)
        with pytest.raises(ConfigError) as error:
            call()
    assert waits == [], f"waited {waits} s before failing"
    return str(error.value)


# -- the query stage: a server -------------------------------------------------------------------------


def test_no_server_fails_at_once_naming_the_url_the_model_and_the_options(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/v1"
    stage = query_stage(
        tmp_path, "queries.recorded=null", "queries.llm.model=Qwen/Qwen3-VL-32B-Instruct", f"queries.llm.base_url={url}"
    )
    message = failure_without_waiting(lambda: stage.preflight(["doc-a"]), monkeypatch)
    assert "\n" not in message
    assert url in message and "'Qwen/Qwen3-VL-32B-Instruct'" in message and "Connection refused" in message
    assert "queries=file" in message and "queries=none" in message

    unresolvable = query_stage(tmp_path, "queries.recorded=null", "queries.llm.base_url=http://vlm.invalid:8000/v1")
    message = failure_without_waiting(lambda: unresolvable.preflight(None), monkeypatch)
    assert "http://vlm.invalid:8000/v1" in message and "cannot connect" in message

    off = query_stage(tmp_path, "queries.recorded=null", f"queries.llm.base_url={url}", "queries.check_server=false")
    off.preflight(["doc-a"])  # a rerun from the LLM cache with the server down is still possible


def test_server_check_against_a_live_server(tmp_path, monkeypatch):
    overrides = ("queries.recorded=null", "queries.llm.model=test-vlm")
    with ChatServer(models=["test-vlm"]) as server:
        query_stage(tmp_path, *overrides, f"queries.llm.base_url={server.url}").preflight(["doc-a"])
        assert server.probes == 1, "describer, generator and judge share one server and model: asked once"
        assert server.requests == [], "the probe is not a request of the stage"
    with ChatServer(models=["other-a", "other-b"]) as server:
        stage = query_stage(tmp_path, *overrides, f"queries.llm.base_url={server.url}")
        message = failure_without_waiting(lambda: stage.preflight(None), monkeypatch)
        assert "model 'test-vlm'" in message and "not served there; it lists 'other-a', 'other-b'" in message
        assert server.probes == 0
    # a server without a model listing is judged by the one-token request: here an HTTP 401
    with ChatServer([Reply(status=401, error="invalid api key")], answer_probe=False) as server:
        stage = query_stage(tmp_path, *overrides, f"queries.llm.base_url={server.url}")
        message = failure_without_waiting(lambda: stage.preflight(None), monkeypatch)
        assert "HTTP 401 to a one-token chat request" in message and "invalid api key" in message
        (probe,) = server.requests
        assert probe.body["max_tokens"] == 1 and probe.body["model"] == "test-vlm"


def test_server_check_keeps_credentials_out_of_its_message(monkeypatch):
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", "sk-test-preflight-0123456789")
    port = free_port()
    llm = ChatClient(
        model="m", base_url=f"http://user:s3cret-pass@127.0.0.1:{port}/v1", api_env_var="VLDOCIR_TEST_LLM_KEY"
    )
    message = failure_without_waiting(llm.check_server, monkeypatch)
    assert f"http://127.0.0.1:{port}/v1" in message
    assert "s3cret-pass" not in message and "sk-test-preflight" not in message and "user:" not in message


# -- the query stage: a recording ----------------------------------------------------------------------


def test_recording_names_its_documents(tmp_path):
    """Page ids (``<doc>-p<NNN>``) and configuration signatures (``<structure>|<doc>:<page>+...``)
    name documents, hyphens and all."""
    recorded = {
        "generator": "g",
        "describe": {"sec-proxy-p003": "...", "a-p-b-p010": "..."},
        "generate": {"doc_far|x:1+y-z:12": "...", "cross_doc|x:0+w:2": "..."},
    }
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(recorded))
    assert Replay(path, [client_of("g")]).documents() == {"sec-proxy", "a-p-b", "x", "y-z", "w"}

    mini_docs = set(pd.read_parquet(MINI_DIR / "documents.parquet")["doc_id"])
    named = Replay(MINI_RECORDING, [client_of("recorded-by-hand")]).documents()
    assert len(named) >= 4 and named <= mini_docs, "the mini's recording names only the mini's documents"


def test_a_recording_for_other_documents_is_refused_at_once(tmp_path, caplog, monkeypatch):
    stage = query_stage(tmp_path)  # the default: the mini's recorded answers
    message = failure_without_waiting(lambda: stage.preflight(["annual-report", "blog-post"]), monkeypatch)
    assert "\n" not in message
    assert "vl-docir-mini.recorded-by-hand.json holds recorded answers for none of the 2 input document(s)" in message
    assert "queries=file queries.path=" in message and "queries=none" in message and "queries.recorded=null" in message

    mini_docs = sorted(pd.read_parquet(MINI_DIR / "documents.parquet")["doc_id"])
    stage.preflight(None)  # the generated mini: read and checked, its documents not known yet
    stage.preflight(mini_docs)
    with caplog.at_level(logging.WARNING, logger="vldocir.queries.query_stage"):
        stage.preflight([mini_docs[0], "annual-report"])
    assert "for 1 of 2 input documents" in caplog.text

    wrong_model = query_stage(tmp_path, "queries.llm.model=Qwen/Qwen3-VL-32B-Instruct")
    message = failure_without_waiting(lambda: wrong_model.preflight(mini_docs), monkeypatch)
    assert "are by 'recorded-by-hand'" in message


# -- collection ------------------------------------------------------------------------------------------


def test_an_endpoint_that_does_not_resolve_fails_at_once_before_any_request(tmp_path, monkeypatch):
    out = tmp_path / "arxiv"
    with RecordedServer("arxiv") as server:
        node = compose_collect(
            "arxiv",
            out,
            "collect.collector.surveys=[2402.00001]",
            "collect.collector.api_url=http://export.arxiv.invalid/api/query",
            f"collect.collector.oai_url={server.base}/oai",
            f"collect.collector.html_url='{server.base}/html/{{id}}'",
            "collect.http.max_retries=5",  # the defaults' retries: 2 + 4 + ... + 32 s of backoff, were it retried
            "collect.http.backoff_s=2",
            "collect.http.backoff_max_s=120",
        )
        message = failure_without_waiting(lambda: collect_from_config(node), monkeypatch)
        assert server.hits() == [], "nothing is asked before the hosts resolve"
    assert "collect.collector.api_url: host export.arxiv.invalid does not resolve" in message
    assert not out.exists(), "no folder is made for a run that cannot start"


def test_a_run_that_fetched_nothing_says_why(tmp_path):
    with RecordedServer("arxiv") as server:  # a category the server has no listing for: HTTP 404
        node = compose_collect(
            "arxiv",
            tmp_path / "arxiv",
            "collect.collector.surveys=[]",
            "collect.collector.categories=[cs.NOPE]",
            f"collect.collector.api_url={server.base}/api/query",
            f"collect.collector.oai_url={server.base}/oai",
            f"collect.collector.html_url='{server.base}/html/{{id}}'",
        )
        failed = collect_from_config(node)
    assert (failed.fetched, failed.documents, failed.failed) == (0, 0, {"http_404": 1})
    reason = failed.nothing_fetched()
    assert reason.startswith("arxiv: nothing fetched, 1 candidate(s) failed (http_404 1), the first: http://127.0.0.1")
    assert "search_query=cat%3Acs.NOPE" in reason and reason.endswith("summary.json, a rerun retries them")

    failure = {"key": "2301.00011", "reason": "connection", "error": "https://x/oai: ConnectError (after 6 attempts)"}
    rerun = Summary(
        "arxiv", "/out", already=2, documents=2, failed=Counter(connection=3, http_500=1), failures=[failure]
    )
    assert rerun.nothing_fetched() == (
        "arxiv: nothing fetched, 4 candidate(s) failed (connection 3, http_500 1), the first: "
        "https://x/oai: ConnectError (after 6 attempts); see /out/summary.json, a rerun retries them"
    )
    skipped = Summary("pubmed", "/out", skipped=Counter(license_not_allowed=2, retracted=1))
    assert skipped.nothing_fetched() == (
        "pubmed: nothing fetched, every candidate was skipped (license_not_allowed 2, retracted 1); "
        "see /out/summary.json"
    )
    assert Summary("sec", "/out").nothing_fetched() == (
        "sec: nothing fetched, the source listed no candidates (see collect.collector's parameters)"
    )
    assert Summary("sec", "/out", fetched=1, failed=Counter(connection=5)).nothing_fetched() is None
    assert Summary("sec", "/out", already=3, documents=3).nothing_fetched() is None, "a complete run, rerun"
    assert Summary("sec", "/out", stopped_at_limit=True).nothing_fetched() is None, "max_documents=0"
