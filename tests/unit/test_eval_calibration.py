"""Calibration rules: conservative FPR threshold, hand-computed max-accuracy / max-F1 points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blackbox_mia.evaluation.calibration import (
    calibrate,
    conformal_rank,
    min_nonmembers,
)
from blackbox_mia.types import BlackboxMIAError


def test_fpr_rule_hand_values():
    # n = 100, α = 0.05: j = ⌈101·0.95⌉ = ⌈95.95⌉ = 96 → threshold 96, 4 scores above.
    t = calibrate(np.arange(1.0, 101.0), target_fpr=0.05)
    assert (t.value, t.realised_fpr, t.rule, t.target_fpr) == (96.0, 0.04, "fpr", 0.05)
    assert t.tpr is None and t.n_calibration_members == 0 and t.note is None
    # n = 99: j = ⌈100·0.95⌉ = 95 exactly (guarded against 95.000000001) → 4 above.
    t = calibrate(np.arange(1.0, 100.0), target_fpr=0.05)
    assert t.value == 95.0 and t.realised_fpr == pytest.approx(4 / 99)


@pytest.mark.parametrize("target", [0.01, 0.05, 0.1, 0.3])
def test_fpr_rule_never_exceeds_target_in_sample(target):
    rng = np.random.default_rng(0)
    for n in list(range(1, 120)) + [499, 500, 1000]:
        scores = np.round(rng.normal(size=n), 1)  # ties included
        t = calibrate(scores, target_fpr=target)
        assert t.realised_fpr == np.mean(scores > t.value) <= target
        assert (t.note is not None) == (n < math.ceil(1 / target - 1 - 1e-9))


def test_fpr_rule_is_conservative_out_of_sample():
    """Fresh non-members exceed the threshold at most target of the time on average."""
    rng = np.random.default_rng(1)
    target, n = 0.1, 50  # j = ⌈51·0.9⌉ = 46: expected FPR (51 − 46)/51 = 0.098
    fresh = [1 - calibrate(rng.uniform(size=n), target_fpr=target).value for _ in range(4000)]
    assert np.mean(fresh) == pytest.approx(5 / 51, abs=0.004)
    assert np.mean(fresh) <= target


def test_fpr_rule_too_few_nonmembers():
    t = calibrate([0.1, 0.5, 0.3], target_fpr=0.05)
    assert t.value == 0.5 and t.realised_fpr == 0.0 and "too few" in t.note


def test_fpr_rule_fills_tpr_with_members():
    t = calibrate(np.arange(1.0, 101.0), scores_members=[50.0, 96.0, 97.0, 200.0])
    assert t.value == 96.0 and t.tpr == 0.5 and t.n_calibration_members == 4


# Descending: m 1.0, m .9, n .8, n .7, n .6, n .5, m .4, m .3, m .2, n .1 (5 members, 5 not).
# Flagging the top k: accuracy peaks at k = 2 (7/10: TP 2, TN 5); F1 = 2TP/(2TP+FP+FN) peaks
# at k = 9 (10/14: TP 5, FP 4), above k = 2 (4/7) and k = 10 (10/15).
MEMBERS = [1.0, 0.9, 0.4, 0.3, 0.2]
NONMEMBERS = [0.8, 0.7, 0.6, 0.5, 0.1]


def test_max_accuracy_hand_example():
    t = calibrate(NONMEMBERS, MEMBERS, rule="max_accuracy")
    assert t.value == 0.8  # highest unflagged score
    assert (t.accuracy, t.tpr, t.realised_fpr, t.target_fpr) == (0.7, 0.4, 0.0, None)


def test_max_f1_hand_example():
    t = calibrate(NONMEMBERS, MEMBERS, rule="max_f1")
    assert t.value == 0.1
    assert t.f1 == pytest.approx(10 / 14) and (t.tpr, t.realised_fpr) == (1.0, 0.8)
    np.testing.assert_array_equal(t.flag([0.1, 0.11, 5.0]), [False, True, True])


def test_max_accuracy_flag_all_gives_minus_inf():
    t = calibrate([0.0, 0.1], [0.2, 0.3, 0.4, 0.5, 0.6, 0.05], rule="max_accuracy")
    assert t.value == 0.1 and t.accuracy == pytest.approx(7 / 8)
    t = calibrate([0.5], [0.1, 0.2, 0.3, 0.4, 0.6], rule="max_f1")
    assert t.value == -math.inf and t.tpr == 1.0


def test_errors():
    with pytest.raises(BlackboxMIAError):
        calibrate(NONMEMBERS, rule="max_f1")
    with pytest.raises(BlackboxMIAError):
        calibrate(NONMEMBERS, rule="youden")
    with pytest.raises(BlackboxMIAError):
        calibrate(NONMEMBERS, target_fpr=0.0)
    with pytest.raises(BlackboxMIAError):
        calibrate([])
    with pytest.raises(BlackboxMIAError):
        calibrate([0.1, float("nan")])


def test_conformal_rank_and_the_fewest_nonmembers_that_estimate_an_fpr():
    assert conformal_rank(200, 0.05) == 191 and conformal_rank(19, 0.05) == 19 and conformal_rank(4, 0.05) == 4
    assert conformal_rank(39, 0.05) == 38  # ceil(40 * 0.95) = 38: one non-member above
    assert min_nonmembers(0.05) == 39 and conformal_rank(38, 0.05) == 38  # 38: none above
    assert min_nonmembers(0.01) == 199 and min_nonmembers(0.5) == 3
    neg = np.arange(39.0)
    assert calibrate(neg).value == 37.0 and calibrate(neg).realised_fpr == 1 / 39
    with pytest.raises(BlackboxMIAError):
        conformal_rank(0, 0.05)
    with pytest.raises(BlackboxMIAError):
        min_nonmembers(1.0)
