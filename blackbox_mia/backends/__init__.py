"""Backends turn texts into :class:`~blackbox_mia.types.TokenLogprobs`."""

from .base import Backend, check_texts

__all__ = ["Backend", "check_texts"]
