"""zlib ratio (Carlini et al. 2021, "Extracting training data from large language models", §6)."""

from __future__ import annotations

import zlib as _zlib
from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class Zlib(Scorer):
    """score = −(mean NLL) / zlib_bytes = mean lp_i / len(zlib.compress(text.encode("utf-8"))).

    Units: nats per token per compressed byte. Carlini et al. compare log-perplexity with zlib
    entropy; the sign makes higher = member.
    """

    name = "zlib"

    def lowest_percent(self) -> float:
        return 100.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return BoundedValues.of(lp).mean() / len(_zlib.compress(text.encode("utf-8")))
