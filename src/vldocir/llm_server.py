"""A small OpenAI-compatible chat-completions server (``POST /v1/chat/completions``, ``GET
/v1/models``): the tests' stand-in for a VLM server, and what replays recorded answers offline
(:func:`replay_server`, used to build the mini benchmark through query generation without a model;
from the command line, ``python -m vldocir.llm_server --recording <file.json>``, see :func:`main`).

It answers with scripted replies: first those given as a list, in the order requests arrive, then
``responder(request_body)`` (default: ``Reply()``), so that concurrent tests can answer by content.
It records every request (body and headers), the most requests it served at once, and the replies
whose client hung up before the whole body was sent (``cut_off``: a client that stops reading an
oversized answer). A reply's body is written in 64 KiB pieces, with a ``Content-Length`` or, with
``chunked``, in HTTP chunks (a body whose length the client learns only by reading it). It runs in
a daemon thread on 127.0.0.1 (an ephemeral port, unless ``host`` and ``port`` say otherwise) and is
bounded in time: a reply's delay is capped at ``max_delay_s`` and every socket times out.
``GET /v1/models`` lists ``models``; a server given none answers it with HTTP 404 (no listing).
The client's server check (:data:`vldocir.llm.SERVER_PROBE`) is answered ``OK`` without touching
the script, the responder or ``requests`` (counted in ``probes``), as a live server would answer
it; ``answer_probe=False`` hands it to them like any request.

    with ChatServer([Reply(status=500), Reply('["a", "b"]')]) as server:
        client = ChatClient(model="m", base_url=server.url, ...)

:func:`replay_server` answers by request content instead: each request's :func:`request_digest`
(its messages with every inline image replaced by the SHA-256 of its bytes, as the client's cache
key does) looks up a recorded answer; a request with no recording gets HTTP 404.

The command line serves a recording of that kind, a JSON object
``{"generator": "<model>", "answers": {"<request digest>": "<answer>", ...}}`` (``generator``: the
one model it lists and answers for). It runs until Ctrl-C::

    python -m vldocir.llm_server --recording answers.json [--host 127.0.0.1] [--port 8000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger(__name__)


@dataclass
class Reply:
    """One scripted answer: ``content`` in a 200 chat completion (ending with ``finish_reason``), or
    an error ``status`` (its body's message: ``error``), after ``delay_s``; ``chunked``: sent without
    a ``Content-Length``."""

    content: str | None = "[]"
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str = "stop"
    chunked: bool = False
    error: str | None = None


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]
    query: dict[str, str] = field(default_factory=dict)  # the URL's query parameters (a client's extra_query)

    def text(self) -> str:
        """The text parts of the request's messages, joined (what a test matches replies on)."""
        out = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
            out += [p.get("text") or "" for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(out)


class ChatServer:
    def __init__(
        self,
        replies: Iterable[Reply] = (),
        responder: Callable[[Recorded], Reply] | None = None,
        max_delay_s: float = 1.0,
        models: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        keep_requests: bool = True,
        answer_probe: bool = True,
    ):
        self.script: deque[Reply] = deque(replies)
        self.responder = responder or (lambda request: Reply())
        self.max_delay_s = max_delay_s
        self.models = list(models)
        self.host, self.port = host, int(port)
        self.keep_requests = keep_requests  # False: a long-running server does not hold every request body
        self.answer_probe = answer_probe
        self.served = 0
        self.probes = 0
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.cut_off = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> ChatServer:
        server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.port = server.server_address[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}/v1"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------------
    def _next_reply(self, request: Recorded) -> Reply:
        with self._lock:
            self.served += 1
            if self.keep_requests:
                self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.script:
                return self.script.popleft()
        return self.responder(request)

    def _done(self, cut_off: bool = False) -> None:
        with self._lock:
            self.in_flight -= 1
            self.cut_off += cut_off
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Wait until no reply is being sent (what a test checks ``cut_off`` after); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10  # a stuck client cannot hold a handler thread for longer

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _send(
            self, status: int, payload: dict, headers: dict[str, str] | None = None, chunked: bool = False
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            for start in range(0, len(data), 1 << 16):
                piece = data[start : start + (1 << 16)]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")

        def do_GET(self) -> None:
            if urlsplit(self.path).path.rstrip("/") != "/v1/models" or not server.models:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            models = [{"id": m, "object": "model", "created": 0, "owned_by": "vldocir"} for m in server.models]
            self._send(200, {"object": "list", "data": models})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            url = urlsplit(self.path)
            if url.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {url.path}", "type": "not_found"}})
                return
            request = Recorded(
                json.loads(raw or b"{}"), {k.lower(): v for k, v in self.headers.items()}, dict(parse_qsl(url.query))
            )
            if server.answer_probe and _is_probe(request.body):
                with server._lock:
                    server.probes += 1
                self._send(200, _completion(request.body, Reply("OK", prompt_tokens=0, completion_tokens=1), 0))
                return
            reply = server._next_reply(request)
            cut_off = False
            try:
                time.sleep(min(reply.delay_s, server.max_delay_s))
                if reply.status != 200:
                    self._send(
                        reply.status,
                        {
                            "error": {
                                "message": reply.error or f"scripted status {reply.status}",
                                "type": "server_error",
                                "code": reply.status,
                            }
                        },
                        reply.headers,
                    )
                    return
                self._send(200, _completion(request.body, reply, server.served), reply.headers, reply.chunked)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                cut_off = True  # the client gave up (its timeout, or an answer too long to read) mid-reply
            finally:
                server._done(cut_off)

    return Handler


def _completion(body: Mapping[str, Any], reply: Reply, number: int) -> dict[str, Any]:
    """The chat-completion JSON of a 200 ``reply`` to the request ``body``."""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "finish_reason": reply.finish_reason,
                "message": {"role": "assistant", "content": reply.content},
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def _is_probe(body: Mapping[str, Any]) -> bool:
    from vldocir.llm import SERVER_PROBE

    return body.get("messages") == SERVER_PROBE


def request_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of a request's messages, inline images replaced by the SHA-256 of their bytes: the
    same on the client side (the messages built) and on the server side (the JSON received)."""
    from vldocir.llm import _normalized

    text = json.dumps(_normalized(messages), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def replay_server(answers: Mapping[str, str], models: Sequence[str] = (), **options: Any) -> ChatServer:
    """A (not yet started) server answering each request whose :func:`request_digest` is a key of
    ``answers`` with that answer, and any other request with HTTP 404 (no recording: the client
    does not retry it and reports the request as failed). ``models``: what it lists on ``GET /v1/models``
    and the only models it answers for (a request for another gets HTTP 404); none: any model.
    ``options``: the rest of :class:`ChatServer`'s arguments (host, port, ...)."""

    def respond(request: Recorded) -> Reply:
        model = request.body.get("model")
        if models and model not in models:
            return Reply(
                status=404, error=f"model {model!r} is not served here; recorded answers are by {list(models)}"
            )
        digest = request_digest(request.body.get("messages", []))
        content = answers.get(digest)
        if content is None:
            log.debug("no recorded answer to request %s: HTTP 404", digest)
            return Reply(status=404, error=f"no recorded answer to this request (digest {digest})")
        log.debug("answered request %s", digest)
        return Reply(content, prompt_tokens=0, completion_tokens=0)

    return ChatServer(responder=respond, models=models, **options)


def read_recording(path: str | Path) -> tuple[str, dict[str, str]]:
    """``(generator, answers)`` of a recording file for :func:`replay_server` (module doc); raises
    :class:`~vldocir.errors.ConfigError` with one line naming what is wrong."""
    from vldocir.errors import ConfigError

    path = Path(path)
    try:
        recording = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"--recording: cannot read {path}: {' '.join(str(error).split())}") from error
    if isinstance(recording, Mapping) and "answers" not in recording and "describe" in recording:
        raise ConfigError(
            f"--recording: {path} is a query-stage recording (describe/generate/clean keyed by page and "
            "configuration, not by request): the build replays it itself (queries.recorded=<file>)"
        )
    answers = recording.get("answers") if isinstance(recording, Mapping) else None
    generator = recording.get("generator") if isinstance(recording, Mapping) else None
    if not isinstance(generator, str) or not generator or not isinstance(answers, Mapping):
        raise ConfigError(
            f'--recording: {path} must be a JSON object {{"generator": "<model>", "answers": '
            '{"<request digest>": "<answer>", ...}}'
        )
    bad = [k for k, v in answers.items() if not isinstance(v, str) or not re.fullmatch("[0-9a-f]{64}", k)]
    if bad:
        raise ConfigError(
            f"--recording: {path}: {len(bad)} answer(s) are not '<64 hex digits of request_digest>': '<text>', "
            f"e.g. {bad[0][:80]!r}"
        )
    return generator, dict(answers)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vldocir.llm_server --recording <file.json> [--host H] [--port P]``: serve the
    recorded answers until Ctrl-C (or SIGTERM); 0 then, 2 with one stderr line for a bad
    recording or an address that cannot be bound."""
    from vldocir.errors import VldocirError

    parser = argparse.ArgumentParser(
        prog="python -m vldocir.llm_server",
        description="Serve recorded chat answers over the OpenAI chat-completions protocol (/v1).",
    )
    parser.add_argument("--recording", required=True, help='JSON: {"generator": model, "answers": {digest: answer}}')
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    parser.add_argument("--verbose", action="store_true", help="log every request's digest and outcome")
    args = parser.parse_args(argv)
    try:
        generator, answers = read_recording(args.recording)
        server = replay_server(answers, models=[generator], host=args.host, port=args.port, keep_requests=False)
        server.start()
    except (VldocirError, OSError, OverflowError) as error:  # OverflowError: a port past 65535
        print(f"llm_server error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    if args.verbose:
        logging.basicConfig(format="%(asctime)s %(message)s")
        log.setLevel(logging.DEBUG)
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop is a Ctrl-C
    print(f"serving {len(answers)} recorded answers by {generator!r} at {server.url} (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print(f"stopped after {server.served} request(s)", flush=True)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
