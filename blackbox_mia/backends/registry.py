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

The kinds, their options and builders are registered with
:func:`~blackbox_mia.backends.options.register_backend` (their modules are imported here); every
kind's keys, units and defaults: ``docs/backends.md``.

Example:
    >>> target = build_backend("api:my-model@http://127.0.0.1:8000/v1?tokenizer=gpt2")  # doctest: +SKIP
    >>> reference = build_backend("local:gpt2", LocalOptions(device="cpu"))             # doctest: +SKIP
"""

from __future__ import annotations

import re
from pathlib import Path

from ..types import BlackboxMIAError
from .api.kind import ApiOptions
from .base import Backend
from .local.kind import LocalOptions
from .options import KIND_NAME, KINDS, KindOptions, given_settings, merge_options, options_from_query, register_backend

KIND_PREFIX = re.compile(rf"^(?P<kind>{KIND_NAME}):(?P<rest>.*)$")

__all__ = [
    "ApiOptions", "LocalOptions", "build_backend", "options_from_query", "parse_spec", "register_backend", "split_query",
]


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


def build_backend(spec: str, options: KindOptions | None = None) -> Backend:
    """The backend a spec names (see the module docstring); no request is sent.

    Args:
        spec: ``local:PATH``, ``PATH``, ``api:MODEL@URL`` or a registered ``kind:...``, each
            with optional ``?key=value&...`` settings.
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
    kind, rest = parse_spec(spec)
    target, query = split_query(rest)
    entry = KINDS[kind]
    if options is not None and not isinstance(options, entry.options):
        raise BlackboxMIAError(f"{kind}: specs take {entry.options.__name__}, got {type(options).__name__}")
    given = given_settings(options) if options is not None else {}
    return entry.build(target, merge_options(kind, query, given, lambda key: f"{entry.options.__name__}.{key}"))
