"""Text utilities that every backend and scorer shares.

* :mod:`.windows`: sliding context windows over long token sequences;
* :mod:`.segment`: segmenters that cut a text into words and what joins them;
* :mod:`.script`: the share of a text's characters that are kana/kanji (is it Japanese?).
"""

from .script import KANA_KANJI_RANGES, is_japanese, kana_kanji_share
from .segment import (
    DEFAULT_SEGMENTER,
    JA_EXTRA_HINT,
    SEGMENTERS,
    AutoSegmenter,
    CharSegmenter,
    JapaneseSegmenter,
    Segmenter,
    Segments,
    WhitespaceSegmenter,
    get_segmenter,
)
from .windows import sliding_windows

__all__ = [
    "DEFAULT_SEGMENTER",
    "JA_EXTRA_HINT",
    "KANA_KANJI_RANGES",
    "SEGMENTERS",
    "AutoSegmenter",
    "CharSegmenter",
    "JapaneseSegmenter",
    "Segmenter",
    "Segments",
    "WhitespaceSegmenter",
    "get_segmenter",
    "is_japanese",
    "kana_kanji_share",
    "sliding_windows",
]
