"""Segmenters: a text cut into pieces that keep what joins them, so the text can be rebuilt.

A :class:`Segments` holds ``pieces`` with ``"".join(pieces) == text`` and the indices of the
pieces that are *words*: the units a perturbation may move (PAC's swaps). The other pieces (the
whitespace between words, or empty strings) stay where they are. Segmenters are chosen by name
from :data:`SEGMENTERS`; ``whitespace`` is the default, ``japanese`` cuts words with MeCab
(extra ``ja``), ``chars`` cuts every character, and ``auto`` picks ``japanese`` or
``whitespace`` for each text.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

from ..types import BlackboxMIAError
from .script import is_japanese

_WHITESPACE = re.compile(r"(\s+)")
# Characters MeCab cannot read: NUL ends its C string, lone surrogates have no UTF-8 encoding.
_UNREADABLE = re.compile(r"([\x00\ud800-\udfff]+)")
JA_EXTRA_HINT = "pip install 'blackbox_mia[ja]'"


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
        unit: what its words are, for reports that count them: ``"words"`` or ``"characters"``.
    """

    name: ClassVar[str]
    unit: ClassVar[str] = "words"

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
        return Segments(pieces, _words(pieces))


@dataclass(frozen=True)
class CharSegmenter(Segmenter):
    """Every character (Unicode code point) is a piece; the non-whitespace ones are words.

    For scripts written without spaces between words. A combining mark is a piece of its own.
    Example: ``"日本 語"`` → pieces ``("日", "本", " ", "語")``, words ``(0, 1, 3)``.
    """

    name: ClassVar[str] = "chars"
    unit: ClassVar[str] = "characters"

    def segment(self, text: str) -> Segments:
        pieces = tuple(text)
        return Segments(pieces, _words(pieces))


def _words(pieces: tuple[str, ...]) -> tuple[int, ...]:
    """Indices of the pieces that are words: non-empty and not all whitespace."""
    return tuple(i for i, piece in enumerate(pieces) if piece and not piece.isspace())


def _mecab_tagger():
    """A MeCab tagger (fugashi) over the unidic-lite dictionary, named explicitly so that an
    installed full ``unidic`` package does not change the words.

    Raises:
        BlackboxMIAError: fugashi or unidic-lite is not installed (the extra ``ja``).
    """
    try:
        import fugashi
        import unidic_lite
    except ImportError as exc:
        raise BlackboxMIAError(
            f"the japanese segmenter needs fugashi and unidic-lite ({exc.name} is missing): {JA_EXTRA_HINT}"
        ) from exc
    dicdir = unidic_lite.DICDIR
    return fugashi.Tagger(f'-d "{dicdir}" -r "{os.path.join(dicdir, "mecabrc")}"')


@dataclass(frozen=True)
class JapaneseSegmenter(Segmenter):
    """Words are MeCab's morphemes (fugashi + unidic-lite, as Ishihara & Takahashi 2024 used).

    MeCab drops the whitespace between morphemes; it is kept here as separator pieces, so
    ``"".join(pieces) == text`` holds. A morpheme MeCab returns that is all whitespace (``"\\r"``,
    ``"\\u3000"``) is a separator too. NUL and lone surrogates, which MeCab cannot read, are cut
    out before tagging and kept as pieces of their own. The tagger is built on the first
    :meth:`segment` (nothing is imported or loaded before), then reused by this instance; one
    instance is not meant to be shared between threads.
    Example: ``"東京は日本の首都です。"`` → 東京 / は / 日本 / の / 首都 / です / 。

    Raises (from :meth:`segment`):
        BlackboxMIAError: fugashi or unidic-lite is missing (install the extra ``ja``).
    """

    name: ClassVar[str] = "japanese"

    @cached_property
    def _tagger(self):
        return _mecab_tagger()

    def __getstate__(self) -> dict:
        return {}  # the tagger is rebuilt on first use after a copy or unpickling

    def segment(self, text: str) -> Segments:
        pieces: list[str] = []
        for i, chunk in enumerate(_UNREADABLE.split(text)):
            if i % 2:  # an unreadable run
                pieces.append(chunk)
                continue
            pos = 0
            for node in self._tagger(chunk) if chunk else ():
                start = chunk.index(node.surface, pos)
                pieces.extend(p for p in (chunk[pos:start], node.surface) if p)
                pos = start + len(node.surface)
            if pos < len(chunk):
                pieces.append(chunk[pos:])
        pieces_t = tuple(pieces)
        return Segments(pieces_t, _words(pieces_t))


@dataclass(frozen=True)
class AutoSegmenter(Segmenter):
    """Chooses for each text: ``japanese`` when most (> 50%) of its non-space characters are kana
    or kanji (:func:`~blackbox_mia.text.script.is_japanese`, Unicode ranges in
    :data:`~blackbox_mia.text.script.KANA_KANJI_RANGES`), else ``whitespace``.

    The choice is made per text, not per corpus: in one corpus a Japanese paragraph is cut into
    MeCab words and an English one at whitespace. MeCab is loaded only when a Japanese text comes.

    Raises (from :meth:`segment`):
        BlackboxMIAError: a Japanese text and the extra ``ja`` missing.
    """

    name: ClassVar[str] = "auto"
    japanese: JapaneseSegmenter = field(default_factory=JapaneseSegmenter, repr=False, compare=False)
    whitespace: WhitespaceSegmenter = field(default_factory=WhitespaceSegmenter, repr=False, compare=False)

    def choose(self, text: str) -> Segmenter:
        """The segmenter this text gets (``japanese`` or ``whitespace``)."""
        return self.japanese if is_japanese(text) else self.whitespace

    def segment(self, text: str) -> Segments:
        return self.choose(text).segment(text)


SEGMENTERS: dict[str, type[Segmenter]] = {cls.name: cls for cls in (WhitespaceSegmenter, CharSegmenter, JapaneseSegmenter, AutoSegmenter)}
DEFAULT_SEGMENTER = WhitespaceSegmenter.name


def get_segmenter(name: str = DEFAULT_SEGMENTER) -> Segmenter:
    """The segmenter registered as ``name`` (see :data:`SEGMENTERS`): a new instance, built without
    loading anything (MeCab loads on the first Japanese text); keep it to segment many texts.

    Raises:
        BlackboxMIAError: no segmenter has that name.
    """
    if name not in SEGMENTERS:
        raise BlackboxMIAError(f"unknown segmenter {name!r}; known: {', '.join(sorted(SEGMENTERS))}")
    return SEGMENTERS[name]()
