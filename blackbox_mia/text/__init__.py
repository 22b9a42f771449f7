"""Text utilities that every backend shares: sliding windows over long token sequences."""

from .windows import sliding_windows

__all__ = ["sliding_windows"]
