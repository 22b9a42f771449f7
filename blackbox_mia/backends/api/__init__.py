"""The black-box backend: an OpenAI-compatible endpoint, its capability probe and the tracker."""

from ...tokenizers import (
    load_codec,  # re-exported: its old home was backends/api/backend.py
)
from .backend import ApiBackend

__all__ = ["ApiBackend", "load_codec"]
