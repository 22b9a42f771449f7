"""ApiClient against a small in-test OpenAI-shaped server: normalisation, cache, limits, configuration.

Retries and HTTP errors: test_client_retries.py; invalid answers: test_client_validation.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from types import SimpleNamespace

import diskcache
import pytest

import blackbox_mia.backends.api.http.faults as faults
import blackbox_mia.backends.api.http.fetch as fetch_module
import blackbox_mia.backends.api.http.limits as limits
from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.http.dialect import check_logit_bias
from blackbox_mia.backends.api.http.errors import APIConnectionError, ApiError, status_error
from blackbox_mia.backends.api.http.faults import MAX_RETRY_AFTER_S, retry_after_s
from blackbox_mia.backends.api.http.limits import RateLimiter
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.cache.keys import request_key
from blackbox_mia.types import BlackboxMIAError

from ..helpers_client import KEY, MODEL, completion_answer, config

# -- normalisation ------------------------------------------------------------------------------


async def test_completion_logprobs_are_normalised(client, fake):
    result = await client.complete([5, 6, 7], max_tokens=2, logprobs=2)
    top = [{"token": " A", "bytes": None, "logprob": -0.5}, {"token": " B", "bytes": None, "logprob": -1.5}]
    assert result == {
        "text": " A B",
        "tokens": [{"token": " A", "bytes": None, "logprob": -0.5, "top": top},
                   {"token": " B", "bytes": None, "logprob": -1.0, "top": top}],
        "past_max_tokens": [],
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
        "past_max_tokens": [],
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


@pytest.mark.parametrize("bad_value, invalid_cached", [
    (None, 1),  # fails validation when read: dropped, counted
    (float("nan"), 1),  # NaN, as an older version could write it: the cache quarantines the row on reading
])
async def test_cached_row_that_fails_validation_is_dropped_and_asked_again(client, fake, bad_value, invalid_cached):
    payload = {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0, "logprobs": 1}
    key = request_key(fake.base_url, MODEL, "completions", payload)
    bad = completion_answer({**payload, "model": MODEL})
    bad["choices"][0]["logprobs"]["token_logprobs"] = [bad_value]
    with diskcache.Cache(str(client.cache.directory)) as plain:  # the row as an older version wrote it
        plain.set(key, json.dumps(bad).encode("utf-8"))  # raw JSON bytes (holding NaN: not JSON)
    result = await client.complete([1, 2], logprobs=1)
    assert result["cached"] is False and result["tokens"][0]["logprob"] == -0.5 and fake.hits == 1
    assert client.usage.invalid_cached == invalid_cached and client.usage.cache_hits == 0
    assert client.cache.get(key)["choices"][0]["logprobs"]["token_logprobs"] == [-0.5]  # replaced
    again = await client.complete([1, 2], logprobs=1)
    assert again["cached"] is True and fake.hits == 1


async def test_claims_are_refreshed_while_held_and_released_after(client, fake, monkeypatch):
    monkeypatch.setattr(fetch_module, "CLAIM_REFRESH_S", 0.05)
    refreshed = []
    real_refresh = client.cache.refresh_claims
    monkeypatch.setattr(client.cache, "refresh_claims", lambda: refreshed.append(real_refresh()))
    fake.delay_s = 0.4
    result = await client.complete([1, 2], logprobs=1)
    assert result["cached"] is False and len(refreshed) >= 3 and set(refreshed) == {1}  # one claim held
    assert client.cache.held_claims == frozenset()
    await asyncio.sleep(0.1)
    assert client._heartbeat.done()  # no claims left: the heartbeat stopped


async def test_identical_concurrent_requests_are_sent_once_and_share_the_outcome(client, fake):
    fake.delay_s = 0.05
    results = await asyncio.gather(*(client.complete([4, 5], logprobs=1) for _ in range(5)))
    assert fake.hits == 1 and client.usage.requests == 1 and client.usage.cache_hits == 4
    assert [r["cached"] for r in results] == [False, True, True, True, True]
    assert {r["tokens"][0]["logprob"] for r in results} == {-0.5}
    fake.faults = [{"status": 400, "json": {"error": {"message": "no"}}}]  # final: one failure for all
    outcomes = await asyncio.gather(*(client.complete([6]) for _ in range(3)), return_exceptions=True)
    assert fake.hits == 2 and all(isinstance(o, ApiError) and o.status_code == 400 for o in outcomes)


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


async def test_stop_sending_lets_the_answers_in_flight_land_in_the_cache_and_sends_nothing_more(
        make_client, fake, tmp_path):
    client = make_client(concurrency=4)
    fake.delay_s = 0.3
    tasks = [asyncio.ensure_future(client.complete([k], logprobs=1)) for k in range(10)]  # 4 in flight, 6 queued
    await asyncio.sleep(0.1)
    assert fake.in_flight == 4
    assert await client.stop_sending(2.0) == 0  # Ctrl-C: all four landed within the grace period
    await asyncio.sleep(0.4)
    assert fake.hits == 4  # the six queued were never sent
    for task in tasks:
        task.cancel()  # what the interrupted call does next
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.close()
    rerun = make_client()
    answers = [await rerun.complete([k], logprobs=1) for k in range(10)]
    assert [a["cached"] for a in answers] == [True] * 4 + [False] * 6  # the four paid answers not paid again
    assert fake.hits == 10 and rerun.usage.requests == 6


async def test_stop_sending_gives_up_after_its_grace_period_and_resume_sends_again(client, fake):
    fake.delay_s = 1.0
    first = asyncio.ensure_future(client.complete([1], logprobs=1))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    assert await client.stop_sending(0.2) == 1  # still in flight after the grace period
    assert time.monotonic() - started >= 0.2 and not first.done()  # the grace period, not the answer, was waited for
    second = asyncio.ensure_future(client.complete([2], logprobs=1))
    await asyncio.sleep(0.05)
    assert fake.hits == 1
    client.resume_sending()
    assert (await second)["tokens"][0]["token"] == " A" and (await first)["cached"] is False
    assert fake.hits == 2


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


class FakeClock:
    """A clock that moves only when the code under test sleeps (seconds)."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_rate_limiter_spaces_tokens(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(limits, "time", clock)
    monkeypatch.setattr(limits, "asyncio", SimpleNamespace(Lock=asyncio.Lock, sleep=clock.sleep))
    limiter = RateLimiter(600)  # 10 tokens a second, bursts of 10
    await limiter.acquire(10)
    assert clock.now == 0.0  # a burst: no wait
    await limiter.acquire(15)  # more than a burst: waits for a full bucket (1 s), then owes 5 tokens
    assert clock.now == pytest.approx(1.0)
    await limiter.acquire(1)  # repays the debt first: 0.6 s more
    assert clock.now == pytest.approx(1.6)


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


def test_retry_after_header_forms(monkeypatch):
    def error(headers):
        return status_error(429, headers, b"{}")

    assert retry_after_s(error({"Retry-After": "2.5"})) == 2.5
    assert retry_after_s(error({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    monkeypatch.setattr(faults, "datetime", SimpleNamespace(now=lambda tz: now))  # a clock that stands still
    assert retry_after_s(error({"retry-after": format_datetime(now + timedelta(seconds=30), usegmt=True)})) == 30.0
    assert retry_after_s(error({"retry-after": format_datetime(now - timedelta(seconds=30), usegmt=True)})) == 0.0
    assert retry_after_s(error({"retry-after": "1e9"})) == MAX_RETRY_AFTER_S
    assert retry_after_s(error({"retry-after": "soon"})) is None
    assert retry_after_s(error({})) is None
    assert retry_after_s(ValueError()) is None
    assert retry_after_s(APIConnectionError(None, "dropped", "transient")) is None
