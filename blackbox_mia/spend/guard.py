"""The spend guard: a run that can send requests is judged on its estimate before its first
request, the same rule for every command and for the library's audits.

A run estimated at more than :data:`GUARD_REQUESTS` requests, or more than :data:`GUARD_USD` USD
against a priced model, is refused (:class:`~blackbox_mia.types.SpendRefused`, importable from
here too) unless it is confirmed (``yes=True``, ``--yes``) or every backend that sends requests
has a spending cap (``max_cost=``, ``--max-cost``, or ``max_requests=``, ``--max-requests`` for a
model without a price: the cap then bounds the spend). The estimate is the one ``--dry-run`` prints
(:func:`~blackbox_mia.spend.plan.estimate_groups`, or an audit's own estimate of the same shape);
computing it may run the target's capability probe (a few dozen requests, once per endpoint and
model, cached), nothing else. Local models send nothing and are never judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..types import SpendRefused
from .limits import GUARD_REQUESTS, GUARD_USD
from .plan import TOTAL, estimate_groups

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..datasets import Item
    from ..scorers import Scorer

Estimate = Callable[[], Mapping[str, Mapping[str, dict]]]
"""A run's estimate, computed only when the guard needs it: ``{group: {role: CostEstimate.to_dict()},
"total": {..., "all": ...}}`` (:func:`~blackbox_mia.spend.plan.estimate_groups`'s shape)."""


def uncapped(backends: Mapping[str, Backend]) -> bool:
    """Whether some backend sends requests (:attr:`~blackbox_mia.backends.base.Backend.usage` not
    ``None``) without a spending cap (:attr:`~blackbox_mia.backends.base.Backend.capped`):
    only then is a run judged."""
    return any(b.usage is not None and not b.capped for b in backends.values())


def guard_spend(estimate: Estimate, backends: Mapping[str, Backend], yes: bool = False) -> None:
    """Refuse a run whose estimate exceeds :data:`GUARD_REQUESTS` requests or (priced models)
    :data:`GUARD_USD` USD, unless ``yes`` or no backend sends requests uncapped (:func:`uncapped`;
    then ``estimate`` is not even computed). The estimate counts answers already in the response
    cache as if paid: a resumed run is judged whole.

    Raises:
        SpendRefused: the run is refused (its message gives the estimate and the settings that let
            it proceed).
        BlackboxMIAError: from ``estimate`` (a scorer the backends cannot serve, a failed
            capability probe).
    """
    if yes or not uncapped(backends):
        return
    total = estimate()[TOTAL]["all"]
    requests, usd, unpriced = total["requests"], total["usd"], total["unpriced"]
    if requests > GUARD_REQUESTS or (not unpriced and usd > GUARD_USD):
        raise SpendRefused(requests, None if unpriced else usd, GUARD_REQUESTS, GUARD_USD)


def guard_groups(groups: Mapping[str, Sequence[Item]], scorers: Sequence[Scorer], backends: dict[str, Backend],
                 yes: bool = False) -> None:
    """:func:`guard_spend` on the estimate of scoring ``groups`` with ``scorers``
    (:func:`~blackbox_mia.spend.plan.estimate_groups`: what ``--dry-run`` prints for them).

    Raises:
        SpendRefused, BlackboxMIAError: as :func:`guard_spend`.
    """
    guard_spend(lambda: estimate_groups(groups, scorers, backends), backends, yes)
