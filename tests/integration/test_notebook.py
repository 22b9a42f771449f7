"""The public Python API as a notebook uses it: sync calls made while an event loop is running
(as in a Jupyter cell), and ``await`` of the async forms, against `bbmia serve` and a local
model; constructing an API backend sends nothing."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import blackbox_mia
from blackbox_mia.backends.loop import LoopThread
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..conftest import gsm8k_questions

EXACT = 1e-4  # nats: the tracker's bounds hold the white-box value within the server's rounding
SCORERS = "loss,zlib,min_k"


@pytest.fixture(scope="module")
def texts():
    return [q[:50] for q in gsm8k_questions(4, split="test")]


@pytest.fixture(scope="module")
def served(peaked_model_dir):
    """``(local, api)`` built through the public API; the API backend reaches `bbmia serve`."""
    from blackbox_mia import build_backend

    local = build_backend(f"local:{peaked_model_dir}")
    with serve_in_background(ServerConfig(str(peaked_model_dir), echo=False), backend=local) as url:
        yield local, url


def api_backend(url, model_dir, cache_dir):
    from blackbox_mia import ApiOptions, build_backend

    return build_backend(f"api:{model_dir}@{url}", ApiOptions(tokenizer=str(model_dir), cache_dir=cache_dir))


def assert_within_bounds(black, white):
    for b, w in zip(black, white):
        assert b.token_ids.tolist() == w.token_ids.tolist() and b.tokens == w.tokens
        assert np.all(b.lower - EXACT <= w.logprobs) and np.all(w.logprobs <= b.upper + EXACT)


def test_import_is_light_and_exports_the_api():
    assert {"build_backend", "score_texts", "LocalBackend", "ApiBackend", "parse_scorers"} <= set(dir(blackbox_mia))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        blackbox_mia.nope  # noqa: B018 - the attribute access is the test


def test_sync_api_inside_a_running_event_loop(served, peaked_model_dir, texts, tmp_path):
    from blackbox_mia import parse_scorers, score_texts

    local, url = served
    scorers = parse_scorers(SCORERS)

    async def cell():  # a Jupyter cell: the kernel's loop is running, the calls are blocking ones
        asyncio.get_running_loop()
        api = api_backend(url, peaked_model_dir, tmp_path)
        try:
            white = score_texts(texts, scorers, {"target": local})
            black = score_texts(texts, scorers, {"target": api})
            generated = api.generate(texts[:2], max_new_tokens=4)
            return white, black, generated, api.usage.requests
        finally:
            api.close()

    white, black, generated, requests = asyncio.run(cell())
    assert requests > 0
    assert_within_bounds([lp for _, lp in black], [lp for _, lp in white])
    for (ws, _), (bs, _) in zip(white, black):
        assert bs["loss"].value == pytest.approx(ws["loss"].value, abs=EXACT)  # forced readout: exact per token
    assert [g.text for g in generated] == [g.text for g in local.generate(texts[:2], max_new_tokens=4)]


def test_async_api_with_await(served, peaked_model_dir, texts, tmp_path):
    local, url = served

    async def cell():
        api = api_backend(url, peaked_model_dir, tmp_path)
        ticks = 0
        done = asyncio.Event()

        async def ticker():  # the notebook's loop keeps running while the backends work
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        try:
            capabilities = await api.aprobe()
            white, black = await asyncio.gather(local.alogprobs(texts * 5), api.alogprobs(texts))
            greedy = await api.agenerate(texts[:1], max_new_tokens=3)
        finally:
            done.set()
            await tick
            api.close()
        return capabilities, white, black, greedy, ticks

    capabilities, white, black, greedy, ticks = asyncio.run(cell())
    assert capabilities.strategies()[:2] == ["run", "topn"] and ticks > 1  # run reading first, verified by the probe
    assert_within_bounds(black, white[: len(texts)])
    assert greedy[0].token_ids.tolist() == local.generate(texts[:1], max_new_tokens=3)[0].token_ids.tolist()


def test_constructing_an_api_backend_sends_nothing(peaked_model_dir, tmp_path):
    from blackbox_mia import ApiBackend, ApiConfig, BlackboxMIAError

    config = ApiConfig(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, backoff_base_s=0.01)
    api = ApiBackend(config, tokenizer=str(peaked_model_dir), cache_dir=tmp_path)  # nothing listens there
    assert api.usage.requests == 0 and not (tmp_path / "capabilities").exists()
    with pytest.raises(BlackboxMIAError, match="connection refused at http://127.0.0.1:9"):
        api.logprobs(["Tom has 3 apples."])
    with pytest.raises(BlackboxMIAError, match="connection refused at http://127.0.0.1:9"):
        api.generate(["Tom has"], max_new_tokens=2)
    api.close()
    api.close()  # idempotent


def test_on_done_runs_on_the_backends_thread_and_cannot_block_on_it(served, texts):
    local, _ = served
    threads = []

    def on_done(i, lp):
        threads.append(threading.current_thread().name)

    local.logprobs(texts, on_done=on_done)
    assert threads == ["bbmia-LocalBackend"] * len(texts)

    def nested(i, lp):
        local.logprobs(texts[:1])  # a blocking call waiting for the thread it runs on

    with pytest.raises(blackbox_mia.BlackboxMIAError, match="use the async method"):
        local.logprobs(texts[:1], on_done=nested)


def test_cancelling_an_await_cancels_the_work():
    loop = LoopThread("test-loop")
    started, cancelled = threading.Event(), threading.Event()

    async def slow():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def caller():
        task = asyncio.create_task(loop.acall(slow()))
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    assert cancelled.wait(5)
    loop.close()
