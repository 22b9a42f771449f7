"""Bisection with fewer requests per token: listed targets read from the top-n, ε-aligned
galloping, re-checks sampled on a reproducible endpoint and on everywhere once a flip did not
reproduce; bounds stay true (hand-computed values on a synthetic endpoint)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.tracker.flips import CHECK_LEADING, FlipChecks, first_step
from blackbox_mia.backends.api.tracker.refine import score_widths, to_refine
from blackbox_mia.backends.api.tracker.strategies import Position
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig
from blackbox_mia.scorers.bounded import mean_smallest

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


def track_refined(logprobs, seq, refine_for):
    """Track one text of ids ``seq`` by bisection refined for ``refine_for`` (no re-checks);
    its TokenLogprobs and the requests sent."""
    endpoint = SyntheticEndpoint(logprobs)
    tracker = Tracker(endpoint, CAPS, TrackerConfig(strategy="bisect", epsilon=0.01, verify_flips=False,
                                                    refine_for=refine_for))
    tracker.sequence = lambda text: seq
    [result] = asyncio.run(tracker.track(["x"]))
    truth = logprobs[seq[1:]]
    assert np.all(result.lower <= truth + 1e-12) and np.all(truth <= result.upper + 1e-12)
    return result, endpoint.calls


def test_the_mean_lets_listed_targets_pay_for_wider_brackets():
    """Targets 0 (argmax), 1 (listed), 3, 3 (gap 5, unlisted): the two listed are exact, so the
    unlisted brackets (2.56 nats after the gallop) are halved together only until the mean width
    is ε: 2ε = 0.02 each (7 halvings instead of 8); 4 unbiased + 2 × (2 gallop + 7) = 22 requests
    instead of 24."""
    logprobs = distribution(5.0)
    seq = [0, 0, 1, 3, 3]
    token, token_calls = track_refined(logprobs, seq, ())
    mean, mean_calls = track_refined(logprobs, seq, (100.0,))
    assert (token_calls, mean_calls) == (24, 22)
    np.testing.assert_allclose(token.upper - token.lower, [0, 0, 0.01, 0.01], atol=1e-6)
    np.testing.assert_allclose(mean.upper - mean.lower, [0, 0, 0.02, 0.02], atol=1e-6)
    assert (mean.upper - mean.lower).mean() == pytest.approx(0.01, abs=1e-6)


def test_min_k_leaves_tokens_that_cannot_be_among_the_lowest_coarse():
    """Eight targets 2 nats below the argmax and two 12 nats below (10 scored, Min-K% at 20%: the
    lowest E = 2). Top-2 listed (tokens 0, 1): an unlisted target lies below lp_0 − 1.55 (the
    mass bound), so token 2's gallop flips at 1.55 + 1.28 (one request: bracket 1.28 wide) and
    token 4's at 1.55 + 1.28 + 2.56 + 5.12 + 10.24 (four). Token 2's lower bound (lp_0 − 2.83) lies
    above both token-4 upper bounds (lp_0 − 10.51): it cannot be among the lowest two and keeps
    its 1.28-nat bracket; the two token-4 brackets are halved 10.24 → ε (10 halvings). Requests:
    10 unbiased + 8 × 1 + 2 × (4 + 10) = 46, against 10 + 8 × (1 + 7) + 2 × (4 + 10) = 102 with
    every value to ε; Min-K%'s interval is ε wide."""
    values = np.log(np.array([0.6, 0.3, 0.05, 0.05, 0.05]))
    values[2], values[4] = values[0] - 2.0, values[0] - 12.0
    logprobs = values - np.logaddexp.reduce(values)
    seq = [0] + [2] * 8 + [4] * 2
    token, token_calls = track_refined(logprobs, seq, ())
    min_k, min_k_calls = track_refined(logprobs, seq, (20.0,))
    assert (token_calls, min_k_calls) == (102, 46)
    widths = min_k.upper - min_k.lower
    np.testing.assert_allclose(widths, [1.28] * 8 + [0.01] * 2, atol=1e-6)
    assert score_widths(min_k.lower, min_k.upper, [20.0]) == [pytest.approx(0.01, abs=1e-6)]
    assert mean_smallest(min_k.logprobs, 20) == pytest.approx(mean_smallest(logprobs[seq[1:]], 20), abs=0.005)
    np.testing.assert_allclose(token.upper - token.lower, [0.01] * 10, atol=1e-6)


def test_refinement_picks_the_widest_brackets_that_may_matter():
    """Hand-made bounds: values 0..3 (nats), Min-K% at 50% of 4 (E = 2)."""
    lower = np.array([-1.0, -9.0, -6.0, -3.0])
    upper = np.array([-0.5, -5.0, -5.5, -2.0])
    is_open = np.array([True, True, True, True])
    # second-smallest upper is -5.0: values 1 and 2 may be among the lowest two (lower < -5.0), 0 and 3 not
    # lowest two: lower -9, -6 (mean -7.5), upper -5.5, -5 (mean -5.25); all four: -4.75 and -3.25
    assert score_widths(lower, upper, [50.0, 100.0]) == [pytest.approx(2.25), pytest.approx(1.5)]
    # Min-K%: 2.24 nats to gain, halving 1 (4 nats wide) and 2 (0.5) gains about 4/4 + 0.5/4: both
    assert to_refine(lower, upper, is_open, [50.0], 0.01).tolist() == [1, 2]
    assert to_refine(lower, upper, np.array([True, False, True, True]), [50.0], 0.01).tolist() == [2]
    # the mean: every value counts; widest first, 4/8 = 0.5 nats gained by halving 1 alone
    assert to_refine(lower, upper, is_open, [100.0], 0.01).tolist() == [0, 1, 2, 3]
    assert to_refine(lower, upper, is_open, [100.0], 1.0).tolist() == [1]
    assert to_refine(lower, upper, is_open, [100.0], 0.9).tolist() == [1, 3]  # 0.6 to gain: 0.5 + 1/8
    assert to_refine(lower, upper, is_open, [50.0], 10.0).tolist() == []  # interval already within ε
    exact = to_refine(upper, upper, is_open, [50.0, 100.0], 0.01)
    assert exact.tolist() == []
    # a value known only from above (>cap: not open) keeps the mean's interval infinite: every open
    # bracket wider than ε is halved, then nothing is left to do
    capped = np.array([-np.inf, -9.0, -6.0, -3.0])
    assert score_widths(capped, upper, [100.0]) == [np.inf]
    assert to_refine(capped, upper, np.array([False, True, True, True]), [100.0], 0.01).tolist() == [1, 2, 3]
    narrowed = upper - np.array([0.0, 0.01, 0.01, 0.01])
    assert to_refine(np.r_[-np.inf, narrowed[1:]], upper, np.array([False, True, True, True]), [100.0], 0.01).tolist() == []
