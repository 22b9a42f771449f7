"""A base URL that is not an OpenAI-compatible API (a static file server, a web page answering
200 HTML to everything) gets one line saying so, before the tokenizer is asked for and without
repeating the page; the library's first use says the same."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.cli import app
from blackbox_mia.types import BlackboxMIAError

PAGE = b"<!DOCTYPE html><html><head><title>Welcome</title></head><body><h1>It works</h1></body></html>"
HINT = "is the URL the API's, ending in /v1?"


class Page(http.server.BaseHTTPRequestHandler):
    """Answers every GET and POST with 200 and :data:`PAGE` (a site, a captive portal)."""

    def _page(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    do_GET = do_POST = _page

    def log_message(self, *args) -> None:
        pass


class Files(http.server.SimpleHTTPRequestHandler):
    """``python -m http.server``: 404 HTML for /v1/models, 501 HTML for POST."""

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(handler, directory) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(directory))
                                             if handler is Files else handler(*a))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("handler", [Files, Page])
def test_a_url_that_is_not_the_api_is_one_line_before_the_tokenizer(handler, tmp_path):
    with serving(handler, tmp_path) as url:
        result = CliRunner().invoke(app, ["probe", "Tom has 3 apples.", "--base-url", url, "--model", "some-model",
                                          "--cache-dir", str(tmp_path / "cache")],
                                    env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "does not look like an OpenAI-compatible API" in lines[0] and lines[0].count(HINT) == 1, lines[0]
    assert "tokenizer" not in lines[0] and "<html" not in lines[0].lower()


@pytest.mark.parametrize("handler", [Files, Page])
def test_the_library_says_the_same_on_first_use(handler, tiny_model_dir, tmp_path):
    with serving(handler, tmp_path) as url:
        config = ApiConfig(base_url=url, model="some-model", api_key="none", max_retries=1, backoff_base_s=0.01)
        with ApiBackend(config, str(tiny_model_dir), cache_dir=tmp_path / "cache") as backend:
            with pytest.raises(BlackboxMIAError) as err:
                backend.logprobs(["Tom has 3 apples."])
    message = str(err.value)
    assert "does not look like an OpenAI-compatible API" in message and message.count(HINT) == 1, message
    assert "<html" not in message.lower() and not list((tmp_path / "cache").glob("capabilities/*.json"))
