"""Evaluation of membership scores: metrics, blind baseline, calibration, prevalence, reports.

Convention everywhere: scores are "higher = more likely a member"; labels 1 = member,
0 = non-member. See docs/design.md §5 for the practice these modules implement.
"""

from .blind import BlindBaseline, blind_baseline, distribution_shift_verdict
from .calibration import RULES, Threshold, calibrate, conformal_rank, min_nonmembers
from .estimate import IDENTIFIABILITY_MARGIN, estimate_prevalence
from .metrics import (
    DEFAULT_FPRS,
    WIKIMIA_EDGES,
    auc,
    bootstrap_ci,
    bootstrap_roc_stats,
    evaluate_by_length,
    evaluate_scores,
    length_buckets,
    roc,
    tpr_at_fpr,
)
from .plots import plot_histogram, plot_roc
from .prevalence import (
    clopper_pearson,
    corrected_prevalence,
    dataset_level_test,
    prevalence_lower_bound,
)
from .report import render_markdown, to_jsonable, write_report

__all__ = [
    "DEFAULT_FPRS",
    "IDENTIFIABILITY_MARGIN",
    "RULES",
    "WIKIMIA_EDGES",
    "BlindBaseline",
    "Threshold",
    "auc",
    "blind_baseline",
    "bootstrap_ci",
    "bootstrap_roc_stats",
    "calibrate",
    "clopper_pearson",
    "conformal_rank",
    "corrected_prevalence",
    "dataset_level_test",
    "distribution_shift_verdict",
    "estimate_prevalence",
    "evaluate_by_length",
    "evaluate_scores",
    "length_buckets",
    "min_nonmembers",
    "plot_histogram",
    "plot_roc",
    "prevalence_lower_bound",
    "render_markdown",
    "roc",
    "to_jsonable",
    "tpr_at_fpr",
    "write_report",
]
