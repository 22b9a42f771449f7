"""Greedy-flip bisection at one position: the smallest bias b* that makes the target the
greedy token gives lp_i = lp_top − b* (the tracker's ``bisect``; formulas in :mod:`.tracker`).

The search's states (:class:`Gallop`, then :class:`Bracket`) ask one question at a time, so the
per-position :class:`Bisect` and the text-level loop (:mod:`.bisection`, chained requests) run
the same rules; :class:`FlipChecks` picks the brackets re-checked with fresh requests.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..capabilities import Capabilities
from ..endpoint import Endpoint, NextToken, surely
from .strategies import Estimate, Position, Strategy, Unidentified, topn_upper_bound

if TYPE_CHECKING:
    from .config import TrackerConfig

BIAS_ROUNDING_SLACK = 2e-6  # nats: biases are rounded to 1e-6, so a bracket halved to ε may be this much wider
CHECK_LEADING = 1  # bisection re-checks every bracket whose prefix is at most this many tokens (a text's first)


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
        upper = unbiased.top_logprob if listed is not None else topn_upper_bound(unbiased, position.target, self.caps)
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
