"""How far bisection refines a text: to the precision its scores need, not every value to ε.

The loss score is the mean of a text's log-probs, Min-K% Prob the mean of its lowest k% (Shi et
al. 2024, eq. 1); both are a mean of the lowest k% (k = 100 for the mean), and such a score is
non-decreasing in every value, so bounds on the values bound it:

    mean_lowest_k(lower) ≤ score ≤ mean_lowest_k(upper)   (every value in [lower_i, upper_i]).

Bisection narrows brackets until that interval is at most ε wide for every k the requested
scores read. A target that provably cannot be among the lowest k% (at least E other values lie
below its lower bound, E the set size) keeps a coarse bracket; for the mean, listed targets
(exact) let unlisted ones stay wider than ε. Values keep their own bounds: each lies within them.

Why the refinement ends with the interval at most ε: once every bracket that may hold one of the
lowest k% is at most ε wide, the E values lowest by their lower bounds all may (their lower
bound is below the E-th smallest upper bound), so mean_lowest_k(upper) − mean_lowest_k(lower) ≤
their mean width ≤ ε.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....scorers.bounded import set_size
from .flips import BIAS_ROUNDING_SLACK


def score_widths(lower: np.ndarray, upper: np.ndarray, percents: Sequence[float]) -> list[float]:
    """Width (nats) of each score's interval, mean_lowest_k(upper) − mean_lowest_k(lower), per k.

    Args:
        lower, upper: shape (n,): every value's bounds (nats; −inf for a value known only from
            above, which makes the width +inf).
        percents: the k of each score, in (0, 100].

    Raises:
        BlackboxMIAError: n < 1 or a k outside (0, 100] (from :func:`~blackbox_mia.scorers.base.set_size`).
    """
    low, high = np.sort(lower), np.sort(upper)
    widths = []
    for k in percents:
        e = set_size(len(low), k)
        widths.append(float(np.mean(high[:e]) - np.mean(low[:e])))
    return widths


def to_refine(
    lower: np.ndarray, upper: np.ndarray, open_: np.ndarray, percents: Sequence[float], epsilon: float
) -> np.ndarray:
    """Which brackets to halve next: for each score whose interval is wider than ε, the open
    brackets that may hold one of its lowest k%, widest first, as many as its excess needs;
    without scores (``percents`` empty), every open bracket wider than ε (every value to ε).

    Halving a bracket of width w inside the lowest E narrows a mean of E values by about w / 2E;
    brackets are taken, widest first, until those gains cover the score's width − ε (all of
    them when they cannot). The estimate only sizes a round: the caller asks again until no
    bracket is returned, so the rule never decides when a score is precise enough.

    Args:
        lower, upper: shape (n,): every value's current bounds (nats).
        open_: shape (n,), bool: whether the value's bracket can still be narrowed.
        percents: the k of each score (100: the mean), in (0, 100]; empty: every value to ε.
        epsilon: the width every score's interval must reach (nats), > 0.

    Returns:
        The indices (ascending) to halve now; empty when every score's interval is at most ε, or
        no bracket wider than ε may matter (then a value known only from above keeps a score's
        interval open: the score carries that bound).
    """
    widths = upper - lower
    refinable = open_ & (widths > epsilon + BIAS_ROUNDING_SLACK)
    if not len(percents):
        return np.flatnonzero(refinable)
    chosen = np.zeros(len(lower), dtype=bool)
    for k, width in zip(percents, score_widths(lower, upper, percents)):
        if width <= epsilon + BIAS_ROUNDING_SLACK:
            continue
        e = set_size(len(lower), k)
        cutoff = np.sort(upper)[e - 1]  # a value whose lower bound reaches this is not among the lowest E
        may = np.flatnonzero(refinable & (lower < cutoff))
        widest = may[np.argsort(-widths[may], kind="stable")]
        gains = np.cumsum(widths[widest]) / (2 * e)
        chosen[widest[: int(np.searchsorted(gains, width - epsilon - BIAS_ROUNDING_SLACK)) + 1]] = True
    return np.flatnonzero(chosen)
