"""Chained flip questions: which positions share a request, how its steps are read (hand cases),
and a text bisected with chains gives the very values and bounds it gives without them, with a
request saved per answer read past a chain's first position (synthetic endpoint)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.tracker.chains import Disturbances, Link, plan, read
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig

from .test_tracker import SyntheticEndpoint

TARGETS = [10, 11, 12, 10, 13, 14]
FOLLOWS = [True, True, True, True, True, False]


def always(i, token, bias):
    return True


def chains_of(asks, passes, solo=(), room=8, safe=always):
    return [[(link.index, link.asks) for link in chain]
            for chain in plan(TARGETS, FOLLOWS, [room] * len(TARGETS), asks, passes, set(solo), safe)]


def test_a_chain_takes_questions_and_passes_until_a_repeated_target():
    asks, passes = {0: 1.0, 1: 2.0, 3: 1.5}, {2: 0.5}
    # 0, 1 asked, 2 passes, 3's target (10) is 0's: the chain ends, its trailing pass dropped
    assert chains_of(asks, passes) == [[(0, True), (1, True)], [(3, True)]]
    # 4 passes after 3; 5 is neither asked nor known: 3's chain ends with its last question
    assert chains_of(asks, {2: 0.5, 4: 0.0}) == [[(0, True), (1, True)], [(3, True)]]
    assert chains_of({0: 1.0, 5: 2.0}, {1: 1.0, 2: 0.5, 3: 1.0, 4: 0.0}) == [[(0, True)], [(5, True)]]
    assert chains_of({1: 1.0, 5: 2.0}, {2: 0.5, 4: 0.0}) == [[(1, True)], [(5, True)]]
    assert chains_of({1: 1.0, 5: 2.0}, {2: 0.5, 3: 1.0, 4: 0.0}) == [[(1, True), (2, False), (3, False), (4, False),
                                                                       (5, True)], ]


def test_solo_room_and_disturbance_end_chains():
    asks = {0: 1.0, 1: 2.0, 2: 1.0}
    assert chains_of(asks, {}, solo={1}) == [[(0, True)], [(1, True)], [(2, True)]]
    assert chains_of(asks, {}, solo={0}) == [[(0, True)], [(1, True), (2, True)]]
    assert chains_of(asks, {}, room=2) == [[(0, True), (1, True)], [(2, True)]]
    # token 12 biased by 1 nat is presumed to disturb position 0: 2 cannot join 0's chain
    def safe(i, token, bias):
        return not (i == 0 and token == 12)
    assert chains_of(asks, {}, safe=safe) == [[(0, True), (1, True)], [(2, True)]]


def step(*ids):
    return NextToken(frozenset(ids), -1.0, (Listed(frozenset(ids), -1.0),))


CHAIN = [Link(0, 10, 1.0, True), Link(1, 11, 2.0, True), Link(2, 12, 0.5, False), Link(3, 13, 1.0, True)]


def test_reading_a_chain():
    # every step its target but the last, an unbiased token there: three answers
    assert read(CHAIN, [step(10), step(11), step(12), step(99)]) == ([(0, True), (1, True), (3, False)], False)
    assert read(CHAIN, [step(10), step(99), step(12), step(13)]) == ([(0, True), (1, False)], False)
    # another biased target, an unknown or a possibly-biased name: no answer from that step on
    assert read(CHAIN, [step(10), step(12)]) == ([(0, True)], False)
    assert read(CHAIN, [step(13)]) == ([], False)
    assert read(CHAIN, [step(10), NextToken(None, -1.0, ())]) == ([(0, True)], False)
    assert read(CHAIN, [step(10), step(11, 99)]) == ([(0, True)], False)
    # a pass that does not flip contradicts an earlier answer
    assert read(CHAIN, [step(10), step(11), step(99)]) == ([(0, True), (1, True)], True)
    # fewer steps than links (an end of text): what came
    assert read(CHAIN, [step(10)]) == ([(0, True)], False)
    # an argmax pass (no bias): a name that may be its target is no contradiction
    argmax = [Link(0, 10, 1.0, True), Link(1, 11, 0.0, False), Link(2, 12, 1.0, True)]
    assert read(argmax, [step(10), step(11, 99)]) == ([(0, True)], False)
    assert read(argmax, [step(10), step(98)]) == ([(0, True)], True)


CAPS = Capabilities("completions", 2, True, False, True, "pre-bias", False, False, True)


def model(last: int) -> np.ndarray:
    """After token ``last``: token 0 p = 0.6, token 1 p = 0.3 (listed), the text's next token
    (3 after 0, then 4, 5, 6) ``2.5 + last / 10`` nats below token 0, every other token 40 below."""
    values = np.full(8, np.log(0.6) - 40.0)
    values[0], values[1] = np.log(0.6), np.log(0.3)
    values[3 if last == 0 else last + 1] = np.log(0.6) - 2.5 - last / 10
    return values - np.logaddexp.reduce(values)


def track(chain_tokens: int):
    endpoint = SyntheticEndpoint(model)
    caps = Capabilities(**{**CAPS.__dict__, "chained_flips": True})
    tracker = Tracker(endpoint, caps, TrackerConfig(strategy="bisect", epsilon=0.01, verify_flips=False,
                                                    chain_tokens=chain_tokens))
    tracker.sequence = lambda text: [0, 3, 4, 5, 6]
    [result] = asyncio.run(tracker.track(["x"]))
    return result, endpoint.calls, tracker.bisection.chained_answers


def test_chains_change_the_requests_not_the_values():
    """Four unlisted targets 2.5-3.0 nats below the argmax: alone, each costs its unbiased request,
    one gallop step and 7 halvings to ε (the top-n bound is the target's own mass here, so b*
    lies just above it and every question flips): 4 × 9 = 36 requests. Chained, the same
    questions give the same brackets, each round's four questions go in one request (every
    step flips, no target is presumed to disturb another): 4 + 8 = 12 requests, 24 answers read
    past a chain's first position."""
    solo, solo_calls, none = track(1)
    chained, calls, saved = track(8)
    assert (solo_calls, none) == (36, 0)
    truth = np.array([model(last)[t] for last, t in zip([0, 3, 4, 5], [3, 4, 5, 6])])
    assert np.all(solo.lower <= truth) and np.all(truth <= solo.upper)
    np.testing.assert_allclose(solo.upper - solo.lower, 0.01, atol=1e-6)
    np.testing.assert_array_equal(chained.lower, solo.lower)
    np.testing.assert_array_equal(chained.upper, solo.upper)
    assert (calls, saved) == (12, 24) and calls == solo_calls - saved


def test_the_cost_estimate_counts_chained_requests_and_their_tokens():
    """ε = 0.01: 7 halvings + 2 gallop steps expected per unlisted target (60 %), re-checks 2 × 2
    requests for 1 in 32: alone 1 + 0.6 × (9 + 0.125) = 6.475 requests per position, one
    completion token each; chained, the search's 9 × 0.874 (measured): 1 + 0.6 × (7.866 + 0.125)
    = 5.7946 requests, 1 + 0.6 × (7.866 × 1.64 + 0.125) = 8.8151 completion tokens (re-checks go
    alone); with the unbiased answers read by runs too, 0.789 requests and 2.89 completion tokens
    in place of the unbiased request's 1 and 1 (measured): 5.5836 and 10.7051."""
    from blackbox_mia.backends.api.tracker.costs import per_position_rate

    rates = []
    for k, runs in ((1, False), (4, False), (4, True)):
        caps = Capabilities(**{**CAPS.__dict__, "chained_flips": True, "run_reading": runs})
        tracker = Tracker(SyntheticEndpoint(model), caps, TrackerConfig(strategy="bisect", chain_tokens=k))
        rates.append(per_position_rate(tracker, "bisect")[:2])
    assert rates == [(pytest.approx(6.475), pytest.approx(6.475)), (pytest.approx(5.7946), pytest.approx(8.8151, abs=1e-4)),
                     (pytest.approx(5.5836), pytest.approx(10.7051, abs=1e-4))]


def test_chains_learn_which_targets_disturb_which_positions():
    """A step taken by another biased target keeps that pair apart; a first step with no answer
    and no biased target to blame sends its question alone; a no-flip teaches nothing."""
    learned = Disturbances()
    learned.learn(CHAIN, [step(10), step(13)], [(0, True)])  # 3's target took position 1's step
    assert learned.pairs == {(1, 13)} and not learned.solo
    assert not learned.allows(1, 13) and learned.allows(0, 13) and learned.allows(1, 12)
    learned.learn(CHAIN, [step(11)], [])  # 1's target took the first step: blamed, not alone
    assert learned.pairs == {(1, 13), (0, 11)} and not learned.solo
    learned.learn(CHAIN, [NextToken(None, -1.0, ())], [])  # an unknown name: alone from then on
    assert learned.solo == {0}
    before = (set(learned.pairs), set(learned.solo))
    learned.learn(CHAIN, [step(10), step(99)], [(0, True), (1, False)])
    assert (learned.pairs, learned.solo) == before
    # planning keeps a learned pair apart: 1's chain stops before 2 (whose target took 1's step)
    chains = plan(TARGETS, FOLLOWS, [8] * 6, {0: 1.0, 1: 2.0, 2: 1.0}, {}, set(),
                  lambda i, token, bias: Disturbances({(1, 12)}).allows(i, token))
    assert [[link.index for link in c] for c in chains] == [[0, 1], [2]]
