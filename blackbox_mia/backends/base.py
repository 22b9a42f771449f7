"""The backend interface: texts in, one :class:`~blackbox_mia.types.TokenLogprobs` per text out."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from ..types import BlackboxMIAError, TokenLogprobs

OnDone = Callable[[int, TokenLogprobs], None]
"""Completion callback of :meth:`Backend.logprobs`: ``on_done(index, logprobs)``."""


class Backend(ABC):
    """A source of per-token log-probs (local torch model, or black-box API + tracker).

    Attributes:
        provides_vocab_stats: whether returned log-probs carry ``mu``/``sigma`` (Min-K%++).
    """

    provides_vocab_stats: bool = False

    @abstractmethod
    def logprobs(
        self, texts: Sequence[str], progress: bool = False, on_done: OnDone | None = None
    ) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text, in input order.

        Args:
            texts: the texts.
            progress: show a progress bar on stderr.
            on_done: called as ``on_done(index, logprobs)`` once per text, as soon as the
                log-probs of ``texts[index]`` are final (in any order, in the calling thread,
                before this method returns). Whatever it raises stops the computation and
                propagates out of this method; texts finished before that were reported.

        Raises:
            BlackboxMIAError: an empty text, or a text with no scorable token.
        """

    @abstractmethod
    def describe(self) -> dict:
        """JSON-ready configuration of this backend, saved next to every result."""

    def close(self) -> None:
        """Release resources (servers, sessions); idempotent."""


def check_texts(texts: Sequence[str]) -> None:
    """Raise :class:`BlackboxMIAError` naming the first empty or non-string text."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BlackboxMIAError(f"text #{i} is {type(text).__name__}, not a string")
        if not text.strip():
            raise BlackboxMIAError(f"text #{i} is empty: nothing to score")


def accepts_on_done(backend: Backend) -> bool:
    """Whether ``backend.logprobs`` takes the ``on_done`` keyword (older or third-party backends
    may not; callers then treat every text as finished when ``logprobs`` returns)."""
    try:
        params = inspect.signature(backend.logprobs).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "on_done" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
