"""Completions vs chat: what each endpoint kind can send, how its request body is built and
checked, where it goes, and how its answer is read.

One :class:`Dialect` per endpoint kind (:data:`DIALECTS`), chosen once from the configured
kind (:func:`dialect_named`); nothing else branches on the kind. Request bodies are checked
before anything is sent: a bad argument is an :class:`~.faults.ApiError` with fault
``"final"``.
"""

from __future__ import annotations

import numbers
import operator
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from ...types import BlackboxMIAError
from .answers import read_chat, read_completion
from .faults import ApiError
from .wire import MAX_BIAS, MAX_BIAS_ENTRIES

BYTES_PER_TOKEN = 4  # rough size of a token, to estimate text prompts for the tokens-per-minute limit
CLIENT_FIELDS = frozenset({"model", "stream", "prompt", "messages"})  # body fields extras may not set


class Dialect(ABC):
    """One endpoint kind of an OpenAI-compatible API (stateless; use the :data:`DIALECTS`).

    Attributes:
        name: ``"completions"`` or ``"chat"``: the configured kind, and part of every cache key.
        prompt_field: the body field that holds the prompt (``"prompt"`` or ``"messages"``).
        token_id_prompts: prompts may be sent as token-id lists.
        echo: the endpoint can return the prompt's log-probs (``echo``).
        condition: ``None`` when log-probs are the text's own, else what they are conditional on
            (``"chat-template"``: the server wraps every prompt in its chat template).
        notes: facts every user of this kind's values should know.
        reasons: capability → why this kind cannot have it.
    """

    name: ClassVar[str]
    prompt_field: ClassVar[str]
    token_id_prompts: ClassVar[bool]
    echo: ClassVar[bool]
    condition: ClassVar[str | None] = None
    notes: ClassVar[tuple[str, ...]] = ()
    reasons: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @abstractmethod
    def payload(
        self,
        prompt: list[int] | str,
        *,
        max_tokens: int,
        temperature: float,
        top_n: int | None,
        bias: Mapping[int, float] | None = None,
        echo: bool = False,
        extra: dict | None = None,
    ) -> dict:
        """The checked request body (without ``model``).

        Args:
            prompt: token ids (where :attr:`token_id_prompts`) or text.
            max_tokens: tokens to generate.
            temperature: sampling temperature (0: greedy).
            top_n: alternatives per token with their log-probs (0: the chosen token's only);
                ``None``: no log-probs.
            bias: token id → logit bias in [-MAX_BIAS, MAX_BIAS], at most MAX_BIAS_ENTRIES.
            echo: return the prompt's log-probs too (only where :attr:`echo`).
            extra: further body fields (``seed``, ``stop``, ...).

        Raises:
            ApiError: (fault ``"final"``) an invalid argument.
        """

    @abstractmethod
    def read(self, raw: dict, payload: dict) -> dict:
        """The validated, normalised answer to ``payload`` (see :meth:`ApiClient.complete`).

        Raises:
            Malformed: the answer fails validation.
        """

    @abstractmethod
    def resource(self, sdk):
        """The :class:`openai.AsyncOpenAI` resource this kind's requests go to."""


class Completions(Dialect):
    """The legacy ``/v1/completions``: token-id or text prompts, echo, ``logprobs: n``."""

    name = "completions"
    prompt_field = "prompt"
    token_id_prompts = True
    echo = True

    def payload(self, prompt, *, max_tokens, temperature, top_n, bias=None, echo=False, extra=None) -> dict:
        body: dict = {"prompt": check_prompt(prompt), "max_tokens": check_int(max_tokens, "max_tokens", 0)}
        body["temperature"] = float(temperature)
        if top_n is not None:
            body["logprobs"] = check_int(top_n, "logprobs", 0)
        if bias:
            body["logit_bias"] = check_logit_bias(bias)
        if echo:
            body["echo"] = True
        return with_extra(body, extra)

    def read(self, raw: dict, payload: dict) -> dict:
        return read_completion(raw, payload)

    def resource(self, sdk):
        return sdk.completions


class Chat(Dialect):
    """``/v1/chat/completions`` with one user message: text only, no echo, values conditional
    on the server's chat template."""

    name = "chat"
    prompt_field = "messages"
    token_id_prompts = False
    echo = False
    condition = "chat-template"
    notes = (
        (
            "chat endpoint: the server wraps every prefix in its chat template, so values are log-probs "
            "conditional on that template, not the text's own log-probs"
        ),
    )
    reasons = MappingProxyType({
        "prompt": "echo (prompt log-probs) exists only on /v1/completions",
        "token_id_prompts": "chat messages are text",
    })

    def payload(self, prompt, *, max_tokens, temperature, top_n, bias=None, echo=False, extra=None) -> dict:
        if not isinstance(prompt, str):
            raise ApiError(None, f"chat content must be a string, got {type(prompt).__name__}")
        if echo:
            raise ApiError(None, self.reasons["prompt"])
        body: dict = {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": check_int(max_tokens, "max_tokens", 1),
            "temperature": float(temperature),
        }
        if top_n is not None:
            body["logprobs"] = True
            body["top_logprobs"] = check_int(top_n, "top_logprobs", 0)
        if bias:
            body["logit_bias"] = check_logit_bias(bias)
        return with_extra(body, extra)

    def read(self, raw: dict, payload: dict) -> dict:
        return read_chat(raw, payload)

    def resource(self, sdk):
        return sdk.chat.completions


COMPLETIONS, CHAT = Completions(), Chat()
DIALECTS: Mapping[str, Dialect] = MappingProxyType({d.name: d for d in (COMPLETIONS, CHAT)})


def dialect_named(kind: str) -> Dialect:
    """The dialect of endpoint ``kind``.

    Raises:
        BlackboxMIAError: an unknown kind.
    """
    if kind not in DIALECTS:
        raise BlackboxMIAError(f"unknown endpoint {kind!r}: choose {' or '.join(DIALECTS)}")
    return DIALECTS[kind]


# -- request checks ----------------------------------------------------------------------------


def check_logit_bias(bias: Mapping[int, float]) -> dict[str, float]:
    """The ``logit_bias`` body field: token-id strings → bias (ints where integral).

    Raises:
        ApiError: (fault ``"final"``) more than :data:`MAX_BIAS_ENTRIES` entries, a key that is
            not a non-negative token id, or a value outside [-MAX_BIAS, MAX_BIAS].
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


def check_prompt(prompt: list[int] | str) -> list[int] | str:
    """``prompt`` as text, or as a list of non-negative ints.

    Raises:
        ApiError: (fault ``"final"``) anything else.
    """
    if isinstance(prompt, str):
        return prompt
    try:
        ids = [operator.index(i) for i in prompt]
    except TypeError:
        raise ApiError(None, "a prompt must be a string or a list of token ids (int)") from None
    if any(i < 0 for i in ids):
        raise ApiError(None, "token ids in a prompt must be non-negative")
    return ids


def check_int(value: int, name: str, low: int) -> int:
    """``value`` as an int of at least ``low``.

    Raises:
        ApiError: (fault ``"final"``) not an int, or below ``low``.
    """
    try:
        number = operator.index(value)
    except TypeError:
        raise ApiError(None, f"{name} must be an int, got {value!r}") from None
    if number < low:
        raise ApiError(None, f"{name} must be at least {low}, got {number}")
    return number


def with_extra(payload: dict, extra: dict | None) -> dict:
    """``payload`` with the ``extra`` body fields added.

    Raises:
        ApiError: (fault ``"final"``) an extra field the client sets itself.
    """
    if not extra:
        return payload
    clash = sorted(set(extra) & (set(payload) | CLIENT_FIELDS))
    if clash:
        raise ApiError(None, f"extra body fields {clash} clash with fields the client sets itself")
    return {**payload, **extra}


def estimate_tokens(payload: dict) -> int:
    """Tokens one request spends: prompt tokens (exact for id prompts, ~:data:`BYTES_PER_TOKEN`
    bytes a token for text) plus ``max_tokens``."""
    prompt = payload.get("prompt")
    if isinstance(prompt, list):
        n = len(prompt)
    elif isinstance(prompt, str):
        n = len(prompt.encode("utf-8")) // BYTES_PER_TOKEN + 1
    else:
        n = sum(len(str(m.get("content", "")).encode("utf-8")) // BYTES_PER_TOKEN + 4 for m in payload["messages"])
    return n + int(payload.get("max_tokens") or 0)
