"""A forward pass's reduction in flight: its per-position results on their way to the host.

On CUDA the next pass computes while the host reads the last one: each pass's reduced tensors
are copied non-blocking into pinned host memory and an event is recorded after the copy
(:meth:`LaunchedPass.launch`); :meth:`LaunchedPass.rows` waits for it and splits the results per
row. Elsewhere the tensors are on the host already.
"""

from __future__ import annotations

import numpy as np

SequenceResult = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]
"""Per scored sequence: lp, mu, sigma (nats, float64 arrays of shape (L-1,); mu, sigma None without
the statistics)."""


class LaunchedPass:
    """The reduction of one forward pass, launched: float32 tensors ``(lp, mu, sigma)`` of shape
    (N,) for the N scored positions of its rows (``mu``, ``sigma`` None without the
    statistics), on the host, and on CUDA the event after which their copy is complete.

    Args:
        tensors: ``(lp, mu, sigma)`` on the host.
        lengths: ids per row, L_i (row i has L_i - 1 scored positions).
        ready: a ``torch.cuda.Event`` recorded after the copy, or None (complete already).
    """

    def __init__(self, tensors: tuple, lengths: list[int], ready=None):
        self.tensors = tensors
        self.lengths = lengths
        self.ready = ready

    @classmethod
    def launch(cls, torch, tensors: tuple, lengths: list[int]) -> LaunchedPass:
        """``tensors`` on their device: on CUDA a non-blocking copy into pinned host memory is
        queued, and an event after it; elsewhere they are the host's already."""
        if tensors[0].device.type != "cuda":
            return cls(tensors, lengths)
        host = tuple(
            None if t is None else torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)
            for t in tensors
        )
        ready = torch.cuda.Event()
        ready.record()
        return cls(host, lengths, ready)

    def rows(self) -> list[SequenceResult]:
        """Per row of L ids, float64 arrays of shape (L-1,), nats: lp, and mu, sigma (or None);
        waits for the copy first."""
        if self.ready is not None:
            self.ready.synchronize()
        bounds = np.cumsum([n - 1 for n in self.lengths])[:-1]
        parts = [
            np.split(t.numpy().astype(np.float64), bounds) if t is not None else [None] * len(self.lengths)
            for t in self.tensors
        ]
        return list(zip(*parts))
