"""The GSM8K control: one problem rewritten with new numbers, its solution replayed.

Construction (one item):

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .arith import (
    ExpressionError,
    check_visible,
    eval_new,
    safe_eval,
    visible_equations,
)
from .base import DEFAULT_CONFIG, ControlConfig, Skip, with_attempts
from .numbers import (
    NUMBER,
    Num,
    ValueMap,
    find_numbers,
    format_number,
    rewrite_numbers,
    substitute,
    value_of,
)
from .values import check_clean, draw_values, parse_question, value_table

ANNOTATION = re.compile(r"<<([^<>]*)>>")
FINAL_LINE = re.compile(r"\n####\s*([^\n]*)\s*$")


@dataclass(frozen=True)
class _Annotation:
    """A parsed ``<<expr=result>>``: its span in the body, literals, and original result."""

    start: int
    end: int
    expr: str
    literals: list[Num]
    result_text: str
    result: Fraction


def _parse_annotations(body: str) -> list[_Annotation]:
    """Every ``<<expr=result>>`` of a solution body, each checked to hold in the original.

    Raises:
        Skip: (final) a malformed, non-arithmetic, wrong or negative annotation, or none at all.
    """
    out = []
    for a in ANNOTATION.finditer(body):
        expr, eq, result = a.group(1).rpartition("=")
        result = result.strip()
        if not eq or not NUMBER.fullmatch(result):
            raise Skip("malformed annotation")
        try:
            value = safe_eval(expr)
        except ExpressionError:
            raise Skip("annotation not plain arithmetic") from None
        if value != value_of(result):
            raise Skip("annotation wrong in the original")
        if value < 0:
            raise Skip("negative result in the original")
        literals = [n for n in find_numbers(expr, question=False)]
        out.append(_Annotation(a.start(), a.end(), expr, literals, result, value))
    if not out:
        raise Skip("no calculator annotation")
    return out


def perturb_gsm8k(meta: dict, item_id: str, config: ControlConfig = DEFAULT_CONFIG) -> tuple[dict, dict]:
    """New ``{question, answer}`` for one GSM8K problem, and the old → new value map (as text).

    Raises:
        Skip: (internal) the problem cannot be rewritten; see the module docstring.
    """
    question, answer = meta["question"], meta["answer"]
    final = FINAL_LINE.search(answer)
    final_numbers = find_numbers(final.group(1), question=False) if final else []
    if len(final_numbers) != 1:
        raise Skip("no numeric final answer")
    body = answer[: final.start()]
    annotations = _parse_annotations(body)
    q = parse_question(question)
    bounds = [0] + [x for a in annotations for x in (a.start, a.end)] + [len(body)]
    gaps = [(body[s:e], find_numbers(body[s:e], question=False)) for s, e in zip(bounds[::2], bounds[1::2])]
    old_final = final_numbers[0].value
    old_equations = visible_equations(ANNOTATION.sub("", answer))
    known = {n.value for a in annotations for n in a.literals} | {a.result for a in annotations}
    known |= {n.value for n in q.numbers} | q.frozen
    if any(n.free and n.value not in known for _, numbers in gaps for n in numbers):
        raise Skip("unannotated arithmetic in the solution")

    def attempt(k: int) -> tuple[dict, dict]:
        new_q = draw_values(q, item_id, k, config)
        table = value_table(q, new_q)
        pieces = [rewrite_numbers(question, q.numbers, lambda n: new_q.get(n.value, n.value))]
        answer_pieces, previous = [], None
        for (gap, numbers), a in zip(gaps, annotations):
            answer_pieces.append(_rewrite_gap(gap, numbers, table, previous))
            new_expr = substitute(a.expr, a.literals, table)
            new_result = eval_new(new_expr)
            check_clean(a.result, new_result, a.result_text)
            answer_pieces.append(f"<<{new_expr}={format_number(new_result, 0, ',' in a.result_text)}>>")
            table.add(a.result, new_result)
            previous = (a.result, new_result)
        answer_pieces.append(_rewrite_gap(*gaps[-1], table, previous))
        if old_final not in table.new:
            raise Skip("final answer not traceable to the solution")
        new_final = table.lookup(old_final)
        if new_final == old_final:
            raise Skip("final answer unchanged", retry=True)
        check_clean(old_final, new_final, final_numbers[0].token)
        final_text = final.group(0)[: final.start(1) - final.start()] + rewrite_numbers(
            final.group(1), final_numbers, lambda n: new_final
        )
        new_answer = "".join(answer_pieces) + final_text
        check_visible(old_equations, ANNOTATION.sub("", new_answer))
        return {"question": pieces[0], "answer": new_answer}, table.as_text()

    return with_attempts(config, attempt)


def _rewrite_gap(text: str, numbers: list[Num], table: ValueMap, previous: tuple[Fraction, Fraction] | None) -> str:
    """Visible text between annotations: a leading number is the previous annotation's result."""

    def new_value(n: Num) -> Fraction:
        if n.start == 0 and previous is not None and n.value == previous[0]:
            return previous[1]
        return table.lookup(n.value)

    return rewrite_numbers(text, numbers, new_value)
