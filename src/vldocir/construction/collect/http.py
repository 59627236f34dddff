"""The one HTTP client every collector uses: polite (a minimum interval between requests, retries
that honour ``Retry-After``, a User-Agent from config) and resumable (every body it fetched is kept
on disk, so a rerun asks the server only for what it never answered).

What it guarantees:

- **Rate limit.** At most one request per ``min_interval_s`` per host (``per_host: true``) or over
  all hosts together (``per_host: false``: SEC EDGAR counts its fair-access limit per client, over
  www.sec.gov and data.sec.gov alike). Retries wait their turn like any request.
- **Retries.** Timeouts, connection errors, HTTP 429 and 5xx are retried up to ``max_retries`` times
  (:mod:`vldocir.retry`): retry n (from 0) waits ``min(backoff_max_s, backoff_s * 2**n)`` times a
  jitter in [0.5, 1], or the server's ``Retry-After`` (seconds or an HTTP date) when that is longer,
  capped at ``retry_after_max_s``. Other 4xx answers are not retried: the same request would fail
  again.
- **Stored responses.** A 200 answer (and a 404/410, an answer too: "there is none") is written to
  ``<store>/<k[:2]>/<k>.body`` + ``<k>.json`` (``k`` the SHA-256 of the URL with its query), the
  metadata last, so an entry without it is incomplete and ignored. A later request for the same URL
  is answered from there without contacting the server. Failures are never stored; a body that
  turns out malformed is dropped from the store before the error is raised, so a rerun fetches it
  again.
- **Errors** are :class:`FetchError` (with ``reason``: ``timeout``, ``connection``, ``http_<status>``,
  ``too_large``) and :class:`MalformedResponse` (``malformed_response``); both name the URL. A host
  name that does not resolve is a ``connection`` failure that is not retried (the same lookup
  would fail again), so an asset on such a host costs one lookup, not the retries' backoff.
- **Hosts first.** :func:`check_hosts` resolves the hosts of a collector's endpoints before any
  request: a name that does not resolve (a typo, no network) is one line naming it, in
  milliseconds. A host reached through a proxy (``trust_env`` and ``HTTPS_PROXY``/``HTTP_PROXY``
  not bypassed by ``NO_PROXY``) is left to the proxy to resolve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from vldocir.errors import ConfigError, VldocirError
from vldocir.io import atomic_path, atomic_write_json
from vldocir.retry import Retryable, RetryPolicy, call_with_retries, parse_retry_after

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown the progress bar

STORE_FORMAT = 1
MISSING_STATUSES = (404, 410)  # answers too: the resource does not exist (stored, never retried)


class CollectError(VldocirError, RuntimeError):
    """A collection step that failed; ``reason`` is the short name counted in the run's summary."""

    reason = "error"

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class FetchError(CollectError):
    """A request that got no usable answer (after its retries, where retrying could help)."""

    def __init__(self, url: str, reason: str, detail: str):
        super().__init__(f"{url}: {detail}", reason)
        self.url = url


class MalformedResponse(CollectError):
    """A body that is not what the API's format says it is (bad JSON, bad XML, an empty page)."""

    reason = "malformed_response"

    def __init__(self, url: str, detail: str):
        super().__init__(f"{url}: malformed response: {detail}")
        self.url = url


@dataclass
class HttpSpec:
    """How politely to fetch (``collect.http`` in conf/collect.yaml, per source in conf/collect/).

    Args:
        user_agent: the ``User-Agent`` header; required (Wikimedia and SEC EDGAR ask for a contact).
        min_interval_s: the least time between two requests to one host (or to any, see ``per_host``).
        per_host: ``false``: one interval over all hosts.
        host_intervals: ``{host: seconds}``, the interval for those hosts (``per_host`` only), e.g. a
            slower one for an API host than for its static files.
        timeout_s: per request.
        max_retries: retries after the first attempt (timeouts, connection errors, 429, 5xx).
        backoff_s, backoff_max_s: exponential backoff between retries (see the module docstring).
        retry_after_max_s: the longest ``Retry-After`` obeyed; a longer one is cut to this.
        max_body_bytes: a larger body is refused (``too_large``), not stored.
        trust_env: take proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``).
    """

    user_agent: str | None = None
    min_interval_s: float = 1.0
    per_host: bool = True
    host_intervals: dict[str, float] = field(default_factory=dict)
    timeout_s: float = 30.0
    max_retries: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0
    max_body_bytes: int = 100_000_000
    trust_env: bool = True

    def __post_init__(self) -> None:
        if not self.user_agent or not str(self.user_agent).strip():
            raise ConfigError(
                "collect.http.user_agent: required, a name and a contact address, e.g. 'Example Lab admin@example.org' "
                "(VLDOCIR_COLLECT_USER_AGENT, or VLDOCIR_SEC_USER_AGENT for SEC EDGAR)"
            )
        for name in ("min_interval_s", "timeout_s", "backoff_s", "backoff_max_s", "retry_after_max_s"):
            if float(getattr(self, name)) < 0:
                raise ConfigError(f"collect.http.{name} must be >= 0, got {getattr(self, name)!r}")
        if isinstance(self.max_retries, bool) or int(self.max_retries) < 0:
            raise ConfigError(f"collect.http.max_retries must be >= 0, got {self.max_retries!r}")
        self.host_intervals = {str(host): float(seconds) for host, seconds in (self.host_intervals or {}).items()}
        if any(seconds < 0 for seconds in self.host_intervals.values()):
            raise ConfigError(f"collect.http.host_intervals: intervals must be >= 0, got {self.host_intervals}")
        if int(self.max_body_bytes) < 1:
            raise ConfigError(f"collect.http.max_body_bytes must be >= 1, got {self.max_body_bytes!r}")


@dataclass
class Response:
    """One answer: ``url`` as requested (query included), ``final_url`` after redirects (what relative
    links resolve against), ``status`` (200, or 404/410 for a missing resource), ``stored``: replayed
    from the store without a request."""

    url: str
    final_url: str
    status: int
    content_type: str
    body: bytes
    stored: bool = False

    @property
    def missing(self) -> bool:
        return self.status in MISSING_STATUSES

    def text(self) -> str:
        """The body decoded: the charset of Content-Type, else UTF-8, else Windows-1252 (what
        browsers assume for old pages; it decodes any byte sequence)."""
        charset = content_charset(self.content_type)
        for encoding in filter(None, (charset, "utf-8")):
            try:
                return self.body.decode(encoding)
            except (LookupError, UnicodeDecodeError):
                continue
        return self.body.decode("cp1252", errors="replace")


def full_url(url: str, params: Mapping[str, Any] | None = None) -> str:
    """``url`` with ``params`` appended as its query (what the store keys and the server sees)."""
    return str(httpx.URL(url, params={k: str(v) for k, v in params.items()})) if params else str(httpx.URL(url))


class ResponseStore:
    """Bodies fetched so far, keyed by URL (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _paths(self, url: str) -> tuple[Path, Path]:
        key = hashlib.sha256(url.encode()).hexdigest()
        folder = self.root / key[:2]
        return folder / f"{key}.json", folder / f"{key}.body"

    def get(self, url: str) -> Response | None:
        meta_path, body_path = self._paths(url)
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("format") != STORE_FORMAT or meta.get("url") != url:
                return None
            return Response(
                url,
                meta["final_url"],
                int(meta["status"]),
                meta.get("content_type", ""),
                body_path.read_bytes(),
                stored=True,
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("damaged stored response for %s (%s); fetching it again", url, error)
            return None

    def put(self, response: Response) -> None:
        meta_path, body_path = self._paths(response.url)
        with atomic_path(body_path) as tmp:
            tmp.write_bytes(response.body)
        atomic_write_json(
            {
                "format": STORE_FORMAT,
                "url": response.url,
                "final_url": response.final_url,
                "status": response.status,
                "content_type": response.content_type,
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            meta_path,
        )

    def drop(self, url: str) -> None:
        for path in self._paths(url):
            path.unlink(missing_ok=True)


class PoliteClient:
    """GET requests under an :class:`HttpSpec`, answered from a :class:`ResponseStore` when possible.

    ``stats`` counts ``requests`` (HTTP requests sent, retries included), ``stored`` (answered from
    the store), ``retries`` and ``retry_<reason>`` per retried reason. One client is used by one
    thread at a time (collectors are sequential: politeness, not throughput, sets their pace).
    """

    def __init__(self, spec: HttpSpec, store: ResponseStore | None = None):
        self.spec = spec
        self.store = store
        self._http = httpx.Client(
            headers={"User-Agent": str(spec.user_agent)},
            timeout=float(spec.timeout_s),
            follow_redirects=True,
            trust_env=bool(spec.trust_env),
        )
        self._next_turn: dict[str, float] = {}
        self._lock = threading.Lock()
        self.stats: dict[str, int] = {"requests": 0, "stored": 0, "retries": 0}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PoliteClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------------------
    def get(self, url: str, params: Mapping[str, Any] | None = None, *, missing_ok: bool = False) -> Response:
        """The answer to ``GET url?params``: stored, or fetched (and stored). A 404/410 is returned
        (``response.missing``) when ``missing_ok``, else raised as :class:`FetchError`."""
        url = full_url(url, params)
        response = self.store.get(url) if self.store is not None else None
        if response is not None:
            self.stats["stored"] += 1
        else:
            response = self._fetch(url)
            if self.store is not None:
                self.store.put(response)
        if response.missing and not missing_ok:
            raise FetchError(url, f"http_{response.status}", f"HTTP {response.status} (not found)")
        return response

    def get_json(self, url: str, params: Mapping[str, Any] | None = None) -> Any:
        """The JSON body of ``GET url?params``; :class:`MalformedResponse` if it is not JSON."""
        response = self.get(url, params)
        try:
            return json.loads(response.text())
        except ValueError as error:
            self.forget(response.url)
            raise MalformedResponse(response.url, f"not JSON ({error})") from error

    def get_xml(self, url: str, params: Mapping[str, Any] | None = None):
        """The parsed XML body (an lxml element; no entities resolved, no network) of ``GET url?params``."""
        return self.parse_xml(self.get(url, params))

    def parse_xml(self, response: Response):
        from lxml import etree

        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
        try:
            root = etree.fromstring(response.body, parser)
        except etree.XMLSyntaxError as error:
            self.forget(response.url)
            raise MalformedResponse(response.url, f"not well-formed XML ({error})") from error
        if root is None:
            self.forget(response.url)
            raise MalformedResponse(response.url, "empty XML document")
        return root

    def forget(self, url: str) -> None:
        """Drop the stored answer to ``url`` (it was malformed: a rerun fetches it again)."""
        if self.store is not None:
            self.store.drop(url)

    def malformed(self, url: str, detail: str) -> MalformedResponse:
        """The error for an answer that parsed but is not what the API promises (a field missing);
        its stored copy is dropped first. ``url``: as :func:`full_url` builds it."""
        self.forget(url)
        return MalformedResponse(url, detail)

    def api_error(self, url: str, code: str, detail: str) -> CollectError:
        """The error for an API that answered with an error of its own (``reason`` ``api_<code>``);
        its stored copy is dropped first, so that a rerun asks again."""
        self.forget(url)
        return CollectError(f"{url}: API error {code}: {detail}", f"api_{code}")

    # -- politeness ---------------------------------------------------------------------------------
    def _wait_turn(self, url: str) -> None:
        host = httpx.URL(url).host if self.spec.per_host else "*"
        interval = self.spec.host_intervals.get(host, float(self.spec.min_interval_s))
        with self._lock:
            now = time.monotonic()
            turn = max(now, self._next_turn.get(host, now))
            self._next_turn[host] = turn + interval
        if turn > now:
            time.sleep(turn - now)

    def _fetch(self, url: str) -> Response:
        spec = self.spec
        policy = RetryPolicy(
            int(spec.max_retries), float(spec.backoff_s), float(spec.backoff_max_s), float(spec.retry_after_max_s)
        )

        def on_retry(error: Retryable, retry: int, delay: float) -> None:
            log.info("GET %s: %s; retry %d/%d in %.2f s", url, error.detail, retry, spec.max_retries, delay)
            self.stats["retries"] += 1
            self.stats[f"retry_{error.kind}"] = self.stats.get(f"retry_{error.kind}", 0) + 1

        try:
            return call_with_retries(lambda: self._attempt(url), policy, on_retry)
        except Retryable as error:
            raise FetchError(url, error.kind, f"{error.detail} (after {error.attempts} attempts)") from None

    def _attempt(self, url: str) -> Response:
        """One request, in its turn; raises :class:`~vldocir.retry.Retryable` for what a retry may fix."""
        self._wait_turn(url)
        self.stats["requests"] += 1
        try:
            with self._http.stream("GET", url) as answer:
                status = answer.status_code
                if status == 200 or status in MISSING_STATUSES:
                    body = self._read_body(url, answer)
                    return Response(url, str(answer.url), status, answer.headers.get("content-type", ""), body)
                detail = f"HTTP {status} {answer.reason_phrase}"
                if status != 429 and status < 500:
                    raise FetchError(url, f"http_{status}", detail)
                raise Retryable(f"http_{status}", detail, parse_retry_after(answer.headers.get("retry-after")))
        except httpx.TimeoutException:
            raise Retryable("timeout", f"no answer within {self.spec.timeout_s:g} s") from None
        except httpx.TransportError as error:  # connection refused or reset, DNS, protocol errors
            if (lookup := _name_error(error)) is not None and lookup.errno == socket.EAI_NONAME:
                raise FetchError(url, "connection", f"host {httpx.URL(url).host} does not resolve ({lookup})") from None
            raise Retryable("connection", f"{type(error).__name__}: {error}") from None

    def _read_body(self, url: str, answer: httpx.Response) -> bytes:
        limit = int(self.spec.max_body_bytes)
        declared = answer.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise FetchError(url, "too_large", f"body of {int(declared)} bytes exceeds max_body_bytes={limit}")
        chunks, size = [], 0
        for chunk in answer.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise FetchError(url, "too_large", f"body exceeds max_body_bytes={limit}")
            chunks.append(chunk)
        return b"".join(chunks)


def _name_error(error: BaseException) -> socket.gaierror | None:
    """The failed name lookup behind an HTTP library's connection error, if that is what it was."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, socket.gaierror):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def check_hosts(endpoints: Mapping[str, str], spec: HttpSpec) -> None:
    """Raise :class:`ConfigError` naming the first host of ``endpoints`` (``{parameter: url}``, a
    collector's :meth:`~vldocir.construction.collect.collector.Collector.endpoints`) that does not
    resolve; hosts behind a proxy are not looked up (module doc)."""
    proxies = urllib.request.getproxies_environment() if spec.trust_env else {}
    seen: set[str] = set()
    for name, url in endpoints.items():
        parts = httpx.URL(str(url).split("{", 1)[0])  # a template's placeholders are not part of the host
        host = parts.host
        if not host or host in seen:
            continue
        seen.add(host)
        if proxies.get(parts.scheme) and not urllib.request.proxy_bypass_environment(host, proxies):
            continue
        try:
            socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            raise ConfigError(
                f"collect.collector.{name}: host {host} does not resolve ({error}): check the URL, or the "
                "network (a proxy is taken from HTTPS_PROXY with collect.http.trust_env=true)"
            ) from None
        except UnicodeError as error:
            raise ConfigError(f"collect.collector.{name}: {host!r} is not a host name ({error})") from None


_CHARSET = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9._:-]+)", re.I)


def content_charset(content_type: str) -> str | None:
    """The charset named by a Content-Type header value, if any."""
    match = _CHARSET.search(content_type or "")
    return match.group(1) if match else None
