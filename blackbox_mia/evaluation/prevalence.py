"""How much of a benchmark leaked: corrected flag rates and dataset-level tests.

The raw fraction of benchmark items flagged by a threshold mixes true detections with false
positives. With the threshold's false-positive rate (FPR, from known non-members) and
true-positive rate (TPR, from known members), the Rogan–Gladen estimator (Rogan & Gladen 1978,
"Estimating prevalence from the results of a screening test") corrects it (docs/design.md §5):

    prevalence = (flag_rate − FPR) / (TPR − FPR), clipped to [0, 1].

At dataset level, Maini et al. 2024 ("LLM Dataset Inference") compare suspect and held-out
scores with a one-sided t-test and report p-values.
"""

from __future__ import annotations

import numpy as np

from ..types import BlackboxMIAError


def corrected_prevalence(flag_rate: float, fpr: float, tpr: float) -> float:
    """Rogan–Gladen prevalence estimate, clip((flag − FPR)/(TPR − FPR), 0, 1).

    Args:
        flag_rate: fraction of benchmark items flagged, in [0, 1].
        fpr: the threshold's false-positive rate on non-members, in [0, 1].
        tpr: the threshold's true-positive rate on members, in [0, 1].

    Returns:
        Estimated fraction of members in the benchmark, in [0, 1].

    Raises:
        BlackboxMIAError: a rate outside [0, 1] (or NaN), or TPR ≤ FPR — the threshold then
            does not separate members from non-members and the prevalence is not identifiable.
    """
    for name, value in (("flag_rate", flag_rate), ("fpr", fpr), ("tpr", tpr)):
        if not 0 <= value <= 1:  # also rejects NaN
            raise BlackboxMIAError(f"{name} must be a rate in [0, 1], got {value}")
    if tpr <= fpr:
        raise BlackboxMIAError(
            f"TPR ({tpr:.4g}) ≤ FPR ({fpr:.4g}): the threshold does not separate members from "
            "non-members, so the prevalence cannot be estimated"
        )
    return float(_rogan_gladen(np.float64(flag_rate), np.float64(fpr), np.float64(tpr)))


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact two-sided (1 − alpha) confidence interval of a binomial proportion from k of n
    (Clopper & Pearson 1934): ``(Beta(alpha/2; k, n−k+1), Beta(1−alpha/2; k+1, n−k))``, with 0
    and 1 at k = 0 and k = n. Each end alone is a one-sided (1 − alpha/2) bound.

    Raises:
        BlackboxMIAError: n < 1, k outside [0, n], alpha outside (0, 1).
    """
    from scipy import stats

    if n < 1 or not 0 <= k <= n or not 0 < alpha < 1:
        raise BlackboxMIAError(f"Clopper-Pearson needs 0 <= k <= n, n >= 1, alpha in (0, 1); got {k}, {n}, {alpha}")
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def prevalence_lower_bound(n_flagged: int, n_benchmark: int, n_false_positives: int, n_nonmembers: int,
                           alpha: float = 0.05) -> dict:
    """One-sided (1 − alpha) lower confidence bound on the member fraction, needing no member.

    Whatever the TPR, the expected flag rate is p·TPR + (1 − p)·FPR ≤ p + (1 − p)·FPR, so
    p ≥ (flag − FPR)/(1 − FPR). The bound plugs in a lower bound of the flag rate and an upper
    bound of the FPR, each an exact one-sided (1 − alpha/2) Clopper–Pearson bound (Bonferroni:
    the two fail together with probability ≤ alpha):

        lower = max(0, (flag_lower − FPR_upper) / (1 − FPR_upper)).

    The FPR bound stays exact when the threshold is the conformal order statistic of the same
    non-members (rule ``fpr``): the threshold's true FPR is then Beta(k + 1, n − k) with k the
    non-members above it (:func:`~blackbox_mia.evaluation.calibration.conformal_rank`). On a
    benchmark without members the bound is > 0 with probability ≤ alpha.

    Args:
        n_flagged: benchmark items with score > threshold, of ``n_benchmark`` (items).
        n_false_positives: calibration non-members with score > threshold, of ``n_nonmembers``.
        alpha: the bound holds with probability ≥ 1 − alpha.

    Returns:
        ``{"lower_bound", "confidence", "flag_rate_lower", "fpr_upper", "method"}`` (fractions).

    Raises:
        BlackboxMIAError: counts outside [0, n], empty sets, alpha outside (0, 1).
    """
    flag_lower = clopper_pearson(n_flagged, n_benchmark, alpha)[0]
    fpr_upper = clopper_pearson(n_false_positives, n_nonmembers, alpha)[1]
    bound = 0.0 if fpr_upper >= 1 else max(0.0, (flag_lower - fpr_upper) / (1 - fpr_upper))
    return {
        "lower_bound": bound,
        "confidence": 1 - alpha,
        "flag_rate_lower": flag_lower,
        "fpr_upper": fpr_upper,
        "method": "(flag_lower - FPR_upper) / (1 - FPR_upper), one-sided Clopper-Pearson bounds at "
        f"{1 - alpha / 2:g} each (Bonferroni); valid whatever the TPR",
    }


def dataset_level_test(benchmark_scores, control_scores) -> dict:
    """One-sided Welch t-test that benchmark scores are higher than control scores.

    Maini et al. 2024 ("LLM Dataset Inference") test suspect against held-out data at the
    dataset level, where single-text MIAs are weak. H0: mean(benchmark) ≤ mean(control);
    H1: mean(benchmark) > mean(control); unequal variances (scipy.stats.ttest_ind,
    ``equal_var=False, alternative="greater"``). The control set must come from the same
    distribution as the benchmark apart from membership, or the test detects the shift.

    Args:
        benchmark_scores: shape (n_b,), n_b ≥ 2, suspect items (higher = member).
        control_scores: shape (n_c,), n_c ≥ 2, known non-members.

    Returns:
        ``{"test", "statistic", "p_value", "mean_benchmark", "mean_control",
        "mean_difference", "n_benchmark", "n_control"}``; statistic and p_value are NaN (and
        a ``note`` is added) when both sets are constant and equal.

    Raises:
        BlackboxMIAError: fewer than 2 scores in a set, or non-finite scores.
    """
    from scipy import stats

    bench = finite_scores(benchmark_scores, "benchmark")
    control = finite_scores(control_scores, "control")
    if len(bench) < 2 or len(control) < 2:
        raise BlackboxMIAError("the t-test needs at least 2 benchmark and 2 control scores")
    result = stats.ttest_ind(bench, control, equal_var=False, alternative="greater")
    out = {
        "test": "one-sided Welch t-test, H1: mean(benchmark) > mean(control)",
        "statistic": float(result.statistic),
        "p_value": float(result.pvalue),
        "mean_benchmark": float(bench.mean()),
        "mean_control": float(control.mean()),
        "mean_difference": float(bench.mean() - control.mean()),
        "n_benchmark": len(bench),
        "n_control": len(control),
    }
    if np.isnan(out["p_value"]):
        out["note"] = "both score sets are constant and equal: the t-test is undefined"
    return out


def _rogan_gladen(flag: np.ndarray, fpr: np.ndarray, tpr: np.ndarray) -> np.ndarray:
    """Vectorised clip((flag − fpr)/(tpr − fpr), 0, 1); NaN where tpr ≤ fpr."""
    denom = tpr - fpr
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.where(denom > 0, (flag - fpr) / np.where(denom > 0, denom, 1.0), np.nan)
    return np.clip(raw, 0.0, 1.0)


def finite_scores(values, what: str) -> np.ndarray:
    """``values`` as a float64 1-D array; BlackboxMIAError when empty, not 1-D, or not finite."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise BlackboxMIAError(f"{what} scores must be a non-empty 1-D array")
    if not np.isfinite(arr).all():
        raise BlackboxMIAError(f"{what} scores contain NaN or infinite values")
    return arr
