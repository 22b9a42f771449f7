"""The backend interface: texts in, one :class:`~blackbox_mia.types.TokenLogprobs` per text out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..types import BlackboxMIAError, TokenLogprobs


class Backend(ABC):
    """A source of per-token log-probs (local torch model, or black-box API + tracker).

    Attributes:
        provides_vocab_stats: whether returned log-probs carry ``mu``/``sigma`` (Min-K%++).
    """

    provides_vocab_stats: bool = False

    @abstractmethod
    def logprobs(self, texts: Sequence[str], progress: bool = False) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text, in input order.

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
