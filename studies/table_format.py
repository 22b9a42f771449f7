"""How the studies' Markdown tables print a value (``markdown()`` of each study, rendered into
docs/generated/ by ``scripts/docs_figures.py``): one definition, so every page reads alike."""

from __future__ import annotations


def num(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; ``-`` for a missing one."""
    return "-" if value is None else f"{value:.{digits}f}"


def p_value(value: float | None) -> str:
    """A p-value in two significant digits (``2.9e-08``); ``-`` for a missing one."""
    return "-" if value is None else f"{value:.2g}"


def ci(interval: list[float] | None) -> str:
    """`` [low, high]`` with three decimals, for appending to a value; empty for a missing one."""
    return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"


def figure(value: object) -> str:
    """A summary value as the docs print it: ``true``/``false``/``null``; a float with 3 decimals,
    below 0.1 three significant digits, below 0.001 (p-values) two; a list item by item."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, float):
        if 0 < abs(value) < 1e-3:
            return f"{value:.2g}"
        return f"{value:.3g}" if abs(value) < 0.1 else f"{value:.3f}"
    if isinstance(value, list):
        return "[" + ", ".join(figure(v) for v in value) + "]"
    return str(value)
