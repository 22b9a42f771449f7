"""The errors a request to an OpenAI-compatible API raises, in openai-python's hierarchy.

Every one is an :class:`ApiError` (a :class:`~blackbox_mia.types.BlackboxMIAError`) carrying its
fault class (``exc.fault``, one of :data:`FAULTS`: whether a retry could help) and the last HTTP
status, so ``except ApiError`` catches them all; the subclasses say what failed, with the names
users of the openai SDK catch:

* :class:`APIConnectionError`: no answer came (nothing listens, the connection dropped);
  transient: a later run may succeed once the server is reachable.
  :class:`APITimeoutError`: no answer within ``timeout_s``; transient.
* :class:`APIStatusError`: the server answered with an HTTP error status, by status:
  :class:`BadRequestError` (400), :class:`AuthenticationError` (401),
  :class:`PermissionDeniedError` (403), :class:`NotFoundError` (404, a wrong base URL or an
  unknown model), :class:`ConflictError` (409), :class:`UnprocessableEntityError` (422): final,
  retrying the same request cannot help; :class:`RateLimitError` (429) and
  :class:`InternalServerError` (5xx): transient, retried with backoff before they are raised
  (a 500 with the same body at every attempt, or a 501, is final).
* :class:`InvalidAnswerError`: every attempt got a 2xx answer that was not JSON or failed
  validation (openai's ``APIResponseValidationError``); fault ``"invalid"``.

Arguments the client refuses before sending (a bad ``logit_bias``, a prompt of the wrong type)
raise a plain :class:`ApiError` with fault ``"final"``. An answer that fails validation is first
a :class:`Malformed` (:mod:`.answers` raises it; the client retries, then raises
:class:`InvalidAnswerError`).
"""

from __future__ import annotations

from collections.abc import Callable

import openai

from ....types import BlackboxMIAError

FAULTS = ("final", "transient", "invalid")
MESSAGE_CHARS = 300  # a server's error message is cut to this many characters (after masking the key)
VALUE_CHARS = 80  # an offending value in an invalid answer (or a body that is not JSON) is shown up to this

_ABSENT = object()  # Malformed without an offending value


class Malformed(Exception):
    """An answer is not valid: wrong shape or type, a requested field missing, a number that is
    null, NaN or infinite, or lengths that disagree.

    Args:
        where: the field, e.g. ``choices[0].logprobs``.
        problem: what is wrong, e.g. ``"is missing"`` or (with ``value``) ``"expected a list"``.
        value: the offending value, shown only through :meth:`describe` (which masks the API key
            before cutting the value short).
        final: retrying cannot help (a body that is not JSON at all, such as an HTML page: the
            URL is not an API's); by default an invalid answer is retried.

    Attributes:
        status: the HTTP status of the answer (set by the client; ``None`` for a cached row).
    """

    def __init__(self, where: str, problem: str, value: object = _ABSENT, final: bool = False):
        super().__init__(where)
        self.where, self.problem, self.value, self.final = where, problem, value, final
        self.status: int | None = None

    def describe(self, masked: Callable[[str, int], str]) -> str:
        """One line: where, the offending value (through ``masked(text, limit)``) and the problem."""
        if self.value is _ABSENT:
            return masked(f"{self.where} {self.problem}", MESSAGE_CHARS)
        shown = masked(repr(self.value), VALUE_CHARS)
        return f"{masked(self.where, MESSAGE_CHARS)} is {shown}, {self.problem}"


class ApiError(BlackboxMIAError):
    """A request failed for good: the server refused it, or it kept failing past every retry.

    Args:
        status_code: the last HTTP status, or ``None`` when no answer came (connection failure,
            timeout).
        message: one line for the user; it ends with the fault class, e.g.
            ``"... (transient: gave up after 7 attempts)"``, and never holds the API key.
        fault: one of :data:`FAULTS`:

            * ``"final"``: the server refused deterministically (4xx other than 408/429, 501, a
              500 with the same body at every one of two or more attempts), or the arguments are
              invalid; retrying cannot help;
            * ``"transient"``: 408, 429, 5xx, timeouts or connection faults outlasted every retry;
              a later run may succeed;
            * ``"invalid"``: every attempt got a 2xx answer that was not JSON or failed
              validation; the message names the field (``choices[0].logprobs is missing``).

        detail: the server's own error message (the key masked, cut short), ``None`` when the
            server gave none (no answer, an invalid 200).

    Attributes:
        status_code, fault, detail: as given.

    Raises:
        ValueError: ``fault`` is not one of :data:`FAULTS`.
    """

    def __init__(self, status_code: int | None, message: str, fault: str = "final", detail: str | None = None):
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        super().__init__(message)
        self.status_code = status_code
        self.fault = fault
        self.detail = detail


class APIConnectionError(ApiError):
    """No answer came from the server (refused, dropped or unreachable connection); transient."""


class APITimeoutError(APIConnectionError):
    """No answer within the client's ``timeout_s``; transient."""


class APIStatusError(ApiError):
    """The server answered with an HTTP error status (:attr:`status_code`)."""


class BadRequestError(APIStatusError):
    """HTTP 400: the server refused the request as malformed; final."""


class AuthenticationError(APIStatusError):
    """HTTP 401: the API key was refused; final (check the key)."""


class PermissionDeniedError(APIStatusError):
    """HTTP 403: the key may not use this model or endpoint; final."""


class NotFoundError(APIStatusError):
    """HTTP 404: a wrong base URL or an unknown model; final."""


class ConflictError(APIStatusError):
    """HTTP 409; final."""


class UnprocessableEntityError(APIStatusError):
    """HTTP 422: the server refused a field of the request; final."""


class RateLimitError(APIStatusError):
    """HTTP 429 past every retry; transient (lower the concurrency, or set rpm / tpm)."""


class InternalServerError(APIStatusError):
    """HTTP 5xx: transient past every retry, final when every attempt got the same 500 answer or
    the server does not implement the request (501)."""


class InvalidAnswerError(ApiError):
    """Every attempt got a 2xx answer that was not JSON or failed validation; fault ``"invalid"``."""


STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def error_type(exc: BaseException) -> type[ApiError]:
    """The :class:`ApiError` subclass that names the failure ``exc`` (the last attempt's
    exception: the SDK's, or :class:`Malformed` for an invalid answer)."""
    if isinstance(exc, Malformed):
        return InvalidAnswerError
    if isinstance(exc, openai.APITimeoutError):
        return APITimeoutError
    if isinstance(exc, openai.APIConnectionError):
        return APIConnectionError
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return InternalServerError
        return STATUS_ERRORS.get(exc.status_code, APIStatusError)
    return ApiError
