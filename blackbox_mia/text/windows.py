"""Sliding context windows: how a text longer than the model's context is scored.

The local backend and the black-box tracker use the same windows, so their values compare.
"""

from __future__ import annotations

from ..types import BlackboxMIAError


def sliding_windows(length: int, context: int) -> list[tuple[int, int, int]]:
    """Windows covering a sequence of ``length`` tokens with at most ``context`` tokens each.

    Returns ``(start, end, first_target)`` triples: the window feeds tokens ``[start, end)``
    and scores the targets ``j`` in ``[first_target, end)`` (each predicted from ``j - 1``).
    Consecutive windows overlap by half the context (stride = ⌊context/2⌋), so every target
    after the first window has at least ⌈context/2⌉ - 1 tokens of left context, and every target
    ``1 .. length-1`` is scored exactly once.
    """
    if context < 2:
        raise BlackboxMIAError(f"context length must be at least 2 tokens, got {context}")
    if length <= context:
        return [(0, length, 1)]
    stride = context // 2
    windows = [(0, context, 1)]
    while windows[-1][1] < length:
        start = windows[-1][0] + stride
        end = min(start + context, length)
        windows.append((start, end, windows[-1][1]))
    return windows


def windows_note(index: int, length: int, context: int | None) -> str | None:
    """The one-line note for a text of ``length`` tokens (``index``: its 0-based position in the
    batch) that is split into :func:`sliding_windows` of ``context`` tokens; None when it fits
    (or there is no context)."""
    if not context or length <= context:
        return None
    count = len(sliding_windows(length, context))
    return (f"note: text #{index} is {length:,} tokens, longer than the context ({context:,}): "
            f"scored in {count:,} sliding windows (progress below in tokens)")

