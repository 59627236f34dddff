"""A real HTTP server on 127.0.0.1 serving recorded API responses (tests/fixtures/collect/<source>/),
scriptable to fail: the collectors' tests point every endpoint of a source at it.

``routes.json`` in a fixture folder lists what the server answers::

    [{"name": "parse Solar cell", "path": "/w/api.php", "query": {"action": "parse", "page": "Solar cell"},
      "file": "parse_solar_cell.json", "type": "application/json"}, ...]

A request matches a route when its path is the route's and its query holds every pair the route
names (more pairs allowed); the route naming the most pairs wins. ``"status": 404`` answers 404 (the
file, if any, as its body). In text bodies ``@BASE@`` becomes the server's ``http://127.0.0.1:<port>``
(absolute links to other "hosts" of the API, e.g. Wikipedia's upload server). A request no route
matches gets 404 and is listed in ``unmatched``.

:meth:`RecordedServer.fail` queues faults for a route, served before its recorded answer, one per
request: :class:`Fault` ``(429, retry_after="0")``, ``(500)``, or ``malformed=True`` (the recorded body
cut in half, status 200). Every request is logged (:attr:`log`: path, query, status, headers, time).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "collect"


@dataclass
class Fault:
    status: int = 500
    retry_after: str | None = None
    malformed: bool = False


@dataclass
class Hit:
    route: str | None
    path: str
    query: dict[str, str]
    status: int
    headers: dict[str, str]
    time: float
    malformed: bool = False


@dataclass
class Route:
    name: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    file: str | None = None
    type: str = "text/html; charset=utf-8"
    status: int = 200


class RecordedServer:
    def __init__(self, source: str):
        self.folder = FIXTURES / source
        self.routes = [Route(**r) for r in json.loads((self.folder / "routes.json").read_text())]
        names = [r.name for r in self.routes]
        assert len(names) == len(set(names)), "route names must be unique"
        self.faults: dict[str, deque[Fault]] = {}
        self.log: list[Hit] = []
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> RecordedServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RecordedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- scripting and inspection -------------------------------------------------------------------
    def fail(self, route: str, *faults: Fault) -> None:
        assert any(r.name == route for r in self.routes), f"no route {route!r}"
        self.faults.setdefault(route, deque()).extend(faults)

    def hits(self, route: str | None = None, status: int | None = None) -> list[Hit]:
        with self._lock:
            return [
                h for h in self.log if (route is None or h.route == route) and (status is None or h.status == status)
            ]

    def served(self) -> set[str]:
        """Routes answered with their recording (200 or the recorded 404, not cut short) at least once."""
        return {h.route for h in self.hits() if h.route and h.status in (200, 404) and not h.malformed}

    @property
    def unmatched(self) -> list[str]:
        return [h.path + "?" + "&".join(f"{k}={v}" for k, v in h.query.items()) for h in self.hits() if h.route is None]

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    # -- answering ----------------------------------------------------------------------------------
    def match(self, path: str, query: dict[str, str]) -> Route | None:
        candidates = [
            r for r in self.routes if r.path == path and all(query.get(k) == str(v) for k, v in r.query.items())
        ]
        return max(candidates, key=lambda r: len(r.query), default=None)

    def answer(self, path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        route = self.match(path, query)
        with self._lock:
            fault = self.faults[route.name].popleft() if route and self.faults.get(route.name) else None
        if route is None:
            status, extra, body = 404, {"Content-Type": "text/plain"}, b"no recorded response"
        elif fault is not None and not fault.malformed:
            extra = {"Content-Type": "text/plain"}
            if fault.retry_after is not None:
                extra["Retry-After"] = fault.retry_after
            status, body = fault.status, f"scripted status {fault.status}".encode()
        else:
            body = (self.folder / route.file).read_bytes() if route.file else b""
            if route.type.startswith(("text/", "application/json", "application/xml", "application/atom+xml")):
                body = body.replace(b"@BASE@", self.base.encode())
            if fault is not None:
                body = body[: len(body) // 2]
            status, extra = route.status, {"Content-Type": route.type}
        with self._lock:
            self.log.append(
                Hit(
                    route.name if route else None,
                    path,
                    query,
                    status,
                    headers,
                    time.monotonic(),
                    malformed=bool(fault and fault.malformed),
                )
            )
        return status, extra, body


def _handler(server: RecordedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            status, headers, body = server.answer(parts.path, query, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
