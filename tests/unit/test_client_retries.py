"""ApiClient retries and HTTP errors against the in-test OpenAI-shaped server: 429/5xx backoff,
final and transient faults, refused keys and models, unreachable servers, timeouts, key masking."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from blackbox_mia.backends.api.http.client import ApiClient
from blackbox_mia.backends.api.http.dialect import COMPLETIONS
from blackbox_mia.backends.api.http.errors import ApiError, Fault
from blackbox_mia.backends.api.http.faults import REFUSED_RETRY_S, connection_refused
from blackbox_mia.types import BlackboxMIAError

from ..helpers_client import KEY, config, retry_waits

# -- retries and errors ---------------------------------------------------------------------------


async def test_429_honours_retry_after(client, fake):
    fake.faults = [{"status": 429, "headers": {"Retry-After": "1"}, "json": {"error": {"message": "rate"}}}]
    start = time.monotonic()
    result = await client.complete([1], logprobs=1)
    assert time.monotonic() - start >= 0.95
    assert fake.times[1] - fake.times[0] >= 0.95
    assert result["tokens"][0]["token"] == " A"
    assert (client.usage.retries, client.usage.requests, fake.hits) == (1, 2, 2)


async def test_500_twice_then_success(client, fake):
    fake.faults = [{"status": 500, "text": "boom"}, {"status": 503, "json": {"error": {"message": "busy"}}}]
    result = await client.chat("x", top_logprobs=1)
    assert result["text"] == " A" and fake.hits == 3 and client.usage.retries == 2


async def test_500s_with_the_same_body_are_retried_until_an_answer(make_client, fake):
    client = make_client(max_retries=6, backoff_base_s=0.01)  # a transient outage saying the same thing
    fake.faults = [{"status": 500, "text": "Internal Server Error"}] * 5
    result = await client.complete([1], logprobs=1)
    assert result["tokens"][0]["token"] == " A" and not result["cached"]
    assert (fake.hits, client.usage.requests, client.usage.retries) == (6, 6, 5)
    assert (await client.complete([1], logprobs=1))["cached"] and fake.hits == 6  # cached once answered


async def test_a_500_with_the_same_body_at_every_attempt_is_named_deterministic(make_client, fake):
    client = make_client(max_retries=3, backoff_base_s=0.01)  # a server refusing token-id prompts
    fake.faults = [{"status": 500, "json": {"error": {"message": "token ids are not supported"}}}] * 6
    with pytest.raises(ApiError, match=r"HTTP 500\): token ids are not supported \(final: a deterministic server "
                                       r"failure, the same answer to all 4 attempts\)") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits, client.usage.retries) == (500, "final", 4, 3)


async def test_attempts_caps_one_request(make_client, fake):
    client = make_client(max_retries=6, backoff_base_s=0.01)
    fake.faults = [{"status": 500, "text": "Internal Server Error"}] * 3
    with pytest.raises(ApiError, match=r"the same answer to all 2 attempts\)$") as err:
        await client.request(COMPLETIONS, [1], attempts=2, max_tokens=1, temperature=0.0, top_n=None)
    assert (err.value.fault, fake.hits) == ("final", 2)
    assert (await client.request(COMPLETIONS, [1], attempts=2, max_tokens=1, temperature=0.0, top_n=None))["text"] == " A"  # one 500 left, then the answer
    assert fake.hits == 4


async def test_a_500_then_another_failure_is_transient(make_client, fake):
    client = make_client(max_retries=2, backoff_base_s=0.01)
    fake.faults = [{"status": 500, "text": "boom"}, {"status": 503, "text": "boom"}, {"status": 500, "text": "boom"}]
    with pytest.raises(ApiError, match=r"HTTP 500\): boom \(transient: gave up after 3 attempts\)") as err:
        await client.complete([1])
    assert (err.value.fault, fake.hits) == ("transient", 3)


async def test_500s_that_differ_are_transient_until_retries_run_out(make_client, fake):
    client = make_client(max_retries=2)
    fake.faults = [{"status": 500, "json": {"error": {"message": f"overloaded ({i})"}}} for i in range(5)]
    with pytest.raises(ApiError, match=r"overloaded \(2\) \(transient: gave up after 3 attempts\)") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits) == (500, "transient", 3)
    await client.close()


async def test_501_is_final_at_once(client, fake):
    fake.faults = [{"status": 501, "json": {"error": {"message": "echo is not implemented"}}}] * 4
    with pytest.raises(ApiError, match=r"echo is not implemented \(final: not retried\)") as err:
        await client.complete([1], logprobs=1, echo=True)
    assert (err.value.status_code, err.value.fault, fake.hits, client.usage.retries) == (501, "final", 1, 0)


async def test_429_until_retries_run_out_is_transient(client, fake):
    fake.faults = [{"status": 429, "json": {"error": {"message": "slow down"}}}] * 4
    with pytest.raises(ApiError, match=r"rate limited .*\(transient: gave up after 4 attempts\)") as err:
        await client.complete([1])
    assert (err.value.status_code, err.value.fault, fake.hits) == (429, "transient", 4)


def test_api_error_interface():
    assert [f.value for f in Fault] == ["final", "transient", "invalid", "corrupt"] and Fault("final") is Fault.FINAL
    error = ApiError(None, "refused")
    assert (error.status_code, error.fault, str(error)) == (None, "final", "refused")
    assert isinstance(error, BlackboxMIAError)
    assert ApiError(200, "bad", fault="invalid").fault == "invalid"
    with pytest.raises(ValueError, match="fault"):
        ApiError(500, "x", fault="flaky")


async def test_400_is_not_retried(client, fake):
    fake.faults = [{"status": 400, "json": {"error": {"message": f"echo is not supported (key {KEY})"}}}]
    with pytest.raises(ApiError, match=r"rejected the request .*echo is not supported \(key \*\*\*\)") as err:
        await client.complete([1], logprobs=1, echo=True)
    assert err.value.status_code == 400 and fake.hits == 1 and client.usage.retries == 0
    assert err.value.fault == "final"
    assert "SECRET" not in str(err.value)
    assert len(client.cache) == 0


@pytest.mark.parametrize("fault", [
    {"status": 400, "json": {"error": {"message": "m" * 285 + "{auth}"}}},  # message cut at 300
    {"status": 400, "text": "t" * 285 + "{auth} and more"},  # a body that is not JSON, cut at 300
    {"status": 500, "json": {"error": {"info": "i" * 275 + "{auth}"}}},  # dumped JSON, cut at 300
    {"status": 200, "json": {"choices": "c" * 68 + "{auth}"}},  # a shown value cut at 80
], ids=["message", "text-body", "json-body", "invalid-200"])  # (a 200 that is not JSON is not shown at all)
async def test_key_is_masked_before_any_truncation(client, fake, caplog, fault):
    caplog.set_level(logging.DEBUG)
    fake.faults = [fault] * 4  # every attempt (max_retries=3) echoes the key across the cut
    with pytest.raises(ApiError) as err:
        await client.complete([1], logprobs=1)
    assert "***" in str(err.value)  # the key was there, and was masked
    for text in (str(err.value), repr(err.value), caplog.text):
        assert KEY[:4] not in text  # no prefix of the key (4 characters or more) is left


async def test_refused_key(fake):
    client = ApiClient(config(fake.base_url, api_key="sk-test-SECRET-999"))
    with pytest.raises(ApiError, match="API key was refused") as err:
        await client.complete([1])
    assert err.value.status_code == 401 and fake.hits == 1
    assert "SECRET" not in str(err.value) and err.value.__cause__ is None
    await client.close()


async def test_unknown_model(fake):
    async with ApiClient(config(fake.base_url, model="nope")) as client:
        with pytest.raises(ApiError, match="unknown model 'nope'") as err:
            await client.chat("x")
    assert err.value.status_code == 404 and fake.hits == 1


async def test_unreachable_base_url(caplog):
    caplog.set_level(logging.WARNING)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    # a refused connection is retried once, not max_retries times: a wrong port fails in seconds
    async with ApiClient(config(f"http://user:pw@127.0.0.1:{port}/v1", max_retries=6, backoff_base_s=0.2,
                                backoff_max_s=60.0)) as client:
        with pytest.raises(ApiError, match=rf"connection refused at http://127.0.0.1:{port}/v1: is the server running") as err:
            await client.complete([1])
    assert str(err.value).endswith("(transient: gave up after 2 attempts)") and err.value.fault == "transient"
    assert err.value.status_code is None and client.usage.retries == 1 and "pw" not in str(err.value)
    assert client.usage.requests == 2
    [wait] = retry_waits(caplog.text)  # one backoff of 0.2-0.25 s, not six up to 60 s
    assert 0.2 <= wait <= REFUSED_RETRY_S


async def test_a_refused_connection_fails_within_two_seconds_with_the_default_backoff(caplog):
    caplog.set_level(logging.WARNING)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with ApiClient(config(f"http://127.0.0.1:{port}/v1", backoff_base_s=1.0, backoff_max_s=60.0)) as client:
        with pytest.raises(ApiError, match="nothing listens at that host and port"):
            await client.complete([1])
    assert client.usage.requests == 2
    assert retry_waits(caplog.text) == [REFUSED_RETRY_S]  # one retry after at most 0.25 s (issue 30), not 1 s


def test_connection_refused_is_found_through_the_sdk_wrapping():
    import errno

    inner = OSError(errno.ECONNREFUSED, "Connection refused")
    outer = RuntimeError("connect failed")
    outer.__cause__ = inner
    assert connection_refused(outer) and connection_refused(ConnectionRefusedError())
    assert not connection_refused(RuntimeError("reset")) and not connection_refused(OSError(errno.ECONNRESET, "reset"))


async def test_timeout(make_client, fake):
    fake.delay_s = 0.5
    client = make_client(timeout_s=0.1, max_retries=1)
    with pytest.raises(ApiError, match=r"no answer from .* within 0.1 s \(transient: gave up after 2 attempts\)"):
        await client.complete([1])
    assert fake.hits == 2
    await client.close()
