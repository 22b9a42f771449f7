"""Which texts the unlearning audit flags: the ratio ``min_k(after) / min_k(before)`` of each
text's two Min-K% scores, inside a window (Shi et al. 2024 §7) or among the least changed."""

from __future__ import annotations

import math

from .plan import RATIO_WINDOW, UnlearningConfig
from .truth import log_change


def score_ratio(before: float | None, after: float | None) -> float | None:
    """``after / before`` of two Min-K% scores (both <= 0, nats/token); None when either is
    missing or ``before`` is 0 (the ratio is undefined)."""
    if before is None or after is None or before == 0:
        return None
    return after / before


def in_window(ratio: float | None, window: tuple[float, float]) -> bool:
    """Whether ``ratio`` lies strictly inside ``window`` (flagged: unlearning likely failed)."""
    return ratio is not None and window[0] < ratio < window[1]


def least_changed(ratios: list[float | None], fraction: float) -> list[bool]:
    """The scale-free flag rule: flag the texts unlearning changed least.

    Args:
        ratios: per text, in text order, ``min_k(after) / min_k(before)`` (None: undefined).
        fraction: F in (0, 1), the share of the texts to flag.

    Returns:
        Per text, whether it is flagged: the ``max(1, floor(F * n + 0.5))`` texts (``F * n``
        rounded half up, ``n = len(ratios)``) with the smallest ``|ln ratio|``, ties going to
        the earlier text. A text without a positive ratio is never flagged (so fewer are
        flagged when fewer have one).
    """
    n_flag = max(1, math.floor(fraction * len(ratios) + 0.5))
    changes = [log_change(r) for r in ratios]
    ranked = sorted((i for i, c in enumerate(changes) if c is not None), key=lambda i: (changes[i], i))
    chosen = set(ranked[:n_flag])
    return [i in chosen for i in range(len(ratios))]


def flag_texts(ratios: list[float | None], window: tuple[float, float] = RATIO_WINDOW,
               fraction: float | None = None) -> list[bool]:
    """Per text (in text order), whether the audit's flag rule flags it: the share ``fraction``
    least changed (:func:`least_changed`) when it is given, else the ratio strictly inside
    ``window`` (:func:`in_window`)."""
    if fraction is not None:
        return least_changed(ratios, fraction)
    return [in_window(r, window) for r in ratios]


def flag_rule(config: UnlearningConfig) -> str:
    """The flag rule in words (for the console and the report)."""
    if config.flag_fraction is not None:
        return f"the {config.flag_fraction:.0%} of the texts with the smallest |ln ratio| (least changed)"
    return f"ratio inside {config.window[0]:.4g}..{config.window[1]:.4g}"
