"""The tracker's strategies: each recovers lp_i of one target after one prefix (or, ``prompt``,
of a whole window) through an :class:`~.endpoint.Endpoint`, with [lower, upper] bounds in nats.

The same objects run in two places: the tracker runs them on the user's texts, and the
capability probe runs them on positions whose value it knows, with the same ε, bias cap and
re-checks, and enables a strategy only when it reproduced those values. The formulas are in
the tracker's module docstring (and ``docs/design.md``).

Bisection's flip search is in :mod:`.flips`; ``auto`` and the set of every strategy
(:func:`~.choice.strategy_set`) in :mod:`.choice`. Every per-position strategy has
``async resolve(position) -> Estimate``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..capabilities import Capabilities
from ..endpoint import ECHO, PROMPT_LOGPROBS, Endpoint, NextToken, may_be, surely

if TYPE_CHECKING:
    from .config import TrackerConfig

REPORT_PRECISION_NATS = 1e-4  # servers round log-probs; the mass bound allows this much per entry


@dataclass
class Estimate:
    """lp_i with bounds (nats) and the strategy that produced it; ``rank``: how many tokens the
    unbiased top-n listed above the target where the answer showed it (0: the argmax; the
    top-n or more: not listed), ``None`` where it did not (run reading's policy reads it:
    :mod:`.runs`)."""

    value: float
    lower: float
    upper: float
    strategy: str
    rank: int | None = None

    @classmethod
    def exact(cls, value: float, strategy: str, rank: int | None = None) -> Estimate:
        return cls(value, value, value, strategy, rank)

    @classmethod
    def at_most(cls, upper: float, strategy: str) -> Estimate:
        """Only an upper bound is known: the value is the bound, the lower end is -inf."""
        return cls(upper, -math.inf, upper, strategy)


def topn_upper_bound(answer: NextToken, target: int, caps: Capabilities) -> float:
    """Upper bound (nats) on lp of ``target`` given an unbiased answer that does not list it for sure.

    An unlisted token lies below every listed one and below log(1 − Σ listed p); each listed
    value may be off by the server's report error (:meth:`~.capabilities.Capabilities.report_error`:
    rounding, jitter; in the mass at least :data:`REPORT_PRECISION_NATS`), so the bound takes
    the values at the end of their error that makes it loosest. An entry that may be the target (an
    ambiguous name) raises the bound to that entry's value.
    """
    listed = np.asarray([e.logprob for e in answer.top])
    error = caps.report_error(listed)
    rest = 1.0 - float(np.sum(np.exp(listed - np.maximum(error, REPORT_PRECISION_NATS))))
    lowest = int(np.argmin(listed))
    unlisted = float(listed[lowest] + error[lowest])
    if rest > 0:
        unlisted = min(unlisted, math.log(rest))
    ambiguous = answer.ambiguous(target)
    if ambiguous is None:
        return unlisted
    return max(unlisted, ambiguous + float(caps.report_error(np.asarray(ambiguous))))


def sampled_is_target(
    answer: NextToken, target: int, unbiased: NextToken | None, pre_bias: bool, tolerance: float
) -> bool | None:
    """Whether the greedy token of a request that biased only ``target`` upward is the target.

    The greedy token is then the unbiased argmax or the target. ``None`` when the answer cannot
    tell (an ambiguous name and no way to rule out the argmax).

    Args:
        answer: the biased answer.
        target: the biased token id.
        unbiased: the unbiased answer at the same prefix (its sampled token is the argmax), or None.
        pre_bias: reported log-probs ignore the bias (then the argmax keeps its unbiased value).
        tolerance: nats by which two reports of one value may differ (the probe measures it).
    """
    ids = answer.sampled
    if not may_be(ids, target):
        return False
    if surely(ids, target):
        return True
    if unbiased is None:
        return None
    argmax = unbiased.sampled
    if surely(argmax, target):
        return True
    if argmax is not None and ids is not None and not argmax & ids:
        return True
    if argmax is not None and len(argmax) == 1:
        listed = answer.find(next(iter(argmax)))
        if listed is not None and listed < answer.sampled_logprob - tolerance:
            return True  # the argmax is listed below the sampled token: the sampled one is the target
    if pre_bias and abs(answer.sampled_logprob - unbiased.sampled_logprob) > tolerance:
        return True  # not the argmax's unbiased value
    return None


AFTER_TOKENS = 8  # the text's tokens after its target a position carries (a spelled read-out's span, :mod:`.spelling`)


@dataclass
class Position:
    """One target token after one prefix (token ids), and the unbiased answer there once asked
    (strategies share it, so it is requested once).

    Attributes:
        prefix: the ids before the target (within its window).
        target: the target id.
        unbiased: the unbiased answer after ``prefix`` once asked.
        after: the window's next ids after the target (at most :data:`AFTER_TOKENS`): where the
            target ends inside a character, the ids that complete it.
        room: the most tokens a request after ``prefix`` may generate within the model's context
            (``None``: no limit known).
    """

    prefix: list[int]
    target: int
    unbiased: NextToken | None = None
    after: tuple[int, ...] = ()
    room: int | None = None

    @classmethod
    def at(cls, seq: Sequence[int], start: int, i: int, end: int, context: int | None,
           unbiased: NextToken | None = None) -> Position:
        """Target ``seq[i]`` after the window ``seq[start:i]``, carrying ``seq[i + 1 : end]``'s
        first :data:`AFTER_TOKENS` ids, in a model context of ``context`` tokens (``None``: no limit)."""
        after = tuple(seq[i + 1 : min(end, i + 1 + AFTER_TOKENS)])
        return cls(list(seq[start:i]), seq[i], unbiased, after, None if context is None else context - (i - start))


class Unidentified(Exception):
    """A flip could not be told apart from the argmax (see :func:`sampled_is_target`)."""


class Strategy(ABC):
    """One way to recover lp of a position's target.

    :meth:`resolve` reads a target listed in the unbiased top-n from the list (exact, strategy
    ``topn``) and measures the others with :meth:`measure`, the strategy's own mechanism (the
    capability probe runs :meth:`measure` on listed targets, whose value it knows).

    Args:
        endpoint: where requests go.
        caps: the probe's record (top-n, tolerance, whether reports are pre-bias).
        config: the tracker's settings (ε, bias cap, re-checks).
    """

    name: ClassVar[str]

    def __init__(self, endpoint: Endpoint, caps: Capabilities, config: TrackerConfig):
        self.endpoint = endpoint
        self.caps = caps
        self.config = config

    async def resolve(self, position: Position) -> Estimate:
        """lp of ``position.target`` (nats) with bounds: the listed value when the unbiased top-n
        lists the target, else :meth:`measure`.

        Raises:
            BlackboxMIAError: a request failed (see the client).
        """
        return await self.listed(position) or await self.measure(position)

    async def listed(self, position: Position) -> Estimate | None:
        """The target's value read from the unbiased top-n (exact, ``topn``); None when it is not
        listed."""
        value = (await self.unbiased(position)).find(position.target)
        return None if value is None else Estimate.exact(value, "topn")

    async def listed_or_bound(self, position: Position, strategy: str = "topn-bound") -> Estimate:
        """The target's value read from the unbiased top-n (``topn``), else the top-n upper bound
        under ``strategy``'s name."""
        listed = await self.listed(position)
        if listed is not None:
            return listed
        return Estimate.at_most(topn_upper_bound(await self.unbiased(position), position.target, self.caps), strategy)

    @abstractmethod
    async def measure(self, position: Position) -> Estimate:
        """lp of ``position.target`` (nats) with bounds by this strategy's own mechanism, even
        when the target is listed.

        Raises:
            BlackboxMIAError: a request failed (see the client).
        """

    async def unbiased(self, position: Position) -> NextToken:
        """The unbiased top-n answer at the position (asked once, then shared)."""
        if position.unbiased is None:
            position.unbiased = await self.endpoint.next_token(position.prefix, self.caps.top_n)
        return position.unbiased

    async def biased(self, position: Position, bias: float) -> NextToken:
        """The answer with ``bias`` nats on the target."""
        return await self.endpoint.next_token(position.prefix, self.caps.top_n, {position.target: bias})

    def is_target(self, answer: NextToken, target: int, unbiased: NextToken | None) -> bool | None:
        """:func:`sampled_is_target` with this endpoint's report semantics and tolerance."""
        return sampled_is_target(answer, target, unbiased, self.caps.reported == "pre-bias", self.caps.tolerance)


class TopN(Strategy):
    """The target's listed value (exact), else the top-n upper bound (``topn-bound``)."""

    name = "topn"

    async def measure(self, position: Position) -> Estimate:
        return await self.listed_or_bound(position)


class Forced(Strategy):
    """Bias the target by the cap; read the pre-bias log-prob reported for the sampled token.

    One request whether or not the target is listed (:meth:`resolve` is :meth:`measure`)."""

    name = "forced"

    async def resolve(self, position: Position) -> Estimate:
        return await self.measure(position)

    def rank(self, answer: NextToken, target: int) -> int:
        """How many listed entries of a forced answer (pre-bias: the unbiased top-n's values)
        lie above the target's value by more than the tolerance."""
        value = answer.sampled_logprob
        return sum(1 for e in answer.top if not may_be(e.ids, target) and e.logprob > value + self.caps.tolerance)

    async def measure(self, position: Position) -> Estimate:
        target = position.target
        biased = await self.biased(position, self.config.max_bias)
        hit = self.is_target(biased, target, None)
        unbiased = None
        if hit is not True:
            unbiased = await self.unbiased(position)
            hit = self.is_target(biased, target, unbiased) if hit is None else hit
        if hit:
            return Estimate.exact(biased.sampled_logprob, "forced", self.rank(biased, target))
        listed = unbiased.find(target)
        if listed is not None:
            return Estimate.exact(listed, "topn")
        upper = topn_upper_bound(unbiased, target, self.caps)
        if hit is None:
            return Estimate.at_most(upper, "ambiguous")
        # not sampled even at the cap: the gap to the argmax exceeds the bias range
        return Estimate.at_most(min(upper, unbiased.top_logprob - self.config.max_bias), "forced>cap")


class Prompt:
    """Every prompt token's log-prob from one request (exact): vLLM's ``prompt_logprobs`` field
    where the probe found it, else echo + log-probs.

    Args:
        endpoint: where requests go.
        caps: the probe's record (top-n for the generated position after the prompt; which
            form works).
    """

    name = "prompt"

    def __init__(self, endpoint: Endpoint, caps: Capabilities):
        self.endpoint = endpoint
        self.top_n = caps.top_n
        self.form = PROMPT_LOGPROBS if caps.prompt_logprobs else ECHO

    async def resolve(self, ids: Sequence[int], bias: dict[int, float] | None = None,
                      listed: bool = True) -> tuple[list[Estimate], NextToken]:
        """``len(ids) - 1`` estimates, for targets ``ids[1:]`` (the first token has no
        conditional), and the answer for the position after ``ids`` (under ``bias``: nats by
        token id, on that position only).

        ``listed`` False: that answer holds the sampled token alone (``logprobs: 0``), for a
        caller that reads nothing else there; the server then decodes and sends no top-n. Echo
        keeps the probe's top-n: its prompt entries come in the same ``logprobs`` field.

        Raises:
            BlackboxMIAError: a request failed, or the answer does not match the prompt.
        """
        top_n = self.top_n if listed or self.form == ECHO else 0
        values, after = await self.endpoint.prompt_logprobs(ids, top_n, self.form, bias)
        return [Estimate.exact(v, self.name) for v in values[1:]], after
