"""Lowercase ratio (Carlini et al. 2021, §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..types import TokenLogprobs
from .base import Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class Lowercase(Scorer):
    """score = NLL(text.lower()) / NLL(text), NLL = −mean lp_i (nats/token); higher = member.

    A memorised text has a low NLL that lowercasing destroys, so the ratio grows. When the
    text's NLL is exactly 0 (every token has probability 1 in the model's precision) the ratio
    is ±inf (NaN when both are 0): the runner stores such a score as null and flags it. The
    interval is the quotient of the two means' intervals (unbounded when the text's may be 0).
    """

    name = "lowercase"

    def needs(self, text: str) -> list[Need]:
        return [Need(text.lower())]

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        lowered, own = BoundedValues.of(aux[0]).mean(), BoundedValues.of(lp).mean()
        ratio = lowered / own
        if own.value == 0.0:  # NLL 0: the ratio of two NLLs (both >= 0) is +inf, or NaN for 0/0
            return replace(ratio, value=math.inf if lowered.value != 0.0 else math.nan)
        return ratio
