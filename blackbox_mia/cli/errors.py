"""The error boundary of every command: toolkit errors as one line and exit code 2, Ctrl-C as a
resume hint (the command group's own usage errors: :class:`~.app.OneLineErrors`)."""

from __future__ import annotations

import contextlib

import typer

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.globals import get_current_context

from ..option_names import for_command_line
from ..types import BlackboxMIAError
from .interrupts import INTERRUPTED_EXIT, interrupt_once
from .output import echo_json_line

INTERRUPTED_MESSAGE = "interrupted: finished work is saved; rerun the same command to resume"


@contextlib.contextmanager
def user_errors():
    """Turn toolkit errors, and files that cannot be read or written, into one line on stderr
    and exit code 2 (never a traceback; settings named by their flags:
    :func:`~blackbox_mia.option_names.for_command_line`); Ctrl-C into a resume hint and exit code 130 once the
    answers in flight have landed (a second Ctrl-C exits at once: :func:`~.interrupts.interrupt_once`).
    A command run with ``--json`` then prints its JSON line too: :func:`stopped_json_line`."""
    try:
        with interrupt_once():
            yield
    except (BlackboxMIAError, OSError) as exc:
        message = for_command_line(exc) if isinstance(exc, BlackboxMIAError) else str(exc)
        typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
        stopped_json_line(message, 2)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.secho(INTERRUPTED_MESSAGE, err=True)
        stopped_json_line(INTERRUPTED_MESSAGE, INTERRUPTED_EXIT)
        raise typer.Exit(INTERRUPTED_EXIT) from None


def stopped_json_line(error: str, exit_code: int) -> None:
    """For a command run with ``--json`` (its ``json_out`` parameter) that stopped on an error, a
    refusal or Ctrl-C: its last line of stdout is still one JSON object, ``{"error": ...,
    "exit_code": ...}``, so a script reading that line learns why instead of finding none."""
    ctx = get_current_context(silent=True)
    if ctx is not None and ctx.params.get("json_out"):
        echo_json_line({"error": error, "exit_code": exit_code})
