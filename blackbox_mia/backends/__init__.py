"""Backends turn texts into :class:`~blackbox_mia.types.TokenLogprobs` and prompts into
:class:`~blackbox_mia.types.Generation`: ``local`` (a Hugging Face model) and ``api`` (an
OpenAI-compatible endpoint through the tracker), built from specs by :func:`build_backend`."""

from .base import FEATURES, FULL_DISTRIBUTION, GENERATE, LOGPROBS, Backend, check_texts
from .registry import BackendOptions, build_backend, parse_spec, register_backend

__all__ = [
    "FEATURES",
    "FULL_DISTRIBUTION",
    "GENERATE",
    "LOGPROBS",
    "Backend",
    "BackendOptions",
    "build_backend",
    "check_texts",
    "parse_spec",
    "register_backend",
]
