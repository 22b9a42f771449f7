"""What a client spends and may spend: usage accounting and the spending cap."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..option_names import named
from ..types import BudgetExceeded
from .prices import request_cost


@dataclass
class Usage:
    """What one client spent (cache hits cost nothing and add no tokens).

    Attributes:
        requests: HTTP requests sent, retries included.
        retries: how many of those requests repeated a failed one.
        cache_hits: answers served from the disk cache (no request), including answers another
            process sharing the cache directory paid for while this one waited.
        invalid_answers: answers that arrived but failed validation (never cached; retried).
        invalid_cached: cached answers that failed validation when read, or rows the cache
            quarantined as it read them (dropped, asked again).
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

    def bill(self, prompt: int, completion: int, price: tuple[float, float] | None) -> None:
        """Add one answer's billed tokens and their cost at ``price`` (USD per 1M prompt /
        completion tokens; ``None``: no cost)."""
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost_usd += request_cost(prompt, completion, price)


def usd(value: float) -> str:
    """``value`` USD as a message shows it: 4 decimals, or 2 significant digits below a cent
    (``$0.0000030``: a request to a cheap model must not read as free)."""
    digits = 4 if value == 0 or value >= 0.01 else 1 - math.floor(math.log10(value))
    return f"${value:,.{digits}f}"


class Budget:
    """A spending cap in USD, in requests sent, or both. In USD a request reserves its
    worst-case cost before it is sent, and the reservation is replaced by the billed cost when
    its answer comes; in requests every request sent counts (retries and those in flight too).
    A cap of 0 allows cached answers only.

    Args:
        max_usd: the cap in USD (>= 0), or ``None``.
        max_requests: the most requests sent (>= 0), or ``None``.
    """

    def __init__(self, max_usd: float | None, max_requests: int | None = None):
        self.max_usd = None if max_usd is None else float(max_usd)
        self.max_requests = max_requests
        self.reserved = 0.0  # worst-case USD of the requests in flight

    def reserve(self, spent: float, cost: float, sent: int = 0) -> None:
        """Reserve ``cost`` USD for a request about to be sent, ``spent`` USD being billed and
        ``sent`` requests sent already (those in flight included).

        Raises:
            BudgetExceeded: ``sent`` + 1 would pass the request cap, or ``spent`` + the requests
                in flight + ``cost`` the USD cap.
        """
        if self.max_requests is not None and sent + 1 > self.max_requests:
            raise BudgetExceeded(self._stopped("max_requests", f"{self.max_requests:,}", self.max_requests == 0,
                                               f"{sent:,} requests sent (retries and those in flight included)"))
        if self.max_usd is not None and spent + self.reserved + cost > self.max_usd:
            raise BudgetExceeded(self._stopped("max_cost", f"${self.max_usd:g}", self.max_usd == 0,
                                               f"{usd(spent)} spent, {usd(self.reserved)} in flight, this request up "
                                               f"to {usd(cost)}"))
        self.reserved += cost

    @staticmethod
    def _stopped(setting: str, cap: str, cached_only: bool, account: str) -> str:
        """The message of a refused request under the cap ``setting`` (shown as ``cap``)."""
        why = (f"{named(setting)} {cap} allows cached answers only, and this request is not cached" if cached_only
               else f"stopped before a request that could take the spend past {named(setting)} {cap}: {account}")
        return f"{why}. Every answer paid for is cached: rerun with a higher {named(setting)} to continue"

    def settle(self, cost: float) -> None:
        """Release the reservation of a request that ended (its billed cost is in the usage)."""
        self.reserved = max(0.0, self.reserved - cost)
