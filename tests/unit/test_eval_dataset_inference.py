"""Dataset inference (Maini et al. 2024): the t-test on held-out halves, its level, its power, the check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from blackbox_mia.evaluation.dataset_inference import dataset_inference
from blackbox_mia.types import BlackboxMIAError


def test_detects_a_planted_shift_and_the_check_passes():
    rng = np.random.default_rng(0)
    suspect = np.vstack([rng.normal(size=(300, 3)), rng.normal(1.5, 1, size=(100, 3))])
    out = dataset_inference(suspect, rng.normal(size=(200, 3)), seed=1)
    assert out["detected"] and out["p_value"] < 1e-4 and out["statistic"] > 0
    assert (out["n_suspect_test"], out["n_validation_test"]) == (200, 100)
    assert out["false_positive_check"]["passed"] and len(out["weights"]) == 3


def test_level_under_the_null_and_the_held_out_t_test():
    rng = np.random.default_rng(4)
    p = np.array([dataset_inference(rng.normal(size=(120, 2)), rng.normal(size=(60, 2)), seed=i)["p_value"]
                  for i in range(100)])
    assert np.mean(p <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 100)
    assert stats.kstest(p, "uniform").pvalue > 0.001  # p-values uniform under H0 (asymptotic level)


def test_one_feature_and_errors():
    rng = np.random.default_rng(2)
    out = dataset_inference(rng.normal(2, 1, 50), rng.normal(size=40))
    assert out["detected"] and len(out["weights"]) == 1
    with pytest.raises(BlackboxMIAError, match="differ"):
        dataset_inference(rng.normal(size=(50, 2)), rng.normal(size=(40, 3)))
    with pytest.raises(BlackboxMIAError, match="validation"):
        dataset_inference(rng.normal(size=50), rng.normal(size=7))
    with pytest.raises(BlackboxMIAError):
        dataset_inference([np.nan] * 10, rng.normal(size=40))
