"""Backends turn texts into :class:`~blackbox_mia.types.TokenLogprobs` and prompts into
:class:`~blackbox_mia.types.Generation`: ``local`` (a Hugging Face model) and ``api`` (an
OpenAI-compatible endpoint through the tracker), built from specs by :func:`build_backend`,
each kind with its own options (:class:`LocalOptions`, :class:`ApiOptions`)."""

from .base import FEATURES, FULL_DISTRIBUTION, GENERATE, LOGPROBS, Backend, check_texts
from .registry import (
    ApiOptions,
    BackendSpec,
    LocalOptions,
    build_backend,
    options_from_query,
    parse_spec,
    read_spec,
    register_backend,
)

__all__ = [
    "FEATURES",
    "FULL_DISTRIBUTION",
    "GENERATE",
    "LOGPROBS",
    "ApiOptions",
    "Backend",
    "BackendSpec",
    "LocalOptions",
    "build_backend",
    "check_texts",
    "options_from_query",
    "parse_spec",
    "read_spec",
    "register_backend",
]
