"""Capability routing (``--methods``): log-prob scorers where the target gives usable log-probs,
the text-only tests (:mod:`blackbox_mia.scorers.text_only`) where it does not.

A target is routed to the text-only tests when it has no ``logprobs`` feature, when its
capability probe finds no log-probs the tracker can turn into absolute values (an endpoint
without log-probs, or with top-n lists but no working ``logit_bias``), or when the tracker's
estimate for the texts exceeds :data:`MAX_REQUESTS_PER_TOKEN` (bisection by sampled flips costs
about 6 requests a token). Deciding sends nothing but the probe (cached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..backends.base import GENERATE, LOGPROBS, Backend
from ..option_names import as_flags, named
from ..scorers import TARGET, Scorer, text_only_specs
from ..scorers.ts_guessing import parse_multiple_choice
from ..types import BlackboxMIAError, NoLogprobs

if TYPE_CHECKING:
    from .common import AuditResult, Log

Plan = TypeVar("Plan")

METHODS = ("auto", "logprobs", "text-only")
LOGPROBS_ROUTE, TEXT_ONLY_ROUTE = METHODS[1], METHODS[2]
MAX_REQUESTS_PER_TOKEN = 2.0  # above this tracker cost per scored token, auto takes the text-only tests
ROUTING_SAMPLE = 20  # texts whose tracker estimate decides the cost (the estimate sends nothing)
TEXT_ONLY_SWEEP_SCORER = "samia"  # the one text-only scorer a sweep takes (a score per text, any text)


@dataclass(frozen=True)
class Route:
    """Which kind of scorers a target gets, and why.

    Attributes:
        methods: ``"logprobs"`` or ``"text-only"``.
        reason: one sentence: what the probe or the estimate found.
        requests_per_token: the tracker's estimated requests per scored token (None when no
            log-prob is available, or the backend sends no requests).
    """

    methods: str
    reason: str
    requests_per_token: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return {"methods": self.methods, "reason": self.reason, "requests_per_token": self.requests_per_token}


def check_methods(methods: str | None) -> None:
    """Raise :class:`BlackboxMIAError` unless ``methods`` is None or one of :data:`METHODS`."""
    if methods is not None and methods not in METHODS:
        raise BlackboxMIAError(f"{named('methods')} must be one of {', '.join(METHODS)}, got {methods!r}")


def route(target: Backend, texts: Sequence[str]) -> Route:
    """Where the target's log-probs stand (see the module docstring).

    Raises:
        BlackboxMIAError: the target offers neither log-probs nor generation; a probe that fails
            for another reason than missing log-probs (the endpoint unreachable...).
    """
    if LOGPROBS not in target.features:
        if GENERATE not in target.features:
            raise BlackboxMIAError(f"this {target.kind} backend offers neither log-probs nor generation")
        return Route(TEXT_ONLY_ROUTE, f"the {target.kind} backend gives no log-probs")
    sample = list(texts[:ROUTING_SAMPLE])
    try:
        estimate = target.estimate_cost(sample)
    except NoLogprobs as exc:
        if GENERATE not in target.features:
            raise
        return Route(TEXT_ONLY_ROUTE, f"no usable log-probs: {exc}")
    if not estimate.requests:
        return Route(LOGPROBS_ROUTE, "the target computes log-probs itself (white-box)")
    tokens = sum(len(target.codec.encode(t)) for t in sample)
    rate = estimate.requests / max(tokens, 1)
    if rate > MAX_REQUESTS_PER_TOKEN and GENERATE in target.features:
        return Route(TEXT_ONLY_ROUTE, f"the tracker needs about {rate:.1f} requests per token here (strategy "
                                      f"{estimate.strategy}; more than {MAX_REQUESTS_PER_TOKEN:g})", rate)
    return Route(LOGPROBS_ROUTE, f"log-probs at about {rate:.2f} requests per token (strategy {estimate.strategy})", rate)


def multiple_choice(texts: Sequence[str]) -> bool:
    """Whether every text is a multiple-choice item in the AQuA format (TS-Guessing applies)."""
    return bool(texts) and all(parse_multiple_choice(t) is not None for t in texts)


def routed_specs(methods: str, target: Backend, texts: Sequence[str], logprob_specs: Sequence[str],
                 text_only: Sequence[str] | None = None) -> tuple[tuple[str, ...], Route]:
    """The scorer specs for ``--methods`` on ``target``: ``logprob_specs`` or the text-only
    scorers (``text_only`` when given, as the sweep's one scorer; else
    :func:`~blackbox_mia.scorers.text_only_specs`, TS-Guessing on multiple-choice items), and the
    route taken (``auto``: :func:`route`).

    Raises:
        BlackboxMIAError: a bad ``methods``; as :func:`route`.
    """
    check_methods(methods)
    if methods == LOGPROBS_ROUTE:
        return tuple(logprob_specs), Route(LOGPROBS_ROUTE, "asked for (--methods logprobs)")
    found = route(target, texts)
    if TEXT_ONLY_ROUTE in (methods, found.methods):
        chosen = tuple(text_only) if text_only else text_only_specs(multiple_choice(texts))
        return chosen, Route(TEXT_ONLY_ROUTE, found.reason, found.requests_per_token)
    return tuple(logprob_specs), Route(LOGPROBS_ROUTE, found.reason, found.requests_per_token)


def text_only_offer(target: Backend, texts: Sequence[str]) -> tuple[str | None, bool]:
    """Without ``--methods``, for log-prob scorers: ``(sentence, fatal)``, the sentence offering
    the text-only tests when :func:`route` sends the target there (None when its log-probs are
    usable; settings marked by :func:`~blackbox_mia.option_names.named`), ``fatal`` when there are
    no usable log-probs at all (the run cannot proceed)."""
    found = route(target, texts)
    if found.methods == LOGPROBS_ROUTE:
        return None, False
    specs = ",".join(text_only_specs(multiple_choice(texts)))
    return (f"{found.reason}. The text-only tests need only generation: {named('methods', 'auto')} runs them "
            f"(or {named('scorers', specs)})"), found.requests_per_token is None


def route_scorers(methods: str | None, target: Backend, texts: Sequence[str], specs: Sequence[str],
                  scorers: Sequence[Scorer], log: Log,
                  text_only: Sequence[str] | None = None) -> tuple[tuple[str, ...], dict | None]:
    """The scorer specs to run after capability routing, and the route taken (None without
    ``--methods``). Without ``--methods``, log-prob scorers on a target with no usable log-probs
    are refused with the offer of the text-only tests; a costly tracker is only noted (``log``).
    ``scorers``: the scorers of ``specs``, as the command read them.

    Raises:
        BlackboxMIAError: as :func:`routed_specs`; no usable log-probs.
    """
    if methods is None:
        if any(s.needs_logprobs for s in scorers):
            offer, fatal = text_only_offer(target, texts)
            if fatal:
                raise BlackboxMIAError(offer)
            if offer:
                log(f"note: {as_flags(offer)}")
        return tuple(specs), None
    chosen, found = routed_specs(methods, target, texts, specs, text_only)
    log(f"--methods {methods}: {found.methods} scorers ({', '.join(chosen)}): {found.reason}")
    return chosen, found.to_dict()


def routed_audit(methods: str | None, texts: Sequence[str], specs: Sequence[str], plan_for: Callable[[tuple[str, ...]], Plan],
                 run: Callable[[Plan, dict[str, Backend]], AuditResult], dry_run: Callable[[Plan, dict[str, Backend]], None],
                 log: Log, text_only: Sequence[str] | None = None
                 ) -> tuple[Callable[[dict[str, Backend]], None], Callable[[dict[str, Backend]], AuditResult]]:
    """An audit's ``(dry_run, run)`` given its backends, after ``--methods`` routing
    (:func:`route_scorers` on ``texts``): ``plan_for(chosen specs)`` gives the plan to run (the
    prepared one when the specs are unchanged: its ``scorers``, read once by the command, are
    what routing checks), ``text_only`` the text-only specs it takes (as
    :func:`routed_specs`); the route goes into the result's ``summary["route"]`` (when
    ``--methods`` was given).

    Raises (from the returned functions): as :func:`route_scorers`, ``plan_for``, ``run``, ``dry_run``.
    """
    def routed(backends: dict[str, Backend]) -> tuple[Plan, dict | None]:
        chosen, found = route_scorers(methods, backends[TARGET], texts, specs, plan_for(tuple(specs)).scorers, log,
                                      text_only)
        return plan_for(chosen), found

    def estimate(backends: dict[str, Backend]) -> None:
        dry_run(routed(backends)[0], backends)

    def audit(backends: dict[str, Backend]) -> AuditResult:
        plan, found = routed(backends)
        result = run(plan, backends)
        if found is not None:
            result.summary["route"] = found
        return result

    return estimate, audit
