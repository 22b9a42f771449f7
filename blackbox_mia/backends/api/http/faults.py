"""Why a request failed, and when to try it again.

Every failed attempt has a fault class (:class:`~.errors.Fault`, :func:`fault_of`): transient
faults (408, 429, 5xx other than 501, timeouts, dropped connections) back off exponentially with
jitter, never less than the server's ``Retry-After`` (:func:`retry_after_s`); invalid 200s are
retried after a short linear wait; final faults fail at once (:class:`Backoff`). A request that
fails for good raises an :class:`~.errors.ApiError` (:mod:`.errors`), which carries its class.
"""

from __future__ import annotations

import email.utils
import errno
import math
from datetime import datetime, timezone

from tenacity import RetryCallState
from tenacity.wait import wait_base, wait_exponential, wait_random

from ....option_names import named
from .config import API_KEY_ENV
from .errors import ApiError, Fault, Malformed

MAX_RETRY_AFTER_S = 600.0  # longer Retry-After hints are capped at this many seconds
REFUSED_ATTEMPTS = 2  # a refused connection is tried this many times (one retry), then the request fails
REFUSED_RETRY_S = 0.25  # seconds before retrying a refused connection, at most: a wrong port fails within 2 s
QUICK_RETRY_S = 0.02  # seconds before retrying an invalid answer, times the attempt number (capped by the backoff base)


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, or ``Retry-After`` as seconds or
    an HTTP date: the headers of an :class:`~.errors.ApiError`, names in any case), capped at
    :data:`MAX_RETRY_AFTER_S`; ``None`` when absent or unreadable."""
    if not isinstance(exc, ApiError) or not exc.headers:
        return None
    headers = {name.lower(): value for name, value in exc.headers.items()}
    seconds = None
    if headers.get("retry-after-ms"):
        try:
            seconds = float(headers["retry-after-ms"]) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if seconds is None and value:
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def connection_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a refused TCP connection: nothing
    listens at that host and port, so waiting rarely helps (a wrong port, a server not up)."""
    seen = 0
    while exc is not None and seen < 16:  # the SDK wraps it 3-4 levels deep
        if isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def refused_message(url: str) -> str:
    """What a refused connection to ``url`` means, in one clause (no retry can help)."""
    return f"connection refused at {url}: is the server running? (nothing listens at that host and port)"


def key_refused_message(url: str, status: int) -> str:
    """What an HTTP 401/403 from ``url`` means, in one clause (no retry can help)."""
    return f"the API key was refused by {url} (HTTP {status}); check ${API_KEY_ENV} or {named('api_key')}"


NOT_AN_API_HINT = "is the URL the API's, ending in /v1?"


def not_an_api_message(url: str, request: str, status: int | None, page: str) -> str:
    """What a page (``page``: :func:`~.errors.page_kind`) in answer to ``request`` (``"GET
    http://.../v1/models"``) means, in one clause: ``url`` is not the API's (no retry can help)."""
    return (f"{url} does not look like an OpenAI-compatible API: {request} answered HTTP {status} with {page}, "
            f"not JSON ({NOT_AN_API_HINT})")


def refused_too_often(retry_state: RetryCallState) -> bool:
    """A tenacity stop condition: the last attempt's connection was refused and
    :data:`REFUSED_ATTEMPTS` attempts were made (a wrong port fails in seconds, not after the
    whole backoff schedule)."""
    outcome = retry_state.outcome
    refused = outcome is not None and outcome.failed and connection_refused(outcome.exception())
    return refused and retry_state.attempt_number >= REFUSED_ATTEMPTS


def fault_of(exc: BaseException | None) -> Fault:
    """The class of one failed attempt (retried when its :attr:`Fault.retried`).

    An :class:`~.errors.ApiError` carries its own (the transport's: transient for 408, 429, 5xx
    other than 501, timeouts and connection errors; final for other statuses). A 2xx answer that
    is truncated JSON or holds a NaN is corrupt, one that fails validation invalid; one that is not
    JSON at all (an HTML page), and any other exception, final.
    """
    if isinstance(exc, ApiError):
        return exc.fault
    if isinstance(exc, Malformed):
        return Fault.FINAL if exc.final else Fault.CORRUPT if exc.corrupt else Fault.INVALID
    return Fault.FINAL


class Backoff(wait_base):
    """Seconds before the next attempt (a tenacity wait): after an invalid answer a short linear
    wait (the server is not overloaded, it answered), after a refused connection at most
    :data:`REFUSED_RETRY_S`, else max(server's Retry-After, exponential backoff with jitter).

    Args:
        base_s: first backoff in seconds (doubling each retry, plus up to as much jitter); an
            invalid answer waits ``min(base_s, QUICK_RETRY_S)`` seconds times the attempt number.
        max_s: longest backoff in seconds (a longer ``Retry-After`` still wins, up to
            :data:`MAX_RETRY_AFTER_S`).
    """

    def __init__(self, base_s: float, max_s: float):
        self.backoff = wait_exponential(multiplier=base_s, max=max_s) + wait_random(0, base_s)
        self.quick_s = min(base_s, QUICK_RETRY_S)

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if fault_of(exc).quick:
            return self.quick_s * retry_state.attempt_number
        backoff = self.backoff(retry_state)
        if connection_refused(exc):  # nothing listens: one quick retry (a server restarting), not the schedule
            return min(backoff, REFUSED_RETRY_S)
        hint = retry_after_s(exc)
        return backoff if hint is None else max(hint, backoff)
