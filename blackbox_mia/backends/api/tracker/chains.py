"""Chained flip questions: the bisection questions of consecutive positions in one request.

At temperature 0 a request with ``max_tokens = K`` generates greedily, and ``logit_bias`` acts on
every generated token. Bias the targets x_i, x_i+1, ... of consecutive positions of a text (each
by its own question's bias) and send the prefix x_<i: while the generated tokens are the text's
targets, generated step d IS position i + d with the biases of the chain, so each step answers
its position's question, until the first step that is not its target (run reading,
:mod:`.runs`, with bisection's biases). A chain's later questions are answered only when
the earlier ones flipped; positions whose value is already known to flip at some bias (a
bisection bracket's upper end, an exact value) pass through it at no cost but a generated token.

Reading a step d with target t, sampled candidates S, the chain's biased ids B (every bias ≥ 0):

* S = {t}: t + b_t beat every other logit, the argmax's among them (raised or not): a flip.
* S ∩ (B ∪ {t}) = ∅: an unbiased token other than t won; it cannot beat the unbiased argmax,
  so the argmax's logit ≥ t + b_t: no flip (the chain leaves the text here).
* else (another biased target won, or the name is ambiguous): no answer; the chain ends.

The unbiased argmax of a step is never needed, so chains rest on no name beyond ``S``. A step
another of the chain's biased targets may have taken keeps that (position, target) pair out of
later chains (:class:`Disturbances`); a first step with no answer and nobody to blame sends its
question alone from then on. A pass
step that does not flip contradicts an earlier answer (flips did not reproduce): it is reported
so the tracker re-checks every bracket. The capability probe enables chains only after they
reproduced known values (``Capabilities.chained_flips``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..endpoint import NextToken, surely

@dataclass(frozen=True)
class Link:
    """One position of a chain: its index in the text's positions, its target id, the bias on
    it (nats; 0: none, an argmax target), and whether its answer is asked (else it passes)."""

    index: int
    target: int
    bias: float
    asks: bool


def plan(
    targets: Sequence[int],
    follows: Sequence[bool],
    room: Sequence[int],
    asks: Mapping[int, float],
    passes: Mapping[int, float],
    solo: set[int],
    safe: Callable[[int, int, float], bool],
) -> list[list[Link]]:
    """The chains of one round: every question in exactly one chain, in text order.

    A chain starts at the first question not yet placed and takes the next positions while each
    continues the one before (``follows``), has a target not yet in the chain, and is a question
    not yet placed (asked) or has a known flipping bias (passes), and no two of its links can
    disturb each other (``safe``); it ends with its last question, at most ``room`` of its
    first position long. A ``solo`` question goes alone (its answer is read with the
    single-bias rules).

    Args:
        targets: shape (n,): each position's target id.
        follows: shape (n,): whether position i + 1 is position i's prefix plus its target.
        room: shape (n,): the most tokens a request from position i may generate (≥ 1).
        asks: position → the bias (nats) its question asks about.
        passes: position → a bias (nats) known to flip it (0: its target is the argmax).
        solo: positions whose question must go alone.
        safe: ``safe(i, token, bias)``: whether ``token`` biased by ``bias`` nats surely stays
            below position i's argmax (so it cannot be generated there in place of its target).

    Returns:
        The chains, each a list of :class:`Link` starting with a question.
    """
    chains, placed = [], set()
    for i in sorted(asks):
        if i in placed:
            continue
        chain, ids, j = [Link(i, targets[i], asks[i], True)], {targets[i]}, i
        placed.add(i)
        while i not in solo and len(chain) < room[i] and follows[j]:
            j += 1
            if targets[j] in ids:
                break
            if j in asks and j not in placed and j not in solo:
                link = Link(j, targets[j], asks[j], True)
            elif j in passes:
                link = Link(j, targets[j], passes[j], False)
            else:
                break
            if not all(safe(k.index, link.target, link.bias) and safe(j, k.target, k.bias) for k in chain):
                break
            chain.append(link)
            placed.update([j] if link.asks else [])
            ids.add(targets[j])
        while not chain[-1].asks:
            chain.pop()
        chains.append(chain)
    return chains


def read(chain: Sequence[Link], steps: Sequence[NextToken]) -> tuple[list[tuple[int, bool]], bool]:
    """The answers a chained request gave (module docstring's rules).

    Args:
        chain: the request's links, in order.
        steps: the answer per generated token (possibly fewer than the links: an end of text).

    Returns:
        ``(answers, contradicted)``: ``(index, flips)`` of each question answered, in order, and
        whether a pass step did not flip (an earlier answer did not reproduce).
    """
    biased = frozenset(link.target for link in chain if link.bias > 0)
    answers = []
    for link, step in zip(chain, steps):
        if surely(step.sampled, link.target):
            flips = True
        elif step.sampled is not None and not step.sampled & (biased | {link.target}):
            flips = False
        else:
            break
        if link.asks:
            answers.append((link.index, flips))
        elif not flips:
            return answers, True
        if not flips:
            break
    return answers, False


@dataclass
class Disturbances:
    """What one text's chains learned about their steps being taken by another biased target.

    Attributes:
        pairs: ``(position index, token)``: that token, biased in a chain, took the position's
            step; the two are never chained together again (in :func:`plan`'s ``safe``).
        solo: positions whose question goes alone: a chain's first step gave no answer and no
            other biased target can be blamed (an unknown or ambiguous name).
    """

    pairs: set[tuple[int, int]] = field(default_factory=set)
    solo: set[int] = field(default_factory=set)

    def learn(self, chain: Sequence[Link], steps: Sequence[NextToken], answers: Sequence[tuple[int, bool]]) -> None:
        """Record what a chained request's steps (read into ``answers`` by :func:`read`) showed:
        at the first step that is not its target, the chain's other biased targets its name
        may be; when there are none and the first step gave no answer, the first position."""
        biased = frozenset(link.target for link in chain if link.bias > 0)
        for link, step in zip(chain, steps):
            if not surely(step.sampled, link.target):
                others = (step.sampled or frozenset()) & (biased - {link.target})
                self.pairs.update((link.index, token) for token in others)
                if not others and (not answers or answers[0][0] != chain[0].index):
                    self.solo.add(chain[0].index)
                return

    def allows(self, i: int, token: int) -> bool:
        """Whether ``token`` may be biased in a chain through position ``i``."""
        return (i, token) not in self.pairs
