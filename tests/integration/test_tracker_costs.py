"""Cost before spending: the API backend's estimate against what the run really bills through
`bbmia serve` (exact for echo and forced read-out, within the stated uncertainty for bisection),
and zeros for a local model."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.cost.estimate import CostEstimate
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..conftest import gsm8k_questions

PRICE = (2.0, 8.0)  # USD per 1M prompt / completion tokens


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


def test_a_local_model_costs_nothing(local):
    assert local.estimate_cost(["Natalia sold clips"]) == CostEstimate()


@pytest.mark.parametrize(("echo", "strategy", "context"), [(True, "auto", None), (False, "forced", None),
                                                           (False, "forced", 16), (False, "bisect", None)])
def test_estimate_matches_the_bill(local, peaked_model_dir, tmp_path, echo, strategy, context):
    texts = [q[:50] for q in gsm8k_questions(2, split="test")]
    with serve_in_background(ServerConfig(str(peaked_model_dir), echo=echo), backend=local) as url:
        config = ApiConfig(base_url=url, model=str(peaked_model_dir), max_retries=1,
                           prices={str(peaked_model_dir): PRICE})
        backend = ApiBackend(config, tokenizer=str(peaked_model_dir), cache_dir=tmp_path,
                             tracker=TrackerConfig(strategy=strategy, context=context))
        estimate = backend.estimate_cost(texts)
        before = backend.usage.to_dict()
        backend.logprobs(texts)
        after = backend.usage.to_dict()
        backend.close()
    spent = {k: after[k] - before[k] for k in ("requests", "prompt_tokens", "completion_tokens", "cost_usd")}
    tokens = sum(len(local.encode(t)) for t in texts)
    if strategy == "bisect":
        assert estimate.strategy == "bisect" and estimate.relative_uncertainty > 0
        assert abs(estimate.requests - spent["requests"]) <= 2 * estimate.relative_uncertainty * spent["requests"]
        return
    assert estimate.strategy == ("prompt" if echo else "forced") and estimate.relative_uncertainty == 0
    assert (estimate.requests, estimate.prompt_tokens, estimate.completion_tokens) == (
        spent["requests"], spent["prompt_tokens"], spent["completion_tokens"])
    assert estimate.usd == pytest.approx(spent["cost_usd"]) and not estimate.unpriced
    if echo:  # one request per text, the whole text (BOS included) as the prompt
        assert estimate.requests == 2 and estimate.prompt_tokens == tokens + 2
    elif context is None:  # one request per token, every prefix billed: sum over texts of N(N+1)/2
        assert estimate.requests == tokens
        assert estimate.prompt_tokens == sum(n * (n + 1) // 2 for n in (len(local.encode(t)) for t in texts))
