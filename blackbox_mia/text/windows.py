"""Sliding context windows: how a text longer than the model's context is scored.

The local backend and the black-box tracker use the same windows, so their values compare.
"""

from __future__ import annotations

from collections.abc import Sequence

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


NOTED_TEXTS = 3  # texts longer than the context that get a note of their own; the rest share one line


def windows_notes(lengths: Sequence[int], context: int | None) -> list[str]:
    """The notes for a batch of texts of ``lengths`` tokens scored in :func:`sliding_windows` of
    ``context`` tokens: one line for each of the first :data:`NOTED_TEXTS` texts longer than the
    context (its 0-based position, tokens, windows), and one line for all the others (how many,
    and their windows); none when every text fits (or there is no context)."""
    if not context:
        return []
    long = [(i, n, len(sliding_windows(n, context))) for i, n in enumerate(lengths) if n > context]
    notes = [f"note: text #{i} is {n:,} tokens, longer than the context ({context:,}): scored in {count:,} "
             "sliding windows (progress below in tokens)" for i, n, count in long[:NOTED_TEXTS]]
    if rest := long[NOTED_TEXTS:]:
        notes.append(f"note: {len(rest):,} more texts of {len(lengths):,} are longer than the context ({context:,}): "
                     f"scored in {sum(count for *_, count in rest):,} sliding windows in all")
    return notes

