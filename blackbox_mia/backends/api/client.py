"""Async client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

:class:`ApiClient` sends requests through the official SDK (:class:`openai.AsyncOpenAI`, its own
retries off) and adds what an audit needs:

* one validation step for every answer, fresh or cached: shape, every requested field present,
  every number finite, lengths consistent (see :func:`~blackbox_mia.answers.read_answer`). An answer that fails it is
  never cached: it is retried, and a cached row that fails it is dropped and asked again;
* a disk cache of the raw response JSON (:class:`~blackbox_mia.cache.ResponseCache`), written as
  soon as an answer has passed validation, before anything else happens, so a rerun makes zero
  requests; processes sharing a cache directory claim each request so none is paid for twice;
* retries with tenacity by fault class (:data:`FAULTS`, carried by :class:`ApiError`):
  transient faults (408, 429, 5xx other than 501, timeouts, dropped connections) back off
  exponentially with jitter, never less than the server's ``Retry-After``; invalid 200s are
  retried after a short linear wait; final faults (other 4xx, 501, a 500 repeating the same
  body) fail at once;
* at most ``concurrency`` requests in flight, optional requests-per-minute and
  tokens-per-minute limits;
* a normalised, JSON-ready result (see :meth:`ApiClient.complete`);
* usage accounting: requests, retries, cache hits, invalid answers, tokens and cost in USD.

The API key is only ever handed to the SDK (it goes in the ``Authorization`` header). It is not
part of any cache key or cached value, any error message, log line, ``repr`` or ``describe()``:
text from a server is masked before it is cut short, so no prefix of the key can survive a cut.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import numbers
import operator
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)
from tenacity.wait import wait_base, wait_exponential, wait_random

from ...cache import CLAIM_REFRESH_S, ResponseCache, request_key
from ...types import BlackboxMIAError
from .answers import (
    MESSAGE_CHARS,
    Malformed,
    clip,
    decode_answer,
    read_answer,
    token_count,
)
from .wire import MAX_BIAS, MAX_BIAS_ENTRIES

LOG = logging.getLogger(__name__)
ENDPOINTS = ("completions", "chat")
FAULTS = ("final", "transient", "invalid")
API_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "EMPTY"  # sent when no key is configured: local servers (vLLM, llama.cpp) ignore it
MAX_RETRY_AFTER_S = 600.0  # longer Retry-After hints are capped at this many seconds
BYTES_PER_TOKEN = 4  # rough size of a token, to estimate text prompts for the tokens-per-minute limit
QUICK_RETRY_S = 0.02  # seconds before retrying an invalid answer, times the attempt number (capped by backoff_base_s)
CLAIM_POLL_S = 0.02  # first wait (seconds) for another process's answer to a claimed request; doubles
CLAIM_POLL_MAX_S = 0.5  # longest wait (seconds) between two looks at the cache for that answer

# List prices in USD per 1M tokens (prompt, completion), as published by OpenAI in 2025. Prices
# change: pass ApiConfig(prices=...) to override. Unlisted models cost 0 and are flagged
# ``unpriced`` in the usage.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "davinci-002": (2.00, 2.00),
    "babbage-002": (0.40, 0.40),
    "gpt-3.5-turbo-instruct": (1.50, 2.00),
    "gpt-3.5-turbo": (0.50, 1.50),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")  # gpt-4o-2024-08-06, gpt-3.5-turbo-0125


def _default_api_key() -> str:
    return os.environ.get(API_KEY_ENV) or PLACEHOLDER_API_KEY


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment: safe to show in messages and results."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class ApiError(BlackboxMIAError):
    """A request failed for good: the server refused it, or it kept failing past every retry.

    Args:
        status_code: the last HTTP status, or ``None`` when no answer came (connection failure,
            timeout).
        message: one line for the user; it ends with the fault class, e.g.
            ``"... (transient: gave up after 7 attempts)"``, and never holds the API key.
        fault: one of :data:`FAULTS`:

            * ``"final"``: the server refused deterministically (4xx other than 408/429, 501, a
              500 repeating the same body), or the arguments are invalid; retrying cannot help;
            * ``"transient"``: 408, 429, 5xx, timeouts or connection faults outlasted every retry;
              a later run may succeed;
            * ``"invalid"``: every attempt got a 2xx answer that was not JSON or failed
              validation; the message names the field (``choices[0].logprobs is missing``).

    Attributes:
        status_code, fault: as given.

    Raises:
        ValueError: ``fault`` is not one of :data:`FAULTS`.
    """

    def __init__(self, status_code: int | None, message: str, fault: str = "final"):
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        super().__init__(message)
        self.status_code = status_code
        self.fault = fault


@dataclass(frozen=True)
class ApiConfig:
    """Where and how to send requests.

    Attributes:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        model: the model name sent with every request.
        api_key: sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY``, else the
            placeholder ``"EMPTY"`` that local servers accept. Never shown (``repr=False``).
        endpoint: ``"completions"`` (legacy ``/v1/completions``) or ``"chat"``.
        concurrency: most requests in flight at once.
        rpm: requests-per-minute limit, or ``None``.
        tpm: tokens-per-minute limit (prompt + ``max_tokens``, estimated), or ``None``.
        timeout_s: seconds to wait for one HTTP answer.
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests).
        backoff_base_s: first backoff in seconds (doubling each retry, plus up to as much jitter).
            An invalid answer is retried sooner: after ``min(backoff_base_s, QUICK_RETRY_S)``
            seconds times the attempt number.
        backoff_max_s: longest backoff in seconds (a longer ``Retry-After`` still wins, up to
            :data:`MAX_RETRY_AFTER_S`).
        prices: model → (USD per 1M prompt tokens, USD per 1M completion tokens); replaces
            :data:`DEFAULT_PRICES` (extend it with ``{**DEFAULT_PRICES, name: (p, c)}``).

    Raises:
        BlackboxMIAError: an invalid value.
    """

    base_url: str
    model: str
    api_key: str = field(default_factory=_default_api_key, repr=False)
    endpoint: str = "completions"
    concurrency: int = 16
    rpm: float | None = None
    tpm: float | None = None
    timeout_s: float = 60.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    prices: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def __post_init__(self) -> None:
        try:
            parts = urlsplit(self.base_url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a bad port
            valid = False
        if not valid:
            shown = display_url(self.base_url)
            raise BlackboxMIAError(f"base URL must be http(s)://HOST[:PORT]/PATH, got {shown!r}")
        if not self.model:
            raise BlackboxMIAError("the model name is empty")
        if self.endpoint not in ENDPOINTS:
            raise BlackboxMIAError(f"unknown endpoint {self.endpoint!r}: choose {' or '.join(ENDPOINTS)}")
        if self.concurrency < 1:
            raise BlackboxMIAError(f"concurrency must be at least 1, got {self.concurrency}")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise BlackboxMIAError(f"{name} must be positive (or unset), got {value}")
        if not self.timeout_s > 0 or self.max_retries < 0 or self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise BlackboxMIAError("timeout_s must be positive; max_retries and backoff times non-negative")

    def price(self) -> tuple[float, float] | None:
        """(USD per 1M prompt tokens, USD per 1M completion tokens) of the model, or ``None``.

        A dated snapshot (``gpt-4o-2024-08-06``) falls back to its base name's price.
        """
        for name in (self.model, _SNAPSHOT_SUFFIX.sub("", self.model)):
            if name in self.prices:
                prompt, completion = self.prices[name]
                return float(prompt), float(completion)
        return None

    def describe(self) -> dict:
        """JSON-ready settings for result files; never holds the API key."""
        price = self.price()
        return {
            "base_url": display_url(self.base_url),
            "model": self.model,
            "endpoint": self.endpoint,
            "concurrency": self.concurrency,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "usd_per_1m_tokens": None if price is None else {"prompt": price[0], "completion": price[1]},
        }


@dataclass
class Usage:
    """What one client spent (cache hits cost nothing and add no tokens).

    Attributes:
        requests: HTTP requests sent, retries included.
        retries: how many of those requests repeated a failed one.
        cache_hits: answers served from the disk cache (no request), including answers another
            process sharing the cache directory paid for while this one waited.
        invalid_answers: answers that arrived but failed validation (never cached; retried).
        invalid_cached: cached answers that failed validation when read (dropped, asked again).
        prompt_tokens, completion_tokens: tokens the server reported in ``usage`` (invalid
            answers included: they are billed too).
        cost_usd: estimated cost in USD from :meth:`ApiConfig.price` (0 when unpriced).
        unpriced: the model has no price, so ``cost_usd`` stays 0.
    """

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    invalid_answers: int = 0
    invalid_cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)


class RateLimiter:
    """Token bucket: on average ``per_minute`` units a minute, bursts of one second's worth.

    A request larger than the burst waits for a full bucket and then leaves it in debt, so the
    long-run rate holds for any request size.
    """

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0  # units per second
        self.burst = self.rate
        self._level = self.burst
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` units (requests or tokens) may be spent, then spend them."""
        need = min(amount, self.burst)
        async with self._lock:
            while True:
                now = time.monotonic()
                self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._level >= need:
                    break
                await asyncio.sleep((need - self._level) / self.rate)
            self._level -= amount


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, or ``Retry-After`` as seconds or
    an HTTP date), capped at :data:`MAX_RETRY_AFTER_S`; ``None`` when absent or unreadable."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
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


def fault_of(exc: BaseException | None) -> str:
    """The class (one of :data:`FAULTS`) of one failed attempt; only ``"final"`` is not retried.

    Transient: 408, 429, 5xx other than 501, timeouts, connection errors. Invalid: a 2xx answer
    that is not JSON or fails validation. Final: everything else (other 4xx, 501, an
    :class:`ApiError` marked final, any other exception).
    """
    if isinstance(exc, ApiError):
        return exc.fault
    if isinstance(exc, Malformed):
        return "invalid"
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
        return "transient"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return "transient" if status in (408, 429) or (status >= 500 and status != 501) else "final"
    return "final"


class _Wait(wait_base):
    """Seconds before the next attempt: after an invalid answer a short linear wait (the server is
    not overloaded, it answered), else max(server's Retry-After, exponential backoff with jitter)."""

    def __init__(self, config: ApiConfig):
        base = config.backoff_base_s
        self.backoff = wait_exponential(multiplier=base, max=config.backoff_max_s) + wait_random(0, base)
        self.quick_s = min(base, QUICK_RETRY_S)

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if fault_of(exc) == "invalid":
            return self.quick_s * retry_state.attempt_number
        backoff = self.backoff(retry_state)
        hint = retry_after_s(exc)
        return backoff if hint is None else max(hint, backoff)


class ApiClient:
    """Cached, rate-limited, retrying requests to one model behind an OpenAI-compatible API.

    Args:
        config: endpoint, model, key and limits.
        cache: where raw responses are kept; ``None`` disables caching. The client closes it in
            :meth:`close`.

    Attributes:
        config, cache: as given.
        usage: requests, retries, cache hits, tokens and cost so far (:class:`Usage`).
    """

    def __init__(self, config: ApiConfig, cache: ResponseCache | None = None):
        self.config = config
        self.cache = cache
        self.usage = Usage(unpriced=config.price() is None)
        self._url = display_url(config.base_url)
        self._sdk = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key, max_retries=0, timeout=config.timeout_s
        )
        self._slots = asyncio.Semaphore(config.concurrency)
        self._inflight: dict[str, asyncio.Future] = {}  # request key -> answer being fetched
        self._heartbeat: asyncio.Task | None = None  # keeps this client's cache claims from expiring
        self._rpm = RateLimiter(config.rpm) if config.rpm else None
        self._tpm = RateLimiter(config.tpm) if config.tpm else None

    def __repr__(self) -> str:
        return f"ApiClient({self.config!r})"

    async def complete(
        self,
        prompt: list[int] | str,
        *,
        max_tokens: int = 1,
        temperature: float = 0.0,
        logprobs: int | None = None,
        logit_bias: dict[int, float] | None = None,
        echo: bool = False,
        extra: dict | None = None,
    ) -> dict:
        """One legacy ``/v1/completions`` request (or its cached answer).

        Args:
            prompt: token ids or text.
            max_tokens: tokens to generate (0 is allowed with ``echo``).
            temperature: sampling temperature (0: greedy).
            logprobs: top log-probs per token (0: the chosen token's only); ``None``: none.
            logit_bias: token id → bias in [-100, 100], at most 300 entries.
            echo: return the prompt's tokens too (as ``prompt_tokens``).
            extra: further body fields (``seed``, ``stop``, vLLM options...); part of the cache key.

        Returns:
            ``{"text", "tokens", "prompt_tokens", "finish_reason", "usage", "cached"}``:

            * ``text``: the generated text (the echoed prompt removed where it can be located);
            * ``tokens``: one entry per generated token, ``{"token": str, "bytes": list[int] |
              None, "logprob": float | None, "top": [{"token", "bytes", "logprob"}, ...]}``
              with ``top`` sorted by log-prob (nats), largest first; ``[]`` when no log-probs
              were requested. With log-probs requested every ``logprob`` is a finite number,
              ``top`` is non-empty when ``logprobs > 0``, and there is at least one entry when
              ``max_tokens >= 1`` (at most ``max_tokens``);
            * ``prompt_tokens``: the same entries for the prompt with ``echo`` and log-probs
              (the first may have ``logprob`` ``None``: it has no conditional), else ``None``;
            * ``finish_reason``: as returned (``"length"``, ``"stop"``, ...);
            * ``usage``: ``{"prompt_tokens", "completion_tokens"}`` as reported (``None`` if not);
            * ``cached``: whether the answer came from the disk cache.

        Raises:
            ApiError: invalid arguments (fault ``"final"``, checked before sending), or the
                request failed (see its ``fault``): refused, still failing after the retries,
                or every answer was invalid.
            BlackboxMIAError: the cache is unusable.
        """
        payload: dict = {"prompt": _check_prompt(prompt), "max_tokens": _check_int(max_tokens, "max_tokens", 0)}
        payload["temperature"] = float(temperature)
        if logprobs is not None:
            payload["logprobs"] = _check_int(logprobs, "logprobs", 0)
        if logit_bias:
            payload["logit_bias"] = check_logit_bias(logit_bias)
        if echo:
            payload["echo"] = True
        return await self._answer("completions", _with_extra(payload, extra))

    async def chat(
        self,
        content: str,
        *,
        max_tokens: int = 1,
        temperature: float = 0.0,
        top_logprobs: int | None = None,
        logit_bias: dict[int, float] | None = None,
        extra: dict | None = None,
    ) -> dict:
        """One ``/v1/chat/completions`` request with a single user message (or its cached answer).

        Args:
            content: the user message.
            max_tokens: tokens to generate (sent as ``max_tokens``).
            temperature: sampling temperature (0: greedy).
            top_logprobs: ask for log-probs (``logprobs: true``) with this many alternatives per
                token (0: the chosen token's only); ``None``: no log-probs.
            logit_bias: token id → bias in [-100, 100], at most 300 entries.
            extra: further body fields; part of the cache key.

        Returns:
            The same dict as :meth:`complete` (``prompt_tokens`` is always ``None``; ``bytes``
            as returned by the server).

        Raises:
            ApiError: invalid arguments (fault ``"final"``, checked before sending), or the
                request failed (see its ``fault``): refused, still failing after the retries,
                or every answer was invalid.
            BlackboxMIAError: the cache is unusable.
        """
        if not isinstance(content, str):
            raise ApiError(None, f"chat content must be a string, got {type(content).__name__}")
        payload: dict = {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": _check_int(max_tokens, "max_tokens", 1),
            "temperature": float(temperature),
        }
        if top_logprobs is not None:
            payload["logprobs"] = True
            payload["top_logprobs"] = _check_int(top_logprobs, "top_logprobs", 0)
        if logit_bias:
            payload["logit_bias"] = check_logit_bias(logit_bias)
        return await self._answer("chat", _with_extra(payload, extra))

    async def close(self) -> None:
        """Close the HTTP connections and the cache (releasing its claims)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await self._sdk.close()
        if self.cache is not None:
            self.cache.close()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------------------

    async def _answer(self, kind: str, payload: dict) -> dict:
        """A valid cached answer, else a fresh one (identical concurrent requests are sent once)."""
        key = request_key(self.config.base_url, self.config.model, kind, payload)
        found = self._cached(kind, key, payload)
        if found is not None:
            self.usage.cache_hits += 1
            return {**found[1], "cached": True}
        pending = self._inflight.get(key)
        if pending is not None:  # the same question is already on its way: share its answer
            raw, _, _ = await pending
            self.usage.cache_hits += 1
            return {**read_answer(kind, raw, payload), "cached": True}
        pending = asyncio.ensure_future(self._obtain(kind, key, payload))
        self._inflight[key] = pending
        try:
            _, result, paid = await pending
        finally:
            del self._inflight[key]
        if not paid:
            self.usage.cache_hits += 1
        return {**result, "cached": not paid}

    def _cached(self, kind: str, key: str, payload: dict) -> tuple[dict, dict] | None:
        """The cached answer to ``payload``, ``(raw JSON, normalised)``, or ``None``; a cached row
        that fails validation is dropped (and counted in ``usage.invalid_cached``), never trusted."""
        if self.cache is None:
            return None
        raw = self.cache.get(key)
        if raw is None:
            return None
        try:
            return raw, read_answer(kind, raw, payload)
        except Malformed as exc:
            self.usage.invalid_cached += 1
            LOG.warning("%s: dropping a cached answer that fails validation (%s); asking again",
                        self._url, exc.describe(self._masked))
            self.cache.delete(key)
            return None

    async def _obtain(self, kind: str, key: str, payload: dict) -> tuple[dict, dict, bool]:
        """``(raw JSON, normalised answer, paid)`` for a request missing from the cache.

        With a cache, this process first claims the request: while another live process holds
        the claim it polls the cache until that answer appears (``paid`` False) or the claim goes
        (released, expired, or its holder died), then claims it itself. A fresh answer is cached
        as soon as it has passed validation, and the claim is released after that (or on
        failure)."""
        if self.cache is None:
            return *await self._fetch(kind, payload), True
        delay = CLAIM_POLL_S
        while not self.cache.claim(key):  # another process is asking for this very answer
            await asyncio.sleep(delay)
            delay = min(2 * delay, CLAIM_POLL_MAX_S)
            found = self._cached(kind, key, payload)
            if found is not None:
                return *found, False
        self._keep_claims()
        try:
            found = self._cached(kind, key, payload)  # answered between our miss and our claim
            if found is not None:
                return *found, False
            raw, result = await self._fetch(kind, payload)
            self.cache.put(key, raw)  # validated and paid for: on disk before anything else
            return raw, result, True
        finally:
            self.cache.release(key)

    def _keep_claims(self) -> None:
        """Make sure a heartbeat task refreshes this client's claims while it holds any."""
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.ensure_future(self._refresh_claims())

    async def _refresh_claims(self) -> None:
        """Extend the cache claims every :data:`~blackbox_mia.cache.CLAIM_REFRESH_S` seconds until
        none is held (a failure is logged: the claims then expire, and at worst another process
        pays for a request again)."""
        while self.cache is not None and self.cache.held_claims:
            await asyncio.sleep(CLAIM_REFRESH_S)
            try:
                self.cache.refresh_claims()
            except BlackboxMIAError as exc:
                LOG.warning("cannot refresh cache claims: %s", exc)
                return

    async def _fetch(self, kind: str, payload: dict) -> tuple[dict, dict]:
        """A fresh valid answer to ``payload``, ``(raw JSON, normalised)``, retrying by fault class.

        Raises:
            ApiError: the last failure, with its fault class (a 500 answering the same body
                twice in a row is final).
        """
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: fault_of(exc) != "final"),
            wait=_Wait(self.config),
            stop=stop_after_attempt(self.config.max_retries + 1),
            before_sleep=self._note_retry,
            reraise=True,
        )
        tokens = _estimate_tokens(payload)
        attempts, last_500 = 0, None
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    previous, last_500 = last_500, None
                    try:
                        answer = await self._send(kind, payload, tokens)
                    except openai.APIStatusError as exc:
                        if exc.status_code == 500:
                            last_500 = exc.response.content
                            if last_500 == previous:  # a deterministic refusal, not an outage
                                raise self._error(exc, attempts, kind, repeated=True) from None
                        raise
        except (openai.APIError, Malformed) as exc:
            raise self._error(exc, attempts, kind) from None  # the SDK's message may quote the key
        return answer

    async def _send(self, kind: str, payload: dict, tokens: int) -> tuple[dict, dict]:
        """One HTTP request under the limits: ``(raw JSON, normalised)``, validated.

        Raises:
            openai.APIError: the request failed.
            Malformed: the answer is not a JSON object or fails validation.
        """
        if self._rpm is not None:
            await self._rpm.acquire(1)
        if self._tpm is not None:
            await self._tpm.acquire(tokens)
        first = "prompt" if kind == "completions" else "messages"
        resource = self._sdk.completions if kind == "completions" else self._sdk.chat.completions
        body = {k: v for k, v in payload.items() if k != first}
        async with self._slots:
            self.usage.requests += 1
            # The whole payload goes as the body, so what is sent is exactly what is hashed.
            response = await resource.with_raw_response.create(
                model=self.config.model, **{first: payload[first]}, extra_body=body
            )
        http = response.http_response
        try:
            raw = decode_answer(http.content)
            self._account(raw.get("usage"))
            return raw, read_answer(kind, raw, payload)
        except Malformed as exc:
            self.usage.invalid_answers += 1
            exc.status = http.status_code
            raise

    def _account(self, usage: object) -> None:
        usage = usage if isinstance(usage, dict) else {}
        prompt, completion = (token_count(usage.get(k)) or 0 for k in ("prompt_tokens", "completion_tokens"))
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        price = self.config.price()
        if price is not None:
            self.usage.cost_usd += (prompt * price[0] + completion * price[1]) / 1e6

    def _note_retry(self, state: RetryCallState) -> None:
        self.usage.retries += 1
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, openai.APIStatusError):
            what = f"HTTP {exc.status_code}"
        elif isinstance(exc, Malformed):
            what = f"invalid answer: {exc.describe(self._masked)}"
        else:
            what = type(exc).__name__
        wait = state.next_action.sleep if state.next_action else 0.0
        LOG.warning("%s: %s (%s); retry %d of %d in %.2f s", self._url, what, fault_of(exc), state.attempt_number,
                    self.config.max_retries, wait)

    def _scrub(self, text: str) -> str:
        """``text`` with the API key (should a server quote it) masked."""
        key = self.config.api_key
        return text.replace(key, "***") if key and key != PLACEHOLDER_API_KEY else text

    def _masked(self, text: str, limit: int) -> str:
        """``text`` with the API key masked FIRST, then cut to ``limit`` characters (plus "..."),
        so a cut can never leave a prefix of the key behind."""
        return clip(self._scrub(text), limit)

    def _server_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        if isinstance(body, dict):
            body = body.get("message") or body.get("detail") or json.dumps(body)
        return self._masked(str(body) if body is not None else "", MESSAGE_CHARS)

    def _error(self, exc: openai.APIError | Malformed, attempts: int, kind: str, repeated: bool = False) -> ApiError:
        """A clear :class:`ApiError` for the last failure, ending with its fault class (never
        quoting the key)."""
        fault = "final" if repeated else fault_of(exc)
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if repeated:
            why = f"final: the same answer to {tries} in a row"
        elif fault == "final":
            why = "final: not retried" if attempts == 1 else f"final: after {tries}"
        else:
            why = f"{fault}: gave up after {tries}"
        status, message = self._describe(exc, kind)
        return ApiError(status, f"{message} ({why})", fault)

    def _describe(self, exc: openai.APIError | Malformed, kind: str) -> tuple[int | None, str]:
        """(HTTP status or ``None``, what went wrong) for one failed attempt."""
        url = self._url
        if isinstance(exc, Malformed):
            return exc.status, f"invalid {kind} answer from {url}: {exc.describe(self._masked)}"
        if isinstance(exc, openai.APITimeoutError):
            return None, f"no answer from {url} within {self.config.timeout_s:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return None, f"cannot reach {url}: {self._scrub(str(exc.__cause__ or exc))}"
        if not isinstance(exc, openai.APIStatusError):
            return None, f"request to {url} failed: {type(exc).__name__}"
        status, detail = exc.status_code, self._server_message(exc)
        if status in (401, 403):
            return status, f"the API key was refused by {url} (HTTP {status}); check ${API_KEY_ENV} or --api-key"
        if status == 404:
            if exc.code == "model_not_found" or "model" in detail.lower():
                return status, f"unknown model {self.config.model!r} at {url} (HTTP 404): {detail}"
            return status, f"{url} has no such endpoint (HTTP 404): {detail}; the base URL usually ends in /v1"
        if status == 429:
            return status, f"rate limited by {url} (HTTP 429): {detail}; lower the concurrency or set rpm / tpm"
        if status >= 500:
            return status, f"server error at {url} (HTTP {status}): {detail}"
        return status, f"{url} rejected the request (HTTP {status}): {detail}"


# -- request checks ----------------------------------------------------------------------------


def check_logit_bias(bias: Mapping[int, float]) -> dict[str, float]:
    """The ``logit_bias`` body field: token-id strings → bias (ints where integral).

    Raises:
        ApiError: (fault ``"final"``) more than :data:`MAX_BIAS_ENTRIES` entries, a key that is
            not a non-negative token id, or a value outside [-100, 100].
    """
    if len(bias) > MAX_BIAS_ENTRIES:
        raise ApiError(None, f"logit_bias has {len(bias)} entries; at most {MAX_BIAS_ENTRIES} are allowed")
    out: dict[str, float] = {}
    for token, value in bias.items():
        try:
            token_id = operator.index(token)
        except TypeError:
            raise ApiError(None, f"logit_bias keys must be token ids (int), got {token!r}") from None
        if token_id < 0 or isinstance(token, bool):
            raise ApiError(None, f"logit_bias keys must be non-negative token ids, got {token!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ApiError(None, f"logit_bias[{token_id}] must be a number, got {value!r}")
        value = float(value)
        if not -MAX_BIAS <= value <= MAX_BIAS:  # also rejects NaN
            raise ApiError(None, f"logit_bias[{token_id}] = {value} is outside [-{MAX_BIAS:g}, {MAX_BIAS:g}]")
        out[str(token_id)] = int(value) if value.is_integer() else value
    return out


def _check_prompt(prompt: list[int] | str) -> list[int] | str:
    if isinstance(prompt, str):
        return prompt
    try:
        ids = [operator.index(i) for i in prompt]
    except TypeError:
        raise ApiError(None, "a prompt must be a string or a list of token ids (int)") from None
    if any(i < 0 for i in ids):
        raise ApiError(None, "token ids in a prompt must be non-negative")
    return ids


def _check_int(value: int, name: str, low: int) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise ApiError(None, f"{name} must be an int, got {value!r}") from None
    if number < low:
        raise ApiError(None, f"{name} must be at least {low}, got {number}")
    return number


def _with_extra(payload: dict, extra: dict | None) -> dict:
    if not extra:
        return payload
    clash = sorted(set(extra) & (set(payload) | {"model", "stream", "prompt", "messages"}))
    if clash:
        raise ApiError(None, f"extra body fields {clash} clash with fields the client sets itself")
    return {**payload, **extra}


def _estimate_tokens(payload: dict) -> int:
    """Prompt tokens (exact for id prompts, ~4 bytes a token for text) plus ``max_tokens``."""
    prompt = payload.get("prompt")
    if isinstance(prompt, list):
        n = len(prompt)
    elif isinstance(prompt, str):
        n = len(prompt.encode("utf-8")) // BYTES_PER_TOKEN + 1
    else:
        n = sum(len(str(m.get("content", "")).encode("utf-8")) // BYTES_PER_TOKEN + 4 for m in payload["messages"])
    return n + int(payload.get("max_tokens") or 0)
