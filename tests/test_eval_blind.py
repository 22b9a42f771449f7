"""Blind baseline: separates vocabulary-shifted splits, is at chance on shuffled labels."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.evaluation.blind import blind_baseline, distribution_shift_verdict
from blackbox_mia.types import BlackboxMIAError

SHARED = "the a of and to in is was for on with as by at from that this it be are".split()
OLD = "telegraph railway empire duke parish steam colonial monarch cathedral harbour".split()
NEW = "smartphone pandemic streaming blockchain podcast startup drone crypto influencer app".split()


def _texts(n: int, topical: list[str], rng: np.random.Generator) -> list[str]:
    out = []
    for _ in range(n):
        words = list(rng.choice(SHARED, 12)) + list(rng.choice(topical, 3))
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def shifted_split():
    rng = np.random.default_rng(0)
    texts = _texts(120, OLD, rng) + _texts(120, NEW, rng)
    labels = np.r_[np.ones(120, int), np.zeros(120, int)]
    return texts, labels


def test_vocabulary_shift_is_detected(shifted_split):
    texts, labels = shifted_split
    result = blind_baseline(texts, labels, folds=5, seed=0)
    assert result.auc > 0.9
    assert result.scores.shape == (240,)
    assert result.scores[labels == 1].mean() > result.scores[labels == 0].mean()  # higher = member
    assert (result.n_members, result.n_nonmembers) == (120, 120)
    again = blind_baseline(texts, labels, folds=5, seed=0)
    np.testing.assert_array_equal(result.scores, again.scores)  # seeded


def test_shuffled_labels_are_at_chance(shifted_split):
    """Same texts, labels permuted: the out-of-fold AUC has only noise to learn from."""
    texts, labels = shifted_split
    aucs = [
        blind_baseline(texts, np.random.default_rng(s).permutation(labels), seed=s).auc
        for s in range(5)
    ]
    assert all(abs(a - 0.5) < 0.15 for a in aucs)
    assert abs(np.mean(aucs) - 0.5) < 0.05


def test_too_few_items_per_class():
    texts = ["a b c", "d e f", "g h i", "j k l", "m n o", "p q r", "s t u"]
    with pytest.raises(BlackboxMIAError, match="at least 5 texts per class"):
        blind_baseline(texts, [1, 1, 1, 1, 0, 0, 0], folds=5)
    with pytest.raises(BlackboxMIAError):
        blind_baseline(texts, [1, 1, 1, 0, 0, 0], folds=2)  # length mismatch
    with pytest.raises(BlackboxMIAError):
        blind_baseline(texts, [1, 1, 1, 1, 0, 0, 0], folds=1)


def test_verdict():
    shifted = distribution_shift_verdict(0.99, 0.70)
    assert shifted["distribution_shift"] is True
    assert "not evidence of membership" in shifted["message"]
    assert distribution_shift_verdict(0.69, 0.70)["distribution_shift"] is True  # within margin
    partial = distribution_shift_verdict(0.65, 0.80)
    assert partial["distribution_shift"] is False and "Partial" in partial["message"]
    clean = distribution_shift_verdict(0.51, 0.80)
    assert clean["distribution_shift"] is False and "No distribution shift" in clean["message"]
    with pytest.raises(BlackboxMIAError):
        distribution_shift_verdict(float("nan"), 0.8)
