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

PREFIXES = {0: ("prefix", "NON-members"), 1: ("member_prefix", "MEMBERS")}
"""By the label of its texts (1 = member): the scorer parameter that names a prefix file, and what
the file holds."""


@lru_cache(maxsize=8)
def prefix_shots(spec: str, shots: int, scorer: str, label: int = 0) -> tuple[str, ...]:
    """The texts of a prefix: the first ``shots`` texts of the dataset ``spec`` (a shipped name or
    a JSONL path), known non-members of the target (``label`` 0: ReCaLL's P, given to ``scorer``
    as ``prefix=``) or known members (``label`` 1: Con-ReCall's, ``member_prefix=``).

    Raises:
        BlackboxMIAError: no ``spec`` given, an unreadable or empty dataset, fewer than ``shots``
            items, or one of them labelled ``1 - label`` (each in one line naming the parameter).
    """
    from ..datasets import load_shipped_or_jsonl

    parameter, known = PREFIXES[label]
    if not spec:
        raise BlackboxMIAError(f"scorer {scorer!r} needs {parameter}=PATH: a JSONL of known {known} of the target "
                               "(its first `shots` texts are the prefix; keep them out of the calibration)")
    try:
        items = load_shipped_or_jsonl(spec).items
    except BlackboxMIAError as exc:
        raise BlackboxMIAError(f"scorer {scorer!r}: {parameter}={spec}: {exc}") from exc
    if len(items) < shots:
        raise BlackboxMIAError(f"scorer {scorer!r}: {parameter}={spec} holds {len(items)} texts, shots={shots} asks for more")
    wrong = next((item for item in items[:shots] if item.label == 1 - label), None)
    if wrong is not None:
        raise BlackboxMIAError(f"scorer {scorer!r}: {parameter}={spec} is for known {known}, but its item "
                               f"{wrong.id!r} is labelled {wrong.label}")
    return tuple(item.text for item in items[:shots])


def prefix_text(spec: str, shots: int, scorer: str, label: int = 0) -> str:
    """A prefix: :func:`prefix_shots` joined by :data:`PREFIX_SEPARATOR`."""
    return PREFIX_SEPARATOR.join(prefix_shots(spec, shots, scorer, label))


def conditional_mean(scorer: str, text: str, lp: TokenLogprobs, conditioned: TokenLogprobs) -> Bounded:
    """LL(x | P): the mean log-prob (nats/token) of the text's own N tokens ``lp`` when scored
    after a prefix: the last N of ``conditioned`` (the log-probs of ``P + "\\n\\n" + x``).

    Raises:
        BlackboxMIAError: those last N tokens are not x's (the tokenizer merged across the
            boundary), or x has no token.
    """
    n = len(lp.token_ids)
    if n == 0 or n > len(conditioned.token_ids) or not np.array_equal(conditioned.token_ids[-n:], lp.token_ids):
        raise BlackboxMIAError(f"scorer {scorer!r}: the text is tokenized differently after the prefix "
                               f"({text[:40]!r}...); its conditional log-likelihood is unknown")
    values = BoundedValues.of(conditioned)
    return BoundedValues(values.value[-n:], values.lower[-n:], values.upper[-n:]).mean()


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
        return [Need(prefix_text(self.prefix, self.shots, self.name) + PREFIX_SEPARATOR + text)]

    def conditioning_texts(self) -> tuple[str, ...]:
        return prefix_shots(self.prefix, self.shots, self.name)

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return conditional_mean(self.name, text, lp, aux[0]) / BoundedValues.of(lp).mean()
