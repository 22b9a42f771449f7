"""The sweep's estimate: exact simultaneous interval, identifiability, lower bound (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from blackbox_mia.evaluation import clopper_pearson, conformal_rank, estimate_prevalence
from blackbox_mia.evaluation.prevalence_interval import fpr_bounds
from blackbox_mia.types import BlackboxMIAError

NEG = np.arange(40) / 40  # conformal rank at 5%: ceil(41 * 0.95) = 39 -> threshold 38/40, one above


def test_point_estimate_and_interval_by_hand():
    pos = np.array([0.0, 0.1] + [2.0] * 8)  # 8 of 10 above 0.95
    bench = np.array([2.0] * 30 + [0.0] * 70)  # 30 of 100 above
    out = estimate_prevalence(bench, NEG, pos)
    assert out["threshold"]["value"] == 38 / 40
    assert out["n_false_positives"] == 1 and out["realised_fpr"] == 1 / 40
    assert out["estimated_fpr"] == 2 / 41  # the exact mean of the conformal threshold's FPR, not the in-sample 1/40
    assert out["tpr"] == 0.8 and out["flag_rate"] == 0.3 and out["n_flagged"] == 30
    assert out["estimate"] == pytest.approx((0.3 - 2 / 41) / (0.8 - 2 / 41))
    # each rate's bounds at 1 - 0.05/3 two-sided (0.05/6 per side): together they hold with probability >= 0.95
    b = out["bounds"]
    assert b["level"] == pytest.approx(1 - 0.05 / 3)
    assert b["flag_rate"] == pytest.approx([0.1957707, 0.4214828], abs=1e-6)  # Clopper-Pearson, 30 of 100
    assert b["fpr"] == pytest.approx([0.0034124, 0.1592034], abs=1e-6)  # Beta(2, 39) quantiles
    assert b["tpr"] == pytest.approx([0.3782424, 0.9858689], abs=1e-6)  # Clopper-Pearson, 8 of 10
    assert out["youden_j_lower"] == pytest.approx(0.3782424 - 0.1592034, abs=1e-6) and out["identifiable"] is True
    # the interval: the ratio at the corners of the box, lower (f_lo - FPR_hi)/(TPR_hi - FPR_hi); the upper
    # (f_hi - FPR_lo)/(TPR_lo - FPR_lo) = 1.115 is clipped to 1
    assert out["ci"] == pytest.approx([(0.1957707 - 0.1592034) / (0.9858689 - 0.1592034), 1.0], abs=1e-6)
    assert out["ci"][0] <= out["estimate"] <= out["ci"][1] and out["ci_level"] == 0.95 and out["detected"] is True
    # Clopper-Pearson 95% of the realised FPR (1 of 40) and of the TPR (8 of 10), as reported
    assert out["realised_fpr_ci"] == pytest.approx([0.000633, 0.131586], abs=1e-6)
    assert out["tpr_ci"] == pytest.approx([0.443905, 0.974789], abs=1e-6)
    assert out["target_fpr"] == 0.05


def test_interval_is_clipped_at_the_corners():
    pos = np.full(10, 2.0)  # TPR 1
    clean = estimate_prevalence(np.zeros(100), NEG, pos)  # nothing flagged: f_lo = 0 <= FPR_hi
    assert clean["ci"][0] == 0.0 and clean["estimate"] == 0.0 and clean["detected"] is False
    full = estimate_prevalence(np.full(100, 2.0), NEG, pos)  # everything flagged: f_hi = 1 >= TPR_lo
    assert full["ci"][1] == 1.0 and full["estimate"] == 1.0


def test_fpr_bounds_are_the_conformal_beta_law():
    lo, hi = fpr_bounds(1, 40, 0.05)
    assert (lo, hi) == pytest.approx((beta.ppf(0.025, 2, 39), beta.ppf(0.975, 2, 39)))
    cp = clopper_pearson(1, 40, 0.05)
    assert hi == pytest.approx(cp[1]) and lo > cp[0]  # the same upper bound, a tighter lower one
    with pytest.raises(BlackboxMIAError, match="0 <= k < n"):
        fpr_bounds(40, 40, 0.05)


def test_fpr_bounds_cover_the_true_fpr_of_the_conformal_threshold():
    """Uniform non-member scores: the conformal threshold t's true FPR is 1 - t; 80% bounds hold it in ~80% of draws."""
    n, reps = 60, 4000
    j = conformal_rank(n, 0.05)  # 58: k = 2 non-members above
    t = np.sort(np.random.default_rng(0).random((reps, n)), axis=1)[:, j - 1]
    lo, hi = fpr_bounds(n - j, n, 0.2)
    held = np.mean((lo <= 1 - t) & (1 - t <= hi))
    assert abs(held - 0.8) < 0.02  # exact, not conservative: 3 sd of a proportion over 4000 draws is 0.019


def test_not_identifiable_when_members_look_like_nonmembers():
    rng = np.random.default_rng(0)
    bench, neg, pos = rng.normal(size=500), rng.normal(size=100), rng.normal(size=30)
    out = estimate_prevalence(bench, neg, pos)
    assert out["identifiable"] is False and out["youden_j_lower"] <= 0.05
    assert out["youden_j_lower"] == pytest.approx(out["bounds"]["tpr"][0] - out["bounds"]["fpr"][1])
    assert out["estimate"] is None and out["ci"] is None and out["detected"] is None
    assert any("not identifiable at this signal" in n and "more calibration members" in n for n in out["notes"])
    assert out["lower_bound"]["lower_bound"] == 0.0  # the bound is still given


def test_without_members_only_the_lower_bound():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=700), rng.normal(4, 1, size=300)]  # 30% members, far above
    out = estimate_prevalence(bench, rng.normal(size=400))
    assert out["tpr"] is None and out["identifiable"] is None and out["estimate"] is None and out["ci"] is None
    assert out["bounds"] is None
    bound = out["lower_bound"]
    assert 0.2 < bound["lower_bound"] < 0.3 and bound["confidence"] == 0.95


def test_assumed_tpr_gives_an_estimate_that_ignores_its_uncertainty():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=800), rng.normal(3, 1, size=200)]
    out = estimate_prevalence(bench, rng.normal(size=200), tpr=0.9)
    assert out["tpr"] == 0.9 and out["tpr_source"] == "assumed" and out["identifiable"] is True
    assert out["bounds"]["tpr"] == [0.9, 0.9]
    assert abs(out["estimate"] - 0.2) < 0.05 and out["ci"][0] < 0.2 < out["ci"][1]
    assert any("ignores its uncertainty" in n for n in out["notes"])


def test_max_accuracy_rule_uses_clopper_pearson_and_says_it_ignores_the_selection():
    rng = np.random.default_rng(0)
    bench = np.r_[rng.normal(size=800), rng.normal(3, 1, size=200)]
    out = estimate_prevalence(bench, rng.normal(size=150), rng.normal(3, 1, size=150), rule="max_accuracy")
    assert out["target_fpr"] is None and out["estimated_fpr"] == out["realised_fpr"]  # no conformal rank to correct
    assert out["bounds"]["fpr"] == pytest.approx(list(clopper_pearson(out["n_false_positives"], 150, 0.05 / 3)))
    assert out["identifiable"] and out["ci"][0] < 0.2 < out["ci"][1]
    assert any("ignore that selection" in n for n in out["notes"])


def test_interval_covers_the_planted_fraction_at_least_at_the_nominal_rate():
    """Members N(2, 1) at 10% of a 600-item benchmark, 100 + 100 calibration items, 5% FPR."""
    covered = identifiable = 0
    reps = 200
    for rep in range(reps):
        rng = np.random.default_rng(100 + rep)
        members = rng.random(600) < 0.1
        bench = np.where(members, rng.normal(2, 1, 600), rng.normal(0, 1, 600))
        out = estimate_prevalence(bench, rng.normal(size=100), rng.normal(2, 1, 100))
        if out["identifiable"]:
            identifiable += 1
            covered += out["ci"][0] <= members.mean() <= out["ci"][1]
    assert identifiable >= 0.95 * reps
    assert covered / identifiable >= 0.95


def test_lower_bound_on_a_clean_benchmark_errs_at_most_at_its_level():
    positive = 0
    for rep in range(300):
        rng = np.random.default_rng(rep)
        out = estimate_prevalence(rng.normal(size=500), rng.normal(size=200))
        positive += out["lower_bound"]["lower_bound"] > 0
    assert positive / 300 <= 0.05


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cal_member_scores": [1.0], "tpr": 0.5}, "not both"),
        ({"tpr": 0.0}, "tpr must be"),
        ({"rule": "max_f1"}, "needs member"),
        ({"rule": "nope"}, "unknown threshold rule"),
        ({"alpha": 1.0}, "alpha"),
        ({"margin": 1.0}, "margin"),
    ],
)
def test_errors(kwargs, message):
    with pytest.raises(BlackboxMIAError, match=message):
        estimate_prevalence([0.0, 1.0], [0.0, 0.5, 1.0], **kwargs)


def test_renamed_fpr_keys_are_written_under_their_old_names_too():
    """For one release (docs/migration.md): the prevalence's realised_fpr, realised_fpr_ci and
    estimated_fpr also as fpr_in_sample, fpr_ci and fpr; the threshold's realised_fpr as fpr."""
    pos = np.array([0.0, 0.1] + [2.0] * 8)
    for members in (pos, None):  # with members, and the early return without them
        out = estimate_prevalence(np.array([2.0] * 30 + [0.0] * 70), NEG, members)
        assert (out["fpr_in_sample"], out["fpr_ci"], out["fpr"]) == (1 / 40, out["realised_fpr_ci"], 2 / 41)
        assert out["realised_fpr"] == 1 / 40 and out["estimated_fpr"] == 2 / 41
        assert out["threshold"]["fpr"] == out["threshold"]["realised_fpr"] == 1 / 40
