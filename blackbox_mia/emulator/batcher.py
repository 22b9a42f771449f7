"""Micro-batching: next-token requests arriving within a short window share one forward pass."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..backends.local import LocalBackend
from .errors import server_error


class MicroBatcher:
    """Runs next-token requests in batched forward passes on one worker thread.

    Args:
        backend: the model.
        executor: the single worker thread every model call uses.
        window_ms: how long the first queued request waits for more (ms); 0 = no batching.
        max_batch: most requests per forward pass.

    Attributes:
        forward_passes: forward passes run so far.
        requests: next-token requests served so far.
        largest_batch: the most requests one forward pass has served.
    """

    def __init__(self, backend: LocalBackend, executor: ThreadPoolExecutor, window_ms: float, max_batch: int):
        self.backend = backend
        self.executor = executor
        self.window_s = window_ms / 1000
        self.max_batch = max_batch if window_ms > 0 else 1
        self.forward_passes = self.requests = self.largest_batch = 0
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the batching task on the running event loop."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="bbmia-microbatcher")

    async def stop(self) -> None:
        """Stop the batching task; requests still queued fail with a 503 :class:`HttpError`.
        The counters stay readable."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._queue is not None and not self._queue.empty():
            _, _, future = self._queue.get_nowait()
            if not future.done():
                future.set_exception(server_error(503, "the server is shutting down", "server_shutdown"))

    async def submit(self, prefix: Sequence[int], then: Callable[[np.ndarray], object]):
        """``then(log p(· | prefix))`` computed on the worker thread, the row being float32 (V,) in nats.

        Raises:
            HttpError: 503 when the server stops first; whatever the forward pass or ``then`` raised.
        """
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((list(prefix), then, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            if self.max_batch > 1 and self._queue.qsize() + 1 < self.max_batch:
                await asyncio.sleep(self.window_s)
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            batch = [job for job in batch if not job[2].done()]  # drop cancelled clients
            if not batch:
                continue
            try:
                results = await loop.run_in_executor(self.executor, self._compute, batch)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting request
                results = [exc] * len(batch)
            self.forward_passes += 1
            self.requests += len(batch)
            self.largest_batch = max(self.largest_batch, len(batch))
            for (_, _, future), result in zip(batch, results):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _compute(self, batch) -> list:
        rows = self.backend.next_token_logprobs([prefix for prefix, _, _ in batch])
        out = []
        for row, (_, then, _) in zip(rows, batch):
            try:
                out.append(then(row))
            except Exception as exc:  # noqa: BLE001 - one bad request must not fail the batch
                out.append(exc)
        return out
