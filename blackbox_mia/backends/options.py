"""Per-kind backend options: each backend kind (``local``, ``api``, or any module that registers
one) registers its builder with a small frozen dataclass of its own settings; each field of it is
the one home of a setting (:func:`setting`: its default, range, flag, help, and the
configuration field it fills), and one parser reads a spec's ``?key=value&...`` query into that
dataclass.

Why: one bag of every kind's settings let a typo or a setting of another kind pass silently; a
kind's own options are typed, range-checked and listed in its error messages. The pattern is
lm-evaluation-harness's ``@register_model`` and ``LM.create_from_arg_string``
(EleutherAI/lm-evaluation-harness, ``lm_eval/api/registry.py``, ``lm_eval/api/model.py``), with
the values typed from the dataclass fields instead of guessed from their text.

A field's metadata :data:`NOT_A_QUERY_KEY` keeps it out of queries (the API key: a secret does
not belong in a spec that is printed; ``refine_for``: derived from the scorers), and
:data:`~blackbox_mia.config.NOT_AN_OPTION` keeps it off the command line (query-only keys).
Numeric ranges are each field's :func:`~blackbox_mia.config.bounded` range, taken from the
configuration field it fills (``source``) where there is one.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..config import BOUNDS, NOT_AN_OPTION, bounds_of, check_bounds, check_value
from ..option_names import add_flag
from ..types import BlackboxMIAError
from .base import Backend

KIND_NAME = r"[a-z][a-z0-9_]*"
"""A backend kind's name: lowercase letters, digits and ``_``, starting with a letter."""

NOT_A_QUERY_KEY = {"query": False}
"""Metadata of an options field that a spec's query may not set (``field(metadata=...)``)."""

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


SETTING = "setting"
"""Metadata key of an options field's :class:`Setting` (set by :func:`setting`)."""


@dataclass(frozen=True)
class Setting:
    """How a kind's option is shown and where it goes (the metadata :func:`setting` records).

    Attributes:
        help: the flag's help (one line: what it is, its unit).
        panel: the ``--help`` panel the flag is listed in (``None``: the command's own).
        flag: the command-line flag; ``None``: ``--`` + the field's name with dashes.
        envvar: an environment variable the flag reads when not given.
        source: ``(configuration class, field)`` the option fills (``(LocalConfig,
            "max_batch_tokens")`` for ``batch_tokens``: the one mapping between the two names);
            ``None``: the kind's builder reads it itself.
    """

    help: str
    panel: str | None = None
    flag: str | None = None
    envvar: str | None = None
    source: tuple[type, str] | None = None


def setting(default: Any = dataclasses.MISSING, *, help: str, panel: str | None = None, flag: str | None = None,
            envvar: str | None = None, source: tuple[type, str] | None = None, query: bool = True,
            option: bool = True, repr: bool = True, **bounds: float) -> Any:
    """An options field that is the one home of a backend setting: ``epsilon: float =
    setting(help="bisection precision (nats)", source=(TrackerConfig, "epsilon"))``.

    Args:
        default: the default; with ``source`` and none given, the source field's default.
        help, panel, flag, envvar: see :class:`Setting`.
        source: the configuration field the option fills: its default and range are the
            option's (one definition of each).
        query: a spec's query may set it (``False``: a secret).
        option: a command-line flag sets it (``False``: a query key only).
        repr: shown in the options' repr (``False``: a secret).
        bounds: the range (keyword arguments of :func:`~blackbox_mia.config.check_number`),
            added to the source field's.
    """
    if source is not None:
        config_field = {f.name: f for f in dataclasses.fields(source[0])}[source[1]]
        default = config_field.default if default is dataclasses.MISSING else default
        bounds = {**bounds_of(config_field), **bounds}
    metadata = {SETTING: Setting(help, panel, flag, envvar, source), BOUNDS: bounds}
    metadata.update({} if query else NOT_A_QUERY_KEY)
    metadata.update({} if option else NOT_AN_OPTION)
    return dataclasses.field(default=default, repr=repr, metadata=metadata)


def setting_of(field: dataclasses.Field) -> Setting | None:
    """The :class:`Setting` of an options field (``None``: a field :func:`setting` did not make)."""
    return field.metadata.get(SETTING)


def flag_name(field: dataclasses.Field) -> str:
    """The command-line flag of an options field (``context`` → ``--context-tokens``)."""
    found = setting_of(field)
    return (found and found.flag) or "--" + field.name.replace("_", "-")


def configured(config: type, options: Any) -> dict[str, Any]:
    """The keyword arguments of the configuration class ``config`` that ``options`` holds: the
    value of each field whose :class:`Setting` names ``config`` as its source, under that
    configuration field's name (``{"max_batch_tokens": 4096}`` from ``batch_tokens=4096``)."""
    settings = [(f, setting_of(f)) for f in dataclasses.fields(options)]
    return {s.source[1]: getattr(options, f.name) for f, s in settings if s is not None and s.source and s.source[0] is config}


@dataclass(frozen=True)
class KindOptions:
    """Base of every kind's options: range checks on construction (each field's range: its
    :func:`setting`).

    Raises:
        BlackboxMIAError: a value out of its range (the message names the field).
        TypeError: (on definition) a subclass with a ``ranges`` table, the old home of its
            ranges: they go in its fields' :func:`setting` now, and would otherwise go unchecked.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ranges" in cls.__dict__:
            raise TypeError(f"{cls.__name__}.ranges: give each field its range with setting(..., at_least=...) instead")

    def __post_init__(self) -> None:
        check_bounds(self, str)


Builder = Callable[[Any, Any], Backend]
"""``builder(target, options) -> Backend``: ``target`` is the kind's target as its
:attr:`BackendKind.target` read it from the spec (a path; ``ApiTarget(model, base_url)``),
``options`` an instance of the kind's options class."""


def as_text(target: str) -> str:
    """The target of a kind that reads it as text (a path, a hub name): itself."""
    return target


@dataclass(frozen=True)
class BackendKind:
    """One registered kind: its name, options class, builder, spec form (``local:PATH``) and the
    reader of a spec's target (the text between ``kind:`` and ``?``) into what the builder takes."""

    name: str
    options: type[KindOptions]
    build: Builder
    form: str
    target: Callable[[str], Any] = as_text


KINDS: dict[str, BackendKind] = {}
"""The registry: kind name → :class:`BackendKind` (filled by :func:`register_backend`)."""


def register_backend(kind: str, options: type[KindOptions], form: str | None = None,
                     target: Callable[[str], Any] = as_text) -> Callable[[Builder], Builder]:
    """Decorator: make ``kind:TARGET?key=value`` specs build through the decorated builder, with
    ``options`` (a frozen :class:`KindOptions` dataclass) as the kind's settings; the flags of
    its settings (:func:`setting`) become the command line's.

    Args:
        kind: a lowercase name (``local``).
        options: the kind's options class; every field needs a default.
        form: the spec's form shown in messages (default ``KIND:...``).
        target: reads a spec's target text into what the builder takes (default: the text);
            raises :class:`BlackboxMIAError` on a malformed one.

    Raises:
        BlackboxMIAError: ``kind`` is already registered or not a lowercase name.
        ValueError: a setting's flag differs from the flag another kind gave the same name.
    """
    if not re.fullmatch(KIND_NAME, kind):
        raise BlackboxMIAError(f"backend kind {kind!r} must be a lowercase name")
    if kind in KINDS:
        raise BlackboxMIAError(f"backend kind {kind!r} is already registered")

    def decorate(builder: Builder) -> Builder:
        for f in dataclasses.fields(options):
            if setting_of(f) is not None and setting_of(f).flag:
                add_flag(f.name, setting_of(f).flag)
        KINDS[kind] = BackendKind(kind, options, builder, form or f"{kind}:...", target)
        return builder

    return decorate


def query_keys(cls: type[KindOptions]) -> list[str]:
    """The keys a spec's query may set for the options class ``cls``, in field order."""
    return [f.name for f in dataclasses.fields(cls) if not NOT_A_QUERY_KEY.items() <= f.metadata.items()]


def check_ranges(cls: type[KindOptions], values: Mapping[str, Any], name_of: Callable[[str], str],
                 given: Mapping[str, str] | None = None) -> None:
    """Check ``values`` (field → value, ``None`` passes) against the ranges of ``cls``'s fields.

    Args:
        cls: the options class.
        values: the values to check, by field name.
        name_of: the name of a field in messages (a flag ``--epsilon``, a query key).
        given: the text typed for a field, shown in messages (default: the value's repr).

    Raises:
        BlackboxMIAError: ``"--epsilon must be a finite number > 0, got nan"`` and the like.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in values.items():
        check_value(bounds_of(fields[name]), value, name_of(name), (given or {}).get(name))


@dataclass(frozen=True)
class Query:
    """A spec's ``?key=value`` settings, read once: typed values by field, and the text typed
    for each (shown in messages)."""

    values: Mapping[str, Any]
    texts: Mapping[str, str]


def read_query(kind: str, query: str) -> Query:
    """The settings of a spec's query for ``kind``'s options, typed and range-checked.

    Args:
        kind: a registered kind.
        query: the spec's text after ``?`` (``"device=cpu&dtype=float32"``; ``""``: none); keys
            and values may be percent-encoded (``%26`` for ``&``).

    Raises:
        BlackboxMIAError: an unknown kind, a malformed query, an unknown key (the message lists
            the valid ones), a value that is not of the field's type or out of its range.
    """
    if kind not in KINDS:
        raise BlackboxMIAError(f"unknown backend kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    cls = KINDS[kind].options
    texts = parse_query(kind, query)
    hints = typing.get_type_hints(cls)
    values = {key: convert(hints[key], text, f"{kind}: option {key}={text!r}") for key, text in texts.items()}
    check_ranges(cls, values, lambda key: f"{kind}: option {key}", texts)
    return Query(values, texts)


def merge_options(kind: str, query: Query, given: Mapping[str, Any] | None = None,
                  name_of: Callable[[str], str] | None = None) -> KindOptions:
    """The options of ``kind`` from a spec's query and settings given another way (command-line
    flags, an options object); a setting given both ways must have the same value.

    Args:
        kind: a registered kind.
        query: the spec's settings (:func:`read_query`).
        given: typed values by field name (already range-checked by the caller).
        name_of: how a ``given`` setting is named in messages (default: the field name).

    Raises:
        BlackboxMIAError: a query key that disagrees with ``given`` (naming both), or a value
            out of its range.
    """
    given = dict(given or {})
    for key, value in query.values.items():
        if key in given and given[key] != value:
            name = name_of(key) if name_of else key
            shown = repr(given[key]) if isinstance(given[key], str) else str(given[key])
            raise BlackboxMIAError(f"{name} {shown} and the {kind}: spec's ?{key}={query.texts[key]} disagree: give one")
    return KINDS[kind].options(**{**given, **query.values})


def options_from_query(kind: str, query: str) -> KindOptions:
    """The options of ``kind`` from a query alone: ``options_from_query("local",
    "device=cpu&dtype=float32") == LocalOptions(device="cpu", dtype="float32")``; the fields not
    in the query keep their defaults.

    Raises:
        BlackboxMIAError: see :func:`read_query`.
    """
    return merge_options(kind, read_query(kind, query))


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
