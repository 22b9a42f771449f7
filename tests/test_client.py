"""ApiClient against a small in-test OpenAI-shaped server: normalisation, cache, retries, limits."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from email.utils import formatdate
from types import SimpleNamespace

import diskcache
import pytest
from aiohttp import web

import blackbox_mia.backends.api.client as client_module
from blackbox_mia.backends.api.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.dialect import check_logit_bias
from blackbox_mia.backends.api.faults import (
    FAULTS,
    MAX_RETRY_AFTER_S,
    ApiError,
    retry_after_s,
)
from blackbox_mia.backends.api.usage import RateLimiter
from blackbox_mia.cache import ResponseCache, request_key
from blackbox_mia.types import BlackboxMIAError

KEY = "sk-test-SECRET-123"
MODEL = "fake-model"


class FakeApi:
    """OpenAI-shaped answers for /v1/completions and /v1/chat/completions, with fault injection.

    ``faults`` are served first, one per request: dicts with ``status``, optional ``headers``,
    and ``json`` or ``text``. Counts requests, keeps the bodies and the most requests in flight.
    """

    def __init__(self):
        self.base_url = ""
        self.faults: list[dict] = []
        self.delay_s = 0.0
        self.hits = 0
        self.bodies: list[dict] = []
        self.times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.times.append(time.monotonic())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            body = await request.json()
            self.bodies.append(body)
            auth = request.headers.get("Authorization", "")
            if auth != f"Bearer {KEY}":  # echo the key the way OpenAI's message does
                error = {"message": f"Incorrect API key provided: {auth[7:]}", "code": "invalid_api_key"}
                return web.json_response({"error": error}, status=401)
            if body.get("model") != MODEL:
                error = {"message": f"The model `{body.get('model')}` does not exist", "code": "model_not_found"}
                return web.json_response({"error": error}, status=404)
            if self.faults:
                fault = self.faults.pop(0)
                # "{auth}" in a fault's body echoes the Authorization header, as some servers do
                text = json.dumps(fault["json"]) if "json" in fault else fault["text"]
                return web.Response(text=text.replace("{auth}", auth), status=fault["status"],
                                    headers=fault.get("headers"),
                                    content_type="application/json" if "json" in fault else "text/plain")
            if request.path.endswith("/chat/completions"):
                return web.json_response(chat_answer(body))
            return web.json_response(completion_answer(body))
        finally:
            self.in_flight -= 1


GENERATED = [(" A", -0.5), (" B", -1.0), (" C", -2.0)]  # canned generated tokens and log-probs


def completion_answer(body: dict) -> dict:
    prompt = body["prompt"]
    if isinstance(prompt, list):
        prompt_tokens, prompt_text = [f"<{i}>" for i in prompt], "".join(f"<{i}>" for i in prompt)
    else:
        words = prompt.split(" ")
        prompt_tokens, prompt_text = [words[0]] + [" " + w for w in words[1:]], prompt
    steps = GENERATED[: body.get("max_tokens", 16)]
    echo = bool(body.get("echo"))
    text = (prompt_text if echo else "") + "".join(t for t, _ in steps)
    logprobs = None
    if body.get("logprobs") is not None:
        n = body["logprobs"]
        rows = []
        if echo:
            rows.append((prompt_tokens[0], None, None))
            rows += [(t, -1.0 * i, {t: -1.0 * i, " x": -9.0}) for i, t in enumerate(prompt_tokens[1:], 1)]
        # top listed in ascending order on purpose: the client sorts by log-prob
        rows += [(t, lp, dict(reversed([(" A", -0.5), (" B", -1.5), (" C", -2.5)][:n]))) for t, lp in steps]
        offsets, at = [], 0
        for t, _, _ in rows:
            offsets.append(at)
            at += len(t)
        logprobs = {"tokens": [r[0] for r in rows], "token_logprobs": [r[1] for r in rows],
                    "top_logprobs": [r[2] for r in rows], "text_offset": offsets}
    return {
        "id": "cmpl-1", "object": "text_completion", "model": MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(steps),
                  "total_tokens": len(prompt_tokens) + len(steps)},
    }


def chat_answer(body: dict) -> dict:
    steps = GENERATED[: body.get("max_tokens", 16)]
    logprobs = None
    if body.get("logprobs"):
        top = [(" A", -0.25), (" B", -1.75), ("é", -3.0)][: body.get("top_logprobs", 0)]
        item = lambda t, lp: {"token": t, "logprob": lp, "bytes": list(t.encode())}
        logprobs = {"content": [{**item(t, lp), "top_logprobs": [item(*x) for x in top]} for t, lp in steps]}
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(t for t, _ in steps)},
                     "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": len(steps), "total_tokens": 4 + len(steps)},
    }


@pytest.fixture
async def fake():
    server = FakeApi()
    app = web.Application()
    app.router.add_post("/v1/completions", server.handle)
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.base_url = f"http://{host}:{port}/v1"
    yield server
    await runner.cleanup()


def config(base_url: str, **overrides) -> ApiConfig:
    settings = dict(base_url=base_url, model=MODEL, api_key=KEY, backoff_base_s=0.01, backoff_max_s=0.05,
                    max_retries=3, timeout_s=5.0)
    return ApiConfig(**{**settings, **overrides})


@pytest.fixture
async def make_client(fake, tmp_path):
    """Clients of the fake server sharing one cache directory (closed at the end)."""
    clients = []

    def make(**overrides) -> ApiClient:
        client = ApiClient(config(fake.base_url, **overrides), cache=ResponseCache(tmp_path / "responses"))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def client(make_client):
    return make_client()


# -- normalisation ------------------------------------------------------------------------------


async def test_completion_logprobs_are_normalised(client, fake):
    result = await client.complete([5, 6, 7], max_tokens=2, logprobs=2)
    top = [{"token": " A", "bytes": None, "logprob": -0.5}, {"token": " B", "bytes": None, "logprob": -1.5}]
    assert result == {
        "text": " A B",
        "tokens": [{"token": " A", "bytes": None, "logprob": -0.5, "top": top},
                   {"token": " B", "bytes": None, "logprob": -1.0, "top": top}],
        "prompt_tokens": None,
        "finish_reason": "length",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "cached": False,
    }
    sent = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0.0, "logprobs": 2}
    assert fake.bodies[-1] == sent


async def test_completion_without_logprobs_has_no_tokens(client):
    result = await client.complete("hi there", max_tokens=1)
    assert (result["text"], result["tokens"], result["prompt_tokens"]) == (" A", [], None)


async def test_echo_splits_prompt_tokens_for_id_prompts(client, fake):
    result = await client.complete([5, 6, 7], max_tokens=1, logprobs=1, echo=True)
    assert [e["token"] for e in result["prompt_tokens"]] == ["<5>", "<6>", "<7>"]
    assert [e["logprob"] for e in result["prompt_tokens"]] == [None, -1.0, -2.0]
    assert result["prompt_tokens"][0]["top"] == []
    assert result["prompt_tokens"][2]["top"] == [{"token": "<7>", "bytes": None, "logprob": -2.0},
                                                 {"token": " x", "bytes": None, "logprob": -9.0}]
    assert [(e["token"], e["logprob"]) for e in result["tokens"]] == [(" A", -0.5)]
    assert result["text"] == " A"  # the echoed prompt is cut at the first generated token's offset
    assert fake.bodies[-1]["echo"] is True


async def test_echo_splits_text_prompts_by_reported_prompt_tokens(client):
    result = await client.complete("hello big world", max_tokens=2, logprobs=0, echo=True)
    assert [e["token"] for e in result["prompt_tokens"]] == ["hello", " big", " world"]
    assert [e["token"] for e in result["tokens"]] == [" A", " B"]
    assert result["text"] == " A B"


async def test_chat_logprobs_are_normalised(client, fake):
    result = await client.chat("Say A", max_tokens=1, top_logprobs=3)
    assert result == {
        "text": " A",
        "tokens": [{"token": " A", "bytes": [32, 65], "logprob": -0.5, "top": [
            {"token": " A", "bytes": [32, 65], "logprob": -0.25},
            {"token": " B", "bytes": [32, 66], "logprob": -1.75},
            {"token": "é", "bytes": [195, 169], "logprob": -3.0},
        ]}],
        "prompt_tokens": None,
        "finish_reason": "length",
        "usage": {"prompt_tokens": 4, "completion_tokens": 1},
        "cached": False,
    }
    assert fake.bodies[-1] == {"model": MODEL, "messages": [{"role": "user", "content": "Say A"}], "max_tokens": 1,
                               "temperature": 0.0, "logprobs": True, "top_logprobs": 3}


async def test_logit_bias_is_sent_with_string_keys_and_extra_fields(client, fake):
    await client.complete([1], logprobs=1, logit_bias={5: 100, 7: -2.5}, extra={"seed": 3})
    assert fake.bodies[-1]["logit_bias"] == {"5": 100, "7": -2.5}
    assert fake.bodies[-1]["seed"] == 3


@pytest.mark.parametrize("bias, match", [
    ({i: 1.0 for i in range(301)}, "at most 300"),
    ({5: 100.5}, "outside"),
    ({5: -101}, "outside"),
    ({5: float("nan")}, "outside"),
    ({"5": 1.0}, "token ids"),
    ({-1: 1.0}, "non-negative"),
    ({5: "1"}, "number"),
])
async def test_bad_logit_bias_is_refused_before_sending(client, fake, bias, match):
    with pytest.raises(ApiError, match=match) as err:
        await client.complete([1], logit_bias=bias)
    assert (err.value.fault, err.value.status_code) == ("final", None)  # invalid arguments are final
    with pytest.raises(ApiError, match=match):
        await client.chat("x", logit_bias=bias)
    assert fake.hits == 0


def test_check_logit_bias_accepts_the_limits():
    assert check_logit_bias({i: 100 for i in range(300)})["299"] == 100
    assert check_logit_bias({3: -100.0, 4: 0.25}) == {"3": -100, "4": 0.25}


async def test_extra_fields_cannot_override_client_fields(client, fake):
    with pytest.raises(ApiError, match="clash"):
        await client.complete([1], extra={"max_tokens": 5})
    with pytest.raises(ApiError, match="clash") as err:
        await client.chat("x", extra={"stream": True})
    assert err.value.fault == "final"
    assert fake.hits == 0


# -- cache ----------------------------------------------------------------------------------------


async def test_second_identical_call_is_served_from_cache(make_client, fake):
    first_client = make_client()
    first = await first_client.complete([5, 6], max_tokens=1, logprobs=2, logit_bias={9: 5})
    second = await first_client.complete([5, 6], max_tokens=1, logprobs=2, logit_bias={9: 5})
    assert fake.hits == 1
    assert second == {**first, "cached": True} and first["cached"] is False
    assert (first_client.usage.requests, first_client.usage.cache_hits) == (1, 1)
    await first_client.complete([5, 6], max_tokens=1, logprobs=2, logit_bias={9: 6})  # other bias: other key
    assert fake.hits == 2
    await first_client.close()

    rerun = make_client()  # a new process on the same cache: zero requests
    again = await rerun.complete([5, 6], max_tokens=1, logprobs=2, logit_bias={9: 5})
    chat = await rerun.chat("x", top_logprobs=1)
    chat_again = await rerun.chat("x", top_logprobs=1)
    assert again == second and chat_again == {**chat, "cached": True}
    assert fake.hits == 3 and rerun.usage.requests == 1 and rerun.usage.cache_hits == 2
    await rerun.close()


async def test_answer_is_on_disk_when_the_client_returns_it(client, fake, tmp_path):
    result = await client.complete([1, 2], logprobs=1)
    key = request_key(fake.base_url, MODEL, "completions",
                      {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0, "logprobs": 1})
    with ResponseCache(tmp_path / "responses") as other:  # another connection, as after a crash
        raw = other.get(key)
    assert raw["choices"][0]["logprobs"]["tokens"] == [" A"] and result["cached"] is False


async def test_cached_row_that_fails_validation_is_dropped_and_asked_again(client, fake):
    payload = {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0, "logprobs": 1}
    key = request_key(fake.base_url, MODEL, "completions", payload)
    bad = completion_answer({**payload, "model": MODEL})
    bad["choices"][0]["logprobs"]["token_logprobs"] = [float("nan")]
    with diskcache.Cache(str(client.cache.directory)) as plain:  # the row as an older version wrote it
        plain.set(key, json.dumps(bad).encode("utf-8"))  # raw JSON bytes holding NaN
    result = await client.complete([1, 2], logprobs=1)
    assert result["cached"] is False and result["tokens"][0]["logprob"] == -0.5 and fake.hits == 1
    assert client.usage.invalid_cached == 1 and client.usage.cache_hits == 0
    assert client.cache.get(key)["choices"][0]["logprobs"]["token_logprobs"] == [-0.5]  # replaced
    again = await client.complete([1, 2], logprobs=1)
    assert again["cached"] is True and fake.hits == 1


async def test_claims_are_refreshed_while_held_and_released_after(client, fake, monkeypatch):
    monkeypatch.setattr(client_module, "CLAIM_REFRESH_S", 0.05)
    refreshed = []
    real_refresh = client.cache.refresh_claims
    monkeypatch.setattr(client.cache, "refresh_claims", lambda: refreshed.append(real_refresh()))
    fake.delay_s = 0.4
    result = await client.complete([1, 2], logprobs=1)
    assert result["cached"] is False and len(refreshed) >= 3 and set(refreshed) == {1}  # one claim held
    assert client.cache.held_claims == frozenset()
    await asyncio.sleep(0.1)
    assert client._heartbeat.done()  # no claims left: the heartbeat stopped


async def test_a_cancelled_request_releases_its_claim(client, fake, tmp_path):
    fake.delay_s = 1.0
    task = asyncio.ensure_future(client.complete([1, 2], logprobs=1))
    await asyncio.sleep(0.3)
    (key,) = client.cache.held_claims
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.cache.held_claims == frozenset()
    with ResponseCache(tmp_path / "responses") as other:
        assert other.claim(key)  # free again, not left to expire


async def test_api_key_never_reaches_disk_logs_or_descriptions(make_client, fake, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    client = make_client()
    fake.faults = [{"status": 429, "json": {"error": {"message": f"slow down {KEY}"}}}]
    await client.complete([1, 2], logprobs=2, echo=True)
    await client.chat("hello", top_logprobs=2)
    bad = ApiClient(config(fake.base_url, api_key=KEY + "-wrong"), cache=ResponseCache(tmp_path / "responses"))
    with pytest.raises(ApiError) as err:
        await bad.complete([3])
    await bad.close()
    await client.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "cache.db" for p in files)
    for path in files:
        assert b"SECRET" not in path.read_bytes(), path
    texts = [str(err.value), repr(err.value), repr(client), repr(client.config), str(client.config.describe()),
             caplog.text]
    assert caplog.text  # the retry was logged
    for text in texts:
        assert "SECRET" not in text


async def test_usage_and_cost(make_client):
    priced = make_client(prices={MODEL: (1.0, 2.0)})
    await priced.complete([5, 6, 7], max_tokens=2, logprobs=1)
    await priced.complete([5, 6, 7], max_tokens=2, logprobs=1)  # cache hit: no tokens, no cost
    assert priced.usage.to_dict() == {"requests": 1, "retries": 0, "cache_hits": 1, "invalid_answers": 0,
                                      "invalid_cached": 0, "prompt_tokens": 3, "completion_tokens": 2,
                                      "cost_usd": pytest.approx(7e-6), "unpriced": False}
    unpriced = make_client()
    await unpriced.chat("new", top_logprobs=1)
    assert unpriced.usage.unpriced and unpriced.usage.cost_usd == 0.0 and unpriced.usage.prompt_tokens == 4


# -- retries and errors ---------------------------------------------------------------------------


async def test_429_honours_retry_after(client, fake):
    fake.faults = [{"status": 429, "headers": {"Retry-After": "1"}, "json": {"error": {"message": "rate"}}}]
    start = time.monotonic()
    result = await client.complete([1], logprobs=1)
    assert time.monotonic() - start >= 0.95
    assert fake.times[1] - fake.times[0] >= 0.95
    assert result["tokens"][0]["token"] == " A"
    assert (client.usage.retries, client.usage.requests, fake.hits) == (1, 2, 2)


async def test_500_twice_then_success(client, fake):
    fake.faults = [{"status": 500, "text": "boom"}, {"status": 503, "json": {"error": {"message": "busy"}}}]
    result = await client.chat("x", top_logprobs=1)
    assert result["text"] == " A" and fake.hits == 3 and client.usage.retries == 2


async def test_500_with_the_same_body_twice_is_final(make_client, fake):
    client = make_client(max_retries=6, backoff_base_s=0.2)  # a server refusing token-id prompts
    fake.faults = [{"status": 500, "json": {"error": {"message": "token ids are not supported"}}}] * 7
    start = time.monotonic()
    with pytest.raises(ApiError, match=r"HTTP 500\): token ids are not supported \(final: ") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits) == (500, "final", 2)
    assert time.monotonic() - start < 1.0  # one backoff, not six
    await client.close()


async def test_500s_that_differ_are_transient_until_retries_run_out(make_client, fake):
    client = make_client(max_retries=2)
    fake.faults = [{"status": 500, "json": {"error": {"message": f"overloaded ({i})"}}} for i in range(5)]
    with pytest.raises(ApiError, match=r"overloaded \(2\) \(transient: gave up after 3 attempts\)") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits) == (500, "transient", 3)
    await client.close()


async def test_501_is_final_at_once(client, fake):
    fake.faults = [{"status": 501, "json": {"error": {"message": "echo is not implemented"}}}] * 4
    with pytest.raises(ApiError, match=r"echo is not implemented \(final: not retried\)") as err:
        await client.complete([1], logprobs=1, echo=True)
    assert (err.value.status_code, err.value.fault, fake.hits, client.usage.retries) == (501, "final", 1, 0)


async def test_429_until_retries_run_out_is_transient(client, fake):
    fake.faults = [{"status": 429, "json": {"error": {"message": "slow down"}}}] * 4
    with pytest.raises(ApiError, match=r"rate limited .*\(transient: gave up after 4 attempts\)") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits) == (429, "transient", 4)


def test_api_error_interface():
    assert FAULTS == ("final", "transient", "invalid")
    error = ApiError(None, "refused")
    assert (error.status_code, error.fault, str(error)) == (None, "final", "refused")
    assert isinstance(error, BlackboxMIAError)
    assert ApiError(200, "bad", fault="invalid").fault == "invalid"
    with pytest.raises(ValueError, match="fault"):
        ApiError(500, "x", fault="flaky")


async def test_400_is_not_retried(client, fake):
    fake.faults = [{"status": 400, "json": {"error": {"message": f"echo is not supported (key {KEY})"}}}]
    with pytest.raises(ApiError, match=r"rejected the request .*echo is not supported \(key \*\*\*\)") as err:
        await client.complete([1], logprobs=1, echo=True)
    assert err.value.status_code == 400 and fake.hits == 1 and client.usage.retries == 0
    assert err.value.fault == "final"
    assert "SECRET" not in str(err.value)
    assert len(client.cache) == 0


@pytest.mark.parametrize("fault", [
    {"status": 400, "json": {"error": {"message": "m" * 285 + "{auth}"}}},  # message cut at 300
    {"status": 400, "text": "t" * 285 + "{auth} and more"},  # a body that is not JSON, cut at 300
    {"status": 500, "json": {"error": {"info": "i" * 275 + "{auth}"}}},  # dumped JSON, cut at 300
    {"status": 200, "text": "x" * 65 + "{auth} is not JSON"},  # a snippet cut at 80
    {"status": 200, "json": {"choices": "c" * 68 + "{auth}"}},  # a shown value cut at 80
], ids=["message", "text-body", "json-body", "not-json-200", "invalid-200"])
async def test_key_is_masked_before_any_truncation(client, fake, caplog, fault):
    caplog.set_level(logging.DEBUG)
    fake.faults = [fault] * 4  # every attempt (max_retries=3) echoes the key across the cut
    with pytest.raises(ApiError) as err:
        await client.complete([1], logprobs=1)
    assert "***" in str(err.value)  # the key was there, and was masked
    for text in (str(err.value), repr(err.value), caplog.text):
        assert KEY[:4] not in text  # no prefix of the key (4 characters or more) is left


async def test_refused_key(fake):
    client = ApiClient(config(fake.base_url, api_key="sk-test-SECRET-999"))
    with pytest.raises(ApiError, match="API key was refused") as err:
        await client.complete([1])
    assert err.value.status_code == 401 and fake.hits == 1
    assert "SECRET" not in str(err.value) and err.value.__cause__ is None
    await client.close()


async def test_unknown_model(fake):
    async with ApiClient(config(fake.base_url, model="nope")) as client:
        with pytest.raises(ApiError, match="unknown model 'nope'") as err:
            await client.chat("x")
    assert err.value.status_code == 404 and fake.hits == 1


async def test_unreachable_base_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    async with ApiClient(config(f"http://user:pw@127.0.0.1:{port}/v1", max_retries=2)) as client:
        with pytest.raises(ApiError, match=rf"cannot reach http://127.0.0.1:{port}/v1: ") as err:
            await client.complete([1])
    assert str(err.value).endswith("(transient: gave up after 3 attempts)") and err.value.fault == "transient"
    assert err.value.status_code is None and client.usage.retries == 2 and "pw" not in str(err.value)


async def test_timeout(make_client, fake):
    fake.delay_s = 0.5
    client = make_client(timeout_s=0.1, max_retries=1)
    with pytest.raises(ApiError, match=r"no answer from .* within 0.1 s \(transient: gave up after 2 attempts\)"):
        await client.complete([1])
    assert fake.hits == 2
    await client.close()


@pytest.mark.parametrize("fault, match", [
    ({"status": 200, "text": "<html>oops</html>"}, "the body is '<html>oops</html>', expected a JSON object"),
    ({"status": 200, "text": '{"choices": [{"text": " A", "logpr'}, "the body is .*, expected a JSON object"),
    ({"status": 200, "json": ["a", "list"]}, r"the body is \['a', 'list'\], expected a JSON object"),
    ({"status": 200, "json": {"object": "text_completion"}}, r"choices is missing"),
    ({"status": 200, "json": {"choices": []}}, "choices is empty"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": "abc", "top_logprobs": [None]}}]}}, "token_logprobs is 'abc'"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": [-1.0, -2.0], "top_logprobs": None}}]}}, "of different lengths"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": [-1.0], "top_logprobs": [{" A": "high"}]}}]}}, r"top_logprobs\[0\]"),
])
async def test_garbage_answers_are_retried_never_cached_then_fail_as_invalid(client, fake, fault, match):
    fake.faults = [fault] * 4  # every attempt (max_retries=3)
    with pytest.raises(ApiError, match=match) as err:
        await client.complete([1], logprobs=1)
    assert err.value.fault == "invalid" and err.value.status_code == 200
    assert str(err.value).endswith("(invalid: gave up after 4 attempts)")
    assert len(client.cache) == 0 and client.usage.retries == 3 and client.usage.invalid_answers == 4
    result = await client.complete([1], logprobs=1)  # the next call asks again
    assert result["cached"] is False and fake.hits == 5


async def test_truncated_json_200_is_retried(client, fake):
    fake.faults = [{"status": 200, "text": '{"id": "cmpl-1", "choices": [{"text": " A", "logprobs": {"tok'}]
    result = await client.complete([1], logprobs=1)
    assert result["tokens"][0]["logprob"] == -0.5 and fake.hits == 2 and client.usage.retries == 1
    assert len(client.cache) == 1


def _completion(tokens, values, tops, *, usage=None, text=" A"):
    answer = {"choices": [{"text": text, "finish_reason": "length",
                           "logprobs": {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops}}]}
    return {**answer, "usage": usage} if usage else answer


TOP = {" A": -0.5}
INVALID_COMPLETIONS = {  # name: (request, answer, message naming the field)
    "logprobs-missing": (dict(logprobs=1), {"choices": [{"text": " A", "logprobs": None}]},
                         r"choices\[0\]\.logprobs is missing"),
    "no-generated-token": (dict(logprobs=1), _completion([], [], []),
                           r"choices\[0\]\.logprobs\.tokens has no generated token"),
    "more-than-max-tokens": (dict(logprobs=1), _completion([" A", " B"], [-0.5, -1.0], [TOP, TOP]),
                             r"2 generated tokens, more than max_tokens=1"),
    "null-logprob": (dict(logprobs=1), _completion([" A"], [None], [TOP]),
                     r"choices\[0\]\.logprobs\.token_logprobs\[0\] is None, expected a number"),
    "empty-top": (dict(logprobs=1), _completion([" A"], [-0.5], [{}]),
                  r"choices\[0\]\.logprobs\.top_logprobs\[0\] is \{\}, expected at least one"),
    "null-top": (dict(logprobs=2), _completion([" A"], [-0.5], [None]),
                 r"top_logprobs\[0\] is None, expected at least one of the 2"),
    "null-echoed-logprob": (dict(logprobs=1, echo=True),
                            _completion(["<1>", "<2>", " A"], [None, None, -0.5], [None, TOP, TOP]),
                            r"choices\[0\]\.logprobs\.token_logprobs\[1\] is None, expected a number"),
    "echo-too-short": (dict(logprobs=1, echo=True), _completion(["<1>", " A"], [None, -0.5], [None, TOP]),
                       r"has 2 entries, fewer than the 2 prompt tokens plus 1 generated|tokens has no generated"),
    "echo-text-no-usage": (dict(logprobs=1, echo=True, prompt="a b"),
                           _completion(["a", " b", " A"], [None, -1.0, -0.5], [None, TOP, TOP]),
                           r"usage\.prompt_tokens is missing"),
}


@pytest.mark.parametrize("name", list(INVALID_COMPLETIONS))
async def test_invalid_completion_answers_name_the_field(client, fake, name):
    request, answer, match = INVALID_COMPLETIONS[name]
    request = {"prompt": [1, 2], **request}
    fake.faults = [{"status": 200, "json": answer}] * 4
    with pytest.raises(ApiError, match=match) as err:
        await client.complete(request.pop("prompt"), max_tokens=1, **request)
    assert err.value.fault == "invalid" and fake.hits == 4 and len(client.cache) == 0


@pytest.mark.parametrize("constant", ["NaN", "-Infinity", "Infinity"])
@pytest.mark.parametrize("place", ["token_logprobs", "top_logprobs", "usage"])
async def test_nan_and_infinity_anywhere_are_invalid_and_never_cached(client, fake, constant, place):
    answer = json.dumps(completion_answer({"prompt": [1], "max_tokens": 1, "logprobs": 1}))
    target = {"token_logprobs": '"token_logprobs": [-0.5]', "top_logprobs": '{" A": -0.5}',
              "usage": '"total_tokens": 2'}[place]
    assert target in answer
    bad = answer.replace(target, target.replace("-0.5", constant).replace("2", constant))
    fake.faults = [{"status": 200, "text": bad}] * 4
    with pytest.raises(ApiError, match=f"holds {constant}, which is not JSON") as err:
        await client.complete([1], logprobs=1)
    assert err.value.fault == "invalid" and len(client.cache) == 0 and fake.hits == 4


async def test_a_server_that_always_omits_logprobs_is_detected_within_a_second(make_client, fake):
    client = make_client(max_retries=6, backoff_base_s=1.0, backoff_max_s=60.0)  # the defaults
    fake.faults = [{"status": 200, "json": {"choices": [{"text": " A", "logprobs": None}]}}] * 7
    start = time.monotonic()
    with pytest.raises(ApiError, match=r"choices\[0\]\.logprobs is missing \(invalid: gave up after 7 attempts\)"):
        await client.complete([1], logprobs=5)
    assert time.monotonic() - start < 1.0 and fake.hits == 7 and len(client.cache) == 0


async def test_invalid_then_valid_answer_is_cached(client, fake):
    fake.faults = [{"status": 200, "json": {"choices": [{"text": " A", "logprobs": None}]}}]
    result = await client.complete([1], logprobs=1)
    assert result["tokens"][0]["logprob"] == -0.5 and fake.hits == 2 and client.usage.invalid_answers == 1
    assert (await client.complete([1], logprobs=1))["cached"] is True and fake.hits == 2


def _chat(content, text="A"):
    return {"choices": [{"message": {"content": text}, "finish_reason": "length", "logprobs": content}]}


def _item(logprob=-1.0, top=({"token": "A", "logprob": -1.0, "bytes": [65]},)):
    return {"token": "A", "logprob": logprob, "bytes": [65], "top_logprobs": list(top)}


INVALID_CHATS = {
    "logprobs-missing": (_chat(None), r"choices\[0\]\.logprobs is missing"),
    "content-missing": (_chat({"content": None}), r"choices\[0\]\.logprobs\.content is missing"),
    "content-empty": (_chat({"content": []}), r"choices\[0\]\.logprobs\.content has no generated token"),
    "null-logprob": (_chat({"content": [_item(None)]}), r"content\[0\]\.logprob is None, expected a number"),
    "empty-top": (_chat({"content": [_item(top=())]}), r"content\[0\]\.top_logprobs is \[\], expected at least"),
    "top-without-logprob": (_chat({"content": [_item(top=({"token": "A"},))]}),
                            r"content\[0\]\.top_logprobs\[0\]\.logprob is None, expected a number"),
    "too-many": (_chat({"content": [_item(), _item()]}), "2 generated tokens, more than max_tokens=1"),
}


@pytest.mark.parametrize("name", list(INVALID_CHATS))
async def test_invalid_chat_answers_name_the_field(client, fake, name):
    answer, match = INVALID_CHATS[name]
    fake.faults = [{"status": 200, "json": answer}] * 4
    with pytest.raises(ApiError, match=match) as err:
        await client.chat("x", top_logprobs=1)
    assert err.value.fault == "invalid" and fake.hits == 4 and len(client.cache) == 0


async def test_echo_with_one_generated_token_splits_prompt_and_generation(client):
    result = await client.complete([5, 6, 7], max_tokens=1, logprobs=1, echo=True)
    assert len(result["prompt_tokens"]) == 3 and [e["token"] for e in result["tokens"]] == [" A"]
    zero = await client.complete([5, 6, 7], max_tokens=0, logprobs=1, echo=True)
    assert len(zero["prompt_tokens"]) == 3 and zero["tokens"] == [] and zero["text"] == ""


# -- limits ---------------------------------------------------------------------------------------


async def test_concurrency_limit(make_client, fake):
    fake.delay_s = 0.05
    client = make_client(concurrency=3)
    results = await asyncio.gather(*(client.complete([i], logprobs=1) for i in range(12)))
    assert len(results) == 12 and fake.hits == 12
    assert fake.max_in_flight == 3
    await client.close()


async def test_requests_per_minute_limit(make_client, fake):
    client = make_client(rpm=600)  # 10 a second, bursts of 10
    await asyncio.gather(*(client.complete([i]) for i in range(15)))
    assert fake.times[-1] - fake.times[0] >= 0.4
    await client.close()


async def test_rate_limiter_spaces_tokens():
    limiter = RateLimiter(600)  # 10 tokens a second, bursts of 10
    start = time.monotonic()
    await limiter.acquire(10)
    assert time.monotonic() - start < 0.05
    await limiter.acquire(15)  # more than a burst: waits for a full bucket (1 s), then owes 5 tokens
    assert time.monotonic() - start >= 0.95
    await limiter.acquire(1)  # repays the debt first: 0.6 s more
    assert time.monotonic() - start >= 1.55


# -- configuration ----------------------------------------------------------------------------------


def test_config_key_default_describe_and_prices(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cfg = ApiConfig(base_url="http://127.0.0.1:9/v1/", model="gpt-4o-mini-2024-07-18", endpoint="chat")
    assert cfg.api_key == KEY and "SECRET" not in repr(cfg) and "SECRET" not in str(cfg.describe())
    assert cfg.describe() == {
        "base_url": "http://127.0.0.1:9/v1", "model": "gpt-4o-mini-2024-07-18", "endpoint": "chat",
        "concurrency": 16, "rpm": None, "tpm": None, "timeout_s": 60.0, "max_retries": 6,
        "usd_per_1m_tokens": {"prompt": 0.15, "completion": 0.60},
    }
    monkeypatch.delenv("OPENAI_API_KEY")
    local = ApiConfig(base_url="http://127.0.0.1:9/v1", model="my-llama")
    assert local.api_key == "EMPTY" and local.price() is None
    assert ApiConfig(base_url="http://h/v1", model="my-llama", prices={"my-llama": (1, 3)}).price() == (1.0, 3.0)


@pytest.mark.parametrize("bad", [
    dict(endpoint="embeddings"), dict(concurrency=0), dict(rpm=0), dict(tpm=-5), dict(timeout_s=0),
    dict(max_retries=-1), dict(base_url="ftp://h/v1"), dict(base_url="127.0.0.1:8000"), dict(model=""),
])
def test_config_validation(bad):
    with pytest.raises(BlackboxMIAError):
        ApiConfig(**{"base_url": "http://h/v1", "model": "m", **bad})


def test_retry_after_header_forms():
    def error(headers):
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert retry_after_s(error({"retry-after": "2.5"})) == 2.5
    assert retry_after_s(error({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert 28.0 <= retry_after_s(error({"retry-after": formatdate(time.time() + 30, usegmt=True)})) <= 30.5
    assert retry_after_s(error({"retry-after": formatdate(time.time() - 30, usegmt=True)})) == 0.0
    assert retry_after_s(error({"retry-after": "1e9"})) == MAX_RETRY_AFTER_S
    assert retry_after_s(error({"retry-after": "soon"})) is None
    assert retry_after_s(error({})) is None
    assert retry_after_s(ValueError()) is None
