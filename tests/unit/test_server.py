"""The validation server against LocalBackend's white-box log-probs, through HTTP and the openai SDK.

Emulated real-server behaviours and robustness: test_server_emulation.py; generation:
test_server_generation.py."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np
import openai
import pytest

from blackbox_mia.emulator import ServerConfig, ValidationServer

from ..conftest import gsm8k_questions
from ..helpers_server import _serve, post, prefixes, top

KEY = "k-test-secret"


@pytest.fixture(scope="module")
def processed_url(backend, name):
    with _serve(backend, name, logprobs_mode="processed") as url:
        yield url


@pytest.fixture(scope="module")
def restricted_url(backend, name):
    with _serve(backend, name, echo=False, logprobs=False, token_id_prompts=False, api_key=KEY) as url:
        yield url


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
