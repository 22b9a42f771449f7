"""The request estimate of windowed texts (longer than ``--context-tokens``) against what the
tracker sends to ``bbmia serve``: within 5 % for echo, ``prompt_logprobs`` and forced-reading
servers, and within its stated uncertainty where a window's last target may need requests of
its own (no forced read-out: post-bias values). The probe runs first and is counted apart."""

from __future__ import annotations

import json

import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.config import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from tests.tools.fault_proxy import FaultConfig, proxy_in_background

from ..conftest import DATA

CONTEXT = 24  # tokens: every text takes several windows, most as long as the context
WITHIN = 0.05  # the bound on |sent / estimated - 1| where the estimate claims to be that close


@pytest.fixture(scope="module")
def texts() -> list[str]:
    with open(DATA / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(6), f)]
    return [f"{row['question']} {row['answer']}" for row in rows]


@pytest.mark.parametrize("server, exact", [
    ({}, True),  # echo: a full window forces its last target in its own request (echo checked under a bias)
    ({"vllm": True}, True),  # prompt_logprobs
    ({"echo": False}, True),  # no prompt path: forced read-out per position (run reading first)
    ({"logprobs_mode": "processed"}, False),  # post-bias values: no forced read-out; a window's last
])                                            # target, when not listed, by the post-bias solve
def test_the_estimate_of_windowed_texts_holds_against_what_is_sent(server, exact, texts, tiny_model_dir, tmp_path):
    model = str(tiny_model_dir)
    local = LocalBackend(LocalConfig(model, device="cpu"))
    with serve_in_background(ServerConfig(model, **server), local) as url:
        with proxy_in_background(FaultConfig(upstream=url, rate=0.0)) as counting:
            config = ApiConfig(base_url=counting.base_url, model=model, api_key="none")
            with ApiBackend(config, model, TrackerConfig(context=CONTEXT), tmp_path) as backend:
                estimate = backend.estimate_cost(texts)  # the probe first (in full where windows need it): apart
                before = counting.stats.requests
                backend.logprobs(texts)
                sent = counting.stats.requests - before
    assert sent > 5 * len(texts)  # several windows a text
    error = abs(sent / estimate.requests - 1)
    assert error <= estimate.relative_uncertainty + 1e-9, (sent, estimate)  # the stated uncertainty is honest
    if exact:
        assert error <= WITHIN, (sent, estimate)
