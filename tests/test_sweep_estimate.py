"""The sweep's estimate: whole-procedure bootstrap, identifiability, lower bound (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.evaluation import estimate_prevalence
from blackbox_mia.evaluation.estimate import smoothed_resamples
from blackbox_mia.types import BlackboxMIAError

NEG = np.arange(40) / 40  # conformal rank at 5%: ceil(41 * 0.95) = 39 -> threshold 38/40, one above


def test_point_estimate_by_hand():
    pos = np.array([0.0, 0.1] + [2.0] * 8)  # 8 of 10 above 0.95
    bench = np.array([2.0] * 30 + [0.0] * 70)  # 30 of 100 above
    out = estimate_prevalence(bench, NEG, pos, n_boot=500)
    assert out["threshold"]["value"] == 38 / 40
    assert out["n_false_positives"] == 1 and out["fpr_in_sample"] == 1 / 40
    assert out["fpr"] == 2 / 41  # the exact mean of the conformal threshold's FPR, not the in-sample 1/40
    assert out["tpr"] == 0.8 and out["flag_rate"] == 0.3 and out["n_flagged"] == 30
    assert out["identifiable"] is True and out["youden_j"] == pytest.approx(0.8 - 2 / 41)
    assert out["estimate"] == pytest.approx((0.3 - 2 / 41) / (0.8 - 2 / 41))
    assert out["ci"][0] <= out["estimate"] <= out["ci"][1] and out["ci_level"] == 0.95
    assert out["detected"] is (out["ci"][0] > 0)
    # Clopper-Pearson of the realised FPR (1 of 40) and of the TPR (8 of 10)
    assert out["fpr_ci"] == pytest.approx([0.000633, 0.131586], abs=1e-6)
    assert out["tpr_ci"] == pytest.approx([0.443905, 0.974789], abs=1e-6)
    assert out["target_fpr"] == 0.05 and out["n_boot"] == 500


def test_same_seed_same_interval_and_other_seed_other_draws():
    rng = np.random.default_rng(1)
    bench, neg, pos = rng.normal(size=300), rng.normal(size=100), rng.normal(2, 1, size=100)
    a = estimate_prevalence(bench, neg, pos, n_boot=300, seed=3)
    assert a == estimate_prevalence(bench, neg, pos, n_boot=300, seed=3)
    assert a["ci"] != estimate_prevalence(bench, neg, pos, n_boot=300, seed=4)["ci"]


def test_not_identifiable_when_members_look_like_nonmembers():
    rng = np.random.default_rng(0)
    bench, neg, pos = rng.normal(size=500), rng.normal(size=100), rng.normal(size=30)
    out = estimate_prevalence(bench, neg, pos, n_boot=400)
    assert out["identifiable"] is False and out["youden_j_lower"] <= 0.05
    assert out["estimate"] is None and out["ci"] is None
    assert any("not identifiable at this signal" in n and "more calibration members" in n for n in out["notes"])
    assert out["lower_bound"]["lower_bound"] == 0.0  # the bound is still given


def test_without_members_only_the_lower_bound():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=700), rng.normal(4, 1, size=300)]  # 30% members, far above
    out = estimate_prevalence(bench, rng.normal(size=400), n_boot=50)
    assert out["tpr"] is None and out["identifiable"] is None and out["estimate"] is None and out["ci"] is None
    bound = out["lower_bound"]
    assert 0.2 < bound["lower_bound"] < 0.3 and bound["confidence"] == 0.95


def test_assumed_tpr_gives_an_estimate_that_ignores_its_uncertainty():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=800), rng.normal(3, 1, size=200)]
    out = estimate_prevalence(bench, rng.normal(size=200), tpr=0.9, n_boot=300)
    assert out["tpr"] == 0.9 and out["tpr_source"] == "assumed" and out["identifiable"] is True
    assert abs(out["estimate"] - 0.2) < 0.05
    assert any("ignores its uncertainty" in n for n in out["notes"])


def test_max_accuracy_rule_rechooses_the_threshold_in_each_resample():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=800), rng.normal(3, 1, size=200)]
    out = estimate_prevalence(bench, rng.normal(size=150), rng.normal(3, 1, size=150), rule="max_accuracy", n_boot=100)
    assert out["target_fpr"] is None and out["fpr"] == out["fpr_in_sample"]  # no conformal rank to correct
    assert out["identifiable"] and out["ci"][0] < 0.2 < out["ci"][1]


def test_interval_covers_the_planted_fraction_at_the_nominal_rate():
    """Members N(2, 1) at 10% of a 600-item benchmark, 100 + 100 calibration items, 5% FPR."""
    covered = over_twice = identifiable = 0
    reps = 120
    for rep in range(reps):
        rng = np.random.default_rng(100 + rep)
        members = rng.random(600) < 0.1
        bench = np.where(members, rng.normal(2, 1, 600), rng.normal(0, 1, 600))
        out = estimate_prevalence(bench, rng.normal(size=100), rng.normal(2, 1, 100), n_boot=300, seed=rep)
        if out["identifiable"]:
            identifiable += 1
            covered += out["ci"][0] <= members.mean() <= out["ci"][1]
            over_twice += out["estimate"] > 2 * members.mean()
    assert identifiable >= 0.95 * reps
    assert covered / identifiable >= 0.9 and over_twice / identifiable < 0.1


def test_lower_bound_on_a_clean_benchmark_errs_at_most_at_its_level():
    positive = 0
    for rep in range(300):
        rng = np.random.default_rng(rep)
        out = estimate_prevalence(rng.normal(size=500), rng.normal(size=200), n_boot=2)
        positive += out["lower_bound"]["lower_bound"] > 0
    assert positive / 300 <= 0.05


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cal_member_scores": [1.0], "tpr": 0.5}, "not both"),
        ({"tpr": 0.0}, "tpr must be"),
        ({"rule": "max_f1"}, "needs member"),
        ({"rule": "nope"}, "unknown threshold rule"),
        ({"n_boot": 1}, "n_boot"),
        ({"margin": 1.0}, "margin"),
    ],
)
def test_errors(kwargs, message):
    with pytest.raises(BlackboxMIAError, match=message):
        estimate_prevalence([0.0, 1.0], [0.0, 0.5, 1.0], **kwargs)


def test_smoothed_resamples_keep_mean_and_variance_and_have_no_ties():
    values = np.arange(50.0)  # sd 14.58, IQR 24.5 -> h = 0.9 * (24.5 / 1.34) * 50^-0.2
    draws = smoothed_resamples(values, 2000, np.random.default_rng(0))
    assert draws.shape == (2000, 50)
    assert abs(draws.mean() - values.mean()) < 0.1
    # resampling keeps the variance (n-1)/n * s^2 on average; the noise adds h^2 and the shrink removes it again
    h = 0.9 * (24.5 / 1.34) * 50 ** -0.2
    expected = (np.var(values) + h * h) / (1 + h * h / np.var(values, ddof=1))
    assert abs(draws.var() / expected - 1) < 0.01
    assert len(np.unique(draws[0])) == 50  # continuous: a high quantile is no longer one of a few values
    constant = smoothed_resamples(np.full(5, 2.0), 3, np.random.default_rng(0))
    assert (constant == 2.0).all()
