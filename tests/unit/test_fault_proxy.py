"""The fault-injecting proxy in front of a served tiny model: every fault class, what is paid, and
the seeded fault sequence."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from tests.tools.fault_proxy import (
    FAULT_CLASSES,
    FaultConfig,
    FaultProxy,
    body_hash,
    draw_fault,
    proxy_in_background,
)
from blackbox_mia.types import BlackboxMIAError


@pytest.fixture(scope="module")
def name(tiny_model_dir):
    return str(tiny_model_dir)


@pytest.fixture(scope="module")
def upstream(tiny_model_dir, name):
    backend = LocalBackend(LocalConfig(name, device="cpu"))
    with serve_in_background(ServerConfig(model=name), backend) as url:
        yield url


def completion(name: str, **change) -> dict:
    return {"model": name, "prompt": [0, 5, 6], "max_tokens": 2, "temperature": 0, "logprobs": 3, **change}


def chat(name: str) -> dict:
    return {"model": name, "messages": [{"role": "user", "content": "Tom has"}], "max_tokens": 2,
            "temperature": 0, "logprobs": True, "top_logprobs": 3}


@contextlib.asynccontextmanager
async def running(upstream: str, **options):
    proxy = FaultProxy(FaultConfig(upstream=upstream, **options))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def ask(url: str, path: str, body: dict | None, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """One request on a fresh connection: (status, headers, raw body); raises on a dropped one."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        request = session.get(url + path) if body is None else session.post(url + path, json=body)
        async with request as response:
            return response.status, dict(response.headers), await response.read()


def logprob_values(choice: dict) -> list[float]:
    """Every log-prob of a choice in a fixed order (completions or chat)."""
    lp = choice["logprobs"]
    if "content" in lp:
        return [v for e in lp["content"] for v in [e["logprob"]] + [t["logprob"] for t in e["top_logprobs"]]]
    return [v for v in lp["token_logprobs"] if v is not None] + [v for d in lp["top_logprobs"] if d for v in d.values()]


def test_draw_fault_is_seeded_uniform_and_at_rate():
    config = FaultConfig(upstream="http://127.0.0.1:1/v1")
    draws = [draw_fault(config, i) for i in range(5000)]
    assert draws == [draw_fault(config, i) for i in range(5000)]
    assert draws != [draw_fault(FaultConfig(upstream=config.upstream, seed=1), i) for i in range(5000)]
    faults = [d for d in draws if d is not None]
    assert 0.18 <= len(faults) / len(draws) <= 0.22
    counts = {c: faults.count(c) for c in FAULT_CLASSES}
    assert all(60 <= n <= 140 for n in counts.values()), counts  # 100 expected each
    assert {draw_fault(FaultConfig(upstream=config.upstream, rate=0.0), i) for i in range(200)} == {None}
    only = FaultConfig(upstream=config.upstream, rate=1.0, classes=("drop", "nan"))
    assert {draw_fault(only, i) for i in range(200)} == {"drop", "nan"}


@pytest.mark.parametrize("options", [
    {"upstream": "http://127.0.0.1:8000"}, {"upstream": "ftp://x/v1"}, {"rate": 1.5}, {"rate": -0.1},
    {"classes": ()}, {"classes": ("404",)}, {"stall_s": -1}, {"retry_after_s": -1},
])
def test_config_refuses_bad_values(options):
    with pytest.raises(BlackboxMIAError):
        FaultConfig(**{"upstream": "http://127.0.0.1:8000/v1", **options})


async def test_no_fault_forwards_and_counts_paid_requests_by_body(upstream, name):
    body, other = completion(name), completion(name, max_tokens=1)
    _, _, direct = await ask(upstream, "/completions", body)
    async with running(upstream, rate=0.0) as proxy:
        for request in (body, body, other, body):
            status, _, raw = await ask(proxy.base_url, "/completions", request)
            assert status == 200
        status, _, models = await ask(proxy.base_url, "/models", None)
    assert status == 200 and json.loads(models)["data"][0]["id"] == name
    assert json.loads(raw)["choices"] == json.loads(direct)["choices"]
    stats = proxy.stats
    assert stats.requests == stats.upstream_requests == 4  # GET /models is not counted
    assert stats.by_body == {body_hash(json.dumps(body).encode()): 3, body_hash(json.dumps(other).encode()): 1}
    assert not stats.injected and stats.outcomes == ["ok"] * 4


async def test_429_with_retry_after_is_not_paid(upstream, name):
    async with running(upstream, rate=1.0, classes=("429",), retry_after_s=0.25) as proxy:
        status, headers, raw = await ask(proxy.base_url, "/completions", completion(name))
    assert status == 429 and headers["Retry-After"] == "0.25"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    assert proxy.stats.upstream_requests == 0 and proxy.stats.injected == {"429": 1}


@pytest.mark.parametrize("same", [False, True], ids=["unique", "same"])
@pytest.mark.parametrize("fault", ["500", "502", "503"])
async def test_server_errors_have_openai_bodies_and_are_not_paid(upstream, name, fault, same):
    async with running(upstream, rate=1.0, classes=(fault,), same_5xx_body=same) as proxy:
        answers = [await ask(proxy.base_url, "/completions", completion(name)) for _ in range(3)]
    assert {status for status, _, _ in answers} == {int(fault)}
    bodies = [raw for _, _, raw in answers]
    assert len(set(bodies)) == (1 if same else 3)  # an error id in each, or "Internal Server Error" every time
    for raw in bodies:
        error = json.loads(raw)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "server_error"
    assert proxy.stats.upstream_requests == 0 and proxy.stats.injected == {fault: 3}


async def test_stall_outlasts_the_client_timeout_then_drops(upstream, name):
    async with running(upstream, rate=1.0, classes=("stall",), stall_s=0.6) as proxy:
        with pytest.raises(asyncio.TimeoutError):  # the client gave up first: the stall had not ended
            await ask(proxy.base_url, "/completions", completion(name), timeout=0.2)
        began = time.perf_counter()
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await ask(proxy.base_url, "/completions", completion(name))
        assert time.perf_counter() - began >= 0.6
    assert proxy.stats.upstream_requests == 0 and proxy.stats.injected == {"stall": 2}


async def test_stop_does_not_wait_for_a_stalled_request(upstream, name):
    stall_s = 300.0
    proxy = FaultProxy(FaultConfig(upstream=upstream, rate=1.0, classes=("stall",), stall_s=stall_s))
    url = await proxy.start()
    pending = asyncio.create_task(ask(url, "/completions", completion(name)))
    while proxy.stats.requests == 0:
        await asyncio.sleep(0.01)
    began = time.perf_counter()
    await proxy.stop()
    # stopping takes milliseconds; waiting for the stall would take stall_s: a tenth of it tells them apart
    assert time.perf_counter() - began < stall_s / 10
    with pytest.raises(aiohttp.ClientError):
        await pending


async def test_drop_closes_without_an_answer(upstream, name):
    async with running(upstream, rate=1.0, classes=("drop",)) as proxy:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await ask(proxy.base_url, "/completions", completion(name))
    assert proxy.stats.upstream_requests == 0 and proxy.stats.injected == {"drop": 1}


async def test_truncated_returns_half_the_json_and_is_paid(upstream, name):
    _, _, direct = await ask(upstream, "/completions", completion(name))
    async with running(upstream, rate=1.0, classes=("truncated",)) as proxy:
        status, headers, raw = await ask(proxy.base_url, "/completions", completion(name))
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert len(raw) == len(direct) // 2 and raw.startswith(b'{"id": "cmpl-')
    with pytest.raises(ValueError):
        json.loads(raw)
    assert proxy.stats.upstream_requests == 1 and proxy.stats.injected == {"truncated": 1}


@pytest.mark.parametrize("kind", ["completions", "chat"])
async def test_no_logprobs_nulls_the_logprobs_and_is_paid(upstream, name, kind):
    path, body = ("/completions", completion(name)) if kind == "completions" else ("/chat/completions", chat(name))
    _, _, direct = await ask(upstream, path, body)
    async with running(upstream, rate=1.0, classes=("no_logprobs",)) as proxy:
        status, _, raw = await ask(proxy.base_url, path, body)
    choice, want = json.loads(raw)["choices"][0], json.loads(direct)["choices"][0]
    assert status == 200 and choice["logprobs"] is None and want["logprobs"] is not None
    assert {k: v for k, v in choice.items() if k != "logprobs"} == {k: v for k, v in want.items() if k != "logprobs"}
    assert proxy.stats.upstream_requests == 1 and proxy.stats.injected == {"no_logprobs": 1}


@pytest.mark.parametrize("kind", ["completions", "chat"])
@pytest.mark.parametrize(("fault", "token"), [("nan", b"NaN"), ("inf", b"-Infinity")])
async def test_nan_and_inf_replace_exactly_one_logprob_with_a_bare_token(upstream, name, kind, fault, token):
    path, body = ("/completions", completion(name)) if kind == "completions" else ("/chat/completions", chat(name))
    _, _, direct = await ask(upstream, path, body)
    async with running(upstream, rate=1.0, classes=(fault,)) as proxy:
        status, _, raw = await ask(proxy.base_url, path, body)
    assert status == 200 and raw.count(token) == 1 and b'"' + token not in raw
    with pytest.raises(ValueError):  # not strict JSON
        json.loads(raw, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    got, want = logprob_values(json.loads(raw)["choices"][0]), logprob_values(json.loads(direct)["choices"][0])
    changed = [j for j, (a, b) in enumerate(zip(got, want)) if a != pytest.approx(b, abs=1e-6)]
    assert len(got) == len(want) and len(changed) == 1
    bad = got[changed[0]]
    assert math.isnan(bad) if fault == "nan" else bad == -math.inf
    assert proxy.stats.upstream_requests == 1 and proxy.stats.injected == {fault: 1}


async def test_altering_faults_pass_upstream_errors_through(upstream, name):
    async with running(upstream, rate=1.0, classes=("no_logprobs", "nan", "inf", "truncated")) as proxy:
        for _ in range(4):
            status, _, raw = await ask(proxy.base_url, "/completions", completion(name, logprobs=99))
            assert status == 400 and json.loads(raw)["error"]["param"] == "logprobs"
    assert proxy.stats.upstream_requests == 4 and not proxy.stats.injected


async def test_same_seed_gives_the_same_fault_sequence(upstream, name):
    classes = ("429", "500", "drop", "truncated", "no_logprobs", "nan")
    runs = []
    for _ in range(2):
        async with running(upstream, rate=0.6, classes=classes, seed=3) as proxy:
            statuses = []
            for _ in range(12):
                try:
                    statuses.append((await ask(proxy.base_url, "/completions", completion(name)))[0])
                except aiohttp.ClientError:
                    statuses.append(None)
        runs.append((proxy.stats.outcomes, statuses, proxy.stats.upstream_requests))
    config = FaultConfig(upstream=upstream, rate=0.6, classes=classes, seed=3)
    want = [draw_fault(config, i) or "ok" for i in range(12)]
    assert runs[0] == runs[1] and runs[0][0] == want
    assert len(set(want)) >= 4  # the sequence mixes faults and clean answers
    assert runs[0][2] == sum(o not in ("429", "500", "drop") for o in want)


def test_proxy_in_background_from_sync_code(upstream, name):
    with proxy_in_background(FaultConfig(upstream=upstream, rate=1.0, classes=("503",))) as proxy:
        assert proxy.base_url.startswith("http://127.0.0.1:") and proxy.base_url.endswith("/v1")
        request = urllib.request.Request(proxy.base_url + "/completions", data=json.dumps(completion(name)).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 503
    assert proxy.stats.injected == {"503": 1} and proxy.stats.upstream_requests == 0


async def test_delivered_counts_whole_unaltered_answers_and_repaid_counts_later_payments(upstream, name):
    body, other = completion(name), completion(name, max_tokens=1)
    digest, other_digest = body_hash(json.dumps(body).encode()), body_hash(json.dumps(other).encode())
    async with running(upstream, rate=0.0) as proxy:
        for request in (body, other, body):
            assert (await ask(proxy.base_url, "/completions", request))[0] == 200
        refused = completion(name, logprobs=99)
        assert (await ask(proxy.base_url, "/completions", refused))[0] == 400
    assert proxy.stats.by_body[body_hash(json.dumps(refused).encode())] == 1  # forwarded...
    assert proxy.stats.answered == {digest: 2, other_digest: 1}  # ...but not answered 200
    assert proxy.stats.delivered == {digest: 2, other_digest: 1}  # nor delivered
    assert proxy.stats.repaid == {digest: 1}
    async with running(upstream, rate=1.0, classes=("nan", "truncated", "503")) as proxy:
        for _ in range(4):
            with contextlib.suppress(aiohttp.ClientError):
                await ask(proxy.base_url, "/completions", body)
    assert proxy.stats.upstream_requests > 0 and not proxy.stats.delivered and not proxy.stats.repaid


async def test_an_answer_the_client_gave_up_on_is_not_delivered(upstream, name):
    async with running(upstream, rate=0.0) as proxy:
        proxy.pause()
        with pytest.raises(asyncio.TimeoutError):
            await ask(proxy.base_url, "/completions", completion(name), timeout=0.2)
        proxy.resume()
        await asyncio.sleep(0.2)
    assert proxy.stats.requests == 1 and proxy.stats.upstream_requests == 0  # its client had left: not paid
    assert not proxy.stats.delivered


async def test_pause_holds_requests_until_resume(upstream, name):
    async with running(upstream, rate=0.0) as proxy:
        proxy.pause()
        pending = asyncio.create_task(ask(proxy.base_url, "/completions", completion(name)))
        await asyncio.sleep(0.3)
        assert not pending.done() and proxy.stats.requests == 1 and proxy.stats.upstream_requests == 0
        proxy.resume()
        status, _, _ = await pending
    assert status == 200 and proxy.stats.upstream_requests == 1 and sum(proxy.stats.delivered.values()) == 1


async def test_a_stall_ends_once_its_client_has_left(upstream, name):
    async with running(upstream, rate=1.0, classes=("stall",), stall_s=30.0) as proxy:
        with pytest.raises(asyncio.TimeoutError):
            await ask(proxy.base_url, "/completions", completion(name), timeout=0.2)
        await asyncio.sleep(0.3)
        handlers = [t for t in asyncio.all_tasks() if "_handle_request" in repr(t.get_coro())]
        assert not handlers  # not held for 30 s on a connection nobody reads
    assert proxy.stats.injected == {"stall": 1} and proxy.stats.upstream_requests == 0
