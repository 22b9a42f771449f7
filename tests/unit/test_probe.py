"""The capability probe runs the tracker's own strategy objects, with the user's ε and bias cap,
against `bbmia serve` on a local model."""

from __future__ import annotations

import asyncio
import math

import pytest

from blackbox_mia.backends.api.tracker import flips
from blackbox_mia.backends.api.capabilities import capabilities_path
from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.endpoint import Endpoint
from blackbox_mia.backends.api.probe import load_or_probe
from blackbox_mia.backends.api.tracker.strategies import Estimate
from blackbox_mia.backends.api.tracker.tracker import Tracker, TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.tokenizers import HFTokenCodec


@pytest.fixture(scope="module")
def url(peaked_model_dir):
    local = LocalBackend(LocalConfig(str(peaked_model_dir)))
    with serve_in_background(ServerConfig(str(peaked_model_dir), logprobs_mode="raw", echo=False), backend=local) as url:
        yield url


@pytest.fixture
def bisections(monkeypatch):
    """Every final bracket's estimate :meth:`flips.Bisect.close` returns, in order (the real
    code runs): the probe's trials and the tracker's text bisection both end there."""
    seen: list[Estimate] = []
    real = flips.Bisect.close

    async def recorded(self, bracket):
        seen.append(await real(self, bracket))
        return seen[-1]

    monkeypatch.setattr(flips.Bisect, "close", recorded)
    return seen


def run(url, model_dir, cache_dir, config, text=None):
    """Probe (through ``load_or_probe``, as the backend does) and, given a text, track it."""

    async def go():
        api = ApiConfig(base_url=url, model=str(model_dir), max_retries=0)
        async with ApiClient(api) as client:
            endpoint = Endpoint(client, HFTokenCodec.load(str(model_dir)), "completions", True)
            caps = await load_or_probe(endpoint, cache_dir, config)
            tracked = None if text is None else await Tracker(endpoint, caps, config).track([text])
            return caps, tracked

    return asyncio.run(go())


@pytest.mark.parametrize("epsilon", [0.01, 0.5])
def test_the_probe_bisects_with_the_users_epsilon(url, peaked_model_dir, tmp_path, bisections, epsilon):
    caps, _ = run(url, peaked_model_dir, tmp_path, TrackerConfig(epsilon=epsilon))
    assert caps.bisect and caps.evidence["bisect"]["epsilon"] == epsilon
    assert caps.evidence["bias"]["max_bias"] == 100.0
    bracketed = [e for e in bisections if e.strategy == "bisect" and e.lower < e.upper]
    # the two known positions the probe checks bisection on, and the three of the chain check
    assert len(bracketed) == 2 + caps.evidence["chained_flips"]["positions"] == 5
    # the bracket is halved until it is at most ε wide: the gallop's steps are ε·2^m nats (1 nat
    # for ε = 0.5, 1.28 for ε = 0.01), so it ends at ε exactly
    assert [e.upper - e.lower for e in bracketed] == pytest.approx([epsilon] * 5, abs=1e-6)
    assert capabilities_path(tmp_path, url, str(peaked_model_dir), "completions", epsilon, 100.0).exists()


def test_the_probe_and_the_tracker_run_the_same_bisection(url, peaked_model_dir, tmp_path, bisections):
    config = TrackerConfig(strategy="bisect", epsilon=0.05)
    caps, _ = run(url, peaked_model_dir, tmp_path, config)
    probed = len(bisections)
    assert caps.bisect and probed == 2 + 3  # the probe's trial and its chain check
    again, [tracked] = run(url, peaked_model_dir, tmp_path, config, text="Natalia sold")  # the saved record
    unlisted = [lp for lp, s in zip(tracked.logprobs, tracked.strategies) if s != "topn"]  # listed: read from the top-n
    assert again == caps and len(unlisted) > 0 and len(bisections) - probed == len(unlisted)  # one call per bisected token
    assert sorted(e.value for e in bisections[probed:]) == sorted(unlisted)  # positions run concurrently
    assert all(math.isfinite(e.lower) for e in bisections)


def test_a_broken_bisection_is_disabled_by_the_probe(url, peaked_model_dir, tmp_path, monkeypatch):
    async def off_by_one(self, position):
        return Estimate.exact((await self.unbiased(position)).top_logprob - 1.0, "bisect")

    monkeypatch.setattr(flips.Bisect, "measure", off_by_one)
    caps, _ = run(url, peaked_model_dir, tmp_path, TrackerConfig())
    assert not caps.bisect and "bisect missed known log-probs" in caps.reasons["bisect"]
    assert caps.forced_readout  # the other strategies are untouched
