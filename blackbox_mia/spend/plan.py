"""What a run is expected to cost (``--dry-run``) and what it spent (usage), for the commands.

:func:`estimate_groups` asks each backend for the cost of the texts the requested scorers need
(:func:`estimate_texts`), per group of items scored together (a sweep's
benchmark, its control, its calibration...). :func:`usage_report` sums what the backends spent.
Both come as JSON-ready dicts and as console lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..backends.base import Backend
from ..cost.estimate import CostEstimate, add_estimates
from ..datasets import Item
from ..text_only_runner import estimate_generated
from ..runner import needed_texts
from ..scorers import TARGET, Scorer

TOTAL = "total"  # the key of the summed estimate in estimate_groups()'s result


def estimate_groups(
    groups: Mapping[str, Sequence[Item]], scorers: Sequence[Scorer], backends: dict[str, Backend]
) -> dict[str, dict]:
    """The expected cost of scoring each group of items with ``scorers``, each group as one
    :func:`~blackbox_mia.runner.score_items` call (texts repeated across groups count in each).

    Args:
        groups: name → items, e.g. ``{"benchmark": items, "control": control_items}``.
        scorers: the scorers the run uses on them.
        backends: ``{"target": ...}`` plus ``{"reference": ...}``.

    Returns:
        ``{group: {role: CostEstimate.to_dict()}, ..., "total": {role: ..., "all": ...}}``:
        requests, billed prompt / completion tokens, USD, relative uncertainty, strategy, notes.

    Raises:
        BlackboxMIAError: a scorer the backends cannot serve; a failed capability probe.
    """

    per_group = {name: estimate_texts([it.text for it in items], scorers, backends) for name, items in groups.items()}
    return estimate_report(per_group, list(backends))


def estimate_report(per_group: Mapping[str, Mapping[str, CostEstimate]], roles: Sequence[str] = ()) -> dict[str, dict]:
    """The JSON-ready report of per-group, per-role estimates, in :func:`estimate_groups`' shape:
    each group's estimates, then ``"total"``: per role (``roles`` first, even when no group has
    them, then those the groups name) the sum over the groups, and ``"all"`` the sum of those."""
    roles = list(dict.fromkeys([*roles, *(role for est in per_group.values() for role in est)]))
    totals = {role: add_estimates([est[role] for est in per_group.values() if role in est]) for role in roles}
    totals["all"] = add_estimates(list(totals.values()))
    out = {name: {role: e.to_dict() for role, e in est.items()} for name, est in per_group.items()}
    out[TOTAL] = {role: e.to_dict() for role, e in totals.items()}
    return out


def estimate_lines(report: Mapping[str, Mapping[str, dict]]) -> list[list]:
    """Rows ``[group, role, strategy, requests, prompt tokens, completion tokens, USD, ±]`` of an
    :func:`estimate_groups` report, for a console table."""
    rows = []
    for group, roles in report.items():
        for role, e in roles.items():
            if group == TOTAL and role != "all":  # the per-role totals are in the groups' rows
                continue
            usd = "unpriced" if e["unpriced"] else f"${e['usd']:.4f}"
            rows.append([group, role, e["strategy"] or "-", e["requests"], e["prompt_tokens"], e["completion_tokens"],
                         usd, f"{e['relative_uncertainty']:.0%}"])
    return rows


ESTIMATE_HEADER = ["texts", "model", "strategy", "requests", "prompt tokens", "completion tokens", "USD", "±"]


def usage_report(backends: Mapping[str, Backend]) -> dict | None:
    """What the backends spent: ``{role: Usage.to_dict(), "total": {"requests", "prompt_tokens",
    "completion_tokens", "cost_usd", "unpriced"}}``; ``None`` when no backend sends requests
    (local models)."""
    usages = {role: b.usage for role, b in backends.items() if b.usage is not None}
    if not usages:
        return None
    total = {k: sum(getattr(u, k) for u in usages.values())
             for k in ("requests", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")}
    return {**{role: u.to_dict() for role, u in usages.items()},
            TOTAL: {**total, "unpriced": any(u.unpriced for u in usages.values())}}


def usage_text(report: Mapping[str, dict] | None) -> str | None:
    """One console line of a :func:`usage_report`: ``"usage: 1234 requests (56 from the cache),
    98,765 prompt + 1,234 completion tokens, $0.0150"``; ``None`` for ``None``."""
    if report is None:
        return None
    t = report[TOTAL]
    usd = "unpriced model" if t["unpriced"] and not t["cost_usd"] else f"${t['cost_usd']:.4f}"
    return (f"usage: {t['requests']} requests ({t['cache_hits']} from the cache), {t['prompt_tokens']:,} prompt + "
            f"{t['completion_tokens']:,} completion tokens, {usd}")


def estimate_texts(
    texts: Sequence[str], scorers: Sequence[Scorer], backends: dict[str, Backend]
) -> dict[str, CostEstimate]:
    """What scoring ``texts`` is expected to cost, per role: each backend's
    :meth:`~blackbox_mia.backends.base.Backend.estimate_cost` of the texts :func:`needed_texts`
    lists for it (zeros for a local model), plus, for the target, the generations of the
    text-only scorers (:func:`~blackbox_mia.text_only_runner.estimate_generated`). Nothing is scored (an API backend may run its
    capability probe once, cached).

    Raises:
        BlackboxMIAError: a scorer the backends cannot serve; a failed probe.
    """
    estimates = {role: backends[role].estimate_cost(unique) if unique else CostEstimate()
                 for role, unique in needed_texts(texts, scorers, backends).items()}
    generative = [s for s in scorers if not s.needs_logprobs]
    if generative:
        estimates[TARGET] = add_estimates([estimates[TARGET], estimate_generated(texts, generative, backends[TARGET])])
    return estimates
