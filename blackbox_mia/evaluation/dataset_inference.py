"""Dataset inference (Maini et al. 2024, "LLM Dataset Inference", NeurIPS; reference code
pratyushmaini/llm_dataset_inference, ``linear_di.py``): is a suspect set in the training data?

Every item has F membership features (the scores of several scorers). The suspect items and
the validation items (known non-members of the same distribution) are each split at random into
halves A and B; a linear model learns on A to tell suspect from validation; on B its outputs
for the suspect half are compared with those for the validation half by a one-sided Welch
t-test (H1: suspect higher). The model never sees B, so under H0 (suspect and validation drawn
alike) the B outputs of both are exchangeable and the t-test's level holds asymptotically (its
normal approximation needs tens of items per half; it is not exact). The paper's false-positive
check runs the same procedure with two random halves of the validation set as "suspect" and
"validation": its p-value should be large, and it is reported beside every verdict.

The linear model here is a class-balanced logistic regression on features standardised on
half A (the paper trains a linear layer with a sigmoid; the fitted direction is the same family).
"""

from __future__ import annotations

import numpy as np

from ..types import BlackboxMIAError

MIN_PER_HALF = 2  # items of each set in each half (the t-test needs 2 per group)


def _features(values, what: str) -> np.ndarray:
    """``values`` as a finite (items, features) float64 array; BlackboxMIAError otherwise."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or not np.isfinite(arr).all():
        raise BlackboxMIAError(f"{what} features must be a finite (items, features) array")
    return arr


def _halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random split of range(n) into halves A (n // 2 items) and B (the rest)."""
    order = rng.permutation(n)
    return order[: n // 2], order[n // 2:]


def _infer(suspect: np.ndarray, validation: np.ndarray, rng: np.random.Generator) -> dict:
    """One run of the procedure (see the module docstring) on (items, F) arrays."""
    s_a, s_b = _halves(len(suspect), rng)
    v_a, v_b = _halves(len(validation), rng)
    train = np.concatenate([suspect[s_a], validation[v_a]])
    mean, sd = train.mean(axis=0), train.std(axis=0)
    sd[sd == 0] = 1.0
    y = np.r_[np.ones(len(s_a)), np.zeros(len(v_a))]
    from scipy import stats  # imported where used: the CLI starts without scipy and sklearn
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(class_weight="balanced", max_iter=1000).fit((train - mean) / sd, y)
    out_s = model.decision_function((suspect[s_b] - mean) / sd)
    out_v = model.decision_function((validation[v_b] - mean) / sd)
    test = stats.ttest_ind(out_s, out_v, equal_var=False, alternative="greater")
    return {"p_value": float(test.pvalue), "statistic": float(test.statistic), "weights": model.coef_[0].tolist(),
            "n_suspect_test": len(s_b), "n_validation_test": len(v_b)}


def dataset_inference(suspect_features, validation_features, *, alpha: float = 0.05, seed: int = 0) -> dict:
    """Maini et al.'s dataset inference, with its two-validation-halves false-positive check.

    Args:
        suspect_features: shape (N, F) (or (N,) for one feature), the suspect (swept) items.
        validation_features: shape (n, F), known non-members; n ≥ 8 (the check halves it, then
            each run halves again).
        alpha: the verdict's level (fraction).
        seed: seed of the random halves.

    Returns:
        ``{"test", "detected" (p ≤ alpha), "p_value", "statistic", "weights" (per standardised
        feature), "n_suspect_test", "n_validation_test", "false_positive_check" ({"p_value",
        "statistic", "passed" (p > alpha)}), "alpha", "level", "method"}``.

    Raises:
        BlackboxMIAError: non-finite features, feature counts that differ, alpha outside (0, 1),
            fewer than 2 suspect items per half or fewer than 8 validation items.
    """
    suspect = _features(suspect_features, "suspect")
    validation = _features(validation_features, "validation")
    if suspect.shape[1] != validation.shape[1]:
        raise BlackboxMIAError(f"suspect and validation features differ: {suspect.shape[1]} vs {validation.shape[1]}")
    if not 0 < alpha < 1:
        raise BlackboxMIAError(f"alpha must be in (0, 1), got {alpha}")
    if len(suspect) < 2 * MIN_PER_HALF or len(validation) < 4 * MIN_PER_HALF:
        raise BlackboxMIAError(f"dataset inference needs >= {2 * MIN_PER_HALF} suspect and >= {4 * MIN_PER_HALF} "
                               f"validation items; got {len(suspect)} and {len(validation)}")
    rng = np.random.default_rng(seed)
    main = _infer(suspect, validation, rng)
    v1, v2 = _halves(len(validation), rng)
    check = _infer(validation[v1], validation[v2], rng)
    return {
        "test": "dataset inference (Maini et al. 2024)",
        "detected": main["p_value"] <= alpha,
        **main,
        "false_positive_check": {"p_value": check["p_value"], "statistic": check["statistic"],
                                 "passed": check["p_value"] > alpha},
        "alpha": alpha,
        "level": "asymptotic (Welch t-test on held-out halves)",
        "method": "logistic regression on half A (suspect vs validation, class-balanced, features standardised on "
                  "A); one-sided Welch t-test of its outputs on half B; the same with two validation halves as the "
                  "false-positive check",
    }
