"""How an error message names a setting: by its Python argument for a caller of the library
(``calibration_fraction=``), by its flag on the command line (``--calibration-fraction``).

A message names a setting with :func:`named`, which leaves a marker holding both forms; ``str()``
of a :class:`~blackbox_mia.types.BlackboxMIAError` shows the Python form
(:func:`as_arguments`), and the CLI's error boundary (:func:`blackbox_mia.cli.errors.user_errors`)
shows the flag form (:func:`for_command_line`). One table, :data:`FLAGS`, holds the flags that
are not the argument's name spelled ``--with-dashes``: the commands' own here, and a backend
kind's settings added when the kind registers (their one home is the kind's options,
:func:`blackbox_mia.backends.options.setting`).

Example:
    >>> message = f"{named('target_fpr')} must be in (0, 1), got 2"
    >>> as_arguments(message), as_flags(message)
    ('target_fpr= must be in (0, 1), got 2', '--target-fpr must be in (0, 1), got 2')
"""

from __future__ import annotations

import re

FLAGS = {
    "out_dir": "--out",
    "flag_fraction": "--flag-least-changed",
    "max_logprobs_chat": "--max-top-logprobs",
    "max_logprobs_completions": "--max-logprobs",
    "n_permutations": "--permutations",
    "n_shards": "--shards",
    "reference_length": "--reference-tokens",
    "resume": "--overwrite",
    "scorer": "--scorers",
}
"""The command-line flag of each Python argument whose flag is not ``--`` + its name with dashes
(``resume=False`` is ``--overwrite``: :data:`NEGATED`)."""

NEGATED = frozenset({"resume"})
"""Arguments whose flag sets them to ``False`` (named in the Python form as ``resume=False``)."""

_MARK, _SPLIT, _END = "\x1f", "\x1e", "\x1d"  # ASCII separators: never in a message's own text
_MARKER = re.compile(f"{_MARK}([^{_SPLIT}]*){_SPLIT}([^{_END}]*){_END}")


def add_flag(argument: str, flag_name: str) -> None:
    """Record ``flag_name`` as the flag of ``argument`` (a backend kind's setting, as the kind
    registers: :func:`~blackbox_mia.backends.options.register_backend`).

    Raises:
        ValueError: ``argument`` already has another flag.
    """
    known = FLAGS.setdefault(argument, flag_name)
    if known != flag_name:
        raise ValueError(f"{argument} is already {known}, not {flag_name}")


def flag(argument: str) -> str:
    """The command-line flag of the Python argument ``argument`` (``target_fpr`` →
    ``--target-fpr``, ``out_dir`` → ``--out``: :data:`FLAGS`)."""
    return FLAGS.get(argument, "--" + argument.replace("_", "-"))


def named(argument: str, *value: object) -> str:
    """A setting as a message names it: a marker that reads ``argument=`` (with a value:
    ``argument=value!r``) to a Python caller and ``--flag`` (``--flag value``; ``--flag`` for
    the value ``True`` of a switch) on the command line.

    Args:
        argument: the Python argument (a configuration field or keyword argument).
        value: at most one value to show with it (the value given, as the user typed it;
            ``True``: a switch that is on).

    Raises:
        ValueError: more than one value.
    """
    if len(value) > 1:
        raise ValueError(f"named() takes at most one value, got {len(value)}")
    negated = argument in NEGATED
    python = f"{argument}=False" if negated else f"{argument}=" + (repr(value[0]) if value else "")
    switch = negated or (value and value[0] is True)  # a flag without a value
    return spelled(python, flag(argument) + (f" {value[0]}" if value and not switch else ""))


def spelled(python: str, command_line: str) -> str:
    """Something a message names one way to a Python caller and another on the command line
    (``backends['reference']`` / ``--ref``): a marker read as :func:`named`'s is."""
    return f"{_MARK}{command_line}{_SPLIT}{python}{_END}"


def as_arguments(message: str) -> str:
    """``message`` with every :func:`named` setting in its Python form (``target_fpr=``)."""
    return _MARKER.sub(lambda m: m.group(2), message)


def as_flags(message: str) -> str:
    """``message`` with every :func:`named` setting in its command-line form (``--target-fpr``)."""
    return _MARKER.sub(lambda m: m.group(1), message)


def marked(exc: BaseException) -> str:
    """The message of ``exc`` with its settings still marked, to quote in another error's message
    (``str(exc)`` of a :class:`~blackbox_mia.types.BlackboxMIAError` names Python arguments)."""
    return Exception.__str__(exc)


def for_command_line(exc: BaseException) -> str:
    """The message of ``exc`` as the command line shows it: settings named by their flags."""
    return as_flags(marked(exc))
