"""Services run in a background thread with their own event loop (the server, the fault proxy)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from ..backends.local import LocalBackend
from .config import ServerConfig
from .server import ValidationServer


@contextlib.contextmanager
def run_in_background(service, thread_name: str) -> Iterator:
    """Run an asyncio ``service`` (with coroutine methods ``start()`` and ``stop()``) in a daemon
    thread with its own event loop.

    Yields what ``start()`` returned, and stops the service (then the loop) on exit, also when
    ``start()`` failed.

    Raises:
        Exception: whatever ``start()`` raised.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=thread_name, daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(service.start(), loop).result()
    finally:
        try:
            asyncio.run_coroutine_threadsafe(service.stop(), loop).result(timeout=60)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=60)
            if not thread.is_alive():
                loop.close()


@contextlib.contextmanager
def serve_in_background(config: ServerConfig, backend: LocalBackend | None = None) -> Iterator[str]:
    """Run a :class:`ValidationServer` in a daemon thread with its own event loop.

    Yields the base URL (``http://127.0.0.1:PORT/v1``) once the server accepts connections, and
    stops it cleanly on exit.

    Args:
        config: the server configuration (``port=0`` picks a free port).
        backend: an already loaded model to serve, else ``config.model`` is loaded.

    Raises:
        BlackboxMIAError: as :meth:`ValidationServer.start`.
    """
    with run_in_background(ValidationServer(config, backend), "bbmia-serve") as url:
        yield url
