"""A contamination estimate you can defend: an exact, distribution-free interval, identifiability
checked, and a lower bound that needs no member (docs/design.md §5).

:func:`estimate_prevalence` takes three disjoint score sets — the benchmark items being
swept, known non-members and (optionally) known members — chooses the threshold t on the
calibration scores (:func:`~.calibration.calibrate`) and bounds the three rates that make up
the member fraction π of the swept items, each by an exact law:

* FPR: with rule ``fpr``, t is the conformal order statistic of the n non-members, k of them
  above it, and the true FPR of t (over calibration draws exchangeable with the swept
  non-members) is exactly Beta(k + 1, n − k) (Vovk et al. 2005; Vovk 2012; Angelopoulos &
  Bates 2021 §3.2): its quantiles are the bounds, and its mean (k + 1)/(n + 1) the value used
  in the point estimate (the in-sample k/n is biased low, because t was chosen on these
  non-members);
* TPR: t depends on non-members only, so given t the m calibration members' flags are
  Binomial(m, TPR): Clopper–Pearson (Clopper & Pearson 1934);
* flag rate: given t the swept items' flagged count is a sum of Binomial(π·N, TPR) and
  Binomial((1 − π)·N, FPR), less variable than Binomial(N, f) with f = π·TPR + (1 − π)·FPR,
  so the Clopper–Pearson bounds of f are valid (conservative).

π = (f − FPR)/(TPR − FPR) rises with f and falls with FPR and TPR (for f between FPR and TPR),
so the interval is [(f_lo − FPR_hi)/(TPR_hi − FPR_hi), (f_hi − FPR_lo)/(TPR_lo − FPR_lo)],
clipped to [0, 1], with each of the six one-sided bounds at level alpha/6 (Bonferroni: the
interval covers with probability ≥ 1 − alpha, each side misses with probability ≤ alpha/2,
whatever the score distributions). The estimate is "not identifiable at this signal" when
TPR_lo − FPR_hi ≤ ``margin`` (the same simultaneous bounds): no point estimate and no interval
then (the selection at weak signal inflates what passes; the lower bound is the number). The
one-sided lower bound of :func:`~.prevalence.prevalence_lower_bound`, valid whatever the TPR,
is always given — the headline when no member is known. "Detected" means the interval's lower
end is above 0.

The ``max_*`` rules choose t on the members too: their bounds are Clopper–Pearson for FPR and
TPR at the chosen t, which ignores that selection (a note says so).
"""

from __future__ import annotations

import numpy as np

from ..key_aliases import PREVALENCE_KEYS, with_old_keys
from ..types import BlackboxMIAError
from .calibration import RULES, Threshold, calibrate
from .prevalence import (
    _rogan_gladen,
    clopper_pearson,
    finite_scores,
    prevalence_lower_bound,
)

IDENTIFIABILITY_MARGIN = 0.05  # the simultaneous lower bound of TPR − FPR must exceed this (fraction)
N_BOUNDED_RATES = 3  # flag rate, FPR and TPR: alpha is split over their two-sided bounds (Bonferroni)
CORRECTED_KEYS = ("tpr", "tpr_ci", "tpr_source", "bounds", "youden_j", "youden_j_lower", "identifiable", "estimate",
                  "ci", "detected")  # estimate_prevalence's keys that need a TPR (None without one)
HELP_NOT_IDENTIFIABLE = (
    "more calibration members (the TPR's CI narrows as 1/sqrt(n)), more calibration non-members, longer "
    "texts (more tokens per score), or a scorer that separates better (bbmia eval compares them)"
)


def estimate_prevalence(
    benchmark_scores,
    cal_nonmember_scores,
    cal_member_scores=None,
    *,
    rule: str = "fpr",
    target_fpr: float = 0.05,
    tpr: float | None = None,
    alpha: float = 0.05,
    margin: float = IDENTIFIABILITY_MARGIN,
) -> dict:
    """Member fraction of the swept benchmark with an exact simultaneous interval (see the module).

    The three score sets must be disjoint (the caller drops calibration items from the
    benchmark); flags are ``score > threshold``.

    Args:
        benchmark_scores: shape (n_b,), the swept items (unlabelled).
        cal_nonmember_scores: shape (n0,), known non-members.
        cal_member_scores: shape (n1,), known members, or None.
        rule: threshold rule, one of ``RULES`` (``max_*`` need members).
        target_fpr: α of rule ``fpr`` (fraction).
        tpr: keyword-only, an assumed TPR when no member is known (taken as exact: the
            interval then ignores its uncertainty; without members and without it, only the
            lower bound is given).
        alpha: the interval covers with probability ≥ 1 − alpha; the lower bound is one-sided
            at 1 − alpha.
        margin: identifiability margin on the simultaneous lower bound of TPR − FPR.

    Returns:
        A dict: ``threshold`` (:class:`~.calibration.Threshold` as dict), ``n_benchmark``,
        ``n_flagged``, ``flag_rate``, ``n_cal_nonmembers``, ``n_false_positives``,
        ``realised_fpr`` (k/n0, measured) with ``realised_fpr_ci`` (Clopper–Pearson, 1 − alpha),
        ``estimated_fpr`` (the threshold's FPR on new non-members used in the point estimate:
        (k+1)/(n0+1) under rule ``fpr``, else k/n0), ``target_fpr``, ``n_cal_members``, ``tpr`` with
        ``tpr_ci`` (Clopper–Pearson, 1 − alpha), ``tpr_source``, ``bounds`` (``flag_rate``,
        ``fpr``, ``tpr``: the simultaneous [lo, hi] of each rate, each two-sided at
        ``bounds["level"]`` = 1 − alpha/3), ``youden_j`` and ``youden_j_lower`` (TPR_lo −
        FPR_hi), ``identifiable`` (None when the TPR is unknown), ``estimate`` (None when not
        identifiable or TPR unknown) and ``ci`` (likewise), ``detected`` (the interval's lower
        end > 0; None without an interval), ``ci_level``, ``lower_bound``
        (:func:`prevalence_lower_bound`), ``method``, ``notes``. All rates are fractions. For one
        release the renamed keys are also written under their old names (``fpr_in_sample``,
        ``fpr_ci``, ``fpr``: :data:`blackbox_mia.key_aliases.PREVALENCE_KEYS`).

    Raises:
        BlackboxMIAError: empty or non-finite scores, bad rule/target/alpha/margin, members
            together with ``tpr``, ``tpr`` outside (0, 1], a ``max_*`` rule without members.
    """
    bench, neg, pos = _checked(benchmark_scores, cal_nonmember_scores, cal_member_scores, rule, tpr, alpha, margin)
    threshold = calibrate(neg, pos, rule, target_fpr)
    out = _measured(bench, neg, pos, threshold, rule, target_fpr, alpha)
    notes = [threshold.note] if threshold.note else []
    if pos is None and tpr is None:
        return {**with_old_keys(out, PREVALENCE_KEYS), **dict.fromkeys(CORRECTED_KEYS),
                "notes": notes + ["No known members: the TPR is unknown, so only the lower bound is given."]}
    side = alpha / N_BOUNDED_RATES  # two-sided miss rate of each rate's bounds: alpha/6 per side
    tpr_value, tpr_ci, source, tpr_bounds = _tpr(pos, tpr, threshold.value, alpha, side)
    negatives = (out["n_false_positives"], out["n_cal_nonmembers"], side)
    bounds = {"flag_rate": list(clopper_pearson(out["n_flagged"], out["n_benchmark"], side)),
              "fpr": list(fpr_bounds(*negatives) if rule == "fpr" else clopper_pearson(*negatives)),
              "tpr": list(tpr_bounds), "level": 1 - side}
    if pos is None:
        notes.append("TPR was given as a number: the interval ignores its uncertainty.")
    elif rule != "fpr":
        notes.append(f"rule {rule} chose the threshold on the members too: the TPR and FPR bounds ignore that "
                     "selection (optimistic); rule fpr gives exact ones.")
    j_lower = bounds["tpr"][0] - bounds["fpr"][1]
    identifiable = j_lower > margin
    estimate = ci = None
    if identifiable:
        estimate = float(_rogan_gladen(out["flag_rate"], out["estimated_fpr"], tpr_value))
        ci = _interval(bounds)
    else:
        notes.append(not_identifiable_note(j_lower, margin))
    return {**with_old_keys(out, PREVALENCE_KEYS), "tpr": tpr_value, "tpr_ci": tpr_ci, "tpr_source": source,
            "bounds": bounds, "youden_j": tpr_value - out["estimated_fpr"], "youden_j_lower": j_lower,
            "identifiable": bool(identifiable), "estimate": estimate, "ci": ci,
            "detected": None if ci is None else ci[0] > 0, "notes": notes}


def not_identifiable_note(j_lower: float, margin: float) -> str:
    """The report's note when the estimate is not identifiable: the simultaneous lower bound of
    TPR − FPR (``j_lower``, a fraction) is at most ``margin``."""
    return (f"not identifiable at this signal: the simultaneous lower bound of TPR - FPR is {j_lower:.3f} "
            f"(<= {margin:g}), so the corrected prevalence would divide by a number that may be 0; no "
            f"point estimate and no interval. What would help: {HELP_NOT_IDENTIFIABLE}. The lower bound "
            "stays valid.")


def _measured(bench: np.ndarray, neg: np.ndarray, pos: np.ndarray | None, threshold: Threshold, rule: str,
              target_fpr: float, alpha: float) -> dict:
    """What the threshold gives on the scores before any correction: counts and rates of the swept
    items and the calibration non-members (:func:`estimate_prevalence`'s keys ``threshold`` ...
    ``method``, under their current names), and the lower bound that needs no member."""
    t, n_b, n0 = threshold.value, len(bench), len(neg)
    n_flagged, k = int((bench > t).sum()), int((neg > t).sum())
    return {
        "threshold": threshold.to_dict(),
        "n_benchmark": n_b,
        "n_flagged": n_flagged,
        "flag_rate": n_flagged / n_b,
        "n_cal_nonmembers": n0,
        "n_false_positives": k,
        "realised_fpr": k / n0,
        "realised_fpr_ci": list(clopper_pearson(k, n0, alpha)),
        "estimated_fpr": (k + 1) / (n0 + 1) if rule == "fpr" else k / n0,
        "target_fpr": float(target_fpr) if rule == "fpr" else None,
        "n_cal_members": 0 if pos is None else len(pos),
        "lower_bound": prevalence_lower_bound(n_flagged, n_b, k, n0, alpha),
        "ci_level": 1 - alpha,
        "method": "exact simultaneous bounds (Bonferroni, alpha/6 per side): conformal Beta(k+1, n-k) law of the "
        "threshold's FPR, Clopper-Pearson for the TPR and the flag rate; interval for (flag - FPR)/(TPR - FPR) "
        "at the corners of their box",
    }


def _checked(benchmark_scores, cal_nonmember_scores, cal_member_scores, rule: str, tpr: float | None, alpha: float,
             margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`estimate_prevalence`'s arguments checked: the three score sets as finite float arrays
    (members ``None`` when not given).

    Raises:
        BlackboxMIAError: as :func:`estimate_prevalence`.
    """
    bench = finite_scores(benchmark_scores, "benchmark")
    neg = finite_scores(cal_nonmember_scores, "calibration non-member")
    pos = None if cal_member_scores is None else finite_scores(cal_member_scores, "calibration member")
    if pos is not None and tpr is not None:
        raise BlackboxMIAError("give member scores or an assumed tpr, not both")
    if tpr is not None and not 0 < tpr <= 1:
        raise BlackboxMIAError(f"tpr must be in (0, 1], got {tpr}")
    if not 0 < alpha < 1 or not 0 <= margin < 1:
        raise BlackboxMIAError(f"need alpha in (0, 1) and margin in [0, 1); got {alpha}, {margin}")
    if rule not in RULES:
        raise BlackboxMIAError(f"unknown threshold rule {rule!r}; choose from {RULES}")
    return bench, neg, pos


def _tpr(pos: np.ndarray | None, tpr: float | None, t: float, alpha: float,
         side: float) -> tuple[float, list[float] | None, str, tuple[float, float]]:
    """The TPR at threshold ``t``: ``(value, its Clopper-Pearson 1 − alpha interval, source, its
    two-sided bounds at miss rate side)`` from the calibration members' flags (``score > t``), or the
    assumed ``tpr`` taken as exact (no interval, bounds equal to it) when no member is given."""
    if pos is None:
        return float(tpr), None, "assumed", (float(tpr), float(tpr))
    tp = int((pos > t).sum())
    return tp / len(pos), list(clopper_pearson(tp, len(pos), alpha)), "calibration members", clopper_pearson(
        tp, len(pos), side)


def fpr_bounds(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 − alpha) bounds of the true FPR of a conformal threshold with k of n
    calibration non-members above it: the alpha/2 and 1 − alpha/2 quantiles of its exact law
    Beta(k + 1, n − k) (continuous scores; ties only lower the true FPR, so the upper bound
    stays valid). The upper bound equals Clopper–Pearson's; the lower one is tighter.

    Raises:
        BlackboxMIAError: k outside [0, n − 1] (a conformal threshold leaves at most n − 1 above
            it), alpha outside (0, 1).
    """
    from scipy import stats

    if not 0 <= k < n or not 0 < alpha < 1:
        raise BlackboxMIAError(f"conformal FPR bounds need 0 <= k < n and alpha in (0, 1); got {k}, {n}, {alpha}")
    law = stats.beta(k + 1, n - k)
    return float(law.ppf(alpha / 2)), float(law.ppf(1 - alpha / 2))


def _interval(bounds: dict) -> list[float]:
    """The interval of π = (f − FPR)/(TPR − FPR) from the simultaneous bounds of the three rates
    (``bounds``: ``flag_rate``, ``fpr``, ``tpr`` as [lo, hi]): π rises with f and falls with FPR and
    TPR, so its ends are at two corners of their box (:func:`_corner`)."""
    (flag_lo, flag_hi), (fpr_lo, fpr_hi), (tpr_lo, tpr_hi) = bounds["flag_rate"], bounds["fpr"], bounds["tpr"]
    return [_corner(flag_lo, fpr_hi, tpr_hi), _corner(flag_hi, fpr_lo, tpr_lo)]


def _corner(flag: float, fpr: float, tpr: float) -> float:
    """(flag − fpr)/(tpr − fpr) clipped to [0, 1] at one corner of the bounds' box: 0 when
    flag ≤ fpr (no member needed), 1 when flag ≥ tpr (every item a member)."""
    if flag <= fpr:
        return 0.0
    if flag >= tpr:
        return 1.0
    return (flag - fpr) / (tpr - fpr)
