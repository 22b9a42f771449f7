"""Senders: at most n sends in progress, in queue order, results and errors to their callers."""

from __future__ import annotations

import asyncio

import pytest

from blackbox_mia.backends.api.senders import Senders


async def test_at_most_n_in_progress_in_queue_order_and_next_started_in_the_same_step():
    senders = Senders(3)
    in_progress, most, started = 0, 0, []
    gates = [asyncio.Event() for _ in range(8)]

    def send(i: int):
        async def go() -> int:
            nonlocal in_progress, most
            started.append(i)
            in_progress += 1
            most = max(most, in_progress)
            await gates[i].wait()
            in_progress -= 1
            return i * i
        return go

    calls = [asyncio.ensure_future(senders.run(send(i))) for i in range(8)]
    await asyncio.sleep(0.01)
    assert started == [0, 1, 2]
    gates[1].set()
    await asyncio.sleep(0)  # the worker wakes from send 1's gate and starts send 3 in that step
    assert started == [0, 1, 2, 3]
    for gate in gates:
        gate.set()
    assert await asyncio.gather(*calls) == [i * i for i in range(8)]
    assert most == 3 and started == list(range(8))
    await senders.close()


async def test_errors_go_to_their_caller_and_a_cancelled_caller_drops_its_queued_send():
    senders = Senders(1)
    gate, ran = asyncio.Event(), []

    async def blocked() -> str:
        await gate.wait()
        return "first"

    async def fails() -> None:
        ran.append("fails")
        raise ValueError("bad answer")

    async def never() -> None:
        ran.append("never")

    first = asyncio.ensure_future(senders.run(blocked))
    dropped = asyncio.ensure_future(senders.run(never))
    failing = asyncio.ensure_future(senders.run(fails))
    await asyncio.sleep(0.01)
    dropped.cancel()
    gate.set()
    assert await first == "first"
    with pytest.raises(ValueError, match="bad answer"):
        await failing
    assert ran == ["fails"] and dropped.cancelled()
    await senders.close()
    await senders.close()  # idempotent
