"""Cache claims asked for together: every claim a client's requests ask for in one event-loop
iteration goes to the response cache in one SQLite transaction (:meth:`ResponseCache.claim_many`).

One transaction per claim cost the event loop a measurable share of its CPU at high
concurrency (figures: records/measured-settings.md).
"""

from __future__ import annotations

import asyncio

from .responses import ResponseCache


class ClaimBatcher:
    """Batches :meth:`ResponseCache.claim_many` calls on the running event loop.

    Args:
        cache: the response cache whose claims are asked for.
    """

    def __init__(self, cache: ResponseCache):
        self.cache = cache
        self._waiting: list[tuple[str, asyncio.Future]] = []

    def claim(self, key: str) -> asyncio.Future:
        """A future of whether this process now holds the claim on ``key`` (see
        :meth:`ResponseCache.claim`); it fails with the cache's :class:`BlackboxMIAError` when
        the claims database is unusable. Claims asked for before the loop's next iteration
        share one transaction."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._flush)
        self._waiting.append((key, future))
        return future

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        try:
            won = self.cache.claim_many([key for key, _ in waiting])
        except Exception as exc:  # noqa: BLE001 - handed to every waiter
            for _, future in waiting:
                if not future.done():
                    future.set_exception(exc)
            return
        for (key, future), claimed in zip(waiting, won):
            if not future.done():
                future.set_result(claimed)
            elif claimed:  # its waiter left (cancelled): nobody will ask, so let others
                self.cache.release(key)
