"""A backend's private event loop, running in a daemon thread.

Every backend runs its coroutines on its own loop, so its HTTP client (or model) always lives on
one loop and one thread, whoever calls it: a plain script (sync call), Jupyter (sync call made
while the notebook's loop is running, or ``await``), or another backend's loop. A sync call waits
on the coroutine's future; an async call from another loop awaits it without blocking that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..types import BlackboxMIAError

T = TypeVar("T")
CLOSE_GRACE_S = 10.0  # seconds close() lets the loop's remaining tasks unwind after cancelling them


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's (libuv, in C) where it is installed, else asyncio's.

    The API client spends less CPU per request on uvloop's loop at high concurrency
    (``benchmarks/bench_throughput.py``; figures: records/measured-settings.md).
    """
    try:
        import uvloop
    except ImportError:  # not built for this platform (Windows)
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def copy_outcome(source: asyncio.Future | concurrent.futures.Future,
                 target: asyncio.Future | concurrent.futures.Future) -> None:
    """Give ``target`` the outcome of the finished ``source`` (result, exception or
    cancellation); nothing when ``target`` is already done (e.g. its waiter was cancelled)."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


class LoopThread:
    """An asyncio event loop in a daemon thread, started on first use.

    Args:
        name: the thread's name (shown in tracebacks and debuggers).
        settle: on a KeyboardInterrupt in :meth:`call`, the coroutine run on the loop before the
            interrupted coroutine is cancelled (e.g. let the requests in flight land: stop
            sending, wait a grace period); ``None``: cancel at once.
        resume: the coroutine run on the loop once the interrupted coroutine has ended (undo
            ``settle``: the next call sends again).
    """

    def __init__(self, name: str, settle: Callable[[], Coroutine] | None = None,
                 resume: Callable[[], Coroutine] | None = None):
        self.name = name
        self._settle = settle
        self._resume = resume
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started (with its thread) on first access."""
        with self._lock:
            if self._loop is None:
                loop = new_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name=self.name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def on_this_loop(self) -> bool:
        """Whether the caller runs on this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _submit(self, coro: Coroutine[Any, Any, T]) -> tuple[concurrent.futures.Future, threading.Event]:
        """Start ``coro`` as a task on the loop; returns its result future and an event set once
        the task has ended (cancelling the future cancels the task)."""
        loop = self.loop
        result: concurrent.futures.Future = concurrent.futures.Future()
        ended = threading.Event()

        def copy(task: asyncio.Task) -> None:
            ended.set()
            copy_outcome(task, result)

        def start() -> None:
            if result.cancelled():  # cancelled before it started
                coro.close()
                ended.set()
                return
            task = loop.create_task(coro)
            task.add_done_callback(copy)
            result.add_done_callback(lambda f: f.cancelled() and loop.call_soon_threadsafe(task.cancel))

        loop.call_soon_threadsafe(start)
        return result, ended

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result in the calling thread.

        Works in any thread but the loop's own, including one whose own event loop is running
        (Jupyter). On KeyboardInterrupt the loop first runs ``settle()`` (when given), then the
        coroutine is cancelled and the call waits for it to unwind, then runs ``resume()`` and
        re-raises (a second interrupt stops whichever wait it falls in).

        Raises:
            BlackboxMIAError: called from the loop's own thread (it would wait for itself: use
                ``await`` there).
            whatever ``coro`` raises.
        """
        if self.on_this_loop():
            coro.close()
            raise BlackboxMIAError(
                "a blocking backend call from the backend's own thread (e.g. inside on_done) "
                "would wait for itself: use the async method with await"
            )
        result, ended = self._submit(coro)
        try:
            return result.result()
        except KeyboardInterrupt:
            try:
                if self._settle is not None:
                    self._submit(self._settle())[0].result()
            finally:
                result.cancel()
                ended.wait()
            if self._resume is not None:
                self._submit(self._resume())[0].result()
            raise

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop from any loop (directly when already on it); cancelling
        the awaiting task cancels ``coro``."""
        if self.on_this_loop():
            return await coro
        result, _ = self._submit(coro)
        return await asyncio.wrap_future(result)

    def close(self) -> None:
        """Cancel the loop's remaining tasks and let them unwind (at most :data:`CLOSE_GRACE_S`
        seconds), then stop the loop and its thread (idempotent; nothing to do when never
        started). A task left pending would be reported by asyncio as "Task was destroyed but it
        is pending!" when the closed loop is collected: after Ctrl-C, one line per request in
        flight."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        if thread is not threading.current_thread():
            with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError, KeyboardInterrupt):
                asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(CLOSE_GRACE_S)
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join()
            loop.close()


async def _cancel_all() -> None:
    """Cancel every other task of the running loop, wait for them to end, and close its async
    generators."""
    me = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


async def in_daemon_thread(fn: Callable[[threading.Event], T], name: str) -> T:
    """``fn(stop)`` in a new daemon thread named ``name``, awaited without blocking the loop:
    for long CPU work (tokenizing a 10 MB text) that must neither stop the loop nor delay the
    process's exit after Ctrl-C. Cancelling the awaiting task sets ``stop`` (``fn`` may look at
    it between steps and return early; its result is then dropped).

    Raises:
        whatever ``fn`` raises.
    """
    loop = asyncio.get_running_loop()
    future: concurrent.futures.Future = concurrent.futures.Future()
    stop = threading.Event()

    def run() -> None:
        try:
            future.set_result(fn(stop))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        return await asyncio.wrap_future(future, loop=loop)
    finally:
        stop.set()


class ThreadResults:
    """Awaits futures that other threads complete, waking the event loop once for all that
    complete together (:func:`asyncio.wrap_future` wakes it once per future: a system call and a
    loop turn for each row of a cache commit).

    Use it from one event loop (the first :meth:`wait`'s).
    """

    def __init__(self) -> None:
        self._done: list[tuple[concurrent.futures.Future, asyncio.Future]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def wait(self, future: concurrent.futures.Future) -> asyncio.Future:
        """An asyncio future with ``future``'s outcome (result, exception or cancellation);
        cancelling it leaves ``future`` alone."""
        self._loop = self._loop or asyncio.get_running_loop()
        waiter = self._loop.create_future()
        future.add_done_callback(lambda done: self._completed(done, waiter))
        return waiter

    def _completed(self, future: concurrent.futures.Future, waiter: asyncio.Future) -> None:
        with self._lock:
            first = not self._done
            self._done.append((future, waiter))
        if first:
            self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for future, waiter in done:
            copy_outcome(future, waiter)
