"""Post-bias read-out (tracker/postbias.py): the closed form on hand-computed values, the guard
near p' → 1, and bounds that hold on exact, bfloat16-rounded and inconsistent servers."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.precision import round_to
from blackbox_mia.backends.api.tracker.postbias import guard_bias, unbias
from blackbox_mia.backends.api.tracker.strategies import Position
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig
from blackbox_mia.emulator.sampling import Sampling, choose

from .test_tracker_trust import FakeEndpoint

# endpoint, top_n, token_id_prompts, echo, bias_forces, reported, forced_readout, postbias_solve, bisect
POST = Capabilities("completions", 3, True, False, True, "post-bias", False, True, False)


class Rounded(FakeEndpoint):
    """A post-bias fake whose every reported value is rounded to ``precision`` (a short float)."""

    def __init__(self, logprobs, precision):
        super().__init__(logprobs, pre_bias=False)
        self.precision = precision

    async def next_token(self, prefix, top_n, bias=None):
        answer = await super().next_token(prefix, top_n, bias)
        values = round_to(np.asarray([answer.sampled_logprob] + [e.logprob for e in answer.top]), self.precision)
        return NextToken(answer.sampled, float(values[0]),
                         tuple(Listed(e.ids, float(v)) for e, v in zip(answer.top, values[1:])))


class Raw(FakeEndpoint):
    """A server that claims post-bias values but lists every token at its unbiased value."""

    async def next_token(self, prefix, top_n, bias=None):
        answer = await super().next_token(prefix, top_n, bias)
        sampled = int(np.argmax(self.logprobs + np.asarray([(bias or {}).get(i, 0.0) for i in range(10)])))
        return NextToken(answer.sampled, float(self.logprobs[sampled]), answer.top)


def solve(endpoint, target, caps=POST, strategy="postbias"):
    tracker = Tracker(endpoint, caps, TrackerConfig(strategy=strategy))
    return asyncio.run(tracker._resolve(Position([0], target), strategy))


def with_target(values, target, logprob):
    """Log-probs over 10 tokens from ``values`` with ``target`` set to ``logprob`` exactly."""
    values = np.log(np.asarray(values, dtype=np.float64))
    rest = np.delete(values, target)
    rest = rest - np.logaddexp.reduce(rest) + math.log1p(-math.exp(logprob))
    return np.insert(rest, target, logprob)


def test_closed_form_on_hand_computed_values():
    # p = 0.2, b = ln 4: p' = 0.8 / (0.8 + 0.8) = 1/2; p = 0.9, b = ln 9: p' = 8.1 / 8.2
    assert unbias(math.log(0.5), math.log(4)) == pytest.approx(math.log(0.2), abs=1e-14)
    assert unbias(math.log(8.1 / 8.2), math.log(9)) == pytest.approx(math.log(0.9), abs=1e-14)
    # p = 0.999, b = 10: 1 − p' = 0.001 / (0.001 + 0.999 e^10) = 4.5445e-8, still solved exactly
    near_one = math.log1p(-0.001 / (0.001 + 0.999 * math.exp(10)))
    assert near_one == pytest.approx(-4.5445e-8, rel=1e-4)
    assert unbias(near_one, 10.0) == pytest.approx(math.log(0.999), abs=1e-10)
    # a negative bias works the same: p = 0.5, b = −ln 3: p' = 0.5/3 / (0.5 + 0.5/3) = 1/4
    assert unbias(math.log(0.25), -math.log(3)) == pytest.approx(math.log(0.5), abs=1e-14)
    assert unbias(np.asarray([0.0, -np.inf]), 5.0).tolist() == [0.0, -np.inf]


def test_guard_bias_from_the_measured_precision():
    # float32 arithmetic near 0: δ0 = 2^-24, ε = 0.01: R = 0.01 · 2^23 = 83886.08, b = ln R for any p
    assert guard_bias(2.0**-24, 0.01, 100.0) == pytest.approx(math.log(83886.08), abs=1e-9)
    # targets known to be below p = 1e-3 take more: log1p(83885.08 / 1e-3)
    assert guard_bias(2.0**-24, 0.01, 100.0, 1e-3) == pytest.approx(math.log1p(83885.08e3), abs=1e-9)
    assert guard_bias(2.0**-24, 0.01, 12.0, 1e-3) == 12.0  # the cap
    # bfloat16 (δ0 = 2^-8): ε cannot be reached (R = 1.28): the amplification is held to 2: b = ln 2
    assert guard_bias(2.0**-8, 0.01, 100.0) == pytest.approx(math.log(2), abs=1e-12)


@pytest.mark.parametrize("logprob", [-1e-3, -0.05, -1.5, -6.0, -25.0, -60.0])
def test_one_request_where_listed_and_exact(logprob):
    endpoint = FakeEndpoint(with_target([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], 4, logprob), pre_bias=False)
    estimate = solve(endpoint, 4)
    truth = endpoint.logprobs[4]
    assert estimate.strategy == "postbias" and estimate.value == pytest.approx(truth, abs=1e-9)
    assert estimate.lower <= truth <= estimate.upper and estimate.upper - estimate.lower <= 0.01
    # one request at the guarded bias (ln 83886 = 11.34 nats) lists any target above ~ −11 nats
    # here; an unlisted one is asked again ~12.9 nats higher each time (ln R + the 3rd value's
    # magnitude): −25 nats one more request, −60 four more
    assert endpoint.calls == {-25.0: 2, -60.0: 5}.get(logprob, 1)


def test_near_one_the_first_answer_is_within_epsilon():
    """p = 1 − 1e-7: at b = 11.34 nats, 1 − p' ≈ 1.2e-12, far below float32's 2^-24 near 0; the
    interval [f(lp' − δ), 0] is still within ε (the guard), the value exact."""
    endpoint = FakeEndpoint(with_target([1] * 10, 2, math.log1p(-1e-7)), pre_bias=False)
    estimate = solve(endpoint, 2)
    assert endpoint.calls == 1
    assert estimate.lower <= endpoint.logprobs[2] <= estimate.upper == 0.0
    assert estimate.upper - estimate.lower <= 0.01


def test_bfloat16_server_bounds_hold_and_the_bias_is_reaimed():
    caps = Capabilities("completions", 3, True, False, True, "post-bias", False, True, False, report_bits=8)
    for logprob in (-1e-4, -0.02, -0.3, -2.0, -7.5, -19.0):
        endpoint = Rounded(with_target([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], 4, logprob), "bfloat16")
        estimate = solve(endpoint, 4, caps)
        truth = endpoint.logprobs[4]
        assert estimate.strategy == "postbias" and estimate.lower <= truth <= estimate.upper, logprob
        assert abs(estimate.value - truth) <= 0.08
    # p = 1/2: at b = ln 2, p' = 2/3 and the interval is ~0.016 nats wide (> ε); re-aimed at
    # logit(p') = 0 (b = 0 here) a second answer narrows it to 2·(1.69 · 2^-8) = 0.013 nats, the
    # best bfloat16 allows at p' = 1/2 (ε = 0.01 is out of reach: the bounds say so)
    endpoint = Rounded(with_target([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], 4, math.log(0.5)), "bfloat16")
    estimate = solve(endpoint, 4, caps)
    assert endpoint.calls == 2 and 0.01 < estimate.upper - estimate.lower < 0.014
    assert estimate.lower <= endpoint.logprobs[4] <= estimate.upper


def test_an_answer_that_is_not_post_bias_is_not_used():
    """Values listed at their unbiased level under a bias: the sampled target is not the largest
    value listed, so the answer is not used: the unbiased top-n's bound instead."""
    endpoint = Raw(with_target([90, 3, 2, 1, 1, 1, 1, 1, 1, 1], 0, math.log(0.9)), pre_bias=False)
    estimate = solve(endpoint, 4)
    truth = endpoint.logprobs[4]
    assert estimate.strategy == "topn-bound" and estimate.lower == -math.inf and truth <= estimate.upper


class HalfBias(FakeEndpoint):
    """A post-bias server that reports values as if half the bias had been applied."""

    async def next_token(self, prefix, top_n, bias=None):
        answer = await super().next_token(prefix, top_n, {t: b / 2 for t, b in (bias or {}).items()})
        return NextToken(answer.sampled, answer.sampled_logprob, answer.top)


def test_a_solve_that_disagrees_with_the_known_unbiased_answer_is_not_used():
    endpoint = HalfBias(with_target([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], 8, -6.0), pre_bias=False)
    tracker = Tracker(endpoint, POST, TrackerConfig(strategy="postbias"))
    wrong = asyncio.run(tracker._resolve(Position([0], 8), "postbias"))
    assert wrong.value < -11.5  # alone, nothing tells: logit shifted by b/2 = 5.67 nats too far
    known = asyncio.run(FakeEndpoint(endpoint.logprobs).next_token([0], 3))
    estimate = asyncio.run(tracker._resolve(Position([0], 8, unbiased=known), "postbias"))
    assert estimate.strategy == "topn-bound" and -6.0 <= estimate.upper


def test_auto_reads_post_bias_with_one_request_and_reuses_a_known_answer():
    endpoint = FakeEndpoint(with_target([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], 8, -4.0), pre_bias=False)
    assert solve(endpoint, 8, strategy="auto").strategy == "postbias" and endpoint.calls == 1
    tracker = Tracker(endpoint, POST, TrackerConfig(strategy="auto"))
    known = asyncio.run(endpoint.next_token([0], 3))
    listed = next(iter(known.top[1].ids))
    estimate = asyncio.run(tracker._resolve(Position([0], listed, unbiased=known), "auto"))
    assert estimate.strategy == "topn" and endpoint.calls == 2  # read from the known answer


def test_emulator_processed_mode_reports_what_the_closed_form_inverts():
    """The emulator's post-bias mode (choose, mode "processed") reports log_softmax(row + bias):
    the closed form gives back the row's value for a listed and for the sampled target."""
    row = np.log(np.asarray([0.5, 0.2, 0.1, 0.08, 0.06, 0.03, 0.02, 0.01]))
    for target, bias in ((6, 3.0), (6, 11.34), (0, 11.34), (0, -1.0)):
        step = choose(row, Sampling(1, 0.0, 3, {target: bias}), "processed", np.random.default_rng(0))
        value = step.logprob if step.token == target else dict(step.top)[target]
        # float64's 2^-53 amplified by up to e^b (1 − p' ≈ 1.2e-5 for the argmax at b = 11.34)
        assert unbias(value, bias) == pytest.approx(row[target], abs=1e-10)
