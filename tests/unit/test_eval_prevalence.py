"""Rogan–Gladen prevalence with a bootstrap CI, and the dataset-level t-test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blackbox_mia.evaluation.calibration import calibrate
from blackbox_mia.evaluation.prevalence import (
    clopper_pearson,
    corrected_prevalence,
    dataset_level_test,
    prevalence_lower_bound,
    prevalence_with_ci,
)
from blackbox_mia.types import BlackboxMIAError


def test_corrected_prevalence_by_hand():
    assert corrected_prevalence(0.2, 0.05, 0.8) == pytest.approx(0.15 / 0.75)
    assert corrected_prevalence(0.03, 0.05, 0.8) == 0.0  # clipped below
    assert corrected_prevalence(0.9, 0.05, 0.8) == 1.0  # clipped above
    with pytest.raises(BlackboxMIAError, match="TPR"):
        corrected_prevalence(0.2, 0.3, 0.3)
    with pytest.raises(BlackboxMIAError):
        corrected_prevalence(float("nan"), 0.05, 0.8)


def _planted(seed: int, n_bench: int = 2000, n_cal: int = 2000, fixed: bool = True):
    """Benchmark with members N(2, 1) at rate 0.3 among non-members N(0, 1), + calibration.

    ``fixed``: exactly 30% members; else each item is a member with probability 0.3 (the
    super-population model the bootstrap CI is built for).
    """
    rng = np.random.default_rng(seed)
    member = np.arange(n_bench) < round(0.3 * n_bench) if fixed else rng.random(n_bench) < 0.3
    bench = rng.normal(0, 1, n_bench) + 2.0 * member
    return bench, rng.normal(0, 1, n_cal), rng.normal(2.0, 1, n_cal)


def test_recovers_planted_rate():
    bench, cal_neg, cal_pos = _planted(0)
    threshold = calibrate(cal_neg, cal_pos, target_fpr=0.05)
    out = prevalence_with_ci(bench, threshold.value, cal_neg, cal_pos, n_boot=1000, seed=0)
    assert out["estimate"] == pytest.approx(0.3, abs=0.05)
    lo, hi = out["ci"]
    assert lo <= 0.3 <= hi and lo < out["estimate"] < hi
    assert out["fpr"] == threshold.fpr and out["tpr"] == threshold.tpr
    assert out["flag_rate"] == np.mean(bench > threshold.value)
    assert out["estimate"] == pytest.approx(
        corrected_prevalence(out["flag_rate"], out["fpr"], out["tpr"]))
    assert out["tpr_source"] == "calibration members" and out["n_cal_members"] == 2000


def test_ci_coverage_of_planted_rate():
    covered, reps = 0, 200
    for rep in range(reps):
        bench, cal_neg, cal_pos = _planted(100 + rep, n_bench=500, n_cal=500, fixed=False)
        value = calibrate(cal_neg, target_fpr=0.05).value
        lo, hi = prevalence_with_ci(bench, value, cal_neg, cal_pos, n_boot=400, seed=rep)["ci"]
        covered += lo <= 0.3 <= hi
    assert 0.9 <= covered / reps <= 0.99


def test_given_tpr_narrows_ci_and_says_so():
    bench, cal_neg, cal_pos = _planted(1, n_cal=300)
    value = calibrate(cal_neg).value
    with_members = prevalence_with_ci(bench, value, cal_neg, cal_pos, n_boot=500)
    given = prevalence_with_ci(bench, value, cal_neg, tpr=with_members["tpr"], n_boot=500)
    assert given["estimate"] == with_members["estimate"]
    assert given["tpr_source"] == "given" and "ignores" in given["notes"][0]
    assert np.diff(given["ci"])[0] < np.diff(with_members["ci"])[0]


def test_unseparated_threshold_gives_nan_with_note():
    rng = np.random.default_rng(2)
    same = rng.normal(size=400)
    out = prevalence_with_ci(same, 10.0, same, same, n_boot=100)  # nothing flagged: TPR = FPR
    assert math.isnan(out["estimate"]) and all(math.isnan(v) for v in out["ci"])
    assert "not identifiable" in out["notes"][0]


def test_prevalence_errors():
    with pytest.raises(BlackboxMIAError, match="exactly one"):
        prevalence_with_ci([0.1, 0.2], 0.0, [0.1], [0.2], tpr=0.5)
    with pytest.raises(BlackboxMIAError, match="exactly one"):
        prevalence_with_ci([0.1, 0.2], 0.0, [0.1])
    with pytest.raises(BlackboxMIAError):
        prevalence_with_ci([0.1, 0.2], 0.0, [0.1], tpr=1.5)
    with pytest.raises(BlackboxMIAError):
        prevalence_with_ci([], 0.0, [0.1], tpr=0.5)


def test_dataset_level_test():
    rng = np.random.default_rng(3)
    control = rng.normal(0, 1, 200)
    shifted = dataset_level_test(rng.normal(0.5, 1.5, 200), control)
    assert shifted["p_value"] < 0.01 and shifted["statistic"] > 0
    bench = rng.normal(0.5, 1.5, 150)
    out = dataset_level_test(bench, control)
    welch = (bench.mean() - control.mean()) / math.sqrt(
        bench.var(ddof=1) / 150 + control.var(ddof=1) / 200)
    assert out["statistic"] == pytest.approx(welch)  # benchmark first: H1 benchmark > control
    assert out["mean_difference"] == pytest.approx(bench.mean() - control.mean())
    assert (out["n_benchmark"], out["n_control"]) == (150, 200)
    assert dataset_level_test(rng.normal(-0.3, 1, 200), control)["p_value"] > 0.05
    assert dataset_level_test(control - 0.01, control)["p_value"] > 0.05
    with pytest.raises(BlackboxMIAError):
        dataset_level_test([1.0], control)


def test_clopper_pearson_closed_forms():
    # k = 0: upper end solves (1 - p)^n = alpha/2; k = n: lower end solves p^n = alpha/2
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025 ** (1 / 10)))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025 ** (1 / 10)), 1.0)
    lo, hi = clopper_pearson(3, 20, 0.1)
    mirror = clopper_pearson(17, 20, 0.1)
    assert (lo, hi) == (pytest.approx(1 - mirror[1]), pytest.approx(1 - mirror[0]))
    for bad in ((-1, 5), (6, 5), (0, 0)):
        with pytest.raises(BlackboxMIAError):
            clopper_pearson(*bad)


def test_lower_bound_by_hand():
    # every one of 10 items flagged, none of 10 non-members: (0.025^(1/10) - u) / (1 - u), u = 1 - 0.025^(1/10)
    flag_lo = 0.025 ** (1 / 10)
    fpr_hi = 1 - 0.025 ** (1 / 10)
    out = prevalence_lower_bound(10, 10, 0, 10)
    assert out["flag_rate_lower"] == pytest.approx(flag_lo) and out["fpr_upper"] == pytest.approx(fpr_hi)
    assert out["lower_bound"] == pytest.approx((flag_lo - fpr_hi) / (1 - fpr_hi)) and out["confidence"] == 0.95
    assert prevalence_lower_bound(0, 100, 0, 100)["lower_bound"] == 0.0  # never negative
    assert prevalence_lower_bound(5, 5, 3, 3)["lower_bound"] == 0.0  # FPR bound 1: nothing can be said
