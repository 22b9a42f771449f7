"""Rogan–Gladen prevalence with a bootstrap CI, and the dataset-level t-test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blackbox_mia.evaluation.prevalence import (
    clopper_pearson,
    corrected_prevalence,
    dataset_level_test,
    prevalence_lower_bound,
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
