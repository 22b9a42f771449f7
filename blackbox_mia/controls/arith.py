"""Exact, safe arithmetic on benchmark text: expressions, and the equations people read.

:func:`safe_eval` evaluates ``+ - * /`` and parentheses in rational arithmetic and refuses
anything else (it never calls ``eval``). :func:`visible_equations` checks every visible
``a op b ... = c`` of a text; the constructions require that those that held in the original
still hold after the numbers changed (:func:`check_visible`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from fractions import Fraction

from ..types import ExpressionError
from .base import Skip
from .numbers import places_of, value_of

# Characters a visible arithmetic expression is made of (left side of "=").
_ARITH_CHARS = set("0123456789.,$ +-*/()x×")
# The number right of an "=", and an operator between numbers (an expression, not a bare number).
RIGHT_NUMBER = re.compile(r"\s*\$?(\d+(?:,\d{3})*(?:\.\d+)?)")
HAS_OPERATOR = re.compile(r"\d\s*[-+*/x×]\s*[\d(.$]")


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
    """Exact value of one parsed node (recursively); ``source`` is named in errors."""
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


def arith_source(expr: str) -> str:
    """A visible expression made evaluable: no thousands commas, no ``$``, ``x``/``×`` → ``*``."""
    return re.sub(r"(?<=\d),(?=\d{3})", "", expr).replace("$", "").replace("x", "*").replace("×", "*")


def equation_spans(text: str) -> list[tuple[int, str, re.Match | None]]:
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




def visible_equations(text: str) -> list[bool | None]:
    """For each ``=`` of ``text``: True/False when it closes an arithmetic equation
    ``a op b … = c`` that holds/fails (within the rounding of c's decimals), None otherwise."""
    out: list[bool | None] = []
    for _, left, right in equation_spans(text):
        if right is None or not HAS_OPERATOR.search(left):
            out.append(None)
            continue
        try:
            value = safe_eval(arith_source(left))
        except ExpressionError:
            out.append(None)
            continue
        token = right.group(1)
        out.append(abs(value - value_of(token)) <= Fraction(1, 2 * 10 ** places_of(token)))
    return out


def check_visible(old: list[bool | None], new_text: str) -> None:
    """Every visible equation that held in the original (``old``) must hold in ``new_text``."""
    new = visible_equations(new_text)
    if len(old) != len(new) or any(o and not n for o, n in zip(old, new)):
        raise Skip("visible arithmetic broken", retry=True)


def eval_new(expr: str) -> Fraction:
    """:func:`safe_eval` of a rewritten expression; a failure (division by zero) is worth a retry."""
    try:
        return safe_eval(arith_source(expr))
    except ExpressionError:
        raise Skip("new expression fails", retry=True) from None
