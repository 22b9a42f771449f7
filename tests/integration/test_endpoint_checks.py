"""The endpoint as it really is: the model name checked against ``/v1/models``, a wrong base URL
said first, and the largest top-n the server honours found by the probe and used by the tracker.

``bbmia serve`` refuses a wrong model name and a top-n above its cap (as OpenAI does);
:class:`Lenient` in front of it answers as llama-cpp-python does: any model name gets the one
model, a top-n above the cap gets the cap's worth of entries, and ``/v1/models`` lists what it is
told to (or is missing)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from typer.testing import CliRunner

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.cli import app
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.emulator.background import run_in_background
from blackbox_mia.types import BlackboxMIAError

TEXT = "Tom has 3 red apples and eats one of them."


class Lenient:
    """A llama-cpp-python-like front of an upstream server: POSTs are forwarded with the
    upstream's model name whatever the client sent, ``logprobs`` above ``clamp`` lowered to it;
    ``GET /v1/models`` lists ``models`` (``None``: 404). Counts POSTs."""

    def __init__(self, upstream: str, served: str, models: list[str] | None, clamp: int | None = None):
        self.upstream, self.served, self.models, self.clamp = upstream, served, models, clamp
        self.posts = 0
        self._runner = self._session = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/models", self._list)
        app.router.add_post("/v1/{tail:.*}", self._forward)
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}/v1"

    async def stop(self) -> None:
        await self._session.close()
        await self._runner.cleanup()

    async def _list(self, request: web.Request) -> web.Response:
        if self.models is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def _forward(self, request: web.Request) -> web.Response:
        self.posts += 1
        body = await request.json()
        body["model"] = self.served
        if self.clamp is not None and body.get("logprobs") is not None:
            body["logprobs"] = min(body["logprobs"], self.clamp)
        async with self._session.post(self.upstream + "/" + request.match_info["tail"], json=body) as answer:
            return web.Response(body=await answer.read(), status=answer.status, content_type="application/json")


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    return LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu"))


@pytest.fixture(scope="module")
def uncapped(local, tiny_model_dir):
    """The emulator listing any top-n (up to its whole vocabulary of 300 tokens)."""
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False, max_logprobs_completions=10**6),
                             backend=local) as url:
        yield url


def lenient(upstream, tiny_model_dir, models, clamp=None):
    return run_in_background(Lenient(upstream, str(tiny_model_dir), models, clamp), "lenient")


def bbmia(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"},
                              catch_exceptions=False)


def one_line(result) -> str:
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("Loading weights")]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def backend(url, model, model_dir, cache, **tracker):
    api = ApiConfig(base_url=url, model=model, api_key="none", max_retries=0)
    return ApiBackend(api, str(model_dir), TrackerConfig(**tracker), cache_dir=cache)


def asked_top_n(monkeypatch) -> list[int | None]:
    """The top-n of every request the clients send from now on (the real code runs)."""
    asked: list[int | None] = []
    real = ApiClient.request

    async def recorded(self, dialect, prompt, **options):
        asked.append(options.get("top_n"))
        return await real(self, dialect, prompt, **options)

    monkeypatch.setattr(ApiClient, "request", recorded)
    return asked


# -- the model name ------------------------------------------------------------------------------


def test_a_model_the_server_does_not_list_is_a_one_line_error(uncapped, tiny_model_dir, tmp_path):
    with lenient(uncapped, tiny_model_dir, ["llama-3-8b.gguf", "other"]) as url:
        result = bbmia("probe", TEXT, "--base-url", url, "--model", "gpt-4o-mini", "--tokenizer", tiny_model_dir,
                       "--cache-dir", tmp_path)
        line = one_line(result)
        assert "unknown model 'gpt-4o-mini'" in line and "'llama-3-8b.gguf', 'other'" in line, line
        for command in (["score", "gsm8k", "--limit", "1"], ["memorize", "gsm8k", "--limit", "1", "--quiet"]):
            line = one_line(bbmia(*command, "--base-url", url, "--model", "nope", "--tokenizer", tiny_model_dir,
                                  "--cache-dir", tmp_path, "--out", tmp_path / command[0]))
            assert "unknown model 'nope'" in line, line
    assert not list((tmp_path / "capabilities").glob("*.json"))  # nothing recorded under the wrong name


@pytest.mark.parametrize("models", [None, [], ["SERVED"], ["models/SERVED"]],
                         ids=["no-models-route", "empty-list", "listed", "listed-with-prefix"])
def test_a_listed_model_or_a_server_without_a_list_proceeds(uncapped, tiny_model_dir, tmp_path, models):
    model = "my-model"
    listed = None if models is None else [m.replace("SERVED", model) for m in models]
    with lenient(uncapped, tiny_model_dir, listed) as url:
        with backend(url, model, tiny_model_dir, tmp_path) as b:
            assert b.probe().top_n > 0
            assert len(b.logprobs([TEXT])[0].logprobs) > 0


async def test_the_model_list_is_asked_once_per_client(uncapped, tiny_model_dir):
    with lenient(uncapped, tiny_model_dir, [str(tiny_model_dir)]) as url:
        async with ApiClient(ApiConfig(base_url=url, model=str(tiny_model_dir), api_key="none")) as client:
            calls = 0
            real = client._transport.get

            async def counted(path):
                nonlocal calls
                calls += 1
                return await real(path)

            client._transport.get = counted
            await asyncio.gather(*(client.complete([1, 2 + i], logprobs=1) for i in range(8)))
            assert calls == 1 and await client.served_models() == [str(tiny_model_dir)] and calls == 1
        async with ApiClient(ApiConfig(base_url=url, model="wrong", api_key="none")) as client:
            for _ in range(2):  # every request fails the same way, none is sent
                with pytest.raises(BlackboxMIAError, match="unknown model 'wrong'"):
                    await client.complete([1, 2], logprobs=1)


def test_a_wrong_base_path_is_said_first(local, tiny_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(tiny_model_dir)), backend=local) as url:
        wrong = url[: -len("/v1")] + "/v2"
        result = bbmia("probe", TEXT, "--base-url", wrong, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                       "--cache-dir", tmp_path)
    line = one_line(result)
    assert line.startswith(f"error: 404 at {wrong}/completions: wrong base URL?"), line
    assert "log-probs" not in line
    assert not list((tmp_path / "capabilities").glob("*.json"))  # a 404 is no evidence: nothing recorded


# -- the largest top-n -----------------------------------------------------------------------------


def test_a_server_refusing_above_50_gets_top_n_50_recorded_and_used(local, tiny_model_dir, tmp_path, monkeypatch):
    asked = asked_top_n(monkeypatch)
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False, max_logprobs_completions=50),
                             backend=local) as url:
        with backend(url, str(tiny_model_dir), tiny_model_dir, tmp_path, strategy="topn") as b:
            caps = b.probe()
            evidence = caps.evidence["topn"]
            assert caps.top_n == 50 and caps.to_json()["top_n"] == 50
            assert evidence["asked"] == [b.codec.vocab_size, 50] and evidence["requests"] == 2  # the refusal named 50
            assert set(asked[asked.index(50):]) <= {50, 1, 0, None}  # the probe's own checks asked 50 (1: token ids)
            del asked[:]
            found = b.logprobs([TEXT])[0]
    assert set(asked) == {50}  # every tracker request
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False), backend=local) as url:  # the default cap: 5
        with backend(url, str(tiny_model_dir), tiny_model_dir, tmp_path / "capped", strategy="topn") as b:
            assert b.probe().top_n == 5 and b.probe().evidence["topn"]["requests"] == 2
            few = b.logprobs([TEXT])[0]
    # more of the text's targets are read exactly from the longer list
    assert found.strategies.count("topn") > few.strategies.count("topn")


def test_a_server_listing_its_whole_vocabulary(uncapped, tiny_model_dir, tmp_path, monkeypatch):
    asked = asked_top_n(monkeypatch)
    with backend(uncapped, str(tiny_model_dir), tiny_model_dir, tmp_path, max_top_n=40) as b:
        caps = b.probe()
        vocab = b.codec.vocab_size
        assert caps.top_n == vocab and caps.evidence["topn"] == {"requests": 1, "asked": [vocab], "top_n": vocab}
        after = asked[asked.index(vocab) + 1 :]
        assert asked.count(vocab) == 1 and max(n for n in after if n is not None) == 40  # one huge answer only
        del asked[:]
        b.logprobs([TEXT])
    assert asked and max(n for n in asked if n is not None) == 40  # TrackerConfig.max_top_n caps every request
    assert TrackerConfig().max_top_n == 100


def test_a_server_clamping_silently_is_read_from_the_list_length(uncapped, tiny_model_dir, tmp_path):
    with lenient(uncapped, tiny_model_dir, None, clamp=37) as url:
        with backend(url, "any", tiny_model_dir, tmp_path) as b:
            caps = b.probe()
    assert caps.top_n == 37 and caps.evidence["topn"]["requests"] == 1
    saved = json.loads(next((tmp_path / "capabilities").glob("*.json")).read_text())
    assert saved["top_n"] == 37
