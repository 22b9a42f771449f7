"""The dataset-level verdict: exact p-values by hand, the level by simulation, power on planted data."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from blackbox_mia.evaluation.detection import (
    combined_scores,
    detection_verdict,
    min_p_value,
    rank_pvalues,
    reference_positions,
    tail_ranks,
    tail_test,
)
from blackbox_mia.types import BlackboxMIAError


def test_rank_pvalues_by_hand():
    # j = 1: X_1 >= c iff the top c pooled items are all swept: C(N, c) / C(N + n, c)
    assert rank_pvalues(np.array([3]), 10, 5, (1,))[0] == pytest.approx(comb(10, 3) / comb(15, 3))
    assert rank_pvalues(np.array([0]), 10, 5, (1,))[0] == pytest.approx(1.0)
    # j = 2, c = 2: among the top 3 pooled items at most one reference item
    by_hand = (comb(10, 3) + comb(10, 2) * comb(5, 1)) / comb(15, 3)
    assert rank_pvalues(np.array([2]), 10, 5, (2,))[0] == pytest.approx(by_hand)


def test_reference_positions_and_counts():
    swept, reference = np.array([5.0, 4.0, 1.0, 0.5]), np.array([3.0, 0.0])
    assert reference_positions(swept, reference).tolist() == [2, 5]
    out = tail_test(swept, reference, ranks=(1, 2))
    assert out["counts"] == {1: 2, 2: 4}
    assert out["expected_counts"] == {1: pytest.approx(4 / 3), 2: pytest.approx(8 / 3)}


@pytest.mark.parametrize("n_swept,n_ref,ranks", [(7, 5, (1, 2, 3, 5)), (9, 4, (1, 2, 3)), (5, 6, (1, 2, 3, 5)),
                                                 (6, 1, (1,))])
def test_min_p_law_matches_every_arrangement(n_swept, n_ref, ranks):
    # the exact p-value P(min_j p_j <= m) against all C(N + n, n) equally likely reference placements
    minima = np.array([rank_pvalues(np.array(pos)[np.array(ranks) - 1] - np.array(ranks) + 1, n_swept, n_ref, ranks).min()
                       for pos in itertools.combinations(range(n_swept + n_ref), n_ref)])
    for m in np.unique(minima):
        assert min_p_value(m, n_swept, n_ref, ranks) == pytest.approx(np.mean(minima <= m * (1 + 1e-9)), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_level_under_exchangeable_nulls(ties):
    # swept and reference drawn alike (heavy tails; integer scores with many ties): rejection rate <= alpha
    rng = np.random.default_rng(7)
    n_swept, n_ref, reps, alpha = 150, 30, 300, 0.1
    rejected = 0
    for _ in range(reps):
        pooled = rng.standard_t(2, n_swept + n_ref)
        if ties:
            pooled = np.round(pooled)
        rejected += tail_test(pooled[:n_swept], pooled[n_swept:], alpha=alpha)["detected"]
    assert rejected / reps <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)
    if not ties:  # exact without ties (with ties conservative: a tie never counts for the swept items)
        assert rejected / reps >= alpha - 4 * np.sqrt(alpha * (1 - alpha) / reps)  # not vacuous: near alpha


def test_ties_count_against_detection():
    # a text-only test that matched nothing: every score 0, no information, p = 1 (never drawn by lot)
    out = tail_test(np.zeros(70), np.zeros(46))
    assert out["p_value"] == 1.0 and not out["detected"] and set(out["counts"].values()) == {0}
    # a swept item tied with the top reference item is not above it
    assert reference_positions(np.array([2.0, 1.0]), np.array([2.0, 0.0])).tolist() == [0, 3]


def test_power_on_planted_members():
    # 5% planted members beyond most non-members: detected in most splits; none planted: near alpha
    rng = np.random.default_rng(3)
    hits = clean = 0
    for _ in range(50):
        swept = np.concatenate([rng.normal(size=475), rng.normal(3.5, 1, 25)])
        hits += tail_test(swept, rng.normal(size=100))["detected"]
        clean += tail_test(rng.normal(size=500), rng.normal(size=100))["detected"]
    assert hits >= 35  # measured 40 of 50
    assert clean <= 8


def test_tiny_p_values_and_the_verdict_sentence():
    rng = np.random.default_rng(0)
    out = tail_test(rng.normal(10, 1, 200), rng.normal(size=50))
    # every swept item above every reference item: p = P(X_1 >= 200) = 1 / C(250, 50) at rank 1
    assert out["counts"][1] == 200 and out["rank_p_values"][1] == pytest.approx(1 / comb(250, 50), rel=1e-9)
    assert 0 < out["p_value"] <= len(tail_ranks(50)) * out["statistic"] and out["detected"]
    verdict = detection_verdict(rng.normal(size=100), rng.normal(size=40), "calibration non-members of X")
    assert verdict["sentence"].startswith("Contamination not detected at alpha = 0.05: p = ")
    assert "40 calibration non-members of X" in verdict["sentence"] and "exchangeable" in verdict["sentence"]
    detected = detection_verdict(rng.normal(5, 1, 100), rng.normal(size=40), "ref")
    assert detected["sentence"].startswith("Contamination DETECTED at alpha = 0.05: p = ")


def test_errors():
    for bad in ([], [np.nan]):
        with pytest.raises(BlackboxMIAError):
            tail_test(bad, [1.0, 2.0])
    with pytest.raises(BlackboxMIAError, match="alpha"):
        tail_test([1.0], [2.0], alpha=1.0)
    with pytest.raises(BlackboxMIAError, match="ranks"):
        min_p_value(0.1, 10, 3, (5,))


def test_combined_features_keep_the_level_and_add_power():
    # two features, each shifting members by 3 sd: their combination (fitted on members vs the pooled
    # sample) detects more often than either alone, and a clean benchmark stays near alpha
    rng = np.random.default_rng(5)
    def draw(n, member):
        return rng.normal(size=(n, 2)) + (3.0 if member else 0.0)

    single, combined, clean = [0, 0], 0, 0
    for _ in range(30):
        swept = np.vstack([draw(370, False), draw(30, True)])
        reference, members = draw(60, False), draw(50, True)
        for f in (0, 1):
            single[f] += tail_test(swept[:, f], reference[:, f])["detected"]
        combined += detection_verdict(swept, reference, "ref", members=members)["detected"]
        clean += detection_verdict(draw(400, False), draw(60, False), "ref", members=members)["detected"]
    assert combined >= 21 and combined >= max(single) + 3  # measured 23 against 17 and 19 (of 30)
    assert clean <= 5


def test_combined_scores_ignore_which_rows_are_reference():
    # the same pooled rows split differently give the same combined score to every item
    rng = np.random.default_rng(2)
    pooled, members = rng.normal(size=(50, 3)), rng.normal(1, 1, size=(10, 3))
    a_swept, a_ref, info = combined_scores(pooled[:40], pooled[40:], members)
    b_swept, b_ref, _ = combined_scores(pooled[10:], pooled[:10], members)
    assert np.allclose(np.r_[a_swept, a_ref], np.r_[b_ref, b_swept], atol=1e-12)
    assert len(info["weights"]) == 3 and info["n_members"] == 10
    with pytest.raises(BlackboxMIAError):
        combined_scores(pooled[:40], pooled[40:, :2], members)
