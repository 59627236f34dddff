"""The chat client over several endpoints (``base_url`` a list): the load shared with at most
``concurrency`` requests in flight on each, an endpoint that is down (refused, 5xx) left out with one
warning line, the cache shared whatever endpoint answered, the server check of every endpoint, and
credentials in the URLs kept out of everything shown; against real HTTP servers on 127.0.0.1
(vldocir.llm_server) and ports where nothing listens."""

from __future__ import annotations

import base64
import logging
import pickle
import socket
import threading
import time

import pytest

from helpers import CONFIG_DIR
from vldocir.errors import ConfigError
from vldocir.llm import DOWN_AFTER, ChatClient, image_part
from vldocir.llm_server import ChatServer, Reply
from vldocir.manifest import url_secrets

KEY = "sk-test-0123456789abcdef"
PASSWORD = "url-pass-7c6b5a4d3e2f"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", KEY)


def client(urls, cache_dir=None, **kwargs) -> ChatClient:
    options = dict(
        model="test-model",
        base_url=urls,
        api_env_var="VLDOCIR_TEST_LLM_KEY",
        timeout_s=60.0,  # generous: a loaded machine must not turn a slow local answer into a retry
        max_retries=2,
        backoff_s=0.01,
        backoff_max_s=0.05,
        concurrency=2,
        cache_dir=cache_dir,
    )
    return ChatClient(**{**options, **kwargs})


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, image_part(b"\x89PNG page " + text.encode())]}]


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_password(url: str, user: str = "gateway-user") -> str:
    return url.replace("http://", f"http://{user}:{PASSWORD}@")


def test_two_endpoints_share_the_load_within_concurrency_each(tmp_path):
    """Each answer waits until four requests are in flight over both servers (a barrier, not a delay
    that a loaded machine could outlast): the client must keep concurrency (2) x endpoints (2) in
    flight, and the servers count that neither ever has more than two."""
    together = threading.Barrier(4, timeout=60)  # a bound against hanging: a client sending fewer fails

    def answer(request):
        together.wait()
        return Reply(request.text().upper())

    with ChatServer(responder=answer) as one, ChatServer(responder=answer) as two:
        llm = client([with_password(one.url, "user-one"), with_password(two.url, "user-two")], tmp_path / "llm")
        results = llm.complete_many([ask(f"q{i}") for i in range(16)])
    assert [r.content for r in results] == [f"Q{i}" for i in range(16)]
    assert all(r.attempts == 1 for r in results)
    assert (one.max_in_flight, two.max_in_flight) == (2, 2)
    assert len(one.requests) + len(two.requests) == 16 and one.requests and two.requests
    for server, user in ((one, "user-one"), (two, "user-two")):  # each endpoint its own credentials
        basic = "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
        assert {r.headers["authorization"] for r in server.requests} == {basic}
    assert PASSWORD not in repr(llm) and llm.urls() == [one.url, two.url]

    # The endpoint that answered is no part of the cache key: another list, or one server that is
    # not there, replays every answer.
    elsewhere = client(f"http://127.0.0.1:{free_port()}/v1", tmp_path / "llm", max_retries=0)
    again = elsewhere.complete_many([ask(f"q{i}") for i in range(16)])
    assert [r.content for r in again] == [f"Q{i}" for i in range(16)] and all(r.cached for r in again)
    assert elsewhere.cache_key(ask("q0")) == llm.cache_key(ask("q0"))


@pytest.mark.parametrize("fault", ["refused", "http_500"])
def test_an_endpoint_down_is_named_once_and_the_others_answer(fault, caplog):
    caplog.set_level(logging.DEBUG)  # httpx's request lines included: no password in any
    with (
        ChatServer(responder=lambda r: Reply(r.text())) as up,
        ChatServer(responder=lambda r: Reply(status=500)) as bad,
    ):
        down = f"http://127.0.0.1:{free_port()}/v1" if fault == "refused" else bad.url
        llm = client([with_password(down), up.url], max_retries=0)  # no retry round: each request one pass
        results = llm.complete_many([ask(f"q{i}") for i in range(24)])
    assert [r.content for r in results] == [f"q{i}" for i in range(24)], [r.error for r in results]
    assert len(up.requests) == 24
    if fault == "http_500":  # down after DOWN_AFTER failures in a row, and none sent to it after
        assert DOWN_AFTER <= len(bad.requests) < DOWN_AFTER + 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"LLM endpoint {down} is down" in warnings[0], warnings
    why = "cannot connect" if fault == "refused" else f"{DOWN_AFTER} failed requests in a row"
    assert why in warnings[0]
    assert PASSWORD not in caplog.text + repr(llm) + "".join(str(r.error) for r in results)


def test_a_down_endpoint_is_tried_again_after_its_pause_and_takes_requests_when_back(monkeypatch, caplog):
    monkeypatch.setattr("vldocir.llm.DOWN_S", 0.2)  # the pause, shortened from 30 s for the test,
    monkeypatch.setattr("vldocir.llm.DOWN_MAX_S", 0.2)  # and not doubled by a trial the first batch may make
    caplog.set_level(logging.INFO, logger="vldocir.llm")
    port = free_port()
    with ChatServer(responder=lambda r: Reply(r.text())) as up:
        llm = client([f"http://127.0.0.1:{port}/v1", up.url], max_retries=0)
        assert all(r.ok for r in llm.complete_many([ask(f"a{i}") for i in range(6)]))
        assert len(up.requests) == 6  # the first endpoint is down
        with ChatServer(responder=lambda r: Reply(r.text()), port=port) as back:
            time.sleep(0.3)  # past the pause: one trial request, then it is up again
            assert all(r.ok for r in llm.complete_many([ask(f"b{i}") for i in range(12)]))
    assert back.requests and len(back.requests) + len(up.requests) == 18
    assert f"LLM endpoint http://127.0.0.1:{port}/v1 answers again" in caplog.text


def test_every_endpoint_down_is_an_error_per_request_after_the_retries(caplog):
    caplog.set_level(logging.DEBUG)
    urls = [with_password(f"http://127.0.0.1:{free_port()}/v1") for _ in range(2)]
    results = client(urls, max_retries=1).complete_many([ask("a"), ask("b")])
    assert [r.error_kind for r in results] == ["connection", "connection"]
    assert all(r.attempts == 4 and "on 2 endpoints" in r.error for r in results)  # 2 rounds x 2 endpoints
    assert PASSWORD not in caplog.text + "".join(r.error for r in results)


def test_the_server_check_asks_every_endpoint(caplog):
    refused = with_password(f"http://127.0.0.1:{free_port()}/v1")
    with ChatServer(models=["test-model"]) as served, ChatServer(models=["another-model"]) as other:
        client([served.url, served.url.replace("127.0.0.1", "localhost")]).check_server()
        assert served.probes == 2

        client([refused, served.url]).check_server()  # one down of two: a warning, the run goes on
        warning = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warning) == 1 and "1 of 2 LLM endpoints down" in warning[0] and "cannot connect" in warning[0]

        with pytest.raises(ConfigError, match="the model is not served there; it lists 'another-model'"):
            client([served.url, other.url]).check_server()
        with pytest.raises(ConfigError, match="cannot connect") as none_up:
            client([refused, f"http://127.0.0.1:{free_port()}/v1"]).check_server()
    assert none_up.value.args[0].count("cannot connect") == 2
    assert PASSWORD not in caplog.text + str(none_up.value)


def test_a_list_from_the_environment_or_the_config_and_its_pickle(monkeypatch):
    monkeypatch.setenv("VLDOCIR_LLM_BASE_URL", "http://node1:8000/v1, http://node2:8000/v1?tag=a,b")
    llm = ChatClient(model="m", concurrency=32)
    assert llm.base_url == ("http://node1:8000/v1", "http://node2:8000/v1?tag=a,b")  # a query keeps its commas
    assert ChatClient(model="m", base_url=["http://node1:8000/v1"]).base_url == "http://node1:8000/v1"

    copy = pickle.loads(pickle.dumps(llm))  # what submitit does to a job's client
    assert (
        copy.base_url == llm.base_url
        and copy.urls() == llm.urls()
        and copy.cache_key(ask("x")) == llm.cache_key(ask("x"))
    )
    replay = llm.with_base_url("http://127.0.0.1:9/v1")  # the replay server stands in for all of them
    assert replay.base_urls == ("http://127.0.0.1:9/v1",) and replay.cache_key(ask("x")) == llm.cache_key(ask("x"))

    # Credentials in every URL of the variable are found (what the apps declare as secrets at start).
    listed = f"http://a:{PASSWORD}@node1:8000/v1,http://b:{PASSWORD[::-1]}@node2:8000/v1"
    assert {PASSWORD, PASSWORD[::-1]} <= set(url_secrets(listed))

    for bad, message in (
        ("ftp://node1/v1", "not an http"),
        ("http://node1:8000/v1,http://node1:8000/v1", "listed twice"),
        (f"http://user:{PASSWORD}@node1:99999/v1", "not an http"),
    ):
        with pytest.raises(ConfigError, match=message) as refused:
            ChatClient(model="m", base_url=bad)
        assert PASSWORD not in str(refused.value)


def test_the_query_stage_config_takes_a_list(tmp_path):
    """``queries.llm.base_url='[...]'`` on the build's command line reaches the three clients."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import instantiate

    overrides = [
        f"paths.cache_dir={tmp_path}",
        "queries.recorded=null",
        "queries.llm.base_url=[http://node1:8000/v1,http://node2:8000/v1]",
        "queries.llm.concurrency=32",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("build", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    stage = instantiate(cfg.queries)
    for llm in stage.clients():
        assert llm.base_urls == ("http://node1:8000/v1", "http://node2:8000/v1") and llm.concurrency == 32
