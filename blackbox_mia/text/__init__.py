"""Text utilities that every backend and scorer shares.

* :mod:`.windows`: sliding context windows over long token sequences;
* :mod:`.segment`: segmenters that cut a text into words and what joins them.
"""

from .segment import (
    DEFAULT_SEGMENTER,
    SEGMENTERS,
    CharSegmenter,
    Segmenter,
    Segments,
    WhitespaceSegmenter,
    get_segmenter,
)
from .windows import sliding_windows

__all__ = [
    "DEFAULT_SEGMENTER",
    "SEGMENTERS",
    "CharSegmenter",
    "Segmenter",
    "Segments",
    "WhitespaceSegmenter",
    "get_segmenter",
    "sliding_windows",
]
