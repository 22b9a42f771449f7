"""How :class:`~.client.ApiClient` obtains one valid answer: :class:`AnswerFetcher`.

A cached answer when the cache holds a valid one; else, claimed in the cache so that processes
sharing it pay once, one request sent under the concurrency, rate and spending limits, retried
by fault class with tenacity (:mod:`.faults`), validated (:mod:`.answers`) and queued for the
cache before it is returned; a failure becomes an :class:`~.errors.ApiError` saying what went
wrong, with the API key masked. The public request API is :class:`~.client.ApiClient`'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
)

from .cache.responses import ResponseCache
from .cache.keys import canonical_json, request_key
from .cache.claims import CLAIM_REFRESH_S
from .cache.disk import JsonText
from ....cost.prices import request_cost
from ....cost.usage import Budget, Usage
from ....option_names import named
from ....types import BlackboxMIAError
from ...loop import ThreadResults
from .answers import billed_tokens, clip, decode_answer
from .cache.claim_batcher import ClaimBatcher
from .config import PLACEHOLDER_API_KEY, ApiConfig, display_url
from .dialect import Dialect, estimate_tokens
from .errors import (
    MESSAGE_CHARS,
    APIConnectionError,
    ApiError,
    APIStatusError,
    APITimeoutError,
    Fault,
    Malformed,
    NotAnApiError,
    error_type,
)
from .faults import (
    Backoff,
    connection_refused,
    fault_of,
    key_refused_message,
    not_an_api_message,
    refused_message,
    refused_too_often,
)
from .limits import RateLimiter
from .senders import Senders
from .transport import Transport

CONTEXT_REFUSAL = re.compile(
    r"context (length|window|size)|maximum context|max_model_len|n_ctx|exceed\w* (the )?(context|max)|too (long|many tokens)",
    re.IGNORECASE)
"""A server's 400 message that says the prompt is longer than the model's context (vLLM, OpenAI,
llama.cpp, TGI wordings)."""
LOG = logging.getLogger(__name__)
CLAIM_POLL_S = 0.02  # first wait (seconds) for another process's answer to a claimed request; doubles
CLAIM_POLL_MAX_S = 0.5  # longest wait (seconds) between two looks at the cache for that answer


class AnswerFetcher:
    """The cache, claims, limits, retries and error descriptions behind :class:`~.client.ApiClient`
    (its base class; the arguments and attributes are :class:`~.client.ApiClient`'s)."""

    def __init__(self, config: ApiConfig, cache: ResponseCache | None = None):
        self.config = config
        self.cache = cache
        self.usage = Usage(unpriced=config.price() is None)
        self.url = display_url(config.base_url)
        self._model_json = canonical_json(config.model)  # the body's first field, serialised once
        self._transport = Transport(config.base_url, config.api_key, config.timeout_s)
        self._senders = Senders(config.concurrency)
        self._written = ThreadResults()  # cache rows committed by the cache's writer thread
        self._inflight: dict[str, list[asyncio.Future]] = {}  # key being fetched -> requests waiting for it
        self._heartbeat: asyncio.Task | None = None  # keeps this client's cache claims from expiring
        self._claims = ClaimBatcher(cache) if cache is not None else None
        self._rpm = RateLimiter(config.rpm) if config.rpm else None
        self._tpm = RateLimiter(config.tpm) if config.tpm else None
        capped = config.max_cost is not None or config.max_requests is not None
        self._budget = Budget(config.max_cost, config.max_requests) if capped else None

    async def _answer(self, dialect: Dialect, payload: dict, attempts: int) -> dict:
        """A valid cached answer, else a fresh one in at most ``attempts`` requests (identical
        concurrent requests are sent once)."""
        text = canonical_json(payload)  # serialised once: the cache key and the request body
        key = request_key(self.config.base_url, self.config.model, dialect.name, text)
        found = self._cached(dialect, key, payload)
        if found is not None:
            self.usage.cache_hits += 1
            return {**found[1], "cached": True}
        followers = self._inflight.get(key)
        if followers is not None:  # the same question is already on its way: share its answer
            shared = asyncio.get_running_loop().create_future()
            followers.append(shared)
            raw = await shared
            self.usage.cache_hits += 1
            return {**dialect.read(raw, payload), "cached": True}
        self._inflight[key] = followers = []
        try:
            raw, result, paid = await self._obtain(dialect, key, payload, self._body(text), attempts)
        except BaseException as exc:
            for shared in followers:  # the same outcome (cancelled too) for every request sharing it
                if shared.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    shared.cancel()
                else:
                    shared.set_exception(exc)
            raise
        else:
            for shared in followers:
                if not shared.done():
                    shared.set_result(raw)
        finally:
            del self._inflight[key]
        if not paid:
            self.usage.cache_hits += 1
        return {**result, "cached": not paid}

    def _cached(self, dialect: Dialect, key: str, payload: dict) -> tuple[dict, dict] | None:
        """The cached answer to ``payload``, ``(raw JSON, normalised)``, or ``None``; a cached row
        that fails validation, or that the cache quarantined as it read it (not JSON, a pickle...),
        is dropped (and counted in ``usage.invalid_cached``), never trusted."""
        if self.cache is None:
            return None
        known_bad = key in self.cache.quarantined
        raw = self.cache.get(key)
        if raw is None:
            if not known_bad and key in self.cache.quarantined:
                self.usage.invalid_cached += 1
            return None
        try:
            return raw, dialect.read(raw, payload)
        except Malformed as exc:
            self.usage.invalid_cached += 1
            LOG.warning("%s: dropping a cached answer that fails validation (%s); asking again",
                        self.url, exc.describe(self._masked))
            self.cache.delete(key)
            return None

    def _body(self, text: str) -> bytes:
        """The request body: ``{"model", **payload}`` as UTF-8 JSON, from the payload's canonical
        JSON ``text`` (so what is sent is exactly what is hashed; extras cannot set ``model``)."""
        model = self._model_json
        return (f'{{"model":{model}}}' if text == "{}" else f'{{"model":{model},{text[1:]}').encode("utf-8")

    async def _obtain(self, dialect: Dialect, key: str, payload: dict, body: bytes,
                      attempts: int) -> tuple[dict, dict, bool]:
        """``(raw JSON, normalised answer, paid)`` for a request missing from the cache (``body``:
        what is sent, :meth:`_body`; at most ``attempts`` requests).

        With a cache, this process first claims the request: while another live process holds
        the claim, or has just answered it, it polls the cache until that answer appears
        (``paid`` False) or the claim goes (released, expired, or its holder died), then claims
        it itself. A won claim means nobody answered since the cache missed (see
        :mod:`~blackbox_mia.backends.api.http.cache.claims`): the request is sent without a second look. A fresh answer
        is cached as soon as it has passed validation, and the claim is released after that (or
        on failure)."""
        if self.cache is None:
            raw, result, _ = await self._fetch(dialect, payload, body, attempts, None)
            return raw, result, True
        delay = CLAIM_POLL_S
        while not await self._claims.claim(key):  # another process is asking, or has just answered
            await asyncio.sleep(delay)
            delay = min(2 * delay, CLAIM_POLL_MAX_S)
            found = self._cached(dialect, key, payload)
            if found is not None:
                return *found, False
        self._keep_claims()
        try:
            raw, result, written = await self._fetch(dialect, payload, body, attempts, key)
            # validated, paid for and queued: on disk (the writer thread's next commit, which
            # also releases the claim) before it is returned
            await self._written.wait(written)
            return raw, result, True
        finally:
            self.cache.release(key)  # nothing when the writer has it (a failure or Ctrl-C: at once)

    def _keep_claims(self) -> None:
        """Make sure a heartbeat task refreshes this client's claims while it holds any."""
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.ensure_future(self._refresh_claims())

    async def _refresh_claims(self) -> None:
        """Extend the cache claims every :data:`~blackbox_mia.backends.api.http.cache.claims.CLAIM_REFRESH_S` seconds until
        none is held (a failure is logged: the claims then expire, and at worst another process
        pays for a request again)."""
        while True:
            await asyncio.sleep(CLAIM_REFRESH_S)
            if self.cache is None or not self.cache.held_claims:
                return
            try:
                self.cache.refresh_claims()
            except BlackboxMIAError as exc:
                LOG.warning("cannot refresh cache claims: %s", exc)
                return

    async def _fetch(self, dialect: Dialect, payload: dict, body: bytes, attempts: int,
                     key: str | None) -> tuple[dict, dict, concurrent.futures.Future | None]:
        """A fresh valid answer to ``payload`` in at most ``attempts`` requests, retrying by fault
        class: ``(raw JSON, normalised, its cache write)`` as :meth:`_send` (``key``: the cache
        key, ``None``: not cached).

        Raises:
            ApiError: the last failure, with its fault class and the number of attempts (a 500
                with the same body at every attempt, two or more: final, a deterministic server
                failure).
            BlackboxMIAError: (before the first request) the server lists models and not this
                one (:meth:`check_model`).
        """
        if not self._model_checked:  # before the first request this client sends
            await self.check_model()
        tokens = estimate_tokens(payload)
        try:  # the first attempt without tenacity's machinery (a sixth of the loop's CPU per request)
            return await self._send(dialect, payload, body, tokens, key)
        except (APIConnectionError, APIStatusError, Malformed) as exc:
            failure: BaseException | None = exc  # tenacity's first attempt: classified, waited on, counted
        tries, bodies = 0, set()  # requests sent; what the failed ones answered: (status, body), None: no status

        async def send() -> tuple[dict, dict, concurrent.futures.Future | None]:
            nonlocal failure, tries
            tries += 1
            try:
                if failure is not None:
                    exc, failure = failure, None
                    raise exc
                return await self._send(dialect, payload, body, tokens, key)
            except APIStatusError as exc:
                bodies.add((exc.status_code, exc.body))
                raise
            except (APIConnectionError, Malformed):
                bodies.add(None)
                raise

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: fault_of(exc).retried),
            wait=Backoff(self.config.backoff_base_s, self.config.backoff_max_s),
            stop=stop_any(stop_after_attempt(attempts), refused_too_often),
            before_sleep=lambda state: self._note_retry(state, attempts - 1),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    answer = await send()
        except (APIConnectionError, APIStatusError, Malformed) as exc:
            repeated = tries > 1 and len(bodies) == 1 and getattr(exc, "status_code", None) == 500
            raise self._error(exc, tries, dialect, repeated) from None  # the SDK's message may quote the key
        return answer

    async def _send(self, dialect: Dialect, payload: dict, body: bytes, tokens: int,
                    key: str | None) -> tuple[dict, dict, concurrent.futures.Future | None]:
        """One HTTP request under the limits: ``(raw JSON, normalised, its cache write)``,
        validated. A valid answer is queued for the cache under ``key`` (the writer thread's
        future; ``None`` when ``key`` is) in the step that received it, before its sender takes
        the next request: an answer that has arrived is never lost to a Ctrl-C
        (:meth:`stop_sending`).

        Raises:
            APIStatusError, APIConnectionError: the request failed (the transport's errors).
            Malformed: the answer is not a JSON object or fails validation.
            BudgetExceeded: sending it could take the spend past ``max_cost`` or ``max_requests``.
        """
        if self._rpm is not None:
            await self._rpm.acquire(1)
        if self._tpm is not None:
            await self._tpm.acquire(tokens)

        async def post() -> tuple[int, tuple[dict, dict, concurrent.futures.Future | None] | Malformed]:
            worst = self._reserve(payload, tokens)
            try:
                self.usage.requests += 1
                status, content = await self._transport.post(dialect.prompt_field, body)
                try:
                    raw = decode_answer(content)
                    self.usage.bill(*billed_tokens(raw), self.config.price())  # billed before its reservation goes
                    result = dialect.read(raw, payload)
                except Malformed as exc:
                    return status, exc
                kept = None if key is None else self.cache.put_soon(key, JsonText(content), release=True)  # as it came
                return status, (raw, result, kept)
            finally:
                if self._budget is not None:
                    self._budget.settle(worst)

        status, answer = await self._senders.run(post)
        if isinstance(answer, Malformed):
            self.usage.invalid_answers += 1
            if answer.final:  # a page: not the API
                raise NotAnApiError(status, f"HTTP {status}", Fault.FINAL, answer.problem)
            answer.status = status
            raise answer
        return answer

    def _reserve(self, payload: dict, tokens: int) -> float:
        """Reserve the worst-case cost (USD) of one request under the budget (0 without one).

        Raises:
            BudgetExceeded: the request could take the spend past ``max_cost``, or the requests
                sent past ``max_requests``.
        """
        if self._budget is None:
            return 0.0
        completion = int(payload.get("max_tokens") or 0)
        worst = request_cost(tokens - completion, completion, self.config.price())
        self._budget.reserve(self.usage.cost_usd, worst, self.usage.requests)
        return worst

    def _note_retry(self, state: RetryCallState, retries: int) -> None:
        """Count and log one retry (``retries``: the most this request gets)."""
        self.usage.retries += 1
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, APIStatusError):
            what = f"HTTP {exc.status_code}"
        elif isinstance(exc, Malformed):
            what = f"invalid answer: {exc.describe(self._masked)}"
        else:
            what = type(exc).__name__
        wait = state.next_action.sleep if state.next_action else 0.0
        LOG.warning("%s: %s (%s); retry %d of %d in %.2f s", self.url, what, fault_of(exc), state.attempt_number,
                    retries, wait)

    def _scrub(self, text: str) -> str:
        """``text`` with the API key (should a server quote it) masked."""
        key = self.config.api_key
        return text.replace(key, "***") if key and key != PLACEHOLDER_API_KEY else text

    def _masked(self, text: str, limit: int) -> str:
        """``text`` with the API key masked FIRST, then cut to ``limit`` characters (plus "..."),
        so a cut can never leave a prefix of the key behind."""
        return clip(self._scrub(text), limit)

    def _server_message(self, exc: APIStatusError) -> str:
        """The server's own error message of a failed attempt, the key masked, cut short."""
        return self._masked(exc.detail or "", MESSAGE_CHARS)

    def _error(self, exc: ApiError | Malformed, attempts: int, dialect: Dialect, repeated: bool = False) -> ApiError:
        """A clear :class:`ApiError` for the last failure after ``attempts`` requests (the subclass
        naming it, :func:`~.errors.error_type`), ending with its fault class and that count (never
        quoting the key); ``repeated``: every attempt got the same 500 answer (final)."""
        fault = Fault.FINAL if repeated else fault_of(exc)
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if repeated:
            why = f"final: a deterministic server failure, the same answer to all {tries}"
        elif not fault.retried:
            why = "final: not retried" if attempts == 1 else f"final: after {tries}"
        else:
            why = f"{fault}: gave up after {tries}"
        status, message = self._describe(exc, dialect)
        detail = self._server_message(exc) if isinstance(exc, APIStatusError) else None
        return error_type(exc)(status, f"{message} ({why})", fault, detail)

    def _describe(self, exc: ApiError | Malformed, dialect: Dialect) -> tuple[int | None, str]:
        """(HTTP status or ``None``, what went wrong) for one failed attempt."""
        url = self.url
        if isinstance(exc, NotAnApiError):
            where = display_url(self._transport.url(dialect.prompt_field))
            return exc.status_code, not_an_api_message(url, f"POST {where}", exc.status_code, exc.detail)
        if isinstance(exc, Malformed):
            return exc.status, f"invalid {dialect.name} answer from {url}: {exc.describe(self._masked)}"
        if isinstance(exc, APITimeoutError):
            return None, f"no answer from {url} within {self.config.timeout_s:g} s"
        if connection_refused(exc):
            return None, refused_message(url)
        if isinstance(exc, APIConnectionError):
            return None, f"cannot reach {url}: {self._scrub(str(exc.__cause__ or exc))}"
        if not isinstance(exc, APIStatusError):
            return None, f"request to {url} failed: {type(exc).__name__}"
        status, detail = exc.status_code, self._server_message(exc)
        if status in (401, 403):
            return status, key_refused_message(url, status)
        if status == 404:
            if exc.code == "model_not_found" or "model" in detail.lower():
                return status, f"unknown model {self.config.model!r} at {url} (HTTP 404): {detail}"
            where = display_url(self._transport.url(dialect.prompt_field))
            return status, f"404 at {where}: wrong base URL? (it usually ends in /v1; the server said: {detail})"
        if status == 400 and CONTEXT_REFUSAL.search(detail):
            return status, (f"{url} rejected the request (HTTP 400): {detail}; the text is longer than the model's "
                            f"context: give its context in tokens as {named('context')}, and longer texts go in "
                            "sliding windows")
        if status == 429:
            return status, f"rate limited by {url} (HTTP 429): {detail}; lower the concurrency or set rpm / tpm"
        if status >= 500:
            return status, f"server error at {url} (HTTP {status}): {detail}"
        return status, f"{url} rejected the request (HTTP {status}): {detail}"
