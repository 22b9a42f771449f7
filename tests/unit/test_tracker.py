"""The logit_bias tracker's bisection against a synthetic endpoint (exact logits, optional serving
noise), no server; its shared :class:`SyntheticEndpoint` serves the other tracker unit tests.
Against `bbmia serve`: tests/integration/test_tracker_emulator.py."""

from __future__ import annotations

import asyncio
import math

import numpy as np

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.tracker.strategies import Position
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig


# -- a synthetic endpoint: exact logits, optional serving noise ---------------------------------


class SyntheticEndpoint:
    """Greedy answers from fixed log-probs, with Gaussian noise on every request's logits; counts
    requests. ``logprobs``: the (V,) distribution after every prefix, or a function of the
    prefix's last token giving it (then ``next_tokens`` continues greedily, the bias on every step).
    Reports are pre-bias."""

    token_id_prompts = True

    def sendable(self, prefix):
        return True

    def may_bias(self, token_id):  # synthetic tokens have no bytes: none ends inside a character
        return True

    def __init__(self, logprobs, noise: float = 0.0, seed: int = 0):
        self.logprobs = logprobs
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.codec = type("Codec", (), {"bos_id": 0, "token_string": staticmethod(str), "encode": None})()
        self.client = type("Client", (), {"config": type("C", (), {"model": "synthetic", "concurrency": 2})()})()

    def row(self, last: int) -> np.ndarray:
        return self.logprobs(last) if callable(self.logprobs) else self.logprobs

    async def next_token(self, prefix, top_n, bias=None):
        return (await self.next_tokens(prefix, 1, top_n, bias))[0]

    async def next_tokens(self, prefix, k, top_n, bias=None):
        self.calls += 1
        out, last = [], prefix[-1]
        for _ in range(k):
            lp = self.row(last)
            noisy = lp + self.rng.normal(0, self.noise, lp.shape) if self.noise else lp.copy()
            for token, b in (bias or {}).items():
                noisy[token] += b
            order = np.argsort(-lp)[:top_n]
            top = tuple(Listed(frozenset({int(i)}), float(lp[i])) for i in order)
            last = int(np.argmax(noisy))
            out.append(NextToken(frozenset({last}), float(lp[last]), top))
        return out


CAPS = Capabilities("completions", 2, True, False, True, "pre-bias", False, False, True)


def bisect_one(endpoint, target, repeats=1):
    config = TrackerConfig(strategy="bisect", epsilon=0.01, verify_repeats=repeats)
    tracker = Tracker(endpoint, CAPS, config)
    return asyncio.run(tracker._resolve(Position([0], target), "bisect"))


def test_bisection_recovers_far_tokens_and_flags_the_cap():
    logprobs = np.log(np.array([0.9, 0.09] + [0.01 / 8] * 8))
    logprobs[5] = logprobs[0] - 37.25  # far below the top-n
    logprobs[6] = logprobs[0] - 150.0  # beyond the ±100 bias range
    logprobs -= np.logaddexp.reduce(logprobs)
    endpoint = SyntheticEndpoint(logprobs, noise=0.0)
    near = bisect_one(endpoint, 5)
    assert near.strategy == "bisect" and near.lower <= logprobs[5] <= near.upper
    assert near.upper - near.lower <= 0.01
    capped = bisect_one(endpoint, 6)
    assert capped.strategy == "bisect>cap" and capped.lower == -math.inf
    assert logprobs[6] <= capped.upper <= logprobs[0] - 100 + 1e-9


def test_non_reproducible_flips_widen_bounds_not_value():
    """Logit noise of 0.02 nats per request (σ) against ε = 0.01: flips near b* do not reproduce."""
    logprobs = np.log(np.array([0.7, 0.2, 0.05, 0.05]))
    logprobs[3] = logprobs[0] - 6.0
    endpoint = SyntheticEndpoint(logprobs, noise=0.02)
    covered = widened = 0
    for seed in range(40):
        endpoint.rng = np.random.default_rng(seed)
        estimate = bisect_one(endpoint, 3, repeats=3)
        covered += estimate.lower <= logprobs[3] <= estimate.upper
        widened += estimate.strategy == "bisect~"
        assert abs(estimate.value - logprobs[3]) < 0.1  # widened, never wildly wrong
    assert widened >= 30  # the noise is caught almost every time
    assert covered >= 38  # and the widened bounds hold the true value
    quiet = SyntheticEndpoint(logprobs, noise=0.0)
    exact = bisect_one(quiet, 3, repeats=3)
    assert exact.strategy == "bisect" and exact.upper - exact.lower <= 0.01
