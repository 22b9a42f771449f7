"""``bbmia cache verify|repair``: check a response cache, and repair it keeping every answer."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import CACHE_ENV, cache_root
from .app import app, echo_json_line, user_errors

cache_app = typer.Typer(help="Check or repair a response cache (nothing is ever deleted).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

DIRECTORY_HELP = "a response cache, or a cache root holding responses/ (default: <--cache-dir>/responses)"


def _directory(directory: Path | None, cache_dir: Path | None) -> Path:
    return directory if directory is not None else cache_root(cache_dir) / "responses"


def _report(report, doing: str) -> None:
    """The report on stderr in words, and as the JSON last line of stdout."""
    counts = report.to_dict()
    typer.echo(f"{doing} {report.directory}: {report.rows} rows, {len(report.bad)} bad "
               f"{counts['bad_by_reason'] or ''}, database {report.integrity}, "
               f"{report.quarantined_before} quarantined before", err=True)
    for key, reason in list(report.bad.items())[:20]:
        typer.echo(f"  {key}: {reason}", err=True)
    echo_json_line(counts)


@cache_app.command()
def verify(
    directory: Path | None = typer.Argument(None, help=DIRECTORY_HELP),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", envvar=CACHE_ENV, help="cache root"),
) -> None:
    """Read every row as a run would (never unpickling), write nothing; exit 1 when a row is bad
    or the database is damaged (then run `bbmia cache repair`)."""
    from ..backends.api.http.cache.check import verify as verify_cache

    with user_errors():
        report = verify_cache(_directory(directory, cache_dir))
    _report(report, "verified")
    if not report.healthy:
        typer.echo(f"repair with: bbmia cache repair {report.directory}", err=True)
        raise typer.Exit(1)


@cache_app.command()
def repair(
    directory: Path | None = typer.Argument(None, help=DIRECTORY_HELP),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", envvar=CACHE_ENV, help="cache root"),
) -> None:
    """Move bad rows to the cache's Quarantine table; rebuild a damaged database from its
    readable rows (the damaged one is moved to damaged-<time>/). Run it while nothing else uses
    the cache."""
    from ..backends.api.http.cache.check import repair as repair_cache

    with user_errors():
        report = repair_cache(_directory(directory, cache_dir))
    _report(report, "repaired")
    if report.moved_aside is not None:
        typer.echo(f"damaged database moved to {report.moved_aside}; {report.salvaged} rows salvaged", err=True)
