"""The replay server's command line (``python -m vldocir.llm_server --recording <file.json>``): a real
``openai`` client gets the recorded answers over HTTP, a request without a recording or for another
model gets 404, the client's server check passes, Ctrl-C stops it with status 0; a bad recording or
an address in use is one stderr line and status 2."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import sys
import threading

import pytest

from helpers import REPO_ROOT
from vldocir.llm import ChatClient, image_part
from vldocir.llm_server import main, read_recording, request_digest

PNG = b"\x89PNG\r\n\x1a\n stand-in image bytes"  # only hashed, never decoded


def question(text: str, image: bytes | None = None) -> list[dict]:
    content = [{"type": "text", "text": text}] + ([image_part(image)] if image else [])
    return [{"role": "user", "content": content}]


def write_recording(path, answers: dict[str, str], generator: str = "stand-in-vlm"):
    path.write_text(json.dumps({"generator": generator, "answers": answers}))
    return path


def test_a_recording_is_read_by_request_digest(tmp_path):
    messages = question("What is shown?", PNG)
    path = write_recording(tmp_path / "rec.json", {request_digest(messages): "A red square."})
    generator, answers = read_recording(path)
    assert generator == "stand-in-vlm" and answers == {request_digest(messages): "A red square."}
    # the digest sees the image's bytes, not their base64: the form an LLM cache entry stores digests the same
    stored_image = {"type": "image_url", "image_url": {"url": f"sha256:{hashlib.sha256(PNG).hexdigest()}"}}
    stored = [{"role": "user", "content": [messages[0]["content"][0], stored_image]}]
    assert request_digest(stored) == request_digest(messages)
    assert request_digest(question("What is shown?", PNG + b"!")) != request_digest(messages)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "cannot read"),
        ('{"generator": "recorded-by-hand", "describe": {}, "generate": {}}', "is a query-stage recording"),
        ('{"answers": {}}', 'must be a JSON object {"generator": "<model>"'),
        ('{"generator": "g", "answers": {"abc": "x"}}', "1 answer(s) are not '<64 hex digits"),
        ('{"generator": "g", "answers": {"' + "a" * 64 + '": 3}}', "1 answer(s) are not"),
    ],
)
def test_a_bad_recording_is_one_line_and_status_2(tmp_path, capsys, content, message):
    path = tmp_path / "rec.json"
    if content is not None:
        path.write_text(content)
    assert main(["--recording", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm_server error: --recording:") and message in err and err.count("\n") == 1


def test_an_address_in_use_is_one_line_and_status_2(tmp_path, capsys):
    path = write_recording(tmp_path / "rec.json", {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["--recording", str(path), "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm_server error:") and "in use" in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_command_line_serves_a_real_openai_client_and_stops_on_ctrl_c(tmp_path):
    import openai

    known = question("What is shown?", PNG)
    path = write_recording(tmp_path / "rec.json", {request_digest(known): "A red square."})
    server = subprocess.Popen(
        [sys.executable, "-m", "vldocir.llm_server", "--recording", str(path), "--port", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(180, server.kill)  # a server that never answers cannot hang the suite
    watchdog.start()
    try:
        banner = server.stdout.readline()  # the server prints its address once it listens
        assert banner.startswith("serving 1 recorded answers by 'stand-in-vlm' at http://127.0.0.1:"), banner
        url = banner.split(" at ")[1].split()[0]
        client = openai.OpenAI(base_url=url, api_key="EMPTY", timeout=60, max_retries=0)  # generous: no answer is late
        assert [m.id for m in client.models.list()] == ["stand-in-vlm"]
        answer = client.chat.completions.create(model="stand-in-vlm", messages=known, max_tokens=16)
        assert answer.choices[0].message.content == "A red square." and answer.choices[0].finish_reason == "stop"
        with pytest.raises(openai.NotFoundError, match="no recorded answer to this request"):
            client.chat.completions.create(model="stand-in-vlm", messages=question("Something else?"))
        with pytest.raises(openai.NotFoundError, match="'gpt-4o' is not served here"):
            client.chat.completions.create(model="gpt-4o", messages=known)
        ChatClient(model="stand-in-vlm", base_url=url, timeout_s=60).check_server()  # what a build asks first
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=90)  # generous: a loaded CI machine (load 20) is slow, not wrong
    finally:
        watchdog.cancel()
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    assert out.strip() == "stopped after 3 request(s)" and "Traceback" not in err
