"""Completions vs chat: what each endpoint kind can send, how its request body is built and
checked, where it goes, and how its answer is read.

One :class:`Dialect` per endpoint kind (:data:`DIALECTS`), chosen once from the configured
kind (:func:`dialect_named`); nothing else branches on the kind. Request bodies are checked
before anything is sent: a bad argument is an :class:`~.errors.ApiError` with fault
``"final"``.

A chat request puts the prefix into messages through a :class:`MessageTemplate`: by default
(:data:`PLAIN`) one user message holding the prefix; :data:`CONTINUATION` (``--chat-template
continuation``) a system message asking to continue the text verbatim, then the prefix as the
user's text, so the assistant's first tokens are the targets; or a user's template file
(:func:`load_message_template`). The template is part of the dialect's ``condition``, which
every result row records: values from different templates are never mixed.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import operator
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

from ....option_names import named
from ....types import BlackboxMIAError
from .answers import read_chat, read_completion
from .errors import ApiError
from .wire import MAX_BIAS, MAX_BIAS_ENTRIES

BYTES_PER_TOKEN = 4  # rough size of a token, to estimate text prompts for the tokens-per-minute limit
CLIENT_FIELDS = frozenset({"model", "stream", "prompt", "messages"})  # body fields extras may not set
TEXT_FIELD = "{text}"  # where a message template puts the prefix
CHAT_CONDITION = "chat-template"  # the condition of every chat value: the server's chat template
CONTINUATION_SYSTEM = "Continue the text verbatim."  # short: every request pays its tokens
MESSAGE_ROLES = ("system", "developer", "user", "assistant")
CHAT_NOTE = (
    "chat endpoint: the server wraps every prefix in its chat template, so values are log-probs "
    "conditional on that template, not the text's own log-probs"
)


@dataclass(frozen=True)
class MessageTemplate:
    """How a chat request carries the prefix: messages, one of which holds :data:`TEXT_FIELD`.

    Attributes:
        name: short name, part of the condition (``plain``, ``continuation``, ``file:NAME@HASH``).
        messages: ``(role, content)`` pairs; exactly one content holds :data:`TEXT_FIELD` once,
            and the last message is the user's (the assistant answers next).

    Raises:
        BlackboxMIAError: the messages break those rules or use an unknown role.
    """

    name: str
    messages: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        for role, content in self.messages:
            if role not in MESSAGE_ROLES or not isinstance(content, str):
                raise BlackboxMIAError(f"message template {self.name!r}: role {role!r} is not one of "
                                       f"{', '.join(MESSAGE_ROLES)}, or its content is not a string")
        if not self.messages or self.messages[-1][0] != "user":
            raise BlackboxMIAError(f"message template {self.name!r}: the last message must be the user's")
        if sum(content.count(TEXT_FIELD) for _, content in self.messages) != 1:
            raise BlackboxMIAError(f"message template {self.name!r}: exactly one {TEXT_FIELD} must say where the "
                                   "text goes")

    @property
    def condition(self) -> str:
        """What chat values under this template are conditional on: :data:`CHAT_CONDITION`,
        followed by ``+`` and the template's name unless it is :data:`PLAIN`."""
        return CHAT_CONDITION if self.name == PLAIN_NAME else f"{CHAT_CONDITION}+{self.name}"

    def render(self, text: str) -> list[dict[str, str]]:
        """The request's ``messages`` with ``text`` in place of :data:`TEXT_FIELD`."""
        return [{"role": role, "content": content.replace(TEXT_FIELD, text)} for role, content in self.messages]


PLAIN_NAME = "plain"
PLAIN = MessageTemplate(PLAIN_NAME, (("user", TEXT_FIELD),))
CONTINUATION = MessageTemplate("continuation", (("system", CONTINUATION_SYSTEM), ("user", TEXT_FIELD)))
MESSAGE_TEMPLATES: Mapping[str, MessageTemplate] = MappingProxyType({t.name: t for t in (PLAIN, CONTINUATION)})


def load_message_template(spec: str | None) -> MessageTemplate:
    """The message template ``spec`` names: ``None`` or ``"plain"`` (:data:`PLAIN`),
    ``"continuation"`` (:data:`CONTINUATION`), else a JSON file holding ``{"messages": [{"role",
    "content"}, ...]}`` (one content with ``{text}``; the last message the user's), named
    ``file:NAME@`` and the first 12 hex digits of its sha256.

    Raises:
        BlackboxMIAError: the file cannot be read, is not such JSON, or breaks the template rules.
    """
    if spec is None or spec in MESSAGE_TEMPLATES:
        return MESSAGE_TEMPLATES[spec or PLAIN_NAME]
    path = Path(spec)
    try:
        raw = path.read_bytes()
        messages = json.loads(raw)["messages"]
        pairs = tuple((m["role"], m["content"]) for m in messages)
    except OSError as exc:
        raise BlackboxMIAError(f"cannot read chat template {spec!r} (not {' or '.join(MESSAGE_TEMPLATES)} either): "
                               f"{exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BlackboxMIAError(f"chat template {spec!r} must be JSON {{\"messages\": [{{\"role\", \"content\"}}, ...]}} "
                               f"with {TEXT_FIELD} in one content: {exc!r}") from None
    return MessageTemplate(f"file:{path.name}@{hashlib.sha256(raw).hexdigest()[:12]}", pairs)


class Dialect(ABC):
    """One endpoint kind of an OpenAI-compatible API (immutable; use :func:`dialect_named`).

    Attributes:
        name: ``"completions"`` or ``"chat"``: the configured kind, and part of every cache key.
        prompt_field: the body field that holds the prompt (``"prompt"`` or ``"messages"``).
        token_id_prompts: prompts may be sent as token-id lists.
        echo: the endpoint can return the prompt's log-probs (``echo``).
        steps_extend_prompt: a generated token is read in the same context as the prompt extended
            by the tokens before it (completions); on chat the prompt sits in a message and the
            generated tokens after it, a context no prompt gives.
        condition: ``None`` when log-probs are the text's own, else what they are conditional on
            (``"chat-template"``: the server wraps every prompt in its chat template;
            ``"chat-template+NAME"``: inside the message template NAME too).
        notes: facts every user of this kind's values should know.
        reasons: capability → why this kind cannot have it.
    """

    name: ClassVar[str]
    prompt_field: ClassVar[str]
    token_id_prompts: ClassVar[bool]
    echo: ClassVar[bool]
    steps_extend_prompt: ClassVar[bool]
    condition: str | None = None
    notes: tuple[str, ...] = ()
    reasons: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @property
    def key(self) -> str:
        """What distinguishes this dialect's answers in caches of derived results (the capability
        probe): :attr:`name`, plus ``+`` and the message template's name for a chat dialect
        with a template other than the plain one."""
        return self.name

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


class Completions(Dialect):
    """The legacy ``/v1/completions``: token-id or text prompts, echo, ``logprobs: n``."""

    name = "completions"
    prompt_field = "prompt"
    token_id_prompts = True
    echo = True
    steps_extend_prompt = True

    def payload(self, prompt, *, max_tokens, temperature, top_n, bias=None, echo=False, extra=None) -> dict:
        body: dict = {"prompt": check_prompt(prompt), "max_tokens": check_request_int(max_tokens, "max_tokens", 0)}
        body["temperature"] = float(temperature)
        if top_n is not None:
            body["logprobs"] = check_request_int(top_n, "logprobs", 0)
        if bias:
            body["logit_bias"] = check_logit_bias(bias)
        if echo:
            body["echo"] = True
        return with_extra(body, extra)

    def read(self, raw: dict, payload: dict) -> dict:
        return read_completion(raw, payload)


class Chat(Dialect):
    """``/v1/chat/completions``: the prefix put into messages by a :class:`MessageTemplate`;
    text only, no echo, values conditional on the server's chat template and on the message
    template (:attr:`condition`).

    Args:
        template: how the prefix becomes messages (default :data:`PLAIN`: one user message).
    """

    name = "chat"
    prompt_field = "messages"
    token_id_prompts = False
    echo = False
    steps_extend_prompt = False
    reasons = MappingProxyType({
        "prompt": "echo (prompt log-probs) exists only on /v1/completions",
        "token_id_prompts": "chat messages are text",
    })

    def __init__(self, template: MessageTemplate = PLAIN):
        self.template = template
        self.condition = template.condition
        self.notes = (CHAT_NOTE,) if template is PLAIN else (CHAT_NOTE, (
            f"chat template {template.name!r}: the prefix is sent inside these messages, so values are also "
            "conditional on them; calibrate (members and non-members) through the same template, or the "
            "threshold and TPR/FPR do not apply"
        ))

    @property
    def key(self) -> str:
        return self.name if self.template is PLAIN else f"{self.name}+{self.template.name}"

    def payload(self, prompt, *, max_tokens, temperature, top_n, bias=None, echo=False, extra=None) -> dict:
        if not isinstance(prompt, str):
            raise ApiError(None, f"chat content must be a string, got {type(prompt).__name__}")
        if echo:
            raise ApiError(None, self.reasons["prompt"])
        body: dict = {
            "messages": self.template.render(prompt),
            "max_tokens": check_request_int(max_tokens, "max_tokens", 1),
            "temperature": float(temperature),
        }
        if top_n is not None:
            body["logprobs"] = True
            body["top_logprobs"] = check_request_int(top_n, "top_logprobs", 0)
        if bias:
            body["logit_bias"] = check_logit_bias(bias)
        return with_extra(body, extra)

    def read(self, raw: dict, payload: dict) -> dict:
        return read_chat(raw, payload)


COMPLETIONS, CHAT = Completions(), Chat()
DIALECTS: Mapping[str, Dialect] = MappingProxyType({d.name: d for d in (COMPLETIONS, CHAT)})


def dialect_named(kind: str, chat_template: str | None = None) -> Dialect:
    """The dialect of endpoint ``kind``; for ``"chat"`` with the message template
    ``chat_template`` names (see :func:`load_message_template`).

    Raises:
        BlackboxMIAError: an unknown kind, a ``chat_template`` with another kind than chat, or
            a template that cannot be loaded.
    """
    if kind not in DIALECTS:
        raise BlackboxMIAError(f"unknown endpoint {kind!r}: choose {' or '.join(DIALECTS)}")
    if chat_template is None:
        return DIALECTS[kind]
    if kind != CHAT.name:
        raise BlackboxMIAError(f"{named('chat_template')} needs {named('endpoint', 'chat')} (the endpoint is {kind!r})")
    return Chat(load_message_template(chat_template))


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
        ids = list(map(operator.index, prompt))
    except TypeError:
        raise ApiError(None, "a prompt must be a string or a list of token ids (int)") from None
    if ids and min(ids) < 0:
        raise ApiError(None, "token ids in a prompt must be non-negative")
    return ids


def check_request_int(value: int, name: str, low: int) -> int:
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
