"""CDD, contamination detection via output distribution (Dong, Jiang, Jin & Li 2024,
"Generalization or Memorization: Data Contamination and Trustworthy Evaluation for Large
Language Models", ACL Findings, §3): a text-only scorer.

A model that memorised a text answers its prompt the same way however it samples: its output
distribution is *peaked* around the greedy output. CDD measures the share of sampled outputs
within a small token edit distance of the greedy one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

from ..types import Generation
from .bounded import Bounded
from .base import register_scorer
from .text_only import GenerationRequest, SampledContinuation, TargetView, split_halves


def peakedness(greedy: Sequence[int], samples: Sequence[Sequence[int]], alpha: float) -> float:
    """Peak(M; x) = F(α·l) = (1/n) Σ_i 1[ED(s_t, s_i) ≤ α·l] (Dong et al. 2024, §3.2, eqs. 2-4).

    Args:
        greedy: the greedy output s_t (token ids).
        samples: the ``n`` sampled outputs s_i (token ids), n >= 1.
        alpha: the similarity threshold α (a fraction of l).

    ``ED`` is the token-level Levenshtein distance (insertions, deletions, substitutions cost 1;
    :mod:`rapidfuzz`), ``l`` the length of the longest output among ``samples`` and ``greedy``.
    Returns a share in [0, 1]; 1.0 when every output is empty (all identical).
    """
    longest = max(len(greedy), *(len(s) for s in samples))
    within = sum(Levenshtein.distance(list(greedy), list(s)) <= alpha * longest for s in samples)
    return within / len(samples)


@register_scorer
@dataclass(frozen=True)
class CDD(SampledContinuation):
    """score = Peak(M; x) of :func:`peakedness`: the share of ``n`` samples at ``temperature``
    within token edit distance α·l of the greedy output (higher = more peaked = member).

    The paper's settings (Dong et al. 2024, §4.1): 50 samples at temperature 0.8, α = 0.05; the
    binary decision Peak > ξ = 0.01 is left to the calibrated threshold of ``sweep``. The paper's
    prompt is a benchmark's question; on a text we prompt with its first ``prefix`` share of
    tokens (the continuation form, as SaMIA) and generate up to the rest's length (at most
    ``max_new_tokens``, our cap; we do not recall the paper's output cap).

    Parameters: those of :class:`~.text_only.SampledContinuation` (``n`` = 50, ``temperature``
    = 0.8, ``prefix``, ``seed``, ``form``: the instruction form's wording is ours), and
        alpha: α, the edit-distance threshold as a fraction of the longest output.
        max_new_tokens: at most this many tokens per output.

    Requests per text: ``n + 1`` (the greedy output, then the samples). Outputs are compared as
    the target tokenizer's encoding of their texts (the same on every backend, log-probs or not).

    Raises:
        BlackboxMIAError: a bad ``form``; a text of fewer than two tokens.
    """

    name = "cdd"
    ranges = {**SampledContinuation.ranges, "alpha": {"at_least": 0.0, "at_most": 1.0}, "max_new_tokens": {"at_least": 1}}

    n: int = 50
    temperature: float = 0.8
    alpha: float = 0.05
    max_new_tokens: int = 128

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        halves = split_halves(self.name, text, target, self.prefix, self.max_new_tokens)
        prompt = self.prompt(halves, target)
        budget = len(halves.suffix_ids)
        return [GenerationRequest(prompt, budget), GenerationRequest(prompt, budget, self.temperature, self.n, self.seed)]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        greedy, samples = generations[0][0], generations[1]
        return Bounded.exact(peakedness(target.codec.encode(greedy.text), [target.codec.encode(s.text) for s in samples],
                                        self.alpha))
