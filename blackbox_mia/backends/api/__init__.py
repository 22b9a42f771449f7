"""The black-box backend: an OpenAI-compatible endpoint, its capability probe and the tracker."""

from .backend import ApiBackend, load_codec

__all__ = ["ApiBackend", "load_codec"]
