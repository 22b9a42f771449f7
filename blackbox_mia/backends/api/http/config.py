"""Where and how an :class:`~.client.ApiClient` sends requests: :class:`ApiConfig`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from ....config import MAX_PORT, bounded, check_bounds
from ....cost.prices import DEFAULT_PRICES, PRICE_HINT, price_of
from ....option_names import named
from ....types import BlackboxMIAError

API_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "EMPTY"  # sent when no key is configured: local servers (vLLM, llama.cpp) ignore it


def _default_api_key() -> str:
    return os.environ.get(API_KEY_ENV) or PLACEHOLDER_API_KEY


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment: safe to show in messages and results (the
    port as given, even when it is not a valid one)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = _port_text(parts.netloc)
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _port_text(netloc: str) -> str:
    """The port of ``netloc`` as written (``""`` when none): after the user info and an IPv6
    address's ``]``."""
    return netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an ``http(s)://HOST[:PORT]/PATH`` base URL, or ``None``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it must be http(s)://HOST[:PORT]/PATH"
    port = _port_text(parts.netloc)
    if port and not (port.isdigit() and 1 <= int(port) <= MAX_PORT):
        return f"its port {port} is not a TCP port (1 to {MAX_PORT})"
    return None


@dataclass(frozen=True)
class ApiConfig:
    """Where and how to send requests.

    Attributes:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        model: the model name sent with every request.
        api_key: sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY``, else the
            placeholder ``"EMPTY"`` that local servers accept. Never shown (``repr=False``).
        endpoint: ``"completions"`` (legacy ``/v1/completions``) or ``"chat"``.
        chat_template: with ``endpoint="chat"``: the message template the prefix is sent in
            (``"continuation"`` or a JSON file, see :func:`~.dialect.load_message_template`);
            ``None``: the prefix as one user message.
        concurrency: most requests in flight at once, ≥ 1.
        rpm: requests-per-minute limit, > 0, or ``None``.
        tpm: tokens-per-minute limit (prompt + ``max_tokens``, estimated), > 0, or ``None``.
        timeout_s: seconds to wait for one HTTP answer, > 0.
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests), ≥ 0.
        backoff_base_s: first backoff in seconds, ≥ 0 (doubling each retry, plus up to as much jitter).
            An invalid answer is retried sooner: after ``min(backoff_base_s, QUICK_RETRY_S)``
            seconds times the attempt number.
        backoff_max_s: longest backoff in seconds, ≥ 0 (a longer ``Retry-After`` still wins, up to
            :data:`MAX_RETRY_AFTER_S`).
        prices: model → (USD per 1M prompt tokens, USD per 1M completion tokens); replaces
            :data:`DEFAULT_PRICES` (extend it with ``{**DEFAULT_PRICES, name: (p, c)}``).
        max_cost: stop before the request that could take the spend past this many USD
            (prompt tokens + ``max_tokens`` at the model's price; the requests in flight count),
            ≥ 0 (0: cached answers only); ``None``: no cap. Needs a price for the model.
        max_requests: stop before the request that would take the requests sent (retries
            included; cached answers are free) past this many, ≥ 0 (0: cached answers only);
            ``None``: no cap. The cap for a model without a price.

    Raises:
        BlackboxMIAError: an invalid value (each range is its field's :func:`~blackbox_mia.config.bounded`), or ``max_cost`` for a model without a price.
    """

    base_url: str
    model: str
    api_key: str = field(default_factory=_default_api_key, repr=False)
    endpoint: str = "completions"
    chat_template: str | None = None
    concurrency: int = bounded(16, at_least=1)
    rpm: float | None = bounded(None, above=0)
    tpm: float | None = bounded(None, above=0)
    timeout_s: float = bounded(60.0, above=0)
    max_retries: int = bounded(6, at_least=0)
    backoff_base_s: float = bounded(1.0, at_least=0)
    backoff_max_s: float = bounded(60.0, at_least=0)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    max_cost: float | None = bounded(None, at_least=0)
    max_requests: int | None = bounded(None, at_least=0)

    def __post_init__(self) -> None:
        try:
            problem = url_problem(self.base_url)
        except ValueError as exc:  # urlsplit: e.g. an unclosed IPv6 bracket
            problem = str(exc)
        if problem is not None:
            raise BlackboxMIAError(f"base URL {display_url(self.base_url)!r}: {problem}")
        if not self.model:
            raise BlackboxMIAError("the model name is empty")
        from .dialect import dialect_named  # here: the dialects import the SDK's errors, which --help never needs

        dialect_named(self.endpoint, self.chat_template)  # raises on an unknown kind or template
        check_bounds(self)
        if self.max_cost is not None:
            if self.price() is None:
                raise BlackboxMIAError(
                    f"{named('max_cost')} needs the price of model {self.model!r}, which is not in the price table "
                    f"(known: {', '.join(sorted(self.prices))}): {PRICE_HINT}, or cap the requests instead "
                    f"with {named('max_requests')} N"
                )

    def price(self) -> tuple[float, float] | None:
        """(USD per 1M prompt tokens, USD per 1M completion tokens) of the model, or ``None``.

        A dated snapshot (``gpt-4o-2024-08-06``) falls back to its base name's price.
        """
        return price_of(self.prices, self.model)

    def describe(self) -> dict:
        """JSON-ready settings for result files; never holds the API key."""
        price = self.price()
        return {
            "base_url": display_url(self.base_url),
            "model": self.model,
            "endpoint": self.endpoint,
            **({"chat_template": self.chat_template} if self.chat_template else {}),
            "concurrency": self.concurrency,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "usd_per_1m_tokens": None if price is None else {"prompt": price[0], "completion": price[1]},
        }
