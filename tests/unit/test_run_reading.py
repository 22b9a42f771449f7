"""Run reading: the greedy continuation's top-n read the text's own log-probs while it equals the
text; per-text switching keeps it within one request of forced read-out per failed attempt.
Hand-counted on a synthetic endpoint (through `bbmia serve`: tests/integration/test_run_reading_emulator.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig

from .test_tracker import SyntheticEndpoint

V = 10
RUNS = Capabilities("completions", 2, True, False, True, "pre-bias", True, False, False, run_reading=True)


def row(last: int) -> np.ndarray:
    """After a prefix ending in ``last``: (last + 1) % V with p 0.7, (last + 2) % V with 0.2."""
    p = np.full(V, 0.1 / (V - 2))
    p[(last + 1) % V], p[(last + 2) % V] = 0.7, 0.2
    return np.log(p)


def track(seq: list[int], strategy: str) -> tuple[list, int]:
    endpoint = SyntheticEndpoint(row)
    tracker = Tracker(endpoint, RUNS, TrackerConfig(strategy=strategy))
    tracker.sequence = lambda text: seq  # the synthetic texts are token ids already
    [result] = asyncio.run(tracker.track(["x"]))
    return result, endpoint.calls


def truth(seq):
    return [row(seq[j - 1])[seq[j]] for j in range(1, len(seq))]


def test_a_reproduced_text_costs_a_few_requests():
    """14 targets, each the argmax (p 0.7): a window starts with a run (the odds' pseudo-counts:
    (1 + 1/2)·(1 − 1/2) < 1), 8 tokens that all match, then a run to the end (6 of the doubled
    16): 2 requests instead of 14."""
    seq = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    result, calls = track(seq, "run")
    assert calls == 2 and track(seq, "forced")[1] == 14
    assert result.strategies == ["run"] * 14
    np.testing.assert_allclose(result.logprobs, truth(seq))
    np.testing.assert_array_equal(result.lower, result.upper)


def test_auto_reads_runs_where_the_probe_verified_them():
    """``auto`` is run reading when the probe enabled it (same 2 requests as ``run`` on the
    reproduced text), per-position read-out otherwise."""
    seq = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    result, calls = track(seq, "auto")
    assert calls == 2 and result.strategies == ["run"] * 14
    no_runs = Tracker(SyntheticEndpoint(row), Capabilities("completions", 2, True, False, True, "pre-bias", True,
                                                             False, False), TrackerConfig(strategy="auto"))
    assert no_runs.mode() == "auto"


def test_the_estimate_of_run_reading_is_its_per_position_strategy_s_figure():
    """``auto`` = runs over bisection: the estimate is bisection's position by position, one
    unbiased request each, plus RUN_WINDOW_REQUESTS for its one window (a run that loses: an
    upper bound), with both notes."""
    from blackbox_mia.backends.api.tracker.costs import RUN_WINDOW_REQUESTS, estimate

    caps = Capabilities("completions", 2, True, False, True, "pre-bias", False, False, True, run_reading=True)
    tracker = Tracker(SyntheticEndpoint(row), caps, TrackerConfig(strategy="auto"))
    tracker.sequence = lambda text: [0, 1, 2, 3, 4]
    no_runs = Capabilities(**{**caps.__dict__, "run_reading": False})
    bisecting = Tracker(SyntheticEndpoint(row), no_runs, TrackerConfig(strategy="bisect"))
    bisecting.sequence = tracker.sequence
    runs, per_position = estimate(tracker, ["x"], None), estimate(bisecting, ["x"], None)
    assert tracker.mode() == "run" and runs.strategy == "run+bisect" and per_position.strategy == "bisect"
    assert per_position.requests > 4  # 4 targets, more than one request each
    assert runs.requests == pytest.approx(per_position.requests + RUN_WINDOW_REQUESTS, abs=1)
    assert runs.requests > per_position.requests
    assert any(n.startswith("bisection:") for n in runs.notes) and any(n.startswith("run reading:") for n in runs.notes)


def test_runs_that_lose_switch_to_per_position_read_out():
    """The first run matches 1, 2, then generates 3 where the text has 5, not listed: a forced
    read (2 requests). Odds q = 3/5, u = 2/3: (5/3)(2/5) < 1, so runs go on, and lose at 0 (after 5: 6, 7
    listed) and at 5 (after 0: 1, 2 listed), a forced read each; then q = 3/7, u = 4/5:
    (9/5)(4/7) > 1: the last target is read per position. 2 + 2 + 2 + 1 = 7 requests for 6
    targets (forced read-out: 6)."""
    seq = [0, 1, 2, 5, 0, 5, 1]
    result, calls = track(seq, "run")
    assert calls == 7 and track(seq, "forced")[1] == 6
    assert result.strategies == ["run"] * 2 + ["forced"] * 4
    np.testing.assert_allclose(result.logprobs, truth(seq))


def test_a_listed_mismatch_is_read_from_the_run_and_runs_go_on():
    """The first run matches 1, 2 and generates 3 where the text has 4, listed there (p 0.2):
    exact from the run, nothing lost, so the next run follows: 5 and 6 match, 0 (after 6) is not
    listed: forced. 1 + 2 = 3 requests for 6 targets."""
    seq = [0, 1, 2, 4, 5, 6, 0]
    result, calls = track(seq, "run")
    assert calls == 3 and result.strategies == ["run"] * 5 + ["forced"]
    np.testing.assert_allclose(result.logprobs, truth(seq))


def test_bisection_reads_its_unbiased_answers_by_runs():
    """Targets 1 2 3 | 5 (not the argmax 4) | 6 | 8 (not 7) | 9 0: a 4-token run from the first
    position answers positions 0-3 (its 4th token, 4, leaves the text), a run from position 4
    answers 4 and 5, a 2-token run (the text's end) answers 6 and 7: 3 requests for 8 answers,
    each the one a request at its own prefix gives. Bisection from them ends with the same bounds
    as with one unbiased request per position, 5 requests fewer."""
    from blackbox_mia.backends.api.tracker.runs import read_unbiased
    from blackbox_mia.backends.api.tracker.strategies import Position

    seq = [0, 1, 2, 3, 5, 6, 8, 9, 0]
    endpoint = SyntheticEndpoint(row)
    positions = [Position(seq[:j], seq[j]) for j in range(1, len(seq))]
    sent = asyncio.run(read_unbiased(endpoint, 2, positions, [True] * 7 + [False], [len(seq)] * 8))
    assert sent == endpoint.calls == 3
    for p in positions:
        assert p.unbiased == asyncio.run(endpoint.next_token(p.prefix, 2))

    caps = Capabilities(**{**RUNS.__dict__, "bisect": True})
    results = {}
    for runs in (False, True):
        endpoint = SyntheticEndpoint(row)
        tracker = Tracker(endpoint, Capabilities(**{**caps.__dict__, "run_reading": runs}),
                          TrackerConfig(strategy="bisect", verify_flips=False))
        tracker.sequence = lambda text: seq
        [results[runs]] = asyncio.run(tracker.track(["x"]))
        results[runs, "calls"] = endpoint.calls
    assert results[False, "calls"] - results[True, "calls"] == 5
    np.testing.assert_array_equal(results[True].lower, results[False].lower)
    np.testing.assert_array_equal(results[True].upper, results[False].upper)
    assert np.all(results[True].lower <= truth(seq)) and np.all(truth(seq) <= results[True].upper)


def test_forced_read_out_gives_the_targets_rank_and_the_odds_read_it():
    """Forced read-out's answer lists the unbiased top-n (pre-bias values): after 0, target 1 is
    the argmax (rank 0), 2 is second (rank 1), 5 is not listed (rank 2 = top-n). The odds count
    them: an argmax, a listed and an unlisted non-argmax, each read scaling the earlier counts
    by MEMORY = 0.9: argmax 0.81, others 0.9 + 1, unlisted 1, listed 0.9."""
    from blackbox_mia.backends.api.tracker.runs import Odds
    from blackbox_mia.backends.api.tracker.strategies import Position

    tracker = Tracker(SyntheticEndpoint(row), RUNS, TrackerConfig(strategy="forced"))
    estimates = [asyncio.run(tracker._resolve(Position([0], t), "forced")) for t in (1, 2, 5)]
    assert [e.rank for e in estimates] == [0, 1, 2]
    odds = Odds()
    for estimate in estimates:
        odds.read(estimate, 2)
    assert (odds.argmax, odds.other, odds.unlisted, odds.listed) == pytest.approx((0.81, 1.9, 1.0, 0.9))
