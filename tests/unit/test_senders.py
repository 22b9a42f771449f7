"""Senders: at most n sends in progress, in queue order, results and errors to their callers."""

from __future__ import annotations

import asyncio

import pytest

from blackbox_mia.backends.api.http.senders import Senders


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


async def test_thread_results_wake_the_loop_once_for_futures_completed_together(monkeypatch):
    import concurrent.futures
    import threading

    from blackbox_mia.backends.loop import ThreadResults

    results, loop = ThreadResults(), asyncio.get_running_loop()
    wakeups = []
    real = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe", lambda *a: (wakeups.append(a), real(*a))[1])
    futures = [concurrent.futures.Future() for _ in range(5)]
    waiters = [results.wait(f) for f in futures]
    waiters[3].cancel()  # its caller left: the others still get their outcome

    def writer() -> None:  # one batch, as the cache's writer thread completes it
        for i, f in enumerate(futures):
            if i == 2:
                f.set_exception(ValueError("row 2"))
            else:
                f.set_result(i)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    done = await asyncio.gather(*waiters, return_exceptions=True)
    assert done[:3] == [0, 1, done[2]] and isinstance(done[2], ValueError) and done[4] == 4
    assert isinstance(done[3], asyncio.CancelledError)
    assert len(wakeups) == 1


async def test_drain_starts_nothing_more_waits_for_the_sends_in_progress_and_resume_restarts():
    senders = Senders(2)
    started, gates = [], [asyncio.Event() for _ in range(4)]

    def send(i: int):
        async def go() -> int:
            started.append(i)
            await gates[i].wait()
            return i
        return go

    calls = [asyncio.ensure_future(senders.run(send(i))) for i in range(4)]
    await asyncio.sleep(0.01)
    assert started == [0, 1] and senders.in_progress == 2
    asyncio.get_running_loop().call_later(0.05, gates[0].set)
    assert await senders.drain(0.2) == 1  # send 0 ended within the wait, send 1 did not
    gates[1].set()
    await asyncio.sleep(0.02)
    assert started == [0, 1] and senders.in_progress == 0  # sends 2 and 3 never started
    senders.resume()
    gates[2].set()
    gates[3].set()
    assert await asyncio.gather(*calls) == [0, 1, 2, 3] and started == [0, 1, 2, 3]
    await senders.close()
