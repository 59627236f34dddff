"""The chat client against a real HTTP server speaking the chat-completions protocol (vldocir.llm_server):
retries, the response cache (usable answers only), the size cap, the concurrency bound and the
whereabouts of the key and of other secrets."""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import pickle
import threading
import time

import pytest

from vldocir.errors import ConfigError
from vldocir.llm import ChatClient, Validator, image_part
from vldocir.llm_server import ChatServer, Reply

KEY = "sk-test-0123456789abcdef"  # what the environment holds in these tests; must never be written


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", KEY)


def client(url: str, cache_dir=None, **kwargs) -> ChatClient:
    options = dict(
        model="test-model",
        base_url=url,
        api_env_var="VLDOCIR_TEST_LLM_KEY",
        timeout_s=10.0,  # generous: a loaded machine must not turn a slow local answer into a retry
        max_retries=2,
        backoff_s=0.01,
        backoff_max_s=0.05,
        concurrency=4,
        cache_dir=cache_dir,
    )
    return ChatClient(**{**options, **kwargs})


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def files_text(root) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_answer_key_and_usage(tmp_path):
    with ChatServer([Reply("hello", prompt_tokens=5, completion_tokens=2)]) as server:
        llm = client(server.url, tmp_path / "llm", temperature=0.5, max_tokens=64, params={"seed": 3})
        result = llm.complete(ask("hi"))
    assert result.ok and result.content == "hello" and not result.cached and result.attempts == 1
    body = server.requests[0].body
    assert body["model"] == "test-model" and body["messages"] == ask("hi")
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.5, 64, 3)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}", "the key is read from the named variable"
    assert llm.usage() == {
        "model": "test-model",
        "requests": 1,
        "called": 1,
        "cached": 0,
        "failed": 0,
        "retries": 0,
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "cached_prompt_tokens": 0,
        "cached_completion_tokens": 0,
        "unusable": {},
    }


def test_the_key_is_never_written(tmp_path):
    with ChatServer([Reply("ok")]) as server:
        llm = client(server.url, tmp_path / "llm")
        assert llm.complete(ask("hi")).ok
    assert len(list((tmp_path / "llm").rglob("*.json"))) == 1
    assert KEY not in files_text(tmp_path / "llm")
    assert KEY not in json.dumps(llm.cache_params()) + json.dumps(llm.usage()) + repr(llm)
    assert KEY.encode() not in pickle.dumps(llm), "the openai client (which holds the key) is not pickled"
    assert pickle.loads(pickle.dumps(llm)).cache_params() == llm.cache_params()


def test_no_key_in_the_environment_sends_a_placeholder(monkeypatch):
    monkeypatch.delenv("VLDOCIR_TEST_LLM_KEY")
    with ChatServer([Reply("ok")]) as server:
        assert client(server.url).complete(ask("hi")).ok
    assert server.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_timeout_is_retried(tmp_path):
    """The first answer comes a minute late (the server holds it), so only the timeout ends that request;
    the second comes at once, well within the bound however loaded the machine."""
    with ChatServer([Reply("late", delay_s=60), Reply("in time")], max_delay_s=60) as server:
        llm = client(server.url, tmp_path / "llm", timeout_s=2.0)
        result = llm.complete(ask("hi"))
    assert (result.content, result.attempts) == ("in time", 2)
    assert len(server.requests) == 2 and llm.usage()["retries"] == 1


def test_5xx_is_retried_then_reported_and_not_cached(tmp_path):
    with ChatServer([Reply(status=500), Reply(status=503), Reply(status=502)]) as server:
        llm = client(server.url, tmp_path / "llm", max_retries=2)
        result = llm.complete(ask("hi"))
    assert not result.ok and result.error_kind == "http_502" and result.attempts == 3
    assert "after 3 attempts" in result.error
    assert len(server.requests) == 3
    assert not list((tmp_path / "llm").rglob("*.json")), "failures are not cached"
    assert llm.usage()["failed"] == 1


def test_429_is_retried_after_the_servers_delay():
    with ChatServer([Reply(status=429, headers={"Retry-After": "0.3"}), Reply("ok")]) as server:
        llm = client(server.url, backoff_max_s=1.0)
        start = time.monotonic()
        result = llm.complete(ask("hi"))
    assert result.ok and result.attempts == 2
    assert time.monotonic() - start >= 0.3


def test_429_with_an_http_date_is_retried_at_that_date_capped_at_backoff_max_s(caplog):
    """Retry-After may be an HTTP date (RFC 9110); whole seconds, so ten ahead is nine to ten away."""
    caplog.set_level(logging.INFO, logger="vldocir.llm")
    when = email.utils.formatdate(time.time() + 10, usegmt=True)
    with ChatServer([Reply(status=429, headers={"Retry-After": when}), Reply("ok")]) as server:
        llm = client(server.url, backoff_max_s=0.8)
        start = time.monotonic()
        result = llm.complete(ask("hi"))
    assert result.ok and result.attempts == 2 and llm.usage()["retries"] == 1
    assert time.monotonic() - start >= 0.8
    assert "retry 1/2 in 0.80 s" in caplog.text  # the date (not the 10 ms backoff), cut to backoff_max_s


def test_4xx_is_not_retried():
    with ChatServer([Reply(status=400), Reply("never asked")]) as server:
        result = client(server.url).complete(ask("hi"))
    assert result.error_kind == "http_400" and result.attempts == 1 and len(server.requests) == 1


def test_server_down_replays_the_cache(tmp_path):
    requests = [ask(f"question {i}") for i in range(5)]
    with ChatServer(responder=lambda r: Reply(f"answer to {r.text()}")) as server:
        first = client(server.url, tmp_path / "llm").complete_many(requests)
    assert len(server.requests) == 5
    # the server is gone now: a new client (another run) replays every answer without a request
    again = client(server.url, tmp_path / "llm")
    replayed = again.complete_many(requests)
    assert [r.content for r in replayed] == [r.content for r in first] == [f"answer to question {i}" for i in range(5)]
    assert all(r.cached and r.attempts == 0 for r in replayed)
    assert again.usage()["requests"] == 0 and again.usage()["cached"] == 5
    assert again.usage()["cached_prompt_tokens"] == 5 * 11


def test_server_down_without_cache_is_an_error_per_item(tmp_path):
    server = ChatServer().start()
    server.stop()
    results = client(server.url, tmp_path / "llm", max_retries=1).complete_many([ask("a"), ask("b")])
    assert [r.error_kind for r in results] == ["connection", "connection"]
    assert all(r.attempts == 2 for r in results)


def test_concurrency_is_bounded_and_order_kept():
    """Each answer waits until three requests are in flight at once (a barrier, not a delay that a
    loaded machine could outlast), so the client must send three at a time, and never more."""
    together = threading.Barrier(3, timeout=60)  # a bound against hanging: a client sending fewer fails

    def answer(request):
        together.wait()
        return Reply(request.text().upper())

    with ChatServer(responder=answer) as server:
        llm = client(server.url, concurrency=3, timeout_s=120)  # longer than the barrier's bound
        results = llm.complete_many([ask(f"q{i}") for i in range(12)], progress=True)
    assert [r.content for r in results] == [f"Q{i}" for i in range(12)]
    assert len(server.requests) == 12 and all(r.attempts == 1 for r in results)
    assert server.max_in_flight == 3


def test_identical_requests_are_sent_once():
    with ChatServer(responder=lambda r: Reply(r.text())) as server:
        results = client(server.url).complete_many([ask("a"), ask("b"), ask("a")])
    assert [r.content for r in results] == ["a", "b", "a"] and len(server.requests) == 2


def test_cache_key_covers_model_sampling_and_image_bytes(tmp_path):
    base = client("http://127.0.0.1:9/v1")
    png_a, png_b = b"\x89PNG fake page a", b"\x89PNG fake page b"
    with_a = [{"role": "user", "content": [{"type": "text", "text": "what is shown?"}, image_part(png_a)]}]
    with_b = [{"role": "user", "content": [{"type": "text", "text": "what is shown?"}, image_part(png_b)]}]
    key = base.cache_key(with_a)
    assert key == client("http://elsewhere:1/v1", timeout_s=9, concurrency=1).cache_key(with_a), (
        "the server's address, timeouts and concurrency do not change answers"
    )
    assert key != base.cache_key(with_b)
    for changed in (dict(model="other"), dict(temperature=0.7), dict(max_tokens=7), dict(params={"top_p": 0.9})):
        assert client("http://127.0.0.1:9/v1", **changed).cache_key(with_a) != key, changed


def test_images_are_sent_inline_and_cached_by_hash(tmp_path):
    png = b"\x89PNG fake page bytes"
    messages = [{"role": "user", "content": [{"type": "text", "text": "describe"}, image_part(png)]}]
    with ChatServer([Reply("a page")]) as server:
        assert client(server.url, tmp_path / "llm").complete(messages).content == "a page"
    url = server.requests[0].body["messages"][0]["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(png).decode()
    entry = files_text(tmp_path / "llm")
    assert base64.b64encode(png).decode() not in entry and "sha256:" in entry


def test_damaged_cache_entry_is_asked_again(tmp_path):
    with ChatServer([Reply("first"), Reply("second")]) as server:
        llm = client(server.url, tmp_path / "llm")
        llm.complete(ask("hi"))
        next((tmp_path / "llm").rglob("*.json")).write_text("{not json")
        assert llm.complete(ask("hi")).content == "second"
    assert len(server.requests) == 2


def test_misconfigured_client_raises(monkeypatch):
    monkeypatch.delenv("VLDOCIR_LLM_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="base_url"):
        ChatClient(model="m")
    monkeypatch.setenv("VLDOCIR_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert ChatClient(model="m").base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match="api_env_var"):
        ChatClient(model="m", api_env_var="sk-a literal key")
    with pytest.raises(ConfigError, match="concurrency"):
        ChatClient(model="m", concurrency=0)
    with pytest.raises(ConfigError, match="temperature"):
        ChatClient(model="m", params={"temperature": 1.0})


# -- usable answers only are cached -------------------------------------------------------------------
def subqueries(content: str) -> str | None:
    """A caller's parser: a non-empty JSON list of strings, or why not."""
    try:
        value = json.loads(content)
    except ValueError:
        return "malformed"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "malformed"
    return None if value else "empty"


LIST = Validator("test.subqueries/v1", subqueries)


def test_unusable_answers_are_not_cached_and_the_rerun_asks_again(tmp_path):
    broken = {
        "prose": Reply("Sure! The sub-queries are: first, second."),
        "empty": Reply("[]"),
        "truncated": Reply('["a long sub-query that was cut', finish_reason="length"),
        "oversized": Reply(json.dumps(["x" * 5000])),
    }
    fixed = {"now": False}

    def respond(request):
        return Reply(json.dumps([f"{request.text()} part"])) if fixed["now"] else broken[request.text()]

    requests = [ask(name) for name in broken]
    with ChatServer(responder=respond) as server:
        llm = client(server.url, tmp_path / "llm", max_answer_bytes=1000)
        first = llm.complete_many(requests, validate=LIST)
        assert [r.unusable for r in first] == ["malformed", "empty", "truncated", "oversized"]
        assert [r.ok for r in first] == [True, True, False, False], "the parser sees prose and [] as they came"
        assert first[0].content == "Sure! The sub-queries are: first, second."
        assert [r.error_kind for r in first[2:]] == ["truncated", "oversized"]
        assert llm.usage()["unusable"] == {"empty": 1, "malformed": 1, "oversized": 1, "truncated": 1}
        assert llm.usage()["called"] == 4 and llm.usage()["failed"] == 0
        assert not list((tmp_path / "llm").rglob("*.json")), "no unusable answer is cached"

        fixed["now"] = True  # the server is fixed: the next run asks every request again
        again = client(server.url, tmp_path / "llm", max_answer_bytes=1000)
        second = again.complete_many(requests, validate=LIST)
        assert len(server.requests) == 8 and not any(r.cached for r in second)
        assert [json.loads(r.content) for r in second] == [[f"{name} part"] for name in broken]
        assert again.usage()["unusable"] == {} and len(list((tmp_path / "llm").rglob("*.json"))) == 4

        third = client(server.url, tmp_path / "llm").complete_many(requests, validate=LIST)
        assert all(r.cached for r in third) and len(server.requests) == 8


def test_an_answer_not_ended_by_stop_is_never_cached(tmp_path):
    """content_filter (and any finish reason but stop, none included) is unusable: returned as an
    error, never cached, asked again next run; an entry an older version cached with one is not
    replayed. A recorded answer stays replayed as recorded (test above)."""
    reasons = {"filtered": "content_filter", "tools": "tool_calls", "none": None}
    with ChatServer(responder=lambda r: Reply('["a"]', finish_reason=reasons.get(r.text(), "stop"))) as server:
        llm = client(server.url, tmp_path / "llm")
        results = llm.complete_many([ask(name) for name in reasons], validate=LIST)
        assert [r.error_kind for r in results] == ["content_filter", "unfinished", "unfinished"]
        assert [r.unusable for r in results] == ["content_filter", "unfinished", "unfinished"]
        assert "finish_reason='content_filter'" in results[0].error and not any(r.ok for r in results)
        assert llm.usage()["unusable"] == {"content_filter": 1, "unfinished": 2}
        assert not list((tmp_path / "llm").rglob("*.json")), "no answer but a stopped one is cached"
        again = client(server.url, tmp_path / "llm").complete_many([ask(name) for name in reasons], validate=LIST)
        assert not any(r.cached for r in again) and len(server.requests) == 6

        stopped = llm.complete(ask("fine"), validate=LIST)
        assert stopped.ok and stopped.finish_reason == "stop"
        (entry,) = (tmp_path / "llm").rglob("*.json")
        stale = json.loads(entry.read_text())
        stale["response"]["finish_reason"] = "content_filter"  # as an older version cached it
        entry.write_text(json.dumps(stale))
        replay = client(server.url, tmp_path / "llm").complete(ask("fine"), validate=LIST)
        assert not replay.cached and len(server.requests) == 8, "asked again, not replayed"
        assert json.loads(entry.read_text())["response"]["finish_reason"] == "stop", "the entry is replaced"


def test_an_oversized_answer_is_not_read_whole(tmp_path):
    """A 40 MB answer: refused from its Content-Length, or (chunked) once the body passes the cap;
    either way the client hangs up, so the server cannot deliver the rest."""
    huge = "y" * (40 << 20)
    with ChatServer([Reply(huge), Reply(huge, chunked=True)]) as server:
        llm = client(server.url, tmp_path / "llm", max_answer_bytes=1000)
        results = [llm.complete(ask("one")), llm.complete(ask("two"))]
        assert server.wait_idle(timeout_s=60)  # a bound against hanging: it is idle once the pipes break
    assert [r.error_kind for r in results] == ["oversized", "oversized"]
    assert all(r.content is None and r.attempts == 1 for r in results)
    assert server.cut_off == 2, "the client stopped reading both bodies"
    assert llm.usage()["unusable"] == {"oversized": 2} and not list((tmp_path / "llm").rglob("*.json"))


def test_a_chunked_answer_within_the_cap_is_read():
    with ChatServer([Reply('["a", "b"]', chunked=True)]) as server:
        result = client(server.url).complete(ask("hi"), validate=LIST)
    assert result.ok and result.unusable is None and json.loads(result.content) == ["a", "b"]


def test_the_validators_name_is_part_of_the_cache_key(tmp_path):
    with ChatServer(responder=lambda r: Reply('["a"]')) as server:
        llm = client(server.url, tmp_path / "llm")
        llm.complete(ask("hi"), validate=LIST)
        assert llm.complete(ask("hi"), validate=LIST).cached
        other = Validator("test.subqueries/v2", subqueries)
        assert not llm.complete(ask("hi"), validate=other).cached, "another parser's validation is not reused"
        assert not llm.complete(ask("hi")).cached
    assert len(server.requests) == 3
    assert llm.cache_key(ask("hi"), LIST) != llm.cache_key(ask("hi"), other) != llm.cache_key(ask("hi"))


def test_recorded_answers_are_replayed_as_recorded(tmp_path):
    llm = client("http://127.0.0.1:9/v1", tmp_path / "llm")
    llm.record(ask("hi"), "not a list", validate=LIST)
    replayed = llm.complete(ask("hi"), validate=LIST)
    assert replayed.cached and replayed.content == "not a list" and llm.usage()["requests"] == 0


# -- secrets ------------------------------------------------------------------------------------------
PASSWORD, BEARER, API_KEY = "url-pass-9f8e7d6c5b", "hdr-bearer-1a2b3c4d5e6f", "hdr-apikey-0a9b8c7d6e"


def test_header_and_url_secrets_are_sent_but_never_written(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # httpx's request lines included
    with ChatServer([Reply("ok"), Reply("ok"), Reply(status=400)]) as server:
        url = server.url.replace("http://", f"http://gateway-user:{PASSWORD}@")
        basic = client(url, tmp_path / "llm", params={"extra_headers": {"api-key": API_KEY, "X-Trace": "on"}})
        bearer = client(server.url, tmp_path / "llm", params={"extra_headers": {"Authorization": f"Bearer {BEARER}"}})
        assert basic.complete(ask("hi")).ok and bearer.complete(ask("again")).ok
        failed = basic.complete(ask("once more"))
    first, second = (r.headers for r in server.requests[:2])
    assert first["authorization"] == "Basic " + base64.b64encode(f"gateway-user:{PASSWORD}".encode()).decode()
    assert first["api-key"] == API_KEY and first["x-trace"] == "on"
    assert second["authorization"] == f"Bearer {BEARER}"
    assert failed.error_kind == "http_400"
    written = files_text(tmp_path / "llm") + " ".join(str(p) for p in (tmp_path / "llm").rglob("*"))
    shown = caplog.text + failed.error
    for llm in (basic, bearer):
        shown += json.dumps(llm.cache_params()) + json.dumps(llm.usage()) + repr(llm)
    for secret in (PASSWORD, BEARER, API_KEY, KEY):
        assert secret not in written and secret not in shown, secret
    # Every header value is taken for a credential (vldocir.manifest.is_carrier_key): none is in the key.
    assert "extra_headers" not in basic.cache_params() and "extra_headers" not in bearer.cache_params()
    assert bearer.cache_key(ask("hi")) == client(server.url).cache_key(ask("hi")), "a secret does not change the key"


def test_connection_errors_do_not_show_the_urls_credentials(caplog):
    caplog.set_level(logging.DEBUG)
    result = client(f"http://someone:{PASSWORD}@127.0.0.1:9/v1", max_retries=0).complete(ask("hi"))
    assert result.error_kind == "connection"
    assert PASSWORD not in result.error + caplog.text


def test_a_secret_named_parameter_is_refused_without_showing_it():
    with pytest.raises(ConfigError, match="api_env_var") as refused:
        client("http://127.0.0.1:9/v1", params={"api_key": API_KEY})
    assert API_KEY not in str(refused.value)
