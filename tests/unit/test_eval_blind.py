"""Blind baseline: separates vocabulary-shifted splits, is at chance on shuffled labels."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.evaluation.blind import (
    blind_analyzer,
    blind_baseline,
    distribution_shift_verdict,
)
from blackbox_mia.types import BlackboxMIAError

SHARED = ["the", "a", "of", "and", "to", "in", "is", "was", "for", "on",
          "with", "as", "by", "at", "from", "that", "this", "it", "be", "are"]
OLD = ["telegraph", "railway", "empire", "duke", "parish", "steam", "colonial", "monarch", "cathedral", "harbour"]
NEW = ["smartphone", "pandemic", "streaming", "blockchain", "podcast", "startup", "drone", "crypto", "influencer", "app"]


def _texts(n: int, topical: list[str], rng: np.random.Generator, shared: list[str] = SHARED,
           joiner: str = " ") -> list[str]:
    """n texts of 12 shared and 3 topical words; ``joiner=""`` writes them Japanese-style, without spaces."""
    out = []
    for _ in range(n):
        words = list(rng.choice(shared, 12)) + list(rng.choice(topical, 3))
        rng.shuffle(words)
        out.append(joiner.join(words))
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
    # English keeps word 1-2 grams (auto picks them: no kana/kanji)
    assert (result.analyzer, result.ngram_range) == ("word", (1, 2))
    summary = result.to_dict()
    assert summary["method"] == "TF-IDF word 1-2 grams + logistic regression, stratified k-fold out-of-fold"
    assert (summary["analyzer"], summary["ngram_range"]) == ("word", [1, 2])
    explicit = blind_baseline(texts, labels, folds=5, seed=0, segmenter="whitespace")
    np.testing.assert_array_equal(result.scores, explicit.scores)


JA_SHARED = ["は", "が", "の", "を", "に", "で", "と", "も", "から", "まで", "です", "ます"]
JA_OLD = ["鉄道", "帝国", "公爵", "教区", "蒸気", "植民地", "君主", "大聖堂", "港湾", "電信"]
JA_NEW = ["スマホ", "感染症", "配信", "暗号資産", "ドローン", "起業", "動画", "投稿", "通販", "アプリ"]



def test_japanese_split_uses_character_ngrams():
    rng = np.random.default_rng(0)
    texts = _texts(30, JA_OLD, rng, JA_SHARED, "") + _texts(30, JA_NEW, rng, JA_SHARED, "")
    labels = np.r_[np.ones(30, int), np.zeros(30, int)]
    assert blind_analyzer(texts) == ("char", (1, 3))  # auto: the texts are kana/kanji
    result = blind_baseline(texts, labels, folds=5, seed=0)
    assert (result.analyzer, result.ngram_range) == ("char", (1, 3))
    assert result.to_dict()["method"].startswith("TF-IDF character 1-3 grams + logistic regression")
    assert result.auc > 0.9
    # the whitespace word analyser sees each text as one token never seen in training: an
    # all-zero vector, so every text gets the balanced folds' prior and the AUC is chance
    words = blind_baseline(texts, labels, folds=5, seed=0, segmenter="whitespace")
    assert words.analyzer == "word" and np.ptp(words.scores) < 1e-12 and words.auc == 0.5
    wb = blind_baseline(texts, labels, folds=5, seed=0, analyzer="char_wb", ngram_range=(2, 4))
    assert (wb.analyzer, wb.ngram_range) == ("char_wb", (2, 4))
    assert wb.to_dict()["method"].startswith("TF-IDF character (within words) 2-4 grams")


def test_blind_analyzer_by_segmenter():
    english, japanese = ["Tokyo is the capital."], ["東京は日本の首都です。"]
    assert blind_analyzer(english) == blind_analyzer(japanese, "whitespace") == ("word", (1, 2))
    assert blind_analyzer(japanese) == blind_analyzer(english, "japanese") == blind_analyzer(english, "chars")
    assert blind_analyzer(english + japanese) == ("word", (1, 2))  # pooled: 10 of 29 characters
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'mecab'"):
        blind_analyzer(english, "mecab")


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
    labels = [1, 1, 1, 0, 0, 0, 0]
    with pytest.raises(BlackboxMIAError, match="unknown analyzer 'chars'"):
        blind_baseline(texts, labels, folds=3, analyzer="chars")
    with pytest.raises(BlackboxMIAError, match="ngram_range must be"):
        blind_baseline(texts, labels, folds=3, ngram_range=(2, 1))


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
