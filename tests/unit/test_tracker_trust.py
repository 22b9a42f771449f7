"""The tracker off the happy path: token identity without names, bounds that stay true, lazy
positions, failures that keep paid work, capability records that are checked, the chat condition."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities, load_capabilities
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.tracker.strategies import (
    Position,
    sampled_is_target,
    topn_upper_bound,
)
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig
from blackbox_mia.types import BlackboxMIAError

ALL = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, True)
PARTIAL = frozenset({7, 8, 9})  # what an empty name may denote: every partial UTF-8 token


def one(i):
    return frozenset({i})


class FakeEndpoint:
    """Greedy answers from one fixed distribution over 10 tokens; names as a server gives them.

    ``empty``: ids the server names ``""`` (their candidates are :data:`PARTIAL`);
    ``pre_bias``: reported values ignore the bias (raw) or are log_softmax(logits + bias).
    """

    token_id_prompts = True

    def __init__(self, logprobs, empty=(), pre_bias=True, fail_at=None):
        logprobs = np.asarray(logprobs, dtype=np.float64)
        self.logprobs = logprobs - np.logaddexp.reduce(logprobs)
        self.empty = set(empty)
        self.pre_bias = pre_bias
        self.fail_at = fail_at
        self.calls = self.in_flight = self.most_in_flight = 0
        self.prefix_lengths = []
        self.codec = type("Codec", (), {"bos_id": 0, "token_string": staticmethod(str)})()
        self.client = type("Client", (), {"config": type("C", (), {"model": "fake", "concurrency": 2})()})()

    def sendable(self, prefix):
        return True

    def may_bias(self, token_id):  # fake ids have no bytes: none ends inside a character
        return True

    def ids(self, i):
        return PARTIAL if i in self.empty else one(i)

    async def next_token(self, prefix, top_n, bias=None):
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.prefix_lengths.append(len(prefix))
        try:
            await asyncio.sleep(0.001)
            if self.fail_at is not None and len(prefix) == self.fail_at:
                raise BlackboxMIAError("injected failure")
            biased = self.logprobs.copy()
            for t, b in (bias or {}).items():
                biased[t] += b
            reported = self.logprobs if self.pre_bias else biased - np.logaddexp.reduce(biased)
            sampled = int(np.argmax(biased))
            order = np.argsort(-reported)[:top_n]
            top = {}
            for i in order:  # a dict keyed by name: colliding empty names keep the first (highest)
                top.setdefault("" if int(i) in self.empty else str(i), (self.ids(int(i)), float(reported[i])))
            return NextToken(self.ids(sampled), float(reported[sampled]), tuple(Listed(*v) for v in top.values()))
        finally:
            self.in_flight -= 1


def normalised(values):
    values = np.log(np.asarray(values, dtype=np.float64))
    return values - np.logaddexp.reduce(values)


def position(endpoint, target, strategy="auto", caps=ALL):
    tracker = Tracker(endpoint, caps, TrackerConfig(strategy=strategy))
    return asyncio.run(tracker._resolve(Position([0], target), strategy))


# -- identity without names -------------------------------------------------------------------


def test_empty_name_is_resolved_by_elimination_not_read_as_beyond_the_cap():
    """Measured: tokens named "" were read as "not sampled at +100" and reported near −103."""
    lp = normalised([50, 20, 10, 5, 5, 3, 2, 1, 1, 1])
    lp[8] = lp[0] - 6.0  # a partial UTF-8 target far below the top-3
    endpoint = FakeEndpoint(lp, empty={7, 8, 9})
    estimate = position(endpoint, 8, "forced")
    assert estimate.strategy == "forced" and estimate.value == pytest.approx(endpoint.logprobs[8], abs=1e-12)


def test_empty_named_argmax_and_target_pre_bias_values_tell_them_apart():
    lp = normalised([1, 1, 1, 1, 1, 1, 1, 50, 1, 1])  # the argmax (7) is a partial token too
    lp[8] = lp[7] - 4.0
    endpoint = FakeEndpoint(lp, empty={7, 8, 9})
    estimate = position(endpoint, 8, "forced")
    assert estimate.strategy == "forced" and estimate.value == pytest.approx(endpoint.logprobs[8], abs=1e-12)


def test_unresolvable_identity_gives_a_true_upper_bound_never_a_value():
    """Post-bias values, argmax and target both named "": the answer cannot tell; the bound holds."""
    lp = normalised([1, 1, 1, 1, 1, 1, 1, 50, 1, 1])
    lp[8] = lp[7] - 4.0
    endpoint = FakeEndpoint(lp, empty={7, 8, 9}, pre_bias=False)
    caps = Capabilities("completions", 3, True, False, True, "post-bias", False, True, True)
    for strategy in ("bisect", "postbias"):
        estimate = position(endpoint, 8, strategy, caps)
        assert estimate.strategy == "ambiguous" and estimate.lower == -math.inf
        assert endpoint.logprobs[8] <= estimate.upper


def test_postbias_solve_with_an_empty_named_target():
    lp = normalised([50, 20, 10, 5, 5, 3, 2, 1, 1, 1])
    lp[8] = lp[0] - 9.0
    endpoint = FakeEndpoint(lp, empty={7, 8, 9}, pre_bias=False)
    caps = Capabilities("completions", 3, True, False, True, "post-bias", False, True, True)
    truth = endpoint.logprobs[8]
    estimate = position(endpoint, 8, "postbias", caps)
    assert estimate.strategy == "postbias" and estimate.value == pytest.approx(truth, abs=1e-9)
    bisected = position(endpoint, 8, "bisect", caps)
    assert bisected.strategy == "bisect" and bisected.lower <= truth <= bisected.upper


def test_sampled_is_target_cases():
    argmax = NextToken(one(0), -0.1, (Listed(one(0), -0.1),))
    named = NextToken(one(8), -5.0, ())
    assert sampled_is_target(named, 8, None, True, 1e-4) is True
    assert sampled_is_target(NextToken(one(0), -0.1, ()), 8, argmax, True, 1e-4) is False
    unnamed = NextToken(PARTIAL, -5.0, ())
    assert sampled_is_target(unnamed, 8, None, True, 1e-4) is None  # needs the argmax
    assert sampled_is_target(unnamed, 8, argmax, False, 1e-4) is True  # the argmax is not partial
    assert sampled_is_target(NextToken(None, -5.0, ()), 8, NextToken(None, -5.0, ()), True, 1e-4) is None


def test_topn_bound_covers_an_entry_that_may_be_the_target():
    answer = NextToken(one(0), -0.5, (Listed(one(0), -0.5), Listed(PARTIAL, -1.5), Listed(one(1), -3.0)))
    assert topn_upper_bound(answer, 2, ALL) == pytest.approx(-3.0)  # not partial: unlisted
    # may be the "" entry, or another "" token whose value the dict of names kept out (llama-cpp-python
    # keeps the lowest-ranked id's value for a shared name): up to the largest listed value
    assert topn_upper_bound(answer, 8, ALL) == pytest.approx(-0.5)
    # a listed mass of 1 (rounded reports) never gives -inf
    full = NextToken(one(0), 0.0, (Listed(one(0), 0.0),))
    assert math.isfinite(topn_upper_bound(full, 3, ALL))


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    {"epsilon": 0.0}, {"epsilon": -0.1}, {"epsilon": float("nan")}, {"epsilon": float("inf")},
    {"max_bias": 0}, {"max_bias": 101}, {"verify_repeats": -1}, {"context": 1}, {"pending": 0},
    {"verify_every": 0}, {"refine_for": (20.0, 0.0)}, {"refine_for": (101.0,)},
    {"strategy": "guess"},
])
def test_tracker_config_refuses_bad_numbers(bad):
    with pytest.raises(BlackboxMIAError):
        TrackerConfig(**bad)


# -- scheduling -------------------------------------------------------------------------------


def tracker_for(endpoint, pending=4, **kw):
    caps = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, False)
    return Tracker(endpoint, caps, TrackerConfig(pending=pending, **kw))


class Codec:
    bos_id = 0

    def encode(self, text):
        return [1 + (ord(c) % 9) for c in text]

    def token_string(self, i):
        return str(i)


def test_positions_are_lazy_and_bounded():
    endpoint = FakeEndpoint(normalised(np.arange(1, 11)))
    endpoint.codec = Codec()
    tracker = tracker_for(endpoint, pending=3)
    done = []
    results = asyncio.run(tracker.track(["abcdefghij" * 20, "xyz"], on_done=lambda i, lp: done.append((i, lp.n_tokens))))
    assert endpoint.most_in_flight <= 3
    assert [r.n_tokens for r in results] == [200, 3] and sorted(done) == [(0, 200), (1, 3)]
    assert all(np.isfinite(r.logprobs).all() for r in results)


def test_a_failure_lets_work_in_flight_finish_and_starts_nothing_new():
    endpoint = FakeEndpoint(normalised(np.arange(1, 11)), fail_at=5)
    endpoint.codec = Codec()
    tracker = tracker_for(endpoint, pending=2)
    with pytest.raises(BlackboxMIAError, match="injected failure"):
        asyncio.run(tracker.track(["abcdefghij" * 20]))
    assert max(endpoint.prefix_lengths) <= 7  # stopped right after the failure, not 200 positions later
    assert endpoint.in_flight == 0


# -- capability records -----------------------------------------------------------------------


@pytest.mark.parametrize("content", ["[1, 2]", '{"endpoint": "completions", "top_n": null}', "{not json"])
def test_corrupt_capability_records_are_clear_errors(tmp_path, content):
    path = tmp_path / "caps.json"
    path.write_text(content)
    with pytest.raises(BlackboxMIAError, match=str(path.name)):
        load_capabilities(path)


def test_capability_record_round_trips(tmp_path):
    from blackbox_mia.backends.api.capabilities import save_capabilities

    caps = Capabilities("chat", 5, False, False, True, "pre-bias", True, False, True, notes=["n"],
                        condition="chat-template", reasons={"prompt": "r"}, evidence={"forced": {"requests": 4}})
    save_capabilities(tmp_path / "c.json", caps)
    assert load_capabilities(tmp_path / "c.json") == caps
    assert json.loads((tmp_path / "c.json").read_text())["strategies"] == ["topn", "forced", "bisect"]


def test_refusal_names_the_strategys_own_reason():
    caps = Capabilities("completions", 5, True, False, True, "pre-bias", True, False, True,
                        notes=["token-id prompts refused"], reasons={"postbias": "reported log-probs are pre-bias"})
    with pytest.raises(BlackboxMIAError, match="postbias.*reported log-probs are pre-bias") as info:
        Tracker(FakeEndpoint(normalised(np.arange(1, 11))), caps, TrackerConfig(strategy="postbias"))
    assert "token-id" not in str(info.value)
