"""What a client spends and may spend: list prices, usage accounting and rate limits."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from ...types import BlackboxMIAError
from .answers import token_count

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
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")  # gpt-4o-2024-08-06, gpt-3.5-turbo-0125


def price_of(prices: Mapping[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    """(USD per 1M prompt tokens, USD per 1M completion tokens) of ``model`` in ``prices``, or
    ``None``. A dated snapshot (``gpt-4o-2024-08-06``) falls back to its base name's price."""
    for name in (model, _SNAPSHOT_SUFFIX.sub("", model)):
        if name in prices:
            prompt, completion = prices[name]
            return float(prompt), float(completion)
    return None


@dataclass
class Usage:
    """What one client spent (cache hits cost nothing and add no tokens).

    Attributes:
        requests: HTTP requests sent, retries included.
        retries: how many of those requests repeated a failed one.
        cache_hits: answers served from the disk cache (no request), including answers another
            process sharing the cache directory paid for while this one waited.
        invalid_answers: answers that arrived but failed validation (never cached; retried).
        invalid_cached: cached answers that failed validation when read (dropped, asked again).
        prompt_tokens, completion_tokens: tokens the server reported in ``usage`` (invalid
            answers included: they are billed too).
        cost_usd: estimated cost in USD from the model's price (0 when unpriced).
        unpriced: the model has no price, so ``cost_usd`` stays 0.
    """

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    invalid_answers: int = 0
    invalid_cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)

    def bill(self, reported: object, price: tuple[float, float] | None) -> None:
        """Add the tokens of one answer's ``usage`` object (anything else counts 0 tokens) and
        their cost at ``price`` (USD per 1M prompt / completion tokens; ``None``: no cost)."""
        reported = reported if isinstance(reported, dict) else {}
        prompt, completion = (token_count(reported.get(k)) or 0 for k in ("prompt_tokens", "completion_tokens"))
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost_usd += request_cost(prompt, completion, price)


class BudgetExceeded(BlackboxMIAError):
    """The next request could take the spend past the cap: nothing more is sent (everything paid
    so far is cached, so a rerun with a higher cap resumes where this run stopped)."""


class Budget:
    """A spending cap in USD: a request reserves its worst-case cost before it is sent, and the
    reservation is replaced by the billed cost when its answer comes.

    Args:
        max_usd: the cap (USD, >= 0).
    """

    def __init__(self, max_usd: float):
        self.max_usd = float(max_usd)
        self.reserved = 0.0  # worst-case USD of the requests in flight

    def reserve(self, spent: float, cost: float) -> None:
        """Reserve ``cost`` USD for a request about to be sent, ``spent`` USD being billed already.

        Raises:
            BudgetExceeded: ``spent`` + the requests in flight + ``cost`` would pass the cap.
        """
        if spent + self.reserved + cost > self.max_usd:
            raise BudgetExceeded(
                f"stopped before a request that could take the spend past --max-cost ${self.max_usd:g}: "
                f"${spent:.4f} spent, ${self.reserved:.4f} in flight, this request up to ${cost:.4f}. "
                "Every answer paid for is cached: rerun with a higher --max-cost to continue"
            )
        self.reserved += cost

    def settle(self, cost: float) -> None:
        """Release the reservation of a request that ended (its billed cost is in the usage)."""
        self.reserved = max(0.0, self.reserved - cost)


def request_cost(prompt_tokens: int, completion_tokens: int, price: tuple[float, float] | None) -> float:
    """USD of ``prompt_tokens`` + ``completion_tokens`` at ``price`` (USD per 1M prompt /
    completion tokens; ``None``: 0)."""
    if price is None:
        return 0.0
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1e6


class RateLimiter:
    """Token bucket: on average ``per_minute`` units a minute, bursts of one second's worth.

    A request larger than the burst waits for a full bucket and then leaves it in debt, so the
    long-run rate holds for any request size.
    """

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0  # units per second
        self.burst = self.rate
        self._level = self.burst
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` units (requests or tokens) may be spent, then spend them."""
        need = min(amount, self.burst)
        async with self._lock:
            while True:
                now = time.monotonic()
                self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._level >= need:
                    break
                await asyncio.sleep((need - self._level) / self.rate)
            self._level -= amount
