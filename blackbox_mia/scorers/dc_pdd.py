"""DC-PDD (Zhang et al. 2024, "Pretraining Data Detection for Large Language Models: A
Divergence-based Calibration Method", EMNLP)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..types import BlackboxMIAError, TokenLogprobs
from .base import Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues

DEFAULT_CORPUS = "gsm8k:train"
"""The shipped reference corpus of the token frequencies: GSM8K train (MIT licence,
blackbox_mia/data/gsm8k/LICENSE)."""


@lru_cache(maxsize=8)
def corpus_texts(spec: str, n: int) -> tuple[str, ...]:
    """The first ``n`` texts of the dataset ``spec`` (a shipped name or a JSONL path).

    Raises:
        BlackboxMIAError: an unreadable dataset, or fewer than ``n`` items.
    """
    from ..datasets import load_shipped_or_jsonl

    items = load_shipped_or_jsonl(spec).items
    if len(items) < n:
        raise BlackboxMIAError(f"scorer 'dc_pdd': corpus {spec} holds {len(items)} texts, n_corpus={n} asks for more")
    return tuple(item.text for item in items[:n])


def token_frequencies(corpus: list[TokenLogprobs], vocab: int) -> tuple[np.ndarray, float]:
    """Laplace-smoothed token frequencies f(v) = (1 + c(v)) / (sum_v c(v) + V), shape (V,), and
    the frequency 1 / (sum_v c(v) + V) of a token the corpus never holds, where
    c(v) counts token id v in the tokenized corpus texts (Zhang et al. 2024; mimir's ``fre_dis``).

    Raises:
        BlackboxMIAError: a corpus token id at or beyond ``vocab``.

    ``vocab``: V; 0 takes the largest token id seen in ``corpus`` + 1 (a lower bound on the
    tokenizer's vocabulary, fixed for one corpus, so every text is scored with the same table).
    """
    ids = np.concatenate([lp.token_ids for lp in corpus])
    size = vocab or int(ids.max()) + 1
    if ids.max() >= size:
        raise BlackboxMIAError(f"scorer 'dc_pdd': token id {ids.max()} in the corpus, beyond vocab={vocab}")
    counts = np.bincount(ids, minlength=size).astype(np.float64)
    return (1.0 + counts) / (counts.sum() + size), 1.0 / (counts.sum() + size)


@register_scorer
@dataclass(frozen=True)
class DCPDD(Scorer):
    """score = (1 / |FOS(x)|) · sum over i in FOS(x) of min(p(x_i | x_<i) · log(1 / f(x_i)), a).

    Zhang et al. 2024 (the score beta; mimir's ``DC_PDDAttack``, whose ``-beta`` is this score: mimir
    ranks lower = member): p the target's token probability, f the token's frequency in a
    reference corpus (:func:`token_frequencies`), FOS(x) the first occurrence of each distinct
    token of x, a the clip (default 0.01). A token the target predicts far better than its
    corpus frequency explains raises the score (higher = member). Unitless.

    The corpus: the first ``n_corpus`` texts of ``corpus`` (default GSM8K train, shipped),
    tokenized by the target itself (they are scored as needed texts). ``vocab``: the target
    tokenizer's vocabulary size V of the smoothing, as mimir's ``len(tokenizer)``; 0 (the
    default, for targets whose V the scorer cannot see) takes the corpus's largest token id + 1,
    a lower bound on V: the same table for every text, so the scores rank alike, but log(1/f)
    is smaller than mimir's by up to log((N + V) / (N + V_corpus)) (N: corpus tokens). Give
    ``vocab`` for mimir's values. A token id at or beyond a given ``vocab`` raises
    :class:`BlackboxMIAError`.
    """

    name = "dc_pdd"
    a: float = 0.01
    corpus: str = DEFAULT_CORPUS
    n_corpus: int = 500
    vocab: int = 0
    ranges = {"a": {"above": 0.0}, "n_corpus": {"at_least": 1}, "vocab": {"at_least": 0}}

    def needs(self, text: str) -> list[Need]:
        return [Need(t) for t in corpus_texts(self.corpus, self.n_corpus)]

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        freq, unseen = token_frequencies(aux, self.vocab)
        _, first = np.unique(lp.token_ids, return_index=True)
        first = np.sort(first)
        ids = lp.token_ids[first]
        if len(ids) == 0:
            raise BlackboxMIAError("scorer 'dc_pdd': a text with no scored token")
        if self.vocab and ids.max() >= self.vocab:
            raise BlackboxMIAError(f"scorer 'dc_pdd': token id {ids.max()} beyond vocab={self.vocab}")
        weight = -np.log(np.where(ids < len(freq), freq[np.minimum(ids, len(freq) - 1)], unseen))  # log(1 / f) > 0
        values = BoundedValues.of(lp)
        fos = BoundedValues(values.value[first], values.lower[first], values.upper[first])
        return fos.map(lambda v: np.minimum(np.exp(v) * weight, self.a)).mean()
