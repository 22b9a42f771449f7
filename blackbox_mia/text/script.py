"""Which writing system a text is in: the share of its characters that are kana or kanji.

Used to tell Japanese text (written without spaces between words) from text that whitespace
segments well: :class:`~blackbox_mia.text.segment.AutoSegmenter` and the blind baseline's
analyzer choose by :func:`kana_kanji_share`.
"""

from __future__ import annotations

# Unicode blocks (inclusive code point ranges) whose characters count as kana or kanji.
KANA_KANJI_RANGES: tuple[tuple[int, int], ...] = (
    (0x3005, 0x3007),  # 々 〆 〇: ideographic iteration mark, closing mark, number zero
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana (with ー, the prolonged sound mark)
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # Halfwidth Katakana (in Halfwidth and Fullwidth Forms)
    (0x20000, 0x2FA1F),  # CJK Unified Ideographs Extensions B-F and Compatibility Supplement
)

JAPANESE_MAJORITY = 0.5
"""A text is Japanese when more than this share of its non-space characters are kana/kanji."""


def is_kana_kanji(char: str) -> bool:
    """True when the one character ``char`` lies in :data:`KANA_KANJI_RANGES`."""
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in KANA_KANJI_RANGES)


def kana_kanji_share(text: str) -> float:
    """Share in [0, 1] of the non-whitespace characters (code points) of ``text`` that are kana or kanji.

    Punctuation (。、「」), Latin letters and digits count as not kana/kanji. A text without
    non-whitespace characters has share 0.0. Han characters are shared with Chinese, so Chinese
    text has a high share too.
    """
    chars = [c for c in text if not c.isspace()]
    return sum(map(is_kana_kanji, chars)) / len(chars) if chars else 0.0


def is_japanese(text: str) -> bool:
    """True when ``kana_kanji_share(text) > JAPANESE_MAJORITY`` (most non-space characters are kana/kanji)."""
    return kana_kanji_share(text) > JAPANESE_MAJORITY
