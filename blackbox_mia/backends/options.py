"""Per-kind backend options: each backend kind (``local``, ``api``) registers its builder with a
small frozen dataclass of its own settings, and one parser reads a spec's ``?key=value&...``
query into that dataclass.

Why: one bag of every kind's settings let a typo or a setting of another kind pass silently; a
kind's own options are typed, range-checked and listed in its error messages. The pattern is
lm-evaluation-harness's ``@register_model`` and ``LM.create_from_arg_string``
(EleutherAI/lm-evaluation-harness, ``lm_eval/api/registry.py``, ``lm_eval/api/model.py``), with
the values typed from the dataclass fields instead of guessed from their text.

A field's metadata :data:`NOT_A_QUERY_KEY` keeps it out of queries (the API key: a secret does
not belong in a spec that is printed; ``refine_for``: derived from the scorers), and
:data:`~blackbox_mia.config.NOT_AN_OPTION` keeps it off the command line (query-only keys).
Numeric ranges are each class's ``ranges`` (checked by :func:`~blackbox_mia.config.check_number`).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

from ..config import check_number
from ..types import BlackboxMIAError
from .base import Backend

KIND_NAME = r"[a-z][a-z0-9_]*"
"""A backend kind's name: lowercase letters, digits and ``_``, starting with a letter."""

NOT_A_QUERY_KEY = {"query": False}
"""Metadata of an options field that a spec's query may not set (``field(metadata=...)``)."""

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


@dataclass(frozen=True)
class KindOptions:
    """Base of every kind's options: range checks on construction.

    Attributes:
        ranges: per numeric field, the bounds of :func:`~blackbox_mia.config.check_number`
            (``{"epsilon": {"above": 0}}``); a tuple field's bounds hold for each element.

    Raises:
        BlackboxMIAError: a value out of its range (the message names the field).
    """

    ranges: ClassVar[Mapping[str, Mapping[str, float]]] = {}

    def __post_init__(self) -> None:
        check_ranges(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, str)


Builder = Callable[[str, Any], Backend]
"""``builder(target, options) -> Backend``: ``target`` is the spec after ``kind:`` and before
``?`` (a path, ``MODEL@URL``), ``options`` an instance of the kind's options class."""


@dataclass(frozen=True)
class BackendKind:
    """One registered kind: its name, options class, builder and spec form (``local:PATH``)."""

    name: str
    options: type[KindOptions]
    build: Builder
    form: str


KINDS: dict[str, BackendKind] = {}
"""The registry: kind name → :class:`BackendKind` (filled by :func:`register_backend`)."""


def register_backend(kind: str, options: type[KindOptions], form: str | None = None) -> Callable[[Builder], Builder]:
    """Decorator: make ``kind:TARGET?key=value`` specs build through the decorated builder, with
    ``options`` (a frozen :class:`KindOptions` dataclass) as the kind's settings.

    Args:
        kind: a lowercase name (``local``).
        options: the kind's options class; every field needs a default.
        form: the spec's form shown in messages (default ``KIND:...``).

    Raises:
        BlackboxMIAError: ``kind`` is already registered or not a lowercase name.
    """
    if not re.fullmatch(KIND_NAME, kind):
        raise BlackboxMIAError(f"backend kind {kind!r} must be a lowercase name")
    if kind in KINDS:
        raise BlackboxMIAError(f"backend kind {kind!r} is already registered")

    def decorate(builder: Builder) -> Builder:
        KINDS[kind] = BackendKind(kind, options, builder, form or f"{kind}:...")
        return builder

    return decorate


def query_keys(cls: type[KindOptions]) -> list[str]:
    """The keys a spec's query may set for the options class ``cls``, in field order."""
    return [f.name for f in dataclasses.fields(cls) if not NOT_A_QUERY_KEY.items() <= f.metadata.items()]


def check_ranges(cls: type[KindOptions], values: Mapping[str, Any], name_of: Callable[[str], str],
                 given: Mapping[str, str] | None = None) -> None:
    """Check ``values`` (field → value, ``None`` passes) against ``cls.ranges``.

    Args:
        cls: the options class.
        values: the values to check, by field name.
        name_of: the name of a field in messages (a flag ``--epsilon``, a query key).
        given: the text typed for a field, shown in messages (default: the value's repr).

    Raises:
        BlackboxMIAError: ``"--epsilon must be a finite number > 0, got nan"`` and the like.
    """
    for name, value in values.items():
        bounds = cls.ranges.get(name)
        if bounds is None or value is None:
            continue
        for element in value if isinstance(value, tuple) else (value,):
            check_number(name_of(name), element, given=(given or {}).get(name), **bounds)


def merge_options(kind: str, query: str, given: Mapping[str, Any] | None = None,
                  name_of: Callable[[str], str] | None = None) -> KindOptions:
    """The options of ``kind`` from a spec's query and settings given another way (command-line
    flags, an options object); a setting given both ways must have the same value.

    Args:
        kind: a registered kind.
        query: the spec's text after ``?`` (``"device=cpu&dtype=float32"``; ``""``: none); keys
            and values may be percent-encoded (``%26`` for ``&``).
        given: typed values by field name (already range-checked by the caller).
        name_of: how a ``given`` setting is named in messages (default: the field name).

    Raises:
        BlackboxMIAError: an unknown kind, a malformed query, an unknown key (the message lists
            the valid ones), a value that is not of the field's type or out of its range, or a
            query key that disagrees with ``given`` (naming both).
    """
    if kind not in KINDS:
        raise BlackboxMIAError(f"unknown backend kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    cls = KINDS[kind].options
    texts = parse_query(kind, query)
    hints = typing.get_type_hints(cls)
    from_query = {key: convert(hints[key], text, f"{kind}: option {key}={text!r}") for key, text in texts.items()}
    check_ranges(cls, from_query, lambda key: f"{kind}: option {key}", texts)
    given = dict(given or {})
    for key, value in from_query.items():
        if key in given and given[key] != value:
            name = name_of(key) if name_of else key
            shown = repr(given[key]) if isinstance(given[key], str) else str(given[key])
            raise BlackboxMIAError(f"{name} {shown} and the {kind}: spec's ?{key}={texts[key]} disagree: give one")
    return cls(**{**given, **from_query})


def options_from_query(kind: str, query: str) -> KindOptions:
    """The options of ``kind`` from a query alone: ``options_from_query("local",
    "device=cpu&dtype=float32") == LocalOptions(device="cpu", dtype="float32")``; the fields not
    in the query keep their defaults.

    Raises:
        BlackboxMIAError: see :func:`merge_options`.
    """
    return merge_options(kind, query)


def given_settings(options: KindOptions) -> dict[str, Any]:
    """The fields of ``options`` that differ from their defaults (the settings a caller chose)."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if getattr(options, f.name) != f.default}


def parse_query(kind: str, query: str) -> dict[str, str]:
    """``"a=1&b=x%26y"`` → ``{"a": "1", "b": "x&y"}`` for ``kind``'s options (``+`` stays ``+``:
    paths are not form data).

    Raises:
        BlackboxMIAError: a part without ``=`` or with an empty value, a key given twice, or an
            unknown key (naming the valid ones).
    """
    keys = query_keys(KINDS[kind].options)
    texts: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        key, value = unquote(key), unquote(value)
        if not eq or not value:
            raise BlackboxMIAError(f"{kind}: spec option {part!r} is not key=value (e.g. ?{keys[0]}=...)")
        if key not in keys:
            if key in {f.name for f in dataclasses.fields(KINDS[kind].options)}:
                raise BlackboxMIAError(f"{kind}: {key} cannot be set in a spec (a secret, or derived); spec options: "
                                       f"{', '.join(keys)}")
            raise BlackboxMIAError(f"unknown {kind}: spec option {key!r}; valid: {', '.join(keys)}")
        if key in texts:
            raise BlackboxMIAError(f"{kind}: spec option {key!r} is given twice")
        texts[key] = value
    return texts


def convert(hint: Any, text: str, label: str) -> Any:
    """``text`` as a value of the type ``hint`` (``str``, ``int``, ``float``, ``bool``, ``Path``,
    a tuple of numbers written ``"2.5,10"``; ``X | None`` as ``X``).

    Raises:
        BlackboxMIAError: ``text`` is not of that type (the message starts with ``label``).
    """
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        kinds = typing.get_args(hint)
        parts = text.split(",")
        if Ellipsis not in kinds and len(parts) != len(kinds):
            raise BlackboxMIAError(f"{label} must be {len(kinds)} comma-separated numbers")
        return tuple(convert(kinds[0], part, label) for part in parts)
    if hint is bool:
        if text.lower() not in TRUE_WORDS + FALSE_WORDS:
            raise BlackboxMIAError(f"{label} must be true or false")
        return text.lower() in TRUE_WORDS
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise BlackboxMIAError(f"{label} must be {'an integer' if hint is int else 'a number'}") from None
    return Path(text) if hint is Path else text
