"""A client for OpenAI-compatible chat-completion servers (vLLM, SGLang, the OpenAI API), with an
on-disk response cache: query splitting asks it for sub-queries, query generation for VLM answers
about page images, query cleaning for ratings.

Built by Hydra (``_target_: vldocir.llm.ChatClient``). What it guarantees:

- **Secrets.** The API key is read from the environment variable named by ``api_env_var`` when the
  first request is made; it is never an argument, never an attribute, and never written to the
  cache, :meth:`ChatClient.cache_params` or :meth:`ChatClient.usage` (``params.api_key`` and any
  other secret-named top-level parameter are refused). Credentials in ``base_url``
  (``http://user:pass@host/v1``) are sent as HTTP basic auth and the URL goes to the HTTP client
  without them, so no log line (httpx's included) shows them. Parameters that
  :func:`vldocir.manifest.redact_secrets` would redact (every value of ``params.extra_headers`` and
  ``params.extra_query``, a secret-looking value anywhere) are sent but left out of
  :meth:`ChatClient.cache_params`, hence out of every cache key, cache file and run key: they do
  not change the answer. Error messages and log lines are scrubbed of all of them.
- **Retries.** The ``openai`` client's own retries are off (``max_retries=0``); this module retries
  timeouts, connection errors, HTTP 429 and 5xx up to ``max_retries`` times with exponential
  backoff and jitter (:mod:`vldocir.retry`; a ``Retry-After`` header, seconds or an HTTP date, is
  honoured up to ``backoff_max_s``). Other 4xx answers are not retried: the same request would
  fail again.
- **No raise per item.** :meth:`ChatClient.complete_many` returns one :class:`ChatResult` per
  request; a request that failed has ``error`` set. Only a misconfigured client raises.
- **Usable answers only are cached.** An HTTP-200 answer is *unusable* when it was cut at
  ``max_tokens`` (``finish_reason=length``: ``truncated``), ended for any other reason than
  ``stop`` (``content_filter``, else ``unfinished``: a filtered or cut answer is no answer),
  holds more than ``max_answer_bytes`` bytes of content (``oversized``; the body is read in chunks and
  the connection dropped at the
  cap, so memory per request stays within a few times the cap), or fails the caller's
  :class:`Validator` (the caller's own parser: its reason, e.g. ``malformed``). Unusable answers are
  returned (``ChatResult.unusable``; truncated and oversized ones as errors), counted per reason
  (``usage()["unusable"]``) and never cached, so the next run asks again. There is no retry of an
  unusable answer within a run: with the default ``temperature=0`` a server answers the same
  request the same way, so a retry costs tokens for the same answer; a misbehaving server or a
  too small ``max_tokens`` is fixed between runs, and the rerun asks exactly the unusable ones.
- **Cache.** A usable response is stored under ``cache_dir/<k[:2]>/<k>.json``, ``k`` the SHA-256 of
  (the cache format, model, messages with each inline image replaced by the SHA-256 of its bytes,
  temperature, max_tokens, the secret-free ``params``, the validator's name), written atomically.
  The validator's name (parser and version) is in the key, so answers validated by one parser are
  never served to another. The server's address is not part of the key (the same model served
  elsewhere answers the same). A cached response is replayed without contacting the server, so a
  rerun works with the server down; with ``temperature > 0`` the first usable sample is the one
  replayed. Failures are never cached. :meth:`ChatClient.record` stores answers written elsewhere
  as given (recorded answers are replayed as recorded, usable or not).
- **Several endpoints.** ``base_url`` may list several servers of the same model (a list, or one
  string of comma-separated URLs, as ``$VLDOCIR_LLM_BASE_URL`` holds them). Each request goes to the
  endpoint with the fewest requests in flight (ties in turn, round robin): a slow server gets fewer.
  A request that fails on one endpoint (timeout, connection, 429, 5xx) is sent at once to another
  it has not tried; when each has failed it, the retry policy waits as above and starts over. An
  endpoint is *down* when it cannot be connected to, or after :data:`DOWN_AFTER` failed requests in
  a row: one warning line names it, its requests go to the others, and after :data:`DOWN_S` seconds
  (doubling while it stays down, up to :data:`DOWN_MAX_S`) one request at a time tries it again.
  With every endpoint down, requests go to all as if none were (the retries then decide). The
  endpoint that answered is no part of the cache key: the same model answers the same.
- **Concurrency.** At most ``concurrency`` requests are in flight at once per client and endpoint,
  whoever calls (``concurrency`` x endpoints in all).
- **Server check.** :meth:`ChatClient.check_server` asks each endpoint, once and without retries,
  whether it lists the model (``GET /v1/models``) and answers a one-token chat request
  (:data:`SERVER_PROBE`); a caller runs it before work that needs the server, so that a server that
  is down, or serves another model, is a one-line :class:`ConfigError` in seconds, not after the
  retries of every request. Of several endpoints, those that cannot be reached (or answer 5xx or
  not in time) are named in one warning line and left out until :data:`DOWN_S` has passed, when at
  least one other passed; a wrong model or key anywhere is an error.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from vldocir.errors import ConfigError
from vldocir.io import atomic_write_json
from vldocir.manifest import declare_secrets, is_secret_key, redact_secrets, redact_text, url_secrets
from vldocir.retry import Retryable, RetryPolicy, call_with_retries, parse_retry_after

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown the progress bars

BASE_URL_ENV = "VLDOCIR_LLM_BASE_URL"
NO_KEY = "EMPTY"
# Part of every cache key: bump it when the stored response format or what gets stored changes
# (2: only usable answers are stored; entries of 1 may hold truncated or malformed ones).
CACHE_FORMAT = 2
MAX_ANSWER_BYTES = 1_000_000
UNUSABLE_KINDS = ("truncated", "oversized")  # error kinds of HTTP-200 answers the client itself rejects
# (an answer that ended otherwise, error kind content_filter or unfinished, is a failed request to the callers)
FINISHED = frozenset({"stop"})  # the one finish reason of a whole answer: any other is never cached
RECORDED = "recorded"  # the finish reason of an answer stored by ChatClient.record (replayed as recorded)
_CHUNK_BYTES = 1 << 16
SERVER_PROBE = [{"role": "user", "content": "Reply with the word OK."}]
"""The messages of :meth:`ChatClient.check_server`'s one-token request (a replay server answers them too)."""
PROBE_TIMEOUT_S = 10.0  # the server check's connection and listing; its one-token answer gets up to 60 s
DOWN_AFTER = 3  # failed requests in a row (timeouts, 5xx) after which an endpoint is down; unreachable: at once
DOWN_S = 30.0  # how long a down endpoint gets no request; doubled each time it is still down, up to DOWN_MAX_S
DOWN_MAX_S = 300.0
_URL_START = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")  # a comma that starts the next URL of a list


def image_part(image: bytes, mime: str = "image/png", detail: str | None = None) -> dict[str, Any]:
    """A chat message content part holding an image inline (a base64 data URL), e.g.
    ``{"role": "user", "content": [{"type": "text", "text": "..."}, image_part(png)]}``."""
    url = {"url": f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"}
    if detail is not None:
        url["detail"] = detail
    return {"type": "image_url", "image_url": url}


def _normalized(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each inline image replaced by ``sha256:<hex of its bytes>``: what the cache
    key hashes and what a cache entry records (a page image is not stored again per request)."""

    def part(value: Any) -> Any:
        if isinstance(value, Mapping):
            if value.get("type") == "image_url" and isinstance(value.get("image_url"), Mapping):
                url = str(value["image_url"].get("url", ""))
                if url.startswith("data:") and "," in url:
                    header, _, data = url.partition(",")
                    raw = base64.b64decode(data) if header.endswith(";base64") else data.encode()
                    url = f"sha256:{hashlib.sha256(raw).hexdigest()}"
                return {**value, "image_url": {**value["image_url"], "url": url}}
            return {k: part(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [part(v) for v in value]
        return value

    return [part(m) for m in messages]


@dataclass(frozen=True)
class Validator:
    """What makes an answer usable to the caller that asked for it.

    ``check(content)`` is ``None`` for a usable answer, else the reason it is not: the caller's own
    parser, so that "usable" means exactly what the caller can use. ``name`` names that parser and
    its version (``"qsplit.subqueries/v1"``): it is part of every cache key, so a changed parser
    never gets answers another one validated. Several requests of one batch may share a name with
    checks of their own (e.g. each against the element ids of its prompt)."""

    name: str
    check: Callable[[str], str | None]


@dataclass
class ChatResult:
    """One request's outcome: ``content`` (the assistant's text) or ``error`` (``"<kind>: <detail>"``,
    ``error_kind`` one of ``timeout``, ``connection``, ``http_<status>``, ``bad_response``,
    ``truncated``, ``oversized``). ``unusable``: why an answer the server gave cannot be used
    (``truncated``, ``oversized``, or the validator's reason, the content then kept for the caller's
    parser); such an answer is not cached."""

    content: str | None = None
    error: str | None = None
    error_kind: str | None = None
    unusable: str | None = None
    cached: bool = False
    attempts: int = 0  # HTTP requests made for it (0 when replayed from the cache)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


class ChatClient:
    """Chat completions from an OpenAI-compatible server, cached on disk.

    Args:
        model: the served model name (e.g. ``Qwen/Qwen3-VL-32B-Instruct``).
        base_url: the server's ``/v1`` URL, or several servers' (a list, or one comma-separated
            string) serving the same model; ``None``: ``$VLDOCIR_LLM_BASE_URL`` (one URL or a
            comma-separated list). Kept as given, one URL a string, several a tuple.
        api_env_var: the NAME of the environment variable holding the key (unset: ``EMPTY``). Not
            ``api_key_env``: vldocir.manifest's rule takes any name with "key" in it for a secret.
        temperature, max_tokens: sampling; part of the cache key.
        params: further request parameters (``top_p``, ``seed``, ``extra_body``, ...); part of the cache key.
        timeout_s: per HTTP request.
        max_retries: retries after the first attempt (timeouts, connection errors, 429, 5xx).
        backoff_s, backoff_max_s: retry n (from 0) waits ``min(backoff_max_s, backoff_s * 2**n)`` times
            a uniform jitter in [0.5, 1].
        concurrency: the most requests in flight at once per endpoint (``concurrency`` x endpoints in all).
        cache_dir: where responses are cached; ``None``: no cache.
        max_answer_bytes: the most bytes (UTF-8) of content an answer may hold; a longer one is
            ``oversized``: unusable, not cached, and not read past about six times the cap (a JSON
            body escapes a character in at most 6 bytes).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_env_var: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 512,
        params: Mapping[str, Any] | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        concurrency: int = 8,
        cache_dir: str | Path | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ):
        if not model:
            raise ConfigError("llm.model: the served model name is required")
        urls = _base_urls(base_url if base_url else os.environ.get(BASE_URL_ENV))
        if not urls:
            raise ConfigError(f"llm.base_url: not set and ${BASE_URL_ENV} is empty; give the server's /v1 URL")
        if not api_env_var or not str(api_env_var).replace("_", "").isalnum():
            raise ConfigError(
                f"llm.api_env_var names an environment variable (e.g. OPENAI_API_KEY), got {api_env_var!r}"
            )
        if isinstance(concurrency, bool) or int(concurrency) < 1:
            raise ConfigError(f"llm.concurrency must be >= 1, got {concurrency!r}")
        if isinstance(max_retries, bool) or int(max_retries) < 0:
            raise ConfigError(f"llm.max_retries must be >= 0, got {max_retries!r}")
        if isinstance(max_answer_bytes, bool) or int(max_answer_bytes) < 1:
            raise ConfigError(f"llm.max_answer_bytes must be >= 1, got {max_answer_bytes!r}")
        self.model, self.api_env_var = str(model), str(api_env_var)
        self.base_url: str | tuple[str, ...] = urls[0] if len(urls) == 1 else urls
        self.temperature, self.max_tokens = float(temperature), int(max_tokens)
        self.params = _plain(params or {})  # Hydra passes an OmegaConf node
        if clash := sorted(set(self.params) & {"model", "messages", "temperature", "max_tokens", "stream"}):
            raise ConfigError(f"llm.params: {clash} are set by the client (or its own arguments), not in params")
        if secret := sorted(k for k in self.params if is_secret_key(k)):
            raise ConfigError(
                f"llm.params: {secret} would put a secret into the config; the key is read from the environment "
                f"variable named by llm.api_env_var ({self.api_env_var}); headers go in params.extra_headers"
            )
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.backoff_s, self.backoff_max_s = float(backoff_s), float(backoff_max_s)
        self.concurrency = int(concurrency)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.max_answer_bytes = int(max_answer_bytes)
        self.answers_from: str | None = None
        self._setup()

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._endpoints = [_Endpoint(i, url) for i, url in enumerate(self.base_urls)]
        self._balance = threading.Condition()  # guards the endpoints' in-flight counts and states
        self._turn = 0  # the endpoint a tie goes to first (round robin)
        # What the client sends as credentials is scrubbed from everything written (a library
        # caller's too, not only the apps', which declare their config's at start).
        credentials = [s for e in self._endpoints for s in (*(e.basic_auth or ()), *url_secrets(e.raw))]
        declare_secrets([*_secret_values(self.params), *credentials])
        self._answer_params = _secret_free(self.params, redact_secrets(self.params))
        self._unusable: Counter = Counter()
        self._usage = dict.fromkeys(
            (
                "requests",
                "called",
                "cached",
                "failed",
                "retries",
                "prompt_tokens",
                "completion_tokens",
                "cached_prompt_tokens",
                "cached_completion_tokens",
            ),
            0,
        )

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The endpoints' URLs, as given (credentials included: never to be shown)."""
        return (self.base_url,) if isinstance(self.base_url, str) else tuple(self.base_url)

    # The openai clients hold the key: they are never pickled (a submitit job rebuilds them from its
    # environment), nor is what the balancer learnt of the endpoints.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def with_base_url(self, base_url: str, answers_from: str | None = None) -> ChatClient:
        """The same client (model, sampling, retries, cache) talking to the server at ``base_url``
        alone (whatever endpoints this one had). ``answers_from`` names where that server's answers
        come from (e.g. a recording's hash): it becomes part of every cache key
        (:meth:`cache_params`), so answers replayed from one recording are never taken for another's."""
        clone = ChatClient.__new__(ChatClient)
        clone.__setstate__({**self.__getstate__(), "base_url": str(base_url), "answers_from": answers_from})
        return clone

    def urls(self) -> list[str]:
        """The endpoints' URLs without credentials: what may be shown."""
        return [e.url for e in self._endpoints]

    def __repr__(self) -> str:
        shown = self.urls()[0] if len(self._endpoints) == 1 else self.urls()
        return f"ChatClient(model={self.model!r}, base_url={shown!r}, api_env_var={self.api_env_var!r})"

    def cache_params(self) -> dict[str, Any]:
        """What changes the answers: model and sampling (not the server's address, never a secret:
        what the redaction rule would redact is left out), and where replayed answers come from
        (:meth:`with_base_url`)."""
        params = {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens}
        params.update(self._answer_params)
        if getattr(self, "answers_from", None):
            params["answers_from"] = self.answers_from
        return params

    def usage(self) -> dict[str, Any]:
        """Counts so far, for a manifest: ``requests`` (HTTP requests, retries included), ``called``
        (answered by the server), ``cached`` (replayed), ``failed`` (no answer), ``retries`` (requests
        sent again: after the backoff, or at once to another endpoint), tokens (of the server's
        answers; ``cached_*``: of the replayed ones) and ``unusable``: answers given but not usable
        (so not cached), per reason."""
        with self._lock:
            return {"model": self.model, **self._usage, "unusable": dict(sorted(self._unusable.items()))}

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                self._usage[name] += value

    # -- the cache ----------------------------------------------------------------------------------
    def cache_key(self, messages: Sequence[Mapping[str, Any]], validate: Validator | None = None) -> str:
        request = {
            "format": CACHE_FORMAT,
            **self.cache_params(),
            "messages": _normalized(messages),
            "validator": validate.name if validate is not None else None,
        }
        text = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / key[:2] / f"{key}.json"

    def _cached(self, key: str) -> ChatResult | None:
        path = self._cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            response = json.loads(path.read_text())["response"]
            if len(str(response["content"]).encode()) > self.max_answer_bytes:
                raise ValueError(f"the answer is over llm.max_answer_bytes={self.max_answer_bytes}")
            if response.get("finish_reason") not in FINISHED | {RECORDED}:  # stored by an older version
                log.warning(
                    "LLM cache entry %s holds an answer with finish_reason=%r; asking the server again",
                    path,
                    response.get("finish_reason"),
                )
                return None
            return ChatResult(
                content=str(response["content"]),
                cached=True,
                finish_reason=response.get("finish_reason"),
                prompt_tokens=int(response.get("prompt_tokens", 0)),
                completion_tokens=int(response.get("completion_tokens", 0)),
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("damaged LLM cache entry %s (%s); asking the server again", path, error)
            return None

    def _store(
        self, key: str, messages: Sequence[Mapping[str, Any]], result: ChatResult, validate: Validator | None
    ) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        entry = {
            "key": key,
            "request": {
                **self.cache_params(),
                "messages": _normalized(messages),
                "validator": validate.name if validate is not None else None,
            },
            "response": {
                "content": result.content,
                "finish_reason": result.finish_reason,
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
            },
        }
        try:
            atomic_write_json(entry, path)
        except OSError as error:  # a full disk costs the cache entry, not the answer
            log.warning("could not write LLM cache entry %s: %s", path, error)

    def record(self, messages: Sequence[Mapping[str, Any]], content: str, validate: Validator | None = None) -> str:
        """Store ``content`` as the cached answer to ``messages``, as if the server had given it, and
        return its cache key: answers recorded elsewhere (e.g. written by hand for a shipped example)
        are then replayed by :meth:`complete_many` (with the same ``validate``) like any other, as
        recorded, usable or not: a recording is the answer by definition. The entry's
        ``finish_reason`` is ``recorded``. Needs ``cache_dir``."""
        if self.cache_dir is None:
            raise ConfigError("llm.cache_dir: recorded answers are replayed through the cache; set a cache_dir")
        key = self.cache_key(messages, validate)
        self._store(key, messages, ChatResult(content=str(content), finish_reason=RECORDED), validate)
        return key

    # -- the server check ---------------------------------------------------------------------------
    def check_server(self, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """Raise :class:`ConfigError` (one line naming the server, the model and what failed) unless
        the server at ``base_url`` lists ``model`` on ``GET /v1/models`` and answers a one-token chat
        request. One attempt each, no retries: ``timeout_s`` bounds the connection and the listing
        (a refused connection or a name that does not resolve fails at once), the answer gets
        ``min(timeout_s + 50, llm.timeout_s)`` (a busy server may queue it). A server without a
        model listing (HTTP 404 there) is judged by the chat request alone. Nothing is cached or
        counted in :meth:`usage`.

        Several endpoints are checked at once. Any that serves another model, or refuses the key
        (an HTTP 4xx), is an error; those that cannot be reached, answer 5xx or not in time are
        named in one warning line and marked down (module doc) when at least one other passed, an
        error when none did."""
        if len(self._endpoints) == 1:
            self._check_endpoint(self._endpoints[0], timeout_s)
            return
        with ThreadPoolExecutor(max_workers=min(len(self._endpoints), 16), thread_name_prefix="llm-check") as pool:
            outcomes = list(pool.map(lambda e: _outcome(self._check_endpoint, e, timeout_s), self._endpoints))
        if wrong := [str(error) for error in outcomes if error is not None and not isinstance(error, _Down)]:
            raise ConfigError("; ".join(wrong))
        down = [(e, error) for e, error in zip(self._endpoints, outcomes, strict=True) if error is not None]
        if len(down) == len(self._endpoints):
            raise ConfigError("; ".join(str(error) for _, error in down))
        with self._balance:
            for endpoint, _ in down:
                self._mark_down(endpoint, time.monotonic())
        if down:
            log.warning(
                "%d of %d LLM endpoints down, left out for %g s: %s",
                len(down),
                len(self._endpoints),
                DOWN_S,
                "; ".join(str(error) for _, error in down),
            )

    def _check_endpoint(self, endpoint: _Endpoint, timeout_s: float) -> None:
        """:meth:`check_server` of one endpoint: raises :class:`ConfigError`, :class:`_Down` for
        what may pass (it cannot be reached, answers 5xx or not in time)."""
        import openai

        where = f"LLM server {endpoint.url} (model {self.model!r})"
        client = self._openai(endpoint).with_options(timeout=float(timeout_s), max_retries=0)
        step, limit = "listing the models (GET /models)", float(timeout_s)
        try:
            try:
                listed = [m.id for m in client.models.list()]
            except openai.NotFoundError:
                listed = None
            if listed is not None and self.model not in listed:
                shown = ", ".join(repr(m) for m in listed[:10]) + (
                    f" and {len(listed) - 10} more" if len(listed) > 10 else ""
                )
                raise ConfigError(f"{where}: the model is not served there; it lists {shown or 'no model'}")
            step, limit = "a one-token chat request", min(float(timeout_s) + 50.0, self.timeout_s)
            client.with_options(timeout=limit).chat.completions.create(
                model=self.model, messages=SERVER_PROBE, temperature=self.temperature, max_tokens=1, **self.params
            )
        except openai.APITimeoutError as error:
            raise _Down(f"{where}: no answer to {step} within {limit:g} s") from error
        except openai.APIConnectionError as error:
            raise _Down(f"{where}: cannot connect ({self._scrub(_connection_reason(error))})") from error
        except openai.APIStatusError as error:
            detail = " ".join(self._scrub(str(error)).split())[:300]
            fault = _Down if error.status_code >= 500 else ConfigError
            raise fault(f"{where}: HTTP {error.status_code} to {step}: {detail}") from error
        except openai.APIError as error:  # an answer that is not the protocol's
            detail = " ".join(self._scrub(f"{type(error).__name__}: {error}").split())[:300]
            raise ConfigError(f"{where}: unexpected answer to {step}: {detail}") from error

    # -- the endpoints --------------------------------------------------------------------------------
    def _acquire(self, tried: set[int]) -> _Endpoint | None:
        """A slot on the endpoint for a request's next attempt (waiting for one), or ``None`` when
        every endpoint that may be asked has been ``tried`` (indexes) by this request: the fewest in
        flight among those not tried, ties in turn. An up endpoint takes ``concurrency`` requests, a
        down one none until its pause is over and then one (a trial); with all down, all are asked
        as if up."""
        with self._balance:
            while True:
                now = time.monotonic()
                all_down = all(e.down_until > now for e in self._endpoints)
                caps = {
                    e.index: self.concurrency if all_down or not e.down_until else int(e.down_until <= now)
                    for e in self._endpoints
                }
                askable = [e for e in self._endpoints if e.index not in tried and caps[e.index] > 0]
                if not askable:
                    return None
                free = [e for e in askable if e.in_flight < caps[e.index]]
                if free:
                    n = len(self._endpoints)
                    chosen = min(free, key=lambda e: (e.in_flight, (e.index - self._turn) % n))
                    self._turn = (chosen.index + 1) % n
                    chosen.in_flight += 1
                    return chosen
                self._balance.wait(timeout=0.5)  # a pause ends with no release to wake anyone

    def _release(self, endpoint: _Endpoint, error: Retryable | None) -> None:
        """Free the slot of a request that ``endpoint`` answered (``error`` None: any HTTP answer
        but 429 and 5xx shows the server up) or failed."""
        with self._balance:
            endpoint.in_flight -= 1
            if error is None:
                if endpoint.down_until and len(self._endpoints) > 1:
                    log.info("LLM endpoint %s answers again", endpoint.url)
                endpoint.failures, endpoint.down_until, endpoint.pause = 0, 0.0, 0.0
            elif error.kind != "http_429" and len(self._endpoints) > 1:  # 429: up, but busy
                endpoint.failures += 1
                now = time.monotonic()
                unreachable = isinstance(error, _Unreachable)
                if endpoint.down_until and endpoint.down_until <= now:  # its trial failed
                    self._mark_down(endpoint, now)
                elif not endpoint.down_until and (unreachable or endpoint.failures >= DOWN_AFTER):
                    self._mark_down(endpoint, now)
                    why = "cannot connect" if unreachable else f"{endpoint.failures} failed requests in a row"
                    log.warning(
                        "LLM endpoint %s is down (%s: %s); its requests go to the other endpoints, "
                        "it is tried again in %g s",
                        endpoint.url,
                        why,
                        error.detail[:200],
                        endpoint.pause,
                    )
            self._balance.notify_all()

    @staticmethod
    def _mark_down(endpoint: _Endpoint, now: float) -> None:
        endpoint.pause = min(DOWN_MAX_S, endpoint.pause * 2) if endpoint.pause else DOWN_S
        endpoint.down_until = now + endpoint.pause

    # -- requests -----------------------------------------------------------------------------------
    def _openai(self, endpoint: _Endpoint):
        with self._lock:
            if endpoint.client is None:
                import openai

                options = {}
                if endpoint.basic_auth is not None:  # what the HTTP client did with a URL's user:password
                    basic = base64.b64encode(":".join(endpoint.basic_auth).encode()).decode("ascii")
                    options["default_headers"] = {"Authorization": f"Basic {basic}"}
                api_key = os.environ.get(self.api_env_var) or NO_KEY
                declare_secrets([api_key] if api_key != NO_KEY else [])
                endpoint.client = openai.OpenAI(
                    base_url=endpoint.url,
                    api_key=api_key,
                    timeout=self.timeout_s,
                    max_retries=0,
                    **options,
                )
            return endpoint.client

    def _scrub(self, text: str) -> str:
        """``text`` (an error, a log line) without the key, the URLs' credentials, secret parameter
        values or any environment secret."""
        secrets = [os.environ.get(self.api_env_var) or ""]
        for endpoint in self._endpoints:
            text = text.replace(endpoint.raw, endpoint.url)
            raw = urlsplit(endpoint.raw)
            secrets += [*(endpoint.basic_auth or ()), raw.password or "", raw.username or ""]
        secrets = sorted({s for s in secrets + _secret_values(self.params) if len(s) >= 4}, key=len, reverse=True)
        for secret in secrets:
            text = text.replace(secret, "<redacted>")
        return redact_text(text)

    def _request(self, endpoint: _Endpoint, messages: Sequence[Mapping[str, Any]]) -> ChatResult:
        """One HTTP request to ``endpoint``; raises :class:`~vldocir.retry.Retryable` for what a
        retry may fix (:class:`_Unreachable` when no connection was made)."""
        import openai

        try:
            with self._openai(endpoint).chat.completions.with_streaming_response.create(
                model=self.model,
                messages=list(messages),
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                **self.params,
            ) as response:
                body = self._read_body(response, time.monotonic() + self.timeout_s)
        except openai.APITimeoutError as error:
            raise Retryable("timeout", f"no answer within {self.timeout_s:g} s") from error
        except openai.APIConnectionError as error:
            # httpx's ConnectError (or that of the fork the openai client runs on): no connection made
            fault = _Unreachable if type(error.__cause__).__name__ == "ConnectError" else Retryable
            raise fault("connection", self._scrub(str(error.__cause__ or error))) from error
        except openai.APIStatusError as error:
            kind, detail = f"http_{error.status_code}", self._scrub(str(error))[:500]
            if error.status_code == 429 or error.status_code >= 500:
                raise Retryable(kind, detail, _retry_after(error)) from error
            return ChatResult(error=f"{kind}: {detail}", error_kind=kind)
        oversized = ChatResult(
            error=f"oversized: the answer is over llm.max_answer_bytes={self.max_answer_bytes} bytes",
            error_kind="oversized",
            unusable="oversized",
        )
        if body is None:
            return oversized
        try:
            payload = json.loads(body)
            choice = payload["choices"][0]
            content = choice["message"]["content"]
            if content is None:
                raise ValueError("the answer has no text content")
            if not isinstance(content, str):
                raise TypeError(f"the answer's content is a {type(content).__name__}, not text")
            usage = payload.get("usage") or {}
            result = ChatResult(
                content=content,
                finish_reason=choice.get("finish_reason"),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
            )
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            detail = self._scrub(f"{type(error).__name__}: {error}")[:500]
            return ChatResult(error=f"bad_response: {detail}", error_kind="bad_response")
        if len(content.encode()) > self.max_answer_bytes:
            oversized.prompt_tokens, oversized.completion_tokens = result.prompt_tokens, result.completion_tokens
            return oversized
        return result

    def _read_body(self, response: Any, deadline: float) -> bytes | None:
        """The response body, or ``None`` as soon as it is longer than an answer of
        ``max_answer_bytes`` can be (the rest is never read: leaving the response drops the connection).
        ``deadline``: the body takes at most ``timeout_s`` after the headers (the openai client's
        timeout covers the time up to them, and each read, not a server trickling bytes)."""
        limit = 6 * self.max_answer_bytes + _CHUNK_BYTES  # a JSON string escapes a character in <= 6 bytes
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            return None
        chunks, size = [], 0
        pieces = response.iter_bytes(_CHUNK_BYTES)
        while True:
            try:
                chunk = next(pieces, None)
            except Exception as error:  # the HTTP library's own: openai wraps errors only up to the headers
                kind = "timeout" if "timeout" in type(error).__name__.lower() else "connection"
                raise Retryable(kind, self._scrub(f"reading the answer: {type(error).__name__}: {error}")) from error
            if chunk is None:
                break
            size += len(chunk)
            if size > limit:
                return None
            if time.monotonic() > deadline:
                raise Retryable("timeout", f"no whole answer within {self.timeout_s:g} s")
            chunks.append(chunk)
        return b"".join(chunks)

    def _complete(self, messages: Sequence[Mapping[str, Any]], key: str, validate: Validator | None) -> ChatResult:
        attempts, asked = 0, set()

        def attempt() -> ChatResult:
            """One round: the request sent to each endpoint in turn until one answers (one, with one endpoint)."""
            nonlocal attempts
            tried: set[int] = set()
            failed: Retryable | None = None
            failed_at = ""
            while (endpoint := self._acquire(tried)) is not None:
                if failed is not None:  # sent at once to another endpoint
                    log.info("LLM request to %s failed (%s); sent to %s", failed_at, failed.kind, endpoint.url)
                    self._count(retries=1)
                tried.add(endpoint.index)
                asked.add(endpoint.index)
                attempts += 1
                self._count(requests=1)
                try:
                    result = self._request(endpoint, messages)
                except Retryable as error:
                    self._release(endpoint, error)
                    failed, failed_at = error, endpoint.url
                    continue
                except BaseException:
                    self._release(endpoint, None)
                    raise
                self._release(endpoint, None)
                return result
            raise failed

        def on_retry(error: Retryable, retry: int, delay: float) -> None:
            log.info("LLM request failed (%s); retry %d/%d in %.2f s", error.kind, retry, self.max_retries, delay)
            self._count(retries=1)

        policy = RetryPolicy(self.max_retries, self.backoff_s, self.backoff_max_s, retry_after_max_s=self.backoff_max_s)
        try:
            result = call_with_retries(attempt, policy, on_retry)
        except Retryable as error:
            where = f" on {len(asked)} endpoints" if len(asked) > 1 else ""
            result = ChatResult(
                error=f"{error.kind}: {error.detail} (after {attempts} attempts{where})", error_kind=error.kind
            )
        except Exception as error:  # one bad request must not end a batch
            result = ChatResult(
                error=f"bad_response: {type(error).__name__}: {self._scrub(str(error))[:500]}",
                error_kind="bad_response",
            )
        result.attempts = attempts
        if result.ok and result.finish_reason == "length":
            result.error, result.error_kind = (
                f"truncated: the answer reached max_tokens={self.max_tokens} (finish_reason=length)",
                "truncated",
            )
            result.unusable = "truncated"
        elif result.ok and result.finish_reason not in FINISHED:
            kind = "content_filter" if result.finish_reason == "content_filter" else "unfinished"
            result.error = f"{kind}: the answer ended with finish_reason={result.finish_reason!r}, not 'stop'"
            result.error_kind = result.unusable = kind
        elif result.ok and validate is not None:
            result.unusable = validate.check(result.content)
        if result.ok or result.unusable:
            self._count(called=1, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens)
        if result.unusable:
            with self._lock:
                self._unusable[result.unusable] += 1
        elif result.ok:
            self._store(key, messages, result, validate)
        else:
            self._count(failed=1)
            log.warning("LLM request failed: %s", result.error)
        return result

    def complete(self, messages: Sequence[Mapping[str, Any]], validate: Validator | None = None) -> ChatResult:
        """One chat completion (cached); a failure is a result with ``error``, not an exception."""
        return self.complete_many([messages], validate=validate)[0]

    def complete_many(
        self,
        requests: Sequence[Sequence[Mapping[str, Any]]],
        progress: bool | str = False,
        validate: Validator | Sequence[Validator | None] | None = None,
    ) -> list[ChatResult]:
        """One result per request, in order: cached ones replayed, the rest sent ``concurrency`` at
        a time to each endpoint, each as soon as its cache key is known. Identical requests (with
        validators of the same name) are sent once. ``validate``: one :class:`Validator` for all, or
        one per request (``None``: only truncated and oversized answers are unusable).
        ``progress``: a tqdm bar (a string: its label)."""
        validators = list(validate) if isinstance(validate, Sequence) else [validate] * len(requests)
        if len(validators) != len(requests):
            raise ValueError(f"{len(validators)} validators for {len(requests)} requests")
        keys: list[str] = []
        results: dict[str, ChatResult] = {}
        todo: dict[str, tuple[Sequence[Mapping[str, Any]], Validator | None]] = {}
        futures: dict[Any, str] = {}
        pool = None
        try:
            for messages, check in zip(requests, validators, strict=True):
                keys.append(key := self.cache_key(messages, check))
                if key in results or key in todo:
                    continue
                cached = self._cached(key)
                if cached is not None:
                    results[key] = cached
                    self._count(
                        cached=1,
                        cached_prompt_tokens=cached.prompt_tokens,
                        cached_completion_tokens=cached.completion_tokens,
                    )
                    continue
                todo[key] = (messages, check)
                if pool is None:  # sent as soon as keyed: the keys of the rest are hashed meanwhile
                    import openai  # noqa: F401  (here, once: threads importing it at once may see it half made)

                    workers = min(self.concurrency * len(self._endpoints), len(requests))
                    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm")
                futures[pool.submit(self._complete, messages, key, check)] = key
            bar = _progress_bar(progress, len(todo), self.model) if todo else None
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar(1)
        except BaseException:  # an interrupt or a failed request: the requests not started are not sent
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        if pool is not None:
            pool.shutdown(wait=True)
        if todo:
            bar(0, close=True)
            unusable = Counter(results[key].unusable for key in todo if results[key].unusable)
            if unusable:
                log.warning(
                    "%d of %d LLM answer(s) unusable (%s): not cached, asked again next run",
                    sum(unusable.values()),
                    len(todo),
                    ", ".join(f"{reason} {n}" for reason, n in sorted(unusable.items())),
                )
        return [results[key] for key in keys]


class _Endpoint:
    """One server of a client's ``base_url``: its URL as given (``raw``) and without credentials
    (``url``, what may be shown), the credentials (sent as HTTP basic auth), its ``openai`` client
    (built at the first request) and what the balancer knows of it: requests ``in_flight``,
    ``failures`` in a row, down until ``down_until`` (``time.monotonic``; 0: up) for ``pause`` s."""

    def __init__(self, index: int, raw: str):
        self.index, self.raw = index, raw
        self.url, self.basic_auth = _without_userinfo(raw)
        self.client = None
        self.in_flight = self.failures = 0
        self.down_until = self.pause = 0.0


class _Unreachable(Retryable):
    """No connection to the endpoint could be made (refused, a name that does not resolve, no
    route): it is down at once. A connection dropped later is a plain :class:`Retryable`."""


class _Down(ConfigError):
    """A server check that may pass later: the endpoint cannot be reached, answers 5xx or not in time."""


def _outcome(check: Callable[..., None], *args: Any) -> ConfigError | None:
    try:
        check(*args)
    except ConfigError as error:
        return error
    return None


def _base_urls(value: Any) -> tuple[str, ...]:
    """The endpoints of ``llm.base_url``: one URL, a list of them, or one comma-separated string
    (split only at a comma that starts a URL, so a query string keeps its commas). Raises
    :class:`ConfigError` for what is not an http(s) URL, or a URL listed twice."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(_plain(value)) if isinstance(value, Sequence) else None
    if items is None:
        raise ConfigError(f"llm.base_url: a URL or a list of URLs, got a {type(value).__name__}")
    urls = [u.strip() for item in items for u in _URL_START.split(str(item).strip().strip(","))]
    urls = [u for u in urls if u]
    for url in urls:
        try:
            parts = urlsplit(url)
            usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
        except ValueError:  # a port that is no number or past 65535
            usable = False
        if not usable:
            raise ConfigError(
                f"llm.base_url: {redact_text(url)!r} is not an http(s) URL (e.g. http://gpu-node:8000/v1)"
            )
    if twice := sorted({u for u in urls if urls.count(u) > 1}):
        raise ConfigError(f"llm.base_url: {redact_text(twice[0])!r} is listed twice")
    return tuple(urls)


def _plain(value: Any) -> Any:
    """Plain dicts and lists from any mappings and sequences (OmegaConf containers included)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


def _secret_free(value: Any, redacted: Any) -> Any:
    """``value`` without the parts that the redaction rule changed in ``redacted`` (its redacted
    copy); a mapping or list left empty by that goes too (an auth header alone changes nothing)."""
    if isinstance(value, Mapping) and isinstance(redacted, Mapping):
        out = {}
        for k, v in value.items():
            if _kept(v, redacted.get(k)):
                kept = _secret_free(v, redacted[k])
                if kept or not v or not isinstance(v, (Mapping, list)):
                    out[k] = kept
        return out
    if isinstance(value, list) and isinstance(redacted, list) and len(value) == len(redacted):
        return [_secret_free(v, r) for v, r in zip(value, redacted, strict=True) if _kept(v, r)]
    return value


def _kept(value: Any, redacted: Any) -> bool:
    if isinstance(value, (Mapping, list)):
        return isinstance(redacted, type(value) if isinstance(value, list) else Mapping)
    return value == redacted


def _secret_values(params: Any) -> list[str]:
    """The strings of ``params`` that the redaction rule would redact, and their words (a server
    may echo the token of ``Bearer <token>`` alone)."""
    values: list[str] = []

    def walk(value: Any, redacted: Any) -> None:
        if isinstance(value, Mapping) and isinstance(redacted, Mapping):
            for k, v in value.items():
                walk(v, redacted.get(k))
        elif isinstance(value, list) and isinstance(redacted, list) and len(value) == len(redacted):
            for v, r in zip(value, redacted, strict=True):
                walk(v, r)
        elif isinstance(value, (Mapping, list)):
            values.extend(str(leaf) for leaf in _leaves(value))
        elif value != redacted and value is not None:
            values.append(str(value))

    walk(params, redact_secrets(params))
    return values + [word for v in values for word in v.split() if len(word) >= 8]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _without_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without user:password@, (user, password) or None)``: the credentials go to the HTTP
    client as basic auth (what httpx does with them in a URL), so no URL it logs holds them."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc)), (unquote(parts.username or ""), unquote(parts.password or ""))


def _connection_reason(error: BaseException) -> str:
    """Why a connection failed, in words: the innermost cause (``[Errno 111] Connection refused``,
    ``[Errno -2] Name or service not known``), which the HTTP libraries wrap in their own errors."""
    cause, seen = error, {id(error)}
    while (inner := cause.__cause__ or cause.__context__) is not None and id(inner) not in seen:
        cause = inner
        seen.add(id(cause))
    return str(cause) or type(cause).__name__


def _retry_after(error: Any) -> float | None:
    """The seconds an error response's ``Retry-After`` asks for, if it has one."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    return parse_retry_after(headers.get("retry-after")) if headers is not None else None


def _progress_bar(progress: bool | str, total: int, model: str) -> Callable[..., None]:
    if not progress:
        return lambda n, close=False: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=progress if isinstance(progress, str) else f"LLM ({model})", unit="request")

    def update(n: int, close: bool = False) -> None:
        bar.update(n)
        if close:
            bar.close()

    return update
