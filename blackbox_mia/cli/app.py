"""The typer application and the error boundary shared by every command."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exceptions

from ..option_names import for_command_line
from ..types import BlackboxMIAError
from .errors import user_errors  # noqa: F401  (the commands import it from here)
from .output import echo_json_line  # noqa: F401  (the commands import it from here)

GC_YOUNG_THRESHOLD = 10_000  # allocations between two collections of the youngest generation (CPython: 700)


class OneLineErrors(TyperGroup):
    """The root command group: a usage error (a missing argument, an unknown option, a value of
    the wrong type) is one line on stderr, ``error: ... (bbmia CMD --help lists the options)``,
    exit code 2, instead of typer's framed box. ``bbmia`` alone still prints the help.

    Every command but the groups and ``run`` (whose argument is a run file: it hands its options
    on to the command the file names) also takes ``--config FILE`` (its options from a run file)
    and ``--print-config`` (write the run file of the command line and stop):
    :mod:`~.run_config`, applied here before the command parses its options."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, command in self.commands.items():
            if takes_run_files(name, command):
                command.params += run_file_options()

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
        an empty value: ``--scorers ''`` must not mean "the default scorers". A run file given
        with ``--config`` becomes the options it stands for; with ``--print-config``, the run file
        of the command line is printed and nothing runs.

        Raises:
            click.UsageError: an option given as ``--name ''`` or ``--name=``; a bad run file.
            typer.Exit: (0) after ``--print-config``.
        """
        from .run_config import CONFIG, PRINT_CONFIG

        given = options_of(args[1:])
        if (any(a == CONFIG or a.startswith(CONFIG + "=") for a in given)
                and takes_run_files(args[0], self.commands.get(args[0]))):
            args = with_run_file(self, ctx, args)
        name, command, rest = super().resolve_command(ctx, args)
        refuse_empty_values(command, rest, f"{ctx.command_path} {name}")
        if PRINT_CONFIG in options_of(rest) and takes_run_files(name, command):
            print_run_file(ctx, name, command, [a for a in rest if a != PRINT_CONFIG])
        return name, command, rest


def takes_run_files(name: str, command) -> bool:
    """True for a command that takes ``--config`` and ``--print-config``: one that is neither a
    group nor ``run``."""
    from .run_config import RUN

    return command is not None and not isinstance(command, TyperGroup) and name != RUN


def run_file_options() -> list:
    """The ``--config`` and ``--print-config`` options, as every command's help lists them (the
    group reads them before the command parses its options: :meth:`OneLineErrors.resolve_command`),
    made by typer from a signature that declares them; never passed to the command."""
    from .run_config import CONFIG, PRINT_CONFIG

    def declared(
        config: str | None = typer.Option(None, CONFIG, metavar="FILE", help="take the options from a run file "
                                          "(YAML, docs/cli.md: run files); options given after it override it"),
        print_config: bool = typer.Option(False, PRINT_CONFIG, help="print the run file of this command line and "
                                          "stop (nothing is run)"),
    ) -> None:
        """The signature typer reads the two options from (never called)."""

    template = typer.Typer()
    template.command()(declared)
    params = [p for p in typer.main.get_command(template).params if p.name in ("config", "print_config")]
    for param in params:
        param.expose_value = False
    return params


def options_of(args: list[str]) -> list[str]:
    """``args`` up to a ``--`` (after it, every word is an argument)."""
    return args[: args.index("--")] if "--" in args else args


def with_run_file(group, ctx, args: list[str]) -> list[str]:
    """``[command, --config FILE, *rest]`` as ``[command, *the file's options, *rest]``.

    Raises:
        click.UsageError: ``--config`` without a file, or given twice; the run file's errors
            (:func:`~.run_config.run_file_args`), as one line.
    """
    from .run_config import CONFIG, run_file_args

    name, rest = args[0], list(args[1:])
    found = [i for i, a in enumerate(options_of(rest)) if a == CONFIG or a.startswith(CONFIG + "=")]
    if len(found) > 1:
        raise click_exceptions.UsageError(f"{CONFIG} is given {len(found)} times: give one run file")
    at = found[0]
    if rest[at] == CONFIG:
        if at + 1 >= len(rest):
            raise click_exceptions.UsageError(f"{CONFIG} needs a file")
        path, rest = rest[at + 1], rest[:at] + rest[at + 2:]
    else:
        path, rest = rest[at].partition("=")[2], rest[:at] + rest[at + 1:]
    try:
        name, words = run_file_args(Path(path), group, ctx, name)
    except BlackboxMIAError as exc:
        raise click_exceptions.UsageError(for_command_line(exc)) from None
    return [name, *words, *rest]


def print_run_file(ctx, name: str, command, args: list[str]) -> None:
    """Write the run file of ``command`` given ``args`` on stdout and stop (exit 0); nothing runs.

    Raises:
        click.UsageError: what parsing ``args`` raises; a secret given on the command line.
        typer.Exit: (0) once the file is written.
    """
    from .run_config import command_line_config, dump

    with command.make_context(name, args, parent=ctx) as sub:
        try:
            config = command_line_config(sub)
        except BlackboxMIAError as exc:
            raise click_exceptions.UsageError(for_command_line(exc)) from None
    sys.stdout.write(dump(config))
    raise typer.Exit(0)


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
