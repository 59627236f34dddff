"""The retry policy both network clients share (vldocir.retry): how long each retry waits, how
many attempts are made, what ends the call at once. The clients' own tests run it against local
servers (tests/test_llm.py, tests/construction/test_collect.py)."""

from __future__ import annotations

import email.utils
import time

import pytest

from vldocir.retry import Retryable, RetryPolicy, call_with_retries, parse_retry_after


def test_delay_is_exponential_with_jitter_capped_and_stretched_by_retry_after():
    policy = RetryPolicy(max_retries=10, backoff_s=0.1, backoff_max_s=1.0, retry_after_max_s=5.0)
    for retry, full in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0), (500, 1.0)]:
        delays = [policy.delay(retry) for _ in range(200)]
        assert full * 0.5 <= min(delays) and max(delays) <= full, (retry, min(delays), max(delays))
        assert max(delays) - min(delays) > full * 0.3, "jittered"
    assert policy.delay(0, retry_after=3.0) == 3.0  # longer than the backoff: the server's wait
    assert policy.delay(0, retry_after=60.0) == 5.0  # cut to retry_after_max_s
    assert 0.05 <= policy.delay(0, retry_after=0.0) <= 0.1  # shorter: the backoff


def test_retries_until_an_answer_counting_each_with_its_wait():
    answers = iter([Retryable("http_503", "HTTP 503", retry_after=0.05), Retryable("timeout", "slow"), "ok"])
    calls, retries = [], []

    def attempt():
        calls.append(time.monotonic())
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    policy = RetryPolicy(max_retries=3, backoff_s=0.001, backoff_max_s=0.002, retry_after_max_s=1.0)
    assert call_with_retries(attempt, policy, lambda e, n, d: retries.append((e.kind, n, d))) == "ok"
    assert [(kind, n) for kind, n, _ in retries] == [("http_503", 1), ("timeout", 2)]
    assert retries[0][2] == 0.05 and retries[1][2] <= 0.002
    assert len(calls) == 3 and calls[1] - calls[0] >= 0.05


def test_the_last_retryable_is_raised_with_its_attempts():
    made = []

    def attempt():
        made.append(1)
        raise Retryable("connection", f"refused ({len(made)})")

    with pytest.raises(Retryable, match=r"refused \(3\)") as error:
        call_with_retries(attempt, RetryPolicy(2, 0.001, 0.001, 0.001))
    assert error.value.attempts == 3 == len(made) and error.value.kind == "connection"
    made.clear()
    with pytest.raises(Retryable) as error:
        call_with_retries(attempt, RetryPolicy(0, 0.001, 0.001, 0.001))
    assert error.value.attempts == 1 == len(made)


def test_other_errors_end_the_call_at_once():
    made = []

    def attempt():
        made.append(1)
        raise KeyError("not a retry's business")

    with pytest.raises(KeyError):
        call_with_retries(attempt, RetryPolicy(5, 0.001, 0.001, 0.001), lambda *a: pytest.fail("no retry"))
    assert len(made) == 1


def test_retry_after_in_seconds_or_as_an_http_date():
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 0.5 ") == 0.5 and parse_retry_after("-3") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: no wait
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= parse_retry_after(later) <= 30
    assert parse_retry_after("soon") is None and parse_retry_after("") is None and parse_retry_after(None) is None
