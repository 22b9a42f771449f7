"""Paths and settings shared across commands."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "BBMIA_CACHE_DIR"


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """The cache root: ``override``, else ``$BBMIA_CACHE_DIR``, else ``./cache``. Created on demand."""
    root = Path(override or os.environ.get(CACHE_ENV) or "cache")
    root.mkdir(parents=True, exist_ok=True)
    return root
