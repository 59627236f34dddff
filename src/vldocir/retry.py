"""Retries of a call that a server may answer later: the one policy of the LLM client
(:mod:`vldocir.llm`) and the collectors' HTTP client (:mod:`vldocir.construction.collect.http`),
built on tenacity.

An attempt that a retry may fix raises :class:`Retryable` (its ``kind`` is what the callers count,
e.g. ``timeout``, ``connection``, ``http_429``); anything else it raises, or returns, ends the call.
Retry n (from 0) waits ``min(backoff_max_s, backoff_s * 2**n)`` times a uniform jitter in [0.5, 1],
or the server's ``Retry-After`` when that is longer, cut to ``retry_after_max_s``. After
``max_retries`` retries the last :class:`Retryable` is raised, with ``attempts`` set.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

T = TypeVar("T")


class Retryable(Exception):
    """An attempt that a retry may fix: ``kind`` (counted by the caller), ``detail`` (for the final
    error), ``retry_after`` (seconds the server asked to wait, or ``None``). ``attempts``: how many
    were made, once the retries are spent."""

    def __init__(self, kind: str, detail: str, retry_after: float | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.retry_after = kind, detail, retry_after
        self.attempts = 0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry (see the module docstring); the callers' configs give it."""

    max_retries: int
    backoff_s: float
    backoff_max_s: float
    retry_after_max_s: float

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry ``retry`` (from 0), the server's ``retry_after`` considered."""
        delay = min(self.backoff_max_s, self.backoff_s * 2.0 ** min(retry, 64)) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(self.retry_after_max_s, retry_after))
        return delay


def call_with_retries(
    attempt: Callable[[], T], policy: RetryPolicy, on_retry: Callable[[Retryable, int, float], None] | None = None
) -> T:
    """``attempt()``'s result, retrying it on :class:`Retryable` under ``policy``.

    ``on_retry(error, retry, delay)`` is called before each wait (``retry`` from 1): where callers
    count retries and log them. Raises the last :class:`Retryable` once ``policy.max_retries``
    retries failed, with ``attempts`` set; any other exception of ``attempt`` at once.
    """

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            on_retry(state.outcome.exception(), state.attempt_number, state.upcoming_sleep)

    def wait(state: tenacity.RetryCallState) -> float:
        return policy.delay(state.attempt_number - 1, state.outcome.exception().retry_after)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(int(policy.max_retries) + 1),
        wait=wait,
        retry=tenacity.retry_if_exception_type(Retryable),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except Retryable as error:
        error.attempts = retrying.statistics["attempt_number"]
        raise


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: a number of seconds or an HTTP date."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
