"""Bisection with fewer requests per token: listed targets read from the top-n, ε-aligned
galloping, re-checks sampled on a reproducible endpoint and on everywhere once a flip did not
reproduce; bounds stay true (hand-computed values on a synthetic endpoint)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.strategies import (
    CHECK_LEADING,
    FlipChecks,
    Position,
    first_step,
)
from blackbox_mia.backends.api.tracker import Tracker, TrackerConfig

from .test_tracker import SyntheticEndpoint

CAPS = Capabilities("completions", 2, True, False, True, "pre-bias", False, False, True)
NOISY = Capabilities("completions", 2, True, False, True, "pre-bias", False, False, True, flips_reproducible=False)


def distribution(gap: float) -> np.ndarray:
    """Token 0 the argmax, token 1 listed second, token 3 exactly ``gap`` nats below the argmax."""
    values = np.log(np.array([0.6, 0.3, 0.05, 0.05]))
    values[3] = values[0] - gap
    return values - np.logaddexp.reduce(values)


def bisect(endpoint, prefix, target, caps=CAPS, **config):
    tracker = Tracker(endpoint, caps, TrackerConfig(strategy="bisect", epsilon=0.01, **config))
    return asyncio.run(tracker._resolve(Position(prefix, target), "bisect")), tracker


def test_first_step_makes_the_bracket_end_at_epsilon():
    assert first_step(0.01) == pytest.approx(1.28)
    assert first_step(0.5) == 1.0 and first_step(1.0) == 1.0 and first_step(3.0) == 3.0


def test_a_listed_target_costs_the_unbiased_request_only():
    endpoint = SyntheticEndpoint(distribution(5.0))
    estimate, _ = bisect(endpoint, [0, 5, 6, 7], 1)
    assert endpoint.calls == 1 and estimate.strategy == "topn"
    assert estimate.value == estimate.lower == estimate.upper == pytest.approx(endpoint.logprobs[1])


def test_unchecked_bisection_cost_and_exact_epsilon_bracket():
    """gap 5 nats: p = (0.6, 0.3, 0.05, 0.6 e^-5) / 0.95404; top-2 listed (0.6289, 0.3145), so the
    top-n bound is lp_3 ≤ log(1 − 0.9434) = lp_0 − 2.408 and b* = 5 lies in (2.408, ...]: gallop
    to 2.408 + 1.28 = 3.688 (no flip), + 2.56 = 6.248 (flip), then halve 2.56 nats to ε = 0.01
    (8 requests): 1 unbiased + 2 + 8 = 11, and the bracket is ε wide around the truth."""
    logprobs = distribution(5.0)
    prefix = [0, 5, 6, 7]  # past the leading positions; crc32 of prefix + target is not sampled
    assert not FlipChecks(False, 32).wanted(Position(prefix, 3))
    endpoint = SyntheticEndpoint(logprobs)
    estimate, _ = bisect(endpoint, prefix, 3)
    assert estimate.strategy == "bisect" and endpoint.calls == 11
    assert estimate.upper - estimate.lower == pytest.approx(0.01, abs=1e-6)
    assert estimate.lower <= logprobs[3] <= estimate.upper
    checked = SyntheticEndpoint(logprobs)
    again, _ = bisect(checked, prefix, 3, verify_every=1)
    assert checked.calls == 11 + 4 and (again.lower, again.upper) == (estimate.lower, estimate.upper)


def test_leading_positions_and_an_unreproducible_endpoint_are_always_checked():
    logprobs = distribution(5.0)
    assert len([0]) <= CHECK_LEADING < len([0, 5])
    leading = SyntheticEndpoint(logprobs)
    bisect(leading, [0], 3)
    assert leading.calls == 15  # 11 + 2 ends × 2 repeats
    noisy_probe = SyntheticEndpoint(logprobs)
    bisect(noisy_probe, [0, 5, 6, 7], 3, caps=NOISY)
    assert noisy_probe.calls == 15
    off = SyntheticEndpoint(logprobs)
    bisect(off, [0], 3, verify_flips=False)
    assert off.calls == 11


def test_a_flip_that_does_not_reproduce_turns_checks_on_for_the_rest_of_the_run():
    logprobs = distribution(6.0)
    noisy = SyntheticEndpoint(logprobs, noise=0.02, seed=3)
    tracker = Tracker(noisy, CAPS, TrackerConfig(strategy="bisect", epsilon=0.01))
    bisect_ = tracker.strategies["bisect"]
    seen = []
    for seed in range(20):  # the leading position is checked; noise shows up within a few
        noisy.rng = np.random.default_rng(seed)
        seen.append(asyncio.run(tracker._resolve(Position([0], 3), "bisect")))
        if bisect_.checks.always:
            break
    assert seen[-1].strategy == "bisect~" and bisect_.checks.always
    assert seen[-1].lower <= logprobs[3] <= seen[-1].upper
    # from now on an unsampled position is re-checked too
    assert bisect_.checks.wanted(Position([0, 5, 6, 7], 3))


def test_far_targets_keep_a_true_bound():
    logprobs = distribution(150.0)  # beyond the ±100 bias range
    estimate, _ = bisect(SyntheticEndpoint(logprobs), [0, 5, 6, 7], 3)
    assert estimate.strategy == "bisect>cap" and estimate.lower == -math.inf
    assert logprobs[3] <= estimate.upper <= logprobs[0] - 100 + 1e-9


def test_mean_precision_lets_listed_targets_pay_for_wider_brackets():
    """Targets 0 (argmax), 1 (listed), 3, 3 (gap 5, unlisted): the two listed lend 2ε, so each
    unlisted stops at 2ε = 0.02 (one halving fewer: 2 gallop + 7 instead of 8) and the window's
    mean width is ε; 4 unbiased + 2 × 9 = 22 requests instead of 24."""
    logprobs = distribution(5.0)
    seq = [0, 0, 1, 3, 3]
    widths, calls = {}, {}
    for precision in ("token", "mean"):
        endpoint = SyntheticEndpoint(logprobs)
        tracker = Tracker(endpoint, CAPS, TrackerConfig(strategy="bisect", epsilon=0.01, verify_flips=False,
                                                        precision=precision))
        tracker.sequence = lambda text: seq
        [result] = asyncio.run(tracker.track(["x"]))
        widths[precision], calls[precision] = result.upper - result.lower, endpoint.calls
        assert np.all(result.lower <= logprobs[seq[1:]] + 1e-12) and np.all(logprobs[seq[1:]] <= result.upper + 1e-12)
    assert calls == {"token": 24, "mean": 22}
    np.testing.assert_allclose(widths["token"], [0, 0, 0.01, 0.01], atol=1e-6)
    np.testing.assert_allclose(widths["mean"], [0, 0, 0.02, 0.02], atol=1e-6)
    assert widths["mean"].mean() == pytest.approx(0.01, abs=1e-6)
