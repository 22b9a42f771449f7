"""Progress of a scoring run: the requests sent, their rate and the spend so far, on the
progress bar (:class:`ProgressTicker`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tqdm.auto import tqdm

from .backends.base import Backend

PROGRESS_REFRESH_S = 1.0  # seconds between two refreshes of the progress bar's requests and spend


def usage_line(backends: Sequence[Backend], elapsed_s: float) -> str | None:
    """``"1234 req (56.7/s), $0.0123"``: requests the backends sent, their rate over ``elapsed_s``
    seconds and the estimated spend in USD (``"unpriced"`` when a model has no price); ``None``
    when no backend sends requests (local models)."""
    usages = [b.usage for b in backends if b.usage is not None]
    if not usages:
        return None
    requests = sum(u.requests for u in usages)
    rate = requests / elapsed_s if elapsed_s > 0 else 0.0
    spend = "unpriced" if any(u.unpriced for u in usages) and not any(u.cost_usd for u in usages) else \
        f"${sum(u.cost_usd for u in usages):.4f}"
    return f"{requests} req ({rate:.1f}/s), {spend}"


class ProgressTicker:
    """Keeps a progress bar's postfix at :func:`usage_line` of the backends: on :meth:`refresh`
    and every :data:`PROGRESS_REFRESH_S` seconds from a daemon thread (only when a backend sends
    requests), so the bar moves while a long text's requests go out.

    Args:
        bar: the tqdm bar.
        backends: whose usage is shown.
    """

    def __init__(self, bar: tqdm, backends: Sequence[Backend]):
        self.bar = bar
        self.backends = list(backends)
        self.started = time.monotonic()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if any(b.usage is not None for b in self.backends):
            self._thread = threading.Thread(target=self._tick, name="bbmia-progress", daemon=True)
            self._thread.start()

    def refresh(self) -> None:
        """Show the current requests, rate and spend."""
        line = usage_line(self.backends, time.monotonic() - self.started)
        if line is not None:
            self.bar.set_postfix_str(line, refresh=True)

    def _tick(self) -> None:
        while not self._stopped.wait(PROGRESS_REFRESH_S):
            self.refresh()

    def stop(self) -> None:
        """Show the final values and stop the thread."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        self.refresh()
