"""How the local backend cuts sequences into windows, picks the few row widths of a call, and
packs rows into forward passes.

Every distinct input shape of a pass makes a GPU build new kernel plans (attention and matrix
products): on an H200 a gpt2-1b call over 1,024 GSM8K texts in 18 passes of 18 widths took 2.20 s
cold and 1.46 s on the same shapes again. So a call pads its rows to at most :data:`MAX_WIDTHS`
widths, chosen to pad as little as possible (:func:`pass_widths`), and each width runs in full
passes and at most one smaller one: at most 2 × :data:`MAX_WIDTHS` shapes per call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ...text.windows import sliding_windows
from .resources import ForwardBudget

MAX_WIDTHS = 8
"""Row widths of one call at most, unless they would pad more than :data:`MAX_PADDING_SHARE` of
the padded tokens (then the fewest widths that pad less)."""

MAX_PADDING_SHARE = 0.1
"""Padding (padded tokens that are no text) a call's widths may add beyond :data:`MAX_WIDTHS`'s
optimum: 1,024 GSM8K test texts (r50k_base, 62-400 tokens) pad 8.6% of their tokens in 8 widths,
5.6% in 12 (records/measured-settings.md)."""


def window_rows(lengths: Sequence[int], context: int) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """The windows of sequences of ``lengths`` tokens (:func:`~blackbox_mia.text.windows.sliding_windows`
    with ``context`` tokens) and the order they run in.

    Returns:
        ``(rows, order)``: ``rows`` one ``(sequence index, start, end, first target)`` per
        window, sequence by sequence; ``order`` the indices of ``rows``, the sequence with the
        widest first window first, each sequence's windows together and in place order (a long
        text finishes as soon as its own windows ran).
    """
    rows = [(s, *w) for s, n in enumerate(lengths) for w in sliding_windows(n, context)]
    first_width = [min(n, context) for n in lengths]
    order = sorted(range(len(rows)), key=lambda r: (-first_width[rows[r][0]], rows[r][0], rows[r][1]))
    return rows, order


def pass_widths(lengths: Sequence[int]) -> list[int]:
    """The widths, ascending, that rows of ``lengths`` tokens are padded to: each row to the
    smallest width at least its length, each width one of the lengths.

    The widths split the sorted distinct lengths into consecutive groups, each padded to its
    longest, with the fewest padded tokens in all (exact, by dynamic programming over k groups:
    O(k · n²) for n distinct lengths); k = :data:`MAX_WIDTHS` (or fewer distinct lengths), more
    while the padding exceeds :data:`MAX_PADDING_SHARE` of the padded tokens.
    """
    values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    n = len(values)
    rows = np.concatenate(([0], np.cumsum(counts)))  # rows[i]: rows of the i shortest lengths
    text = int(np.dot(values, counts))
    best = np.full(n + 1, np.inf)  # best[j]: fewest padded tokens of the j shortest lengths
    best[0] = 0.0
    splits: list[np.ndarray] = []  # per group count: the start of the last group ending before j
    while True:
        last = np.zeros(n + 1, dtype=np.int64)
        nxt = np.full(n + 1, np.inf)
        for j in range(1, n + 1):  # the last group: lengths i..j-1, padded to values[j - 1]
            cost = best[:j] + values[j - 1] * (rows[j] - rows[:j])
            last[j] = int(np.argmin(cost))
            nxt[j] = cost[last[j]]
        best = nxt
        splits.append(last)
        k = len(splits)
        if k >= n or (k >= MAX_WIDTHS and best[n] - text <= MAX_PADDING_SHARE * best[n]):
            break
    widths, j = [], n
    for last in reversed(splits):
        if j == 0:
            break
        widths.append(int(values[j - 1]))
        j = int(last[j])
    return sorted(widths)


def pack_rows(order: Sequence[int], lengths: Sequence[int], budget: ForwardBudget) -> Iterator[tuple[list[int], int]]:
    """Rows (``lengths[r]`` tokens each) packed into passes: yields ``(rows, width)``, the rows of
    one pass and the width they are padded to.

    Each row is padded to its width among :func:`pass_widths`; widths run widest first, and the
    rows of a width in ``order``, :meth:`ForwardBudget.rows_per_pass` of them a pass (a last,
    smaller pass takes the rest).
    """
    widths = pass_widths(lengths)
    group: dict[int, list[int]] = {w: [] for w in widths}
    for r in order:
        group[widths[int(np.searchsorted(widths, lengths[r]))]].append(r)
    for width in reversed(widths):
        per_pass = budget.rows_per_pass(width)
        members = group[width]
        for start in range(0, len(members), per_pass):
            yield members[start : start + per_pass], width
