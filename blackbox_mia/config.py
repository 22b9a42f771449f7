"""Paths and settings shared across commands."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "BBMIA_CACHE_DIR"
NOT_AN_OPTION = {"option": False}
"""Metadata of a settings dataclass's field that no command line sets
(``field(metadata=NOT_AN_OPTION)``): the code derives it from other settings, and the commands
built from the dataclass (:func:`blackbox_mia.cli.options.option_fields`) leave it out."""


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """The cache root: ``override``, else ``$BBMIA_CACHE_DIR``, else ``./cache``. Created on demand."""
    root = Path(override or os.environ.get(CACHE_ENV) or "cache")
    root.mkdir(parents=True, exist_ok=True)
    return root
