"""One file that describes a run: ``bbmia run CONFIG.yaml``, ``bbmia CMD --config CONFIG.yaml``,
and ``bbmia CMD ... --print-config``, which writes the file of a command line.

A run file is YAML::

    command: eval                  # the command it runs
    data:                          # the DATASET argument and its field options
      source: posts.csv
      text_field: body
    target:                        # the target options (--local, --target, --ref, --concurrency...)
      local: gpt2
    scorers: [loss, "min_k:k=10"]  # --scorers (a list or one comma-separated string)
    out: runs/eval-posts           # --out
    options:                       # every other option of the command
      n_boot: 1000

Each key is an option's flag without its dashes, ``-`` written ``_`` (``--n-boot``: ``n_boot``,
``--target``: ``target``, ``--json``: ``json``). The keys are those of the command's own options,
read from the command itself (one home per setting: the options declared on the command); the
file becomes the command line it stands for, so its values are checked, and fail, exactly as
the flags' do. Options given on the command line after the file override it. A secret (the API
key) is never written to a run file, nor read from one: it comes from the environment. The
``recorded`` section (the version, commit and machine an audit's ``run.yaml`` adds) is ignored
when the file is read. The commands of a group (``canary train``, ``cache ...``) take no run file.
"""

from __future__ import annotations

import difflib
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.core import ParameterSource
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.core import ParameterSource

from ..backends.options import KINDS
from ..datasets.fields import Fields
from ..types import BlackboxMIAError
from .common import TargetOptions
from .options import option_fields

if TYPE_CHECKING:
    from typer._click.core import Command, Context, Parameter

RUN, CONFIG, PRINT_CONFIG = "run", "--config", "--print-config"
"""The command that runs a run file, and the options every other command takes: read a run
file, or write the one of the command line."""

DATA, TARGET, SCORERS, OUT, OPTIONS, COMMAND = "data", "target", "scorers", "out", "options", "command"
RECORDED = "recorded"
"""What a run recorded of the software and machine (:func:`provenance`); ignored when read."""
SECTIONS = (COMMAND, DATA, TARGET, SCORERS, OUT, OPTIONS, RECORDED)
"""The top-level keys of a run file, in the order --print-config writes them."""
RUN_FILE = "run.yaml"
"""The run file an audit writes into its output folder (:func:`~.audit.record_run`)."""
SOURCE = "source"
"""The key of the DATASET argument in the ``data`` section."""


def key_of(param: Parameter) -> str:
    """A parameter's key in a run file: its first long flag without dashes, ``-`` as ``_``
    (an argument: its name)."""
    if param.param_type_name == "argument":
        return param.name
    long = [opt for opt in param.opts if opt.startswith("--")]
    return (long[0] if long else param.opts[0]).lstrip("-").replace("-", "_")


def secrets() -> frozenset[str]:
    """The parameter names of the settings that are secrets (an options field that its kind hides
    from its repr: the API key), from the registered kinds."""
    return frozenset(f.name for kind in KINDS.values() for f in option_fields(kind.options) if not f.repr)


def layout(command: Command) -> dict[tuple[str, str], Parameter]:
    """Where each parameter of ``command`` goes in a run file: ``(section, key)`` → parameter.

    The DATASET argument is ``data.source``, the field options (:class:`~blackbox_mia.datasets.fields.Fields`)
    go in ``data``, the target options (:class:`~.common.TargetOptions`) in ``target``,
    ``--scorers`` and ``--out`` at the top, the rest in ``options``; ``--help``,
    :data:`CONFIG` and :data:`PRINT_CONFIG` nowhere.
    """
    data = {f.name for f in option_fields(Fields)}
    target = {f.name for f in option_fields(TargetOptions)}
    places: dict[tuple[str, str], Parameter] = {}
    for param in command.params:
        key = key_of(param)
        if key in ("help", CONFIG[2:], PRINT_CONFIG[2:].replace("-", "_")):
            continue
        if param.param_type_name == "argument":
            place = (DATA, SOURCE) if param.name == "dataset" else (OPTIONS, key)
        elif param.name in data:
            place = (DATA, key)
        elif param.name in target:
            place = (TARGET, key)
        elif key in (SCORERS, OUT):
            place = (key, key)
        else:
            place = (OPTIONS, key)
        places[place] = param
    return places


def read_run_file(path: Path) -> dict:
    """A run file's mapping.

    Raises:
        BlackboxMIAError: the file is missing, unreadable, not YAML, or not a mapping.
    """
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read run file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise BlackboxMIAError(f"{path}: not YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(loaded, dict):
        raise BlackboxMIAError(f"{path}: a run file is a mapping of {', '.join(SECTIONS)}, got {type(loaded).__name__}")
    return loaded


def _unknown(path: Path, key: str, known: list[str], where: str) -> BlackboxMIAError:
    """The error for a key no command knows there, with the nearest known key."""
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(sorted(known))})"
    return BlackboxMIAError(f"{path}: unknown key {key!r} {where}{hint}")


def run_file_args(path: Path, group: TyperGroup, ctx: Context, name: str | None = None) -> tuple[str, list[str]]:
    """The command and the command line a run file stands for.

    Args:
        path: the run file.
        group: the root command group (its commands' parameters are the keys).
        ctx: the group's context.
        name: the command it is given to (``--config``); ``None``: the file's ``command``.

    Raises:
        BlackboxMIAError: see :func:`read_run_file`; no command, a command that differs from
            ``name`` or does not exist; a key that the command does not know (with the
            nearest known key); a secret; a list for an option that takes one value.
    """
    config = read_run_file(path)
    for key in config:
        if key not in SECTIONS:
            raise _unknown(path, key, list(SECTIONS), "at the top (keys: " + ", ".join(SECTIONS) + ")")
    named = config.get(COMMAND)
    if name is None and named is None:
        raise BlackboxMIAError(f"{path}: no 'command' (e.g. command: eval)")
    if name is not None and named is not None and named != name:
        raise BlackboxMIAError(f"{path}: describes a {named!r} run, given to {name!r}")
    name = name or str(named)
    command = group.get_command(ctx, name)
    if command is None or isinstance(command, TyperGroup):
        raise _unknown(path, name, [n for n in group.list_commands(ctx)
                                    if not isinstance(group.get_command(ctx, n), TyperGroup)], "as the command")
    places = layout(command)
    arguments: list[str] = []
    options: list[str] = []
    for section in SECTIONS[1:-1]:
        if section not in config or config[section] is None:
            continue
        given = config[section]
        entries = {section: given} if section in (SCORERS, OUT) else given
        if not isinstance(entries, dict):
            raise BlackboxMIAError(f"{path}: '{section}' is a mapping of option keys to values")
        for key, value in entries.items():
            param = places.get((section, key))
            if param is None:
                known = [k for (s, k) in places if s == section]
                elsewhere = [s for (s, k) in places if k == key]
                where = f"under '{section}'" + (f" (it belongs under '{elsewhere[0]}')" if elsewhere else f" for {name}")
                raise _unknown(path, key, known or [k for _, k in places], where)
            if param.name in secrets():
                raise BlackboxMIAError(f"{path}: a run file never holds the {key} (a secret): give it by its "
                                       "environment variable")
            (arguments if param.param_type_name == "argument" else options).extend(_as_args(param, value, path, key))
    return name, [*arguments, *options]


def _as_args(param: Parameter, value: Any, path: Path, key: str) -> list[str]:
    """The command-line words that give ``param`` the run file's ``value``."""
    if value is None:
        return []
    if param.param_type_name == "argument":
        return [str(value)]
    if isinstance(value, list) and key == SCORERS:
        value = ",".join(map(str, value))
    values = value if isinstance(value, list) and param.multiple else [value]
    if isinstance(value, list) and not param.multiple:
        raise BlackboxMIAError(f"{path}: '{key}' takes one value, got a list")
    words: list[str] = []
    for one in values:
        if param.is_flag:
            if not isinstance(one, bool):
                raise BlackboxMIAError(f"{path}: '{key}' is true or false, got {one!r}")
            flag = param.opts[0] if one else (param.secondary_opts[:1] or [None])[0]
            if flag is None and param.default:
                raise BlackboxMIAError(f"{path}: '{key}' is on unless given, and has no option to turn it off")
            words += [flag] if flag else []
        else:
            words += [param.opts[0], _text(one)]
    return words


def _text(value: Any) -> str:
    """A YAML scalar as the command line writes it (``true``/``false`` for booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def command_line_config(ctx: Context, refuse_secrets: bool = True) -> dict:
    """The run file of a command's context: every option given on the command line (a default
    is left out), placed by :func:`layout`, ``scorers`` as a list.

    Args:
        ctx: the command's context, its options parsed.
        refuse_secrets: raise for a secret given on the command line (``--print-config``);
            ``False``: leave it out (the record of a run that has already run).

    Raises:
        BlackboxMIAError: a secret given on the command line, with ``refuse_secrets`` (it is
            never written).
    """
    from ..scorers import split_specs

    config: dict[str, Any] = {COMMAND: ctx.command.name}
    for (section, key), param in layout(ctx.command).items():
        if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
            continue
        if param.name in secrets():
            if not refuse_secrets:
                continue
            raise BlackboxMIAError(f"--{key.replace('_', '-')} is a secret and never written: give it by its "
                                   "environment variable instead")
        value = _plain(ctx.params[param.name])
        if section == SCORERS:
            config[SCORERS] = split_specs(value)
        elif section == OUT:
            config[OUT] = value
        else:
            config.setdefault(section, {})[key] = value
    return {section: config[section] for section in SECTIONS if section in config}


def _plain(value: Any) -> Any:
    """A parameter's value as YAML writes it: paths as text, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def dump(config: dict) -> str:
    """A run file's text (YAML, keys in :data:`SECTIONS` order)."""
    import yaml

    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True, default_flow_style=False)


def provenance() -> dict:
    """What a report records of the software and machine: the package version, the git commit
    of its source tree (``None`` when it is not a git checkout), the platform, Python and the
    number of CPUs."""
    import os

    from .. import __version__

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"package": "blackbox_mia", "version": __version__, "commit": commit,
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}}
