"""The tracker's strategies: each recovers lp_i of one target after one prefix (or, ``prompt``,
of a whole window) through an :class:`~.endpoint.Endpoint`, with [lower, upper] bounds in nats.

The same objects run in two places: the tracker runs them on the user's texts, and the
capability probe runs them on positions whose value it knows, with the same ε, bias cap and
re-checks, and enables a strategy only when it reproduced those values. The formulas are in
the tracker's module docstring (and ``docs/design.md``).

Build a set with :func:`strategy_set`; every per-position strategy has
``async resolve(position) -> Estimate``.
"""

from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from .capabilities import Capabilities
from .endpoint import ECHO, PROMPT_LOGPROBS, Endpoint, NextToken, may_be, surely

if TYPE_CHECKING:
    from .tracker import TrackerConfig

REPORT_PRECISION_NATS = 1e-4  # servers round log-probs; the mass bound allows this much per entry
FALLBACKS = ("postbias", "bisect")  # what ``auto`` tries, in order, for a target not in the top-n
BIAS_ROUNDING_SLACK = 2e-6  # nats: biases are rounded to 1e-6, so a bracket halved to ε may be this much wider
CHECK_LEADING = 1  # bisection re-checks every bracket whose prefix is at most this many tokens (a text's first)


@dataclass
class Estimate:
    """lp_i with bounds (nats) and the strategy that produced it."""

    value: float
    lower: float
    upper: float
    strategy: str

    @classmethod
    def exact(cls, value: float, strategy: str) -> Estimate:
        return cls(value, value, value, strategy)

    @classmethod
    def at_most(cls, upper: float, strategy: str) -> Estimate:
        """Only an upper bound is known: the value is the bound, the lower end is -inf."""
        return cls(upper, -math.inf, upper, strategy)


def topn_upper_bound(answer: NextToken, target: int) -> float:
    """Upper bound (nats) on lp of ``target`` given an unbiased answer that does not list it for sure.

    An unlisted token lies below every listed one and below log(1 − Σ listed p) (with a margin
    of :data:`REPORT_PRECISION_NATS` per entry for rounded reports); an entry that may be the
    target (an ambiguous name) raises the bound to that entry's value.
    """
    listed = [e.logprob for e in answer.top]
    rest = 1.0 - float(np.sum(np.exp(np.asarray(listed) - REPORT_PRECISION_NATS)))
    unlisted = min(min(listed), math.log(rest)) if rest > 0 else min(listed)
    ambiguous = answer.ambiguous(target)
    return unlisted if ambiguous is None else max(unlisted, ambiguous)


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


@dataclass
class Position:
    """One target token after one prefix (token ids), and the unbiased answer there once asked
    (strategies share it, so it is requested once)."""

    prefix: list[int]
    target: int
    unbiased: NextToken | None = None


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
        listed = await self.listed(position)
        if listed is not None:
            return listed
        return Estimate.at_most(topn_upper_bound(await self.unbiased(position), position.target), "topn-bound")


class Forced(Strategy):
    """Bias the target by the cap; read the pre-bias log-prob reported for the sampled token.

    One request whether or not the target is listed (:meth:`resolve` is :meth:`measure`)."""

    name = "forced"

    async def resolve(self, position: Position) -> Estimate:
        return await self.measure(position)

    async def measure(self, position: Position) -> Estimate:
        target = position.target
        biased = await self.biased(position, self.config.max_bias)
        hit = self.is_target(biased, target, None)
        unbiased = None
        if hit is not True:
            unbiased = await self.unbiased(position)
            hit = self.is_target(biased, target, unbiased) if hit is None else hit
        if hit:
            return Estimate.exact(biased.sampled_logprob, "forced")
        listed = unbiased.find(target)
        if listed is not None:
            return Estimate.exact(listed, "topn")
        upper = topn_upper_bound(unbiased, target)
        if hit is None:
            return Estimate.at_most(upper, "ambiguous")
        # not sampled even at the cap: the gap to the argmax exceeds the bias range
        return Estimate.at_most(min(upper, unbiased.top_logprob - self.config.max_bias), "forced>cap")


class PostBias(Strategy):
    """lp_i = lp_r + (lp'_i − lp'_r) − b with a reference token r listed in both answers."""

    name = "postbias"

    async def measure(self, position: Position) -> Estimate:
        target, bias = position.target, self.config.max_bias
        unbiased = await self.unbiased(position)
        listed = unbiased.find(target)
        upper = listed if listed is not None else topn_upper_bound(unbiased, target)
        biased = await self.biased(position, bias)
        hit = self.is_target(biased, target, unbiased)
        lp_target = biased.find(target)
        if lp_target is None and hit:
            lp_target = biased.sampled_logprob
        if lp_target is not None:
            for entry in unbiased.top:
                if entry.ids is None or len(entry.ids) != 1 or target in entry.ids:
                    continue
                lp_ref_biased = biased.find(next(iter(entry.ids)))
                if lp_ref_biased is not None:
                    return Estimate.exact(entry.logprob + (lp_target - lp_ref_biased) - bias, "postbias")
            return Estimate.at_most(upper, "topn-bound")  # listed, but no reference to solve with
        if hit is False and biased.ambiguous(target) is None:
            # not even listed at the cap: lp_i + b < lp_top
            return Estimate.at_most(min(upper, unbiased.top_logprob - bias), "postbias>cap")
        return Estimate.at_most(upper, "ambiguous")


def first_step(epsilon: float) -> float:
    """The galloping search's first step (nats): the smallest ε·2^m (m ≥ 0) of at least 1 nat, so
    every bracket the search ends with halves down to exactly ε (1.28 nats at ε = 0.01)."""
    return epsilon * 2.0 ** max(0, math.ceil(math.log2(1.0 / epsilon) - 1e-12))


class FlipChecks:
    """Which bisection brackets :class:`Bisect` re-checks with fresh requests.

    Every bracket once flips were seen not to reproduce: by the probe
    (``caps.flips_reproducible`` false) or earlier in this run. Otherwise a sample that depends
    only on the position, so a rerun asks the same questions (and finds them in the cache): the
    text's first :data:`CHECK_LEADING` positions (after a window's first token) and one position
    in ``config.verify_every``, picked by a hash of (prefix, target).

    Args:
        always: re-check every bracket from the start.
        every: the sample's period (1: every bracket).
    """

    def __init__(self, always: bool, every: int):
        self.always = always
        self.every = every

    def wanted(self, position: Position) -> bool:
        """Whether to re-check this position's bracket."""
        if self.always or self.every == 1 or len(position.prefix) <= CHECK_LEADING:
            return True
        key = zlib.crc32(np.asarray(position.prefix + [position.target], dtype=np.int64).tobytes())
        return key % self.every == 0

    def saw_unreproducible(self) -> None:
        """A re-checked flip did not reproduce: re-check every later bracket."""
        self.always = True


@dataclass
class Bracket:
    """Where bisection stands at one position: the flipping bias b* lies in (lo, hi] (nats).

    ``top`` is the argmax's unbiased lp, so lp_i lies in [top − hi, top − lo); ``unbiased`` the
    answer the flips are judged against. A flip was seen at ``hi``. :class:`Bisect` and the
    text-level bisection (:mod:`.bisection`) open, narrow and close brackets.
    """

    position: Position
    unbiased: NextToken
    top: float
    lo: float
    hi: float

    @property
    def lower(self) -> float:
        """lp_i's lower bound, top − hi (nats)."""
        return self.top - self.hi

    @property
    def upper(self) -> float:
        """lp_i's upper bound, top − lo (nats)."""
        return self.top - self.lo

    @property
    def width(self) -> float:
        """hi − lo, nats: the width of lp_i's bounds."""
        return self.hi - self.lo

    @property
    def ask(self) -> float:
        """The next question's bias: the midpoint (nats, rounded to 1e-6)."""
        return round((self.lo + self.hi) / 2, 6)

    def answer(self, flips: bool) -> None:
        """Halve the bracket with the answer at :attr:`ask`."""
        if flips:
            self.hi = self.ask
        else:
            self.lo = self.ask

    def estimate(self, strategy: str = "bisect") -> Estimate:
        """lp_i as the bracket's midpoint, with its bounds."""
        return Estimate((self.lower + self.upper) / 2, self.lower, self.upper, strategy)


@dataclass
class Gallop:
    """The galloping search at one position: b* > ``lo`` is known, and the question is whether
    the bias :attr:`ask` (``lo + step``, at most ``cap``) flips the target.

    ``upper`` is the top-n bound on lp_i (nats) the search started from (:class:`Bisect`).
    """

    position: Position
    unbiased: NextToken
    top: float
    upper: float
    lo: float
    step: float
    cap: float

    @property
    def ask(self) -> float:
        """The next question's bias (nats, rounded to 1e-6)."""
        return min(self.cap, round(self.lo + self.step, 6))

    def answer(self, flips: bool) -> Bracket | Estimate | None:
        """The bracket (lo, ask] once :attr:`ask` flips; ``bisect>cap`` when the cap does not (lp_i
        ≤ top − cap, and ≤ ``upper``); else None, the search going on from ``lo = ask`` with a
        doubled step."""
        if flips:
            return Bracket(self.position, self.unbiased, self.top, self.lo, self.ask)
        if self.ask >= self.cap:
            return Estimate.at_most(min(self.upper, self.top - self.cap), "bisect>cap")
        self.lo, self.step = self.ask, self.step * 2
        return None


class Bisect(Strategy):
    """Smallest bias b* that flips the greedy token to the target; lp_i = lp_top − b*.

    The top-n bound gives b* > lo = lp_top − upper. A galloping search (steps of
    :func:`first_step`, doubling: 1.28, 2.56, 5.12, ... nats at ε = 0.01, up to the cap) from lo
    finds the upper end of the bracket (:meth:`open`), and bisection narrows it to ε
    (:meth:`narrow`). A listed target is read from the list instead (:meth:`Strategy.resolve`).
    Re-checks (``verify_flips``; which brackets: :class:`FlipChecks`) ask both ends again
    (:meth:`close`); a flip that does not reproduce widens the bounds (``bisect~``) instead of
    moving the value, and turns re-checks on for every later bracket.
    """

    name = "bisect"

    def __init__(self, endpoint: Endpoint, caps: Capabilities, config: TrackerConfig):
        super().__init__(endpoint, caps, config)
        self.checks = FlipChecks(not caps.flips_reproducible, config.verify_every)

    async def measure(self, position: Position) -> Estimate:
        opened = await self.open(position)
        if isinstance(opened, Estimate):
            return opened
        try:
            await self.narrow(opened, self.config.epsilon)
        except Unidentified:
            return Estimate.at_most(opened.upper, "ambiguous")
        return await self.close(opened)

    async def start(self, position: Position) -> Gallop | Estimate:
        """:meth:`resolve` up to its first question: the listed value, else :meth:`gallop`."""
        return await self.listed(position) or await self.gallop(position)

    async def open(self, position: Position) -> Bracket | Estimate:
        """The gallop (:meth:`gallop`'s questions, one request each): a bracket (lo, hi] of b*, as
        wide as the last step (a multiple of ε), or the estimate where there is nothing to
        bisect (see :meth:`gallop`, ``bisect>cap``, ``ambiguous``)."""
        search = await self.gallop(position)
        try:
            while isinstance(search, Gallop):
                search = search.answer(await self.flips(position, search.ask, search.unbiased)) or search
        except Unidentified:
            return Estimate.at_most(search.upper, "ambiguous")
        return search

    async def gallop(self, position: Position) -> Gallop | Estimate:
        """The galloping search's start at ``position`` from its unbiased answer: lo = the top-n
        bound's gap to the argmax (b* > lo), the first step :func:`first_step`; or the exact
        value when the target is already the argmax."""
        unbiased = await self.unbiased(position)
        listed = unbiased.find(position.target)
        # a listed target is bracketed by the argmax alone, not by its value
        upper = unbiased.top_logprob if listed is not None else topn_upper_bound(unbiased, position.target)
        top = unbiased.top_logprob
        if surely(unbiased.sampled, position.target):  # already the argmax: nothing to flip
            return Estimate.exact(top, "bisect")
        return Gallop(position, unbiased, top, upper, max(0.0, top - upper), first_step(self.config.epsilon),
                      self.config.max_bias)

    async def narrow(self, bracket: Bracket, width: float) -> None:
        """Halve ``bracket`` until it is at most ``width`` nats wide (one request a halving).

        Raises:
            Unidentified: a flip could not be identified (the bracket keeps its last ends).
        """
        while bracket.hi - bracket.lo > width + BIAS_ROUNDING_SLACK:
            bracket.answer(await self.flips(bracket.position, bracket.ask, bracket.unbiased))

    async def close(self, bracket: Bracket) -> Estimate:
        """The bracket's estimate, after re-checking its ends where :class:`FlipChecks` wants it
        (widened, ``bisect~``, when a flip does not reproduce)."""
        if not (self.config.verify_flips and self.checks.wanted(bracket.position)):
            return bracket.estimate()
        try:
            lo, hi, consistent = await self._verify(bracket)
        except Unidentified:
            return Estimate.at_most(bracket.upper, "ambiguous")
        if consistent:
            return bracket.estimate()
        self.checks.saw_unreproducible()
        bracket.lo, bracket.hi = lo, hi
        return bracket.estimate("bisect~")  # widened by a non-reproducible flip

    async def flips(self, position: Position, bias: float, unbiased: NextToken) -> bool:
        """Whether ``bias`` nats on the target alone make it the greedy token (one request).

        Raises:
            Unidentified: the sampled token cannot be told apart from the argmax.
        """
        hit = self.is_target(await self.biased(position, bias), position.target, unbiased)
        if hit is None:
            raise Unidentified
        return hit

    async def _verify(self, bracket: Bracket) -> tuple[float, float, bool]:
        """Re-ask both ends of the bracket (lo, hi] with fresh requests; widen it until they agree.

        Serving at temperature 0 is not perfectly deterministic: near b* a flip may not
        reproduce. Each end is asked again ``verify_repeats`` times (the bias nudged by 1e-6 per
        repeat, so the answer is not the cached one). If every answer agrees (flip at hi, none
        at lo) the bracket stands: ``(lo, hi, True)``. Otherwise a margin m = ε, 2ε, 4ε, ... is
        added on both sides until fresh answers at lo − m and hi + m agree, and
        ``(lo − m, hi + m, False)`` is returned: the bounds widen, the value is not trusted
        to one noisy answer.
        """
        eps, cap, repeats = self.config.epsilon, self.config.max_bias, self.config.verify_repeats
        position, unbiased, lo, hi = bracket.position, bracket.unbiased, bracket.lo, bracket.hi

        async def agree(at_lo: float, at_hi: float) -> bool:
            for j in range(1, repeats + 1):
                nudge = j * 1e-6
                if not await self.flips(position, min(cap, at_hi + nudge), unbiased):
                    return False
                if at_lo > 0 and await self.flips(position, at_lo - nudge, unbiased):
                    return False
            return True

        if await agree(lo, hi):
            return lo, hi, True
        margin = eps
        while True:
            at_lo, at_hi = max(0.0, round(lo - margin, 6)), min(cap, round(hi + margin, 6))
            if await agree(at_lo, at_hi) or (at_lo <= 0 and at_hi >= cap):
                return at_lo, at_hi, False
            margin *= 2


class Auto(Strategy):
    """The cheapest available: ``forced``; else the listed value (``topn``); else ``postbias``
    or ``bisect``; else the top-n bound.

    Args:
        parts: the per-position strategies by name (as :func:`strategy_set` builds them).
    """

    name = "auto"

    def __init__(self, endpoint: Endpoint, caps: Capabilities, config: TrackerConfig, parts: Mapping[str, Strategy]):
        super().__init__(endpoint, caps, config)
        self.parts = parts
        self.available = caps.strategies()

    async def resolve(self, position: Position) -> Estimate:
        if "forced" in self.available:
            return await self.parts["forced"].resolve(position)
        return await super().resolve(position)

    async def measure(self, position: Position) -> Estimate:
        fallback = next((s for s in FALLBACKS if s in self.available), "topn")
        return await self.parts[fallback].measure(position)


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

    async def resolve(self, ids: Sequence[int]) -> tuple[list[Estimate], NextToken]:
        """``len(ids) - 1`` estimates, for targets ``ids[1:]`` (the first token has no
        conditional), and the answer for the position after ``ids``.

        Raises:
            BlackboxMIAError: a request failed, or the answer does not match the prompt.
        """
        values, after = await self.endpoint.prompt_logprobs(ids, self.top_n, self.form)
        return [Estimate.exact(v, self.name) for v in values[1:]], after


def strategy_set(endpoint: Endpoint, caps: Capabilities, config: TrackerConfig) -> dict[str, Strategy]:
    """Every per-position strategy by name (``topn``, ``forced``, ``postbias``, ``bisect``, and
    ``auto`` over those ``caps`` allows), sharing one endpoint, record and configuration."""
    parts: dict[str, Strategy] = {cls.name: cls(endpoint, caps, config) for cls in (TopN, Forced, PostBias, Bisect)}
    return {**parts, "auto": Auto(endpoint, caps, config, parts)}
