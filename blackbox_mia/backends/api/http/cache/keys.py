"""Cache keys of API requests: :func:`request_key`, the sha256 of a request's canonical JSON
(:func:`canonical_json`). The API key is never part of a key."""

from __future__ import annotations

import functools
import hashlib

from .....io import dumps_strict
from .....types import BlackboxMIAError


def canonical_json(value: object) -> str:
    """``value`` as canonical JSON text: keys sorted, no whitespace, non-ASCII characters as
    themselves (not ``\\u`` escapes), NaN and infinities refused.

    Raises:
        BlackboxMIAError: ``value`` is not JSON-serialisable.
    """
    try:
        return dumps_strict(value, "request payload", sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except TypeError as exc:
        raise BlackboxMIAError(f"request payload is not JSON-serialisable: {exc}") from exc


def request_key(base_url: str, model: str, endpoint: str, payload: dict | str) -> str:
    """Cache key of one request: sha256 hex digest (64 characters) of its canonical JSON.

    The digest covers ``{"base_url", "model", "endpoint", "payload"}`` serialised by
    :func:`canonical_json`, so dict order never matters.

    Args:
        base_url: the API base URL; a trailing ``/`` is ignored.
        model: the model name sent to the API.
        endpoint: ``"completions"`` or ``"chat"``.
        payload: every request parameter that can change the answer: the prompt (token ids or
            text) or messages, ``max_tokens``, ``temperature``, ``logprobs`` / ``top_logprobs``,
            ``logit_bias``, ``echo``, ``seed`` and any extra body field; or its
            :func:`canonical_json` text (the client serialises a payload once, for the key and
            the request body). It must not hold credentials: the API key is sent as a header and
            is deliberately NOT part of the key (the same request with another key has the same
            answer, and the key must never reach the cache directory).

    Raises:
        BlackboxMIAError: the payload is not JSON-serialisable.
    """
    text = payload if isinstance(payload, str) else canonical_json(payload)
    return hashlib.sha256(f"{_record_head(base_url, endpoint, model)}{text}}}".encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=64)
def _record_head(base_url: str, endpoint: str, model: str) -> str:
    """The start of :func:`request_key`'s record: canonical JSON of the whole record has its four
    keys in sorted order, so the payload comes last."""
    return (f'{{"base_url":{canonical_json(base_url.rstrip("/"))},"endpoint":{canonical_json(endpoint)},'
            f'"model":{canonical_json(model)},"payload":')

