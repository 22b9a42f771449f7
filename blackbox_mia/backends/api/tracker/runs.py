"""Run reading: a text's own log-probs from the server's greedy continuation of its prefix.

A request with ``max_tokens = K``, temperature 0 and no bias returns the top-n at every generated
position. While the generated tokens equal the text's, those positions ARE the text's positions:
the answer at generated step k is the conditional after x_<j+k, so every target up to the first
mismatch is read exactly (it is the sampled token, hence listed), and the mismatching target too
when it is listed there. One request then covers m + 1 positions (m matching tokens). The capability
probe enables this only after a run request reproduced its greedy path's per-prefix answers
(``Capabilities.run_reading``).

The switch (per window, :class:`Odds`): a run request costs one request for m + 1 positions,
plus one per-position request (forced read-out, or whatever ``auto`` does) when the mismatching
target is not listed. With q the chance that a target is the argmax and u the chance that a
non-argmax target is not listed, a run covers 1/(1 − q) positions on average for 1 + u requests,
per-position read-out one position per request: so the window's next request is a run while
(1 + u)·(1 − q) < 1, q and u counted from what the window's reads so far showed (each run's
matches and mismatch, each forced read-out's rank among the listed values), the counts of
earlier targets fading by :data:`MEMORY` per target (a text that turns memorized is followed
within a few targets), Laplace's rule from one pseudo-count of each outcome (so a window
starts with a run). Else :data:`CHUNK` positions
are read at once, and the odds looked at again. Run lengths start at :data:`RUN_FIRST_TOKENS` and
double after a run that matched throughout (up to :data:`RUN_MAX_TOKENS`). The rule and the
constants were chosen by replaying policies on white-box answers of the dup-16 GSM8K canary,
members and not (``studies/run_policy.py``; figures: records/measured-settings.md).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..endpoint import Endpoint, surely
from .strategies import Estimate, Position

RUN_FIRST_TOKENS = 8  # max_tokens of a window's first run request; doubles after a run that matched throughout
RUN_MAX_TOKENS = 64  # the most tokens one run request generates
ARGMAX_LOGPROB = math.log(0.5)  # an exact log-prob above this is the argmax's (nats)
UNBIASED_FIRST_TOKENS = 4  # the same for the runs that read bisection's unbiased answers (read_unbiased)
CHUNK = 2  # per-position read-outs of one window asked at once between two looks at the odds
PSEUDO_COUNT = 1.0  # Laplace's rule: each outcome's count before a window's first read
MEMORY = 0.9  # each target read scales a window's earlier counts by this: a text that turns memorized is followed within a few targets
# positions of a text whose unbiased answers one chain of run requests covers, one request after
# another (:func:`read_unbiased`; the segments in parallel): longer segments save few requests for
# many more rounds of requests (figures: records/measured-settings.md)
RUN_SEGMENT = 16


class RunReader:
    """Reads the targets of one window by runs where they pay, per position elsewhere.

    Args:
        endpoint: where requests go.
        top_n: alternatives per generated position (the probe's top-n).
        one: resolves one position (prefix, target, its unbiased answer when known) per position:
            the tracker's ``auto`` (forced read-out where the probe allows it), a prefix that
            cannot be sent as its tokens an ``unsendable`` bound.
        context: the model's context in tokens (``None``: no limit known), for the positions' room.
    """

    name = "run"

    def __init__(self, endpoint: Endpoint, top_n: int, one: Callable[[Position], Awaitable[Estimate]],
                 context: int | None):
        self.endpoint = endpoint
        self.top_n = top_n
        self.one = one
        self.context = context

    async def read(self, seq: list[int], start: int, first: int, end: int) -> list[Estimate]:
        """Estimates of targets ``seq[first:end]``, each after its prefix ``seq[start:j]``.

        Raises:
            BlackboxMIAError: a request failed (see the client).
        """
        found: list[Estimate] = []
        j, k, odds = first, RUN_FIRST_TOKENS, Odds()
        while j < end:
            if odds.run_pays():
                estimates, matched, lost = await self._run(seq, start, j, end, min(k, end - j))
                odds.ran(matched, len(estimates) > matched, lost)
                k = next_run_tokens(k, matched == len(estimates))
            else:
                chunk = range(j, min(end, j + CHUNK))
                estimates = await asyncio.gather(*(self.one(Position.at(seq, start, i, end, self.context)) for i in chunk))
                for estimate in estimates:
                    odds.read(estimate, self.top_n)
            found += estimates
            j += len(estimates)
        return found

    async def _run(self, seq: list[int], start: int, j: int, end: int, k: int) -> tuple[list[Estimate], int, bool]:
        """One run request at position ``j`` (``k`` tokens, window end ``end``): the estimates it gives (from ``j`` on,
        at least one), how many generated tokens matched the text, and whether the mismatching
        target needed a request of its own (not listed)."""
        if not self.endpoint.sendable(seq[start:j]):
            return [await self.one(Position.at(seq, start, j, end, self.context))], 0, True
        steps = await self.endpoint.next_tokens(seq[start:j], k, self.top_n)
        if not steps:  # the model ended the text at once (an end-of-text token the server does not list)
            return [await self.one(Position.at(seq, start, j, end, self.context))], 0, True
        out: list[Estimate] = []
        for step in steps:
            i = j + len(out)
            listed = step.find(seq[i])
            if listed is None:  # not listed at the first mismatch: read it on its own
                out.append(await self.one(Position.at(seq, start, i, end, self.context, unbiased=step)))
                return out, len(out) - 1, True
            out.append(Estimate.exact(listed, self.name))
            if not surely(step.sampled, seq[i]):  # the continuation left the text here
                return out, len(out) - 1, False
        return out, len(out), False


def next_run_tokens(k: int, throughout: bool, first: int = RUN_FIRST_TOKENS) -> int:
    """A text's next run length (tokens) after a run of ``k``: doubled, up to
    :data:`RUN_MAX_TOKENS`, when every token it generated was the text's; else ``first``."""
    return min(RUN_MAX_TOKENS, 2 * k) if throughout else first


@dataclass
class Odds:
    """What one window's reads so far say of its next target: counts of targets that were the
    argmax and that were not, and among the latter of those not listed in the top-n and those
    listed, each target read scaling the earlier counts by :data:`MEMORY` (recent targets weigh
    most); each count plus :data:`PSEUDO_COUNT` in :meth:`run_pays`."""

    argmax: float = 0.0
    other: float = 0.0
    unlisted: float = 0.0
    listed: float = 0.0

    def run_pays(self) -> bool:
        """Whether a run request is expected to cost fewer requests per position than per-position
        read-out: (1 + u)·(1 − q) < 1 (module docstring)."""
        q = (self.argmax + PSEUDO_COUNT) / (self.argmax + self.other + 2 * PSEUDO_COUNT)
        u = (self.unlisted + PSEUDO_COUNT) / (self.unlisted + self.listed + 2 * PSEUDO_COUNT)
        return (1 + u) * (1 - q) < 1

    def forget(self, targets: int) -> None:
        """Scale the counts by :data:`MEMORY` once per target read."""
        scale = MEMORY**targets
        self.argmax, self.other = self.argmax * scale, self.other * scale
        self.unlisted, self.listed = self.unlisted * scale, self.listed * scale

    def ran(self, matched: int, mismatched: bool, lost: bool) -> None:
        """A run's outcome: ``matched`` argmax targets, then a mismatch (``mismatched``) that was
        not listed (``lost``) or was."""
        self.forget(matched + mismatched)
        self.argmax += matched
        if mismatched:
            self.other += 1
            self.unlisted, self.listed = self.unlisted + lost, self.listed + (not lost)

    def read(self, estimate: Estimate, top_n: int) -> None:
        """A per-position read-out: its rank among the listed values where the answer showed it
        (:attr:`~.strategies.Estimate.rank`), else an exact value above log 1/2 proves the argmax
        and any other value counts as not the argmax."""
        if estimate.rank is None:
            argmax = estimate.lower == estimate.upper and estimate.value > ARGMAX_LOGPROB
            self.forget(1)
            self.argmax, self.other = self.argmax + argmax, self.other + (not argmax)
        elif estimate.rank == 0:
            self.ran(1, False, False)
        else:
            self.ran(0, True, estimate.rank >= top_n)


async def read_unbiased(endpoint: Endpoint, top_n: int, positions: Sequence[Position], follows: Sequence[bool],
                        room: Sequence[int]) -> int:
    """Set the unbiased answer (``Position.unbiased``) of a text's positions by run requests.

    A run request at position j (``max_tokens = k``, no bias) answers j, and j + 1 while the token
    generated at j is j's target, and so on: one request per target that is not the argmax,
    instead of one per position. Runs go one after another within segments of at most
    :data:`RUN_SEGMENT` consecutive positions (``follows``), the segments at once; ``k`` starts at
    :data:`UNBIASED_FIRST_TOKENS` and doubles after a run that matched throughout (up to
    :data:`RUN_MAX_TOKENS`, the segment's end and ``room``). Only for endpoints whose run
    reading the probe verified (``Capabilities.run_reading``). Positions that already have an
    answer, and those whose prefix is not sendable, are skipped (asked, or bounded, on their own).

    Args:
        endpoint: where requests go.
        top_n: alternatives per generated position.
        positions: shape (n,): the text's positions, in order.
        follows: shape (n,): whether position i + 1 is position i's prefix plus its target.
        room: shape (n,): the most tokens a request from position i may generate (≥ 1).

    Returns:
        The run requests sent.

    Raises:
        BlackboxMIAError: a request failed (see the client).
    """
    segments, begin = [], 0
    for i in range(len(positions)):
        if not follows[i] or i + 1 - begin == RUN_SEGMENT:
            segments.append((begin, i + 1))
            begin = i + 1

    async def segment(j: int, end: int) -> int:
        sent, k = 0, UNBIASED_FIRST_TOKENS
        while j < end:
            position = positions[j]
            if position.unbiased is not None or not endpoint.sendable(position.prefix):
                j += 1
                continue
            want = min(k, end - j, room[j])
            steps = await endpoint.next_tokens(position.prefix, want, top_n)
            sent += 1
            matched, throughout = 0, True  # positions answered; every generated token the text's
            for step, later in zip(steps, positions[j:end]):
                later.unbiased = step
                matched += 1
                if not surely(step.sampled, later.target):  # the run left the text here
                    throughout = False
                    break
            k = next_run_tokens(k, throughout, UNBIASED_FIRST_TOKENS)
            j += max(1, matched)
        return sent

    return sum(await asyncio.gather(*(segment(*s) for s in segments)))
