"""List prices of models and what a request costs at them."""

from __future__ import annotations

import re
from collections.abc import Mapping

# List prices in USD per 1M tokens (prompt, completion), as published by OpenAI in 2025. Prices
# change: pass ApiConfig(prices=...) to override. Unlisted models cost 0 and are flagged
# ``unpriced`` in the usage.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "davinci-002": (2.00, 2.00),
    "babbage-002": (0.40, 0.40),
    "gpt-3.5-turbo-instruct": (1.50, 2.00),
    "gpt-3.5-turbo": (0.50, 1.50),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}
PRICE_HINT = ("give the model's price in a target spec, api:MODEL@URL?price=PROMPT,COMPLETION "
              "(USD per 1M tokens, see docs/backends.md)")
"""How a message tells the user to price a model the table lacks (the ``price`` key of ``api:``)."""
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")  # gpt-4o-2024-08-06, gpt-3.5-turbo-0125


def price_of(prices: Mapping[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    """(USD per 1M prompt tokens, USD per 1M completion tokens) of ``model`` in ``prices``, or
    ``None``. A dated snapshot (``gpt-4o-2024-08-06``) falls back to its base name's price."""
    for name in (model, _SNAPSHOT_SUFFIX.sub("", model)):
        if name in prices:
            prompt, completion = prices[name]
            return float(prompt), float(completion)
    return None


def request_cost(prompt_tokens: int, completion_tokens: int, price: tuple[float, float] | None) -> float:
    """USD of ``prompt_tokens`` + ``completion_tokens`` at ``price`` (USD per 1M prompt /
    completion tokens; ``None``: 0)."""
    if price is None:
        return 0.0
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1e6
