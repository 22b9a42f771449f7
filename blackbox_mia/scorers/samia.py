"""SaMIA, sampling-based pseudo-likelihood (Kaneko, Ma, Wu & Baldwin 2024, "Sampling-based
Pseudo-Likelihood for Membership Inference Attacks", arXiv:2404.11262, §3): a text-only scorer.

The target continues the first half of a text several times by sampling; the more of the true
second half the samples reproduce (ROUGE-1), the more likely the text was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..types import Generation
from .bounded import Bounded
from .base import register_scorer
from .text_only import GenerationRequest, SampledContinuation, TargetView, split_halves

if TYPE_CHECKING:
    from rouge_score import rouge_scorer


@register_scorer
@dataclass(frozen=True)
class SaMIA(SampledContinuation):
    """score = mean over the ``n`` samples of ROUGE-1 recall of the reference suffix
    (Kaneko et al. 2024, §3, eq. 2: SaMIA(x) = (1/n) Σ_i ROUGE-N(x_suffix, x̂_i), N = 1).

    ROUGE-1 recall (Lin 2004): the share of the suffix's unigrams (``rouge_score``'s tokenizer:
    lowercased alphanumeric words, numbers kept) that the sample holds, clipped counts; in [0, 1].
    Higher = more of the true continuation reproduced = member.

    Parameters (the paper's defaults as we recall them; the authors sample 10 continuations of
    the first half at temperature 1.0 (their decoding also used top-k, which we do not)): those of
    :class:`~.text_only.SampledContinuation` (``n`` = 10, ``temperature`` = 1.0, ``prefix`` =
    0.5, ``seed``, ``form``: the instruction form's wording is ours, the paper has none), and
        max_suffix: the reference suffix (and the token budget) is at most this many tokens.

    Requests per text: ``n``; tokens: ``n`` × (prefix + up to the suffix's length).

    Raises:
        BlackboxMIAError: a bad ``form``; a text of fewer than two tokens.
    """

    name = "samia"
    ranges = {**SampledContinuation.ranges, "max_suffix": {"at_least": 1}}

    max_suffix: int = 128

    @cached_property
    def _rouge(self) -> rouge_scorer.RougeScorer:
        from rouge_score import rouge_scorer  # imported where used: it loads nltk, which --help never needs

        return rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False)

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        halves = split_halves(self.name, text, target, self.prefix, self.max_suffix)
        return [GenerationRequest(self.prompt(halves, target), len(halves.suffix_ids), self.temperature, self.n, self.seed)]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        suffix = split_halves(self.name, text, target, self.prefix, self.max_suffix).suffix
        recalls = [self._rouge.score(suffix, g.text)["rouge1"].recall for g in generations[0]]
        return Bounded.exact(float(np.mean(recalls)))
