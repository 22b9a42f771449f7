"""Typed API errors: each failure raises the subclass of ApiError that openai-python's users would
catch (RateLimitError, NotFoundError, APIConnectionError ...), with its fault class unchanged."""

import socket

import pytest

import blackbox_mia
from blackbox_mia.backends.api.http import errors
from blackbox_mia.backends.api.http.client import ApiClient
from blackbox_mia.backends.api.http.errors import (
    APIConnectionError,
    ApiError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    InvalidAnswerError,
    NotFoundError,
    RateLimitError,
    UnprocessableEntityError,
)
from blackbox_mia.types import BlackboxMIAError

from ..helpers_client import config


def test_the_hierarchy_mirrors_openai_and_stays_under_api_error():
    for name in ("APIConnectionError", "APITimeoutError", "APIStatusError", "BadRequestError", "AuthenticationError",
                 "PermissionDeniedError", "NotFoundError", "ConflictError", "UnprocessableEntityError",
                 "RateLimitError", "InternalServerError", "InvalidAnswerError", "NotAnApiError"):
        cls = getattr(errors, name)
        assert issubclass(cls, ApiError) and issubclass(cls, BlackboxMIAError)
        assert getattr(blackbox_mia, name) is cls  # exported from the top level, as openai does
    assert issubclass(errors.APITimeoutError, APIConnectionError)
    assert all(issubclass(cls, APIStatusError) for cls in errors.STATUS_ERRORS.values())
    assert issubclass(InternalServerError, APIStatusError) and not issubclass(InvalidAnswerError, APIStatusError)
    exc = RateLimitError(429, "rate limited", "transient", "slow down")
    assert (exc.status_code, exc.fault, exc.detail, str(exc)) == (429, "transient", "slow down", "rate limited")


@pytest.mark.parametrize("status, cls, fault", [
    (400, BadRequestError, "final"),
    (401, AuthenticationError, "final"),
    (404, NotFoundError, "final"),
    (418, APIStatusError, "final"),
    (422, UnprocessableEntityError, "final"),
    (429, RateLimitError, "transient"),
    (503, InternalServerError, "transient"),
])
async def test_a_failed_request_raises_the_class_of_its_status(make_client, fake, status, cls, fault):
    client = make_client(max_retries=1, backoff_base_s=0.01)
    fake.faults = [{"status": status, "json": {"error": {"message": "no"}}}] * 2
    with pytest.raises(cls) as err:
        await client.complete([1])
    assert type(err.value) is cls and (err.value.status_code, err.value.fault) == (status, fault)


async def test_an_invalid_answer_raises_invalid_answer_error(make_client, fake):
    client = make_client(max_retries=1, backoff_base_s=0.01)
    fake.faults = [{"status": 200, "text": '{"not json'}] * 2
    with pytest.raises(InvalidAnswerError) as err:
        await client.complete([1])
    assert err.value.fault == "corrupt"  # JSON cut short: a glitch, not the server's shape


async def test_nothing_listening_raises_api_connection_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the request: nothing listens there
    async with ApiClient(config(f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base_s=0.01)) as client:
        with pytest.raises(APIConnectionError) as err:
            await client.complete([1])
    assert err.value.status_code is None and err.value.fault == "transient"


async def test_a_refused_argument_is_a_plain_api_error(client):
    with pytest.raises(ApiError) as err:
        await client.complete([1], logit_bias={-1: 1.0})
    assert type(err.value) is ApiError and err.value.fault == "final"


def test_fault_classes_are_one_table_whose_traits_the_callers_read():
    """A new fault class is a row of :class:`Fault` (plus the place that raises it): the client's
    retry and wait, the endpoint's outage message and the probe's evidence read the row's
    traits, never a member by name."""
    import re
    from pathlib import Path

    from blackbox_mia.backends.api.http.errors import Fault

    rows = [(f.value, f.retried, f.quick, f.answered, f.outage) for f in Fault]
    assert rows == [("final", False, False, False, False), ("transient", True, False, False, True),
                    ("invalid", True, True, True, False), ("corrupt", True, True, True, True)]
    assert Fault("invalid") is Fault.INVALID and Fault.FINAL == "final" and str(Fault.TRANSIENT) == "transient"
    package = Path(blackbox_mia.__file__).parent
    compared = [f"{p.relative_to(package)}: {m.group(0)}" for p in package.rglob("*.py")
                for m in re.finditer(r"(\bis\b|==|!=|\bin\b)( not)? \(?Fault\.\w+", p.read_text(encoding="utf-8"))]
    assert compared == []
