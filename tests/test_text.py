"""Segmenters (text/segment.py): hand-computed pieces, exact rebuild, the registry by name."""

from __future__ import annotations

import pytest

from blackbox_mia.text import (
    DEFAULT_SEGMENTER,
    SEGMENTERS,
    CharSegmenter,
    Segments,
    WhitespaceSegmenter,
    get_segmenter,
)
from blackbox_mia.types import BlackboxMIAError

TEXTS = [
    "",
    " ",
    "word",
    "Natalia sold clips to 48 of her friends.",
    "  two\tspaces\n\nand a newline  ",
    "naïve café, déjà vu",
    "東京タワーは 333 m",
    "e\u0301 combining\u00a0no-break\u3000ideographic space",
]


def test_whitespace_pieces_by_hand():
    assert WhitespaceSegmenter().segment("a  b\tc") == Segments(("a", "  ", "b", "\t", "c"), (0, 2, 4))
    # leading / trailing whitespace: empty first / last piece, never a word
    assert WhitespaceSegmenter().segment(" a ") == Segments(("", " ", "a", " ", ""), (2,))
    assert WhitespaceSegmenter().segment("") == Segments(("",), ())
    assert WhitespaceSegmenter().segment("   ") == Segments(("", "   ", ""), ())


def test_whitespace_words_are_str_split_words():
    for text in TEXTS:
        segments = WhitespaceSegmenter().segment(text)
        assert [segments.pieces[i] for i in segments.words] == text.split()


def test_chars_pieces_by_hand():
    assert CharSegmenter().segment("日本 語") == Segments(("日", "本", " ", "語"), (0, 1, 3))
    assert CharSegmenter().segment("é!") == Segments(("é", "!"), (0, 1))
    assert CharSegmenter().segment("e\u0301") == Segments(("e", "\u0301"), (0, 1))  # code points
    assert CharSegmenter().segment("") == Segments((), ())


@pytest.mark.parametrize("name", sorted(SEGMENTERS))
@pytest.mark.parametrize("text", TEXTS)
def test_pieces_rebuild_the_text(name, text):
    segments = get_segmenter(name).segment(text)
    assert segments.text == "".join(segments.pieces) == text
    assert list(segments.words) == sorted(set(segments.words))
    assert all(segments.pieces[i] and not segments.pieces[i].isspace() for i in segments.words)
    # every non-word piece is whitespace (or empty): nothing but the words can move
    others = [p for i, p in enumerate(segments.pieces) if i not in segments.words]
    assert all(p == "" or p.isspace() for p in others)


def test_registry_by_name():
    assert DEFAULT_SEGMENTER == "whitespace"
    assert set(SEGMENTERS) == {"whitespace", "chars"}
    assert isinstance(get_segmenter(), WhitespaceSegmenter)
    assert isinstance(get_segmenter("chars"), CharSegmenter)
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'japanese'; known: chars, whitespace"):
        get_segmenter("japanese")
