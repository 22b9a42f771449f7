"""Reference-model calibration (Carlini et al. 2021, §6: "comparing to other neural language models")."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import REFERENCE, Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class Ref(Scorer):
    """score = mean lp under the target − mean lp under the reference model, nats/token.

    Each model uses its own tokenizer; a text the target knows much better than a generic
    reference model scores high. Needs a reference backend (``--ref``).
    """

    name = "ref"

    def needs(self, text: str) -> list[Need]:
        return [Need(text, REFERENCE)]

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return BoundedValues.of(lp).mean() - BoundedValues.of(aux[0]).mean()
