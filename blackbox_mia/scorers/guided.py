"""Guided instruction (Golchin & Surdeanu 2024, ICLR, "Time Travel in LLMs: Tracing Data
Contamination in Large Language Models", §3): a text-only scorer.

The model completes the second piece of an instance twice: told the dataset and split it comes
from (*guided*), and with a general instruction that names no dataset (*general*). A model that
saw the instance reproduces more of the true second piece when guided; the per-item score is the
difference of the two completions' overlap (ROUGE-L) with the true second piece, and the
dataset-level test asks whether the mean difference is above zero
(:func:`~blackbox_mia.evaluation.paired_difference.paired_difference_test`). The paper's second
test counts exact and near-exact matches of the guided completions (judged by GPT-4 few-shot:
contaminated at one exact or two near-exact matches); ``metric=exact`` and ``metric=near_exact``
give those flags per item, from a deterministic rule instead of the GPT-4 judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..types import BlackboxMIAError, Generation
from .bounded import Bounded
from .base import register_scorer
from .text_only import (
    GenerationRequest,
    GenerationScorer,
    Halves,
    TargetView,
    check_form,
    fit_window,
    split_halves,
    use_instruction,
)

if TYPE_CHECKING:
    from rouge_score import rouge_scorer

METRICS = ("difference", "exact", "near_exact")
NEAR_EXACT_ROUGE_L = 0.75
"""A guided completion whose ROUGE-L F with the true second piece is at least this is a near-exact
match (ours: the paper has GPT-4 judge near-exact matches; we have no judge)."""
EXACT_RULE, NEAR_EXACT_RULE = 1, 2  # the paper's Algorithm 2: contaminated at >= 1 exact or >= 2 near-exact matches

GUIDED_INSTRUCTION = ("Instruction: You are provided with the first piece of an instance from the {split} split of the "
                      "{dataset} dataset. Finish the second piece of the instance as exactly appeared in the dataset. "
                      "Only rely on the original form of the instance in the dataset to finish the second piece.\n\n"
                      "First Piece: {prefix}\n\nSecond Piece:")
GENERAL_INSTRUCTION = ("Instruction: Finish the second piece based on the first piece, such that these two pieces "
                       "become a single instance.\n\nFirst Piece: {prefix}\n\nSecond Piece:")
"""The paper's prompts for instances of one piece (their Table 1, XSum's wording with "summary"
generalised to "instance", as we recall it)."""
GENERAL_HEADER = "Finish the second piece based on the first piece, such that these two pieces become a single instance.\n\n"
"""The continuation form's general prompt before the prefix (ours: the paper uses chat models only)."""


def normalise(text: str) -> str:
    """Lowercased, whitespace runs collapsed to one space, trimmed: what an exact match compares."""
    return " ".join(text.lower().split())


@register_scorer
@dataclass(frozen=True)
class GuidedInstruction(GenerationScorer):
    """score (``metric=difference``) = ROUGE-L(guided completion, x_suffix) − ROUGE-L(general
    completion, x_suffix), in [-1, 1]; higher = the dataset's cue helps = member
    (Golchin & Surdeanu 2024, §3.1-3.2; ROUGE-L F-measure of ``rouge_score``, no stemmer).
    ``metric=exact``: 1 when the guided completion equals the suffix (:func:`normalise`d), else 0;
    ``metric=near_exact``: 1 when its ROUGE-L is at least :data:`NEAR_EXACT_ROUGE_L` (or it is
    exact), else 0. The three metrics read the very same two generations (sent once).

    The paper's settings: greedy decoding (temperature 0), a random-length first piece of each
    instance (we cut after ``prefix`` of its tokens: deterministic), GPT-3.5/GPT-4 through chat.
    Forms: ``instruction`` (:data:`GUIDED_INSTRUCTION` naming ``dataset`` and ``split`` vs
    :data:`GENERAL_INSTRUCTION`; a leading "Second Piece:" in the answer is dropped),
    ``continuation`` (ours, for base models, which follow no instruction: guided = the prefix as
    token ids, the instance in its own dataset's format; general = :data:`GENERAL_HEADER` then the
    prefix, the instance out of its context; a prompt that with its budget exceeds the window
    keeps its last tokens), ``auto`` (instruction on chat targets).

    Parameters:
        dataset: the dataset's name as the guided prompt gives it (``GSM8K``); required by the
            instruction form.
        split: the split named (``test``).
        prefix: fraction of the text's tokens in the first piece (0 < prefix < 1).
        max_suffix: the second piece (and the token budget) is at most this many tokens.
        metric: ``difference``, ``exact`` or ``near_exact``.
        form: ``continuation``, ``instruction`` or ``auto``.

    Requests per text: 2, greedy (guided, general); tokens: both prompts + 2 × the suffix's length.

    Raises:
        BlackboxMIAError: a bad ``form`` or ``metric``; the instruction form without ``dataset``
            (when the requests are built); a text of fewer than two tokens.
    """

    name = "guided"
    ranges = {"prefix": {"above": 0.0, "below": 1.0}, "max_suffix": {"at_least": 1}}

    dataset: str = ""
    split: str = "test"
    prefix: float = 0.5
    max_suffix: int = 128
    metric: str = "difference"
    form: str = "auto"

    def __post_init__(self) -> None:
        check_form(self.name, self.form)
        if self.metric not in METRICS:
            raise BlackboxMIAError(f"scorer {self.name!r}: metric must be one of {', '.join(METRICS)}, got {self.metric!r}")

    @cached_property
    def _rouge(self) -> rouge_scorer.RougeScorer:
        from rouge_score import rouge_scorer  # imported where used: it loads nltk, which --help never needs

        return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)

    def _halves(self, text: str, target: TargetView) -> Halves:
        return split_halves(self.name, text, target, self.prefix, self.max_suffix)

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        halves = self._halves(text, target)
        budget = len(halves.suffix_ids)
        if use_instruction(self.form, target.chat):
            if not self.dataset:
                raise BlackboxMIAError(f"scorer {self.name!r}: the instruction form names the dataset: give "
                                       f"{self.name}:dataset=NAME (e.g. {self.name}:dataset=GSM8K,split=test)")
            return [GenerationRequest(GUIDED_INSTRUCTION.format(split=self.split, dataset=self.dataset,
                                                                prefix=halves.prefix), budget),
                    GenerationRequest(GENERAL_INSTRUCTION.format(prefix=halves.prefix), budget)]
        general = fit_window(self.name, target.codec.encode(GENERAL_HEADER) + list(halves.prefix_ids), budget, target)
        return [GenerationRequest(halves.prefix_ids, budget), GenerationRequest(general, budget)]

    def overlaps(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> tuple[float, float, bool]:
        """``(guided ROUGE-L, general ROUGE-L, guided exact match)`` of ``text``'s two completions."""
        suffix = self._halves(text, target).suffix
        guided, general = (g[0].text for g in generations)
        if use_instruction(self.form, target.chat):
            guided, general = (c.strip().removeprefix("Second Piece:") for c in (guided, general))
        rouge = [self._rouge.score(suffix, c)["rougeL"].fmeasure for c in (guided, general)]
        return rouge[0], rouge[1], normalise(guided) == normalise(suffix)

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        guided, general, exact = self.overlaps(text, target, generations)
        if self.metric == "exact":
            return Bounded.exact(float(exact))
        if self.metric == "near_exact":
            return Bounded.exact(float(exact or guided >= NEAR_EXACT_ROUGE_L))
        return Bounded.exact(guided - general)

    def dataset_test(self, scores: np.ndarray, seed: int) -> dict:
        """The paper's partition-level decisions on the scores of one partition (e.g. the
        members): ``difference``: :func:`~blackbox_mia.evaluation.paired_difference.paired_difference_test`
        (Algorithm 1); ``exact`` / ``near_exact``: the count of matches and whether it reaches
        the paper's rule (Algorithm 2: >= 1 exact, >= 2 near-exact).

        Raises:
            BlackboxMIAError: no score.
        """
        from ..evaluation.paired_difference import paired_difference_test

        if self.metric == "difference":
            return {"test": "guided vs general overlap, one-sided", **paired_difference_test(scores, seed=seed)}
        if len(scores) == 0:
            raise BlackboxMIAError(f"scorer {self.label!r}: no score to test")
        matches, needed = int(np.sum(scores == 1.0)), EXACT_RULE if self.metric == "exact" else NEAR_EXACT_RULE
        return {"test": f"{self.metric} matches (>= {needed} = contaminated)", "n": len(scores), "matches": matches,
                "significant": matches >= needed}
