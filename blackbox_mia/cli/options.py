"""One typer option per field of a dataclass: a command receives the dataclass, built (and so
checked) before the command body runs."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Mapping

import typer

from ..config import NOT_AN_OPTION
from ..types import BlackboxMIAError
from .errors import user_errors


def parse_numbers(value: str, option: str, kind: type = int, example: str = "32,64,128",
                  count: int | None = None) -> tuple:
    """An option's comma-separated numbers: ``"32,64,128"`` → ``(32, 64, 128)`` (``kind`` int
    or float; ranges are checked by the command's configuration).

    Raises:
        BlackboxMIAError: a part that is not a number of ``kind``, or not ``count`` of them
            (the message names ``option``, shows ``example`` and the value given).
    """
    noun = "integers" if kind is int else "numbers"
    try:
        numbers = tuple(kind(part) for part in value.split(",") if part.strip())
    except ValueError:
        numbers = None
    if numbers is None or (count is not None and len(numbers) != count):
        shape = f"{count} comma-separated {noun}" if count else f"comma-separated {noun}"
        raise BlackboxMIAError(f"{option} takes {shape}, e.g. {example}; got {value!r}")
    return numbers


def renamed_option(field: str, value, old_value, flag: str, old_flag: str) -> dict:
    """A configuration keyword of an option renamed from ``old_flag`` to ``flag`` (the old
    spelling stays, hidden, for one release: docs/migration.md). Both options default to None,
    so that the configuration's own default applies when neither is given.

    Args:
        field: the configuration field the option sets.
        value, old_value: what ``flag`` and ``old_flag`` received (None: not given).

    Returns:
        ``{field: the value given}``, or ``{}`` when neither spelling was given.

    Raises:
        BlackboxMIAError: both spellings given, with different values.
    """
    if value is not None and old_value is not None and value != old_value:
        raise BlackboxMIAError(f"{old_flag} is the old name of {flag}: give one of them")
    given = value if value is not None else old_value
    return {} if given is None else {field: given}


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of the dataclass ``cls`` that are command-line options (not marked
    :data:`~blackbox_mia.config.NOT_AN_OPTION`)."""
    return [f for f in dataclasses.fields(cls) if not NOT_AN_OPTION.items() <= f.metadata.items()]


def flags_of(name: str, flags: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The command-line names of the option field ``name``: ``flags`` when given, else
    ``("--field-name",)``."""
    return flags or ("--" + name.replace("_", "-"),)


def with_dataclass_options(cls: type, param: str, options: Mapping[str, Mapping]):
    """Decorator: give a typer command one option per field of the dataclass ``cls`` (but those
    marked :data:`~blackbox_mia.config.NOT_AN_OPTION`); the command receives them as one keyword
    argument ``param`` holding a ``cls`` instance.

    Args:
        cls: a dataclass whose fields have defaults (the options' defaults).
        param: the command's keyword-only parameter that receives the instance.
        options: per option field name (every one, in the order the help lists them), keyword
            arguments of :func:`typer.Option` (``help``, ``envvar``, ``rich_help_panel``...)
            plus ``flags``: the option's names (default ``--field-name``).

    Errors the dataclass raises on construction (a ``BlackboxMIAError`` from its checks)
    become one line on stderr and exit code 2, before the command body runs.
    """
    hints = typing.get_type_hints(cls)
    defaults = {field.name: field.default for field in option_fields(cls)}
    if set(options) != set(defaults):
        raise ValueError(f"options must name every field of {cls.__name__}: {sorted(defaults)}")
    extra = []
    for name, spec in options.items():
        settings = dict(spec)
        flags = flags_of(name, settings.pop("flags", None))
        extra.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(defaults[name], *flags, **settings),
                annotation=hints[name],
            )
        )
    names = [p.name for p in extra]

    def decorate(func):
        # evaluated annotations: typer reads ``Annotated[..., typer.Option(...)]`` from the
        # objects of the signature it is given, never from strings
        signature = inspect.signature(func, eval_str=True)
        params = [p for p in signature.parameters.values() if p.name != param]

        @functools.wraps(func)
        def wrapper(**kwargs):
            with user_errors():
                value = cls(**{name: kwargs.pop(name) for name in names})
            return func(**{param: value}, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params + extra)
        wrapper.__annotations__ = {p.name: p.annotation for p in params + extra}
        return wrapper

    return decorate



SINGLE_SCORER_DEFAULT = "min_k"
"""The scorer of ``sweep`` and ``documents`` when none is given (Min-K%, k = 20%)."""

SINGLE_SCORER_HELP = "one scorer spec, e.g. min_k or 'min_k:k=10' (the threshold is set on its score; default min_k)"


def one_scorer_spec(scorers: str | None, scorer_alias: str | None) -> str:
    """The one scorer spec of a command that thresholds a single score (``sweep``,
    ``documents``): ``--scorers`` as in every other command, or ``--scorer`` (a hidden alias
    kept for old command lines), else :data:`SINGLE_SCORER_DEFAULT`.

    Raises:
        BlackboxMIAError: both options with different values, or other than one spec
            (``--scorers min_k,loss``: the message says to run once per scorer).
    """
    from ..scorers import split_specs

    if scorers is not None and scorer_alias is not None and scorers != scorer_alias:
        raise BlackboxMIAError(f"give the scorer once: --scorers {scorers!r} or --scorer {scorer_alias!r}")
    specs = split_specs(scorers or scorer_alias or SINGLE_SCORER_DEFAULT)
    if len(specs) != 1:
        raise BlackboxMIAError(f"--scorers takes one scorer spec here (the threshold is set on one score), got "
                               f"{len(specs)}: {', '.join(specs) or 'none'}; run once per scorer")
    return specs[0]
