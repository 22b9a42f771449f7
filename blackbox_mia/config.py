"""Paths and settings shared across commands."""

from __future__ import annotations

import math
import os
from pathlib import Path

from .types import BlackboxMIAError

CACHE_ENV = "BBMIA_CACHE_DIR"
MAX_PORT = 65535  # the largest TCP port
NOT_AN_OPTION = {"option": False}
"""Metadata of a settings dataclass's field that no command line sets
(``field(metadata=NOT_AN_OPTION)``): the code derives it from other settings, and the commands
built from the dataclass (:func:`blackbox_mia.cli.options.option_fields`) leave it out."""


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """The cache root: ``override``, else ``$BBMIA_CACHE_DIR``, else ``./cache``. Created on demand."""
    root = Path(override or os.environ.get(CACHE_ENV) or "cache")
    root.mkdir(parents=True, exist_ok=True)
    return root


def check_number(
    option: str,
    value: float | None,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    given: str | None = None,
    integer: bool = False,
) -> None:
    """Check a numeric setting (a command-line option, a scorer parameter): finite and within the
    given bounds (None passes). The one place numeric ranges are checked.

    Args:
        option: the setting as the message names it: :func:`~blackbox_mia.option_names.named`
            (``epsilon=`` in Python, ``--epsilon`` on the command line), or a scorer parameter
            (``scorer 'pac': n_neighbours``); the message shows it with the value given.
        value: its value.
        above, at_least, below, at_most: strict / inclusive lower and upper bounds.
        given: the text the user typed, named in the message (default: ``repr(value)``).
        integer: the value must be an ``int`` (a count, a seed, a length), not a float.

    Raises:
        BlackboxMIAError: ``"--epsilon must be a finite number > 0, got nan"`` and the like.
    """
    if value is None:
        return
    bounds = [(above, ">", lambda v, b: v > b), (at_least, ">=", lambda v, b: v >= b),
              (below, "<", lambda v, b: v < b), (at_most, "<=", lambda v, b: v <= b)]
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float)) and math.isfinite(value)
    ok = ok and all(bound is None or test(value, bound) for bound, _, test in bounds)
    if not ok:
        wanted = " and ".join(f"{sign} {bound:g}" for bound, sign, _ in bounds if bound is not None)
        kind = "an integer" if integer or (isinstance(value, int) and not isinstance(value, bool)) else "a finite number"
        raise BlackboxMIAError(f"{option} must be {kind} {wanted}, got {repr(value) if given is None else given}")
