"""ApiClient answer validation against the in-test OpenAI-shaped server: garbage, truncated and
invalid 200 answers are retried, never cached, and fail naming the field."""

from __future__ import annotations

import json
import logging

import pytest

import blackbox_mia.backends.api.http.fetch as fetch
from blackbox_mia.backends.api.http.errors import NotAnApiError
from blackbox_mia.backends.api.http.faults import QUICK_RETRY_S, ApiError

from ..helpers_client import completion_answer, retry_waits


@pytest.mark.parametrize("fault, match", [
    ({"status": 200, "text": '{"choices": [{"text": " A", "logpr'}, "the body is .*, expected a JSON object"),
    ({"status": 200, "json": ["a", "list"]}, r"the body is \['a', 'list'\], expected a JSON object"),
    ({"status": 200, "json": {"object": "text_completion"}}, r"choices is missing"),
    ({"status": 200, "json": {"choices": []}}, "choices is empty"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": "abc", "top_logprobs": [None]}}]}}, "token_logprobs is 'abc'"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": [-1.0, -2.0], "top_logprobs": None}}]}}, "of different lengths"),
    ({"status": 200, "json": {"choices": [{"text": " A", "logprobs": {
        "tokens": [" A"], "token_logprobs": [-1.0], "top_logprobs": [{" A": "high"}]}}]}}, r"top_logprobs\[0\]"),
])
async def test_garbage_answers_are_retried_never_cached_then_fail_as_invalid(client, fake, fault, match):
    fake.faults = [fault] * 4  # every attempt (max_retries=3)
    with pytest.raises(ApiError, match=match) as err:
        await client.complete([1], logprobs=1)
    cut_short = fault.get("text", "").startswith("{")  # JSON cut short: corrupt, the others parse
    assert err.value.fault == ("corrupt" if cut_short else "invalid") and err.value.status_code == 200
    assert str(err.value).endswith(f"({err.value.fault}: gave up after 4 attempts)")
    assert len(client.cache) == 0 and client.usage.retries == 3 and client.usage.invalid_answers == 4
    result = await client.complete([1], logprobs=1)  # the next call asks again
    assert result["cached"] is False and fake.hits == 5


async def test_a_200_that_is_not_json_at_all_fails_at_once(client, fake):
    fake.faults = [{"status": 200, "text": "<html>oops</html>"}] * 4  # a web page: another server, not a glitch
    named = r"does not look like an OpenAI-compatible API: POST .* answered HTTP 200 with an HTML page, not JSON"
    with pytest.raises(NotAnApiError, match=named + r" \(is the URL the API's, ending in /v1\?\)") as err:
        await client.complete([1], logprobs=1)
    assert err.value.fault == "final" and str(err.value).endswith("(final: not retried)")
    assert "oops" not in str(err.value)  # the page itself is not repeated
    assert fake.hits == 1 and client.usage.retries == 0 and len(client.cache) == 0


async def test_truncated_json_200_is_retried(client, fake):
    fake.faults = [{"status": 200, "text": '{"id": "cmpl-1", "choices": [{"text": " A", "logprobs": {"tok'}]
    result = await client.complete([1], logprobs=1)
    assert result["tokens"][0]["logprob"] == -0.5 and fake.hits == 2 and client.usage.retries == 1
    assert len(client.cache) == 1


def _completion(tokens, values, tops, *, usage=None, text=" A"):
    answer = {"choices": [{"text": text, "finish_reason": "length",
                           "logprobs": {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops}}]}
    return {**answer, "usage": usage} if usage else answer


TOP = {" A": -0.5}
INVALID_COMPLETIONS = {  # name: (request, answer, message naming the field)
    "logprobs-missing": (dict(logprobs=1), {"choices": [{"text": " A", "logprobs": None}]},
                         r"choices\[0\]\.logprobs is missing"),
    "no-generated-token": (dict(logprobs=1), _completion([], [], []),
                           r"choices\[0\]\.logprobs\.tokens has no generated token"),
    "null-logprob": (dict(logprobs=1), _completion([" A"], [None], [TOP]),
                     r"choices\[0\]\.logprobs\.token_logprobs\[0\] is None, expected a number"),
    "empty-top": (dict(logprobs=1), _completion([" A"], [-0.5], [{}]),
                  r"choices\[0\]\.logprobs\.top_logprobs\[0\] is \{\}, expected at least one"),
    "null-top": (dict(logprobs=2), _completion([" A"], [-0.5], [None]),
                 r"top_logprobs\[0\] is None, expected at least one of the 2"),
    "null-echoed-logprob": (dict(logprobs=1, echo=True),
                            _completion(["<1>", "<2>", " A"], [None, None, -0.5], [None, TOP, TOP]),
                            r"choices\[0\]\.logprobs\.token_logprobs\[1\] is None, expected a number"),
    "echo-too-short": (dict(logprobs=1, echo=True), _completion(["<1>", " A"], [None, -0.5], [None, TOP]),
                       r"has 2 entries, fewer than the 2 prompt tokens plus 1 generated|tokens has no generated"),
    "echo-text-no-usage": (dict(logprobs=1, echo=True, prompt="a b"),
                           _completion(["a", " b", " A"], [None, -1.0, -0.5], [None, TOP, TOP]),
                           r"usage\.prompt_tokens is missing"),
}


@pytest.mark.parametrize("name", list(INVALID_COMPLETIONS))
async def test_invalid_completion_answers_name_the_field(client, fake, name):
    request, answer, match = INVALID_COMPLETIONS[name]
    request = {"prompt": [1, 2], **request}
    fake.faults = [{"status": 200, "json": answer}] * 4
    with pytest.raises(ApiError, match=match) as err:
        await client.complete(request.pop("prompt"), max_tokens=1, **request)
    assert err.value.fault == "invalid" and fake.hits == 4 and len(client.cache) == 0


@pytest.mark.parametrize("constant", ["NaN", "-Infinity", "Infinity"])
@pytest.mark.parametrize("place", ["token_logprobs", "top_logprobs", "usage"])
async def test_nan_and_infinity_anywhere_are_invalid_and_never_cached(client, fake, constant, place):
    answer = json.dumps(completion_answer({"prompt": [1], "max_tokens": 1, "logprobs": 1}))
    target = {"token_logprobs": '"token_logprobs": [-0.5]', "top_logprobs": '{" A": -0.5}',
              "usage": '"total_tokens": 2'}[place]
    assert target in answer
    bad = answer.replace(target, target.replace("-0.5", constant).replace("2", constant))
    fake.faults = [{"status": 200, "text": bad}] * 4
    with pytest.raises(ApiError, match=f"holds {constant}, which is not JSON") as err:
        await client.complete([1], logprobs=1)
    assert err.value.fault == "corrupt" and len(client.cache) == 0 and fake.hits == 4


@pytest.mark.parametrize("number", ["1e999", "-1e400"])
async def test_numbers_too_large_for_a_double_are_invalid_and_never_cached(client, fake, number):
    answer = json.dumps(completion_answer({"prompt": [1], "max_tokens": 1, "logprobs": 1}))
    bad = answer.replace('"token_logprobs": [-0.5]', f'"token_logprobs": [{number}]')
    assert bad != answer
    fake.faults = [{"status": 200, "text": bad}] * 4
    with pytest.raises(ApiError, match=r"token_logprobs\[0\] is not a finite number") as err:
        await client.complete([1], logprobs=1)
    assert err.value.fault == "corrupt" and len(client.cache) == 0 and fake.hits == 4


def test_answers_decode_alike_on_the_fast_path_and_the_named_one():
    from blackbox_mia.backends.api.http.answers import decode_answer

    body = rb'{"a": [1, -0.5, 1e-300, 12345678901234567], "b": "caf\u00e9 \ud83d\ude00", "c": null, "d": true}'
    assert decode_answer(body) == json.loads(body)  # orjson
    assert decode_answer(b"\xef\xbb\xbf" + body) == json.loads(body)  # a BOM: orjson refuses, the standard library decodes


async def test_a_server_that_always_omits_logprobs_is_detected_within_a_second(make_client, fake, caplog):
    caplog.set_level(logging.WARNING, logger=fetch.__name__)
    client = make_client(max_retries=6, backoff_base_s=1.0, backoff_max_s=60.0)  # the defaults
    fake.faults = [{"status": 200, "json": {"choices": [{"text": " A", "logprobs": None}]}}] * 7
    with pytest.raises(ApiError, match=r"choices\[0\]\.logprobs is missing \(invalid: gave up after 7 attempts\)"):
        await client.complete([1], logprobs=5)
    assert fake.hits == 7 and len(client.cache) == 0
    # the waits asked for between the attempts (each retry logs it): short linear ones, not the backoff (1 s, 2 s, ...)
    waits = retry_waits(caplog.text)
    assert waits == pytest.approx([QUICK_RETRY_S * k for k in range(1, 7)]) and sum(waits) < 1.0


async def test_invalid_then_valid_answer_is_cached(client, fake):
    fake.faults = [{"status": 200, "json": {"choices": [{"text": " A", "logprobs": None}]}}]
    result = await client.complete([1], logprobs=1)
    assert result["tokens"][0]["logprob"] == -0.5 and fake.hits == 2 and client.usage.invalid_answers == 1
    assert (await client.complete([1], logprobs=1))["cached"] is True and fake.hits == 2


def _chat(content, text="A"):
    return {"choices": [{"message": {"content": text}, "finish_reason": "length", "logprobs": content}]}


def _item(logprob=-1.0, top=({"token": "A", "logprob": -1.0, "bytes": [65]},)):
    return {"token": "A", "logprob": logprob, "bytes": [65], "top_logprobs": list(top)}


INVALID_CHATS = {
    "logprobs-missing": (_chat(None), r"choices\[0\]\.logprobs is missing"),
    "content-missing": (_chat({"content": None}), r"choices\[0\]\.logprobs\.content is missing"),
    "content-empty": (_chat({"content": []}), r"choices\[0\]\.logprobs\.content has no generated token"),
    "null-logprob": (_chat({"content": [_item(None)]}), r"content\[0\]\.logprob is None, expected a number"),
    "empty-top": (_chat({"content": [_item(top=())]}), r"content\[0\]\.top_logprobs is \[\], expected at least"),
    "top-without-logprob": (_chat({"content": [_item(top=({"token": "A"},))]}),
                            r"content\[0\]\.top_logprobs\[0\]\.logprob is None, expected a number"),
}


@pytest.mark.parametrize("name", list(INVALID_CHATS))
async def test_invalid_chat_answers_name_the_field(client, fake, name):
    answer, match = INVALID_CHATS[name]
    fake.faults = [{"status": 200, "json": answer}] * 4
    with pytest.raises(ApiError, match=match) as err:
        await client.chat("x", top_logprobs=1)
    assert err.value.fault == "invalid" and fake.hits == 4 and len(client.cache) == 0


async def test_tokens_past_max_tokens_are_set_apart_not_refused(client, fake):
    """llama-cpp-python generates past max_tokens while its output ends inside a character: the
    first max_tokens entries are the answer's tokens (the conditionals they claim to be), the
    rest are kept apart under past_max_tokens."""
    fake.faults = [{"status": 200, "json": _completion([" A", " B"], [-0.5, -1.0], [TOP, {" B": -1.0}])}]
    result = await client.complete([1, 2], max_tokens=1, logprobs=1)
    assert [(e["token"], e["logprob"]) for e in result["tokens"]] == [(" A", -0.5)] and fake.hits == 1
    assert [(e["token"], e["logprob"]) for e in result["past_max_tokens"]] == [(" B", -1.0)]
    fake.faults = [{"status": 200, "json": _chat({"content": [_item(-1.0), _item(-2.0)]})}]
    chat = await client.chat("x", top_logprobs=1)
    assert [e["logprob"] for e in chat["tokens"]] == [-1.0] and [e["logprob"] for e in chat["past_max_tokens"]] == [-2.0]


async def test_echo_with_one_generated_token_splits_prompt_and_generation(client):
    result = await client.complete([5, 6, 7], max_tokens=1, logprobs=1, echo=True)
    assert len(result["prompt_tokens"]) == 3 and [e["token"] for e in result["tokens"]] == [" A"]
    zero = await client.complete([5, 6, 7], max_tokens=0, logprobs=1, echo=True)
    assert len(zero["prompt_tokens"]) == 3 and zero["tokens"] == [] and zero["text"] == ""


async def test_a_run_the_model_ended_at_once_is_an_empty_answer_but_one_token_must_come(client, fake):
    """llama.cpp does not list a generated end-of-text token: a run whose first token is one
    answers no token at all, with finish_reason "stop" (seen on SmolLM2)."""
    ended = {"choices": [{"text": "", "finish_reason": "stop",
                          "logprobs": {"tokens": [], "token_logprobs": [], "top_logprobs": []}}]}
    fake.faults = [{"status": 200, "json": ended}]
    result = await client.complete([1], logprobs=1, max_tokens=8)
    assert result["tokens"] == [] and result["finish_reason"] == "stop" and fake.hits == 1
    fake.faults = [{"status": 200, "json": ended}] * 4
    with pytest.raises(ApiError, match=r"has no generated token \(max_tokens=1\)"):
        await client.complete([2], logprobs=1)
