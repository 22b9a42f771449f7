"""The token codec interface and THE token-string convention of the package.

Every :class:`~blackbox_mia.types.TokenLogprobs` names its tokens with :func:`render_token`, on
every path (local model, OpenAI-compatible API, the emulator): the token's exact bytes decoded as
UTF-8, or, when those bytes are not valid UTF-8 on their own (part of a multi-byte character),
``"bytes:"`` followed by one ``\\xNN`` escape per byte (lower-case hex). This is the name OpenAI's
API gives such tokens in ``top_logprobs``, so strings from the two paths compare equal.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property

BYTES_PREFIX = "bytes:"


def is_partial(token_bytes: bytes) -> bool:
    """Whether a token's bytes are not valid UTF-8 on their own (part of a multi-byte character)."""
    try:
        token_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def render_token(token_bytes: bytes) -> str:
    """The package's name of a token: its UTF-8 text, else ``"bytes:"`` + ``\\xNN`` escapes.

    Example: ``b"caf"`` → ``"caf"``; ``b"\\xc3"`` (first byte of "é") → ``"bytes:\\xc3"``.
    """
    if is_partial(token_bytes):
        return BYTES_PREFIX + "".join(f"\\x{b:02x}" for b in token_bytes)
    return token_bytes.decode("utf-8")


class TokenCodec(ABC):
    """Text ↔ token ids of one model, with token names per :func:`render_token`.

    Attributes:
        name: tokenizer name (saved with results).
        bos_id: BOS token id prepended before scoring, or ``None`` (then the first text token
            is context, not scored).
    """

    name: str
    bos_id: int | None = None

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it are encoded as plain text."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes of one token.

        Raises:
            KeyError: ``token_id`` names no token.
        """

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids (ids are ``0 .. vocab_size - 1``)."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of ids (invalid UTF-8 replaced by U+FFFD)."""
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_string(self, token_id: int) -> str:
        """The name of one token (see :func:`render_token`)."""
        return render_token(self.token_bytes(token_id))

    @cached_property
    def ids_by_string(self) -> dict[str, list[int]]:
        """Inverse of :meth:`token_string`: names that several ids share map to all of them."""
        table: dict[str, list[int]] = {}
        for i in range(self.vocab_size):
            with contextlib.suppress(KeyError, ValueError):
                table.setdefault(self.token_string(i), []).append(i)
        return table

    @cached_property
    def partial_ids(self) -> frozenset[int]:
        """Ids whose bytes are not valid UTF-8 on their own (part of a multi-byte character)."""
        return frozenset(i for ids in self.ids_by_string.values() for i in ids if is_partial(self.token_bytes(i)))

    def lookup(self, token: str, token_bytes: Sequence[int] | None = None) -> list[int]:
        """Ids that a returned entry may denote: exact when its bytes are given, else by name."""
        if token_bytes is not None:
            rendered = render_token(bytes(token_bytes))
            return [i for i in self.ids_by_string.get(rendered, []) if self.token_bytes(i) == bytes(token_bytes)]
        if token.startswith("token_id:"):  # vLLM's return_tokens_as_token_ids
            return [int(token.removeprefix("token_id:"))]
        return self.ids_by_string.get(token, [])
