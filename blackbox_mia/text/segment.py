"""Segmenters: a text cut into pieces that keep what joins them, so the text can be rebuilt.

A :class:`Segments` holds ``pieces`` with ``"".join(pieces) == text`` and the indices of the
pieces that are *words*: the units a perturbation may move (PAC's swaps). The other pieces (the
whitespace between words, or empty strings) stay where they are. Segmenters are chosen by name
from :data:`SEGMENTERS`; ``whitespace`` is the default.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from ..types import BlackboxMIAError

_WHITESPACE = re.compile(r"(\s+)")


@dataclass(frozen=True)
class Segments:
    """One text's pieces.

    Attributes:
        pieces: the text cut into pieces; ``"".join(pieces)`` is the text (characters kept).
        words: indices into ``pieces`` of the words, in text order.
    """

    pieces: tuple[str, ...]
    words: tuple[int, ...]

    @property
    def text(self) -> str:
        """The text the pieces rebuild."""
        return "".join(self.pieces)


class Segmenter(ABC):
    """Cuts a text into :class:`Segments`. Subclasses are frozen dataclasses of their parameters.

    Class attributes:
        name: registry name (``"whitespace"``).
    """

    name: ClassVar[str]

    @abstractmethod
    def segment(self, text: str) -> Segments:
        """The pieces of ``text`` (``segment(text).text == text`` for every text, ``""`` included)."""


@dataclass(frozen=True)
class WhitespaceSegmenter(Segmenter):
    """Words are the maximal runs of non-whitespace characters (``str.split()``'s words).

    Pieces alternate word / whitespace run as ``re.split(r"(\\s+)", text)`` returns them: a text
    that starts or ends with whitespace has an empty first or last piece, which is not a word.
    Example: ``" a  b"`` → pieces ``("", " ", "a", "  ", "b")``, words ``(2, 4)``.
    """

    name: ClassVar[str] = "whitespace"

    def segment(self, text: str) -> Segments:
        pieces = tuple(_WHITESPACE.split(text))
        return Segments(pieces, tuple(i for i, piece in enumerate(pieces) if piece and not piece.isspace()))


@dataclass(frozen=True)
class CharSegmenter(Segmenter):
    """Every character (Unicode code point) is a piece; the non-whitespace ones are words.

    For scripts written without spaces between words. A combining mark is a piece of its own.
    Example: ``"日本 語"`` → pieces ``("日", "本", " ", "語")``, words ``(0, 1, 3)``.
    """

    name: ClassVar[str] = "chars"

    def segment(self, text: str) -> Segments:
        pieces = tuple(text)
        return Segments(pieces, tuple(i for i, char in enumerate(pieces) if not char.isspace()))


SEGMENTERS: dict[str, type[Segmenter]] = {cls.name: cls for cls in (WhitespaceSegmenter, CharSegmenter)}
DEFAULT_SEGMENTER = WhitespaceSegmenter.name


def get_segmenter(name: str = DEFAULT_SEGMENTER) -> Segmenter:
    """The segmenter registered as ``name`` (see :data:`SEGMENTERS`).

    Raises:
        BlackboxMIAError: no segmenter has that name.
    """
    if name not in SEGMENTERS:
        raise BlackboxMIAError(f"unknown segmenter {name!r}; known: {', '.join(sorted(SEGMENTERS))}")
    return SEGMENTERS[name]()
