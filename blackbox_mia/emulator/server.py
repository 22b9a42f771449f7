"""An OpenAI-compatible validation server backed by a local model (``bbmia serve``).

It answers ``/v1/completions`` and ``/v1/chat/completions`` from a :class:`LocalBackend`, so every
log-prob a black-box client recovers can be checked against the white-box value. It emulates the
provider behaviours that matter to the tracker (``docs/design.md`` §4):

* ``logprobs_mode="raw"``: reported log-probs come from the UNBIASED distribution, as OpenAI
  since 2024, vLLM's default ``raw_logprobs`` and llama.cpp; ``"processed"``: they are
  log_softmax(logits + logit_bias), as vLLM's ``processed_logprobs`` and pre-2024 OpenAI
  (temperature is not applied to reported values in either mode). The SAMPLED token always
  comes from logits + bias (argmax at temperature 0), so a +100 bias forces a token.
* completions list the sampled token beside the top-n when it is not among them (as vLLM), so
  ``top_logprobs`` may hold n + 1 entries; chat ``top_logprobs`` hold exactly the top n.
* ``echo=False`` refuses echo + logprobs with 400 (as gpt-3.5-turbo-instruct); ``logprobs=False``
  answers with the sampled token and ``logprobs: null``; ``token_id_prompts=False`` refuses
  prompts given as token ids (with 400, or ``token_id_refusal_status``: 500 emulates a server
  that crashes on them, with the same body every time).
* text prompts are tokenized WITHOUT a BOS token unless ``text_bos`` (as vLLM and llama.cpp
  do for Llama-family models); token-id prompts are used as given, so the client controls BOS.
  Chat messages are concatenated as is unless ``chat_template`` wraps them: a ``{content}``
  text, or a real chat template (the tokenizer's own, ChatML by default, or a Jinja file)
  rendered with roles as chat models' servers do (:mod:`.templates`); the template changes the
  log-probs.
* token names: OpenAI's (``"bytes:\\xNN"`` for a token that is not valid UTF-8 on its own), or
  ``""`` with ``empty_partial_names`` (vLLM and OpenAI chat); chat ``bytes`` are always exact.
* ``max_tokens: 0`` means "prompt only" (echo), or "to the end of the context" with
  ``zero_max_tokens_unlimited`` (as some servers do).
* echoed prompt log-probs always ignore ``logit_bias`` (the bias only acts on sampling).
* ``vllm``: vLLM's shapes (:mod:`.vllm`): ``prompt_logprobs`` (one request gives every prompt
  token's log-prob and rank), echo derived from them, ``stop_reason``, vLLM's billing of echo
  with ``max_tokens: 0`` and its ``/tokenize`` defaults.
* every field the server reads is validated: a bad one gets a 400 with OpenAI's error JSON
  ``{"error": {"message", "type", "param", "code"}}``; a body over ``max_body_bytes`` gets 413.

Every model call runs on one worker thread. Next-token requests arriving within
``batch_window_ms`` are micro-batched into a single ``LocalBackend.next_token_logprobs`` call, and
their post-processing (bias, sampling, top-n) runs on the worker thread too. Tokenization, JSON
parsing and response building of LONG inputs run on a separate thread pool (short ones inline),
so one huge prompt never stalls the event loop, the model thread, or other clients.
"""

from __future__ import annotations

import asyncio
import codecs
import hmac
import itertools
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import numpy as np
from aiohttp import web

from ..backends.api.http.wire import DEFAULT_MAX_TOKENS, MAX_BIAS
from ..backends.local import LocalBackend, LocalConfig
from ..types import BlackboxMIAError
from .batcher import MicroBatcher
from .config import ServerConfig
from .errors import HttpError, bad_request, server_error, too_large
from .listen import listen
from .names import TokenNames, longest_piece_bytes
from .params import bool_field, chat_messages, int_field, parse_sampling, refuse_foreign
from .render import chat_entry, envelope, legacy_logprobs
from .sampling import Continuation, Sampling, choose
from .templates import ChatFormatter
from .vllm import RankedPosition, echo_positions, prompt_logprobs, ranked_positions

LOG = logging.getLogger(__name__)
TOKENIZE_WORKERS = 2  # threads of the tokenization pool (separate from the single model thread)
INLINE_CHARS = 4096  # texts (and JSON bodies) up to this many characters are handled on the loop
NORMALIZER_SLACK = 2  # a normalizer may shrink a text's UTF-8 by up to this factor before it is split into tokens
INLINE_TOKENS = 1024  # token sequences up to this long are decoded / rendered on the loop
CLIENT_CLOSED_REQUEST = 499  # status logged for a request whose client left (nginx's convention; never sent)


class ValidationServer:
    """An aiohttp OpenAI-compatible server answering from a local model.

    Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``,
    ``POST /tokenize`` and ``POST /detokenize`` (vLLM style).

    Args:
        config: a :class:`ServerConfig`.
        backend: an already loaded :class:`LocalBackend` to serve (avoids loading the model twice);
            ``None`` loads ``config.model`` in :meth:`start`.
    """

    def __init__(self, config: ServerConfig, backend: LocalBackend | None = None):
        self.config = config
        self.backend = backend
        self.base_url: str | None = None
        self._runner: web.AppRunner | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._batcher: MicroBatcher | None = None
        self._names: TokenNames | None = None
        self._bos: int | None = None
        self._chat_prompt: ChatFormatter | None = None
        self._reporting = config.reporting
        self._requests = itertools.count()  # numbers each request's noise (nondeterministic mode)
        self._piece_bytes = 1  # UTF-8 bytes of the longest vocabulary piece (set by start)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> str:
        """Load the model (when not given), bind, and return the base URL ``http://host:port/v1``.

        Raises:
            BlackboxMIAError: the model cannot be loaded, or ``text_bos`` is set for a tokenizer
                without a BOS token.
            BlackboxMIAError: the address cannot be bound (the port is in use, privileged, or not of this machine).
        """
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bbmia-model")
        self._pool = ThreadPoolExecutor(max_workers=TOKENIZE_WORKERS, thread_name_prefix="bbmia-tokenize")
        if self.backend is None:
            local = LocalConfig(self.config.model, device=self.config.device, dtype=self.config.dtype,
                                threads=self.config.threads, vocab_stats=False)
            self.backend = await loop.run_in_executor(self._executor, LocalBackend, local)
        if self.config.text_bos:
            self._bos = self.backend.tokenizer.bos_token_id
            if self._bos is None:
                raise BlackboxMIAError(f"text_bos is set but the tokenizer of {self.config.model!r} has no BOS token")
        self._piece_bytes = await loop.run_in_executor(self._pool, longest_piece_bytes, self.backend.tokenizer)
        self._names = TokenNames(self.backend.codec, self.config.empty_partial_names)
        self._chat_prompt = ChatFormatter(self.config.chat_template, self.backend.tokenizer)
        self._batcher = MicroBatcher(self.backend, self._executor, self.config.batch_window_ms, self.config.max_batch)
        self._batcher.start()
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=self.config.max_body_bytes)
        app.add_routes([
            web.get("/v1/models", self._models),
            web.post("/v1/completions", self._completions),
            web.post("/v1/chat/completions", self._chat),
            web.post("/tokenize", self._tokenize),
            web.post("/detokenize", self._detokenize),
        ])
        self._runner, self.base_url = await listen(app, self.config.host, self.config.port)
        return self.base_url

    async def stop(self) -> None:
        """Stop serving, fail queued requests, release the worker threads. Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._batcher is not None:
            await self._batcher.stop()  # kept: its counters stay readable through ``stats``
        for pool in (self._executor, self._pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._executor = self._pool = None

    @property
    def stats(self) -> dict[str, int]:
        """Micro-batching counters: next-token ``requests``, ``forward_passes``, ``largest_batch``."""
        b = self._batcher
        if b is None:
            return {"requests": 0, "forward_passes": 0, "largest_batch": 0}
        return {"requests": b.requests, "forward_passes": b.forward_passes, "largest_batch": b.largest_batch}

    # -- middlewares ------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except HttpError as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = f"Invalid URL ({request.method} {request.path})" if exc.status in (404, 405) else exc.reason
            return HttpError(exc.status, message, code=None).response()
        except ConnectionError as exc:  # the client left: nobody to answer, and not a server error
            LOG.debug("client disconnected during %s %s (%s)", request.method, request.path, exc)
            return web.Response(status=CLIENT_CLOSED_REQUEST)
        except Exception:  # a server bug must still answer JSON
            LOG.exception("internal error on %s %s", request.method, request.path)
            return server_error().response()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        key = self.config.api_key
        if key is not None:
            scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
            if scheme.lower() != "bearer":  # the scheme is case-insensitive (RFC 9110 section 11.1)
                given = ""
            given = given.strip()
            if not hmac.compare_digest(given.encode(), key.encode()):
                raise HttpError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
                                code="invalid_api_key")
        return await handler(request)

    # -- helpers ----------------------------------------------------------------------------

    async def _sized(self, size: int, inline_limit: int, fn: Callable, *args):
        """``fn(*args)`` on the event loop when ``size <= inline_limit``, else on the tokenization
        pool (never on the model thread), so one long input cannot stall other clients."""
        if size <= inline_limit:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(fn, *args))

    async def _body(self, request: web.Request, require_model: bool) -> dict:
        """The request's JSON object, its ``model`` checked.

        Raises:
            HttpError: 413 when the body exceeds ``max_body_bytes``; 400 when it is not a JSON
                object, when ``model`` is missing (``require_model``) or not a string; 404 when
                ``model`` names another model.
        """
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(request.content_length, limit)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(None, limit) from None
        try:
            body = await self._sized(len(raw), INLINE_CHARS, json.loads, raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise bad_request("We could not parse the JSON body of your request.", code="invalid_json") from None
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object", code="invalid_json")
        model = body.get("model")
        if model is None:
            if require_model:
                raise bad_request("you must provide a model parameter", "model")
        elif not isinstance(model, str):
            raise bad_request(f"'model' must be a string, got {json.dumps(model)}", "model", "invalid_type")
        elif model != self.config.name:
            raise HttpError(404, f"The model `{model}` does not exist.", "model", "model_not_found")
        return body

    async def _encode(self, text: str, param: str) -> tuple[list[int], int]:
        """Token ids of a text prompt as the model sees it (BOS first with ``text_bos``) and the
        number of tokens the server added (0 or 1). Long texts are tokenized off the event loop.

        A text too long for the context whatever its tokens (more characters than ``context``
        tokens of the longest vocabulary piece can hold, with :data:`NORMALIZER_SLACK`) is refused
        before it is tokenized: a 10 MB prompt costs no tokenization, and the memory a prompt
        can take in the tokenizer is bounded by the context.

        Raises:
            HttpError: 400 (param ``param``) when the text has no tokens, or is surely longer
                than the context (``context_length_exceeded``).
        """
        context = self.backend.context
        least = len(text) // (self._piece_bytes * NORMALIZER_SLACK)  # a character is at least one byte
        if least > context:
            raise bad_request(f"This model's maximum context length is {context} tokens. However, your {param} is "
                              f"{len(text)} characters, at least {least} tokens (no token of this model spans more "
                              f"than {self._piece_bytes} bytes).", param, "context_length_exceeded")
        ids = await self._sized(len(text), INLINE_CHARS, self.backend.encode, text)
        if not ids:
            raise bad_request(f"the {param} text has no tokens", param, "invalid_value")
        if self._bos is None:
            return ids, 0
        return [self._bos, *ids], 1

    def _check_ids(self, ids: list, param: str) -> list[int]:
        vocab = self.backend.vocab_size
        if not ids or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab for i in ids):
            raise bad_request(f"'{param}' must be a non-empty list of token ids in 0..{vocab - 1}", param, "invalid_value")
        return ids

    def _check_length(self, n_prompt: int, max_tokens: int) -> None:
        context = self.backend.context
        if n_prompt + max_tokens > context:
            raise bad_request(f"This model's maximum context length is {context} tokens. However, you requested "
                              f"{n_prompt + max_tokens} tokens ({n_prompt} in the prompt, {max_tokens} in the "
                              "completion).", "max_tokens", "context_length_exceeded")

    def _max_tokens(self, body: dict, names: tuple[str, ...], n_prompt: int, lo: int) -> int:
        """Tokens to generate: the first of ``names`` given (at least ``lo``; 0 = to the context end
        with ``zero_max_tokens_unlimited``), else min(16, room left), at least ``lo``.

        Raises:
            HttpError: 400 when the value is not an integer or below ``lo``.
        """
        unlimited = self.config.zero_max_tokens_unlimited
        for name in names:
            if body.get(name) is not None:
                value = int_field(body, name, None, lo=0 if unlimited else lo)
                if value == 0 and unlimited:
                    return max(lo, self.backend.context - n_prompt)
                return value
        return max(lo, min(DEFAULT_MAX_TOKENS, self.backend.context - n_prompt))

    async def _generate(self, prompt: Sequence[int], sampling: Sampling,
                        noise: np.random.Generator | None) -> Continuation:
        """Sample up to ``max_tokens`` tokens, bias applied at every step (with the request's
        logit ``noise`` in nondeterministic mode); stop after EOS or once the text contains a
        stop sequence."""
        rng = np.random.default_rng(sampling.seed)
        then = partial(choose, sampling=sampling, mode=self.config.logprobs_mode, rng=rng,
                       reporting=self._reporting, noise=noise)
        eos = self.backend.tokenizer.eos_token_id
        longest = max(map(len, sampling.stop), default=0)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        ids, steps, text = list(prompt), [], ""
        for _ in range(sampling.max_tokens):
            step = await self._batcher.submit(ids, partial(then, shape=(len(prompt), len(ids))))
            steps.append(step)
            ids.append(step.token)
            if step.token == eos:  # listed in logprobs, not part of the text
                return Continuation(steps, text + decoder.decode(b"", final=True), "stop")
            start = max(0, len(text) - longest)
            text += decoder.decode(self._names(step.token)[1])
            hits = [(i, s) for i, s in ((text.find(s, start), s) for s in sampling.stop) if i >= 0]
            if hits:
                at, stop = min(hits)
                return Continuation(steps, text[:at], "stop", stop)
        return Continuation(steps, text + decoder.decode(b"", final=True), "length")

    async def _respond(self, build: Callable[[], dict], size: int) -> web.Response:
        """A JSON response from ``build()``, built and serialised off the loop when ``size`` (tokens
        rendered) is large."""
        text = await self._sized(size, INLINE_TOKENS, lambda: json.dumps(build()))
        return web.Response(text=text, content_type="application/json")

    # -- routes -----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        entry = {"id": self.config.name, "object": "model", "created": 0, "owned_by": "bbmia",
                 "max_model_len": self.backend.context}
        return web.json_response({"object": "list", "data": [entry]})

    def _id_refusal(self) -> HttpError:
        status = self.config.token_id_refusal_status
        if status >= 500:  # a server failing on id prompts: the same body every time
            return server_error(status)
        return HttpError(status, "prompts given as token ids are not supported by this server", "prompt",
                         "unsupported_parameter")

    async def _completion_prompt(self, prompt) -> tuple[list[int], int, str | None]:
        """(ids the model sees, tokens the server added in front, the prompt text or None for
        token ids).

        Raises:
            HttpError: 400 for a missing, empty, batched or ill-typed prompt or bad token ids;
                ``token_id_refusal_status`` for token ids when ``token_id_prompts`` is off.
        """
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one prompt
        if isinstance(prompt, str):
            ids, added = await self._encode(prompt, "prompt")
            return ids, added, prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise bad_request("this server accepts a single prompt per request", "prompt", "invalid_value")
        if isinstance(prompt, list):
            ids = self._check_ids(prompt, "prompt")
            if not self.config.token_id_prompts:
                raise self._id_refusal()
            return ids, 0, None
        raise bad_request("'prompt' must be a string or a list of token ids", "prompt", "invalid_type")

    async def _completions(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=True)
        refuse_foreign(body, "completions")
        sampling = parse_sampling(body, self.backend.vocab_size, None if self.config.vllm else MAX_BIAS)
        echo = bool_field(body, "echo", False)
        top = int_field(body, "logprobs", None, lo=0, hi=self.config.max_logprobs_completions)
        if echo and top is not None and not self.config.echo:
            raise bad_request("Setting 'echo' and 'logprobs' at the same time is not supported for this model.",
                              "echo", "unsupported_parameter")
        self._max_tokens(body, ("max_tokens",), 0, lo=0)  # validated before tokenizing
        prompt, added, prompt_text = await self._completion_prompt(body.get("prompt"))
        max_tokens = self._max_tokens(body, ("max_tokens",), len(prompt), lo=0)
        if max_tokens == 0 and not echo:
            raise bad_request("'max_tokens' must be at least 1 unless 'echo' is true", "max_tokens", "invalid_value")
        # vLLM runs one decoding step even for echo with max_tokens 0: it needs room for it
        self._check_length(len(prompt), max(max_tokens, 1) if self.config.vllm else max_tokens)
        sampling = replace(sampling, max_tokens=max_tokens, top_n=top)
        want_logprobs = top is not None and self.config.logprobs
        noise = self._reporting.noise(next(self._requests))
        ranked = await self._ranked(body, prompt, echo and want_logprobs, top, noise)
        if not (echo and want_logprobs and len(prompt) > 1):
            positions = []
        elif ranked is not None:
            positions = echo_positions(ranked, top)
        else:
            computed = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.backend.prompt_top_logprobs, prompt, top)
            positions = [self._reporting.position(token, lp, listed, noise)
                         for token, (lp, listed) in zip(prompt[1:], computed)]
        generated = await self._generate(prompt, sampling, noise)
        # vLLM runs one decoding step for echo with max_tokens 0, and bills it
        billed = 1 if self.config.vllm and max_tokens == 0 else len(generated.steps)

        def build() -> dict:
            echoed = "" if not echo else prompt_text if prompt_text is not None else self._names.text(prompt)
            choice = {"index": 0, "text": echoed + generated.text, "finish_reason": generated.finish_reason,
                      "logprobs": None}
            if want_logprobs:
                choice["logprobs"] = legacy_logprobs(
                    self._names, prompt if echo else [], added if echo else 0, positions, generated.steps)
            if self.config.vllm:
                choice["stop_reason"] = generated.stop_reason
                choice["token_ids"] = choice["prompt_token_ids"] = None  # vLLM's, with return_token_ids
                choice["prompt_logprobs"] = prompt_logprobs(self._names, ranked)
            return envelope("text_completion", self.config.name, choice, len(prompt), billed)

        return await self._respond(build, (len(prompt) if echo or ranked else 0) + len(generated.steps))

    async def _ranked(self, body: dict, prompt: list[int], echo_logprobs: bool,
                      top: int | None, noise: np.random.Generator | None) -> list[RankedPosition] | None:
        """vLLM mode: the prompt's ranked positions when the request asks for ``prompt_logprobs``
        (k of them) or for echoed log-probs (``top`` of them, as vLLM derives those from the
        prompt log-probs), as reported (the request's ``noise``, the precision); else ``None``.

        Raises:
            HttpError: 400 for a ``prompt_logprobs`` that is not an integer in
                [0, ``max_logprobs_completions``].
        """
        if not self.config.vllm:
            return None
        k = int_field(body, "prompt_logprobs", None, lo=0, hi=self.config.max_logprobs_completions)
        if k is None and echo_logprobs:
            k = top
        if k is None or not self.config.logprobs:
            return None
        ranked = await asyncio.get_running_loop().run_in_executor(
            self._executor, ranked_positions, self.backend, prompt, k)
        reported = []
        for p in ranked:
            logprob, listed = self._reporting.position(p.token, p.logprob, p.top, noise)
            reported.append(replace(p, logprob=logprob, top=listed))
        return reported

    async def _chat(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=True)
        refuse_foreign(body, "chat")
        sampling = parse_sampling(body, self.backend.vocab_size, None if self.config.vllm else MAX_BIAS)
        logprobs = bool_field(body, "logprobs", False)
        top = int_field(body, "top_logprobs", None, lo=0, hi=self.config.max_logprobs_chat)
        if top is not None and not logprobs:
            raise bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs", "invalid_value")
        names = ("max_completion_tokens", "max_tokens")
        self._max_tokens(body, names, 0, lo=1)  # validated before tokenizing
        prompt, _ = await self._encode(self._chat_prompt(chat_messages(body.get("messages"))), "messages")
        max_tokens = self._max_tokens(body, names, len(prompt), lo=1)
        self._check_length(len(prompt), max_tokens)
        sampling = replace(sampling, max_tokens=max_tokens, top_n=(top or 0) if logprobs else None)
        noise = self._reporting.noise(next(self._requests))
        ranked = await self._ranked(body, prompt, False, None, noise)
        generated = await self._generate(prompt, sampling, noise)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": generated.text},
            "finish_reason": generated.finish_reason,
            "logprobs": None,
        }
        if logprobs and self.config.logprobs:
            choice["logprobs"] = {"content": [chat_entry(self._names, s) for s in generated.steps]}
        if self.config.vllm:
            choice["stop_reason"] = generated.stop_reason
        response = envelope("chat.completion", self.config.name, choice, len(prompt), len(generated.steps))
        if self.config.vllm:
            response["prompt_logprobs"] = prompt_logprobs(self._names, ranked)
        return await self._respond(lambda: response, len(ranked or ()) + len(generated.steps))

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``/tokenize``: ids of ``prompt`` (or of ``messages``, templated as chat prompts
        are); ``add_special_tokens`` prepends BOS exactly when the server does (``text_bos``). Its
        default is vLLM's in vLLM mode (True for a prompt, False for messages), else False. A
        text longer than ``max_tokenize_chars`` gets 400 (``string_above_max_length``) untokenized."""
        body = await self._body(request, require_model=False)
        if "messages" in body:
            text = self._chat_prompt(chat_messages(body["messages"]))
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise bad_request("'prompt' must be a string (or give 'messages')", "prompt", "invalid_type")
        limit = self.config.max_tokenize_chars
        if len(text) > limit:  # refused before it is tokenized: time and memory grow with the text
            param = "messages" if "messages" in body else "prompt"
            raise bad_request(f"the {param} text is {len(text)} characters; /tokenize takes at most {limit} "
                              "(the server's max_tokenize_chars)", param, "string_above_max_length")
        # vLLM adds special tokens to a text prompt unless told not to (never to chat messages)
        special = bool_field(body, "add_special_tokens", self.config.vllm and "messages" not in body)
        strs = bool_field(body, "return_token_strs", False)
        ids = await self._sized(len(text), INLINE_CHARS, self.backend.encode, text)
        if special and self._bos is not None:
            ids = [self._bos, *ids]
        out = {"tokens": ids, "count": len(ids), "max_model_len": self.backend.context}
        if strs:
            out["token_strs"] = [self._names(i)[0] for i in ids]
        elif self.config.vllm:
            out["token_strs"] = None  # vLLM lists the field either way
        return await self._respond(lambda: out, len(ids))

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=False)
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise bad_request("'tokens' must be a list of token ids", "tokens", "invalid_type")
        ids = self._check_ids(tokens, "tokens") if tokens else []
        return await self._respond(lambda: {"prompt": self._names.text(ids)}, len(ids))

