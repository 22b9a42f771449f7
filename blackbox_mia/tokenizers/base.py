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


def ends_open(token_bytes: bytes) -> bool:
    """Whether the bytes end inside a multi-byte character: a lead byte among the last three
    whose character needs more bytes than follow it (``b" \xc3"``, ``b"\xe2\x80"``).

    A server that keeps generating while its output ends so (llama-cpp-python ignores
    ``max_tokens`` then) runs on for as long as a ``logit_bias`` keeps favouring such a token.
    """
    tail = token_bytes[-3:]
    for k, byte in enumerate(reversed(tail), start=1):  # k: bytes from this one to the end
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        need = 4 if byte & 0xF8 == 0xF0 else 3 if byte & 0xF0 == 0xE0 else 2 if byte & 0xE0 == 0xC0 else 1
        return need > k
    return False


LOSSY_NAMINGS = ("ignore", "replace")
"""How servers that do not render partial tokens as ``bytes:`` name them: the token's bytes
decoded with ``errors="ignore"`` (llama-cpp-python: ``b" \xc3"`` is named ``" "``, like the
space) or ``errors="replace"`` (U+FFFD); some name them ``""``."""


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
        max_length: the context in tokens of the model the tokenizer ships with, when its
            configuration says (a Hugging Face tokenizer's ``model_max_length``), else ``None``.
    """

    name: str
    bos_id: int | None = None
    max_length: int | None = None

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
        """The name of one token (see :func:`render_token`), computed once per id.

        Raises:
            KeyError: ``token_id`` names no token.
        """
        names = self._names
        name = names.get(token_id)
        if name is None:
            name = names[token_id] = render_token(self.token_bytes(token_id))
        return name

    @cached_property
    def _names(self) -> dict[int, str]:
        """The names :meth:`token_string` has computed, by id (a codec's vocabulary is fixed)."""
        return {}

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

    @cached_property
    def open_ids(self) -> frozenset[int]:
        """Ids whose bytes end inside a multi-byte character (:func:`ends_open`)."""
        return frozenset(i for i in self.partial_ids if ends_open(self.token_bytes(i)))

    @cached_property
    def lossy_names(self) -> dict[str, frozenset[int]]:
        """Every name a server may give a partial token under :data:`LOSSY_NAMINGS` or as ``""``,
        mapped to the partial ids it may denote (a space plus a lead byte is ``" "`` under
        ``ignore``: the name of the space token too)."""
        table: dict[str, set[int]] = {"": set(self.partial_ids)}
        for i in self.partial_ids:
            for errors in LOSSY_NAMINGS:
                table.setdefault(self.token_bytes(i).decode("utf-8", errors=errors), set()).add(i)
        return {name: frozenset(ids) for name, ids in table.items()}

    def lookup(self, token: str, token_bytes: Sequence[int] | None = None, lossy: bool = True) -> list[int]:
        """Ids that a returned entry may denote: exact when its bytes are given, else by name:
        the ids this package names so, plus (``lossy``, unless the server is known to name
        partial tokens exactly) the partial ids a lossy naming gives that name
        (:attr:`lossy_names`)."""
        if token_bytes is not None:
            rendered = render_token(bytes(token_bytes))
            return [i for i in self.ids_by_string.get(rendered, []) if self.token_bytes(i) == bytes(token_bytes)]
        if token.startswith("token_id:"):  # vLLM's return_tokens_as_token_ids
            return [int(token.removeprefix("token_id:"))]
        ids = self.ids_by_string.get(token, [])
        if lossy and token in self.lossy_names:
            return sorted(set(ids) | self.lossy_names[token])
        return ids
