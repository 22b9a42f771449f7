"""The HTTP errors the validation server answers with, as OpenAI's error JSON.

Not to be confused with :class:`blackbox_mia.backends.api.http.client.ApiError`, the error the CLIENT
raises for a failed request: :class:`HttpError` is what the SERVER sends.
"""

from __future__ import annotations

from aiohttp import web

INTERNAL_ERROR = "internal server error"  # the body of every emulated or real 500


class HttpError(Exception):
    """A request the server refuses, rendered as ``{"error": {"message", "type", "param", "code"}}``.

    Attributes:
        status: HTTP status code (400..599).
        message, param, code, error_type: the fields of ``{"error": {...}}``.
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.error_type = error_type

    def response(self) -> web.Response:
        """The JSON response carrying this error with its status."""
        body = {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}
        return web.json_response(body, status=self.status)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> HttpError:
    """A 400 ``invalid_request_error`` about ``param``."""
    return HttpError(400, message, param, code)


def too_large(size: int | None, limit: int) -> HttpError:
    """A 413 for a body of ``size`` bytes (``None``: unknown, larger than ``limit``)."""
    given = f"{size} bytes" if size is not None else "more"
    return HttpError(413, f"Request body too large: {given}, the limit is {limit} bytes.", None, "request_too_large")


def server_error(status: int = 500, message: str = INTERNAL_ERROR, code: str | None = None) -> HttpError:
    """A ``server_error`` (5xx): by default the fixed body of every 500."""
    return HttpError(status, message, code=code, error_type="server_error")
