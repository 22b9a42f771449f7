"""Scores that carry their interval: what a score is worth when some log-probs are only bounded.

A black-box text's log-probs come with bounds (:attr:`~blackbox_mia.types.TokenLogprobs.lower`,
``upper``; exact on the local backend): a token beyond the bias cap or behind an unsendable prefix
is known only as ``lp_i ∈ [−∞, u_i]``. Scorers therefore compute a :class:`Bounded` number: the
point value from the reported log-probs, and an interval that holds the true score for every
choice of log-probs within their bounds, by interval arithmetic:

* a mean of log-probs is monotone in each of them: ``[mean(lower), mean(upper)]``;
* the mean of the k% smallest (largest) values is monotone too (it is a minimum (maximum) over
  k-subsets of sums), so order statistics bound it the same way: ``[f(lower), f(upper)]``;
* sums, differences, positive scalings and quotients follow interval arithmetic (Moore 1966);
  a quotient whose divisor interval holds 0 is unbounded.

``spread`` is the width, in nats, of the widest log-prob aggregate (a mean, a k% mean) a number
was computed from: a score is reported as a number only when its spread is within the run's
tolerance (:data:`DEFAULT_TOLERANCE_NATS`), else it is ``null`` with the reason. For loss and
Min-K% the spread is the score's own interval width; for the ratios (zlib, lowercase) and
differences (PAC, ref) it is the precision of the means they are made of, while the score's own
interval is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import check_number
from ..option_names import named
from ..types import BlackboxMIAError, TokenLogprobs

DEFAULT_TOLERANCE_NATS = 0.05  # widest log-prob aggregate a reported score may rest on (nats)


def check_tolerance(tolerance: float) -> None:
    """Check a score tolerance (``score_tolerance=``, ``--score-tolerance``): a finite number of
    nats > 0.

    Raises:
        BlackboxMIAError: it is not.
    """
    check_number(named("score_tolerance"), tolerance, above=0)


@dataclass(frozen=True)
class Bounded:
    """A number known to lie in ``[lower, upper]``, with its point value.

    Attributes:
        value: the point value (from the reported log-probs; within the interval).
        lower, upper: the interval (``-inf``/``inf`` where unbounded).
        spread: nats; the width of the widest log-prob aggregate the number is computed from
            (0 when every log-prob is exact, ``inf`` when one aggregate is unbounded).
    """

    value: float
    lower: float
    upper: float
    spread: float = 0.0

    @classmethod
    def exact(cls, value: float) -> Bounded:
        """A number with no uncertainty."""
        return cls(value, value, value, 0.0)

    @property
    def width(self) -> float:
        """``upper - lower`` in the number's own unit (``inf`` when unbounded)."""
        return self.upper - self.lower

    def __add__(self, other: Bounded | float) -> Bounded:
        o = _lift(other)
        return Bounded(self.value + o.value, self.lower + o.lower, self.upper + o.upper, max(self.spread, o.spread))

    def __sub__(self, other: Bounded | float) -> Bounded:
        o = _lift(other)
        return Bounded(self.value - o.value, self.lower - o.upper, self.upper - o.lower, max(self.spread, o.spread))

    def __mul__(self, factor: float) -> Bounded:
        """Scaling by a real ``factor`` > 0 (Con-ReCall's gamma): the ends scale with the value."""
        return Bounded(self.value * factor, self.lower * factor, self.upper * factor, self.spread)

    __rmul__ = __mul__

    def __truediv__(self, other: Bounded | float) -> Bounded:
        """Interval quotient; the value follows IEEE division (``x / 0`` is ±inf or NaN)."""
        o = _lift(other)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(np.float64(self.value) / np.float64(o.value))
        spread = max(self.spread, o.spread)
        if o.lower <= 0.0 <= o.upper:
            return Bounded(value, -math.inf, math.inf, spread)
        with np.errstate(invalid="ignore"):
            ends = [float(np.float64(a) / np.float64(b)) for a in (self.lower, self.upper) for b in (o.lower, o.upper)]
        if any(math.isnan(e) for e in ends):  # ∞/∞: nothing is known
            return Bounded(value, -math.inf, math.inf, spread)
        return Bounded(value, min(ends), max(ends), spread)


def set_size(n: int, percent: float) -> int:
    """E = max(1, floor(n * percent / 100)): size of a k% set of n tokens (Shi et al. 2024, eq. 1).

    Raises:
        BlackboxMIAError: if n < 1 (no scored token) or percent is outside (0, 100].
    """
    if n < 1:
        raise BlackboxMIAError("no scored token: the text is too short for this model's tokenizer")
    if not 0 < percent <= 100:
        raise BlackboxMIAError(f"k must lie in (0, 100] percent, got {percent}")
    return max(1, int(np.floor(n * percent / 100.0 + 1e-9)))


def mean_smallest(values: np.ndarray, percent: float) -> float:
    """Mean of the k% smallest values (set size :func:`set_size`)."""
    e = set_size(len(values), percent)
    return float(np.mean(np.sort(values)[:e]))


def mean_largest(values: np.ndarray, percent: float) -> float:
    """Mean of the k% largest values (set size :func:`set_size`)."""
    e = set_size(len(values), percent)
    return float(np.mean(np.sort(values)[-e:]))


def _lift(x: Bounded | float) -> Bounded:
    return x if isinstance(x, Bounded) else Bounded.exact(float(x))


def mean_of(numbers: Sequence[Bounded]) -> Bounded:
    """The mean of several bounded numbers (each interval's ends averaged)."""
    return Bounded(
        float(np.mean([b.value for b in numbers])),
        float(np.mean([b.lower for b in numbers])),
        float(np.mean([b.upper for b in numbers])),
        max(b.spread for b in numbers),
    )


@dataclass(frozen=True)
class BoundedValues:
    """Per-token values of one text with their bounds: three arrays of shape (N,).

    Built from :class:`~blackbox_mia.types.TokenLogprobs` by :meth:`of` (log-probs in nats);
    :meth:`map` applies a monotone non-decreasing transform (Min-K%++'s z-scores).
    """

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def of(cls, lp: TokenLogprobs) -> BoundedValues:
        """The text's log-probs and their bounds (equal to the log-probs where exact)."""
        lower = lp.logprobs if lp.lower is None else lp.lower
        upper = lp.logprobs if lp.upper is None else lp.upper
        return cls(lp.logprobs, lower, upper)

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> BoundedValues:
        """``fn`` applied to values and bounds; ``fn`` must be monotone non-decreasing."""
        with np.errstate(invalid="ignore"):
            return BoundedValues(fn(self.value), fn(self.lower), fn(self.upper))

    def _aggregate(self, reduce: Callable[[np.ndarray], float]) -> Bounded:
        lower, upper = reduce(self.lower), reduce(self.upper)
        if lower == upper:  # exact (an exact -inf too: a non-finite value, not an imprecise one)
            spread = 0.0
        else:
            spread = upper - lower if math.isfinite(lower) and math.isfinite(upper) else math.inf
        return Bounded(reduce(self.value), lower, upper, max(0.0, spread))

    def mean(self) -> Bounded:
        """The mean of the N values (interval: the means of the bounds)."""
        set_size(len(self.value), 100)  # raises when no token is scored
        return self._aggregate(lambda v: float(np.mean(v)))

    def smallest(self, percent: float) -> Bounded:
        """The mean of the k% smallest values (Shi et al. 2024, eq. 1); bounded by order statistics."""
        return self._aggregate(lambda v: mean_smallest(v, percent))

    def largest(self, percent: float) -> Bounded:
        """The mean of the k% largest values; bounded by order statistics."""
        return self._aggregate(lambda v: mean_largest(v, percent))
