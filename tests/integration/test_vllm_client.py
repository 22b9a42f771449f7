"""The vLLM client: ``prompt_logprobs`` asked for and read the way vLLM answers it (the emulator's
vLLM mode), probed like any capability; one request per text, values equal to the white-box ones."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.capabilities import NOT_PROBED
from blackbox_mia.backends.api.http.answers import read_completion
from blackbox_mia.backends.api.http.errors import Malformed
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..conftest import gsm8k_questions

PAYLOAD = {"prompt": [0, 5, 7], "max_tokens": 1, "logprobs": None, "prompt_logprobs": 0}


def answer(prompt_logprobs) -> dict:
    return {"choices": [{"text": "x", "finish_reason": "length", "prompt_logprobs": prompt_logprobs}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


def test_prompt_logprobs_are_read_by_id():
    rows = [None, {"5": {"logprob": -2.5, "rank": 3, "decoded_token": "a"}, "9": {"logprob": -0.1, "rank": 1}},
            {"7": {"logprob": -0.25, "rank": 1, "decoded_token": ""}}]
    assert read_completion(answer(rows), PAYLOAD)["prompt_logprobs"] == [None, [[5, -2.5, 3], [9, -0.1, 1]],
                                                                         [[7, -0.25, 1]]]
    assert read_completion(answer(None), PAYLOAD)["prompt_logprobs"] is None  # a server that ignores the field


def test_prompt_logprobs_rows_of_every_form_read_as_the_field_by_field_check_reads_them():
    entry = {"5": {"logprob": -2, "rank": True}, "9": {"logprob": -0.5, "rank": -1}, "11": {"logprob": 0.0, "rank": 0}}
    rows = [None, entry, {"7": {"logprob": -1e-9}}]  # an int log-prob; bool, negative, absent ranks are not ranks
    read = read_completion(answer(rows), PAYLOAD)["prompt_logprobs"]
    assert read == [None, [[5, -2.0, None], [9, -0.5, None], [11, 0.0, 0]], [[7, -1e-9, None]]]
    assert all(type(v) is float for row in read[1:] for _, v, _ in row)


@pytest.mark.parametrize("rows", [
    [None, {"5": {"logprob": -1.0}}],  # 2 entries for 3 prompt tokens
    [None, {"x": {"logprob": -1.0}}, {"7": {"logprob": -1.0}}],  # not a token id
    [None, {"5": {"logprob": None}}, {"7": {"logprob": -1.0}}],  # no value
    [None, {"5": {"logprob": "-1"}}, {"7": {"logprob": -1.0}}],  # not a number
    {"5": -1.0},  # not a list
    [None, {"5": {"logprob": True}}, {"7": {"logprob": -1.0}}],  # a boolean
    [None, {"5": [-1.0]}, {"7": {"logprob": -1.0}}],  # an item that is not an object
    [None, [["5", -1.0]], {"7": {"logprob": -1.0}}],  # an entry that is not an object
])
def test_malformed_prompt_logprobs_are_refused(rows):
    with pytest.raises(Malformed):
        read_completion(answer(rows), PAYLOAD)


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


def backend_for(url, model_dir, cache_dir, strategy="auto"):
    config = ApiConfig(base_url=url, model=str(model_dir), max_retries=1)
    return ApiBackend(config, tokenizer=str(model_dir), tracker=TrackerConfig(strategy=strategy), cache_dir=cache_dir)


@pytest.mark.parametrize("echo", [False, True])
def test_vllm_server_one_request_per_text_exact(local, peaked_model_dir, tmp_path, echo):
    texts = [q[:60] for q in gsm8k_questions(3, split="test")]
    white = local.logprobs(texts)
    with serve_in_background(ServerConfig(str(peaked_model_dir), vllm=True, echo=echo), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        caps = backend.capabilities
        # the probe stopped once prompt_logprobs was verified: echo and the rest unchecked
        assert caps.prompt_logprobs and not caps.complete and not caps.echo and "prompt" in caps.strategies()
        assert caps.reason("echo") == NOT_PROBED and backend.usage.requests <= 10
        assert caps.evidence["prompt_logprobs"]["max_abs_diff"] <= 1e-5
        before = backend.usage.requests
        black = backend.logprobs(texts)
        assert backend.usage.requests - before == len(texts)
        backend.close()
        # a strategy beyond the prompt path completes the record (the stopped probe's answers cached)
        full = backend_for(url, peaked_model_dir, tmp_path, strategy="topn")
        caps = full.capabilities
        assert caps.complete and caps.prompt_logprobs and caps.echo is echo
        assert full.usage.cache_hits >= 5
        full.close()
    for b, w in zip(black, white):
        assert b.token_ids.tolist() == w.token_ids.tolist() and set(b.strategies) == {"prompt"}
        np.testing.assert_allclose(b.logprobs, w.logprobs, atol=1e-5)
        np.testing.assert_array_equal(b.lower, b.upper)


def test_an_openai_style_server_has_no_prompt_logprobs(local, peaked_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(peaked_model_dir), echo=False), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        caps = backend.capabilities
        backend.close()
    assert not caps.prompt_logprobs and "prompt" not in caps.strategies()
    assert "does not return prompt_logprobs" in caps.reasons["prompt_logprobs"]


def test_probe_in_full_completes_a_stopped_probe_once(local, peaked_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(peaked_model_dir), vllm=True), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        stopped = backend.probe()
        asked = backend.usage.requests
        assert stopped.prompt_logprobs and not stopped.complete and asked <= 10
        full = backend.probe(full=True)
        rest = backend.usage.requests - asked
        # the deferred checks ran now (forced read-out among them), not with the first long text
        assert full.complete and full.prompt_logprobs and full.forced_readout and rest > 10
        assert backend.probe(full=True) is full and backend.usage.requests - asked == rest
        backend.close()


@pytest.mark.parametrize("forcing", [True, False])
def test_windows_ask_for_the_generated_position_s_top_n_only_where_they_read_it(
        local, peaked_model_dir, tmp_path, monkeypatch, forcing):
    """A text of several windows: a window whose last target is forced (logit bias on the
    generated position) or that holds the text's end reads no top-n there, so it asks for the
    sampled token alone (``logprobs: 0``); a window that reads its last target from the top-n
    (where forcing is not allowed: a token ending inside a character, here every token) asks for
    the probe's top-n. Values equal the white-box ones either way."""
    import json

    from blackbox_mia.backends.api.http.transport import Transport
    from blackbox_mia.backends.api.tracker.tracker import Tracker

    text = " ".join(gsm8k_questions(2, split="test"))[:150]
    short = LocalBackend(LocalConfig(str(peaked_model_dir), max_length=16))
    [white] = short.logprobs([text])
    bodies = []
    send = Transport.post

    async def post(self, field, body):
        bodies.append(json.loads(body))
        return await send(self, field, body)

    if not forcing:
        monkeypatch.setattr(Tracker, "forces_in_window", lambda self, target: False)
    with serve_in_background(ServerConfig(str(peaked_model_dir), vllm=True), backend=short) as url:
        config = ApiConfig(base_url=url, model=str(peaked_model_dir), max_retries=1)
        backend = ApiBackend(config, tokenizer=str(peaked_model_dir), tracker=TrackerConfig(context=16),
                             cache_dir=tmp_path)
        top_n = backend.probe(full=True).top_n
        monkeypatch.setattr(Transport, "post", post)
        [black] = backend.logprobs([text])
        backend.close()
    windows = [b for b in bodies if "prompt_logprobs" in b]
    forced = [b for b in windows if b.get("logit_bias")]
    last = windows[-1]  # the text's end: no target after the prompt
    assert white.n_tokens > 40 and len(windows) >= 4 and top_n > 1
    assert last["logprobs"] == 0 and not last.get("logit_bias")
    if forcing:
        assert len(forced) == len(windows) - 1 and all(b["logprobs"] == 0 for b in forced)
    else:
        assert not forced and all(b["logprobs"] == top_n for b in windows[:-1])
    # unlisted in the top-n: read by forced read-out in a request of its own
    assert set(black.strategies) == ({"prompt", "forced"} if forcing else {"prompt", "topn", "forced"})
    np.testing.assert_allclose(black.logprobs, white.logprobs, atol=1e-5)
