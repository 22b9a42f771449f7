"""The emulator's vLLM mode (``ServerConfig(vllm=True)``): ``prompt_logprobs``, echo, ``stop_reason``,
billing and ``/tokenize`` as vLLM answers them, against the white-box model."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from ..conftest import gsm8k_questions
from ..helpers_server import _serve, post, top


@pytest.fixture(scope="module")
def vllm_url(backend, name):
    with _serve(backend, name, vllm=True, text_bos=True) as url:
        yield url


def _text_ids(backend, i: int = 1, chars: int = 60) -> tuple[str, list[int]]:
    text = gsm8k_questions(i + 1)[i][:chars]
    return text, [backend.bos_id] + backend.encode(text)


def _rank(row: np.ndarray, token: int) -> int:
    return int(np.count_nonzero(row >= row[token]))


def test_prompt_logprobs_one_request_per_text_equal_white_box(vllm_url, backend, codec, name):
    text, ids = _text_ids(backend)
    want = backend.logprobs([text])[0].logprobs
    rows = backend.next_token_logprobs([ids[:j] for j in range(1, len(ids))])
    status, body = post(vllm_url, "/completions", {"model": name, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0, "prompt_logprobs": 3})
    assert status == 200
    choice = body["choices"][0]
    plp = choice["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    assert choice["logprobs"] is None and choice["stop_reason"] is None
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1}
    for j, (entry, row) in enumerate(zip(plp[1:], rows), start=1):
        keys = list(entry)
        assert keys[0] == str(ids[j])  # the prompt's own token first
        own = entry[str(ids[j])]
        assert own["logprob"] == pytest.approx(want[j - 1], abs=1e-5)
        assert own["rank"] == _rank(row, ids[j]) >= 1
        assert own["decoded_token"] == codec.token_string(ids[j])
        best = top(row, 3)
        assert set(keys) == {str(ids[j]), *map(str, best)} and len(keys) == 3 + (ids[j] not in best)
        for rank, i in enumerate(best, start=1):
            assert entry[str(i)]["rank"] == rank
            assert entry[str(i)]["logprob"] == pytest.approx(row[i], abs=1e-5)


def test_prompt_logprobs_zero_lists_the_prompt_token_only_through_the_sdk(vllm_url, backend, name):
    """The openai SDK passes the field through ``extra_body`` and keeps the answer's extra field."""
    text, ids = _text_ids(backend, 2, 40)
    want = backend.logprobs([text])[0].logprobs
    client = openai.OpenAI(base_url=vllm_url, api_key="unused")
    result = client.completions.create(model=name, prompt=text, max_tokens=1, temperature=0,
                                       extra_body={"prompt_logprobs": 0})
    plp = result.choices[0].model_extra["prompt_logprobs"]
    assert result.usage.prompt_tokens == len(ids)  # text_bos: the server added BOS to the text
    assert plp[0] is None and [list(e) for e in plp[1:]] == [[str(i)] for i in ids[1:]]
    np.testing.assert_allclose([e[str(i)]["logprob"] for e, i in zip(plp[1:], ids[1:])], want, atol=1e-5)


def test_echo_is_built_from_the_prompt_logprobs_and_bills_one_token(vllm_url, backend, codec, name):
    text, ids = _text_ids(backend)
    want = backend.logprobs([text])[0].logprobs
    rows = backend.next_token_logprobs([ids[:j] for j in range(1, len(ids))])
    status, body = post(vllm_url, "/completions", {"model": name, "prompt": ids, "max_tokens": 0, "echo": True,
                                                   "logprobs": 2})
    assert status == 200
    choice = body["choices"][0]
    lp = choice["logprobs"]
    # not asked for, but vLLM 0.32 computes them for echo (logprobs: 2 of them) and returns the field
    plp = choice["prompt_logprobs"]
    assert plp[0] is None and all(len(row) in (2, 3) and str(i) in row for row, i in zip(plp[1:], ids[1:]))
    assert lp["tokens"] == [codec.token_string(i) for i in ids] and choice["text"].endswith(text)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    np.testing.assert_allclose(lp["token_logprobs"][1:], want, atol=1e-5)
    for j, (entry, row) in enumerate(zip(lp["top_logprobs"][1:], rows), start=1):
        others = [i for i in top(row, 2) if i != ids[j]]  # the prompt token first, then the rest of the top 2
        assert list(entry) == [codec.token_string(i) for i in [ids[j], *others]]
    assert body["usage"]["completion_tokens"] == 1  # vLLM runs (and bills) one decoding step

    # prompt_logprobs smaller than logprobs: the echoed lists follow prompt_logprobs (vLLM)
    status, body = post(vllm_url, "/completions", {"model": name, "prompt": ids, "max_tokens": 0, "echo": True,
                                                   "logprobs": 2, "prompt_logprobs": 0})
    choice = body["choices"][0]
    assert [list(e) for e in choice["logprobs"]["top_logprobs"][1:]] == [[codec.token_string(i)] for i in ids[1:]]
    assert [list(e) for e in choice["prompt_logprobs"][1:]] == [[str(i)] for i in ids[1:]]


def test_stop_reason_names_the_stop_string(vllm_url, backend, name):
    (x,) = backend.encode("x")
    request = {"model": name, "prompt": [0, 5], "max_tokens": 6, "temperature": 0, "logit_bias": {str(x): 100}}
    _, body = post(vllm_url, "/completions", {**request, "stop": ["zz", "xxx"]})
    assert body["choices"][0]["stop_reason"] == "xxx" and body["choices"][0]["finish_reason"] == "stop"
    _, body = post(vllm_url, "/completions", request)
    assert body["choices"][0]["stop_reason"] is None and body["choices"][0]["finish_reason"] == "length"


def test_chat_prompt_logprobs_at_the_top_level(vllm_url, backend, name):
    text = gsm8k_questions(1)[0][:30]
    ids = [backend.bos_id] + backend.encode(text)  # text_bos: the templated chat prompt gets BOS too
    want = backend.logprobs([text])[0].logprobs
    status, body = post(vllm_url, "/chat/completions", {"model": name, "messages": [{"role": "user", "content": text}],
                                                        "max_tokens": 1, "prompt_logprobs": 0})
    assert status == 200 and body["usage"]["prompt_tokens"] == len(ids)
    plp = body["prompt_logprobs"]
    assert plp[0] is None and [list(e) for e in plp[1:]] == [[str(i)] for i in ids[1:]]
    np.testing.assert_allclose([e[str(i)]["logprob"] for e, i in zip(plp[1:], ids[1:])], want, atol=1e-5)
    assert body["choices"][0]["stop_reason"] is None


@pytest.mark.parametrize("value", [-1, 21, 1.5, "3", True])
def test_bad_prompt_logprobs_is_refused(backend, name, value):
    with _serve(backend, name, vllm=True, max_logprobs_completions=20) as url:
        status, body = post(url, "/completions", {"model": name, "prompt": [0, 5], "max_tokens": 1,
                                                  "prompt_logprobs": value})
    assert status == 400 and body["error"]["param"] == "prompt_logprobs"


def test_openai_mode_ignores_prompt_logprobs(raw_url, name):
    status, body = post(raw_url, "/completions", {"model": name, "prompt": [0, 5], "max_tokens": 1,
                                                  "prompt_logprobs": 2})
    assert status == 200
    assert "prompt_logprobs" not in body["choices"][0] and "stop_reason" not in body["choices"][0]
    assert "prompt_logprobs" not in body


def test_tokenize_adds_special_tokens_by_default_as_vllm(vllm_url, raw_url, backend, name):
    text = "Natalia sold clips"
    bos = backend.tokenizer.bos_token_id
    root = vllm_url.removesuffix("/v1")
    _, body = post(root, "/tokenize", {"model": name, "prompt": text})
    assert body["tokens"] == [bos, *backend.encode(text)] and body["count"] == len(body["tokens"])
    _, body = post(root, "/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})
    assert body["tokens"] == backend.encode(text)
    _, body = post(root, "/tokenize", {"model": name, "messages": [{"role": "user", "content": text}]})
    assert body["tokens"] == backend.encode(text)  # chat messages: no special tokens unless asked
    _, body = post(root, "/detokenize", {"model": name, "tokens": backend.encode(text)})
    assert body["prompt"] == text
