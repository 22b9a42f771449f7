"""Servers that round log-probs or answer one request in several ways (`bbmia serve
--logprob-precision`, `--nondeterministic`): the probe names the behaviour, and every value the
tracker reports lies within its stated bounds of the white-box log-prob, whatever the strategy."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.emulator import ServerConfig, serve_in_background

from .test_tracker_emulator import local, make_backend, texts  # noqa: F401 (fixtures: the peaked model, 3 texts)

FLOAT_NOISE = 1e-5  # nats: the emulator's float32 forward pass against the white-box one
SERVERS = {  # name -> (server settings, significant bits the probe must read, whether it must see jitter)
    "bfloat16": ({"logprob_precision": "bfloat16"}, 8, False),
    "float16": ({"logprob_precision": "float16"}, 11, False),
    "jitter": ({"nondeterministic": 0.05}, None, True),
}


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request, local, peaked_model_dir):
    settings, bits, jitter = SERVERS[request.param]
    with serve_in_background(ServerConfig(str(peaked_model_dir), **settings), backend=local) as url:
        yield bits, jitter, url


def test_probe_names_the_precision_and_the_jitter(server, peaked_model_dir, tmp_path):
    bits, jitter, url = server
    backend = make_backend(url, peaked_model_dir, tmp_path)
    caps = backend.capabilities
    backend.close()
    assert caps.report_bits == bits
    assert (caps.jitter > 0) is jitter
    notes = " ".join(caps.notes)
    assert ("rounded to" in notes) is (bits is not None)
    assert ("nondeterministic" in notes) is jitter
    if jitter:  # identical requests differ: every bisection bracket is re-checked
        assert not caps.flips_reproducible and caps.jitter >= caps.evidence["repeat_noise"]["max_abs_diff"]


@pytest.mark.parametrize("strategy", ["auto", "prompt", "forced", "bisect"])
def test_every_value_within_its_bounds(server, local, peaked_model_dir, texts, tmp_path, strategy):
    bits, jitter, url = server
    white = local.logprobs(texts)
    subset = texts[:1] if strategy == "bisect" else texts  # bisection costs ~11 requests a token
    backend = make_backend(url, peaked_model_dir, tmp_path, strategy)
    black = backend.logprobs(subset)
    backend.close()
    off = []
    for b, w in zip(black, white):
        assert b.token_ids.tolist() == w.token_ids.tolist()
        assert np.all(b.lower - FLOAT_NOISE <= w.logprobs) and np.all(w.logprobs <= b.upper + FLOAT_NOISE), strategy
        exact = np.isfinite(b.lower)
        off.append(np.abs(b.logprobs - w.logprobs)[exact])
    # the server's reports really are off (so the bounds above are doing work) ...
    assert np.concatenate(off).max() > 1e-3


def test_the_verdict_line_names_the_behaviour(server, peaked_model_dir, tmp_path):
    bits, jitter, url = server
    backend = make_backend(url, peaked_model_dir, tmp_path)
    line = backend.capabilities.reading()
    backend.close()
    assert line.startswith("reading: prompt log-probs")  # the emulator answers echo
    assert (f"rounded to {bits} significant bits" in line) is (bits is not None)
    assert ("nondeterministic" in line) is jitter


@pytest.mark.parametrize("name", list(SERVERS))
def test_post_bias_values_within_their_bounds(name, local, peaked_model_dir, texts, tmp_path):
    """A post-bias server (``processed`` log-probs) that rounds or jitters: the closed form's
    bounds, its report error amplified by the solve, hold for every token."""
    settings, bits, _ = SERVERS[name]
    white = local.logprobs(texts)
    config = ServerConfig(str(peaked_model_dir), logprobs_mode="processed", **settings)
    with serve_in_background(config, backend=local) as url:
        backend = make_backend(url, peaked_model_dir, tmp_path, "postbias")
        assert backend.capabilities.report_bits == bits
        black = backend.logprobs(texts)
        backend.close()
    for b, w in zip(black, white):
        assert np.all(b.lower - FLOAT_NOISE <= w.logprobs) and np.all(w.logprobs <= b.upper + FLOAT_NOISE)
        assert {"postbias", "topn"} >= set(b.strategies) and np.isfinite(b.lower).all()
