"""The validation server against LocalBackend's white-box log-probs, through HTTP and the openai SDK."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import numpy as np
import openai
import pytest

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import (
    DEFAULT_CHAT_TEMPLATE,
    ServerConfig,
    ValidationServer,
    load_chat_template,
    serve_in_background,
)
from blackbox_mia.tokenizers import HFTokenCodec, is_partial
from blackbox_mia.types import BlackboxMIAError

from .conftest import gsm8k_questions

KEY = "k-test-secret"


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu"))


@pytest.fixture(scope="module")
def codec(backend):
    return HFTokenCodec(backend.tokenizer, "tiny")


@pytest.fixture(scope="module")
def name(tiny_model_dir):
    return str(tiny_model_dir)


def _serve(backend, model, **overrides):
    return serve_in_background(ServerConfig(model=model, **overrides), backend)


@pytest.fixture(scope="module")
def raw_url(backend, name):
    with _serve(backend, name) as url:
        yield url


@pytest.fixture(scope="module")
def processed_url(backend, name):
    with _serve(backend, name, logprobs_mode="processed") as url:
        yield url


@pytest.fixture(scope="module")
def restricted_url(backend, name):
    with _serve(backend, name, echo=False, logprobs=False, token_id_prompts=False, api_key=KEY) as url:
        yield url


def post_raw(url: str, path: str, body, key: str | None = None) -> tuple[int, bytes]:
    """POST JSON (or raw bytes) and return (status, raw response body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, path: str, body, key: str | None = None) -> tuple[int, dict]:
    """POST JSON (or raw bytes) and return (status, decoded JSON body)."""
    status, raw = post_raw(url, path, body, key)
    return status, json.loads(raw)


def prefixes(backend, n: int) -> list[list[int]]:
    """[bos] + the first tokens of GSM8K questions, of varied lengths within the context."""
    return [[backend.bos_id] + backend.encode(q)[: 3 + 4 * i] for i, q in enumerate(gsm8k_questions(n))]


def top(row: np.ndarray, n: int) -> list[int]:
    return [int(i) for i in np.argsort(-row, kind="stable")[:n]]


def post_bias(row: np.ndarray, bias: dict[int, float]) -> np.ndarray:
    biased = row.astype(np.float64)
    for token, b in bias.items():
        biased[token] += b
    return biased - np.logaddexp.reduce(biased)


def test_completions_top5_equal_white_box_top5(raw_url, backend, codec, name):
    client = openai.OpenAI(base_url=raw_url, api_key="unused")
    assert [m.id for m in client.models.list().data] == [name]
    ids = prefixes(backend, 3)
    rows = backend.next_token_logprobs(ids)
    for prefix, row in zip(ids, rows):
        result = client.completions.create(model=name, prompt=prefix, max_tokens=1, temperature=0, logprobs=5)
        choice = result.choices[0]
        best = int(np.argmax(row))
        assert choice.logprobs.tokens == [codec.token_string(best)]
        assert choice.logprobs.token_logprobs[0] == pytest.approx(row[best], abs=1e-5)
        listed = choice.logprobs.top_logprobs[0]
        assert set(listed) == {codec.token_string(i) for i in top(row, 5)}
        for i in top(row, 5):
            assert listed[codec.token_string(i)] == pytest.approx(row[i], abs=1e-5)
        assert result.usage.prompt_tokens == len(prefix) and result.usage.completion_tokens == 1
        assert choice.finish_reason in ("length", "stop")


def test_raw_mode_bias_forces_token_and_reports_unbiased_logprob(raw_url, backend, codec, name):
    prefix = prefixes(backend, 1)[0]
    row = backend.next_token_logprobs([prefix])[0]
    target = top(row, 120)[-1]  # ranked 120th of 300
    status, body = post(raw_url, "/completions", {"model": name, "prompt": prefix, "max_tokens": 1,
                                                  "temperature": 0, "logprobs": 5, "logit_bias": {str(target): 100}})
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    assert lp["tokens"] == [codec.token_string(target)]
    assert lp["token_logprobs"][0] == pytest.approx(row[target], abs=1e-5)
    listed = lp["top_logprobs"][0]
    assert len(listed) == 6  # unbiased top 5 plus the forced token (as vLLM lists it)
    assert listed[codec.token_string(target)] == pytest.approx(row[target], abs=1e-5)
    for i in top(row, 5):
        assert listed[codec.token_string(i)] == pytest.approx(row[i], abs=1e-5)


def test_processed_mode_reports_post_bias_logprobs(processed_url, backend, codec, name):
    prefix = prefixes(backend, 1)[0]
    row = backend.next_token_logprobs([prefix])[0]
    target = top(row, 120)[-1]
    bias = {target: 100.0}
    status, body = post(processed_url, "/completions", {"model": name, "prompt": prefix, "max_tokens": 1,
                                                        "temperature": 0, "logprobs": 5, "logit_bias": {str(target): 100}})
    assert status == 200
    lp = body["choices"][0]["logprobs"]
    after = post_bias(row, bias)
    assert lp["tokens"] == [codec.token_string(target)]
    assert lp["token_logprobs"][0] == pytest.approx(after[target], abs=1e-5)
    assert lp["token_logprobs"][0] > -1e-3  # ≈ 0 once biased by +100
    listed = lp["top_logprobs"][0]
    assert set(listed) == {codec.token_string(i) for i in top(after, 5)}
    for i in top(after, 5):
        assert listed[codec.token_string(i)] == pytest.approx(after[i], abs=1e-5)
        if i != target:
            assert listed[codec.token_string(i)] < row[i] - 90  # post-bias: pushed down by ~100 nats


def test_bias_applies_at_every_step_and_seeded_sampling_repeats(raw_url, backend, codec, name):
    prefix = prefixes(backend, 1)[0]
    row = backend.next_token_logprobs([prefix])[0]
    target = top(row, 50)[-1]
    _, body = post(raw_url, "/completions", {"model": name, "prompt": prefix, "max_tokens": 3, "temperature": 0,
                                             "logprobs": 0, "logit_bias": {str(target): 100}})
    assert body["choices"][0]["logprobs"]["tokens"] == [codec.token_string(target)] * 3
    assert body["choices"][0]["finish_reason"] == "length"
    sampled = [
        post(raw_url, "/completions", {"model": name, "prompt": prefix, "max_tokens": 6, "temperature": 1.0,
                                       "seed": seed, "logprobs": 1})[1]["choices"][0]["logprobs"]["tokens"]
        for seed in (7, 7, 8)
    ]
    assert sampled[0] == sampled[1] != sampled[2]


def test_echo_prompt_logprobs_equal_local_backend(raw_url, backend, codec, name):
    text = gsm8k_questions(2)[1][:60]
    ids = [backend.bos_id] + backend.encode(text)
    assert len(ids) < backend.context
    want = backend.logprobs([text])[0]
    status, body = post(raw_url, "/completions", {"model": name, "prompt": ids, "max_tokens": 0, "echo": True,
                                                  "logprobs": 2, "temperature": 0})
    assert status == 200
    choice = body["choices"][0]
    lp = choice["logprobs"]
    assert lp["tokens"] == [codec.token_string(i) for i in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    np.testing.assert_allclose(lp["token_logprobs"][1:], want.logprobs, atol=1e-5)
    for j, entry in enumerate(lp["top_logprobs"][1:]):
        assert entry[codec.token_string(ids[j + 1])] == pytest.approx(want.logprobs[j], abs=1e-5)
        assert 2 <= len(entry) <= 3
    assert choice["text"].endswith(text)
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] < len(choice["text"])
    assert body["usage"]["completion_tokens"] == 0


def test_restricted_server_no_echo_no_logprobs_no_token_ids(restricted_url, backend, codec, name):
    text = gsm8k_questions(1)[0][:40]
    request = {"model": name, "prompt": text, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    status, body = post(restricted_url, "/completions", {**request, "echo": True}, key=KEY)
    assert status == 400 and body["error"]["param"] == "echo"
    status, body = post(restricted_url, "/completions", request, key=KEY)
    assert status == 200
    choice = body["choices"][0]
    assert choice["logprobs"] is None
    greedy = int(np.argmax(backend.next_token_logprobs([backend.encode(text)])[0]))  # text prompt: no BOS
    assert choice["text"] == codec.token_string(greedy)
    status, body = post(restricted_url, "/completions", {**request, "prompt": backend.encode(text)}, key=KEY)
    assert status == 400 and body["error"]["param"] == "prompt"
    for key in (None, "wrong-key"):
        status, body = post(restricted_url, "/completions", request, key=key)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=restricted_url, api_key="wrong-key").models.list()


def test_chat_top20_with_bytes(raw_url, backend, codec, name):
    text = gsm8k_questions(1)[0][:50]
    client = openai.OpenAI(base_url=raw_url, api_key="unused")
    result = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": text}], max_tokens=2, temperature=0,
        logprobs=True, top_logprobs=20,
    )
    choice = result.choices[0]
    assert result.object == "chat.completion" and choice.message.role == "assistant"
    content = choice.logprobs.content
    assert len(content) == 2
    prompt = backend.encode(text)
    rows = backend.next_token_logprobs([prompt, prompt + [int(np.argmax(backend.next_token_logprobs([prompt])[0]))]])
    for entry, row in zip(content, rows):
        best = int(np.argmax(row))
        assert entry.token == codec.token_string(best)
        assert entry.bytes == list(codec.token_bytes(best))
        assert entry.logprob == pytest.approx(row[best], abs=1e-5)
        assert len(entry.top_logprobs) == 20
        assert [t.token for t in entry.top_logprobs] == [codec.token_string(i) for i in top(row, 20)]
        for t, i in zip(entry.top_logprobs, top(row, 20)):
            assert t.bytes == list(codec.token_bytes(i))
            assert t.logprob == pytest.approx(row[i], abs=1e-5)
    ids = [codec.lookup(e.token, e.bytes)[0] for e in content]
    assert choice.message.content == codec.decode(ids)


@pytest.mark.parametrize(
    ("path", "change", "status", "param"),
    [
        ("/completions", {"logit_bias": {"5": 150}}, 400, "logit_bias"),
        ("/completions", {"logit_bias": {str(i): 1 for i in range(301)}}, 400, "logit_bias"),
        ("/completions", {"logit_bias": {"1000000": 5}}, 400, "logit_bias"),
        ("/completions", {"logit_bias": {"abc": 5}}, 400, "logit_bias"),
        ("/completions", {"logprobs": 6}, 400, "logprobs"),
        ("/completions", {"logprobs": "5"}, 400, "logprobs"),
        ("/completions", {"n": 2}, 400, "n"),
        ("/completions", {"temperature": 3}, 400, "temperature"),
        ("/completions", {"max_tokens": 0}, 400, "max_tokens"),
        ("/completions", {"max_tokens": 100}, 400, "max_tokens"),
        ("/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
        ("/completions", {"prompt": [0, 10**6]}, 400, "prompt"),
        ("/completions", {"model": "no-such-model"}, 404, "model"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
        ("/chat/completions", {"top_logprobs": 5}, 400, "top_logprobs"),
        ("/chat/completions", {"messages": "hi"}, 400, "messages"),
        # every field the server reads, wrong type or out of range
        ("/completions", {"prompt": None}, 400, "prompt"),
        ("/completions", {"prompt": ""}, 400, "prompt"),
        ("/completions", {"prompt": []}, 400, "prompt"),
        ("/completions", {"prompt": 5}, 400, "prompt"),
        ("/completions", {"prompt": [1.5, 2]}, 400, "prompt"),
        ("/completions", {"prompt": [True, 2]}, 400, "prompt"),
        ("/completions", {"prompt": [-1, 2]}, 400, "prompt"),
        ("/completions", {"max_tokens": -1}, 400, "max_tokens"),
        ("/completions", {"max_tokens": "3"}, 400, "max_tokens"),
        ("/completions", {"max_tokens": 1.0}, 400, "max_tokens"),
        ("/completions", {"temperature": -0.1}, 400, "temperature"),
        ("/completions", {"temperature": "hot"}, 400, "temperature"),
        ("/completions", {"temperature": True}, 400, "temperature"),
        ("/completions", {"logprobs": -1}, 400, "logprobs"),
        ("/completions", {"logprobs": True}, 400, "logprobs"),
        ("/completions", {"echo": "yes"}, 400, "echo"),
        ("/completions", {"echo": 1}, 400, "echo"),
        ("/completions", {"logit_bias": [1]}, 400, "logit_bias"),
        ("/completions", {"logit_bias": {"5": "x"}}, 400, "logit_bias"),
        ("/completions", {"logit_bias": {"5": True}}, 400, "logit_bias"),
        ("/completions", {"seed": -1}, 400, "seed"),
        ("/completions", {"seed": 2**63}, 400, "seed"),
        ("/completions", {"seed": "7"}, 400, "seed"),
        ("/completions", {"seed": 1.5}, 400, "seed"),
        ("/completions", {"n": 0}, 400, "n"),
        ("/completions", {"n": "1"}, 400, "n"),
        ("/completions", {"best_of": 2}, 400, "best_of"),
        ("/completions", {"stop": 5}, 400, "stop"),
        ("/completions", {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ("/completions", {"stop": [""]}, 400, "stop"),
        ("/completions", {"stop": [1]}, 400, "stop"),
        ("/completions", {"stream": True}, 400, "stream"),
        ("/completions", {"stream": "no"}, 400, "stream"),
        ("/completions", {"top_p": 0.5}, 400, "top_p"),
        ("/completions", {"top_p": 2}, 400, "top_p"),
        ("/completions", {"presence_penalty": 3}, 400, "presence_penalty"),
        ("/completions", {"frequency_penalty": 0.5}, 400, "frequency_penalty"),
        ("/completions", {"model": 5}, 400, "model"),
        ("/chat/completions", {"messages": []}, 400, "messages"),
        ("/chat/completions", {"messages": [5]}, 400, "messages"),
        ("/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages"),
        ("/chat/completions", {"messages": [{"role": "robot", "content": "a"}]}, 400, "messages"),
        ("/chat/completions", {"messages": [{"content": "a"}]}, 400, "messages"),
        ("/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, "messages"),
        ("/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         400, "messages"),
        ("/chat/completions", {"messages": [{"role": "user", "content": ""}]}, 400, "messages"),
        ("/chat/completions", {"logprobs": 1}, 400, "logprobs"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": -1}, 400, "top_logprobs"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": "5"}, 400, "top_logprobs"),
        ("/chat/completions", {"max_tokens": 0}, 400, "max_tokens"),
        ("/chat/completions", {"max_completion_tokens": -1}, 400, "max_completion_tokens"),
        ("/chat/completions", {"seed": -1}, 400, "seed"),
        ("/chat/completions", {"stop": {"a": 1}}, 400, "stop"),
        ("/chat/completions", {"stream": True}, 400, "stream"),
        ("/chat/completions", {"n": 2}, 400, "n"),
        ("/chat/completions", {"temperature": 2.5}, 400, "temperature"),
        ("/chat/completions", {"logit_bias": {"5": 101}}, 400, "logit_bias"),
    ],
)
def test_invalid_requests_get_openai_errors(raw_url, name, path, change, status, param):
    base = {"model": name, "max_tokens": 1}
    base.update({"prompt": [0, 5, 6]} if path == "/completions" else {"messages": [{"role": "user", "content": "a"}]})
    got, body = post(raw_url, path, {**base, **change})
    assert got == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == param


def test_malformed_json_unknown_route_and_sdk_error(raw_url, name):
    status, body = post(raw_url, "/completions", b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid_json"
    status, body = post(raw_url, "/no/such/route", {"model": name})
    assert status == 404 and body["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as info:
        openai.OpenAI(base_url=raw_url, api_key="x").completions.create(
            model=name, prompt=[0, 5], max_tokens=1, logit_bias={"5": 150})
    assert info.value.status_code == 400


def test_tokenize_round_trip(raw_url, backend, name):
    root = raw_url.removesuffix("/v1")
    text = gsm8k_questions(3)[2][:80] + " café ✓"
    status, body = post(root, "/tokenize", {"model": name, "prompt": text, "return_token_strs": True})
    assert status == 200
    assert body["tokens"] == backend.encode(text)
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == backend.context
    assert len(body["token_strs"]) == body["count"]
    status, back = post(root, "/detokenize", {"model": name, "tokens": body["tokens"]})
    assert status == 200 and back["prompt"] == text


async def test_micro_batched_equals_sequential(backend, name):
    ids = prefixes(backend, 8)
    rows = backend.next_token_logprobs(ids)
    requests = []
    for prefix, row in zip(ids, rows):
        requests.append({"model": name, "prompt": prefix, "max_tokens": 1, "temperature": 0, "logprobs": 5})
        requests.append({**requests[-1], "logit_bias": {str(top(row, 40)[-1]): 100}})
        requests.append({**requests[-1], "max_tokens": 2, "echo": True})
    batched = ValidationServer(ServerConfig(model=name, batch_window_ms=20), backend)
    unbatched = ValidationServer(ServerConfig(model=name, batch_window_ms=0), backend)
    urls = [await batched.start(), await unbatched.start()]
    try:
        async with aiohttp.ClientSession() as session:

            async def ask(url, body):
                async with session.post(url + "/completions", json=body) as response:
                    assert response.status == 200
                    return (await response.json())["choices"][0]

            concurrent = await asyncio.gather(*(ask(urls[0], r) for r in requests))
            sequential = [await ask(urls[1], r) for r in requests]
    finally:
        await batched.stop()
        await unbatched.stop()
    assert batched.stats["largest_batch"] > 1
    assert batched.stats["forward_passes"] < batched.stats["requests"]
    assert unbatched.stats["largest_batch"] == 1
    for a, b in zip(concurrent, sequential):
        assert a["text"] == b["text"] and a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
        np.testing.assert_allclose(
            [x for x in a["logprobs"]["token_logprobs"] if x is not None],
            [x for x in b["logprobs"]["token_logprobs"] if x is not None], atol=1e-5)
        for da, db in zip(a["logprobs"]["top_logprobs"], b["logprobs"]["top_logprobs"]):
            assert (da is None) == (db is None)
            if da is not None:
                assert set(da) == set(db)
                np.testing.assert_allclose([da[k] for k in db], list(db.values()), atol=1e-5)


def test_config_hides_key_and_cli_lists_options(tiny_model_dir):
    from typer.testing import CliRunner

    from blackbox_mia.cli import serve  # noqa: F401  (registers the command)
    from blackbox_mia.cli.app import app

    assert KEY not in repr(ServerConfig(model="m", api_key=KEY))
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    for option in ("--logprobs-mode", "--no-echo", "--no-logprobs", "--api-key", "--max-logprobs", "--served-name",
                   "--token-id-refusal-status", "--empty-partial-names", "--zero-max-tokens-unlimited",
                   "--chat-template", "--text-bos", "--max-body-bytes"):
        assert option in result.output
    bad = CliRunner().invoke(app, ["serve", "--model", str(tiny_model_dir), "--logprobs-mode", "weird"])
    assert bad.exit_code == 2


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
    """While one large prompt is being tokenized, a small request from another client is answered:
    tokenization runs on its own thread pool, not on the event loop nor the model thread."""
    started, release = threading.Event(), threading.Event()
    encode = backend.encode

    def slow_encode(text: str) -> list[int]:
        if len(text) > 100_000:
            started.set()
            release.wait(timeout=6)  # on the event loop, this would freeze every client
        return encode(text)

    monkeypatch.setattr(backend, "encode", slow_encode)
    with _serve(backend, name, max_body_bytes=4 * 2**20) as url, ThreadPoolExecutor(1) as other_client:
        big = other_client.submit(post, url, "/completions",
                                  {"model": name, "prompt": "Tom has 3 apples. " * 10_000, "max_tokens": 1})
        try:
            assert started.wait(timeout=10)
            began = time.perf_counter()
            status, body = post(url, "/completions", {"model": name, "prompt": "Tom has", "max_tokens": 1})
            waited = time.perf_counter() - began
        finally:
            release.set()
        big_status, big_body = big.result(timeout=30)
    assert status == 200 and body["usage"]["completion_tokens"] == 1
    assert waited < 2.0
    assert big_status == 400 and big_body["error"]["code"] == "context_length_exceeded"


# -- generation as the API backends ask for it (max_tokens up to ~64, temperature 0 or > 0, seed) ----


def greedy_chain(backend, prompt: list[int], steps: int, bias: dict[int, float] | None = None):
    """White-box greedy continuation: argmax of log p(. | ids) + bias at every step, until EOS
    (included) or ``steps`` tokens. Returns the tokens and the raw rows they were chosen from."""
    eos = backend.tokenizer.eos_token_id
    ids, tokens, rows = list(prompt), [], []
    for _ in range(steps):
        row = backend.next_token_logprobs([ids])[0]
        biased = row.astype(np.float64)
        for token, b in (bias or {}).items():
            biased[token] += b
        tokens.append(int(np.argmax(biased)))
        rows.append(row)
        ids.append(tokens[-1])
        if tokens[-1] == eos:
            break
    return tokens, rows


def generation_request(kind: str, backend, max_tokens: int, **options) -> tuple[str, dict, list[int]]:
    """(path, body, ids the model sees) of a completions request with BOS + token ids, or of a
    chat request with one user message (text, no BOS, no template)."""
    if kind == "completions":
        prompt = prefixes(backend, 1)[0]
        return "/completions", {"prompt": prompt, "max_tokens": max_tokens, "logprobs": 0, **options}, prompt
    text = gsm8k_questions(1)[0][:25]
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "logprobs": True,
            "top_logprobs": 0, **options}
    return "/chat/completions", body, backend.encode(text)


def generated(kind: str, body: dict) -> tuple[str, list[str], list[float], str]:
    """(text, token names, token log-probs, finish_reason) of a completions or chat answer."""
    choice = body["choices"][0]
    if kind == "completions":
        lp = choice["logprobs"]
        return choice["text"], lp["tokens"], lp["token_logprobs"], choice["finish_reason"]
    content = choice["logprobs"]["content"]
    return (choice["message"]["content"], [c["token"] for c in content], [c["logprob"] for c in content],
            choice["finish_reason"])


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_greedy_generation_is_the_white_box_argmax_chain(raw_url, backend, codec, name, kind):
    path, request, prompt = generation_request(kind, backend, 0, temperature=0)
    steps = min(48, backend.context - len(prompt))  # as long as the tiny model's 64-token context allows
    assert steps >= 40
    want, rows = greedy_chain(backend, prompt, steps)
    assert backend.tokenizer.eos_token_id not in want  # this prompt: no EOS, the generation runs to its length
    status, body = post(raw_url, path, {**request, "model": name, "max_tokens": steps})
    assert status == 200
    text, tokens, logprobs, finish = generated(kind, body)
    assert tokens == [codec.token_string(t) for t in want]
    assert text == codec.decode(want) and finish == "length"
    assert logprobs == pytest.approx([float(row[t]) for row, t in zip(rows, want)], abs=1e-5)
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": steps,
                             "total_tokens": len(prompt) + steps}


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_generation_stops_at_eos_with_finish_reason_stop(raw_url, backend, codec, name, kind):
    """A bias on EOS between the gaps (argmax - EOS, in nats) of two steps of the greedy chain
    makes EOS the argmax first at step k: the answer ends there, EOS listed but not in the text."""
    eos = backend.tokenizer.eos_token_id
    path, request, prompt = generation_request(kind, backend, 0, temperature=0)
    steps = min(48, backend.context - len(prompt))
    chain, rows = greedy_chain(backend, prompt, steps)
    gaps = [float(row.max() - row[eos]) for row in rows]
    k = next(j for j in range(2, steps) if gaps[j] < min(gaps[:j]))  # the first record low after step 1
    bias = (gaps[k] + min(gaps[:k])) / 2  # above gap k, below every earlier gap
    assert 0 < bias <= 100
    want, _ = greedy_chain(backend, prompt, steps, {eos: bias})
    assert want == chain[:k] + [eos]  # the white-box chain with the bias: EOS first wins at step k
    status, body = post(raw_url, path, {**request, "model": name, "max_tokens": steps, "logit_bias": {str(eos): bias}})
    assert status == 200
    text, tokens, _, finish = generated(kind, body)
    assert finish == "stop" and body["usage"]["completion_tokens"] == k + 1
    assert tokens == [codec.token_string(t) for t in want] and text == codec.decode(chain[:k])


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_seeded_sampling_replays_numpys_generator(raw_url, backend, codec, name, kind):
    """temperature 0.7, seed s: one uniform u from numpy's default_rng(s) per step, the token is
    the first whose cumulative softmax(log p / T) mass exceeds u (inverse CDF); the same seed
    gives the same answer, another seed another one."""
    temperature, steps = 0.7, 32
    path, request, prompt = generation_request(kind, backend, steps, temperature=temperature)

    def replay(seed: int) -> list[int]:
        rng, ids = np.random.default_rng(seed), list(prompt)
        for _ in range(steps):
            scaled = backend.next_token_logprobs([ids])[0].astype(np.float64) / temperature
            cdf = np.cumsum(np.exp(scaled - scaled.max()))
            ids.append(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")))
            if ids[-1] == backend.tokenizer.eos_token_id:
                break
        return ids[len(prompt):]

    answers = [generated(kind, post(raw_url, path, {**request, "model": name, "seed": seed})[1])
               for seed in (11, 11, 12)]
    assert answers[0] == answers[1] and answers[0][1] != answers[2][1]
    for seed, (text, tokens, _, _) in zip((11, 12), (answers[0], answers[2])):
        want = replay(seed)
        assert tokens == [codec.token_string(t) for t in want]
        assert text == codec.decode([t for t in want if t != backend.tokenizer.eos_token_id])
