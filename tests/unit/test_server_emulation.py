"""The validation server's emulated real-server behaviours (options that copy what real servers do)
and its robustness (body size limit, tokenization off the event loop)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from blackbox_mia.emulator import (
    DEFAULT_CHAT_TEMPLATE,
    ServerConfig,
    load_chat_template,
)
from blackbox_mia.tokenizers import is_partial
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions
from ..helpers_server import _serve, post, post_raw, prefixes, top

# -- emulated real-server behaviours ---------------------------------------------------------


def test_missing_model_is_refused_with_openai_wording(raw_url):
    status, body = post(raw_url, "/completions", {"prompt": [0, 5], "max_tokens": 1})
    assert status == 400
    assert body["error"] == {"message": "you must provide a model parameter", "type": "invalid_request_error",
                             "param": "model", "code": None}
    status, body = post(raw_url, "/chat/completions", {"messages": [{"role": "user", "content": "a"}]})
    assert status == 400 and body["error"]["param"] == "model"


@pytest.mark.parametrize("seed", [0, 2**63 - 1])
def test_seed_limits_are_accepted(raw_url, name, seed):
    status, body = post(raw_url, "/completions", {"model": name, "prompt": [0, 5], "max_tokens": 2,
                                                  "temperature": 1.0, "seed": seed})
    assert status == 200 and body["usage"]["completion_tokens"] >= 1


def test_stop_sequence_ends_generation_and_cuts_text(raw_url, backend, codec, name):
    (x,) = backend.encode("x")
    request = {"model": name, "prompt": [0, 5], "max_tokens": 6, "temperature": 0, "logit_bias": {str(x): 100}}
    status, body = post(raw_url, "/completions", request)
    assert status == 200 and body["choices"][0]["text"] == "x" * 6
    status, body = post(raw_url, "/completions", {**request, "stop": ["zz", "xxx"], "logprobs": 0})
    choice = body["choices"][0]
    assert status == 200 and choice["text"] == "" and choice["finish_reason"] == "stop"
    assert choice["logprobs"]["tokens"] == ["x"] * 3 and body["usage"]["completion_tokens"] == 3
    status, body = post(raw_url, "/chat/completions", {"model": name, "messages": [{"role": "user", "content": "a"}],
                                                       "max_tokens": 6, "temperature": 0,
                                                       "logit_bias": {str(x): 100}, "stop": "xx"})
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == "" and body["usage"]["completion_tokens"] == 2


def test_empty_partial_names(backend, codec, name):
    text = "café ½ 日本語"
    ids = backend.encode(text)
    partial = [i for i in ids if is_partial(codec.token_bytes(i))]
    assert len(partial) >= 6  # é, ½ and the CJK characters are split into byte tokens
    echo = {"model": name, "prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1}
    with _serve(backend, name) as url:
        _, default = post(url, "/completions", echo)
    with _serve(backend, name, empty_partial_names=True) as url:
        status, body = post(url, "/completions", echo)
        assert status == 200
        tokens = body["choices"][0]["logprobs"]["tokens"]
        assert tokens == ["" if is_partial(codec.token_bytes(i)) else codec.token_string(i) for i in ids]
        assert default["choices"][0]["logprobs"]["tokens"] == [codec.token_string(i) for i in ids]
        assert codec.token_string(partial[0]).startswith("bytes:\\x")  # what the default names them
        assert body["choices"][0]["text"] == text
        assert body["choices"][0]["logprobs"]["text_offset"] == default["choices"][0]["logprobs"]["text_offset"]

        # chat: the forced partial token is named "" and its bytes are exact, also in the top list
        forced = partial[0]
        status, body = post(url, "/chat/completions", {
            "model": name, "messages": [{"role": "user", "content": text}], "max_tokens": 2, "temperature": 0,
            "logprobs": True, "top_logprobs": 20, "logit_bias": {str(forced): 100}})
        assert status == 200
        for entry in body["choices"][0]["logprobs"]["content"]:
            assert entry["token"] == "" and entry["bytes"] == list(codec.token_bytes(forced))
            for item in entry["top_logprobs"]:
                i = codec.lookup(item["token"], item["bytes"])
                assert len(i) == 1 and item["token"] == ("" if is_partial(codec.token_bytes(i[0])) else
                                                         codec.token_string(i[0]))

        # completions top lists: colliding partial names keep the highest value
        prefix = next(p for p in prefixes(backend, 40)
                      if sum(is_partial(codec.token_bytes(i)) for i in top(backend.next_token_logprobs([p])[0], 5)) >= 2)
        row = backend.next_token_logprobs([prefix])[0]
        best5 = top(row, 5)
        status, body = post(url, "/completions", {"model": name, "prompt": prefix, "max_tokens": 1,
                                                  "temperature": 0, "logprobs": 5})
        listed = body["choices"][0]["logprobs"]["top_logprobs"][0]
        partial_values = [row[i] for i in best5 if is_partial(codec.token_bytes(i))]
        assert listed[""] == pytest.approx(max(partial_values), abs=1e-5)
        assert len(listed) == 5 - len(partial_values) + 1


def test_token_id_refusal_status_500_repeats_the_same_body(backend, name):
    with _serve(backend, name, token_id_prompts=False, token_id_refusal_status=500) as url:
        request = {"model": name, "prompt": [0, 5, 6], "max_tokens": 1}
        first, second = post_raw(url, "/completions", request), post_raw(url, "/completions", request)
        assert first[0] == second[0] == 500
        assert first[1] == second[1]
        assert json.loads(first[1])["error"]["type"] == "server_error"
        status, _ = post(url, "/completions", {**request, "prompt": "Tom has"})
        assert status == 200
    with pytest.raises(BlackboxMIAError):
        ServerConfig(model=name, token_id_refusal_status=200)


def test_zero_max_tokens_unlimited_generates_to_the_context_end(backend, name):
    (x,) = backend.encode("x")
    prompt = prefixes(backend, 2)[1]
    request = {"model": name, "prompt": prompt, "max_tokens": 0, "temperature": 0, "logit_bias": {str(x): 100}}
    with _serve(backend, name, zero_max_tokens_unlimited=True) as url:
        status, body = post(url, "/completions", request)
        assert status == 200
        assert body["usage"]["completion_tokens"] == backend.context - len(prompt)
        assert body["choices"][0]["text"] == "x" * (backend.context - len(prompt))
        assert body["choices"][0]["finish_reason"] == "length"
        status, body = post(url, "/chat/completions", {**request, "prompt": None,
                                                       "messages": [{"role": "user", "content": "Tom"}]})
        assert status == 200 and body["usage"]["total_tokens"] == backend.context
    with _serve(backend, name) as url:  # default: prompt only with echo, refused without
        status, body = post(url, "/completions", {**request, "echo": True})
        assert status == 200 and body["usage"]["completion_tokens"] == 0
        status, _ = post(url, "/completions", request)
        assert status == 400


def test_chat_template_conditions_chat_logprobs(backend, codec, name, tmp_path):
    text = gsm8k_questions(1)[0][:30]
    templated = DEFAULT_CHAT_TEMPLATE.replace("{content}", text)
    row_chat = backend.next_token_logprobs([backend.encode(templated)])[0]
    row_text = backend.next_token_logprobs([backend.encode(text)])[0]
    with _serve(backend, name, chat_template=DEFAULT_CHAT_TEMPLATE) as url:
        status, chat = post(url, "/chat/completions", {
            "model": name, "messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0,
            "logprobs": True, "top_logprobs": 5})
        assert status == 200
        _, plain = post(url, "/completions", {"model": name, "prompt": text, "max_tokens": 1, "temperature": 0,
                                              "logprobs": 5})
        status, tokenized = post(url.removesuffix("/v1"), "/tokenize",
                                 {"messages": [{"role": "user", "content": text}]})
    entry = chat["choices"][0]["logprobs"]["content"][0]
    assert entry["logprob"] == pytest.approx(row_chat.max(), abs=1e-5)
    assert [t["token"] for t in entry["top_logprobs"]] == [codec.token_string(i) for i in top(row_chat, 5)]
    assert chat["usage"]["prompt_tokens"] == len(backend.encode(templated))
    first = plain["choices"][0]["logprobs"]["token_logprobs"][0]
    assert first == pytest.approx(row_text.max(), abs=1e-5)
    assert abs(first - entry["logprob"]) > 1e-3  # the template changes the conditional
    assert tokenized["tokens"] == backend.encode(templated)
    path = tmp_path / "template.txt"
    path.write_text("[INST] {content} [/INST]", encoding="utf-8")
    assert load_chat_template("default") == DEFAULT_CHAT_TEMPLATE
    assert load_chat_template(str(path)) == "[INST] {content} [/INST]"
    path.write_text("no field", encoding="utf-8")
    for bad in (str(path), str(tmp_path / "missing.txt")):
        with pytest.raises(BlackboxMIAError):
            load_chat_template(bad)


def test_text_bos_prepends_bos_to_text_prompts_only(backend, codec, name):
    text = gsm8k_questions(2)[1][:50]
    ids = backend.encode(text)
    bos = backend.tokenizer.bos_token_id
    want = backend.logprobs([text])[0]  # scored after [BOS]
    assert backend.bos_id == bos
    with _serve(backend, name, text_bos=True) as url:
        status, body = post(url, "/completions", {"model": name, "prompt": text, "max_tokens": 0, "echo": True,
                                                  "logprobs": 1})
        assert status == 200
        lp = body["choices"][0]["logprobs"]
        assert lp["tokens"] == [codec.token_string(i) for i in [bos, *ids]]
        np.testing.assert_allclose(lp["token_logprobs"][1:], want.logprobs, atol=1e-5)
        assert body["choices"][0]["text"] == text  # the BOS is not part of the text...
        assert lp["text_offset"][:2] == [0, 0]  # ...and takes no room in it
        assert body["usage"]["prompt_tokens"] == len(ids) + 1
        _, body = post(url, "/completions", {"model": name, "prompt": text, "max_tokens": 1, "temperature": 0,
                                             "logprobs": 1})
        row = backend.next_token_logprobs([[bos, *ids]])[0]
        assert body["choices"][0]["logprobs"]["token_logprobs"][0] == pytest.approx(row.max(), abs=1e-5)
        _, body = post(url, "/completions", {"model": name, "prompt": ids, "max_tokens": 1})
        assert body["usage"]["prompt_tokens"] == len(ids)  # token-id prompts are used as given
        _, body = post(url, "/chat/completions", {"model": name, "messages": [{"role": "user", "content": text}],
                                                  "max_tokens": 1})
        assert body["usage"]["prompt_tokens"] == len(ids) + 1
        _, body = post(url.removesuffix("/v1"), "/tokenize", {"prompt": text, "add_special_tokens": True})
        assert body["tokens"] == [bos, *ids]
    with _serve(backend, name) as url:
        _, body = post(url, "/completions", {"model": name, "prompt": text, "max_tokens": 1})
        assert body["usage"]["prompt_tokens"] == len(ids)


# -- robustness -------------------------------------------------------------------------------


def test_oversized_body_gets_413(raw_url, backend, name):
    limit = ServerConfig(model=name).max_body_bytes
    assert limit == 2**20
    status, body = post(raw_url, "/completions", {"model": name, "prompt": "a " * (limit // 2), "max_tokens": 1})
    assert status == 413
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == "request_too_large"
    with _serve(backend, name, max_body_bytes=1000) as url:
        request = {"model": name, "prompt": "a " * 600, "max_tokens": 1}
        status, body = post(url, "/completions", request)
        assert status == 413 and "1000" in body["error"]["message"]
        request["prompt"] = "a " * ((1000 - len(json.dumps({**request, "prompt": ""}))) // 2)
        assert len(json.dumps(request)) <= 1000
        status, body = post(url, "/completions", request)  # read and tokenized
        assert status == 400 and body["error"]["code"] == "context_length_exceeded"
        status, _ = post(url, "/completions", {**request, "prompt": "a " * 10})
        assert status == 200


def test_long_tokenization_does_not_block_other_clients(backend, name, monkeypatch):
    """While one large text is being tokenized, a small request from another client is answered:
    tokenization runs on its own thread pool, not on the event loop nor the model thread."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    encode = backend.encode

    def slow_encode(text: str) -> list[int]:
        if len(text) > 100_000:
            started.set()
            release.wait(timeout=6)  # on the event loop, this would freeze every client
            finished.set()
        return encode(text)

    monkeypatch.setattr(backend, "encode", slow_encode)
    with _serve(backend, name, max_body_bytes=4 * 2**20) as url, ThreadPoolExecutor(1) as other_client:
        # /tokenize: a prompt this long is refused by /completions before it is tokenized
        big = other_client.submit(post, url.removesuffix("/v1"), "/tokenize",
                                  {"model": name, "prompt": "Tom has 3 apples. " * 10_000})
        try:
            assert started.wait(timeout=10)
            status, body = post(url, "/completions", {"model": name, "prompt": "Tom has", "max_tokens": 1})
            answered_during_tokenization = not finished.is_set()
        finally:
            release.set()
        big_status, big_body = big.result(timeout=30)
    assert status == 200 and body["usage"]["completion_tokens"] == 1
    assert answered_during_tokenization
    assert big_status == 200 and big_body["count"] > 10_000


def test_tokenize_has_a_text_limit_of_its_own_checked_before_tokenizing(backend, name, monkeypatch):
    """A body limit raised for long requests does not let /tokenize tokenize megabytes (issue 51:
    two 10 MB texts took 45 s and 3.79 GB): a text over ``max_tokenize_chars`` is refused, untokenized."""
    assert ServerConfig(model=name).max_tokenize_chars == 2**20
    encoded = []
    encode = backend.encode
    monkeypatch.setattr(backend, "encode", lambda text: encoded.append(len(text)) or encode(text))
    with _serve(backend, name, max_body_bytes=16 * 2**20) as url:
        base = url.removesuffix("/v1")
        status, body = post(base, "/tokenize", {"prompt": "Tom has 3 apples. " * 600_000})  # 10.8 M characters
        assert status == 400 and body["error"]["code"] == "string_above_max_length"
        assert body["error"]["param"] == "prompt" and "10800000 characters" in body["error"]["message"]
        assert "at most 1048576" in body["error"]["message"] and encoded == []
    with _serve(backend, name, max_tokenize_chars=1000) as url:
        base = url.removesuffix("/v1")
        status, body = post(base, "/tokenize", {"prompt": "a" * 1000})
        assert status == 200 and encoded == [1000]
        status, body = post(base, "/tokenize", {"prompt": "a" * 1001})
        assert status == 400 and "1001 characters" in body["error"]["message"] and encoded == [1000]
        status, body = post(base, "/tokenize", {"messages": [{"role": "user", "content": "a" * 1001}]})
        assert status == 400 and body["error"]["param"] == "messages" and encoded == [1000]
