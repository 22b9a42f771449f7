"""What a command is expected to spend (``--dry-run``) and what it spent (usage), on the console
and in its JSON; shared by ``score``, ``probe`` and the audits (``eval``, ``sweep``, ``documents``,
``memorize``, ...). Whether it may start at all is the spend guard's decision
(:mod:`blackbox_mia.spend.guard`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import typer

from ..backends.base import Backend
from ..spend.plan import (
    ESTIMATE_HEADER,
    TOTAL,
    estimate_groups,
    estimate_lines,
    usage_report,
    usage_text,
)
from ..datasets import Item
from ..scorers import Scorer
from .app import echo_json_line
from .common import close_all, format_table


def print_dry_run(groups: Mapping[str, Sequence[Item]], scorers: Sequence[Scorer], backends: dict[str, Backend],
                  json_out: bool) -> dict:
    """Print the expected requests, billed tokens and USD of scoring each group of items (a table
    on stdout, the estimate's notes on stderr; with ``json_out`` a last JSON line
    ``{"dry_run": true, "n": {group: items}, "estimate": ...}``); nothing is scored.

    Returns:
        The :func:`~blackbox_mia.spend.plan.estimate_groups` report.

    Raises:
        BlackboxMIAError: a scorer the backends cannot serve; a failed capability probe.
    """
    report = estimate_groups(groups, scorers, backends)
    print_estimate(report, {name: len(items) for name, items in groups.items()}, json_out)
    return report


def print_estimate(report: Mapping[str, Mapping[str, dict]], n: Mapping[str, int], json_out: bool) -> None:
    """Print an estimate report (:func:`~blackbox_mia.spend.plan.estimate_groups`'s shape: ``{group:
    {role: CostEstimate.to_dict()}, "total": {..., "all": ...}}``): a table on stdout, the notes
    on stderr, and with ``json_out`` a last JSON line ``{"dry_run": true, "n": n, "estimate":
    report}`` (``n``: group -> texts or prompts in it)."""
    typer.echo(format_table(ESTIMATE_HEADER, estimate_lines(report)))
    for note in report[TOTAL]["all"]["notes"]:
        typer.echo(f"note: {note}", err=True)
    if json_out:
        echo_json_line({"dry_run": True, "n": dict(n), "estimate": report})


def print_usage(backends: Mapping[str, Backend]) -> dict | None:
    """Print one ``usage: ...`` line on stderr and return the :func:`~blackbox_mia.spend.plan.usage_report`
    for the command's JSON (``None``, and nothing printed, when no backend sends requests)."""
    report = usage_report(backends)
    if report is not None:
        typer.echo(usage_text(report), err=True)
    return report


@contextlib.contextmanager
def spending(backends: Mapping[str, Backend], on_success: bool = True) -> Iterator[dict]:
    """Run a command's requests inside: on leaving, the backends are closed (the requests in
    flight land in the cache first) and what they spent is printed, one ``usage: ...`` line on
    stderr (:func:`print_usage`; not after a success with ``on_success`` False, for a command
    whose records carry their usage), also when the block stops on an error or Ctrl-C (then only
    when something was billed: a connection that never answered spent nothing). The yielded dict
    gets ``"usage"``: the :func:`~blackbox_mia.spend.plan.usage_report` for the command's JSON
    (``None`` when no backend sends requests or nothing is printed)."""
    spent: dict = {"usage": None}
    try:
        yield spent
    except BaseException:
        close_all(dict(backends))
        report = usage_report(backends)
        if report is not None and any(report[TOTAL][k] for k in ("prompt_tokens", "completion_tokens", "cost_usd")):
            typer.echo(usage_text(report), err=True)
        raise
    close_all(dict(backends))
    if on_success:
        spent["usage"] = print_usage(backends)
