"""Min-K% Prob (Shi et al. 2024, "Detecting pretraining data from large language models", eq. 1)."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import PERCENT, Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class MinK(Scorer):
    """score = mean of the E smallest lp_i, E = max(1, ⌊N·k/100⌋); nats/token.

    Args:
        k: percentage of tokens kept (default 20; k = 10 was best on small domain models,
            Ishihara & Takahashi 2024).
    """

    name = "min_k"
    ranges = {"k": PERCENT}
    k: float = 20.0

    def lowest_percent(self) -> float:
        return self.k

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return BoundedValues.of(lp).smallest(self.k)
