"""Ctrl-C in a command: the first one stops the run cleanly, a second one exits at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

INTERRUPTED_EXIT = 130  # exit status after Ctrl-C (128 + SIGINT), as shells report it


@contextlib.contextmanager
def interrupt_once() -> Iterator[None]:
    """Inside the block, the first SIGINT (Ctrl-C) raises :class:`KeyboardInterrupt` as usual:
    the run stops sending, lets the requests in flight land in the cache for a short grace
    period (:data:`~blackbox_mia.backends.api.backend.INTERRUPT_GRACE_S`), closes its cache and
    exits with one line. A second SIGINT during that unwinding exits at once with status
    :data:`INTERRUPTED_EXIT` and one line on stderr (answers still in flight, and rows not yet
    committed, are asked again by the rerun), instead of interrupting the cleanup itself (which
    printed asyncio's "Task was destroyed" lines or an atexit traceback); once the block is left
    after an interrupt, SIGINT is ignored. Otherwise the previous handler is restored on exit.
    Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupted = False

    def again(signum: int, frame: FrameType | None) -> None:
        sys.stderr.write("interrupted again: exiting at once; answers still in flight will be asked again\n")
        sys.stderr.flush()
        os._exit(INTERRUPTED_EXIT)

    def first(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        # after an interrupt the cleanup has run by now and the process is exiting: later SIGINTs
        # are ignored (Python's finalization would put back the default action, death by signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN if interrupted else previous)
