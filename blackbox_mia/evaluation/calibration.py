"""Decision thresholds for membership flags: a text is flagged when ``score > threshold``.

A contamination rate is only meaningful with a calibrated false-positive rate (docs/design.md §5):
the default rule sets the threshold on known non-members for a target FPR. Two rules from the
literature that need labelled members too are also provided: the accuracy-maximising
threshold (Shi et al. 2024, Min-K% Prob, §5) and the F1-maximising one (Ye et al. 2024, PAC,
§5.7). Both are optimistic when evaluated on the set they were chosen on.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..key_aliases import THRESHOLD_KEYS, with_old_keys
from ..types import BlackboxMIAError
from .metrics import roc
from .prevalence import finite_scores

RULES = ("fpr", "max_accuracy", "max_f1")


@dataclass(frozen=True)
class Threshold:
    """A calibrated threshold; flag = ``score > value``.

    Attributes:
        value: the threshold, in score units (may be -inf: flag everything).
        rule: ``"fpr"``, ``"max_accuracy"`` or ``"max_f1"``.
        target_fpr: the FPR asked for (rule ``"fpr"``), else None.
        realised_fpr: fraction of calibration non-members with score > value (measured).
        tpr: fraction of calibration members with score > value; None without members.
        n_calibration_nonmembers, n_calibration_members: calibration set sizes.
        accuracy, f1: on the calibration set when members are given, else None.
        note: a caveat (e.g. too few non-members for the target FPR), else None.
    """

    value: float
    rule: str
    target_fpr: float | None
    realised_fpr: float
    tpr: float | None
    n_calibration_nonmembers: int
    n_calibration_members: int
    accuracy: float | None = None
    f1: float | None = None
    note: str | None = None

    def flag(self, scores) -> np.ndarray:
        """Boolean flags of shape (n,) for scores of shape (n,): ``score > value``."""
        return np.asarray(scores, dtype=np.float64) > self.value

    def to_dict(self) -> dict:
        """All fields as a dict (``value`` may be -inf; the report writes it as null), plus the
        old name ``fpr`` of ``realised_fpr`` for one release (:mod:`blackbox_mia.key_aliases`)."""
        return with_old_keys(asdict(self), THRESHOLD_KEYS)


def calibrate(
    scores_nonmembers,
    scores_members=None,
    rule: str = "fpr",
    target_fpr: float = 0.05,
) -> Threshold:
    """Choose a membership threshold from calibration scores.

    Rule ``"fpr"`` (default) uses non-member scores only. With n sorted non-member scores
    s_(1) ≤ … ≤ s_(n) and target α, the threshold is the order statistic s_(j) with
    j = ⌈(n + 1)(1 − α)⌉ — the split-conformal quantile (Vovk et al. 2005; Angelopoulos &
    Bates 2021, "A gentle introduction to conformal prediction"). This is conservative twice:
    at most n − j ≤ (n + 1)α − 1 < nα calibration non-members score strictly above it
    (empirical FPR < α, ties only lower it), and for a fresh non-member exchangeable with
    the calibration ones P(score > s_(j)) ≤ α. When n < 1/α − 1, j > n: no calibration value
    guarantees α; the threshold is then the largest non-member score (empirical FPR 0) and
    ``note`` says so.

    Rules ``"max_accuracy"`` (Shi et al. 2024 §5) and ``"max_f1"`` (Ye et al. 2024 §5.7)
    need members too; they scan every operating point of sklearn's ROC on the pooled
    calibration set and keep the best (the first, i.e. the highest threshold, on ties). The
    threshold value is the highest pooled score that is not flagged (-inf when every text is
    flagged), so that ``score > value`` reproduces the chosen operating point.

    Args:
        scores_nonmembers: shape (n0,), scores of known non-members (higher = member).
        scores_members: shape (n1,), scores of known members, or None.
        rule: one of ``RULES``.
        target_fpr: α in (0, 1), rule ``"fpr"`` only.

    Returns:
        :class:`Threshold`; ``tpr``, ``accuracy``, ``f1`` filled when members are given.

    Raises:
        BlackboxMIAError: unknown rule, empty or non-finite scores, target outside (0, 1),
            or a ``max_*`` rule without members.
    """
    neg = finite_scores(scores_nonmembers, "calibration non-member")
    pos = None if scores_members is None else finite_scores(scores_members, "calibration member")
    if rule not in RULES:
        raise BlackboxMIAError(f"unknown threshold rule {rule!r}; choose from {RULES}")
    note = None
    if rule == "fpr":
        n = len(neg)
        j = conformal_rank(n, target_fpr)
        if (n + 1) * (1 - target_fpr) - 1e-9 > n:  # no rank guarantees the target
            need = math.ceil(1 / target_fpr - 1 - 1e-9)
            note = (
                f"{n} non-members are too few to guarantee FPR ≤ {target_fpr:g} out of sample "
                f"(need ≥ {need}); threshold = largest non-member score"
            )
        value = float(np.sort(neg)[j - 1])
        target = float(target_fpr)
    else:
        if pos is None:
            raise BlackboxMIAError(f"rule {rule!r} needs member calibration scores")
        value = _best_operating_threshold(neg, pos, rule)
        target = None
    realised_fpr = float(np.mean(neg > value))
    accuracy = f1 = tpr = None
    if pos is not None:
        tp, fp = int(np.sum(pos > value)), int(np.sum(neg > value))
        tpr = tp / len(pos)
        accuracy = (tp + len(neg) - fp) / (len(pos) + len(neg))
        f1 = 2 * tp / (2 * tp + fp + len(pos) - tp)
    return Threshold(
        value=value,
        rule=rule,
        target_fpr=target,
        realised_fpr=realised_fpr,
        tpr=tpr,
        n_calibration_nonmembers=len(neg),
        n_calibration_members=0 if pos is None else len(pos),
        accuracy=accuracy,
        f1=f1,
        note=note,
    )


def conformal_rank(n: int, target_fpr: float) -> int:
    """The rank j (1-based, in ascending order) of the non-member score that rule ``"fpr"``
    uses as threshold: j = min(n, ⌈(n + 1)(1 − α)⌉) (see :func:`calibrate`).

    With continuous scores exactly n − j calibration non-members lie above it, and the
    threshold's true FPR is distributed Beta(n − j + 1, j) over calibration draws (Vovk 2012,
    "Conditional validity of inductive conformal predictors"; Angelopoulos & Bates 2021 §3.2).

    Raises:
        BlackboxMIAError: ``target_fpr`` outside (0, 1) or n < 1.
    """
    if not 0 < target_fpr < 1:
        raise BlackboxMIAError(f"target_fpr must be in (0, 1), got {target_fpr}")
    if n < 1:
        raise BlackboxMIAError("need at least one calibration non-member")
    # Rounding guard: (n+1)(1-α) = 95.0000000001 must give 95, not 96.
    return min(n, math.ceil((n + 1) * (1 - target_fpr) - 1e-9))


def min_nonmembers(target_fpr: float) -> int:
    """The fewest calibration non-members for which rule ``"fpr"`` leaves at least one of them
    above the threshold, so that the FPR is estimated rather than only bounded:
    the smallest n with n − ⌈(n + 1)(1 − α)⌉ ≥ 1 (39 at α = 5%, 199 at 1%).

    Raises:
        BlackboxMIAError: ``target_fpr`` outside (0, 1).
    """
    if not 0 < target_fpr < 1:
        raise BlackboxMIAError(f"target_fpr must be in (0, 1), got {target_fpr}")
    n = max(1, math.floor(2 / target_fpr - 1) - 1)
    while n - conformal_rank(n, target_fpr) < 1:
        n += 1
    return n


def _best_operating_threshold(neg: np.ndarray, pos: np.ndarray, rule: str) -> float:
    """Threshold (for ``score > t``) of the ROC point maximising accuracy or F1."""
    y = np.r_[np.zeros(len(neg)), np.ones(len(pos))]
    s = np.r_[neg, pos]
    fpr, tpr, thresholds = roc(y, s)  # the one ROC (evaluation.metrics)
    p, n = len(pos), len(neg)
    tp, fp = tpr * p, fpr * n
    if rule == "max_accuracy":
        objective = (tp + n - fp) / (p + n)
    else:
        denom = 2 * tp + fp + (p - tp)
        objective = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    best = int(np.argmax(objective))
    # roc flags score >= thresholds[best]; the same set is score > (next lower score).
    below = s[s < thresholds[best]]
    return float(below.max()) if below.size else -math.inf
