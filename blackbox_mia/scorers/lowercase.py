"""Lowercase ratio (Carlini et al. 2021, §6)."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Need, Scorer, mean_logprob


@dataclass(frozen=True)
class Lowercase(Scorer):
    """score = NLL(text.lower()) / NLL(text), NLL = −mean lp_i (nats/token); higher = member.

    A memorised text has a low NLL that lowercasing destroys, so the ratio grows.
    """

    name = "lowercase"

    def needs(self, text: str) -> list[Need]:
        return [Need(text.lower())]

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> float:
        return mean_logprob(aux[0]) / mean_logprob(lp)
