"""Requests- and tokens-per-minute limits of a client."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """Token bucket: on average ``per_minute`` units a minute, bursts of one second's worth.

    A request larger than the burst waits for a full bucket and then leaves it in debt, so the
    long-run rate holds for any request size.
    """

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0  # units per second
        self.burst = self.rate
        self._level = self.burst
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` units (requests or tokens) may be spent, then spend them."""
        need = min(amount, self.burst)
        async with self._lock:
            while True:
                now = time.monotonic()
                self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._level >= need:
                    break
                await asyncio.sleep((need - self._level) / self.rate)
            self._level -= amount
