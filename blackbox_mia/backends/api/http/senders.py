"""At most ``n`` requests in flight, handed from one to the next without an event-loop turn.

With a semaphore, a finished request releases its slot and the next waiter resumes one turn of
the event loop later, and every turn waits for everything else that is ready (at 256 requests in
flight on one core, several milliseconds): the connection sits idle meanwhile. Here ``n`` worker
tasks take queued requests in order, and a worker that has its answer starts the next queued
request in the same step.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any

DRAIN_POLL_S = 0.01  # how often drain() looks whether the sends in progress have ended (seconds)


class Senders:
    """Runs queued sends, at most ``n`` at once, in the order they were queued.

    Args:
        n: most sends in progress at once (requests in flight).

    Workers start on the first :meth:`run` (on the running loop) and end with :meth:`close`.

    Attributes:
        in_progress: sends started and not ended yet.
    """

    def __init__(self, n: int):
        self.n = n
        self.in_progress = 0
        self._queue: collections.deque[tuple[Callable[[], Awaitable[Any]], asyncio.Future]] = collections.deque()
        self._workers: list[asyncio.Task] = []
        self._idle: list[asyncio.Future] = []  # one per worker waiting for work
        self._draining = False  # drain() was called: no send starts any more

    async def run(self, send: Callable[[], Awaitable[Any]]) -> Any:
        """``await send()`` in a worker, once fewer than ``n`` sends are in progress; its result
        or exception. Cancelling the caller drops a send not started yet; one in progress runs
        to its end (its result is discarded)."""
        loop = asyncio.get_running_loop()
        if not self._workers:
            self._workers = [loop.create_task(self._work()) for _ in range(self.n)]
        future = loop.create_future()
        self._queue.append((send, future))
        if self._idle:
            waiting = self._idle.pop()
            if not waiting.done():
                waiting.set_result(None)
        return await future

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue or self._draining:
                waiting = loop.create_future()
                self._idle.append(waiting)
                await waiting
                continue
            send, future = self._queue.popleft()
            if future.done():  # its caller was cancelled before it started
                continue
            self.in_progress += 1
            try:
                result = await send()
            except asyncio.CancelledError:
                if not future.done():
                    future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)
            finally:
                self.in_progress -= 1

    async def drain(self, grace_s: float) -> int:
        """Start no further send, queued or queued later (their callers wait until :meth:`resume`,
        or until :meth:`close` cancels them), and wait up to ``grace_s`` seconds for the sends in progress to end.

        Returns:
            The sends still in progress after the wait.
        """
        self._draining = True
        end = asyncio.get_running_loop().time() + grace_s
        while self.in_progress and asyncio.get_running_loop().time() < end:
            await asyncio.sleep(DRAIN_POLL_S)
        return self.in_progress

    def resume(self) -> None:
        """Undo :meth:`drain`: queued sends start again."""
        self._draining = False
        while self._idle and self._queue:
            waiting = self._idle.pop()
            if not waiting.done():
                waiting.set_result(None)

    async def close(self) -> None:
        """Stop the workers (sends in progress are cancelled; idempotent)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for _, future in self._queue:
            future.cancel()
        self._queue.clear()
        self._idle.clear()
