"""Request-body parsing and validation, as OpenAI validates: every field the server reads is
checked, and a bad one raises :class:`HttpError` 400 naming it (``param``)."""

from __future__ import annotations

import json
import math

from ..backends.api.http.wire import (
    MAX_BIAS,
    MAX_BIAS_ENTRIES,
    MAX_STOP_SEQUENCES,
    MAX_TEMPERATURE,
)
from .errors import bad_request
from .sampling import Sampling

SEED_LIMIT = 2**63  # seeds are integers in [0, 2**63)
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
# Sampling options the server reads but only supports at their neutral value: (neutral, lo, hi).
NEUTRAL_ONLY = {"top_p": (1.0, 0.0, 1.0), "presence_penalty": (0.0, -2.0, 2.0), "frequency_penalty": (0.0, -2.0, 2.0)}
# Parameters of the other endpoint, refused rather than silently ignored (OpenAI refuses them too).
FOREIGN_PARAMETERS = {
    "completions": ("top_logprobs", "messages", "max_completion_tokens"),
    "chat": ("prompt", "echo", "suffix"),
}


def int_field(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    """``body[name]`` as an integer in [lo, hi], ``default`` when absent or null.

    Raises:
        HttpError: 400 (param ``name``) when it is not an integer (booleans and floats are not) or
            out of range.
    """
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer, got {json.dumps(value)}", name, "invalid_type")
    if lo is not None and value < lo:
        raise bad_request(f"Invalid value for '{name}': must be greater than or equal to {lo}.", name, "invalid_value")
    if hi is not None and value > hi:
        raise bad_request(f"Invalid value for '{name}': must be less than or equal to {hi}.", name, "invalid_value")
    return value


def number_field(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    """``body[name]`` as a number in [lo, hi], ``default`` when absent or null.

    Raises:
        HttpError: 400 (param ``name``) when it is not a number (booleans are not; NaN is out of
            every range) or out of range.
    """
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise bad_request(f"Invalid value for '{name}': must be a number in [{lo:g}, {hi:g}].", name, "invalid_value")
    return float(value)


def refuse_foreign(body: dict, endpoint: str) -> None:
    """Refuse the parameters of the other endpoint (:data:`FOREIGN_PARAMETERS`) set (not null) in
    ``body``, a request to ``endpoint`` (``"completions"`` or ``"chat"``).

    Raises:
        HttpError: 400 ``unsupported_parameter`` naming every such parameter (``param``: the first).
    """
    given = [name for name in FOREIGN_PARAMETERS[endpoint] if body.get(name) is not None]  # null: not given
    if given:
        path = "/v1/completions" if endpoint == "completions" else "/v1/chat/completions"
        raise bad_request(f"Unsupported parameter(s) on {path}: {', '.join(given)}.", given[0],
                          "unsupported_parameter")


def bool_field(body: dict, name: str, default: bool) -> bool:
    """``body[name]`` as a boolean, ``default`` when absent or null.

    Raises:
        HttpError: 400 (param ``name``) when it is not a JSON boolean.
    """
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be a boolean, got {json.dumps(value)}", name, "invalid_type")
    return value


def parse_logit_bias(raw, vocab_size: int, max_bias: float | None = MAX_BIAS) -> dict[int, float]:
    """Validate ``logit_bias`` as OpenAI does: integer-id keys in the vocabulary, values in
    [-max_bias, max_bias] (``None``: any finite number, as vLLM takes them), at most 300 entries.

    Raises:
        HttpError: 400 on any violation.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias", "invalid_type")
    if len(raw) > MAX_BIAS_ENTRIES:
        raise bad_request(f"Invalid 'logit_bias': at most {MAX_BIAS_ENTRIES} entries, got {len(raw)}.",
                          "logit_bias", "invalid_value")
    bias = {}
    for key, value in raw.items():
        try:
            token = int(key)
        except ValueError:
            raise bad_request(f"Invalid key in 'logit_bias': {key!r} is not an integer token id.",
                              "logit_bias", "invalid_value") from None
        if not 0 <= token < vocab_size:
            raise bad_request(f"Invalid key in 'logit_bias': token id {token} is outside the vocabulary "
                              f"(0..{vocab_size - 1}).", "logit_bias", "invalid_value")
        limit = math.inf if max_bias is None else max_bias
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -limit <= value <= limit \
                or not math.isfinite(value):
            span = "finite" if max_bias is None else f"in [{-max_bias:g}, {max_bias:g}]"
            raise bad_request(f"Invalid value for 'logit_bias' key {key}: must be a number {span}.",
                              "logit_bias", "invalid_value")
        bias[token] = float(value)
    return bias


def parse_stop(raw) -> tuple[str, ...]:
    """Validate ``stop``: null, a non-empty string, or a list of at most 4 non-empty strings.

    Raises:
        HttpError: 400 (param ``stop``) otherwise.
    """
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or len(items) > MAX_STOP_SEQUENCES or \
            not all(isinstance(s, str) and s for s in items):
        raise bad_request(f"'stop' must be a non-empty string or a list of at most {MAX_STOP_SEQUENCES} non-empty "
                          "strings", "stop", "invalid_value")
    return tuple(items)


def chat_messages(messages) -> list[dict[str, str]]:
    """The validated messages of a chat request as ``{"role", "content"}`` with string contents
    (a content given as a list of ``{"type": "text", "text": ...}`` parts is joined).

    Raises:
        HttpError: 400 (param ``messages``) unless ``messages`` is a non-empty list of objects, each
            with a known ``role`` and text content.
    """
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", "messages", "invalid_type")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad_request(f"'messages[{i}]' must be an object", "messages", "invalid_type")
        if message.get("role") not in CHAT_ROLES:
            raise bad_request(f"Invalid value for 'messages[{i}].role': must be one of {', '.join(CHAT_ROLES)}.",
                              "messages", "invalid_value")
        content = message.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise bad_request(f"'messages[{i}].content' parts must all be {{\"type\": \"text\", \"text\": string}}",
                                  "messages", "invalid_value")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad_request(f"'messages[{i}].content' must be a string or a list of text parts", "messages",
                              "invalid_type")
        out.append({"role": message["role"], "content": content})
    return out


def parse_sampling(body: dict, vocab_size: int, max_bias: float | None = MAX_BIAS) -> Sampling:
    """The sampling options both endpoints share, ``max_tokens`` and ``top_n`` left at 0 and None
    for the caller to set: temperature in [0, 2] (1 when absent), seed, logit_bias, stop.

    Args:
        body: the request's JSON object.
        vocab_size: the model's vocabulary size (logit_bias keys must be below it).
        max_bias: the largest |logit_bias| value taken; ``None``: any finite one (vLLM).

    Raises:
        HttpError: 400 for a bad or unsupported ``stream``, ``n``, ``best_of``, ``seed``,
            ``top_p``, ``presence_penalty``, ``frequency_penalty``, ``logit_bias``,
            ``temperature`` or ``stop`` (checked in this order).
    """
    if bool_field(body, "stream", False):
        raise bad_request("stream is not supported by this validation server", "stream", "unsupported_parameter")
    int_field(body, "n", 1, lo=1, hi=1)
    int_field(body, "best_of", 1, lo=1, hi=1)
    seed = int_field(body, "seed", None, lo=0, hi=SEED_LIMIT - 1)
    for name, (neutral, lo, hi) in NEUTRAL_ONLY.items():
        if number_field(body, name, neutral, lo, hi) != neutral:
            raise bad_request(f"'{name}' other than {neutral:g} is not supported by this validation server",
                              name, "unsupported_parameter")
    bias = parse_logit_bias(body.get("logit_bias"), vocab_size, max_bias)
    temperature = number_field(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE)
    return Sampling(0, temperature, None, bias, seed, parse_stop(body.get("stop")))
