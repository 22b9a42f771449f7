"""LOSS attack: mean token log-prob (Yeom et al. 2018; the PPL baseline of Shi et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class Loss(Scorer):
    """score = (1/N) Σ lp_i in nats/token (= −loss, so higher = member)."""

    name = "loss"

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return BoundedValues.of(lp).mean()
