"""Async client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

:class:`ApiClient` sends requests through a thin aiohttp transport (:mod:`.transport`: the same
body and header as the official SDK, failures raised as the SDK's exceptions, without the SDK's
per-request CPU) and adds what an audit needs:

* one validation step for every answer, fresh or cached: shape, every requested field present,
  every number finite, lengths consistent (see :mod:`.answers`). An answer that fails it is
  never cached: it is retried, and a cached row that fails it is dropped and asked again;
* a disk cache of the raw response JSON (:class:`~blackbox_mia.backends.api.http.cache.responses.ResponseCache`), queued as
  soon as an answer has passed validation (in the step that received it) and written before the
  answer is returned, so a rerun makes zero requests; the rows go to the cache's writer thread, which commits many in one transaction,
  so the event loop never waits on a disk flush; processes sharing a cache directory claim
  each request so none is paid for twice;
* retries with tenacity by fault class (:mod:`.faults`, carried by :class:`ApiError` and its
  typed subclasses, :mod:`.errors`): transient faults (408, 429, 5xx other than 501, timeouts, dropped connections) back off
  exponentially with jitter, never less than the server's ``Retry-After``; invalid 200s are
  retried after a short linear wait; final faults (other 4xx, 501) fail at once; a refused
  connection (nothing listens at the URL) is retried once. A 500 is retried like any 5xx, with
  the same body or not (transient 500s often say just "Internal Server Error"); one that gave
  the same body to every attempt is named a deterministic server failure (fault ``"final"``);
* an optional spending cap (``ApiConfig.max_cost``, :class:`~blackbox_mia.cost.usage.Budget`): the request that
  could take the spend past it is not sent (:class:`~blackbox_mia.cost.usage.BudgetExceeded`);
* at most ``concurrency`` requests in flight, optional requests-per-minute and
  tokens-per-minute limits (:mod:`.limits`); :meth:`ApiClient.stop_sending` (Ctrl-C) sends
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

This module is the public request API; how one answer is obtained (cache, claims, limits,
retries, error messages) is its base class, :class:`~.fetch.AnswerFetcher`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import TracebackType
from typing import Self


from .cache.responses import ResponseCache
from ....cost.usage import Usage
from ....option_names import named
from ....types import BlackboxMIAError, BudgetExceeded
from .config import ApiConfig, display_url
from .dialect import CHAT, COMPLETIONS, Dialect
from .errors import MESSAGE_CHARS, ApiError, APIStatusError, Fault, NotAnApiError, page_kind
from .faults import connection_refused, key_refused_message, not_an_api_message, refused_message
from .fetch import AnswerFetcher
from .transport import MODELS_PATH

__all__ = ["ApiClient", "ApiConfig", "ApiError", "BudgetExceeded", "Usage", "display_url"]

CONTEXT_FIELDS = ("max_model_len", "context_length", "max_context_length")
"""Where a ``GET /models`` entry gives the model's context in tokens: vLLM (and ``bbmia serve``),
OpenRouter and Together, LM Studio."""
LOG = logging.getLogger(__name__)
SHOWN_MODELS = 20  # model ids an unknown-model error lists at most


class ApiClient(AnswerFetcher):
    """Cached, rate-limited, retrying requests to one model behind an OpenAI-compatible API.

    Args:
        config: endpoint, model, key and limits.
        cache: where raw responses are kept; ``None`` disables caching. The client closes it in
            :meth:`close`.

    Attributes:
        config, cache: as given.
        url: ``config.base_url`` without user info, query or fragment (:func:`display_url`): the
            form every message and record shows (the raw one may hold a credential).
        usage: requests, retries, cache hits, tokens and cost so far (:class:`Usage`).
    """

    def __init__(self, config: ApiConfig, cache: ResponseCache | None = None):
        super().__init__(config, cache)
        self._models: asyncio.Future | None = None  # the GET /models lookup, once (in memory only)
        self._models_failure: BaseException | None = None  # why GET /models listed nothing (None: it did, or not asked yet)
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
        problem with its own retries; :meth:`check_server` reports some at once). One GET per
        client, not retried; the result (or ``None``) is kept in memory only, for the client's
        life. Sends nothing until first awaited."""
        entries = await self._model_entries()
        return None if entries is None else list(entries)

    async def served_context(self) -> tuple[int, str] | None:
        """The model's context length in tokens as ``GET {base_url}/models`` lists it, and the
        field it came from (:data:`CONTEXT_FIELDS`: vLLM's ``max_model_len``, ...), or ``None``
        when the server lists no such number for this model (the same single GET as
        :meth:`served_models`)."""
        entry = (await self._model_entries() or {}).get(self.config.model) or {}
        for field in CONTEXT_FIELDS:
            value = entry.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
                return value, field
        return None

    async def _model_entries(self) -> dict[str, dict] | None:
        """``GET /models``'s entries by id, fetched once (see :meth:`served_models`)."""
        if self._models is None:
            self._models = asyncio.ensure_future(self._list_models())
        return await asyncio.shield(self._models)

    async def check_server(self) -> None:
        """:meth:`check_model`, after which a refused connection or a refused key (HTTP 401/403)
        at ``GET /models`` fails at once, in one line, instead of on the first request: for a
        command line, before it loads anything slow (the tokenizer). One GET, not retried.

        Raises:
            BlackboxMIAError: the connection was refused (nothing listens at the base URL), the
                answer is a page, not JSON (the URL is not the API's), the server refused the
                API key, or it lists models and not this one.
        """
        await self._model_entries()
        failure = self._models_failure
        if connection_refused(failure):
            raise BlackboxMIAError(refused_message(self.url))
        if isinstance(failure, NotAnApiError):
            request = f"GET {display_url(self._transport.path_url(MODELS_PATH))}"
            raise BlackboxMIAError(not_an_api_message(self.url, request, failure.status_code, failure.detail))
        if isinstance(failure, APIStatusError) and failure.status_code in (401, 403):
            raise BlackboxMIAError(key_refused_message(f"{self.url} (GET /models)", failure.status_code))
        await self.check_model()

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
                f"unknown model {model!r} at {self.url}: the server lists {shown}{more} (GET /models); "
                f"pass one of them with {named('model')}"
            )
        self._model_checked = True

    async def _list_models(self) -> dict[str, dict] | None:
        """The entries of ``GET /models`` by id, or ``None`` (see :meth:`served_models`)."""
        try:
            status, content = await self._transport.get(MODELS_PATH)
            page = page_kind(content)
            if page is not None:  # a 200 page: a web server, not the API
                raise NotAnApiError(status, f"HTTP {status}", Fault.FINAL, page)
            data = json.loads(content).get("data")
        except (ApiError, ValueError, AttributeError) as exc:
            self._models_failure = exc
            LOG.debug("%s: no model list (%s)", self.url, type(exc).__name__)
            return None
        if not isinstance(data, list):
            return None
        return {m["id"]: m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)}

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
            LOG.warning("%s: waiting up to %g s for %d answer%s in flight (Ctrl-C again to exit at once)", self.url,
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
