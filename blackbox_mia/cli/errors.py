"""The error boundary of every command: toolkit errors as one line and exit code 2, Ctrl-C as a
resume hint (the command group's own usage errors: :class:`~.app.OneLineErrors`)."""

from __future__ import annotations

import contextlib

import typer

from ..option_names import for_command_line
from ..types import BlackboxMIAError
from .interrupts import INTERRUPTED_EXIT, interrupt_once


@contextlib.contextmanager
def user_errors():
    """Turn toolkit errors, and files that cannot be read or written, into one line on stderr
    and exit code 2 (never a traceback; settings named by their flags:
    :func:`~blackbox_mia.option_names.for_command_line`); Ctrl-C into a resume hint and exit code 130 once the
    answers in flight have landed (a second Ctrl-C exits at once: :func:`~.interrupts.interrupt_once`)."""
    try:
        with interrupt_once():
            yield
    except BlackboxMIAError as exc:
        typer.secho(f"error: {for_command_line(exc)}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.secho("interrupted: finished work is saved; rerun the same command to resume", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
