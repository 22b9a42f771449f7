"""Build any backend from a spec, so a command (or a notebook) can take several targets.

Specs, each with optional settings after ``?`` (``key=value`` joined by ``&``, percent-encoded
where a value holds ``&``; the first ``?`` starts them):

* ``local:PATH`` or a bare ``PATH``: a Hugging Face causal LM (directory or hub name) run
  locally, e.g. ``local:PATH?device=cpu&dtype=float32``
  (:class:`~blackbox_mia.backends.local.kind.LocalOptions`);
* ``api:MODEL@URL``: the model ``MODEL`` behind the OpenAI-compatible endpoint ``URL``
  (``http://`` or ``https://``, up to ``/v1``), through the tracker, e.g.
  ``api:MODEL@URL?tokenizer=gpt2`` (:class:`~blackbox_mia.backends.api.kind.ApiOptions`).
  ``MODEL`` may itself contain ``@``; the first ``@`` followed by ``http://`` or ``https://``
  separates it from the URL.

A spec typed by a user is read once, at the edge, into a :class:`BackendSpec` (kind, the
kind's typed target, the query's typed settings); code that knows the kind and target builds
one directly, and nothing is written into a spec string to be read again.

The kinds register themselves with :func:`~blackbox_mia.backends.options.register_backend`:
every ``kind`` module of this package's subpackages (``backends/NAME/kind.py``) is imported
here, and so is every module an installed distribution names in the entry-point group
:data:`ENTRY_POINTS` (a kind outside the package). Every kind's keys, units and defaults:
``docs/backends.md``.

Example:
    >>> target = build_backend("api:my-model@http://127.0.0.1:8000/v1?tokenizer=gpt2")  # doctest: +SKIP
    >>> reference = build_backend("local:gpt2", LocalOptions(device="cpu"))             # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..types import BlackboxMIAError
from .api.kind import ApiOptions
from .base import Backend
from .local.kind import LocalOptions
from .options import (
    KIND_NAME, KINDS, KindOptions, Query, given_settings, merge_options, options_from_query, read_query, register_backend,
)

KIND_PREFIX = re.compile(rf"^(?P<kind>{KIND_NAME}):(?P<rest>.*)$")
ENTRY_POINTS = "blackbox_mia.backends"
"""The entry-point group of backend kinds defined outside the package: each entry names a
module that registers a kind when imported (``testkind = my_package.kind``)."""

__all__ = [
    "ApiOptions", "BackendSpec", "LocalOptions", "build_backend", "options_from_query", "parse_spec", "read_spec",
    "register_backend", "split_query",
]


def import_kinds() -> None:
    """Import every kind module: ``backends/NAME/kind.py`` of this package (``NAME/`` needs no
    ``__init__.py``: a kind is its two modules), then the modules of the :data:`ENTRY_POINTS`
    group (each registers its kind; importing one twice does nothing)."""
    package = __name__.rpartition(".")[0]
    for module in sorted(Path(__file__).parent.glob("*/kind.py")):
        importlib.import_module(f"{package}.{module.parent.name}.kind")
    for entry in entry_points(group=ENTRY_POINTS):
        importlib.import_module(entry.value)


import_kinds()


@dataclass(frozen=True)
class BackendSpec:
    """A backend as a command names it, read once: its kind, the kind's target (a path for
    ``local:``, an :class:`~.api.kind.ApiTarget` for ``api:``) and the settings of its query.

    Build one with :func:`read_spec` from a spec a user typed, or directly where the kind and
    target are known (``BackendSpec("api", ApiTarget(model, url))``).
    """

    kind: str
    target: Any
    query: Query = field(default_factory=lambda: Query({}, {}))


def parse_spec(spec: str) -> tuple[str, str]:
    """``(kind, rest)`` of a backend spec (``rest`` keeps its ``?`` query); a spec without a
    registered ``kind:`` prefix is a local model path or hub name.

    Raises:
        BlackboxMIAError: an empty spec, or ``word:...`` naming no registered kind and no
            existing path.
    """
    if not spec:
        raise BlackboxMIAError("empty backend spec: use local:PATH or api:MODEL@URL")
    match = KIND_PREFIX.match(spec)
    if match is None:
        return "local", spec
    if match["kind"] in KINDS:
        return match["kind"], match["rest"]
    if Path(spec).exists():
        return "local", spec
    forms = ", ".join(KINDS[kind].form for kind in sorted(KINDS))
    raise BlackboxMIAError(f"unknown backend kind {match['kind']!r} in {spec!r}; known: {', '.join(sorted(KINDS))} ({forms})")


def split_query(rest: str) -> tuple[str, str]:
    """``("PATH", "device=cpu")`` from ``"PATH?device=cpu"``: a spec's target and its settings
    (``""`` when there is no ``?``)."""
    target, _, query = rest.partition("?")
    return target, query


def read_spec(spec: str) -> BackendSpec:
    """A spec as typed (``local:PATH?k=v``, ``PATH``, ``api:MODEL@URL``, ``KIND:...``) read once:
    its kind, its target read by the kind, its query's typed, range-checked settings.

    Raises:
        BlackboxMIAError: a malformed spec, target or query (see :func:`parse_spec`, the kind's
            target reader, :func:`~.options.read_query`).
    """
    kind, rest = parse_spec(spec)
    target, query = split_query(rest)
    return BackendSpec(kind, KINDS[kind].target(target), read_query(kind, query))


def build_spec(spec: BackendSpec, given: dict[str, Any] | None = None, name_of=None) -> Backend:
    """The backend ``spec`` names, its options from the spec's settings and ``given`` (typed
    values by field; a setting given both ways must agree, ``name_of`` names it in messages).

    Raises:
        BlackboxMIAError: a setting given twice with two values, or the backend cannot be
            built (model not found, no tokenizer for the API model, bad option).
    """
    return KINDS[spec.kind].build(spec.target, merge_options(spec.kind, spec.query, given, name_of))


def build_backend(spec: str | BackendSpec, options: KindOptions | None = None) -> Backend:
    """The backend a spec names (see the module docstring); no request is sent.

    Args:
        spec: ``local:PATH``, ``PATH``, ``api:MODEL@URL`` or a registered ``kind:...``, each
            with optional ``?key=value&...`` settings; or a :class:`BackendSpec`.
        options: settings outside the spec: an instance of the kind's options class
            (:class:`LocalOptions` for ``local:``, :class:`ApiOptions` for ``api:``); default:
            the class's defaults. A field it sets to a non-default value must agree with the
            spec's query key of the same name.

    Raises:
        BlackboxMIAError: a malformed spec, an unknown or malformed query key (the message lists
            the valid ones), options of another kind, a setting given twice with two values,
            or the backend cannot be built (model not found, no tokenizer for the API model,
            bad option).
    """
    read = read_spec(spec) if isinstance(spec, str) else spec
    entry = KINDS[read.kind]
    if options is not None and not isinstance(options, entry.options):
        raise BlackboxMIAError(f"{read.kind}: specs take {entry.options.__name__}, got {type(options).__name__}")
    given = given_settings(options) if options is not None else {}
    return build_spec(read, given, lambda key: f"{entry.options.__name__}.{key}")
