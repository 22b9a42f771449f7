"""The emulator under client faults (issue 27, item 6): a client that leaves is not a server
error; the auth scheme is case-insensitive; parameters of the other endpoint are refused."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from ..helpers_server import _serve, post

KEY = "sk-emulator-key"


def test_a_client_that_leaves_is_not_logged_as_an_internal_error(backend, name, caplog):
    body = json.dumps({"model": name, "prompt": "Tom has 3 apples. " * 40, "max_tokens": 60, "logprobs": 5,
                       "echo": True}).encode()
    with caplog.at_level(logging.DEBUG, logger="blackbox_mia.emulator.server"), _serve(backend, name) as url:
        host, port = url.split("//")[1].split("/")[0].split(":")
        for sent in (body[:20], body):  # gone mid-body, and gone while the answer is computed
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + sent)
                time.sleep(0.05)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        time.sleep(1.0)
        status, answer = post(url, "/completions", {"model": name, "prompt": "Tom", "max_tokens": 1})
        assert status == 200 and answer["choices"][0]["text"]  # still serving
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "internal error" in m]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("client disconnected during POST /v1/completions" in m for m in messages)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_auth_scheme_is_case_insensitive(backend, name, scheme, monkeypatch):
    import urllib.request

    with _serve(backend, name, api_key=KEY) as url:
        request = urllib.request.Request(url + "/completions", data=json.dumps(
            {"model": name, "prompt": "Tom", "max_tokens": 1}).encode(), headers={
            "Content-Type": "application/json", "Authorization": f"{scheme}  {KEY}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        assert post(url, "/completions", {"model": name, "prompt": "Tom", "max_tokens": 1}, key="wrong")[0] == 401
        assert post(url, "/completions", {"model": name, "prompt": "Tom", "max_tokens": 1})[0] == 401


@pytest.mark.parametrize(("path", "extra", "named"), [
    ("/completions", {"top_logprobs": 5}, "top_logprobs"),
    ("/completions", {"top_logprobs": 5, "max_completion_tokens": 1}, "top_logprobs, max_completion_tokens"),
    ("/chat/completions", {"echo": True}, "echo"),
])
def test_parameters_of_the_other_endpoint_are_refused_naming_them(raw_url, name, path, extra, named):
    body = {"model": name, "max_tokens": 1, "logprobs": 1}
    if path == "/completions":
        body["prompt"] = "Tom"
    else:
        body.update(messages=[{"role": "user", "content": "Tom"}], logprobs=True)
    status, error = post(raw_url, path, {**body, **extra})
    assert status == 400 and error["error"]["code"] == "unsupported_parameter"
    assert error["error"]["message"] == f"Unsupported parameter(s) on /v1{path}: {named}."
    assert error["error"]["param"] == named.split(",")[0]
    assert post(raw_url, path, body)[0] == 200  # without them: answered


def test_the_project_client_never_sends_chat_parameters_to_completions():
    from blackbox_mia.backends.api.http.dialect import Completions
    from blackbox_mia.emulator.params import FOREIGN_PARAMETERS

    body = Completions().payload([1, 2], max_tokens=1, temperature=0.0, top_n=5, bias={3: 100}, echo=True,
                                 extra={"seed": 1})
    assert not set(body) & set(FOREIGN_PARAMETERS["completions"]) and body["logprobs"] == 5


def test_a_malformed_request_is_one_log_line_and_the_server_carries_on(backend, name, caplog):
    with caplog.at_level(logging.DEBUG), _serve(backend, name) as url:
        host, port = url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n")
            sock.settimeout(10)
            answer = sock.recv(4096)
        assert answer.split(b" ")[1] == b"400", answer
        status, body = post(url, "/completions", {"model": name, "prompt": "Tom", "max_tokens": 1})
        assert status == 200 and body["choices"][0]["text"]  # still serving
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], [r.getMessage() for r in caplog.records]
    lines = [r.getMessage() for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == 1 and "answered 400" in lines[0] and "Content-Length" in lines[0], lines
    assert "\n" not in lines[0]


def test_an_over_long_prompt_is_refused_before_it_is_tokenized(backend, name, monkeypatch):
    encoded: list[int] = []
    encode = backend.encode
    monkeypatch.setattr(backend, "encode", lambda text: encoded.append(len(text)) or encode(text))
    with _serve(backend, name) as url:
        status, body = post(url, "/completions", {"model": name, "prompt": "Tom has 3 apples. " * 50_000,
                                                  "max_tokens": 1})  # 900,000 characters
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
        assert "maximum context length is 64 tokens" in body["error"]["message"]
        assert encoded == []  # not tokenized at all
        status, body = post(url, "/completions", {"model": name, "prompt": "apples " * 40, "max_tokens": 1})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded"  # too long, found by its tokens
    from blackbox_mia.emulator.names import longest_piece_bytes
    from blackbox_mia.emulator.server import NORMALIZER_SLACK

    bound = backend.context * longest_piece_bytes(backend.tokenizer) * NORMALIZER_SLACK  # characters tokenized at most
    assert encoded == [280] and 280 <= bound < 900_000
