"""New values for a problem's numbers: seeded, injective draws and the old → new value map.

A number's significant part m (in units of its last decimal place, without trailing zeros:
80,000 → m = 8, 2.50 → m = 25) moves by a seeded non-zero offset d,
|d| ≤ max(min_offset, min(max_offset, ⌈rel_offset·m⌉)), staying ≥ 2; decimal places and
trailing zeros are kept (80,000 → 60,000), percentages stay ≤ 100 when they were, and two
different numbers never get the same new value. 0 and 1 stay (they are structural).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

from .base import ControlConfig, Skip
from .numbers import Num, ValueMap, decimal_places, find_numbers, places_of, word_values


@dataclass(frozen=True)
class Question:
    """A question's numbers, parsed once per item."""

    text: str
    numbers: list[Num]
    frozen: set[Fraction]
    first: dict[Fraction, Num]  # changeable value → its first occurrence
    percent: set[Fraction]


def parse_question(question: str) -> Question:
    """The question's numbers, its frozen values and the first occurrence of each changeable one.

    Raises:
        Skip: (final) the question has no number other than 0 and 1 written in digits.
    """
    numbers = find_numbers(question, question=True)
    frozen = word_values(question) | {n.value for n in numbers if not n.free}
    first: dict[Fraction, Num] = {}
    for n in numbers:
        if n.free and n.value not in (0, 1):  # 0 and 1 are structural (none, unit): kept
            first.setdefault(n.value, n)
    if not first:
        raise Skip("no number in the question")
    percent = {n.value for n in numbers if n.free and n.percent}
    return Question(question, numbers, frozen, dict(sorted(first.items())), percent)


def _offset_bound(m: int, config: ControlConfig) -> int:
    """Largest |offset| for a significant part ``m``: ⌈rel_offset·m⌉ clipped to [min_offset, max_offset]."""
    return max(config.min_offset, min(config.max_offset, math.ceil(config.rel_offset * m)))


def candidates(n: Num, config: ControlConfig) -> list[Fraction]:
    """New values for a number: its significant part m (no trailing zeros, in units of its
    last decimal place) moved by a non-zero offset, staying ≥ 2; percentages stay ≤ 100."""
    u = int(n.value * 10**n.decimals)
    zeros = 0
    while u >= 10 and u % 10 == 0:
        u //= 10
        zeros += 1
    r = _offset_bound(u, config)
    values = [Fraction((u + d) * 10**zeros, 10**n.decimals) for d in range(-r, r + 1) if d and u + d >= 2]
    if n.percent and n.value <= 100:
        values = [v for v in values if v <= 100] or values
    return values


def draw_values(q: Question, item_id: str, attempt: int, config: ControlConfig) -> dict[Fraction, Fraction]:
    """New values of the question's changeable numbers for one attempt (seeded, injective).

    Attempts in the first half change every value; later ones a random non-empty subset.

    Raises:
        Skip: (retry) no injective choice.
    """
    rng = random.Random(f"{config.seed}:{item_id}:{attempt}")
    values = list(q.first)
    change = set(values)
    if attempt >= config.max_attempts // 2 and len(values) > 1:
        change = {v for v in values if rng.random() < 0.5} or {rng.choice(values)}
    taken = {v for v in values if v not in change}
    new = {}
    for v in values:
        if v not in change:
            new[v] = v
            continue
        choices = [c for c in candidates(q.first[v], config) if c not in taken]
        if not choices:
            raise Skip("no injective draw", retry=True)
        new[v] = rng.choice(choices)
        taken.add(new[v])
    return new


def value_table(q: Question, new: dict[Fraction, Fraction]) -> ValueMap:
    """The value map of one draw: ``new`` plus, for a percentage p%, the fraction p/100 → w/100."""
    table = ValueMap(q.frozen)
    for v, w in new.items():
        table.add(v, w)
        if v in q.percent:
            table.add(v / 100, w / 100)
    return table


def check_clean(old: Fraction, new: Fraction, old_text: str) -> None:
    """Raise ``Skip`` (retry) unless ``new`` is as clean as ``old``: non-negative, non-zero where
    ``old`` was, an integer where ``old`` was, else a terminating decimal with at most
    max(2, decimals of ``old_text``) places."""
    if new < 0 or (old != 0 and new == 0):
        raise Skip("unclean result", retry=True)
    if old.denominator == 1:
        if new.denominator != 1:
            raise Skip("unclean result", retry=True)
        return
    places = decimal_places(new)
    if places is None or places > max(2, places_of(old_text)):
        raise Skip("unclean result", retry=True)
