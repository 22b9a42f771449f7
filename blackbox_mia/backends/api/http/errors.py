"""The errors a request to an OpenAI-compatible API raises, named as in openai-python's hierarchy.

Every one is an :class:`ApiError` (a :class:`~blackbox_mia.types.BlackboxMIAError`) carrying its
fault class (``exc.fault``, a :class:`Fault`: whether a retry could help) and the last HTTP
status, so ``except ApiError`` catches them all. The transport raises them for each failed
attempt (:func:`status_error`, one status → class table); the client gives up with one of the same
class and a message for the user. The subclasses say what failed, with the names users of the
openai SDK catch (the SDK itself is not involved):

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

import json
from collections.abc import Callable, Mapping
from enum import Enum

from ....types import BlackboxMIAError


class Fault(str, Enum):
    """Why a request failed, as far as trying it again goes (a ``str``: ``Fault.FINAL == "final"``).

    The one table of fault classes: each member's row says how the client and its callers treat
    it, and they read those traits, never the member's name (a new class is a new row here, plus
    the place that raises it).

    Attributes:
        retried: another attempt may succeed (the client retries it).
        quick: retried after a short linear wait (:data:`~.faults.QUICK_RETRY_S`: the server
            answered, it is not overloaded), not the exponential backoff.
        answered: the server answered 2xx: it accepted the request (its answer was bad).
        outage: the server may be down, overloaded or garbling its answers: the request was not
            refused, and a later run may succeed (a capability probe learns nothing from it and
            stops, saving nothing).
    """

    #          value        retried quick  answered outage
    FINAL = ("final", False, False, False, False)  # refused deterministically, or invalid arguments
    TRANSIENT = ("transient", True, False, False, True)  # 408, 429, 5xx (but 501), timeouts, connection faults
    INVALID = ("invalid", True, True, True, False)  # a 2xx answer that fails validation (a field missing...)
    CORRUPT = ("corrupt", True, True, True, True)  # a 2xx body that is not whole JSON (cut short, NaN): a glitch

    def __new__(cls, value: str, retried: bool, quick: bool, answered: bool, outage: bool) -> Fault:
        member = str.__new__(cls, value)
        member._value_ = value
        member.retried, member.quick, member.answered, member.outage = retried, quick, answered, outage
        return member

    def __str__(self) -> str:
        return self.value


MESSAGE_CHARS = 300  # a server's error message is cut to this many characters (after masking the key)
VALUE_CHARS = 80  # an offending value in an invalid answer (or a body that is not JSON) is shown up to this

_ABSENT = object()  # Malformed without an offending value


HTML_PAGE, PLAIN_TEXT = "an HTML page", "plain text"  # the kinds of body that are not JSON at all


def page_kind(content: bytes) -> str | None:
    """What a body that is not JSON at all is, where an OpenAI-compatible API answers JSON:
    :data:`HTML_PAGE` or :data:`PLAIN_TEXT`; ``None`` for an empty body or one that starts as
    JSON (``{`` or ``[``, whole or not)."""
    text = content.decode("utf-8", "replace").lstrip()
    if not text or text[0] in "{[":
        return None
    return HTML_PAGE if text[0] == "<" else PLAIN_TEXT


class Malformed(Exception):
    """An answer is not valid: wrong shape or type, a requested field missing, a number that is
    null, NaN or infinite, or lengths that disagree.

    Args:
        where: the field, e.g. ``choices[0].logprobs``.
        problem: what is wrong, e.g. ``"is missing"`` or (with ``value``) ``"expected a list"``.
        value: the offending value, shown only through :meth:`describe` (which masks the API key
            before cutting the value short).
        final: retrying cannot help (a body that is not JSON at all, such as an HTML page: the
            URL is not an API's; ``problem`` is then its :func:`page_kind`); by default an
            invalid answer is retried.
        corrupt: the body is not whole JSON (cut short, ``NaN``, a number past a double): a
            glitch on the way, which says nothing about what the server offers (fault
            ``"corrupt"``, an outage); otherwise the body parsed but fails validation.

    Attributes:
        status: the HTTP status of the answer (set by the client; ``None`` for a cached row).
    """

    def __init__(self, where: str, problem: str, value: object = _ABSENT, final: bool = False, corrupt: bool = False):
        super().__init__(where)
        self.where, self.problem, self.value, self.final, self.corrupt = where, problem, value, final, corrupt
        self.status: int | None = None

    def describe(self, masked: Callable[[str, int], str]) -> str:
        """One line: where, the offending value (through ``masked(text, limit)``) and the problem."""
        if self.value is _ABSENT:
            return masked(f"{self.where} {self.problem}", MESSAGE_CHARS)
        shown = masked(repr(self.value), VALUE_CHARS)
        return f"{masked(self.where, MESSAGE_CHARS)} is {shown}, {self.problem}"


class ApiError(BlackboxMIAError):
    """A request failed: one attempt (raised by the transport, retried by the client when its fault
    allows), or for good (the server refused it, or it kept failing past every retry).

    Args:
        status_code: the HTTP status, or ``None`` when no answer came (connection failure,
            timeout).
        message: one line for the user; given up for good, it ends with the fault class, e.g.
            ``"... (transient: gave up after 7 attempts)"``, and never holds the API key.
        fault: a :class:`Fault` (or its value):

            * ``final``: the server refused deterministically (4xx other than 408/429, 501, a
              500 with the same body at every one of two or more attempts), or the arguments are
              invalid; retrying cannot help;
            * ``transient``: 408, 429, 5xx, timeouts or connection faults (outlasted every retry,
              when given up); a later run may succeed;
            * ``invalid``: every attempt got a 2xx answer that failed validation; the message
              names the field (``choices[0].logprobs is missing``);
            * ``corrupt``: every attempt got a 2xx body that was not whole JSON (cut short,
              ``NaN``); a later run may succeed.

        detail: the server's own error message (given up: the key masked, cut short), ``None``
            when the server gave none (no answer, an invalid 200).
        headers: the answer's headers (one attempt's: ``Retry-After`` is read there), else empty.
        body: the answer's raw body (one attempt's: repeated bodies are compared), else ``None``.
        code: the ``code`` of the answer's JSON ``error`` object (``"model_not_found"``), else ``None``.

    Attributes:
        status_code, fault, detail, headers, body, code: as given (``fault`` as a :class:`Fault`).

    Raises:
        ValueError: ``fault`` is not a :class:`Fault` value.
    """

    def __init__(self, status_code: int | None, message: str, fault: Fault | str = Fault.FINAL,
                 detail: str | None = None, *, headers: Mapping[str, str] | None = None, body: bytes | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        if fault not in set(Fault):
            raise ValueError(f"fault must be one of {', '.join(f.value for f in Fault)}, got {fault!r}")
        self.fault = Fault(fault)
        self.detail = detail
        self.headers = dict(headers or {})
        self.body = body
        self.code = code


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
    """Every attempt got a 2xx answer that was not whole JSON (fault ``"corrupt"``) or failed
    validation (``"invalid"``)."""


class NotAnApiError(APIStatusError):
    """The server answered what no OpenAI-compatible API answers: a 2xx that is not JSON at
    all (:func:`page_kind`, its :attr:`detail`), or an HTML page with a final status (a web
    server's 404 or 501): the base URL is not the API's; final. (A page with a transient
    status, a proxy's 502, stays a server error; a plain-text error keeps its message.)"""


STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}
"""The error class of an HTTP status (5xx: :class:`InternalServerError`; any other:
:class:`APIStatusError`), the one table of it."""


def status_fault(status: int) -> Fault:
    """The fault class of an HTTP error status: transient for 408, 429 and 5xx other than 501,
    final for the rest."""
    return Fault.TRANSIENT if status in (408, 429) or (status >= 500 and status != 501) else Fault.FINAL


def status_error(status: int, headers: Mapping[str, str], content: bytes) -> APIStatusError:
    """One attempt's error for a non-2xx answer: :class:`NotAnApiError` for an HTML page with a
    final status, else the class of ``status`` (:data:`STATUS_ERRORS`),
    its fault (:func:`status_fault`), the message of the JSON body's ``error`` object (or its
    ``detail``, or the body text) as ``detail``, its ``code``, and the raw ``headers`` and ``content``."""
    text = content.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = text
    if isinstance(data, dict):
        data = data.get("error", data)
    code = data.get("code") if isinstance(data, dict) else None
    if isinstance(data, dict):
        message = data.get("message") or data.get("detail") or json.dumps(data)
    else:
        message = data
    if page_kind(content) == HTML_PAGE and not status_fault(status).retried:  # a web server's page, not an API's error
        return NotAnApiError(status, f"HTTP {status}", Fault.FINAL, HTML_PAGE, headers=headers, body=content)
    kind = STATUS_ERRORS.get(status, InternalServerError if status >= 500 else APIStatusError)
    return kind(status, f"HTTP {status}", status_fault(status), str(message), headers=headers, body=content,
                code=code if isinstance(code, str) else None)


def error_type(exc: BaseException) -> type[ApiError]:
    """The :class:`ApiError` subclass that names the failure ``exc`` (the last attempt's
    exception: an :class:`ApiError`, or :class:`Malformed` for an invalid answer)."""
    if isinstance(exc, Malformed):
        return InvalidAnswerError
    return type(exc) if isinstance(exc, ApiError) else ApiError
