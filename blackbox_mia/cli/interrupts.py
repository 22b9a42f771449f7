"""Ctrl-C in a command: the first one stops the run cleanly, later ones are ignored while it does."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def interrupt_once() -> Iterator[None]:
    """Inside the block, the first SIGINT (Ctrl-C) raises :class:`KeyboardInterrupt` as usual and
    every later one is ignored, so the run can cancel its requests, close its cache and exit
    with one line (a second Ctrl-C during that unwinding would interrupt the cleanup itself and
    print asyncio's "Task was destroyed" lines or an atexit traceback). After an interrupt they
    stay ignored (the command is exiting); otherwise the previous handler is restored on exit.
    Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupted = False

    def first(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        if not interrupted:
            signal.signal(signal.SIGINT, previous)
