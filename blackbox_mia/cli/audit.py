"""The skeleton every audit command shares (``eval``, ``sweep``, ``documents``, ``memorize``,
``unlearning``): once the command has validated its options and loaded its data (the audit's
``prepare_*``), build the backends, estimate (``--dry-run``) or run (resuming its files; the audit
judges the spend guard first), close the backends and print what was spent (also after an error
or Ctrl-C), write the run file of the command line beside the report (:func:`record_run`), then
show the summary, every warning of the report (one line each on stderr), the report's paths and,
with ``--json``, the summary as the last line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import get_current_context

from ..backends.base import Backend
from ..scorers import Scorer
from ..types import BlackboxMIAError
from .app import echo_json_line
from .common import TargetOptions, build_backends, close_all
from .spend import spending

if TYPE_CHECKING:  # the audits are imported by the commands when they run
    from ..audits.common import AuditResult


def run_audit(target: TargetOptions, scorers: Sequence[Scorer], dry_run: Callable[[dict[str, Backend]], None] | None,
              run: Callable[[dict[str, Backend]], AuditResult], show: Callable[[AuditResult], None],
              json_out: bool, build: Callable[[], dict[str, Backend]] | None = None) -> None:
    """Run one audit command's work between its validation and its console output.

    Args:
        target: the command's target options (``--dry-run`` among them).
        scorers: the scorers the audit uses (what the backends must serve).
        dry_run: prints the expected cost given the backends (nothing is scored); None for a
            command without ``--dry-run``.
        run: the audit given the backends (it judges the spend guard itself: pass it
            ``target.yes``).
        show: prints the audit's result (tables, headline) on the console.
        json_out: make the last line of stdout the summary (with ``usage`` when requests were sent).
        build: the backends by role, for an audit of other models than ``--local`` /
            ``--base-url`` and ``--ref`` (e.g. ``unlearning``'s before and after); it closes
            those it built when one fails. Default: :func:`~.common.build_backends`.

    Raises:
        BlackboxMIAError: from building the backends, the estimate or the audit (the backends
            are closed first); ``--dry-run`` given to a command without an estimate.
    """
    if target.dry_run and dry_run is None:
        raise BlackboxMIAError("this command has no --dry-run estimate")
    backends = build() if build is not None else build_backends(target, scorers)
    if target.dry_run:
        try:
            dry_run(backends)
        finally:
            close_all(backends)
        return
    with spending(backends) as spent:  # what was spent is printed, also after an error or Ctrl-C
        result = run(backends)
    usage = spent["usage"]
    show(result)
    for warning in result.summary.get("warnings", ()):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"report: {result.json_path} and {result.md_path}; run file: {record_run(result.out_dir)}")
    if json_out:
        echo_json_line({**result.summary, **({"usage": usage} if usage else {})})


def record_run(out_dir: Path) -> Path:
    """Write ``run.yaml`` into the audit's output folder: the run file of the command being run
    (:func:`~.run_config.command_line_config`, a secret left out; ``bbmia run`` reruns it) and,
    under ``recorded``, the package version, its git commit and the machine
    (:func:`~.run_config.provenance`).

    Returns:
        The file's path.
    """
    from ..io import write_text_atomic
    from .run_config import RECORDED, RUN_FILE, command_line_config, dump, provenance

    path = Path(out_dir) / RUN_FILE
    config = command_line_config(get_current_context(), refuse_secrets=False)
    write_text_atomic(path, dump({**config, RECORDED: provenance()}))
    return path
