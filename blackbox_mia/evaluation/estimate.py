"""A contamination estimate you can defend: the whole procedure bootstrapped, identifiability
checked, and a lower bound that needs no member (docs/design.md §5).

:func:`estimate_prevalence` takes three disjoint score sets — the benchmark items being
swept, known non-members and (optionally) known members — and

1. chooses the threshold on the calibration scores (:func:`~.calibration.calibrate`);
2. estimates the member fraction of the benchmark by Rogan–Gladen,
   (flag − FPR)/(TPR − FPR), with the FPR of a conformal threshold estimated by its exact
   expectation (k + 1)/(n + 1) (k of n non-members above it: the in-sample k/n is biased low,
   because the threshold was chosen on the same non-members);
3. bootstraps the whole procedure (Efron & Tibshirani 1993, ch. 6): each resample draws the
   non-members (smoothed: :func:`smoothed_resamples`) and the members with replacement,
   chooses the threshold again on them, and
   draws the benchmark's flagged count at that threshold (Binomial(n_b, share of the benchmark
   above it): the exact law of a resampled benchmark's count), so the numerator
   N = flag − FPR and the denominator D = TPR − FPR carry the benchmark's, the FPR's, the TPR's
   and the threshold choice's uncertainty, and their covariance;
4. gives Fieller's interval for the ratio N/D (Fieller 1954, "Some problems in interval
   estimation"): the p with (N − pD)² ≤ z²·Var(N − pD), Var from the bootstrap covariance,
   clipped to [0, 1]. Unlike a percentile interval of the ratio it stays honest when D is
   small (dup-2 canary, 100 splits: percentile 0.38 of identifiable splits covered, Fieller 0.93);
5. declares the estimate "not identifiable at this signal" when the (1 − alpha/2) lower bound
   of TPR − FPR (Youden's J), D − z·sd(D), is ≤ ``margin``: the ratio then divides by a number
   that may be 0 (Fieller's interval would be unbounded), and no point estimate is given;
6. always reports the one-sided lower bound of :func:`~.prevalence.prevalence_lower_bound`,
   valid whatever the TPR — the headline when no member is known.

"Confident" below means identifiable with an interval that excludes 0 (``detected``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ..types import BlackboxMIAError
from .calibration import RULES, calibrate, conformal_rank
from .prevalence import (
    _rogan_gladen,
    clopper_pearson,
    finite_scores,
    prevalence_lower_bound,
)

IDENTIFIABILITY_MARGIN = 0.05  # the lower bound of TPR − FPR must exceed this (fraction)
HELP_NOT_IDENTIFIABLE = (
    "more calibration members (the TPR's CI narrows as 1/sqrt(n)), longer texts (more tokens per "
    "score), or a scorer that separates better (bbmia eval compares them)"
)


def estimate_prevalence(
    benchmark_scores,
    cal_nonmember_scores,
    cal_member_scores=None,
    *,
    rule: str = "fpr",
    target_fpr: float = 0.05,
    tpr: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    margin: float = IDENTIFIABILITY_MARGIN,
) -> dict:
    """Member fraction of the benchmark with a whole-procedure bootstrap CI (see the module).

    The three score sets must be disjoint (the caller drops calibration items from the
    benchmark); flags are ``score > threshold``.

    Args:
        benchmark_scores: shape (n_b,), the swept items (unlabelled).
        cal_nonmember_scores: shape (n0,), known non-members.
        cal_member_scores: shape (n1,), known members, or None.
        rule: threshold rule, one of ``RULES`` (``max_*`` need members).
        target_fpr: α of rule ``fpr`` (fraction).
        tpr: keyword-only, an assumed TPR when no member is known (the CI then ignores its
            uncertainty; without members and without it, only the lower bound is given).
        n_boot: bootstrap resamples (≥ 2: the interval needs their covariance).
        seed: numpy Generator seed.
        alpha: the CI covers 1 − alpha; the lower bounds are one-sided at 1 − alpha.
        margin: identifiability margin on the lower bound of TPR − FPR.

    Returns:
        A dict: ``threshold`` (:class:`~.calibration.Threshold` as dict), ``n_benchmark``,
        ``n_flagged``, ``flag_rate``, ``n_cal_nonmembers``, ``n_false_positives``,
        ``fpr_in_sample`` (k/n0) with ``fpr_ci`` (Clopper–Pearson, 1 − alpha), ``fpr`` (the
        value used in the correction), ``target_fpr``, ``n_cal_members``, ``tpr`` with
        ``tpr_ci``, ``tpr_source``, ``youden_j`` and ``youden_j_lower``, ``identifiable``
        (None when the TPR is unknown), ``estimate`` and ``ci`` (None when not identifiable or
        TPR unknown), ``detected`` (the CI excludes 0; None without a CI), ``ci_level``,
        ``lower_bound`` (:func:`prevalence_lower_bound`), ``method``, ``n_boot``, ``notes``.

    Raises:
        BlackboxMIAError: empty or non-finite scores, bad rule/target/alpha/n_boot/margin,
            members together with ``tpr``, ``tpr`` outside (0, 1], a ``max_*`` rule without
            members.
    """
    bench = finite_scores(benchmark_scores, "benchmark")
    neg = finite_scores(cal_nonmember_scores, "calibration non-member")
    pos = None if cal_member_scores is None else finite_scores(cal_member_scores, "calibration member")
    if pos is not None and tpr is not None:
        raise BlackboxMIAError("give member scores or an assumed tpr, not both")
    if tpr is not None and not 0 < tpr <= 1:
        raise BlackboxMIAError(f"tpr must be in (0, 1], got {tpr}")
    if int(n_boot) < 2 or not 0 < alpha < 1 or not 0 <= margin < 1:
        raise BlackboxMIAError(f"need n_boot >= 2, alpha in (0, 1), margin in [0, 1); got {n_boot}, {alpha}, {margin}")
    if rule not in RULES:
        raise BlackboxMIAError(f"unknown threshold rule {rule!r}; choose from {RULES}")
    threshold = calibrate(neg, pos, rule, target_fpr)
    t = threshold.value
    n_b, n0 = len(bench), len(neg)
    n_flagged, k = int(np.sum(bench > t)), int(np.sum(neg > t))
    fpr = _fpr_estimate(k, n0, rule)
    notes = []
    if threshold.note:
        notes.append(threshold.note)
    out = {
        "threshold": threshold.to_dict(),
        "n_benchmark": n_b,
        "n_flagged": n_flagged,
        "flag_rate": n_flagged / n_b,
        "n_cal_nonmembers": n0,
        "n_false_positives": k,
        "fpr_in_sample": k / n0,
        "fpr_ci": list(clopper_pearson(k, n0, alpha)),
        "fpr": fpr,
        "target_fpr": float(target_fpr) if rule == "fpr" else None,
        "n_cal_members": 0 if pos is None else len(pos),
        "lower_bound": prevalence_lower_bound(n_flagged, n_b, k, n0, alpha),
        "ci_level": 1 - alpha,
        "method": "Rogan-Gladen correction; Fieller interval for (flag - FPR)/(TPR - FPR) with the covariance of a "
        "whole-procedure bootstrap (non-members and members resampled, threshold re-chosen, benchmark flags redrawn)",
        "n_boot": int(n_boot),
    }
    if pos is None and tpr is None:
        return {**out, "tpr": None, "tpr_ci": None, "tpr_source": None, "youden_j": None, "youden_j_lower": None,
                "identifiable": None, "estimate": None, "ci": None, "detected": None,
                "notes": notes + ["No known members: the TPR is unknown, so only the lower bound is given."]}
    rng = np.random.default_rng(seed)
    fpr_b, tpr_b, flag_b = _bootstrap(bench, neg, pos, tpr, rule, target_fpr, int(n_boot), rng)
    if pos is not None:
        tpr_value, tpr_ci, source = float(np.mean(pos > t)), list(clopper_pearson(int(np.sum(pos > t)), len(pos), alpha)), "calibration members"
    else:
        tpr_value, tpr_ci, source = float(tpr), None, "assumed"
        notes.append("TPR was given as a number: the CI ignores its uncertainty.")
    flag = n_flagged / n_b
    z = float(stats.norm.ppf(1 - alpha / 2))
    cov = np.cov(np.vstack([flag_b - fpr_b, tpr_b - fpr_b]))
    j_lower = float(tpr_value - fpr - z * math.sqrt(cov[1, 1]))
    identifiable = j_lower > margin
    estimate = ci = detected = None
    if identifiable:
        estimate = float(_rogan_gladen(np.float64(flag), np.float64(fpr), np.float64(tpr_value)))
        ci = _fieller(flag - fpr, tpr_value - fpr, cov, z)
        detected = ci[0] > 0
    else:
        notes.append(f"not identifiable at this signal: the {1 - alpha / 2:g} lower bound of TPR - FPR is {j_lower:.3f} "
                     f"(<= {margin:g}), so the corrected prevalence would divide by a number that may be 0; no "
                     f"point estimate. What would help: {HELP_NOT_IDENTIFIABLE}. The lower bound stays valid.")
    return {**out, "tpr": tpr_value, "tpr_ci": tpr_ci, "tpr_source": source, "youden_j": tpr_value - fpr,
            "youden_j_lower": j_lower, "identifiable": bool(identifiable), "estimate": estimate, "ci": ci,
            "detected": detected, "notes": notes}


def _fieller(n: float, d: float, cov: np.ndarray, z: float) -> list[float]:
    """Fieller's interval for n/d, clipped to [0, 1]: the roots of
    (d² − z²v_dd)p² − 2(nd − z²v_nd)p + (n² − z²v_nn) = 0, for d significantly > 0 (then the
    leading coefficient is > 0 and the quadratic is ≤ 0 at p = n/d, so both roots are real)."""
    a = d * d - z * z * cov[1, 1]
    half_b = n * d - z * z * cov[0, 1]
    c = n * n - z * z * cov[0, 0]
    root = math.sqrt(max(0.0, half_b * half_b - a * c))
    return [min(1.0, max(0.0, (half_b - root) / a)), min(1.0, max(0.0, (half_b + root) / a))]


def _fpr_estimate(k, n: int, rule: str):
    """The FPR of the chosen threshold used in the correction, for k (an int or an array) of n
    non-members above it: (k + 1)/(n + 1) for rule ``fpr`` (the exact mean of its
    Beta(k + 1, n − k) law), the in-sample k/n for the ``max_*`` rules."""
    return (k + 1) / (n + 1) if rule == "fpr" else k / n


def smoothed_resamples(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` smoothed bootstrap resamples of ``values``, shape (n_boot, n): each a resample
    with replacement plus Gaussian noise of Silverman's bandwidth h = 0.9·min(sd, IQR/1.34)·n^(−1/5),
    shrunk towards the mean by 1/sqrt(1 + h²/sd²) so the variance is kept (Silverman 1986 §6.4.1;
    Hall, DiCiccio & Romano 1989, "On smoothing and the bootstrap").

    A plain resample can only put a high quantile on one of the few largest values, so the
    threshold's FPR varies too little between resamples (with 50 non-members at a 5% target the
    threshold is the second largest); smoothing gives it its continuous spread. Constant
    ``values`` are resampled unsmoothed.
    """
    n = len(values)
    draws = values[rng.integers(0, n, (n_boot, n))]
    sd = float(np.std(values, ddof=1)) if n > 1 else 0.0
    iqr = float(np.subtract(*np.percentile(values, [75, 25])))
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    if sd == 0 or spread == 0:
        return draws
    h = 0.9 * spread * n ** -0.2
    mean = float(np.mean(values))
    return mean + (draws - mean + h * rng.standard_normal(draws.shape)) / math.sqrt(1 + h * h / (sd * sd))


def _bootstrap(bench: np.ndarray, neg: np.ndarray, pos: np.ndarray | None, tpr: float | None, rule: str,
               target_fpr: float, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr_b, tpr_b, flag_b)``, each of shape (n_boot,): the procedure rerun on resamples."""
    n0 = len(neg)
    neg_b = np.sort(smoothed_resamples(neg, n_boot, rng), axis=1)
    pos_b = None if pos is None else pos[rng.integers(0, len(pos), (n_boot, len(pos)))]
    if rule == "fpr":
        t_b = neg_b[:, conformal_rank(n0, target_fpr) - 1]
    else:
        t_b = np.array([calibrate(neg_b[i], pos_b[i], rule).value for i in range(n_boot)])
    k_b = np.sum(neg_b > t_b[:, None], axis=1)
    fpr_b = _fpr_estimate(k_b, n0, rule)
    tpr_b = np.full(n_boot, float(tpr)) if pos_b is None else np.mean(pos_b > t_b[:, None], axis=1)
    sorted_bench = np.sort(bench)
    above = 1 - np.searchsorted(sorted_bench, t_b, side="right") / len(bench)
    flag_b = rng.binomial(len(bench), above) / len(bench)
    return fpr_b, tpr_b, flag_b
