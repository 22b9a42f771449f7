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
