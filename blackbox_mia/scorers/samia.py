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
from .generative import GenerationRequest, GenerationScorer, TargetView, check_form, split_halves, use_instruction

if TYPE_CHECKING:
    from rouge_score import rouge_scorer

CONTINUE_INSTRUCTION = "Continue the following text exactly as it appears in its source, without any comment:\n\n"
"""The instruction form's prompt before the prefix (ours: SaMIA studies base models only)."""


@dataclass(frozen=True)
class SaMIA(GenerationScorer):
    """score = mean over the ``n`` samples of ROUGE-1 recall of the reference suffix
    (Kaneko et al. 2024, §3, eq. 2: SaMIA(x) = (1/n) Σ_i ROUGE-N(x_suffix, x̂_i), N = 1).

    ROUGE-1 recall (Lin 2004): the share of the suffix's unigrams (``rouge_score``'s tokenizer:
    lowercased alphanumeric words, numbers kept) that the sample holds, clipped counts; in [0, 1].
    Higher = more of the true continuation reproduced = member.

    Parameters (the paper's defaults as we recall them; the authors sample 10 continuations of
    the first half at temperature 1.0 (their decoding also used top-k, which we do not)):
        n: samples per text (>= 1).
        temperature: sampling temperature (> 0).
        prefix: fraction of the text's tokens given as the prompt (0 < prefix < 1).
        max_suffix: the reference suffix (and the token budget) is at most this many tokens.
        seed: sample ``j`` uses seed ``seed + j``.
        form: ``continuation`` (the prefix as token ids), ``instruction`` (:data:`CONTINUE_INSTRUCTION`
            and the prefix as text, for chat endpoints: our wording, the paper has none), ``auto``.

    Requests per text: ``n``; tokens: ``n`` × (prefix + up to the suffix's length).

    Raises:
        BlackboxMIAError: a bad ``form``; a text of fewer than two tokens.
    """

    name = "samia"
    ranges = {"n": {"at_least": 1}, "temperature": {"above": 0.0, "at_most": 2.0},
              "prefix": {"above": 0.0, "below": 1.0}, "max_suffix": {"at_least": 1}, "seed": {"at_least": 0}}

    n: int = 10
    temperature: float = 1.0
    prefix: float = 0.5
    max_suffix: int = 128
    seed: int = 0
    form: str = "auto"

    def __post_init__(self) -> None:
        check_form(self.name, self.form)

    @cached_property
    def _rouge(self) -> rouge_scorer.RougeScorer:
        from rouge_score import rouge_scorer  # imported where used: it loads nltk, which --help never needs

        return rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False)

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        halves = split_halves(self.name, text, target, self.prefix, self.max_suffix)
        prompt = CONTINUE_INSTRUCTION + halves.prefix if use_instruction(self.form, target.chat) else halves.prefix_ids
        return [GenerationRequest(prompt, len(halves.suffix_ids), self.temperature, self.n, self.seed)]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        suffix = split_halves(self.name, text, target, self.prefix, self.max_suffix).suffix
        recalls = [self._rouge.score(suffix, g.text)["rouge1"].recall for g in generations[0]]
        return Bounded.exact(float(np.mean(recalls)))
