"""Lowercase ratio (Carlini et al. 2021, §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Need, Scorer, mean_logprob


@dataclass(frozen=True)
class Lowercase(Scorer):
    """score = NLL(text.lower()) / NLL(text), NLL = −mean lp_i (nats/token); higher = member.

    A memorised text has a low NLL that lowercasing destroys, so the ratio grows. When the
    text's NLL is exactly 0 (every token has probability 1 in the model's precision) the ratio
    is +inf (NaN when both are 0): the runner stores such a score as null and flags it.
    """

    name = "lowercase"

    def needs(self, text: str) -> list[Need]:
        return [Need(text.lower())]

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> float:
        lowered, own = mean_logprob(aux[0]), mean_logprob(lp)
        if own == 0.0:
            return math.inf if lowered != 0.0 else math.nan
        return lowered / own
