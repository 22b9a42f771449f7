"""Metrics: hand-computed ROC points, bootstrap agreement with sklearn, CI coverage, buckets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from blackbox_mia.evaluation import metrics as M
from blackbox_mia.types import BlackboxMIAError

# 4 members, 4 non-members. Descending: m .9, m .8, n .7, m .6, n .5, m .4, n .3, n .2.
# Member-beats-non-member pairs: 4 + 4 + 3 + 2 = 13 of 16.
LABELS = np.array([1, 1, 1, 1, 0, 0, 0, 0])
SCORES = np.array([0.9, 0.8, 0.6, 0.4, 0.7, 0.5, 0.3, 0.2])

# Ties: members .8, .5, .5, .05; non-members .5, .4, .1, 0. Pairs: 4 + 2·3.5 + 1 = 12 of 16.
# ROC: (0,0) (0,.25) (.25,.75)[tie group: 2 m + 1 n, one diagonal step] (.5,.75) (.75,.75)
# (.75,1) (1,1).
TIE_LABELS = np.array([1, 1, 1, 1, 0, 0, 0, 0])
TIE_SCORES = np.array([0.8, 0.5, 0.5, 0.05, 0.5, 0.4, 0.1, 0.0])


def test_auc_and_roc_points_by_hand():
    assert M.auc(LABELS, SCORES) == pytest.approx(13 / 16)
    fpr, tpr, _ = M.roc(LABELS, SCORES)
    points = list(zip(fpr, tpr))
    assert points == [(0, 0), (0, 0.25), (0, 0.5), (0.25, 0.5), (0.25, 0.75), (0.5, 0.75),
                      (0.5, 1), (0.75, 1), (1, 1)]


@pytest.mark.parametrize("target, expected", [(0.0, 0.5), (0.2, 0.5), (0.25, 0.75), (0.5, 1.0)])
def test_tpr_at_fpr_by_hand(target, expected):
    assert M.tpr_at_fpr(LABELS, SCORES, target) == expected


def test_ties_follow_sklearn():
    assert M.auc(TIE_LABELS, TIE_SCORES) == pytest.approx(12 / 16)
    fpr, tpr, _ = M.roc(TIE_LABELS, TIE_SCORES)
    assert list(zip(fpr, tpr)) == [(0, 0), (0, 0.25), (0.25, 0.75), (0.5, 0.75), (0.75, 0.75),
                                   (0.75, 1), (1, 1)]
    assert M.tpr_at_fpr(TIE_LABELS, TIE_SCORES, 0.0) == 0.25
    assert M.tpr_at_fpr(TIE_LABELS, TIE_SCORES, 0.25) == 0.75  # the tie point itself
    assert M.tpr_at_fpr(TIE_LABELS, TIE_SCORES, 0.7) == 0.75


@pytest.mark.parametrize(
    "labels, scores",
    [([1, 1, 0], [0.1, 0.2]), ([1, 1], [0.1, 0.2]), ([1, 2], [0.1, 0.2]), ([1, 0], [0.1, np.nan])],
)
def test_bad_inputs_raise(labels, scores):
    with pytest.raises(BlackboxMIAError):
        M.auc(labels, scores)


def test_bad_fpr_and_statistic_raise():
    with pytest.raises(BlackboxMIAError):
        M.tpr_at_fpr(LABELS, SCORES, 1.5)
    with pytest.raises(BlackboxMIAError):
        M.bootstrap_ci(LABELS, SCORES, "accuracy")
    with pytest.raises(BlackboxMIAError):
        M.bootstrap_ci(LABELS, SCORES, "auc", n_boot=0)


def _tied_gaussian_set(n1=150, n0=120, seed=3):
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(n1, int), np.zeros(n0, int)]
    scores = np.round(rng.normal(size=n1 + n0) + 0.7 * labels, 1)  # many ties
    return labels, scores


def test_vectorised_bootstrap_equals_sklearn_per_resample():
    labels, scores = _tied_gaussian_set()
    fprs = (0.01, 0.05, 0.1)
    aucs, tprs = M.bootstrap_roc_stats(labels, scores, fprs, n_boot=50, seed=7)
    blocks = list(M._resample_blocks(labels, 50, 7, True))
    rows = np.concatenate(blocks)
    for b, idx in enumerate(rows):
        assert aucs[b] == pytest.approx(roc_auc_score(labels[idx], scores[idx]), abs=1e-12)
        for j, f in enumerate(fprs):
            assert tprs[b, j] == M.tpr_at_fpr(labels[idx], scores[idx], f)


def test_bootstrap_named_and_callable_agree():
    labels, scores = _tied_gaussian_set()
    for stratified in (True, False):
        fast = M.bootstrap_ci(labels, scores, "auc", n_boot=100, stratified=stratified)
        slow = M.bootstrap_ci(labels, scores, M.auc, n_boot=100, stratified=stratified)
        assert fast == pytest.approx(slow, abs=1e-12)
    fast = M.bootstrap_ci(labels, scores, "tpr@0.05", n_boot=100)
    slow = M.bootstrap_ci(labels, scores, lambda y, s: M.tpr_at_fpr(y, s, 0.05), n_boot=100)
    assert fast == pytest.approx(slow, abs=1e-12)


def test_stratified_resamples_keep_class_sizes():
    labels, _ = _tied_gaussian_set(n1=30, n0=5)
    for idx in np.concatenate(list(M._resample_blocks(labels, 200, 0, True))):
        assert labels[idx].sum() == 30 and (labels[idx] == 0).sum() == 5


def test_bootstrap_ci_coverage_on_gaussians():
    """95% CI of the AUC covers the true AUC Φ(d/√2) in about 95% of repetitions."""
    d, n, reps = 1.0, 100, 150
    true_auc = norm.cdf(d / math.sqrt(2))
    labels = np.r_[np.ones(n, int), np.zeros(n, int)]
    covered = 0
    for rep in range(reps):
        rng = np.random.default_rng(1000 + rep)
        scores = np.r_[rng.normal(d, 1, n), rng.normal(0, 1, n)]
        lo, hi = M.bootstrap_ci(labels, scores, "auc", n_boot=200, seed=rep)
        covered += lo <= true_auc <= hi
    assert 0.88 <= covered / reps <= 0.99


def test_evaluate_scores_flags_unmeasurable_fpr():
    labels, scores = _tied_gaussian_set(n1=150, n0=120)
    out = M.evaluate_scores(labels, scores, n_boot=200)
    assert out["n_members"] == 150 and out["n_nonmembers"] == 120
    assert out["auc"] == pytest.approx(roc_auc_score(labels, scores))
    lo, hi = out["auc_ci"]
    assert lo < out["auc"] < hi
    # 1/120 > 0.001: not measurable; 1/120 ≤ 0.01: measured.
    assert out["tpr_at_fpr"]["0.001"] is None and out["tpr_at_fpr_ci"]["0.001"] is None
    assert "not measurable" in out["notes"]["0.001"]
    assert set(out["notes"]) == {"0.001"}
    for key, f in (("0.01", 0.01), ("0.05", 0.05), ("0.1", 0.1)):
        assert out["tpr_at_fpr"][key] == M.tpr_at_fpr(labels, scores, f)
        lo, hi = out["tpr_at_fpr_ci"][key]
        assert 0 <= lo <= hi <= 1
    assert M.evaluate_scores(labels, scores, n_boot=0)["auc_ci"] is None


def test_length_buckets():
    assert M.length_buckets([0, 32, 33, 64, 100, 128, 256, 257]) == [
        "32", "32", "64", "64", "128", "128", "256", ">256"]
    assert M.length_buckets([5, 11], edges=(10,)) == ["10", ">10"]
    with pytest.raises(BlackboxMIAError):
        M.length_buckets([1], edges=(64, 32))
    with pytest.raises(BlackboxMIAError):
        M.length_buckets([-1])


def test_evaluate_by_length():
    labels = np.array([1, 0, 1, 0, 1, 1, 0, 0, 1])
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.3, 0.4, 0.6, 0.7, 0.5])
    words = np.array([20, 30, 60, 50, 100, 120, 110, 127, 300])
    out = M.evaluate_by_length(labels, scores, words, n_boot=20)
    assert list(out) == ["32", "64", "128", ">256"]
    assert out["32"]["auc"] == 1.0 and out["64"]["auc"] == 1.0
    assert out["128"]["auc"] == 0.0  # members .3/.4 below non-members .6/.7
    assert out[">256"] == {"n_members": 1, "n_nonmembers": 0, "note": "one class only: no metric"}
