"""The black-box backend: an OpenAI-compatible endpoint, its capability probe and the tracker.

The names below are imported on first use (:mod:`blackbox_mia.lazy`): importing a light module
of the sub-tree (``http.config``, ``http.errors``' names...) does not load the HTTP client.
"""

from ...lazy import lazy_exports

_EXPORTS = {
    "ApiBackend": ".backend",
    "load_codec": "blackbox_mia.tokenizers",  # re-exported: its old home was backends/api/backend.py
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
