"""``bbmia`` command line. Each command lives in its own module and registers on :data:`app`."""

from . import (  # noqa: F401  (registers commands)
    cache,
    canary,
    demo,
    documents,
    evaluate,
    exchangeability,
    memorize,
    models,
    probe,
    run,
    score,
    serve,
    unlearning,
)
from .app import app

__all__ = ["app"]
