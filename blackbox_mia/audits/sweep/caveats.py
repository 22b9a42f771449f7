"""The caveats of a contamination sweep without which its headline misleads, each one sentence:
the report lists them first and the console prints them, one line each (issue 30: a console
that said "at least 0.000" while ``sweep.md`` alone said that the target FPR was not realised
and that the control was contaminated)."""

from __future__ import annotations

from ...option_names import named


def sweep_warnings(prevalence: dict, threshold: dict, contamination: dict | None, n_control: int | None) -> list[str]:
    """What a sweep's reader must know before quoting its numbers.

    Args:
        prevalence: :func:`~blackbox_mia.evaluation.estimate_prevalence`'s result (without its
            threshold).
        threshold: the threshold's dict (:meth:`~blackbox_mia.evaluation.Threshold.to_dict`).
        contamination: the control's contamination (``flag_rate_source_flagged``,
            ``flag_rate_source_not_flagged``, ``inherits_membership``: flagged more often where
            its source is flagged), None without a control.
        n_control: items in the control (None without one).

    Returns:
        One sentence per caveat, in this order: too few non-members for the target FPR; the
        target FPR outside the realised FPR's 95% Clopper-Pearson interval; a control that
        inherits membership; a control too small for the t-test; a threshold chosen on the
        members (optimistic bounds); an assumed TPR; a lower bound of 0 with no estimate.
    """
    warnings = [threshold["note"]] if threshold.get("note") else []
    target, (lo, hi) = prevalence["target_fpr"], prevalence["realised_fpr_ci"]
    if target is not None and not lo <= target <= hi:
        warnings.append(f"target FPR {target:g} not realised: realised FPR {prevalence['realised_fpr']:.4f} "
                        f"({prevalence['n_false_positives']} of {prevalence['n_cal_nonmembers']} calibration "
                        f"non-members above the threshold), 95% CI [{lo:.4f}, {hi:.4f}]")
    if contamination is not None and contamination["inherits_membership"]:
        warnings.append(f"the control inherits its sources' membership (flagged at "
                        f"{contamination['flag_rate_source_flagged']:.3f} where its source is flagged, "
                        f"{contamination['flag_rate_source_not_flagged']:.3f} where not): it is not a clean "
                        "non-member set, and the t-test against it under-states contamination")
    if n_control is not None and n_control < 2:
        warnings.append("the control is too small for the t-test")
    if threshold["rule"] != "fpr" and prevalence["n_cal_members"]:
        warnings.append(f"rule {threshold['rule']} chose the threshold on the calibration members too: "
                        "the TPR and FPR bounds are optimistic (rule fpr gives exact ones)")
    if prevalence["tpr_source"] == "assumed":
        warnings.append(f"the TPR is assumed ({named('assumed_tpr')}), not measured: the interval ignores its "
                        "uncertainty")
    bound = prevalence["lower_bound"]["lower_bound"]
    if prevalence["estimate"] is None and bound == 0:
        warnings.append("the lower bound is 0.000: it rules nothing out (members may be present); known members "
                        f"({named('calibration')} with members, e.g. canary) give an estimate with its interval")
    return warnings
