"""Long texts tokenized in windows, with memory proportional to one window, not the whole text.

A fast tokenizer's one call on a long text holds its whole encoding at once (token strings,
offsets, masks, alignments: gigabytes for a 10 MB text) and keeps the GIL for seconds at a time
while it hands the ids to Python, stalling the event loop (figures: records/measured-settings.md).
:func:`encode_long` encodes
:data:`WINDOW_CHARS` characters at a time instead and joins the windows where the tokenization
provably does not depend on the cut: at a token boundary that an independent encoding of the
text around it (:data:`CHECK_CHARS` characters on each side) also has, with the same tokens on
both sides. A window whose tokens' bytes do not spell its text (a normalizing tokenizer, e.g.
one that prepends a space), or a cut where the check disagrees, falls back to one call on the
whole text: exact always, small where the tokenizer allows.
"""

from __future__ import annotations

import logging
import numpy as np

from .base import TokenCodec

LOG = logging.getLogger(__name__)
WINDOW_CHARS = 250_000  # characters encoded in one call (about 60 MB of tokenizer memory)
CHECK_CHARS = 2_000  # characters on each side of a cut that an independent encoding must agree on


def byte_lengths(codec: TokenCodec) -> np.ndarray:
    """Shape (vocab_size,): each token's length in bytes (0 for ids that name no token)."""
    lengths = np.zeros(codec.vocab_size, dtype=np.int64)
    for i in range(codec.vocab_size):
        try:
            lengths[i] = len(codec.token_bytes(i))
        except KeyError:
            continue
    return lengths


class LongEncoder:
    """:meth:`encode` for texts of any length (see the module docstring).

    Args:
        codec: the tokenizer.
        window_chars: characters per tokenizer call (> 4 * ``check_chars``).
        check_chars: characters on each side of a cut that an independent encoding checks.
    """

    def __init__(self, codec: TokenCodec, window_chars: int = WINDOW_CHARS, check_chars: int = CHECK_CHARS):
        self.codec = codec
        self.window_chars = window_chars
        self.check_chars = check_chars
        self._lengths: np.ndarray | None = None  # byte_lengths(codec), on the first long text

    def encode(self, text: str) -> list[int]:
        """``codec.encode(text)``, computed window by window for a text longer than a window."""
        if len(text) <= self.window_chars:
            return self.codec.encode(text)
        if self._lengths is None:
            self._lengths = byte_lengths(self.codec)
        ids: list[int] = []
        start, head = 0, []  # characters before start are tokenized (ids); the tokens expected next
        while True:
            end = min(len(text), start + self.window_chars)
            window = self.codec.encode(text[start:end])
            spans = self._spans(text[start:end], window)
            if spans is None:
                return self._whole(text, "its tokens do not spell the text")
            if window[: len(head)] != head:
                return self._whole(text, "a cut between windows changes its tokens")
            if end == len(text):
                return ids + window
            found = self._cut(text, start, window, spans)
            if found is None:
                return self._whole(text, "no cut between windows that keeps its tokens")
            kept, head = found
            ids += window[:kept]
            start += spans[0][kept - 1]

    def _spans(self, text: str, ids: list[int]) -> tuple[list[int], list[bool]] | None:
        """Per token of ``ids`` (``text``'s encoding): the characters of ``text`` up to its end
        (the character it ends inside counted out) and whether it ends between two characters;
        ``None`` when the tokens' bytes do not add up to ``text``'s."""
        raw = text.encode("utf-8")
        ends = np.cumsum(self._lengths[np.asarray(ids, dtype=np.int64)])
        if not ids or int(ends[-1]) != len(raw):
            return None
        starts = np.append(np.frombuffer(raw, dtype=np.uint8) & 0xC0 != 0x80, True)  # a character starts here
        chars = np.cumsum(starts) - 1  # characters before each byte offset, the one starting there not counted
        return chars[ends].tolist(), starts[ends].tolist()

    def _cut(self, text: str, start: int, window: list[int],
             spans: tuple[list[int], list[bool]]) -> tuple[int, list[int]] | None:
        """``(tokens of window kept, tokens the next window must start with)``: the cut is the
        last boundary between characters at least ``2 * check_chars`` before the window's end;
        an independent encoding of ``check_chars`` characters on each side must have it too,
        with the window's tokens over the half before it, and gives the tokens expected over the
        half after it. ``None``: no such cut."""
        check, (offsets, between) = self.check_chars, spans
        limit = offsets[-1] - 2 * check
        kept = next((k for k in range(len(window) - 1, 0, -1) if between[k - 1] and offsets[k - 1] <= limit), None)
        if kept is None or offsets[kept - 1] < 2 * check:
            return None
        at = start + offsets[kept - 1]
        around = self.codec.encode(text[at - check : at + check])
        local = self._spans(text[at - check : at + check], around)
        if local is None or check not in local[0]:
            return None
        split = local[0].index(check) + 1
        if not (split and local[1][split - 1]):
            return None
        tail = [t for t, o in zip(around[:split], local[0][:split]) if o > check // 2]
        head = [t for t, o in zip(around[split:], local[0][split:]) if o <= check + check // 2]
        if not tail or window[kept - len(tail) : kept] != tail:
            return None
        return kept, head

    def _whole(self, text: str, why: str) -> list[int]:
        LOG.info("tokenizing a %d-character text in one call (%s)", len(text), why)
        return self.codec.encode(text)
