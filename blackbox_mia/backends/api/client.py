"""Async client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

:class:`ApiClient` sends requests through a thin aiohttp transport (:mod:`.transport`: the same
body and header as the official SDK, failures raised as the SDK's exceptions, without the SDK's
per-request CPU) and adds what an audit needs:

* one validation step for every answer, fresh or cached: shape, every requested field present,
  every number finite, lengths consistent (see :mod:`.answers`). An answer that fails it is
  never cached: it is retried, and a cached row that fails it is dropped and asked again;
* a disk cache of the raw response JSON (:class:`~blackbox_mia.cache.ResponseCache`), queued as
  soon as an answer has passed validation (in the step that received it) and written before the
  answer is returned, so a rerun makes zero requests; the rows go to the cache's writer thread, which commits many in one transaction,
  so the event loop never waits on a disk flush; processes sharing a cache directory claim
  each request so none is paid for twice;
* retries with tenacity by fault class (:mod:`.faults`, carried by :class:`ApiError`):
  transient faults (408, 429, 5xx other than 501, timeouts, dropped connections) back off
  exponentially with jitter, never less than the server's ``Retry-After``; invalid 200s are
  retried after a short linear wait; final faults (other 4xx, 501) fail at once; a refused
  connection (nothing listens at the URL) is retried once. A 500 is retried like any 5xx, with
  the same body or not (transient 500s often say just "Internal Server Error"); one that gave
  the same body to every attempt is named a deterministic server failure (fault ``"final"``);
* an optional spending cap (``ApiConfig.max_cost``, :class:`~.usage.Budget`): the request that
  could take the spend past it is not sent (:class:`~.usage.BudgetExceeded`);
* at most ``concurrency`` requests in flight, optional requests-per-minute and
  tokens-per-minute limits (:mod:`.usage`); :meth:`ApiClient.stop_sending` (Ctrl-C) sends
  nothing more and lets the requests in flight land in the cache for a grace period;
* request bodies built and checked by the endpoint kind's :class:`~.dialect.Dialect`, and a
  normalised, JSON-ready result (see :meth:`ApiClient.complete`);
* usage accounting: requests, retries, cache hits, invalid answers, tokens and cost in USD;
* before its first request, the model name checked against ``GET /models`` where the server
  lists models (:meth:`ApiClient.check_model`), and a 404 on the endpoint path said as such
  (``404 at URL: wrong base URL?``).

The API key is only ever sent in the ``Authorization`` header. It is not
part of any cache key or cached value, any error message, log line, ``repr`` or ``describe()``:
text from a server is masked before it is cut short, so no prefix of the key can survive a cut.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from types import TracebackType
from typing import Self

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
)

from ...cache import ResponseCache
from ...cache_keys import canonical_json, request_key
from ...claims import CLAIM_REFRESH_S
from ...types import BlackboxMIAError
from ..loop import ThreadResults
from .answers import MESSAGE_CHARS, Malformed, clip, decode_answer
from .claims import ClaimBatcher
from .config import API_KEY_ENV, PLACEHOLDER_API_KEY, ApiConfig, display_url
from .dialect import CHAT, COMPLETIONS, Dialect, estimate_tokens
from .faults import ApiError, Backoff, connection_refused, fault_of, refused_too_often
from .senders import Senders
from .transport import MODELS_PATH, Transport
from .usage import Budget, BudgetExceeded, RateLimiter, Usage, request_cost

__all__ = ["ApiClient", "ApiConfig", "ApiError", "BudgetExceeded", "Usage", "display_url"]

LOG = logging.getLogger(__name__)
CLAIM_POLL_S = 0.02  # first wait (seconds) for another process's answer to a claimed request; doubles
CLAIM_POLL_MAX_S = 0.5  # longest wait (seconds) between two looks at the cache for that answer
SHOWN_MODELS = 20  # model ids an unknown-model error lists at most


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
        self._model_json = canonical_json(config.model)  # the body's first field, serialised once
        self._transport = Transport(config.base_url, config.api_key, config.timeout_s)
        self._senders = Senders(config.concurrency)
        self._written = ThreadResults()  # cache rows committed by the cache's writer thread
        self._inflight: dict[str, list[asyncio.Future]] = {}  # key being fetched -> requests waiting for it
        self._heartbeat: asyncio.Task | None = None  # keeps this client's cache claims from expiring
        self._claims = ClaimBatcher(cache) if cache is not None else None
        self._rpm = RateLimiter(config.rpm) if config.rpm else None
        self._tpm = RateLimiter(config.tpm) if config.tpm else None
        self._budget = Budget(config.max_cost) if config.max_cost is not None else None
        self._models: asyncio.Future | None = None  # the GET /models lookup, once (in memory only)
        self._model_checked = False  # the model name was checked against it

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
            logit_bias: token id → bias in [-MAX_BIAS, MAX_BIAS], at most MAX_BIAS_ENTRIES
                (:mod:`.wire`).
            echo: return the prompt's tokens too (as ``prompt_tokens``).
            extra: further body fields (``seed``, ``stop``, vLLM options...); part of the cache key.

        Returns:
            ``{"text", "tokens", "past_max_tokens", "prompt_tokens", "finish_reason", "usage",
            "cached"}``:

            * ``text``: the generated text (the echoed prompt removed where it can be located);
            * ``tokens``: one entry per generated token, ``{"token": str, "bytes": list[int] |
              None, "logprob": float | None, "top": [{"token", "bytes", "logprob"}, ...]}``
              with ``top`` sorted by log-prob (nats), largest first; ``[]`` when no log-probs
              were requested. With log-probs requested every ``logprob`` is a finite number,
              ``top`` is non-empty when ``logprobs > 0``, and there is at least one entry when
              ``max_tokens >= 1`` (at most ``max_tokens``);
            * ``past_max_tokens``: entries the server generated past ``max_tokens`` (llama-cpp-python
              does while its output ends inside a character), in the same form;
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
        return await self.request(COMPLETIONS, prompt, max_tokens=max_tokens, temperature=temperature,
                                  top_n=logprobs, bias=logit_bias, echo=echo, extra=extra)

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
            logit_bias: token id → bias in [-MAX_BIAS, MAX_BIAS], at most MAX_BIAS_ENTRIES
                (:mod:`.wire`).
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
        return await self.request(CHAT, content, max_tokens=max_tokens, temperature=temperature,
                                  top_n=top_logprobs, bias=logit_bias, extra=extra)

    async def request(self, dialect: Dialect, prompt: list[int] | str, *, attempts: int | None = None,
                      **options) -> dict:
        """One request in ``dialect`` (or its cached answer).

        Args:
            dialect: the endpoint kind (builds and checks the body, reads the answer).
            prompt: token ids or text.
            attempts: most requests sent for it (the first and the retries, >= 1); ``None``:
                ``config.max_retries + 1``. Fewer for a question whose refusal is expected
                (the capability probe's checks).
            options: the keyword arguments of :meth:`Dialect.payload` (``max_tokens``,
                ``temperature``, ``top_n``, ``bias``, ``echo``, ``extra``).

        Returns:
            The answer as :meth:`complete` describes it.

        Raises:
            ApiError: invalid arguments (fault ``"final"``, checked before sending), or the
                request failed (see its ``fault``).
            BlackboxMIAError: the cache is unusable.
        """
        return await self._answer(dialect, dialect.payload(prompt, **options), attempts or self.config.max_retries + 1)

    async def served_models(self) -> list[str] | None:
        """The model ids the server lists at ``GET {base_url}/models``, or ``None`` when it lists
        none (any HTTP error, 404 included, a timeout, a refused connection, or an answer that is
        not OpenAI's ``{"data": [{"id": ...}, ...]}``: the first real request then reports any
        problem with its own retries). One GET per client, not retried; the result (or ``None``)
        is kept in memory only, for the client's life. Sends nothing until first awaited."""
        if self._models is None:
            self._models = asyncio.ensure_future(self._list_models())
        return await asyncio.shield(self._models)

    async def check_model(self) -> None:
        """Check the model name against :meth:`served_models` (once per client): a server that
        lists models must list this one (or ``models/<name>``, as Gemini's endpoint names them);
        one that lists none is trusted, as before. Many OpenAI-compatible servers (llama.cpp's
        among them) answer any model name with the one model they serve, so a result would
        otherwise be labelled with a name it does not belong to.

        Raises:
            BlackboxMIAError: the server lists models and not this one (the message names up to
                :data:`SHOWN_MODELS` of those it lists).
        """
        if self._model_checked:
            return
        models = await self.served_models()
        model = self.config.model
        if models and model not in models and f"models/{model}" not in models:
            shown = ", ".join(repr(self._masked(m, MESSAGE_CHARS)) for m in models[:SHOWN_MODELS])
            more = f" and {len(models) - SHOWN_MODELS} more" if len(models) > SHOWN_MODELS else ""
            raise BlackboxMIAError(
                f"unknown model {model!r} at {self._url}: the server lists {shown}{more} (GET /models); "
                "pass one of them with --model"
            )
        self._model_checked = True

    async def _list_models(self) -> list[str] | None:
        """The ids of ``GET /models``, or ``None`` (see :meth:`served_models`)."""
        try:
            _, content = await self._transport.get(MODELS_PATH)
            data = json.loads(content).get("data")
        except (openai.APIError, ValueError, AttributeError) as exc:
            LOG.debug("%s: no model list (%s)", self._url, type(exc).__name__)
            return None
        if not isinstance(data, list):
            return None
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def stop_sending(self, grace_s: float) -> int:
        """Send no further request (retries included: what is queued never starts) and wait up to
        ``grace_s`` seconds for the requests in flight, whose valid answers are queued for the
        cache as they arrive (:meth:`close` writes them). For Ctrl-C: answers already paid for
        are kept, not paid again by the rerun. Requests wait until :meth:`resume_sending` (or
        :meth:`close`).

        Returns:
            The requests still in flight when the grace period ended (their answers are lost).
        """
        in_flight = self._senders.in_progress
        if in_flight:
            LOG.warning("%s: waiting up to %g s for %d answer%s in flight (Ctrl-C again to exit at once)", self._url,
                        grace_s, in_flight, "s" if in_flight != 1 else "")
        return await self._senders.drain(grace_s)

    def resume_sending(self) -> None:
        """Undo :meth:`stop_sending`: waiting requests are sent again."""
        self._senders.resume()

    async def close(self) -> None:
        """Close the HTTP connections and the cache (releasing its claims)."""
        if self._models is not None and not self._models.done():
            self._models.cancel()
            await asyncio.gather(self._models, return_exceptions=True)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await self._senders.close()
        await self._transport.close()
        if self.cache is not None:
            self.cache.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------------------

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
        that fails validation is dropped (and counted in ``usage.invalid_cached``), never trusted."""
        if self.cache is None:
            return None
        raw = self.cache.get(key)
        if raw is None:
            return None
        try:
            return raw, dialect.read(raw, payload)
        except Malformed as exc:
            self.usage.invalid_cached += 1
            LOG.warning("%s: dropping a cached answer that fails validation (%s); asking again",
                        self._url, exc.describe(self._masked))
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
        :mod:`~blackbox_mia.claims`): the request is sent without a second look. A fresh answer
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
        """Extend the cache claims every :data:`~blackbox_mia.claims.CLAIM_REFRESH_S` seconds until
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
        except (openai.APIError, Malformed) as exc:
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
            except openai.APIStatusError as exc:
                bodies.add((exc.status_code, exc.response.content))
                raise
            except (openai.APIError, Malformed):
                bodies.add(None)
                raise

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: fault_of(exc) != "final"),
            wait=Backoff(self.config.backoff_base_s, self.config.backoff_max_s),
            stop=stop_any(stop_after_attempt(attempts), refused_too_often),
            before_sleep=lambda state: self._note_retry(state, attempts - 1),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    answer = await send()
        except (openai.APIError, Malformed) as exc:
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
            openai.APIError: the request failed.
            Malformed: the answer is not a JSON object or fails validation.
            BudgetExceeded: sending it could take the spend past ``max_cost``.
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
                    self.usage.bill(raw.get("usage"), self.config.price())  # billed before its reservation goes
                    result = dialect.read(raw, payload)
                except Malformed as exc:
                    return status, exc
                return status, (raw, result, None if key is None else self.cache.put_soon(key, raw, release=True))
            finally:
                if self._budget is not None:
                    self._budget.settle(worst)

        status, answer = await self._senders.run(post)
        if isinstance(answer, Malformed):
            self.usage.invalid_answers += 1
            answer.status = status
            raise answer
        return answer

    def _reserve(self, payload: dict, tokens: int) -> float:
        """Reserve the worst-case cost (USD) of one request under the budget (0 without one).

        Raises:
            BudgetExceeded: the request could take the spend past ``max_cost``.
        """
        if self._budget is None:
            return 0.0
        completion = int(payload.get("max_tokens") or 0)
        worst = request_cost(tokens - completion, completion, self.config.price())
        self._budget.reserve(self.usage.cost_usd, worst)
        return worst

    def _note_retry(self, state: RetryCallState, retries: int) -> None:
        """Count and log one retry (``retries``: the most this request gets)."""
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
                    retries, wait)

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

    def _error(self, exc: openai.APIError | Malformed, attempts: int, dialect: Dialect, repeated: bool = False) -> ApiError:
        """A clear :class:`ApiError` for the last failure after ``attempts`` requests, ending with
        its fault class and that count (never quoting the key); ``repeated``: every attempt got
        the same 500 answer (final)."""
        fault = "final" if repeated else fault_of(exc)
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if repeated:
            why = f"final: a deterministic server failure, the same answer to all {tries}"
        elif fault == "final":
            why = "final: not retried" if attempts == 1 else f"final: after {tries}"
        else:
            why = f"{fault}: gave up after {tries}"
        status, message = self._describe(exc, dialect)
        detail = self._server_message(exc) if isinstance(exc, openai.APIStatusError) else None
        return ApiError(status, f"{message} ({why})", fault, detail)

    def _describe(self, exc: openai.APIError | Malformed, dialect: Dialect) -> tuple[int | None, str]:
        """(HTTP status or ``None``, what went wrong) for one failed attempt."""
        url = self._url
        if isinstance(exc, Malformed):
            return exc.status, f"invalid {dialect.name} answer from {url}: {exc.describe(self._masked)}"
        if isinstance(exc, openai.APITimeoutError):
            return None, f"no answer from {url} within {self.config.timeout_s:g} s"
        if connection_refused(exc):
            return None, (f"connection refused by {url}: nothing listens there; check the host and port, "
                          "and that the server is running")
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
            where = display_url(self._transport.url(dialect.prompt_field))
            return status, f"404 at {where}: wrong base URL? (it usually ends in /v1; the server said: {detail})"
        if status == 429:
            return status, f"rate limited by {url} (HTTP 429): {detail}; lower the concurrency or set rpm / tpm"
        if status >= 500:
            return status, f"server error at {url} (HTTP {status}): {detail}"
        return status, f"{url} rejected the request (HTTP {status}): {detail}"
