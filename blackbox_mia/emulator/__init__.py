"""An OpenAI-compatible validation server backed by a local model (``bbmia serve``).

It answers ``/v1/completions`` and ``/v1/chat/completions`` from a :class:`LocalBackend`, so every
log-prob a black-box client recovers can be checked against the white-box value. It emulates the
provider behaviours that matter to the tracker (design notes §4):

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
  Chat messages are concatenated as is unless ``chat_template`` wraps them (real chat models
  wrap messages in a template, which changes the log-probs).
* token names: OpenAI's (``"bytes:\\xNN"`` for a token that is not valid UTF-8 on its own), or
  ``""`` with ``empty_partial_names`` (vLLM and OpenAI chat); chat ``bytes`` are always exact.
* ``max_tokens: 0`` means "prompt only" (echo), or "to the end of the context" with
  ``zero_max_tokens_unlimited`` (as some servers do).
* echoed prompt log-probs always ignore ``logit_bias`` (the bias only acts on sampling).
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
import contextlib
import hmac
import ipaddress
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
from aiohttp import web

from ..backends.api.wire import MAX_BIAS, MAX_BIAS_ENTRIES
from ..backends.local import LocalBackend, LocalConfig
from ..tokenizers import HFTokenCodec
from ..types import BlackboxMIAError

LOG = logging.getLogger(__name__)
LOGPROBS_MODES = ("raw", "processed")
MAX_TEMPERATURE = 2.0
MAX_STOP_SEQUENCES = 4  # OpenAI's cap on 'stop' entries
SEED_LIMIT = 2**63  # seeds are integers in [0, 2**63)
DEFAULT_MAX_TOKENS = 16  # OpenAI legacy completions default
FLOOR_LOGPROB = -9999.0  # OpenAI's stand-in for -inf (JSON has no infinities)
MAX_BODY_BYTES = 2**20  # default request-body limit (1 MiB)
CONTENT_FIELD = "{content}"  # where a chat template puts the concatenated message contents
DEFAULT_CHAT_TEMPLATE = "<|user|>\n" + CONTENT_FIELD + "\n<|assistant|>\n"
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
INTERNAL_ERROR = "internal server error"  # the body of every emulated or real 500
# Sampling options the server reads but only supports at their neutral value: (neutral, lo, hi).
NEUTRAL_ONLY = {"top_p": (1.0, 0.0, 1.0), "presence_penalty": (0.0, -2.0, 2.0), "frequency_penalty": (0.0, -2.0, 2.0)}
TOKENIZE_WORKERS = 2  # threads of the tokenization pool (separate from the single model thread)
INLINE_CHARS = 4096  # texts (and JSON bodies) up to this many characters are handled on the loop
INLINE_TOKENS = 1024  # token sequences up to this long are decoded / rendered on the loop


@dataclass(frozen=True)
class ServerConfig:
    """Configuration of :class:`ValidationServer`.

    Attributes:
        model: local model directory or hub name (loaded with :class:`LocalBackend`).
        host: interface to bind; 127.0.0.1 by default (binding elsewhere exposes the model).
        port: TCP port; 0 picks a free one.
        api_key: bearer token every request must carry (401 otherwise); ``None`` = open.
        served_name: model name in ``/v1/models`` and requests; ``None`` = ``model``.
        logprobs_mode: ``"raw"`` (pre-bias, reported log-probs ignore logit_bias) or
            ``"processed"`` (post-bias: log_softmax(logits + bias)).
        echo: accept ``echo`` together with ``logprobs`` (prompt log-probs); False gives 400.
        logprobs: return log-probs at all; False answers ``logprobs: null``.
        max_logprobs_completions: largest ``logprobs`` (top-n) on /v1/completions.
        max_logprobs_chat: largest ``top_logprobs`` on /v1/chat/completions.
        token_id_prompts: accept completions prompts given as token ids; False refuses them
            with ``token_id_refusal_status``.
        token_id_refusal_status: HTTP status (400..599) of that refusal. 4xx answers an
            ``unsupported_parameter`` error; 5xx emulates a server failing deterministically on
            id prompts: a ``server_error`` whose body is the same every time.
        empty_partial_names: name a token whose bytes are not valid UTF-8 on their own (part of
            a multi-byte character) ``""`` in completions ``tokens`` / ``top_logprobs`` keys
            and chat ``token`` fields, as vLLM and OpenAI chat do; chat ``bytes`` stay exact.
            Several such tokens in one completions top list collide on the key ``""``: the
            HIGHEST value is kept (the first written, the list being built best-first), so the
            value read under ``""`` bounds every partial token of that list from above.
            False (default): OpenAI's ``"bytes:\\xNN"`` names.
        zero_max_tokens_unlimited: ``max_tokens: 0`` (both endpoints) means "generate to the end
            of the context" instead of "prompt only" (completions with echo; 400 otherwise).
        chat_template: text a chat prompt is wrapped in, with ``{content}`` replaced by the
            concatenated message contents (e.g. :data:`DEFAULT_CHAT_TEMPLATE`); chat log-probs
            are then conditional on the template. ``None``: contents concatenated as is.
        text_bos: prepend the tokenizer's BOS token to TEXT prompts (completions strings and
            chat prompts, as vLLM / llama.cpp for Llama-family models); ``usage.prompt_tokens``
            counts it. False: no BOS. Token-id prompts are never changed.
        max_body_bytes: largest request body accepted (bytes); a bigger one gets 413.
        batch_window_ms: how long the first queued next-token request waits for others before
            the forward pass (ms); 0 disables micro-batching (one forward pass per request).
        max_batch: most next-token requests (rows) per forward pass.
        device, dtype: passed to :class:`LocalConfig` when the server loads the model itself.

    Raises:
        BlackboxMIAError: an invalid value (mode, window, top-n caps, refusal status, template
            without ``{content}``, body limit below 1 byte).
    """

    model: str
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str | None = field(default=None, repr=False)
    served_name: str | None = None
    logprobs_mode: str = "raw"
    echo: bool = True
    logprobs: bool = True
    max_logprobs_completions: int = 5
    max_logprobs_chat: int = 20
    token_id_prompts: bool = True
    token_id_refusal_status: int = 400
    empty_partial_names: bool = False
    zero_max_tokens_unlimited: bool = False
    chat_template: str | None = None
    text_bos: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    batch_window_ms: float = 2.0
    max_batch: int = 64
    device: str | None = None
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise BlackboxMIAError(f"logprobs_mode must be raw or processed, got {self.logprobs_mode!r}")
        if self.batch_window_ms < 0 or self.max_batch < 1:
            raise BlackboxMIAError("batch_window_ms must be >= 0 and max_batch >= 1")
        if self.max_logprobs_completions < 0 or self.max_logprobs_chat < 0:
            raise BlackboxMIAError("max_logprobs_completions and max_logprobs_chat must be >= 0")
        if not 400 <= self.token_id_refusal_status <= 599:
            raise BlackboxMIAError(f"token_id_refusal_status must be an HTTP error status in 400..599, "
                                   f"got {self.token_id_refusal_status}")
        if self.chat_template is not None and CONTENT_FIELD not in self.chat_template:
            raise BlackboxMIAError(f"chat_template must contain {CONTENT_FIELD!r}")
        if self.max_body_bytes < 1:
            raise BlackboxMIAError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")

    @property
    def name(self) -> str:
        """The model name clients must send."""
        return self.served_name or self.model


def load_chat_template(spec: str) -> str:
    """The chat template ``spec`` names: ``"default"`` is :data:`DEFAULT_CHAT_TEMPLATE`, anything
    else a UTF-8 file holding the template (with ``{content}``).

    Raises:
        BlackboxMIAError: the file cannot be read, or it has no ``{content}``.
    """
    if spec == "default":
        return DEFAULT_CHAT_TEMPLATE
    try:
        with open(spec, encoding="utf-8") as f:
            template = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read chat template {spec!r}: {exc}") from exc
    if CONTENT_FIELD not in template:
        raise BlackboxMIAError(f"chat template {spec!r} has no {CONTENT_FIELD!r}")
    return template


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts local connections (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- errors -----------------------------------------------------------------------------------


class ApiError(Exception):
    """A request the server refuses, rendered as OpenAI's error JSON.

    Attributes:
        status: HTTP status code.
        message, param, code, error_type: the fields of ``{"error": {...}}``.
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.error_type = error_type

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}
        return web.json_response(body, status=self.status)


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


def _too_large(size: int | None, limit: int) -> ApiError:
    given = f"{size} bytes" if size is not None else "more"
    return ApiError(413, f"Request body too large: {given}, the limit is {limit} bytes.", None, "request_too_large")


# -- request parsing --------------------------------------------------------------------------


def _int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    """``body[name]`` as an integer in [lo, hi], ``default`` when absent or null.

    Raises:
        ApiError: 400 (param ``name``) when it is not an integer (booleans and floats are not) or
            out of range.
    """
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{name}' must be an integer, got {json.dumps(value)}", name, "invalid_type")
    if lo is not None and value < lo:
        raise _bad(f"Invalid value for '{name}': must be greater than or equal to {lo}.", name, "invalid_value")
    if hi is not None and value > hi:
        raise _bad(f"Invalid value for '{name}': must be less than or equal to {hi}.", name, "invalid_value")
    return value


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    """``body[name]`` as a number in [lo, hi], ``default`` when absent or null.

    Raises:
        ApiError: 400 (param ``name``) when it is not a number (booleans are not; NaN is out of
            every range) or out of range.
    """
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise _bad(f"Invalid value for '{name}': must be a number in [{lo:g}, {hi:g}].", name, "invalid_value")
    return float(value)


def _bool(body: dict, name: str, default: bool) -> bool:
    """``body[name]`` as a boolean, ``default`` when absent or null.

    Raises:
        ApiError: 400 (param ``name``) when it is not a JSON boolean.
    """
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"'{name}' must be a boolean, got {json.dumps(value)}", name, "invalid_type")
    return value


def _temperature(body: dict) -> float:
    """The sampling temperature in [0, 2]; 1 when absent. Raises ApiError (400) otherwise."""
    return _number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE)


def parse_logit_bias(raw, vocab_size: int) -> dict[int, float]:
    """Validate ``logit_bias`` as OpenAI does: integer-id keys in the vocabulary, values in
    [-100, 100], at most 300 entries.

    Raises:
        ApiError: 400 on any violation.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _bad("'logit_bias' must be an object mapping token ids to biases", "logit_bias", "invalid_type")
    if len(raw) > MAX_BIAS_ENTRIES:
        raise _bad(f"Invalid 'logit_bias': at most {MAX_BIAS_ENTRIES} entries, got {len(raw)}.",
                   "logit_bias", "invalid_value")
    bias = {}
    for key, value in raw.items():
        try:
            token = int(key)
        except ValueError:
            raise _bad(f"Invalid key in 'logit_bias': {key!r} is not an integer token id.",
                       "logit_bias", "invalid_value") from None
        if not 0 <= token < vocab_size:
            raise _bad(f"Invalid key in 'logit_bias': token id {token} is outside the vocabulary "
                       f"(0..{vocab_size - 1}).", "logit_bias", "invalid_value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -MAX_BIAS <= value <= MAX_BIAS:
            raise _bad(f"Invalid value for 'logit_bias' key {key}: must be a number in "
                       f"[{-MAX_BIAS:g}, {MAX_BIAS:g}].", "logit_bias", "invalid_value")
        bias[token] = float(value)
    return bias


def parse_stop(raw) -> tuple[str, ...]:
    """Validate ``stop``: null, a non-empty string, or a list of at most 4 non-empty strings.

    Raises:
        ApiError: 400 (param ``stop``) otherwise.
    """
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or len(items) > MAX_STOP_SEQUENCES or \
            not all(isinstance(s, str) and s for s in items):
        raise _bad(f"'stop' must be a non-empty string or a list of at most {MAX_STOP_SEQUENCES} non-empty "
                   "strings", "stop", "invalid_value")
    return tuple(items)


def chat_prompt(messages, template: str | None = None) -> str:
    """The text a chat request is continued from: every message's content concatenated as is,
    then put in ``template`` at ``{content}`` when one is given.

    Roles are checked but otherwise ignored. Content may be a string or a list of
    ``{"type": "text", "text": ...}`` parts.

    Raises:
        ApiError: 400 (param ``messages``) unless ``messages`` is a non-empty list of objects, each
            with a known ``role`` and text content.
    """
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array", "messages", "invalid_type")
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(f"'messages[{i}]' must be an object", "messages", "invalid_type")
        if message.get("role") not in CHAT_ROLES:
            raise _bad(f"Invalid value for 'messages[{i}].role': must be one of {', '.join(CHAT_ROLES)}.",
                       "messages", "invalid_value")
        content = message.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise _bad(f"'messages[{i}].content' parts must all be {{\"type\": \"text\", \"text\": string}}",
                           "messages", "invalid_value")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise _bad(f"'messages[{i}].content' must be a string or a list of text parts", "messages",
                       "invalid_type")
        parts.append(content)
    text = "".join(parts)
    return template.replace(CONTENT_FIELD, text) if template is not None else text


def is_partial(token_bytes: bytes) -> bool:
    """Whether a token's bytes are not valid UTF-8 on their own (part of a multi-byte character)."""
    try:
        token_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


# -- sampling and reported log-probs (runs on the worker thread) -------------------------------


@dataclass(frozen=True)
class Sampling:
    """How one request picks tokens and what it reports.

    Attributes:
        max_tokens: tokens to generate.
        temperature: 0 = greedy argmax of logits + bias; > 0 samples softmax((logits + bias)/T).
        top_n: top-n log-probs to report per position; ``None`` = no log-probs requested.
        bias: logit_bias as {token id: bias in nats}.
        seed: seed of the sampling generator (temperature > 0); ``None`` = fresh entropy.
        stop: stop sequences: generation ends once the generated text contains one, and the
            text is cut before it.
    """

    max_tokens: int
    temperature: float
    top_n: int | None
    bias: dict[int, float]
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One generated position: sampled token, its reported log-prob and the reported top-n
    (ids and log-probs in nats, best first), all under the configured logprobs mode."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Generation:
    """What one request generated: every step (the stop token included), the text (without the
    EOS token, cut before a stop sequence) and OpenAI's ``finish_reason`` (``"stop"`` after EOS or
    a stop sequence, else ``"length"``)."""

    steps: list[Step]
    text: str
    finish_reason: str


def top_n(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` largest entries as (id, value), best first (equal values in id order)."""
    if n <= 0:
        return []
    n = min(n, len(logprobs))
    idx = np.argpartition(-logprobs, n - 1)[:n]
    idx = idx[np.lexsort((idx, -logprobs[idx]))]
    return [(int(i), float(logprobs[i])) for i in idx]


def choose(row: np.ndarray, sampling: Sampling, mode: str, rng: np.random.Generator) -> Step:
    """Pick the next token from raw log-probs ``row`` (V,) and the values reported for it.

    The sampling distribution is log_softmax(row + bias) (row differs from the logits by a
    constant). Reported values use ``row`` in raw mode, log_softmax(row + bias) in processed mode.
    """
    biased = row.astype(np.float64)
    if sampling.bias:
        biased[list(sampling.bias)] += list(sampling.bias.values())
    if sampling.temperature == 0:
        token = int(np.argmax(biased))
    else:
        scaled = biased / sampling.temperature
        p = np.exp(scaled - scaled.max())
        cdf = np.cumsum(p)
        token = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(row) - 1)
    if mode == "raw" or not sampling.bias:
        reported = row
    else:
        reported = biased - (biased.max() + np.log(np.exp(biased - biased.max()).sum()))
    top = top_n(reported, sampling.top_n or 0)
    return Step(token, float(reported[token]), tuple(top))


# -- the micro-batcher ------------------------------------------------------------------------


class MicroBatcher:
    """Runs next-token requests in batched forward passes on one worker thread.

    Args:
        backend: the model.
        executor: the single worker thread every model call uses.
        window_ms: how long the first queued request waits for more (ms); 0 = no batching.
        max_batch: most requests per forward pass.

    Attributes:
        forward_passes: forward passes run so far.
        requests: next-token requests served so far.
        largest_batch: the most requests one forward pass has served.
    """

    def __init__(self, backend: LocalBackend, executor: ThreadPoolExecutor, window_ms: float, max_batch: int):
        self.backend = backend
        self.executor = executor
        self.window_s = window_ms / 1000
        self.max_batch = max_batch if window_ms > 0 else 1
        self.forward_passes = self.requests = self.largest_batch = 0
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="bbmia-microbatcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._queue is not None and not self._queue.empty():
            _, _, future = self._queue.get_nowait()
            if not future.done():
                future.set_exception(ApiError(503, "the server is shutting down", code="server_shutdown",
                                              error_type="server_error"))

    async def submit(self, prefix: Sequence[int], then: Callable[[np.ndarray], object]):
        """``then(log p(· | prefix))`` computed on the worker thread, the row being float32 (V,)."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((list(prefix), then, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            if self.max_batch > 1 and self._queue.qsize() + 1 < self.max_batch:
                await asyncio.sleep(self.window_s)
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            batch = [job for job in batch if not job[2].done()]  # drop cancelled clients
            if not batch:
                continue
            try:
                results = await loop.run_in_executor(self.executor, self._compute, batch)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting request
                results = [exc] * len(batch)
            self.forward_passes += 1
            self.requests += len(batch)
            self.largest_batch = max(self.largest_batch, len(batch))
            for (_, _, future), result in zip(batch, results):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _compute(self, batch) -> list:
        rows = self.backend.next_token_logprobs([prefix for prefix, _, _ in batch])
        out = []
        for row, (_, then, _) in zip(rows, batch):
            try:
                out.append(then(row))
            except Exception as exc:  # noqa: BLE001 - one bad request must not fail the batch
                out.append(exc)
        return out


# -- the server -------------------------------------------------------------------------------


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
        self._codec: HFTokenCodec | None = None
        self._bos: int | None = None
        self._names: dict[int, tuple[str, bytes]] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> str:
        """Load the model (when not given), bind, and return the base URL ``http://host:port/v1``.

        Raises:
            BlackboxMIAError: the model cannot be loaded, or ``text_bos`` is set for a tokenizer
                without a BOS token.
            OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bbmia-model")
        self._pool = ThreadPoolExecutor(max_workers=TOKENIZE_WORKERS, thread_name_prefix="bbmia-tokenize")
        if self.backend is None:
            local = LocalConfig(self.config.model, device=self.config.device, dtype=self.config.dtype, vocab_stats=False)
            self.backend = await loop.run_in_executor(self._executor, LocalBackend, local)
        if self.config.text_bos:
            self._bos = self.backend.tokenizer.bos_token_id
            if self._bos is None:
                raise BlackboxMIAError(f"text_bos is set but the tokenizer of {self.config.model!r} has no BOS token")
        self._codec = HFTokenCodec(self.backend.tokenizer, name=self.config.name)
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
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{port}/v1"
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
        except ApiError as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = f"Invalid URL ({request.method} {request.path})" if exc.status in (404, 405) else exc.reason
            return ApiError(exc.status, message, code=None).response()
        except Exception:  # noqa: BLE001 - a server bug must still answer JSON
            LOG.exception("internal error on %s %s", request.method, request.path)
            return ApiError(500, INTERNAL_ERROR, error_type="server_error").response()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        key = self.config.api_key
        if key is not None:
            header = request.headers.get("Authorization", "")
            given = header[7:] if header.startswith("Bearer ") else ""
            if not hmac.compare_digest(given.encode(), key.encode()):
                raise ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
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
            ApiError: 413 when the body exceeds ``max_body_bytes``; 400 when it is not a JSON
                object, when ``model`` is missing (``require_model``) or not a string; 404 when
                ``model`` names another model.
        """
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(None, limit) from None
        try:
            body = await self._sized(len(raw), INLINE_CHARS, json.loads, raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _bad("We could not parse the JSON body of your request.", code="invalid_json") from None
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object", code="invalid_json")
        model = body.get("model")
        if model is None:
            if require_model:
                raise _bad("you must provide a model parameter", "model")
        elif not isinstance(model, str):
            raise _bad(f"'model' must be a string, got {json.dumps(model)}", "model", "invalid_type")
        elif model != self.config.name:
            raise ApiError(404, f"The model `{model}` does not exist.", "model", "model_not_found")
        return body

    def _token(self, token_id: int) -> tuple[str, bytes]:
        """Name and bytes of a token: OpenAI's name (``""`` for a partial character with
        ``empty_partial_names``); ids beyond the tokenizer read ``token_id:N`` with no bytes."""
        entry = self._names.get(token_id)
        if entry is None:
            try:
                raw = self._codec.token_bytes(token_id)
                name = "" if self.config.empty_partial_names and is_partial(raw) else self._codec.token_string(token_id)
                entry = (name, raw)
            except (KeyError, IndexError, ValueError):
                entry = (f"token_id:{token_id}", b"")
            self._names[token_id] = entry
        return entry

    def _text(self, ids: Sequence[int]) -> str:
        return b"".join(self._token(i)[1] for i in ids).decode("utf-8", errors="replace")

    async def _encode(self, text: str, param: str) -> tuple[list[int], int]:
        """Token ids of a text prompt as the model sees it (BOS first with ``text_bos``) and the
        number of tokens the server added (0 or 1). Long texts are tokenized off the event loop.

        Raises:
            ApiError: 400 (param ``param``) when the text has no tokens.
        """
        ids = await self._sized(len(text), INLINE_CHARS, self.backend.encode, text)
        if not ids:
            raise _bad(f"the {param} text has no tokens", param, "invalid_value")
        if self._bos is None:
            return ids, 0
        return [self._bos, *ids], 1

    def _check_ids(self, ids: list, param: str) -> list[int]:
        vocab = self.backend.vocab_size
        if not ids or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab for i in ids):
            raise _bad(f"'{param}' must be a non-empty list of token ids in 0..{vocab - 1}", param, "invalid_value")
        return ids

    def _check_length(self, n_prompt: int, max_tokens: int) -> None:
        context = self.backend.context
        if n_prompt + max_tokens > context:
            raise _bad(f"This model's maximum context length is {context} tokens. However, you requested "
                       f"{n_prompt + max_tokens} tokens ({n_prompt} in the prompt, {max_tokens} in the "
                       "completion).", "max_tokens", "context_length_exceeded")

    def _max_tokens(self, body: dict, names: tuple[str, ...], n_prompt: int, lo: int) -> int:
        """Tokens to generate: the first of ``names`` given (at least ``lo``; 0 = to the context end
        with ``zero_max_tokens_unlimited``), else min(16, room left), at least ``lo``.

        Raises:
            ApiError: 400 when the value is not an integer or below ``lo``.
        """
        unlimited = self.config.zero_max_tokens_unlimited
        for name in names:
            if body.get(name) is not None:
                value = _int(body, name, None, lo=0 if unlimited else lo)
                if value == 0 and unlimited:
                    return max(lo, self.backend.context - n_prompt)
                return value
        return max(lo, min(DEFAULT_MAX_TOKENS, self.backend.context - n_prompt))

    def _common(self, body: dict) -> Sampling:
        """The sampling options both endpoints share (``max_tokens`` and ``top_n`` left at 0 and
        None, for the caller to set).

        Raises:
            ApiError: 400 for a bad or unsupported ``stream``, ``n``, ``best_of``, ``seed``,
                ``top_p``, ``presence_penalty``, ``frequency_penalty``, ``temperature``,
                ``logit_bias`` or ``stop``.
        """
        if _bool(body, "stream", False):
            raise _bad("stream is not supported by this validation server", "stream", "unsupported_parameter")
        _int(body, "n", 1, lo=1, hi=1)
        _int(body, "best_of", 1, lo=1, hi=1)
        seed = _int(body, "seed", None, lo=0, hi=SEED_LIMIT - 1)
        for name, (neutral, lo, hi) in NEUTRAL_ONLY.items():
            if _number(body, name, neutral, lo, hi) != neutral:
                raise _bad(f"'{name}' other than {neutral:g} is not supported by this validation server",
                           name, "unsupported_parameter")
        bias = parse_logit_bias(body.get("logit_bias"), self.backend.vocab_size)
        return Sampling(0, _temperature(body), None, bias, seed, parse_stop(body.get("stop")))

    async def _generate(self, prompt: Sequence[int], sampling: Sampling) -> Generation:
        """Sample up to ``max_tokens`` tokens, bias applied at every step; stop after EOS or once
        the text contains a stop sequence."""
        rng = np.random.default_rng(sampling.seed)
        then = partial(choose, sampling=sampling, mode=self.config.logprobs_mode, rng=rng)
        eos = self.backend.tokenizer.eos_token_id
        longest = max(map(len, sampling.stop), default=0)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        ids, steps, text = list(prompt), [], ""
        for _ in range(sampling.max_tokens):
            step = await self._batcher.submit(ids, then)
            steps.append(step)
            ids.append(step.token)
            if step.token == eos:  # listed in logprobs, not part of the text
                return Generation(steps, text + decoder.decode(b"", final=True), "stop")
            start = max(0, len(text) - longest)
            text += decoder.decode(self._token(step.token)[1])
            hits = [i for i in (text.find(s, start) for s in sampling.stop) if i >= 0]
            if hits:
                return Generation(steps, text[: min(hits)], "stop")
        return Generation(steps, text + decoder.decode(b"", final=True), "length")

    def _envelope(self, kind: str, choice: dict, n_prompt: int, n_completion: int) -> dict:
        prefix = "cmpl" if kind == "text_completion" else "chatcmpl"
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.config.name,
            "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                      "total_tokens": n_prompt + n_completion},
        }

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

    def _id_refusal(self) -> ApiError:
        status = self.config.token_id_refusal_status
        if status >= 500:  # a server failing on id prompts: the same body every time
            return ApiError(status, INTERNAL_ERROR, error_type="server_error")
        return ApiError(status, "prompts given as token ids are not supported by this server", "prompt",
                        "unsupported_parameter")

    async def _completion_prompt(self, prompt) -> tuple[list[int], int, str | None]:
        """(ids the model sees, tokens the server added in front, the prompt text or None for
        token ids).

        Raises:
            ApiError: 400 for a missing, empty, batched or ill-typed prompt or bad token ids;
                ``token_id_refusal_status`` for token ids when ``token_id_prompts`` is off.
        """
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one prompt
        if isinstance(prompt, str):
            ids, added = await self._encode(prompt, "prompt")
            return ids, added, prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise _bad("this server accepts a single prompt per request", "prompt", "invalid_value")
        if isinstance(prompt, list):
            ids = self._check_ids(prompt, "prompt")
            if not self.config.token_id_prompts:
                raise self._id_refusal()
            return ids, 0, None
        raise _bad("'prompt' must be a string or a list of token ids", "prompt", "invalid_type")

    async def _completions(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=True)
        sampling = self._common(body)
        echo = _bool(body, "echo", False)
        top = _int(body, "logprobs", None, lo=0, hi=self.config.max_logprobs_completions)
        if echo and top is not None and not self.config.echo:
            raise _bad("Setting 'echo' and 'logprobs' at the same time is not supported for this model.",
                       "echo", "unsupported_parameter")
        self._max_tokens(body, ("max_tokens",), 0, lo=0)  # validated before tokenizing
        prompt, added, prompt_text = await self._completion_prompt(body.get("prompt"))
        max_tokens = self._max_tokens(body, ("max_tokens",), len(prompt), lo=0)
        if max_tokens == 0 and not echo:
            raise _bad("'max_tokens' must be at least 1 unless 'echo' is true", "max_tokens", "invalid_value")
        self._check_length(len(prompt), max_tokens)
        sampling = replace(sampling, max_tokens=max_tokens, top_n=top)
        want_logprobs = top is not None and self.config.logprobs
        if echo and want_logprobs and len(prompt) > 1:
            positions = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.backend.prompt_top_logprobs, prompt, top)
        else:
            positions = []
        generated = await self._generate(prompt, sampling)

        def build() -> dict:
            echoed = "" if not echo else prompt_text if prompt_text is not None else self._text(prompt)
            choice = {"index": 0, "text": echoed + generated.text, "finish_reason": generated.finish_reason,
                      "logprobs": None}
            if want_logprobs:
                choice["logprobs"] = self._legacy_logprobs(
                    prompt if echo else [], added if echo else 0, positions, generated.steps)
            return self._envelope("text_completion", choice, len(prompt), len(generated.steps))

        return await self._respond(build, (len(prompt) if echo else 0) + len(generated.steps))

    def _legacy_logprobs(self, echoed: list[int], added: int, positions: list, steps: list[Step]) -> dict:
        """OpenAI legacy ``logprobs``: tokens, token_logprobs, top_logprobs, text_offset.

        The first ``added`` echoed tokens (a BOS the server prepended) are listed but take no room
        in the text (offset width 0). In a top list, tokens sharing a name (``""`` for partial
        characters with ``empty_partial_names``) keep the highest value.
        """
        rows: list[tuple[int, float | None, tuple | None]] = []
        if echoed:
            rows.append((echoed[0], None, None))
            rows += [(tok, lp, top) for tok, (lp, top) in zip(echoed[1:], positions)]
        rows += [(s.token, s.logprob, s.top) for s in steps]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tokens, token_logprobs, top_logprobs, offsets, offset = [], [], [], [], 0
        for j, (tok, lp, top) in enumerate(rows):
            name, raw = self._token(tok)
            tokens.append(name)
            offsets.append(offset)
            if j >= added:
                offset += len(decoder.decode(raw))
            token_logprobs.append(None if lp is None else _finite(lp))
            if top is None:
                top_logprobs.append(None)
                continue
            listed: dict[str, float] = {}
            for i, v in top:  # best first: setdefault keeps the highest of colliding names
                listed.setdefault(self._token(i)[0], _finite(v))
            listed.setdefault(name, _finite(lp))  # the sampled/actual token, when not in the top n
            top_logprobs.append(listed)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
                "text_offset": offsets}

    async def _chat(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=True)
        sampling = self._common(body)
        logprobs = _bool(body, "logprobs", False)
        top = _int(body, "top_logprobs", None, lo=0, hi=self.config.max_logprobs_chat)
        if top is not None and not logprobs:
            raise _bad("'top_logprobs' requires 'logprobs' to be true", "top_logprobs", "invalid_value")
        names = ("max_completion_tokens", "max_tokens")
        self._max_tokens(body, names, 0, lo=1)  # validated before tokenizing
        prompt, _ = await self._encode(chat_prompt(body.get("messages"), self.config.chat_template), "messages")
        max_tokens = self._max_tokens(body, names, len(prompt), lo=1)
        self._check_length(len(prompt), max_tokens)
        sampling = replace(sampling, max_tokens=max_tokens, top_n=(top or 0) if logprobs else None)
        generated = await self._generate(prompt, sampling)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": generated.text},
            "finish_reason": generated.finish_reason,
            "logprobs": None,
        }
        if logprobs and self.config.logprobs:
            choice["logprobs"] = {"content": [self._chat_entry(s) for s in generated.steps]}
        return web.json_response(self._envelope("chat.completion", choice, len(prompt), len(generated.steps)))

    def _chat_entry(self, step: Step) -> dict:
        def item(token_id: int, lp: float) -> dict:
            name, raw = self._token(token_id)
            return {"token": name, "logprob": _finite(lp), "bytes": list(raw)}

        return {**item(step.token, step.logprob), "top_logprobs": [item(i, v) for i, v in step.top]}

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``/tokenize``: ids of ``prompt`` (or of ``messages``, templated as chat prompts
        are); ``add_special_tokens`` prepends BOS exactly when the server does (``text_bos``)."""
        body = await self._body(request, require_model=False)
        if "messages" in body:
            text = chat_prompt(body["messages"], self.config.chat_template)
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise _bad("'prompt' must be a string (or give 'messages')", "prompt", "invalid_type")
        special = _bool(body, "add_special_tokens", False)
        strs = _bool(body, "return_token_strs", False)
        ids = await self._sized(len(text), INLINE_CHARS, self.backend.encode, text)
        if special and self._bos is not None:
            ids = [self._bos, *ids]
        out = {"tokens": ids, "count": len(ids), "max_model_len": self.backend.context}
        if strs:
            out["token_strs"] = [self._token(i)[0] for i in ids]
        return await self._respond(lambda: out, len(ids))

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = await self._body(request, require_model=False)
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise _bad("'tokens' must be a list of token ids", "tokens", "invalid_type")
        ids = self._check_ids(tokens, "tokens") if tokens else []
        return await self._respond(lambda: {"prompt": self._text(ids)}, len(ids))


def _finite(value: float) -> float:
    """A JSON-safe log-prob: -inf (and NaN) become OpenAI's -9999.0."""
    return value if np.isfinite(value) else FLOOR_LOGPROB


@contextlib.contextmanager
def run_in_background(service, thread_name: str) -> Iterator:
    """Run an asyncio ``service`` (with coroutine methods ``start()`` and ``stop()``) in a daemon
    thread with its own event loop.

    Yields what ``start()`` returned, and stops the service (then the loop) on exit, also when
    ``start()`` failed.

    Raises:
        Exception: whatever ``start()`` raised.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=thread_name, daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(service.start(), loop).result()
    finally:
        try:
            asyncio.run_coroutine_threadsafe(service.stop(), loop).result(timeout=60)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=60)
            if not thread.is_alive():
                loop.close()


@contextlib.contextmanager
def serve_in_background(config: ServerConfig, backend: LocalBackend | None = None) -> Iterator[str]:
    """Run a :class:`ValidationServer` in a daemon thread with its own event loop.

    Yields the base URL (``http://127.0.0.1:PORT/v1``) once the server accepts connections, and
    stops it cleanly on exit.

    Args:
        config: the server configuration (``port=0`` picks a free port).
        backend: an already loaded model to serve, else ``config.model`` is loaded.

    Raises:
        BlackboxMIAError, OSError: as :meth:`ValidationServer.start`.
    """
    with run_in_background(ValidationServer(config, backend), "bbmia-serve") as url:
        yield url
