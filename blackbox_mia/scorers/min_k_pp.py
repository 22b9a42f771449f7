"""Min-K%++ (Zhang et al. 2025, "Min-K%++: improved baseline for detecting pre-training data", eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..option_names import spelled
from ..types import BlackboxMIAError, TokenLogprobs
from .base import PERCENT, Scorer, register_scorer
from .bounded import Bounded, BoundedValues


@register_scorer
@dataclass(frozen=True)
class MinKPlusPlus(Scorer):
    """z_i = (lp_i − μ_i) / σ_i; score = mean of the k% smallest z_i (dimensionless).

    μ_i = Σ_v p_v log p_v and σ_i² = Σ_v p_v (log p_v)² − μ_i² over the whole vocabulary at
    position i, so it needs a backend with vocabulary statistics (the local backend).

    Raises:
        BlackboxMIAError: when the log-probs carry no vocabulary statistics.
    """

    name = "min_k_pp"
    needs_vocab_stats = True
    ranges = {"k": PERCENT}
    k: float = 20.0

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        if not lp.has_vocab_stats:
            raise BlackboxMIAError(
                "min_k_pp needs the full next-token distribution (mu, sigma) at every position; "
                f"the {lp.provenance.backend!r} backend does not provide it: use a local model "
                f"({spelled('local:PATH', '--local')})."
            )
        sigma = np.maximum(lp.sigma, 1e-12)
        return BoundedValues.of(lp).map(lambda v: (v - lp.mu) / sigma).smallest(self.k)
