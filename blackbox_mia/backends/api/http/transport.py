"""The hot request path: one JSON POST over a pooled aiohttp session, failures as the project's
typed errors (:mod:`.errors`).

The OpenAI SDK spends most of a request's CPU outside the network: its type transform walks a
token-id prompt element by element, and httpx's connection pool scans every pooled connection
(a socket call each) for every request, so its cost grows with the concurrency. This transport
sends the same body (``{"model", **payload}``, serialised by the client) with the same
``Authorization: Bearer`` header; a failed attempt raises the :class:`~.errors.ApiError` subclass
of its status (:func:`~.errors.status_error`) or of its connection failure, with its fault class
(:mod:`.faults` retries by it) and the aiohttp error as its cause.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from .errors import APIConnectionError, APITimeoutError, Fault, status_error

ENDPOINT_PATHS = {"prompt": "/completions", "messages": "/chat/completions"}  # by the dialect's prompt field
MODELS_PATH = "/models"  # GET: the models the server lists (OpenAI's "List models")


def env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy (and its credentials) that ``HTTP(S)_PROXY`` / ``NO_PROXY`` (and ``~/.netrc`` for
    the proxy's credentials) name for ``url``, as the SDK's httpx client honours them; ``(None,
    None)`` when none applies.

    Read once per session: aiohttp's ``trust_env=True`` reads the environment and ``~/.netrc``
    again in a worker thread for every request, a large share of the client's CPU at high
    concurrency (figures: records/measured-settings.md).
    """
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


class Transport:
    """POSTs JSON bodies to ``base_url``, at most ``connections`` connections at once.

    Args:
        base_url: the API root (``.../v1``; user info in it is not sent).
        api_key: sent as ``Authorization: Bearer``.
        timeout_s: seconds to wait for one whole answer.

    The session is opened on first use, on the running loop (no network before that).
    """

    def __init__(self, base_url: str, api_key: str, timeout_s: float):
        self._base = urlsplit(base_url)
        self._urls = {field: URL(self.url(field)) for field in ENDPOINT_PATHS}  # parsed once
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, prompt_field: str, body: bytes) -> tuple[int, bytes]:
        """``(status, raw answer)`` of one POST of ``body`` (UTF-8 JSON) to the endpoint of
        ``prompt_field`` (:data:`ENDPOINT_PATHS`).

        Raises:
            APIStatusError: (a subclass by status) a non-2xx answer (:func:`~.errors.status_error`).
            APITimeoutError: no whole answer within the timeout; transient.
            APIConnectionError: the connection failed or dropped (the aiohttp error, an
                :class:`OSError` for a refused connection, is its ``__cause__``); transient.
        """
        return await self._send("POST", self._urls[prompt_field], body)

    async def get(self, path: str) -> tuple[int, bytes]:
        """``(status, raw answer)`` of one GET of the base URL's path + ``path`` (e.g.
        :data:`MODELS_PATH`), on the same session and with the same header as :meth:`post`.

        Raises:
            APIStatusError, APITimeoutError, APIConnectionError: as :meth:`post`.
        """
        return await self._send("GET", URL(self.path_url(path)), None)

    async def _send(self, method: str, url: URL, body: bytes | None) -> tuple[int, bytes]:
        """One request on the session (opened here on first use); failures as typed errors."""
        if self._session is None:
            proxy, proxy_auth = env_proxy(str(url))
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=self._timeout,
                                                  headers=self._headers, proxy=proxy, proxy_auth=proxy_auth)
        try:
            async with self._session.request(method, url, data=body) as response:
                content = await response.read()
                status, headers = response.status, dict(response.headers)
        except asyncio.TimeoutError as exc:
            raise APITimeoutError(None, f"{method} {url}: no answer in time", Fault.TRANSIENT) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise APIConnectionError(None, f"{method} {url}: connection error", Fault.TRANSIENT) from exc
        if not 200 <= status < 300:
            raise status_error(status, headers, content)
        return status, content

    def url(self, prompt_field: str) -> str:
        """The endpoint URL for ``prompt_field``: the base URL's path + :data:`ENDPOINT_PATHS`,
        its query kept, user info left out (the key goes in the header)."""
        return self.path_url(ENDPOINT_PATHS[prompt_field])

    def path_url(self, path: str) -> str:
        """The base URL's path + ``path`` (``"/models"``), its query kept, user info left out."""
        base = self._base
        netloc = base.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if base.port:
            netloc += f":{base.port}"
        return urlunsplit((base.scheme, netloc, base.path.rstrip("/") + path, base.query, ""))

    async def close(self) -> None:
        """Close the session's connections (idempotent)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
