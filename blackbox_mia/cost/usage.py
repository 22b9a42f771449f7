"""What a client spends and may spend: usage accounting and the spending cap."""

from __future__ import annotations

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
                f"stopped before a request that could take the spend past {named('max_cost')} ${self.max_usd:g}: "
                f"${spent:.4f} spent, ${self.reserved:.4f} in flight, this request up to ${cost:.4f}. "
                f"Every answer paid for is cached: rerun with a higher {named('max_cost')} to continue"
            )
        self.reserved += cost

    def settle(self, cost: float) -> None:
        """Release the reservation of a request that ended (its billed cost is in the usage)."""
        self.reserved = max(0.0, self.reserved - cost)
