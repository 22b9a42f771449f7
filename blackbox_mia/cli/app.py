"""The typer application and the error boundary shared by every command."""

from __future__ import annotations

import contextlib
import sys

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_exceptions
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exceptions
    from click.globals import get_current_context

from ..option_names import for_command_line
from ..types import BlackboxMIAError
from .interrupts import INTERRUPTED_EXIT, interrupt_once

INTERRUPTED_MESSAGE = "interrupted: finished work is saved; rerun the same command to resume"
GC_YOUNG_THRESHOLD = 10_000  # allocations between two collections of the youngest generation (CPython: 700)


class OneLineErrors(TyperGroup):
    """The root command group: a usage error (a missing argument, an unknown option, a value of
    the wrong type) is one line on stderr, ``error: ... (bbmia CMD --help lists the options)``,
    exit code 2, instead of typer's framed box. ``bbmia`` alone still prints the help."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click_exceptions.ClickException as exc:
            if isinstance(exc, getattr(click_exceptions, "NoArgsIsHelpError", ())):
                exc.show()
            else:
                typer.secho(f"error: {one_line_usage_error(exc)}", fg=typer.colors.RED, err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # typer >= 0.20 defines it in typer.exceptions, not its copy of click
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def resolve_command(self, ctx, args):
        """The subcommand and its arguments, once no option of it (or of its subcommand) is given
        an empty value: ``--scorers ''`` must not mean "the default scorers".

        Raises:
            click.UsageError: an option given as ``--name ''`` or ``--name=``.
        """
        name, command, rest = super().resolve_command(ctx, args)
        refuse_empty_values(command, rest, f"{ctx.command_path} {name}")
        return name, command, rest


def refuse_empty_values(command, args: list[str], path: str) -> None:
    """Raise a usage error when ``args`` give one of ``command``'s value options (or, for a group,
    of its subcommand's) an empty or blank value; flags and arguments are left to click.

    Raises:
        click.UsageError: ``--name ''``, ``--name '  '`` or ``--name=``, naming the option.
    """
    takes_value = {opt for param in command.params if param.param_type_name == "option" and not param.is_flag
                   for opt in param.opts + param.secondary_opts}
    for index, arg in enumerate(args):
        if arg == "--":
            return
        name, equals, value = arg.partition("=")
        if name in takes_value and (value.strip() == "" if equals else
                                    index + 1 < len(args) and not args[index + 1].strip()):
            raise click_exceptions.UsageError(
                f"{name} is empty: give it a value or leave the option out ({path} --help lists the options)")
    subcommands = getattr(command, "commands", None)
    if subcommands:
        positional = [index for index, arg in enumerate(args) if not arg.startswith("-")]
        if positional and args[positional[0]] in subcommands:
            sub = args[positional[0]]
            refuse_empty_values(subcommands[sub], args[positional[0] + 1:], f"{path} {sub}")


def one_line_usage_error(exc) -> str:
    """A click usage error as one line: its message and which ``--help`` lists the options."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    return message + (f" ({ctx.command_path} --help lists the options)" if ctx is not None else "")


app = typer.Typer(
    name="bbmia",
    cls=OneLineErrors,
    help="Membership inference and benchmark-contamination audits for LLMs (higher score = more likely a member).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def messages(quiet: bool):
    """The ``log`` an audit writes its progress messages to: stderr, or nowhere with ``--quiet``."""
    return (lambda _: None) if quiet else (lambda message: typer.echo(message, err=True))


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


def echo_json_line(obj) -> None:
    """Print ``obj`` as one JSON line on stdout (the machine-readable last line).

    Raises:
        BlackboxMIAError: ``obj`` holds NaN or ±Infinity (JSON has no such numbers).
    """
    from ..io import dumps_strict

    sys.stdout.write(dumps_strict(obj, "JSON output", sort_keys=True) + "\n")
    sys.stdout.flush()


def _print_version(value: bool) -> None:
    """``--version``: ``bbmia VERSION`` on stdout, then exit 0."""
    if value:
        from .. import __version__

        typer.echo(f"bbmia {__version__}")
        raise typer.Exit()


@app.callback()
def _process_settings(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="print the version and exit"),
) -> None:
    """:func:`apply_process_settings`, before the command runs."""
    apply_process_settings()


def apply_process_settings() -> None:
    """Settings of a ``bbmia`` process, made before its command runs (a benchmark of what a
    command does calls it too):

    * stderr is kept for our own progress bars: no weight-loading bars or info logs from
      transformers;
    * the garbage collector's youngest generation is collected every
      :data:`GC_YOUNG_THRESHOLD` allocations instead of CPython's 700. With the default, a
      black-box run at high concurrency spent a large share of its time in the collector,
      mostly in full passes over the loaded tokenizer and libraries that stop the event loop
      and every request in flight (``benchmarks/bench_throughput.py``; figures:
      records/measured-settings.md).
    """
    import gc
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
