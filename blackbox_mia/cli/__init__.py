"""``bbmia`` command line. Each command lives in its own module and registers on :data:`app`."""

from . import canary, demo, documents, evaluate, memorize, probe, score, serve  # noqa: F401  (registers commands)
from .app import app

__all__ = ["app"]
