"""Segmenters (text/segment.py): hand-computed pieces, exact rebuild, the registry by name;
MeCab's Japanese words, the auto choice by kana/kanji share (text/script.py), the missing extra."""

from __future__ import annotations

import builtins
import pickle
import subprocess
import sys

import pytest

from blackbox_mia.text import (
    DEFAULT_SEGMENTER,
    SEGMENTERS,
    AutoSegmenter,
    CharSegmenter,
    JapaneseSegmenter,
    Segments,
    WhitespaceSegmenter,
    get_segmenter,
    is_japanese,
    kana_kanji_share,
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
    "東京は日本の首都です。",
    " 東京 は\n\nMeCab  と\tfugashi\u3000です\r\n",  # mixed Japanese / ASCII, spaces and newlines
    "NUL\x00の後も東京",  # MeCab cannot read NUL: cut out before tagging
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
    assert set(SEGMENTERS) == {"whitespace", "chars", "japanese", "auto"}
    assert isinstance(get_segmenter(), WhitespaceSegmenter)
    assert isinstance(get_segmenter("chars"), CharSegmenter)
    assert isinstance(get_segmenter("japanese"), JapaneseSegmenter)
    assert isinstance(get_segmenter("auto"), AutoSegmenter)
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'mecab'; known: auto, chars, japanese, whitespace"):
        get_segmenter("mecab")


def _words(segments: Segments) -> list[str]:
    return [segments.pieces[i] for i in segments.words]


def test_japanese_words_are_mecab_morphemes():
    segments = JapaneseSegmenter().segment("東京は日本の首都です。")
    assert segments.pieces == ("東京", "は", "日本", "の", "首都", "です", "。")
    assert segments.words == (0, 1, 2, 3, 4, 5, 6)


def test_japanese_keeps_the_whitespace_mecab_drops():
    text = " 東京 は\n\nMeCab  と\tfugashi\u3000です\r\n"
    assert JapaneseSegmenter().segment(text) == Segments(
        (" ", "東京", " ", "は", "\n\n", "MeCab", "  ", "と", "\t", "fugashi", "\u3000", "です", "\r", "\n"),
        (1, 3, 5, 7, 9, 11),
    )
    assert JapaneseSegmenter().segment("") == Segments((), ())
    # NUL and a lone surrogate cannot reach MeCab: pieces of their own, the rest is tagged
    assert JapaneseSegmenter().segment("東京\x00\ud800です") == Segments(("東京", "\x00\ud800", "です"), (0, 1, 2))


def test_japanese_tagger_is_lazy_and_reused(monkeypatch):
    segmenter = JapaneseSegmenter()
    assert "_tagger" not in vars(segmenter)  # nothing loaded by the constructor
    segmenter.segment("日本")
    tagger = vars(segmenter)["_tagger"]
    segmenter.segment("東京")
    assert vars(segmenter)["_tagger"] is tagger
    copy = pickle.loads(pickle.dumps(segmenter))  # the tagger does not travel; rebuilt on use
    assert "_tagger" not in vars(copy) and copy.segment("東京").pieces == ("東京",)


@pytest.mark.parametrize("missing", ["fugashi", "unidic_lite"])
def test_missing_extra_names_it(monkeypatch, missing):
    real_import = builtins.__import__

    def without(name, *args, **kwargs):
        if name == missing:
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
    segmenter = get_segmenter("auto")  # building it loads nothing, so it cannot fail
    assert segmenter.segment("plain English text").pieces == ("plain", " ", "English", " ", "text")
    message = rf"japanese segmenter needs fugashi and unidic-lite \({missing} is missing\): pip install 'blackbox_mia\[ja\]'"
    with pytest.raises(BlackboxMIAError, match=message):
        segmenter.segment("東京は日本の首都です。")
    with pytest.raises(BlackboxMIAError, match=message):
        JapaneseSegmenter().segment("anything")


def test_nothing_loads_mecab_before_a_japanese_text():
    code = (
        "import sys; from blackbox_mia.text import get_segmenter; from blackbox_mia.scorers import parse_scorer\n"
        "parse_scorer('pac:segmenter=auto').needs('an English text'); get_segmenter('auto').segment('English')\n"
        "assert 'fugashi' not in sys.modules\n"
        "get_segmenter('auto').segment('東京'); assert 'fugashi' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kana_kanji_share_by_hand():
    assert kana_kanji_share("東京タワーは 333 m") == 6 / 10  # 東京タワーは; not 3 3 3 m
    assert kana_kanji_share("東京。") == 2 / 3  # punctuation is not kana/kanji
    assert kana_kanji_share("ｶﾀｶﾅ々") == 1.0  # halfwidth katakana, iteration mark
    assert kana_kanji_share("𠮷野家") == 1.0  # U+20BB7, CJK Extension B
    assert kana_kanji_share("") == kana_kanji_share(" \n") == 0.0
    assert is_japanese("東京タワーは 333 m") and not is_japanese("東京 is big")  # 2 of 7
    assert not is_japanese("東京 ab")  # exactly half (2 of 4) is not a majority


def test_auto_chooses_per_text():
    auto = AutoSegmenter()
    assert auto.choose("東京は日本の首都です。").name == "japanese"
    assert auto.choose("Tokyo is the capital of Japan.").name == "whitespace"
    assert auto.choose("").name == "whitespace"
    assert _words(auto.segment("東京は日本の首都です。")) == ["東京", "は", "日本", "の", "首都", "です", "。"]
    assert _words(auto.segment("Tokyo is 東京")) == ["Tokyo", "is", "東京"]  # 2 of 9 characters
