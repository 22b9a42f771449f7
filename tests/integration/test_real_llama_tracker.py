"""The tracker against a real llama.cpp server (llama-cpp-python 0.3.36 serving the peaked test
model as GGUF): ASCII, accented, Japanese and punctuation-heavy texts under every strategy the
probe enables; every value within its bounds of the white-box log-probs (no BOS: the server's
convention), every score's interval holding the white-box score, and the server alive, with no
5xx, at the end. Skipped with the reason when no Python with llama-cpp-python is found
(``.ci/run`` makes ``.venv-llama``; see tests/realserver/server.py)."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorers

from ..realserver.server import find_llama_python, n_positions, serve_model_dir

EXACT = 5e-3  # nats: f32 GGUF vs transformers fp32
EPSILON = 0.01
TEXTS = {
    "ascii": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "accented": "Crème brûlée at the café costs ½ price, naïve señor.",
    "japanese": load_shipped_or_jsonl("ja-debian-docs").items[0].text[:20],
    "punctuation": "He said “wait…” — then left; ‘why?’ she asked.",
}
SCORERS = "loss,min_k,zlib"


@pytest.fixture(scope="module")
def llama(peaked_model_dir, tmp_path_factory):
    python, why = find_llama_python()
    if python is None:
        pytest.skip(why)
    with serve_model_dir(peaked_model_dir, python=python, workdir=tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture(scope="module")
def white(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir), bos=False))


def backend_for(server, model_dir, cache_dir, strategy):
    config = ApiConfig(base_url=server.url, model=server.model, max_retries=1, backoff_base_s=0.01)
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=n_positions(model_dir))
    return ApiBackend(config, tokenizer=str(model_dir), tracker=tracker, cache_dir=cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["auto", "forced", "bisect"])
def test_values_and_scores_within_bounds_and_the_server_survives(strategy, llama, white, peaked_model_dir, tmp_path):
    texts = list(TEXTS.values())
    errors_before = llama.server_errors()
    backend = backend_for(llama, peaked_model_dir, tmp_path, strategy)
    try:
        caps = backend.capabilities
        # the probe's token-id prompt check: refused with HTTP 500 (twice: the evidence); no other 5xx
        probe_errors = llama.server_errors()
        assert probe_errors - errors_before <= 2 and not caps.token_id_prompts
        if strategy != "auto" and strategy not in caps.strategies():
            pytest.skip(f"{strategy}: {caps.reason(strategy)}")
        assert not caps.open_bias  # llama.cpp runs past max_tokens mid-character: never shown safe
        assert caps.grammar, caps.reason("grammar")  # so positions inside a character are spelled
        scorers = parse_scorers(SCORERS)
        black = score_texts(texts, scorers, {"target": backend})
    finally:
        backend.close()
    truth = score_texts(texts, scorers, {"target": white})
    outside, bound_only, tokens, exact = [], 0, 0, {}
    for name, (scores, lp), (true_scores, w) in zip(TEXTS, black, truth):
        assert lp.token_ids.tolist() == w.token_ids.tolist()
        exact[name] = float(((lp.upper - lp.lower) <= EPSILON + EXACT).mean())
        for i in range(lp.n_tokens):
            if not lp.lower[i] - EXACT <= w.logprobs[i] <= lp.upper[i] + EXACT:
                outside.append((name, lp.tokens[i], lp.strategies[i], w.logprobs[i], lp.lower[i], lp.upper[i]))
        tokens += lp.n_tokens
        bound_only += int((lp.lower == float("-inf")).sum())
        for label, b in scores.items():
            t = true_scores[label].value
            assert b.lower - EXACT <= t <= b.upper + EXACT, (name, label, b, t)
    assert outside == [], outside[:5]
    # the Japanese text's characters are single-byte tokens here: every position inside one is spelled
    assert exact["japanese"] >= 0.9, exact
    assert llama.alive(), llama.log_tail()
    assert llama.server_errors() == probe_errors, llama.log_tail()
    print(f"{strategy}: {tokens} tokens, {bound_only} bound-only, exact shares {exact}, strategies {caps.strategies()}")
