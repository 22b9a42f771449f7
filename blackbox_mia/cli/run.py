"""``bbmia run RUN.yaml``: the command a run file describes (:mod:`.run_config`)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..types import BlackboxMIAError
from .app import app, user_errors
from .run_config import COMMAND, CONFIG, RUN, read_run_file


@app.command(RUN, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="run file (YAML): command, data, target, scorers, out, options"),
):
    """Run the command a run file (YAML) describes: bbmia run RUN.yaml is bbmia COMMAND --config
    RUN.yaml. Options after the file override it (bbmia run RUN.yaml --limit 10); --print-config
    prints the run file back instead of running it. Write one with --print-config on any command.
    """
    root = ctx.find_root()
    with user_errors():
        name = str(read_run_file(config).get(COMMAND) or "")
        if not name:
            raise BlackboxMIAError(f"{config}: no 'command' (e.g. command: eval)")
    code = root.command.main([name, CONFIG, str(config), *ctx.args], prog_name=root.info_name, standalone_mode=False)
    raise typer.Exit(code or 0)
