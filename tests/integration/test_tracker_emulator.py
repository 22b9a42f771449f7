"""The logit_bias tracker against `bbmia serve` on a local model: every recovered value lies
within its reported bounds of the white-box log-prob, in all four emulated provider modes.
(Against a synthetic endpoint, no server: tests/unit/test_tracker.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions

MODES = {  # (logprobs_mode, echo) -> strategies the mode allows
    ("raw", True): ["auto", "prompt", "run", "topn", "forced", "bisect"],
    ("processed", True): ["auto", "prompt", "run", "topn", "postbias", "bisect"],
    ("raw", False): ["auto", "run", "topn", "forced", "bisect"],
    ("processed", False): ["auto", "run", "topn", "postbias", "bisect"],
}
EXACT = 1e-4  # nats, exact strategies
EPSILON = 0.01  # nats, bisection


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


@pytest.fixture(scope="module")
def texts():
    return [q[:40] for q in gsm8k_questions(3, split="test")]


@pytest.fixture(scope="module", params=list(MODES), ids=lambda m: f"{m[0]}-{'echo' if m[1] else 'noecho'}")
def server(request, local, peaked_model_dir):
    mode, echo = request.param
    with serve_in_background(ServerConfig(str(peaked_model_dir), logprobs_mode=mode, echo=echo), backend=local) as url:
        yield request.param, url


def make_backend(url, model_dir, cache_dir, strategy="auto", **api):
    config = ApiConfig(base_url=url, model=str(model_dir), max_retries=1, backoff_base_s=0.01, **api)
    return ApiBackend(config, tokenizer=str(model_dir), tracker=TrackerConfig(strategy=strategy, epsilon=EPSILON), cache_dir=cache_dir)


def test_probe_identifies_mode(server, peaked_model_dir, tmp_path):
    (mode, echo), url = server
    backend = make_backend(url, peaked_model_dir, tmp_path)
    caps = backend.capabilities
    backend.close()
    assert caps.top_n == 5 and caps.token_id_prompts and caps.bias_forces and caps.bisect
    assert caps.run_reading and caps.flips_reproducible and caps.evidence["run"]["max_abs_diff"] == 0.0
    assert caps.echo is echo
    assert caps.reported == ("pre-bias" if mode == "raw" else "post-bias")
    assert caps.forced_readout is (mode == "raw")
    assert caps.postbias_solve is (mode == "processed")
    assert caps.strategies() == [s for s in MODES[(mode, echo)] if s != "auto"][: len(caps.strategies())]


def test_every_strategy_within_bounds(server, local, peaked_model_dir, texts, tmp_path):
    (mode, echo), url = server
    white = local.logprobs(texts)
    below_top5 = 0
    for strategy in MODES[(mode, echo)]:
        backend = make_backend(url, peaked_model_dir, tmp_path / strategy, strategy)
        subset = texts[:1] if strategy == "bisect" else texts  # bisection costs ~11 requests a token
        black = backend.logprobs(subset)
        backend.close()
        for b, w in zip(black, white):
            assert b.token_ids.tolist() == w.token_ids.tolist()
            assert np.all(b.lower - EXACT <= w.logprobs) and np.all(w.logprobs <= b.upper + EXACT), strategy
            finite = np.isfinite(b.lower)
            width = (b.upper - b.lower)[finite]
            if strategy in ("prompt", "run", "forced", "postbias"):
                assert finite.all() and np.all(np.abs(b.logprobs - w.logprobs) <= EXACT)
            if strategy == "bisect":
                assert finite.all() and np.all(width <= EPSILON + 1e-9)
                assert np.all(np.abs(b.logprobs - w.logprobs) <= EPSILON)
            if strategy == "topn":
                below_top5 += int((~finite).sum())
                assert set(b.strategies) <= {"topn", "topn-bound"}
    # the text tokens really are far below the top-n (they are what the tracker is for)
    dist = local.next_token_logprobs([[local.bos_id] + local.encode(texts[0])[:i] for i in range(8)])
    gaps = dist.max(1) - white[0].logprobs[:8]
    assert below_top5 > 0 and np.median(gaps) > 5


def test_second_run_makes_zero_requests(server, peaked_model_dir, texts, tmp_path):
    _, url = server
    first = make_backend(url, peaked_model_dir, tmp_path)
    values = first.logprobs(texts)
    assert first.usage.requests > 0
    first.close()
    second = make_backend(url, peaked_model_dir, tmp_path)
    again = second.logprobs(texts)
    assert second.usage.requests == 0
    second.close()
    for a, b in zip(values, again):
        np.testing.assert_array_equal(a.logprobs, b.logprobs)


def first_use_fails(backend, match):
    """The backend sends nothing when built; its first use (the probe) raises ``match``."""
    try:
        with pytest.raises(BlackboxMIAError, match=match):
            backend.logprobs(["Natalia sold clips"])
    finally:
        backend.close()


def test_no_logprobs_endpoint_is_refused(local, peaked_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(peaked_model_dir), logprobs=False), backend=local) as url:
        first_use_fails(make_backend(url, peaked_model_dir, tmp_path), "absolute log-probs cannot be recovered")


def test_bad_endpoints_give_clear_errors(local, peaked_model_dir, tmp_path):
    first_use_fails(make_backend("http://127.0.0.1:9/v1", peaked_model_dir, tmp_path), "cannot reach|connection refused")
    with serve_in_background(ServerConfig(str(peaked_model_dir), api_key="right-key"), backend=local) as url:
        first_use_fails(make_backend(url, peaked_model_dir, tmp_path, api_key="wrong-key"), "refused")
        config = ApiConfig(base_url=url, model="no-such-model", api_key="right-key", max_retries=0)
        first_use_fails(ApiBackend(config, tokenizer=str(peaked_model_dir), cache_dir=tmp_path), "unknown model")


def test_context_windows_match_local_sliding_window(tiny_model_dir, tmp_path):
    """Texts longer than the context: the tracker sends the local backend's windows."""
    short = LocalBackend(LocalConfig(str(tiny_model_dir), max_length=16))
    text = gsm8k_questions(1, split="test")[0][:70]
    white = short.logprobs([text])[0]
    for echo in (True, False):
        with serve_in_background(ServerConfig(str(tiny_model_dir), echo=echo), backend=short) as url:
            config = ApiConfig(base_url=url, model=str(tiny_model_dir), max_retries=1)
            backend = ApiBackend(config, tokenizer=str(tiny_model_dir), tracker=TrackerConfig(context=16), cache_dir=tmp_path / str(echo))
            black = backend.logprobs([text])[0]
            backend.close()
        # a full window sends all but its last token (one token is generated); the last target
        # comes from the generated position's top-n or, unlisted, from forced read-out (a token ending
        # inside a character is never forced on a server not shown to stop at max_tokens then: bounded)
        allowed = {"prompt", "topn", "forced"} if echo else {"forced", "topn", "unbiasable"}
        assert white.n_tokens > 30 and set(black.strategies) <= allowed
        exact = np.array([s != "unbiasable" for s in black.strategies])  # the lead byte of "’" in "Janet’s"
        np.testing.assert_allclose(black.logprobs[exact], white.logprobs[exact], atol=EXACT)
        assert np.all((black.lower <= white.logprobs + EXACT) & (white.logprobs <= black.upper + EXACT))


def test_bisection_refined_for_the_scores_through_the_emulator(local, peaked_model_dir, texts, tmp_path):
    """Loss and Min-K% (k = 20) of a served model's text by bisection refined to their needs: each
    score's interval from the values' bounds is at most ε and holds the white-box score, every
    value lies within its bounds, and it costs fewer requests than every value to ε."""
    from blackbox_mia.backends.api.tracker.refine import score_widths
    from blackbox_mia.scorers.bounded import mean_smallest

    [white] = local.logprobs(texts[:1])
    requests, tracked = {}, {}
    with serve_in_background(ServerConfig(str(peaked_model_dir), logprobs_mode="raw", echo=False), backend=local) as url:
        for refine_for in ((), (20.0, 100.0)):
            config = ApiConfig(base_url=url, model=str(peaked_model_dir), max_retries=1, backoff_base_s=0.01)
            tracker = TrackerConfig(strategy="bisect", epsilon=EPSILON, refine_for=refine_for)
            backend = ApiBackend(config, tokenizer=str(peaked_model_dir), tracker=tracker,
                                 cache_dir=tmp_path / str(len(refine_for)))
            before = backend.usage.requests  # the probe's
            [tracked[refine_for]] = backend.logprobs(texts[:1])
            requests[refine_for] = backend.usage.requests - before
            backend.close()
    black = tracked[(20.0, 100.0)]
    assert np.all(black.lower - EXACT <= white.logprobs) and np.all(white.logprobs <= black.upper + EXACT)
    for k, width in zip((20.0, 100.0), score_widths(black.lower, black.upper, (20.0, 100.0))):
        assert width <= EPSILON + 1e-9
        assert mean_smallest(black.lower, k) - EXACT <= mean_smallest(white.logprobs, k) <= mean_smallest(black.upper, k) + EXACT
    assert requests[(20.0, 100.0)] < requests[()]
