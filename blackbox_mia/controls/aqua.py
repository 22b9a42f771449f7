"""The AQuA control: one problem rewritten with new numbers, its rationale replayed.

AQuA-RAT rationales are free text without calculator annotations, often
algebra. An item is kept only when its rationale is a chain of verifiable arithmetic: every
``=`` in it is a pure arithmetic equation ``expr = number`` that holds exactly in the original
(replayed like a GSM8K annotation), every other number of the rationale is a mapped question
number or an equation's result, and the correct option holds one number, which is mapped and
changes. The distractor options get new numbers by the same perturbation (distinct from the
new answer). Everything else is dropped: on the shipped AQuA test split only 4 of 254
problems (1.6%) are kept (dev: 6 of 254), too few for a powerful t-test; calibrate AQuA sweeps
with ``--calibration`` or ``--nonmembers`` instead.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction

from .arith import (
    HAS_OPERATOR,
    ExpressionError,
    arith_source,
    check_visible,
    equation_spans,
    eval_new,
    safe_eval,
    visible_equations,
)
from .base import DEFAULT_CONFIG, ControlConfig, Skip, with_attempts
from .numbers import (
    Num,
    find_numbers,
    format_number,
    places_of,
    rewrite_numbers,
    substitute,
    value_of,
)
from .values import candidates, check_clean, draw_values, parse_question, value_table

OPTION = re.compile(r"^\s*([A-Ea-e])\s*\)\s*(.*)$", re.DOTALL)


@dataclass(frozen=True)
class _Equation:
    """A verified rationale equation ``expr = result``: span, literals, result token."""

    start: int
    end: int
    expr: str
    literals: list[Num]
    result: Num


def _rationale_equations(rationale: str) -> list[_Equation]:
    """Every ``=`` of the rationale as a pure arithmetic equation that holds exactly, in
    order and without overlap; anything else drops the item."""
    out: list[_Equation] = []
    not_chain = Skip("rationale is not a chain of verifiable arithmetic")
    for start, expr, right in equation_spans(rationale):
        if right is None or not HAS_OPERATOR.search(expr) or (out and start < out[-1].end):
            raise not_chain
        try:
            value = safe_eval(arith_source(expr))
        except ExpressionError:
            raise not_chain from None
        token = right.group(1)
        if value != value_of(token):
            raise not_chain
        result = Num(right.start(1), right.end(1), token, value, places_of(token), "," in token, False, True)
        out.append(_Equation(start, right.end(1), expr, find_numbers(expr, question=False), result))
    if not out:
        raise not_chain
    return out


def perturb_aqua(meta: dict, item_id: str, config: ControlConfig = DEFAULT_CONFIG) -> tuple[dict, dict]:
    """New ``{question, options, rationale, correct}`` for one AQuA problem, and the value map.

    Raises:
        Skip: (internal) the problem cannot be rewritten; see the module docstring.
    """
    question, options, rationale, correct = meta["question"], meta["options"], meta["rationale"], meta["correct"]
    parsed = [OPTION.match(o) if isinstance(o, str) else None for o in options]
    if not all(parsed) or not isinstance(correct, str) or correct.upper() not in [m.group(1).upper() for m in parsed]:
        raise Skip("unparseable options")
    letters = [m.group(1) for m in parsed]
    answer_index = [x.upper() for x in letters].index(correct.upper())
    option_numbers = [find_numbers(m.group(2), question=False) for m in parsed]
    answer_numbers = option_numbers[answer_index]
    if len(answer_numbers) != 1 or not answer_numbers[0].free:
        raise Skip("correct option is not one number")
    equations = _rationale_equations(rationale)
    q = parse_question(question)
    bounds = [0] + [x for e in equations for x in (e.start, e.end)] + [len(rationale)]
    gaps = [(rationale[s:e], find_numbers(rationale[s:e], question=False)) for s, e in zip(bounds[::2], bounds[1::2])]
    old_equations = visible_equations(rationale)
    old_answer = answer_numbers[0].value

    def attempt(k: int) -> tuple[dict, dict]:
        new_q = draw_values(q, item_id, k, config)
        table = value_table(q, new_q)
        new_question = rewrite_numbers(question, q.numbers, lambda n: new_q.get(n.value, n.value))
        new_equations = []
        for e in equations:
            new_expr = substitute(e.expr, e.literals, table)
            new_result = eval_new(new_expr)
            check_clean(e.result.value, new_result, e.result.token)
            middle = rationale[e.start + len(e.expr) : e.result.start]
            new_equations.append(new_expr + middle + format_number(new_result, e.result.decimals, e.result.commas))
            table.add(e.result.value, new_result)
        for _, numbers in gaps:
            if any(n.free and n.value not in table.new for n in numbers):
                raise Skip("rationale number of unknown origin")
        new_gaps = [rewrite_numbers(text, numbers, lambda n: table.lookup(n.value)) for text, numbers in gaps]
        new_rationale = "".join(x for pair in zip(new_gaps, new_equations + [""]) for x in pair)
        if old_answer not in table.new:
            raise Skip("answer not traceable to the rationale")
        new_answer = table.lookup(old_answer)
        if new_answer == old_answer:
            raise Skip("final answer unchanged", retry=True)
        rng = random.Random(f"{config.seed}:{item_id}:{k}:options")
        used, new_options = {new_answer}, []
        for i, m in enumerate(parsed):
            pick = (lambda n: new_answer) if i == answer_index else (lambda n: _distractor(n, rng, config, used))
            new_options.append(f"{letters[i]}){rewrite_numbers(m.group(2), option_numbers[i], pick)}")
        check_visible(old_equations, new_rationale)
        fields_ = {"question": new_question, "options": new_options, "rationale": new_rationale, "correct": correct}
        return fields_, table.as_text()

    return with_attempts(config, attempt)


def _distractor(n: Num, rng: random.Random, config: ControlConfig, used: set[Fraction]) -> Fraction:
    """A new distractor value, distinct from the new answer and the earlier distractors."""
    choices = [c for c in candidates(n, config) if c not in used] if n.value not in (0, 1) else [n.value]
    if not choices:
        raise Skip("no distinct distractor", retry=True)
    value = rng.choice(choices)
    used.add(value)
    return value
