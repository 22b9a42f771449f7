"""A non-member control built from the benchmark itself: the same problems with new numbers.

Maini et al. 2024 ("LLM Dataset Inference") compare the scores of suspect data with held-out
data of the same distribution. A public benchmark has no held-out twin, so we make one: every
problem is rewritten with its numbers changed consistently, and the worked solution is replayed
with the new numbers. The rewritten texts never existed before, so they cannot be in any
training set (label 0), yet they keep the benchmark's topic, wording, format and length.

GSM8K construction (one item):

1. Numbers of the question (digits, with thousands commas, decimals, percentages) get new
   values: a number's significant part m (in units of its last decimal place, without trailing
   zeros: 80,000 → m = 8, 2.50 → m = 25) moves by a seeded non-zero offset d,
   |d| ≤ max(2, min(9, ⌈0.3·m⌉)), staying ≥ 2; decimal places and trailing zeros are kept
   (80,000 → 60,000), percentages stay ≤ 100 when they were, and two different numbers never
   get the same new value. A percentage p% also maps the fraction p/100 used in the solution
   (150% → 1.5). 0 and 1 stay (they are structural: "1 hour", "x − 1"). Numbers written in
   words ("three", "half", "dozen"), fraction parts ("1/2"), clock times ("3:30", "10 p.m."),
   ordinals ("2nd") and numbers glued to letters stay unchanged: their values are "frozen".
2. The solution's calculator annotations ``<<expr=result>>`` are replayed in order: every
   literal of ``expr`` whose value was mapped (a question number or an earlier result) is
   substituted, the expression is evaluated exactly (rational arithmetic, :func:`safe_eval`:
   + - * / and parentheses only, never ``eval``), and the old result maps to the new one.
   Literals that were not mapped are constants (60 minutes, 7 days, 100%) and stay.
3. Visible numbers of the solution are rewritten through the same map (the number right after
   an annotation is that annotation's result), and so is the final ``#### N`` line.
4. Checks; an item is kept only when all hold: the question has a number to change; every
   annotation re-evaluates exactly in the ORIGINAL and in the new solution; every visible
   number of the solution is a question number, an annotation literal or result, or frozen
   (else the solution does arithmetic outside the annotations, which cannot be replayed); the
   new results are "clean" (non-negative, non-zero where the original was, integer where the
   original was integer, else a terminating decimal with at most max(2, original decimals)
   places); no number used by the solution is ambiguous (a frozen value that is also mapped,
   e.g. "half" and a mapped 2, or one old value mapped to two new ones); the final answer is
   traceable to the map and changes; and every visible equation ``a op b = c`` that holds in
   the original still holds in the new text. Up to ``max_attempts`` seeded draws are tried
   per item (the later half changes a random subset of the question numbers, which keeps
   divisibility more often); an item with no passing draw is dropped, and the reason is
   counted. On the shipped GSM8K test split (seed 0) 820 of 1,319 problems (62.2%) are kept.

AQuA construction: AQuA-RAT rationales are free text without calculator annotations, often
algebra. An item is kept only when its rationale is a chain of verifiable arithmetic: every
``=`` in it is a pure arithmetic equation ``expr = number`` that holds exactly in the original
(replayed like a GSM8K annotation), every other number of the rationale is a mapped question
number or an equation's result, and the correct option holds one number, which is mapped and
changes. The distractor options get new numbers by the same perturbation (distinct from the
new answer). Everything else is dropped: on the shipped AQuA test split only 4 of 254
problems (1.6%) are kept (dev: 6 of 254), too few for a powerful t-test; calibrate AQuA sweeps
with ``--calibration`` or ``--nonmembers`` instead.

Limits (say them next to any result that uses this control):

* Only the numbers change: wording, names and style are the original's, so a control item is
  a near-duplicate of its source. A model that memorised the template (the text around the
  numbers) scores it high too, which shrinks the benchmark-vs-control gap: the control is
  conservative, it under-estimates contamination (and a t-test against it loses power).
* New numbers shift the token statistics slightly (other digits, sometimes other lengths).
  A model that finds "natural" numbers more likely may score the originals higher for that
  reason alone; keep the perturbation small (the defaults) and treat a tiny gap with care.
* Semantics are checked only as arithmetic: an implicit constant that happens to equal a
  mapped number may be rewritten (the replayed solution is then self-consistent but the story
  may be odd), and the kept items are the arithmetically simplest ones (the dropped ones skew
  towards divisions, number words and fractions), so the control is not a uniform sample of
  the benchmark.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction

from ..datasets import Item, aqua_text, gsm8k_text
from ..types import BlackboxMIAError

# A number as written in text: thousands groups with commas, optional decimals.
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
ANNOTATION = re.compile(r"<<([^<>]*)>>")
FINAL_LINE = re.compile(r"\n####\s*([^\n]*)\s*$")
OPTION = re.compile(r"^\s*([A-Ea-e])\s*\)\s*(.*)$", re.S)
# Characters a visible arithmetic expression is made of (left side of "=").
_ARITH_CHARS = set("0123456789.,$ +-*/()x×")
# After a number: an ordinal suffix or a clock time ("2nd", "10 p.m.", "7 o'clock").
_ORDINAL_OR_CLOCK = re.compile(r"(?:st|nd|rd|th)\b|\s*(?:[ap]\.?m\b\.?|o'?clock\b)", re.I)

# Values of numbers written as words; their values are frozen (never substituted).
NUMBER_WORDS: dict[str, tuple[Fraction, ...]] = {
    **{w: (Fraction(i),) for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split())},
    **{w: (Fraction(10 * i),) for i, w in enumerate(
        "thirty forty fifty sixty seventy eighty ninety".split(), start=3)},
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


class ExpressionError(BlackboxMIAError):
    """An expression that :func:`safe_eval` refuses (not plain arithmetic) or cannot evaluate."""


def safe_eval(expr: str) -> Fraction:
    """Exact value of an arithmetic expression: numbers, + - * /, unary ±, parentheses.

    Parsed with :mod:`ast` and evaluated node by node in rational arithmetic
    (:class:`fractions.Fraction`; a literal ``0.1`` is exactly 1/10). Anything else — names,
    calls, attributes, powers, comparisons, strings — is refused; nothing is ever executed.

    Raises:
        ExpressionError: not plain arithmetic, a syntax error, division by zero, or an
            expression longer than 500 characters.
    """
    if not isinstance(expr, str) or len(expr) > 500:
        raise ExpressionError("expression must be a string of at most 500 characters")
    source = expr.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an arithmetic expression: {expr!r}") from exc
    return _evaluate(tree.body, source)


_OPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def _evaluate(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, source), _evaluate(node.right, source)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError(f"division by zero in {source!r}")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        literal = ast.get_source_segment(source, node) or repr(node.value)
        try:
            return Fraction(literal)
        except ValueError as exc:
            raise ExpressionError(f"bad number {literal!r} in {source!r}") from exc
    raise ExpressionError(f"refused {type(node).__name__} in {source!r}: only numbers, + - * / and parentheses")


@dataclass(frozen=True)
class ControlConfig:
    """How the control is built (saved next to every result that uses it).

    Attributes:
        seed: seeds every draw; item i's draws depend only on (seed, item id, attempt).
        max_attempts: draws tried per item before it is dropped.
        rel_offset: the offset bound relative to the significant part m: ⌈rel_offset·m⌉.
        min_offset, max_offset: the offset bound is clipped to [min_offset, max_offset] units
            of the significant part.
    """

    seed: int = 0
    max_attempts: int = 40
    rel_offset: float = 0.3
    min_offset: int = 2
    max_offset: int = 9

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for an impossible configuration."""
        if self.max_attempts < 1 or not 1 <= self.min_offset <= self.max_offset or self.rel_offset < 0:
            raise BlackboxMIAError(
                "control: need max_attempts >= 1, 1 <= min_offset <= max_offset, rel_offset >= 0"
            )


@dataclass(frozen=True)
class ControlSet:
    """The control items (label 0) and how many source items were kept.

    Attributes:
        kind: ``"gsm8k"`` or ``"aqua"``.
        items: one control item per kept source item, id ``{source id}-control``; ``meta``
            holds ``source_id``, the new fields and ``mapping`` (old → new values as text).
        n_source: source items given.
        dropped: ``{reason: count}`` of the dropped items.
        config: the construction's configuration.
    """

    kind: str
    items: list[Item]
    n_source: int
    dropped: dict[str, int]
    config: ControlConfig

    @property
    def kept_fraction(self) -> float:
        """Kept items / source items."""
        return len(self.items) / self.n_source if self.n_source else 0.0

    def to_dict(self) -> dict:
        """JSON-ready summary (without the items) for reports."""
        return {
            "kind": self.kind,
            "method": f"{self.kind} numbers changed consistently, solution replayed and checked "
            "(blackbox_mia.control; Maini et al. 2024 style held-out control)",
            "n_source": self.n_source,
            "n_kept": len(self.items),
            "kept_fraction": self.kept_fraction,
            "dropped": dict(sorted(self.dropped.items())),
            "config": asdict(self.config),
            "limits": "near-duplicates of the source wording (a memorised template scores high: "
            "the control is conservative and under-estimates contamination); only numbers "
            "change; semantics checked only as arithmetic; kept items skew to simpler problems",
        }


def control_kind(items: Sequence[Item]) -> str | None:
    """``"gsm8k"`` or ``"aqua"`` when every item carries that benchmark's fields in ``meta``
    (the shipped datasets do), else None (no control can be built)."""
    if items and all({"question", "answer"} <= set(it.meta) for it in items):
        return "gsm8k"
    if items and all({"question", "options", "rationale", "correct"} <= set(it.meta) for it in items):
        return "aqua"
    return None


def build_control(items: Sequence[Item], config: ControlConfig = ControlConfig()) -> ControlSet:
    """Rewrite every item with new numbers (see the module docstring); keep the ones that check.

    Args:
        items: GSM8K-style (``meta`` with question, answer) or AQuA-style (question, options,
            rationale, correct) items.
        config: seed and perturbation size.

    Returns:
        :class:`ControlSet` with the kept items (label 0) in source order.

    Raises:
        BlackboxMIAError: the items are neither GSM8K nor AQuA problems, or a bad config.
    """
    config.validate()
    kind = control_kind(items)
    if kind is None:
        raise BlackboxMIAError(
            "a control can be built only from GSM8K-style items (question, answer) or AQuA-style "
            "items (question, options, rationale, correct)"
        )
    perturb = perturb_gsm8k if kind == "gsm8k" else perturb_aqua
    kept, dropped = [], {}
    for item in items:
        try:
            fields_, mapping = perturb(item.meta, item.id, config)
        except _Skip as skip:
            dropped[skip.reason] = dropped.get(skip.reason, 0) + 1
            continue
        text = gsm8k_text(**fields_) if kind == "gsm8k" else aqua_text(**fields_)
        meta = {"source_id": item.id, **fields_, "mapping": mapping}
        kept.append(Item(f"{item.id}-control", text, 0, meta))
    return ControlSet(kind, kept, len(items), dropped, config)


class _Skip(Exception):
    """Internal: this item cannot be rewritten; ``reason`` is counted in the report."""

    def __init__(self, reason: str, retry: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


# ---------------------------------------------------------------------------------------------
# numbers in text


@dataclass(frozen=True)
class _Num:
    """A number occurrence: span, token, exact value, and how it is written."""

    start: int
    end: int
    token: str
    value: Fraction
    decimals: int
    commas: bool
    percent: bool
    free: bool  # may be rewritten (not glued to letters, not a fraction part, time or ordinal)


def _places_of(token: str) -> int:
    """Decimal places written in a number token (``"2.50"`` → 2)."""
    return len(token.split(".")[1]) if "." in token else 0


def _value_of(token: str) -> Fraction:
    return Fraction(token.replace(",", "").replace("$", ""))


def _numbers(text: str, question: bool) -> list[_Num]:
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
        out.append(_Num(
            m.start(), m.end(), token, _value_of(token), _places_of(token), "," in token,
            after == "%", not (glued or time_or_list or fraction or ordinal),
        ))
    return out


def _word_values(text: str) -> set[Fraction]:
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


def _decimal_places(value: Fraction) -> int | None:
    """Decimal places of a terminating expansion (None when it does not terminate, or > 12)."""
    if value.denominator == 1:
        return 0
    for places in range(1, 13):
        if (value * 10**places).denominator == 1:
            return places
    return None


def _format(value: Fraction, decimals: int = 0, commas: bool = False) -> str:
    """``value`` written with at least ``decimals`` places (more if it needs them).

    Raises:
        _Skip: (retry) the value has no short terminating decimal expansion.
    """
    places = _decimal_places(value)
    if places is None:
        raise _Skip("unclean result", retry=True)
    places = max(places, decimals)
    sign = "-" if value < 0 else ""
    whole, frac = divmod(int(abs(value) * 10**places), 10**places)
    text = f"{whole:,}" if commas else str(whole)
    return sign + text + (f".{frac:0{places}d}" if places else "")


class _Map:
    """Old value → new value(s), with the frozen values that make a lookup ambiguous."""

    def __init__(self, frozen: set[Fraction]):
        self.frozen = frozen
        self.new: dict[Fraction, set[Fraction]] = {}

    def add(self, old: Fraction, new: Fraction) -> None:
        self.new.setdefault(old, set()).add(new)

    def lookup(self, old: Fraction) -> Fraction:
        """The new value (the old one for an unmapped constant).

        Raises:
            _Skip: ``old`` maps to several values (retry), or is mapped and frozen (final).
        """
        targets = self.new.get(old)
        if not targets or targets == {old}:
            return old
        if len(targets) > 1:
            raise _Skip("conflicting mapping", retry=True)
        if old in self.frozen:
            raise _Skip("ambiguous number (also written as a word or fraction)")
        return next(iter(targets))

    def as_text(self) -> dict[str, str]:
        """The changed entries as ``{old: new}`` strings."""
        return {_format(k): _format(next(iter(v))) for k, v in sorted(self.new.items()) if v != {k}}


def _rewrite(text: str, numbers: Sequence[_Num], new_value: Callable[[_Num], Fraction]) -> str:
    """``text`` with every free number replaced by ``new_value(number)`` in its own format."""
    out, pos = [], 0
    for n in numbers:
        if not n.free:
            continue
        value = new_value(n)
        if value != n.value:
            out += [text[pos:n.start], _format(value, n.decimals, n.commas)]
            pos = n.end
    return "".join(out) + text[pos:]


def _substitute(expr: str, literals: Sequence[_Num], table: _Map) -> str:
    """``expr`` with every literal looked up in ``table``."""
    out, pos = [], 0
    for n in literals:
        new = table.lookup(n.value)
        if new != n.value:
            out += [expr[pos:n.start], _format(new, n.decimals, n.commas)]
            pos = n.end
    return "".join(out) + expr[pos:]


def _arith(expr: str) -> str:
    """A visible expression made evaluable: no thousands commas, no ``$``, ``x``/``×`` → ``*``."""
    return re.sub(r"(?<=\d),(?=\d{3})", "", expr).replace("$", "").replace("x", "*").replace("×", "*")


# ---------------------------------------------------------------------------------------------
# new values for the question's numbers


@dataclass(frozen=True)
class _Question:
    """A question's numbers, parsed once per item."""

    text: str
    numbers: list[_Num]
    frozen: set[Fraction]
    first: dict[Fraction, _Num]  # changeable value → its first occurrence
    percent: set[Fraction]


def _parse_question(question: str) -> _Question:
    numbers = _numbers(question, question=True)
    frozen = _word_values(question) | {n.value for n in numbers if not n.free}
    first: dict[Fraction, _Num] = {}
    for n in numbers:
        if n.free and n.value not in (0, 1):  # 0 and 1 are structural (none, unit): kept
            first.setdefault(n.value, n)
    if not first:
        raise _Skip("no number in the question")
    percent = {n.value for n in numbers if n.free and n.percent}
    return _Question(question, numbers, frozen, dict(sorted(first.items())), percent)


def _offset_bound(m: int, config: ControlConfig) -> int:
    return max(config.min_offset, min(config.max_offset, math.ceil(config.rel_offset * m)))


def _candidates(n: _Num, config: ControlConfig) -> list[Fraction]:
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


def _draw(q: _Question, item_id: str, attempt: int, config: ControlConfig) -> dict[Fraction, Fraction]:
    """New values of the question's changeable numbers for one attempt (seeded, injective).

    Attempts in the first half change every value; later ones a random non-empty subset.

    Raises:
        _Skip: (retry) no injective choice.
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
        choices = [c for c in _candidates(q.first[v], config) if c not in taken]
        if not choices:
            raise _Skip("no injective draw", retry=True)
        new[v] = rng.choice(choices)
        taken.add(new[v])
    return new


def _table(q: _Question, new: dict[Fraction, Fraction]) -> _Map:
    table = _Map(q.frozen)
    for v, w in new.items():
        table.add(v, w)
        if v in q.percent:
            table.add(v / 100, w / 100)
    return table


def _check_clean(old: Fraction, new: Fraction, old_text: str) -> None:
    """Raise ``_Skip`` (retry) unless ``new`` is as clean as ``old`` (see module docstring)."""
    if new < 0 or (old != 0 and new == 0):
        raise _Skip("unclean result", retry=True)
    if old.denominator == 1:
        if new.denominator != 1:
            raise _Skip("unclean result", retry=True)
        return
    places = _decimal_places(new)
    if places is None or places > max(2, _places_of(old_text)):
        raise _Skip("unclean result", retry=True)


def _eval_new(expr: str) -> Fraction:
    """:func:`safe_eval` of a rewritten expression; a failure (division by zero) is worth a retry."""
    try:
        return safe_eval(_arith(expr))
    except ExpressionError:
        raise _Skip("new expression fails", retry=True) from None


def _with_attempts(config: ControlConfig, attempt_fn):
    """Run ``attempt_fn(attempt)`` until it returns; a final ``_Skip`` stops at once."""
    last = None
    for attempt in range(config.max_attempts):
        try:
            return attempt_fn(attempt)
        except _Skip as skip:
            if not skip.retry:
                raise
            last = skip
    raise _Skip(f"no clean draw in {config.max_attempts} attempts (last: {last.reason})")


# ---------------------------------------------------------------------------------------------
# visible arithmetic


def _equation_spans(text: str) -> list[tuple[int, str, re.Match | None]]:
    """For each ``=``: (start of its left expression, the expression, the match of the number
    right of it or None). The left expression is the longest run of arithmetic characters
    before the ``=``, without leading non-digits."""
    out = []
    for m in re.finditer("=", text):
        i = m.start()
        while i > 0 and text[i - 1] in _ARITH_CHARS:
            i -= 1
        segment = text[i : m.start()]
        lead = re.match(r"[^\d(]*", segment).end()
        right = RIGHT_NUMBER.match(text, m.end())
        out.append((i + lead, segment[lead:].rstrip(), right))
    return out


RIGHT_NUMBER = re.compile(r"\s*\$?(\d+(?:,\d{3})*(?:\.\d+)?)")
_HAS_OPERATOR = re.compile(r"\d\s*[-+*/x×]\s*[\d(.$]")


def visible_equations(text: str) -> list[bool | None]:
    """For each ``=`` of ``text``: True/False when it closes an arithmetic equation
    ``a op b … = c`` that holds/fails (within the rounding of c's decimals), None otherwise."""
    out: list[bool | None] = []
    for _, left, right in _equation_spans(text):
        if right is None or not _HAS_OPERATOR.search(left):
            out.append(None)
            continue
        try:
            value = safe_eval(_arith(left))
        except ExpressionError:
            out.append(None)
            continue
        token = right.group(1)
        out.append(abs(value - _value_of(token)) <= Fraction(1, 2 * 10 ** _places_of(token)))
    return out


def _check_visible(old: list[bool | None], new_text: str) -> None:
    """Every visible equation that held in the original (``old``) must hold in ``new_text``."""
    new = visible_equations(new_text)
    if len(old) != len(new) or any(o and not n for o, n in zip(old, new)):
        raise _Skip("visible arithmetic broken", retry=True)


# ---------------------------------------------------------------------------------------------
# GSM8K


@dataclass(frozen=True)
class _Annotation:
    """A parsed ``<<expr=result>>``: its span in the body, literals, and original result."""

    start: int
    end: int
    expr: str
    literals: list[_Num]
    result_text: str
    result: Fraction


def _parse_annotations(body: str) -> list[_Annotation]:
    out = []
    for a in ANNOTATION.finditer(body):
        expr, eq, result = a.group(1).rpartition("=")
        result = result.strip()
        if not eq or not NUMBER.fullmatch(result):
            raise _Skip("malformed annotation")
        try:
            value = safe_eval(expr)
        except ExpressionError:
            raise _Skip("annotation not plain arithmetic") from None
        if value != _value_of(result):
            raise _Skip("annotation wrong in the original")
        if value < 0:
            raise _Skip("negative result in the original")
        literals = [n for n in _numbers(expr, question=False)]
        out.append(_Annotation(a.start(), a.end(), expr, literals, result, value))
    if not out:
        raise _Skip("no calculator annotation")
    return out


def perturb_gsm8k(meta: dict, item_id: str, config: ControlConfig = ControlConfig()) -> tuple[dict, dict]:
    """New ``{question, answer}`` for one GSM8K problem, and the old → new value map (as text).

    Raises:
        _Skip: (internal) the problem cannot be rewritten; see the module docstring.
    """
    question, answer = meta["question"], meta["answer"]
    final = FINAL_LINE.search(answer)
    final_numbers = _numbers(final.group(1), question=False) if final else []
    if len(final_numbers) != 1:
        raise _Skip("no numeric final answer")
    body = answer[: final.start()]
    annotations = _parse_annotations(body)
    q = _parse_question(question)
    bounds = [0] + [x for a in annotations for x in (a.start, a.end)] + [len(body)]
    gaps = [(body[s:e], _numbers(body[s:e], question=False)) for s, e in zip(bounds[::2], bounds[1::2])]
    old_final = final_numbers[0].value
    old_equations = visible_equations(ANNOTATION.sub("", answer))
    known = {n.value for a in annotations for n in a.literals} | {a.result for a in annotations}
    known |= {n.value for n in q.numbers} | q.frozen
    if any(n.free and n.value not in known for _, numbers in gaps for n in numbers):
        raise _Skip("unannotated arithmetic in the solution")

    def attempt(k: int) -> tuple[dict, dict]:
        new_q = _draw(q, item_id, k, config)
        table = _table(q, new_q)
        pieces = [_rewrite(question, q.numbers, lambda n: new_q.get(n.value, n.value))]
        answer_pieces, previous = [], None
        for (gap, numbers), a in zip(gaps, annotations):
            answer_pieces.append(_rewrite_gap(gap, numbers, table, previous))
            new_expr = _substitute(a.expr, a.literals, table)
            new_result = _eval_new(new_expr)
            _check_clean(a.result, new_result, a.result_text)
            answer_pieces.append(f"<<{new_expr}={_format(new_result, 0, ',' in a.result_text)}>>")
            table.add(a.result, new_result)
            previous = (a.result, new_result)
        answer_pieces.append(_rewrite_gap(*gaps[-1], table, previous))
        if old_final not in table.new:
            raise _Skip("final answer not traceable to the solution")
        new_final = table.lookup(old_final)
        if new_final == old_final:
            raise _Skip("final answer unchanged", retry=True)
        _check_clean(old_final, new_final, final_numbers[0].token)
        final_text = final.group(0)[: final.start(1) - final.start()] + _rewrite(
            final.group(1), final_numbers, lambda n: new_final
        )
        new_answer = "".join(answer_pieces) + final_text
        _check_visible(old_equations, ANNOTATION.sub("", new_answer))
        return {"question": pieces[0], "answer": new_answer}, table.as_text()

    return _with_attempts(config, attempt)


def _rewrite_gap(text: str, numbers: list[_Num], table: _Map, previous: tuple[Fraction, Fraction] | None) -> str:
    """Visible text between annotations: a leading number is the previous annotation's result."""

    def new_value(n: _Num) -> Fraction:
        if n.start == 0 and previous is not None and n.value == previous[0]:
            return previous[1]
        return table.lookup(n.value)

    return _rewrite(text, numbers, new_value)


# ---------------------------------------------------------------------------------------------
# AQuA


@dataclass(frozen=True)
class _Equation:
    """A verified rationale equation ``expr = result``: span, literals, result token."""

    start: int
    end: int
    expr: str
    literals: list[_Num]
    result: _Num


def _rationale_equations(rationale: str) -> list[_Equation]:
    """Every ``=`` of the rationale as a pure arithmetic equation that holds exactly, in
    order and without overlap; anything else drops the item."""
    out: list[_Equation] = []
    not_chain = _Skip("rationale is not a chain of verifiable arithmetic")
    for start, expr, right in _equation_spans(rationale):
        if right is None or not _HAS_OPERATOR.search(expr) or (out and start < out[-1].end):
            raise not_chain
        try:
            value = safe_eval(_arith(expr))
        except ExpressionError:
            raise not_chain from None
        token = right.group(1)
        if value != _value_of(token):
            raise not_chain
        result = _Num(right.start(1), right.end(1), token, value, _places_of(token), "," in token, False, True)
        out.append(_Equation(start, right.end(1), expr, _numbers(expr, question=False), result))
    if not out:
        raise not_chain
    return out


def perturb_aqua(meta: dict, item_id: str, config: ControlConfig = ControlConfig()) -> tuple[dict, dict]:
    """New ``{question, options, rationale, correct}`` for one AQuA problem, and the value map.

    Raises:
        _Skip: (internal) the problem cannot be rewritten; see the module docstring.
    """
    question, options, rationale, correct = meta["question"], meta["options"], meta["rationale"], meta["correct"]
    parsed = [OPTION.match(o) if isinstance(o, str) else None for o in options]
    if not all(parsed) or not isinstance(correct, str) or correct.upper() not in [m.group(1).upper() for m in parsed]:
        raise _Skip("unparseable options")
    letters = [m.group(1) for m in parsed]
    answer_index = [x.upper() for x in letters].index(correct.upper())
    option_numbers = [_numbers(m.group(2), question=False) for m in parsed]
    answer_numbers = option_numbers[answer_index]
    if len(answer_numbers) != 1 or not answer_numbers[0].free:
        raise _Skip("correct option is not one number")
    equations = _rationale_equations(rationale)
    q = _parse_question(question)
    bounds = [0] + [x for e in equations for x in (e.start, e.end)] + [len(rationale)]
    gaps = [(rationale[s:e], _numbers(rationale[s:e], question=False)) for s, e in zip(bounds[::2], bounds[1::2])]
    old_equations = visible_equations(rationale)
    old_answer = answer_numbers[0].value

    def attempt(k: int) -> tuple[dict, dict]:
        new_q = _draw(q, item_id, k, config)
        table = _table(q, new_q)
        new_question = _rewrite(question, q.numbers, lambda n: new_q.get(n.value, n.value))
        new_equations = []
        for e in equations:
            new_expr = _substitute(e.expr, e.literals, table)
            new_result = _eval_new(new_expr)
            _check_clean(e.result.value, new_result, e.result.token)
            middle = rationale[e.start + len(e.expr) : e.result.start]
            new_equations.append(new_expr + middle + _format(new_result, e.result.decimals, e.result.commas))
            table.add(e.result.value, new_result)
        for _, numbers in gaps:
            if any(n.free and n.value not in table.new for n in numbers):
                raise _Skip("rationale number of unknown origin")
        new_gaps = [_rewrite(text, numbers, lambda n: table.lookup(n.value)) for text, numbers in gaps]
        new_rationale = "".join(x for pair in zip(new_gaps, new_equations + [""]) for x in pair)
        if old_answer not in table.new:
            raise _Skip("answer not traceable to the rationale")
        new_answer = table.lookup(old_answer)
        if new_answer == old_answer:
            raise _Skip("final answer unchanged", retry=True)
        rng = random.Random(f"{config.seed}:{item_id}:{k}:options")
        used, new_options = {new_answer}, []
        for i, m in enumerate(parsed):
            pick = (lambda n: new_answer) if i == answer_index else (lambda n: _distractor(n, rng, config, used))
            new_options.append(f"{letters[i]}){_rewrite(m.group(2), option_numbers[i], pick)}")
        _check_visible(old_equations, new_rationale)
        fields_ = {"question": new_question, "options": new_options, "rationale": new_rationale, "correct": correct}
        return fields_, table.as_text()

    return _with_attempts(config, attempt)


def _distractor(n: _Num, rng: random.Random, config: ControlConfig, used: set[Fraction]) -> Fraction:
    """A new distractor value, distinct from the new answer and the earlier distractors."""
    choices = [c for c in _candidates(n, config) if c not in used] if n.value not in (0, 1) else [n.value]
    if not choices:
        raise _Skip("no distinct distractor", retry=True)
    value = rng.choice(choices)
    used.add(value)
    return value
