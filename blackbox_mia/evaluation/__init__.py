"""Evaluation of membership scores: metrics, blind baseline, calibration, prevalence, reports.

Convention everywhere: scores are "higher = more likely a member"; labels 1 = member,
0 = non-member. See docs/design.md §5 for the practice these modules implement.

The names below are imported from their modules on first use (:mod:`blackbox_mia.lazy`), so
importing one module of the package does not load scikit-learn, scipy and matplotlib.
"""

from ..lazy import lazy_exports

_EXPORTS = {
    "BlindBaseline": ".blind",
    "blind_baseline": ".blind",
    "distribution_shift_verdict": ".blind",
    "RULES": ".calibration",
    "Threshold": ".calibration",
    "calibrate": ".calibration",
    "conformal_rank": ".calibration",
    "min_nonmembers": ".calibration",
    "IDENTIFIABILITY_MARGIN": ".prevalence_interval",
    "estimate_prevalence": ".prevalence_interval",
    "DEFAULT_FPRS": ".metrics",
    "WIKIMIA_EDGES": ".metrics",
    "auc": ".metrics",
    "bootstrap_ci": ".metrics",
    "bootstrap_roc_stats": ".metrics",
    "evaluate_by_length": ".metrics",
    "evaluate_scores": ".metrics",
    "length_buckets": ".metrics",
    "roc": ".metrics",
    "tpr_at_fpr": ".metrics",
    "plot_histogram": ".plots",
    "plot_roc": ".plots",
    "clopper_pearson": ".prevalence",
    "corrected_prevalence": ".prevalence",
    "dataset_level_test": ".prevalence",
    "prevalence_lower_bound": ".prevalence",
    "render_markdown": ".report",
    "to_jsonable": ".report",
    "write_report": ".report",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
