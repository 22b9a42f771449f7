"""Paths and settings shared across commands."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .option_names import named
from .types import BlackboxMIAError

CACHE_ENV = "BBMIA_CACHE_DIR"
MAX_PORT = 65535  # the largest TCP port
NOT_AN_OPTION = {"option": False}
"""Metadata of a settings dataclass's field that no command line sets
(``field(metadata=NOT_AN_OPTION)``): the code derives it from other settings, and the commands
built from the dataclass (:func:`blackbox_mia.cli.options.option_fields`) leave it out."""


BOUNDS = "bounds"
"""Metadata key of a settings dataclass's field holding its range: keyword arguments of
:func:`check_number` (``{"above": 0}``), set by :func:`bounded`."""


def bounded(default: Any = dataclasses.MISSING, *, above: float | None = None, at_least: float | None = None,
            below: float | None = None, at_most: float | None = None, integer: bool = False, **field_args: Any) -> Any:
    """A dataclass field with a range: ``concurrency: int = bounded(16, at_least=1)``. The range
    lives with the field (its metadata :data:`BOUNDS`), is checked by :func:`check_bounds`, and is
    read by whatever else names the setting (a kind's options, their flags): one home per range.

    Args:
        default: the field's default.
        above, at_least, below, at_most: strict / inclusive bounds (see :func:`check_number`);
            a tuple value's bounds hold for each element.
        integer: the value must be an ``int`` (a count).
        field_args: other arguments of :func:`dataclasses.field` (``repr``, ``metadata``...).
    """
    bounds = {k: v for k, v in dict(above=above, at_least=at_least, below=below, at_most=at_most).items() if v is not None}
    bounds.update({"integer": True} if integer else {})
    metadata = {**field_args.pop("metadata", {}), BOUNDS: bounds}
    return dataclasses.field(default=default, metadata=metadata, **field_args)


def bounds_of(field: dataclasses.Field) -> dict[str, Any]:
    """The range of a dataclass field (``{}``: none), as :func:`bounded` recorded it."""
    return dict(field.metadata.get(BOUNDS, {}))


def check_bounds(settings: Any, name_of: Callable[[str], str] | None = None,
                 given: dict[str, str] | None = None) -> None:
    """Check every :func:`bounded` field of the dataclass instance ``settings`` (``None`` passes;
    a tuple's elements each).

    Args:
        settings: a dataclass instance.
        name_of: how a field is named in messages (default: :func:`~.option_names.named`, which
            reads ``field=`` in Python and ``--flag`` on the command line).
        given: the text typed for a field, shown in messages (default: the value's repr).

    Raises:
        BlackboxMIAError: ``"epsilon= must be a finite number > 0, got nan"`` and the like.
    """
    for field in dataclasses.fields(settings):
        check_value(bounds_of(field), getattr(settings, field.name), (name_of or named)(field.name),
                    (given or {}).get(field.name))


def check_value(bounds: dict[str, Any], value: Any, option: str, given: str | None = None) -> None:
    """Check ``value`` (a number, a tuple of them, or ``None``) against ``bounds`` (keyword
    arguments of :func:`check_number`), naming it ``option``.

    Raises:
        BlackboxMIAError: see :func:`check_number`.
    """
    if not bounds or value is None:
        return
    for element in value if isinstance(value, tuple) else (value,):
        check_number(option, element, given=given, **bounds)


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
