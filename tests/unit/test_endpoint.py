"""Endpoint requests against `bbmia serve` on a local model: generation equals the local model's
greedy continuation, in the prompt form the tracker uses (ids with BOS, or text)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.endpoint import Endpoint, with_bos
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.tokenizers import HFTokenCodec

from ..conftest import gsm8k_questions

STEPS = 5  # generated tokens compared


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


@pytest.fixture(scope="module")
def url(local, peaked_model_dir):
    with serve_in_background(ServerConfig(str(peaked_model_dir)), backend=local) as url:
        yield url


def local_greedy(local: LocalBackend, prefix: list[int], steps: int) -> list[int]:
    """The local model's greedy continuation of ``prefix`` (white-box argmax, step by step)."""
    ids = list(prefix)
    for _ in range(steps):
        ids.append(int(np.argmax(local.next_token_logprobs([ids])[0])))
    return ids[len(prefix):]


def generate(url, model_dir, kind, token_id_prompts, prompt, cache=None, **kw):
    async def run():
        config = ApiConfig(base_url=url, model=str(model_dir), endpoint=kind, max_retries=0)
        async with ApiClient(config, cache) as client:
            endpoint = Endpoint(client, HFTokenCodec.load(str(model_dir)), kind, token_id_prompts)
            return await endpoint.generate(prompt, **kw), client.usage.requests

    return asyncio.run(run())


@pytest.mark.parametrize(("kind", "token_id_prompts"), [("completions", True), ("completions", False), ("chat", False)])
def test_greedy_generation_equals_the_local_greedy_continuation(url, local, peaked_model_dir, kind, token_id_prompts):
    codec = HFTokenCodec.load(str(peaked_model_dir))
    prompt = codec.encode(gsm8k_questions(1, split="test")[0][:30])
    sent = with_bos(codec, prompt, token_id_prompts and kind == "completions")
    assert len(sent) == len(prompt) + (kind == "completions" and token_id_prompts)  # BOS only with id prompts
    want = local_greedy(local, sent, STEPS)
    answer, requests = generate(url, peaked_model_dir, kind, token_id_prompts, prompt, max_new_tokens=STEPS)
    assert requests == 1 and not answer["cached"]
    assert answer["text"] == codec.decode(want)
    assert answer["finish_reason"] == "length" and answer["usage"]["completion_tokens"] == STEPS
    assert answer["tokens"] and [t["logprob"] for t in answer["tokens"]] == pytest.approx(
        [float(local.next_token_logprobs([sent + want[:j]])[0][want[j]]) for j in range(STEPS)], abs=1e-4
    )  # top_n = 0: the chosen token's log-prob, the white-box value


def test_no_logprobs_and_a_seed_reach_the_body(url, peaked_model_dir, tmp_path):
    codec = HFTokenCodec.load(str(peaked_model_dir))
    prompt = codec.encode("Natalia sold clips")
    plain, _ = generate(url, peaked_model_dir, "completions", True, prompt, max_new_tokens=3, top_n=None)
    assert plain["tokens"] == []  # no log-probs asked
    requests = [
        generate(url, peaked_model_dir, "completions", True, prompt, ResponseCache(tmp_path), max_new_tokens=4,
                 temperature=1.0, seed=seed)[1]
        for seed in (1, 1, 2, None)
    ]
    assert requests == [1, 0, 1, 1]  # the seed is part of the body (and so of the cache key)
