"""Reference-model calibration (Carlini et al. 2021, §6: "comparing to other neural language models")."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Need, Scorer, reference_role, register_scorer
from .bounded import Bounded, BoundedValues, mean_of


@register_scorer
@dataclass(frozen=True)
class Ref(Scorer):
    """score = mean lp under the target − the mean over ``refs`` reference models of their mean
    lp, nats/token.

    Carlini et al. 2021 §6 compare the target's likelihood of a text with a reference model's
    (sequence level: one mean per text and model). Each model uses its own tokenizer, so the
    comparison is of per-text means, never of aligned tokens; a text the target knows much
    better than generic reference models scores high. With several reference models (``refs``
    of them, ``--ref`` given that many times) their per-text means are averaged first: the
    reference's own noise (how well one small model happens to know a text) shrinks, the
    item's difficulty stays calibrated. Needs that many reference backends (roles
    :func:`~.base.reference_role` 0 .. refs − 1).
    """

    name = "ref"
    refs: int = 1
    ranges = {"refs": {"at_least": 1}}

    def needs(self, text: str) -> list[Need]:
        return [Need(text, reference_role(i)) for i in range(self.refs)]

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return BoundedValues.of(lp).mean() - mean_of([BoundedValues.of(ref).mean() for ref in aux])
