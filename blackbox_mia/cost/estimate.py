"""A cost estimate (requests, billed tokens, USD, with its uncertainty) and sums of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CostEstimate:
    """What scoring some texts is expected to cost, before anything is sent.

    Attributes:
        requests: HTTP requests expected (0 for a local model).
        prompt_tokens, completion_tokens: tokens expected to be billed.
        usd: their cost at the model's price (0 when unpriced or local).
        relative_uncertainty: the estimate may be off by this fraction either way (0: exact,
            for strategies whose request count depends only on the texts).
        strategy: what the estimate assumes (e.g. ``"forced"``, ``"bisect"``); ``None`` local.
        unpriced: the model has no price, so ``usd`` is 0.
        notes: what the figure leaves out or assumes.
    """

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    relative_uncertainty: float = 0.0
    strategy: str | None = None
    unpriced: bool = False
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return {**asdict(self), "notes": list(self.notes)}


def add_estimates(estimates: Sequence[CostEstimate]) -> CostEstimate:
    """The sum of ``estimates``: requests, tokens and USD added; the relative uncertainty is
    the largest one's (a conservative bound for sums of same-sign errors); strategies and notes
    merged without repeats; unpriced when any part is."""
    parts = [e for e in estimates if e.requests or e.strategy]
    strategies = list(dict.fromkeys(e.strategy for e in parts if e.strategy))
    return CostEstimate(
        requests=sum(e.requests for e in estimates),
        prompt_tokens=sum(e.prompt_tokens for e in estimates),
        completion_tokens=sum(e.completion_tokens for e in estimates),
        usd=sum(e.usd for e in estimates),
        relative_uncertainty=max((e.relative_uncertainty for e in parts), default=0.0),
        strategy="+".join(strategies) or None,
        unpriced=any(e.unpriced for e in parts),
        notes=tuple(dict.fromkeys(n for e in estimates for n in e.notes)),
    )
