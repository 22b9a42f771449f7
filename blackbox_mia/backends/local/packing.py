"""How the local backend cuts sequences into windows and packs windows into forward batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ...text.windows import sliding_windows
from .resources import ForwardBudget


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


def pack_rows(order: Sequence[int], lengths: Sequence[int], budget: ForwardBudget) -> Iterator[list[int]]:
    """Greedy packing of rows (``lengths[r]`` tokens each), in ``order`` (longest first), into
    batches that :meth:`ForwardBudget.fits`: rows × widest row within the memory budget and the
    token cap (a single row always runs, even past them), and negligible padding."""
    batch: list[int] = []
    width = filled = 0
    for r in order:
        if batch and not budget.fits(len(batch) + 1, max(width, lengths[r]), filled + lengths[r]):
            yield batch
            batch, width, filled = [], 0, 0
        batch.append(r)
        width = max(width, lengths[r])
        filled += lengths[r]
    if batch:
        yield batch
