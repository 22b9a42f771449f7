"""PAC, Polarized Augment Calibration (Ye et al. 2024, "Data contamination calibration for black-box
LLMs", §3.2-3.3, eqs. 3-5)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..text.segment import DEFAULT_SEGMENTER, Segmenter, get_segmenter
from ..types import TokenLogprobs
from .base import PERCENT, Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues, mean_of


def swap_neighbours(
    text: str, n: int, swap_frac: float, seed: int, segmenter: str | Segmenter = DEFAULT_SEGMENTER
) -> list[str]:
    """``n`` neighbours of ``text``, each with m = max(1, ⌊swap_frac·W⌋) random swaps of two words.

    Words are the word pieces of ``segmenter`` (a :class:`~blackbox_mia.text.segment.Segmenter`
    or its registry name; W words; by default the whitespace-separated pieces, ``japanese`` for
    MeCab's words, ``auto`` to choose per text, see :mod:`blackbox_mia.text.segment`); the
    pieces between them (whitespace) are kept in place, so every neighbour holds the same
    multiset of words. The random stream depends only on ``seed`` and the text, so neighbours
    are reproducible across runs and processes. A text with fewer than two words has no swap:
    its neighbours equal the text.

    Raises:
        BlackboxMIAError: no segmenter is named ``segmenter``; the ``japanese`` segmenter
            without its extra ``ja``.
    """
    if isinstance(segmenter, str):
        segmenter = get_segmenter(segmenter)
    segments = segmenter.segment(text)
    word_slots = list(segments.words)
    digest = hashlib.sha256(f"{seed}\0{text}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    m = max(1, int(np.floor(swap_frac * len(word_slots))))
    neighbours = []
    for _ in range(n):
        words = list(segments.pieces)
        if len(word_slots) >= 2:
            for _ in range(m):
                a, b = rng.sample(word_slots, 2)
                words[a], words[b] = words[b], words[a]
        neighbours.append("".join(words))
    return neighbours


@register_scorer
@dataclass(frozen=True)
class PAC(Scorer):
    """score = mean_j PD(σ_j(z)) − PD(z), in nats; higher = member.

    The official code computes AUC on −(PD(z) − mean PD(σ(z))): members have the lower raw
    value, hence this sign. Neighbours σ_j(z) come from :func:`swap_neighbours` and are scored
    by the same backend as the text.

    Args:
        k1: percent of largest log-probs in PD (default 5).
        k2: percent of smallest log-probs in PD (default 30).
        n_neighbours: N, number of augmented copies (default 5).
        swap_frac: swaps per neighbour as a fraction of the word count W (default 0.3).
        seed: seed of the word swaps.
        segmenter: registry name of the segmenter whose words are swapped (default
            ``whitespace``; ``japanese`` or ``auto`` for Japanese text: spec
            ``pac:segmenter=japanese``).

    Raises:
        BlackboxMIAError: no segmenter is named ``segmenter`` (when the scorer is built).
    """

    name = "pac"
    ranges = {"k1": PERCENT, "k2": PERCENT, "n_neighbours": {"at_least": 1}, "swap_frac": {"above": 0.0}}
    k1: float = 5.0
    k2: float = 30.0
    n_neighbours: int = 5
    swap_frac: float = 0.3
    seed: int = 0
    segmenter: str = DEFAULT_SEGMENTER

    def __post_init__(self) -> None:
        get_segmenter(self.segmenter)  # an unknown name fails here, when the spec is parsed (loads nothing)

    @cached_property
    def _segmenter(self) -> Segmenter:
        """The one segmenter instance of this scorer (MeCab's tagger is loaded once, on first use)."""
        return get_segmenter(self.segmenter)

    def needs(self, text: str) -> list[Need]:
        neighbours = swap_neighbours(text, self.n_neighbours, self.swap_frac, self.seed, self._segmenter)
        return [Need(t) for t in neighbours]

    def _pd(self, lp: TokenLogprobs) -> Bounded:
        """PD of one text with its interval (the two k% means bounded apart)."""
        values = BoundedValues.of(lp)
        return values.largest(self.k1) - values.smallest(self.k2)

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        return mean_of([self._pd(a) for a in aux]) - self._pd(lp)
