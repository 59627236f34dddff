"""A small OpenAI-compatible chat-completions server on 127.0.0.1 (``POST /v1/chat/completions``):
the tests' stand-in for a VLM server, and what replays recorded answers offline (:func:`replay_server`,
used to build the mini benchmark through query generation without a model).

It answers with scripted replies: first those given as a list, in the order requests arrive, then
``responder(request_body)`` (default: ``Reply()``), so that concurrent tests can answer by content.
It records every request (body and headers), the most requests it served at once, and the replies
whose client hung up before the whole body was sent (``cut_off``: a client that stops reading an
oversized answer). A reply's body is written in 64 KiB pieces, with a ``Content-Length`` or, with
``chunked``, in HTTP chunks (a body whose length the client learns only by reading it). It runs in
a daemon thread on 127.0.0.1 (an ephemeral port) and is bounded in time: a reply's delay is capped
at ``max_delay_s`` and every socket times out.

    with ChatServer([Reply(status=500), Reply('["a", "b"]')]) as server:
        client = ChatClient(model="m", base_url=server.url, ...)

:func:`replay_server` answers by request content instead: each request's :func:`request_digest`
(its messages with every inline image replaced by the SHA-256 of its bytes, as the client's cache
key does) looks up a recorded answer; a request with no recording gets HTTP 404.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping, Sequence


@dataclass
class Reply:
    """One scripted answer: ``content`` in a 200 chat completion (ending with ``finish_reason``), or
    an error ``status``, after ``delay_s``; ``chunked``: sent without a ``Content-Length``."""

    content: str | None = "[]"
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str = "stop"
    chunked: bool = False


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]

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
    ):
        self.script: deque[Reply] = deque(replies)
        self.responder = responder or (lambda request: Reply())
        self.max_delay_s = max_delay_s
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.cut_off = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "ChatServer":
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.port = server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------------
    def _next_reply(self, request: Recorded) -> Reply:
        with self._lock:
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

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            request = Recorded(json.loads(raw or b"{}"), {k.lower(): v for k, v in self.headers.items()})
            reply = server._next_reply(request)
            cut_off = False
            try:
                time.sleep(min(reply.delay_s, server.max_delay_s))
                if reply.status != 200:
                    self._send(
                        reply.status,
                        {
                            "error": {
                                "message": f"scripted status {reply.status}",
                                "type": "server_error",
                                "code": reply.status,
                            }
                        },
                        reply.headers,
                    )
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": request.body.get("model", "test-model"),
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
                    },
                    reply.headers,
                    reply.chunked,
                )
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                cut_off = True  # the client gave up (its timeout, or an answer too long to read) mid-reply
            finally:
                server._done(cut_off)

    return Handler


def request_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of a request's messages, inline images replaced by the SHA-256 of their bytes: the
    same on the client side (the messages built) and on the server side (the JSON received)."""
    from vldocir.llm import _normalized

    text = json.dumps(_normalized(messages), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def replay_server(answers: Mapping[str, str]) -> ChatServer:
    """A (not yet started) server answering each request whose :func:`request_digest` is a key of
    ``answers`` with that answer, and any other request with HTTP 404 (no recording: the client
    does not retry it and reports the request as failed)."""

    def respond(request: Recorded) -> Reply:
        content = answers.get(request_digest(request.body.get("messages", [])))
        return Reply(status=404) if content is None else Reply(content, prompt_tokens=0, completion_tokens=0)

    return ChatServer(responder=respond)
