"""ReCaLL (Xie et al. 2024, "ReCaLL: Membership Inference via Relative Conditional Log-Likelihoods")."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..types import BlackboxMIAError, TokenLogprobs
from .base import Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues

PREFIX_SEPARATOR = "\n\n"
"""Between the prefix's shots, and between the prefix and the scored text."""


@lru_cache(maxsize=8)
def prefix_shots(spec: str, shots: int) -> tuple[str, ...]:
    """The texts of the non-member prefix P: the first ``shots`` texts of the dataset ``spec`` (a
    shipped name or a JSONL path).

    Raises:
        BlackboxMIAError: no ``spec`` given, an unreadable dataset, or fewer than ``shots`` items.
    """
    from ..datasets import load_shipped_or_jsonl

    if not spec:
        raise BlackboxMIAError("scorer 'recall' needs prefix=PATH: a JSONL of known NON-members of the target "
                               "(its first `shots` texts are the prefix; keep them out of the calibration)")
    items = load_shipped_or_jsonl(spec).items
    if len(items) < shots:
        raise BlackboxMIAError(f"scorer 'recall': prefix {spec} holds {len(items)} texts, shots={shots} asks for more")
    return tuple(item.text for item in items[:shots])


def prefix_text(spec: str, shots: int) -> str:
    """The non-member prefix P: :func:`prefix_shots` joined by :data:`PREFIX_SEPARATOR`."""
    return PREFIX_SEPARATOR.join(prefix_shots(spec, shots))


@register_scorer
@dataclass(frozen=True)
class ReCaLL(Scorer):
    """score = LL(x | P) / LL(x), LL = mean lp_i over the tokens of x (nats/token, < 0).

    Xie et al. 2024 (the ReCaLL score; mimir's ``ReCaLLAttack``: ``ll_nonmember / lls``): a non-member
    prefix P lowers a member's log-likelihood more than a non-member's, so the ratio of the two
    negative means grows (higher = member). LL(x | P) is the mean log-prob of x's own tokens
    when ``P + "\\n\\n" + x`` is scored: the last N tokens of that text, which must be x's N
    tokens (else :class:`BlackboxMIAError`: the tokenizer merged across the boundary). A text
    longer than the model's context is scored in sliding windows, so P conditions only the first
    tokens of x (a 128-token canary: docs/contamination.md).

    P: the first ``shots`` texts of ``prefix`` (:func:`prefix_text`), which must be known
    non-members of the target; an audit must keep them out of its calibration and reference
    sets (scored with itself in P, a text's ratio shifts, breaking the exact test's exchangeability).
    """

    name = "recall"
    prefix: str = ""
    shots: int = 1
    ranges = {"shots": {"at_least": 1}}

    def needs(self, text: str) -> list[Need]:
        return [Need(prefix_text(self.prefix, self.shots) + PREFIX_SEPARATOR + text)]

    def conditioning_texts(self) -> tuple[str, ...]:
        return prefix_shots(self.prefix, self.shots)

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        own, conditioned = BoundedValues.of(lp), BoundedValues.of(aux[0])
        n = len(lp.token_ids)
        if n == 0 or n > len(aux[0].token_ids) or not np.array_equal(aux[0].token_ids[-n:], lp.token_ids):
            raise BlackboxMIAError("scorer 'recall': the text is tokenized differently after the prefix "
                                   f"({text[:40]!r}...); its conditional log-likelihood is unknown")
        tail = BoundedValues(conditioned.value[-n:], conditioned.lower[-n:], conditioned.upper[-n:])
        return tail.mean() / own.mean()
