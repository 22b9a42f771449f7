"""Bisection of a whole text at once: its positions' questions asked round after round.

Every position's search (:class:`~.flips.Gallop`, then :class:`~.flips.Bracket`)
asks one question per round; a round's questions go as chains of consecutive positions where
the probe verified chained requests (:mod:`.chains`: several answers from one request), else
one request each. Phases: the gallops until every bracket is open; then halvings, of the
brackets :func:`~.refine.to_refine` picks (to the scores' precision, or every value to ε),
until none is picked; then the re-checks of the final brackets (:meth:`~.flips.Bisect.close`).

Each position asks exactly the questions it would ask alone (its biases depend only on its own
answers), so chains change how many requests carry them, never the values or their bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from .chains import Disturbances, Link, plan, read
from ..endpoint import surely
from .flips import Bisect, Bracket, Gallop
from .refine import to_refine
from .strategies import Estimate, Position, Unidentified, topn_upper_bound

# chains presume an unlisted token this far below the top-n bound (chosen on 8 GSM8K train
# questions through the dup-16 canary, pairs found to disturb each other kept apart: margins
# 2 / 3 / 4 / 6 / 8 / 12 / 100 nats gave 5.87 / 5.67 / 5.53 / 5.40 / 5.43 / 5.47 / 5.47
# requests/token, 6.07 without chains)
UNLISTED_MARGIN_NATS = 6.0
Search = Estimate | Gallop | Bracket  # a position's state: final, galloping, or bracketed


class TextBisection:
    """Bisects the positions of one text together.

    Args:
        bisect: the tracker's :class:`~.flips.Bisect` (endpoint, record, configuration,
            re-check policy).
        chain_tokens: the most positions one request covers (1: no chains).

    Attributes:
        chained_answers: answers read at a chain's later positions so far (each a request saved).
    """

    def __init__(self, bisect: Bisect, chain_tokens: int):
        self.bisect = bisect
        self.chain_tokens = chain_tokens
        self.chained_answers = 0

    async def run(self, positions: Sequence[Position], follows: Sequence[bool], room: Sequence[int],
                  found: list[Search]) -> list[Estimate]:
        """Every position's estimate.

        Args:
            positions: the text's positions (their unbiased answers asked).
            follows: shape (n,): whether position i + 1 is position i's prefix plus its target.
            room: shape (n,): the most tokens a request from position i may generate (≥ 1).
            found: each position's start (:meth:`~.flips.Bisect.start`), updated in place.

        Raises:
            BlackboxMIAError: a request failed (see the client).
        """
        config = self.bisect.config
        room = [min(self.chain_tokens, r) for r in room]
        learned = Disturbances()
        while asks := {i: s.ask for i, s in enumerate(found) if isinstance(s, Gallop)}:
            await self._round(positions, follows, room, found, asks, learned)
        while True:
            chosen = to_refine(
                np.array([s.lower for s in found]),
                np.array([s.upper for s in found]),
                np.array([isinstance(s, Bracket) for s in found]),
                config.refine_for,
                config.epsilon,
            )
            if not len(chosen):
                break
            await self._round(positions, follows, room, found, {int(i): found[i].ask for i in chosen}, learned)
        opened = [i for i, s in enumerate(found) if isinstance(s, Bracket)]
        for i, estimate in zip(opened, await asyncio.gather(*(self.bisect.close(found[i]) for i in opened))):
            found[i] = estimate
        return found  # type: ignore[return-value]

    async def _round(self, positions, follows, room, found: list[Search], asks: dict[int, float],
                     learned: Disturbances) -> None:
        """Ask ``asks`` (position → bias) in chains and apply the answers to ``found``."""
        passes = {i: b for i, s in enumerate(found) if (b := self._flipping_bias(positions[i], s)) is not None}
        targets = [p.target for p in positions]
        chains = plan(targets, follows, room, asks, passes, learned.solo,
                      lambda i, token, bias: learned.allows(i, token) and self._safe(positions[i], token, bias))
        await asyncio.gather(*(self._ask(positions, found, chain, learned) for chain in chains))

    async def _ask(self, positions, found: list[Search], chain: list[Link], learned: Disturbances) -> None:
        first = chain[0].index
        if len(chain) == 1:  # alone: the single-bias rules, which can tell more names apart
            try:
                flips = await self.bisect.flips(positions[first], chain[0].bias, found[first].unbiased)
            except Unidentified:
                found[first] = Estimate.at_most(found[first].upper, "ambiguous")
                return
            answers = [(first, flips)]
        else:
            bias = {link.target: link.bias for link in chain if link.bias > 0}
            steps = await self.bisect.endpoint.next_tokens(positions[first].prefix, len(chain),
                                                            self.bisect.caps.top_n, bias)
            answers, contradicted = read(chain, steps)
            if contradicted:
                self.bisect.checks.saw_unreproducible()
            learned.learn(chain, steps, answers)
            self.chained_answers += sum(i != first for i, _ in answers)
        for i, flips in answers:
            outcome = found[i].answer(flips)
            if outcome is not None:
                found[i] = outcome

    def _safe(self, position: Position, token: int, bias: float) -> bool:
        """Whether ``token`` biased by ``bias`` nats is presumed to stay below the argmax at
        ``position``: its listed value, else the top-n bound less :data:`UNLISTED_MARGIN_NATS`,
        plus the bias is below the argmax's value. A planning presumption only: a chain it gets
        wrong answers less (:func:`~.chains.read` never takes a disturbed step for an answer), and
        the pair is kept apart from then on (:class:`~.chains.Disturbances`)."""
        answer = position.unbiased
        if answer is None:
            return False
        ceiling = answer.find(token)
        if ceiling is None:
            ceiling = topn_upper_bound(answer, token, self.bisect.caps) - UNLISTED_MARGIN_NATS
        return bias <= 0 or ceiling + bias < answer.top_logprob

    def _flipping_bias(self, position: Position, search: Search) -> float | None:
        """A bias (nats) known to flip the position's target, ε above the flip (0 for an argmax
        target), or None: a bracket's upper end, or the gap to the argmax of an exact value."""
        eps = self.bisect.config.epsilon
        if isinstance(search, Bracket):
            return search.hi + eps
        if isinstance(search, Estimate) and search.lower == search.upper and position.unbiased is not None:
            if surely(position.unbiased.sampled, position.target):
                return 0.0
            return max(0.0, position.unbiased.top_logprob - search.value) + eps
        return None
