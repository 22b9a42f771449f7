"""Token names and bytes as the emulated server reports them."""

from __future__ import annotations

from collections.abc import Sequence

from ..tokenizers import TokenCodec, is_partial


class TokenNames:
    """Name and bytes of every token id, cached (the server asks for the same ids again and again).

    Args:
        codec: the model's token codec (OpenAI's names: ``"bytes:\\xNN"`` for a partial character).
        empty_partial_names: name a token whose bytes are not valid UTF-8 on their own ``""``
            (as vLLM and OpenAI chat do) instead of the codec's name.
    """

    def __init__(self, codec: TokenCodec, empty_partial_names: bool):
        self._codec = codec
        self._empty_partial = empty_partial_names
        self._cache: dict[int, tuple[str, bytes]] = {}

    def __call__(self, token_id: int) -> tuple[str, bytes]:
        """``(name, bytes)`` of ``token_id``; ids beyond the tokenizer read ``token_id:N`` with no bytes."""
        entry = self._cache.get(token_id)
        if entry is None:
            try:
                raw = self._codec.token_bytes(token_id)
                name = "" if self._empty_partial and is_partial(raw) else self._codec.token_string(token_id)
                entry = (name, raw)
            except (KeyError, IndexError, ValueError):
                entry = (f"token_id:{token_id}", b"")
            self._cache[token_id] = entry
        return entry

    def text(self, ids: Sequence[int]) -> str:
        """The text of ``ids``: their bytes joined, decoded as UTF-8 (U+FFFD for invalid bytes)."""
        return b"".join(self(i)[1] for i in ids).decode("utf-8", errors="replace")


def longest_piece_bytes(tokenizer) -> int:
    """The UTF-8 length of the longest piece in ``tokenizer``'s vocabulary (at least 1): no token
    stands for more bytes of text (a byte-level piece has one character per byte, a
    SentencePiece piece spells its text, a byte-fallback piece ``<0xNN>`` one byte)."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return max([1, *(len(p.encode("utf-8")) for p in pieces if p is not None)])

