"""Chunks: a long document cut into consecutive snippets of N words or N tokens (Shi et al. 2024,
§5: books cut into 512-word snippets), each an exact substring of the document.

* :func:`chunk_words`: N consecutive words of a :class:`~blackbox_mia.text.segment.Segmenter`
  with what joins them (the whitespace between words stays inside a chunk; the separators
  between two chunks belong to neither).
* :func:`chunk_tokens`: N consecutive tokens of a :class:`~blackbox_mia.tokenizers.TokenCodec`,
  cut at the tokens' byte offsets (a cut inside a multi-byte character moves to the end of
  that character, so the chunk is still a substring).

Short tails: a last chunk of fewer than :func:`min_chunk_units` (N) = ⌈N/4⌉ units is MERGED into
the chunk before it (which then holds up to N + ⌈N/4⌉ − 1 units); a document shorter than that
altogether is one chunk. No text is dropped. :func:`sample_chunks` draws a seeded sample.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..option_names import named
from ..types import BlackboxMIAError
from .segment import Segmenter

if TYPE_CHECKING:
    from ..tokenizers import TokenCodec

MIN_CHUNK_FRACTION = 4  # a tail chunk of fewer than ⌈N / 4⌉ units is merged into the previous one


@dataclass(frozen=True)
class Chunk:
    """One snippet of a document.

    Attributes:
        index: its position among the document's chunks (0-based, before any sampling).
        start, end: character offsets: ``document[start:end] == text``.
        n_units: words or tokens it holds.
    """

    index: int
    start: int
    end: int
    n_units: int
    text: str


def min_chunk_units(size: int) -> int:
    """The fewest units a last chunk may hold before it is merged into the previous one: ⌈N/4⌉."""
    return math.ceil(size / MIN_CHUNK_FRACTION)


def _check_size(size: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BlackboxMIAError(f"chunk size must be an integer >= 1, got {size!r}")


def _spans(bounds: Sequence[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """``(first unit, last unit + 1)`` per chunk of ``size`` units over units whose
    character spans are ``bounds``, with the short tail merged."""
    n = len(bounds)
    starts = list(range(0, n, size))
    if len(starts) > 1 and n - starts[-1] < min_chunk_units(size):
        starts.pop()
    return [(a, starts[i + 1] if i + 1 < len(starts) else n) for i, a in enumerate(starts)]


def _make(text: str, bounds: Sequence[tuple[int, int]], size: int) -> list[Chunk]:
    chunks = []
    for index, (first, stop) in enumerate(_spans(bounds, size)):
        start, end = bounds[first][0], bounds[stop - 1][1]
        chunks.append(Chunk(index, start, end, stop - first, text[start:end]))
    return chunks


def chunk_words(text: str, size: int, segmenter: Segmenter) -> list[Chunk]:
    """``text`` cut into chunks of ``size`` consecutive words of ``segmenter``.

    A chunk runs from the first character of its first word to the last character of its last
    word (an exact substring); a short tail is merged (module docstring).

    Args:
        text: the document.
        size: N, words per chunk (>= 1).
        segmenter: what a word is (``whitespace``, ``chars``, ``japanese``, ``auto``).

    Returns:
        The chunks in document order; ``[]`` for a text without words.

    Raises:
        BlackboxMIAError: ``size`` < 1; as the segmenter (the extra ``ja`` missing).
    """
    _check_size(size)
    segments = segmenter.segment(text)
    offsets = [0]
    for piece in segments.pieces:
        offsets.append(offsets[-1] + len(piece))
    bounds = [(offsets[i], offsets[i + 1]) for i in segments.words]
    return _make(text, bounds, size)


def chunk_tokens(text: str, size: int, codec: TokenCodec) -> list[Chunk]:
    """``text`` cut into chunks of ``size`` consecutive tokens of ``codec`` (no BOS).

    Token spans come from the tokens' bytes; a span boundary inside a multi-byte character
    moves to the end of that character (the token holding the character's end keeps it).

    Raises:
        BlackboxMIAError: ``size`` < 1; a codec whose tokens' bytes do not spell the text
            (a normalizing tokenizer: chunk in words instead).
    """
    _check_size(size)
    data = text.encode("utf-8")
    ids = codec.encode(text)
    pieces = [codec.token_bytes(i) for i in ids]
    if b"".join(pieces) != data:
        raise BlackboxMIAError(
            f"the tokenizer {codec.name!r} does not spell the text back byte for byte (it normalizes it): "
            f"chunk in words ({named('chunk_words')}) instead"
        )
    # the character index of every byte offset; an offset inside a character rounds up to its end
    char_at = [-1] * (len(data) + 1)
    byte = 0
    for index, character in enumerate(text):
        char_at[byte] = index
        byte += len(character.encode("utf-8"))
    char_at[len(data)] = len(text)
    for byte in range(len(data) - 1, -1, -1):
        if char_at[byte] < 0:
            char_at[byte] = char_at[byte + 1]
    bounds, byte = [], 0
    for piece in pieces:
        bounds.append((char_at[byte], char_at[byte + len(piece)]))
        byte += len(piece)
    return _make(text, bounds, size)


def sample_chunks(chunks: Sequence[Chunk], k: int | None, seed: int, key: str) -> list[Chunk]:
    """A seeded sample of ``k`` chunks (all of them when ``k`` is None or >= their number), in
    document order. The draw depends only on ``seed``, ``key`` (the document id) and the
    number of chunks, not on the other documents.

    Raises:
        BlackboxMIAError: ``k`` < 1.
    """
    if k is None or k >= len(chunks):
        return list(chunks)
    _check_size(k)
    picked = random.Random(f"{seed}:{key}").sample(range(len(chunks)), k)
    return [chunks[i] for i in sorted(picked)]
