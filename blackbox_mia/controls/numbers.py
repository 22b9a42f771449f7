"""Numbers in benchmark text: finding them, their exact values, writing new values back.

A number as written is digits with optional thousands commas and decimals (``80,000``,
``2.50``), optionally followed by ``%``. It is *free* (may be rewritten) unless it is glued to
letters, part of a fraction in a question (``1/2``), a clock time (``3:30``, ``10 p.m.``), an
ordinal (``2nd``) or a list marker. Numbers written as words (``three``, ``half``, ``dozen``)
are never rewritten: their values are *frozen* (:func:`word_values`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .base import Skip

# A number as written in text: thousands groups with commas, optional decimals.
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
# After a number: an ordinal suffix or a clock time ("2nd", "10 p.m.", "7 o'clock").
_ORDINAL_OR_CLOCK = re.compile(r"(?:st|nd|rd|th)\b|\s*(?:[ap]\.?m\b\.?|o'?clock\b)", re.IGNORECASE)

# Values of numbers written as words; their values are frozen (never substituted).
NUMBER_WORDS: dict[str, tuple[Fraction, ...]] = {
    **{w: (Fraction(i),) for i, w in enumerate((
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"))},
    **{w: (Fraction(10 * i),) for i, w in enumerate(
        ("thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"), start=3)},
    "hundred": (Fraction(100),), "thousand": (Fraction(1000),), "million": (Fraction(10**6),),
    "dozen": (Fraction(12),), "dozens": (Fraction(12),), "pair": (Fraction(2),),
    "half": (Fraction(2), Fraction(1, 2)), "halves": (Fraction(2), Fraction(1, 2)),
    "twice": (Fraction(2),), "double": (Fraction(2),), "doubled": (Fraction(2),),
    "triple": (Fraction(3),), "tripled": (Fraction(3),), "thrice": (Fraction(3),),
    "quarter": (Fraction(4), Fraction(1, 4)), "quarters": (Fraction(4), Fraction(1, 4)),
    "third": (Fraction(3), Fraction(1, 3)), "thirds": (Fraction(3), Fraction(1, 3)),
    "fourth": (Fraction(4), Fraction(1, 4)), "fifth": (Fraction(5), Fraction(1, 5)),
    "once": (Fraction(1),), "single": (Fraction(1),), "percent": (Fraction(100),),
}
_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)?")


@dataclass(frozen=True)
class Num:
    """A number occurrence: span, token, exact value, and how it is written."""

    start: int
    end: int
    token: str
    value: Fraction
    decimals: int
    commas: bool
    percent: bool
    free: bool  # may be rewritten (not glued to letters, not a fraction part, time or ordinal)


def places_of(token: str) -> int:
    """Decimal places written in a number token (``"2.50"`` → 2)."""
    return len(token.split(".")[1]) if "." in token else 0


def value_of(token: str) -> Fraction:
    """Exact value of a number token (``"1,250.5"`` → 2501/2; a ``$`` is ignored)."""
    return Fraction(token.replace(",", "").replace("$", ""))


def find_numbers(text: str, question: bool) -> list[Num]:
    """Number occurrences of ``text``. In a question, fraction parts (a/b) are not free."""
    out = []
    for m in NUMBER.finditer(text):
        token = m.group()
        before = text[m.start() - 1] if m.start() else " "
        before2 = text[m.start() - 2] if m.start() > 1 else " "
        after = text[m.end()] if m.end() < len(text) else " "
        after2 = text[m.end() + 1] if m.end() + 1 < len(text) else " "
        glued = before.isalpha() or after.isalpha() or before in "_." or (before == "-" and before2.isalpha())
        time_or_list = before == ":" or after == ":" or (after in ".," and after2.isdigit())
        fraction = question and ((before == "/" and before2.isdigit()) or (after == "/" and after2.isdigit()))
        ordinal = bool(_ORDINAL_OR_CLOCK.match(text, m.end()))
        out.append(Num(
            m.start(), m.end(), token, value_of(token), places_of(token), "," in token,
            after == "%", not (glued or time_or_list or fraction or ordinal),
        ))
    return out


def word_values(text: str) -> set[Fraction]:
    """Values of the numbers written as words (``twenty-five`` → 20, 5 and 25)."""
    values: set[Fraction] = set()
    for m in _WORD.finditer(text.lower()):
        parts = m.group().split("-")
        found = [NUMBER_WORDS[p] for p in parts if p in NUMBER_WORDS]
        for vals in found:
            values.update(vals)
        if len(parts) == 2 and len(found) == 2:
            values.add(found[0][0] + found[1][0])
    return values


def decimal_places(value: Fraction) -> int | None:
    """Decimal places of a terminating expansion (None when it does not terminate, or > 12)."""
    if value.denominator == 1:
        return 0
    for places in range(1, 13):
        if (value * 10**places).denominator == 1:
            return places
    return None


def format_number(value: Fraction, decimals: int = 0, commas: bool = False) -> str:
    """``value`` written with at least ``decimals`` places (more if it needs them).

    Raises:
        Skip: (retry) the value has no short terminating decimal expansion.
    """
    places = decimal_places(value)
    if places is None:
        raise Skip("unclean result", retry=True)
    places = max(places, decimals)
    sign = "-" if value < 0 else ""
    whole, frac = divmod(int(abs(value) * 10**places), 10**places)
    text = f"{whole:,}" if commas else str(whole)
    return sign + text + (f".{frac:0{places}d}" if places else "")


class ValueMap:
    """Old value → new value(s), with the frozen values that make a lookup ambiguous."""

    def __init__(self, frozen: set[Fraction]):
        self.frozen = frozen
        self.new: dict[Fraction, set[Fraction]] = {}

    def add(self, old: Fraction, new: Fraction) -> None:
        """Record ``old`` → ``new`` (an old value may collect several new ones: a conflict)."""
        self.new.setdefault(old, set()).add(new)

    def lookup(self, old: Fraction) -> Fraction:
        """The new value (the old one for an unmapped constant).

        Raises:
            Skip: ``old`` maps to several values (retry), or is mapped and frozen (final).
        """
        targets = self.new.get(old)
        if not targets or targets == {old}:
            return old
        if len(targets) > 1:
            raise Skip("conflicting mapping", retry=True)
        if old in self.frozen:
            raise Skip("ambiguous number (also written as a word or fraction)")
        return next(iter(targets))

    def as_text(self) -> dict[str, str]:
        """The changed entries as ``{old: new}`` strings."""
        return {format_number(k): format_number(next(iter(v))) for k, v in sorted(self.new.items()) if v != {k}}


def rewrite_numbers(text: str, numbers: Sequence[Num], new_value: Callable[[Num], Fraction]) -> str:
    """``text`` with every free number replaced by ``new_value(number)`` in its own format."""
    out, pos = [], 0
    for n in numbers:
        if not n.free:
            continue
        value = new_value(n)
        if value != n.value:
            out += [text[pos:n.start], format_number(value, n.decimals, n.commas)]
            pos = n.end
    return "".join(out) + text[pos:]


def substitute(expr: str, literals: Sequence[Num], table: ValueMap) -> str:
    """``expr`` with every literal looked up in ``table``."""
    out, pos = [], 0
    for n in literals:
        new = table.lookup(n.value)
        if new != n.value:
            out += [expr[pos:n.start], format_number(new, n.decimals, n.commas)]
            pos = n.end
    return "".join(out) + expr[pos:]
