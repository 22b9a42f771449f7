"""What a command is expected to spend (``--dry-run``) and what it spent (usage), on the console
and in its JSON; shared by ``score``, ``probe`` and the audits (``eval``, ``sweep``, ``documents``,
``memorize``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import typer

from ..backends.base import Backend
from ..cost.plan import (
    ESTIMATE_HEADER,
    TOTAL,
    estimate_groups,
    estimate_lines,
    usage_report,
    usage_text,
)
from ..datasets import Item
from ..scorers import Scorer
from ..types import BlackboxMIAError
from .app import echo_json_line
from .common import TargetOptions, format_table

GUARD_REQUESTS = 10_000  # without --max-cost or --yes, a run estimated at more requests than this is refused
GUARD_USD = 1.0  # ... or at more USD than this against a priced endpoint
YES_HELP = (f"run even when the estimate exceeds {GUARD_REQUESTS:,} requests or ${GUARD_USD:g} without --max-cost "
            "(the spend guard)")


def print_dry_run(groups: Mapping[str, Sequence[Item]], scorers: Sequence[Scorer], backends: dict[str, Backend],
                  json_out: bool) -> dict:
    """Print the expected requests, billed tokens and USD of scoring each group of items (a table
    on stdout, the estimate's notes on stderr; with ``json_out`` a last JSON line
    ``{"dry_run": true, "n": {group: items}, "estimate": ...}``); nothing is scored.

    Returns:
        The :func:`~blackbox_mia.cost.plan.estimate_groups` report.

    Raises:
        BlackboxMIAError: a scorer the backends cannot serve; a failed capability probe.
    """
    report = estimate_groups(groups, scorers, backends)
    print_estimate(report, {name: len(items) for name, items in groups.items()}, json_out)
    return report


def print_estimate(report: Mapping[str, Mapping[str, dict]], n: Mapping[str, int], json_out: bool) -> None:
    """Print an estimate report (:func:`~blackbox_mia.cost.plan.estimate_groups`'s shape: ``{group:
    {role: CostEstimate.to_dict()}, "total": {..., "all": ...}}``): a table on stdout, the notes
    on stderr, and with ``json_out`` a last JSON line ``{"dry_run": true, "n": n, "estimate":
    report}`` (``n``: group -> texts or prompts in it)."""
    typer.echo(format_table(ESTIMATE_HEADER, estimate_lines(report)))
    for note in report[TOTAL]["all"]["notes"]:
        typer.echo(f"note: {note}", err=True)
    if json_out:
        echo_json_line({"dry_run": True, "n": dict(n), "estimate": report})


def guard_spend(groups: Mapping[str, Sequence[Item]], scorers: Sequence[Scorer], backends: dict[str, Backend],
                target: TargetOptions, yes: bool) -> None:
    """Refuse a run whose estimate (:func:`~blackbox_mia.cost.plan.estimate_groups`) exceeds
    :data:`GUARD_REQUESTS` requests or :data:`GUARD_USD` USD when neither ``--max-cost`` nor
    ``--yes`` was given; nothing is estimated without a backend that sends requests. The
    estimate counts answers already in the response cache as if paid (a resumed run is judged
    whole).

    Raises:
        BlackboxMIAError: the run is refused (the message gives the estimate and the flags that
            let it proceed); a scorer the backends cannot serve; a failed capability probe.
    """
    if yes or target.max_cost is not None or all(b.usage is None for b in backends.values()):
        return
    total = estimate_groups(groups, scorers, backends)[TOTAL]["all"]
    requests, usd, unpriced = total["requests"], total["usd"], total["unpriced"]
    if requests > GUARD_REQUESTS or (not unpriced and usd > GUARD_USD):
        cost = "unpriced model" if unpriced else f"about ${usd:,.2f}"
        raise BlackboxMIAError(
            f"refusing to start: this run is estimated at {requests:,} requests ({cost}), over the "
            f"{GUARD_REQUESTS:,} requests / ${GUARD_USD:g} that run without confirmation; pass --max-cost USD to "
            "cap the spend, or --yes to run it as it is (--dry-run prints the estimate)"
        )


def print_usage(backends: Mapping[str, Backend]) -> dict | None:
    """Print one ``usage: ...`` line on stderr and return the :func:`~blackbox_mia.cost.plan.usage_report`
    for the command's JSON (``None``, and nothing printed, when no backend sends requests)."""
    report = usage_report(backends)
    if report is not None:
        typer.echo(usage_text(report), err=True)
    return report
