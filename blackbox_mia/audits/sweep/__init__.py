"""``bbmia sweep``: did an UNLABELLED benchmark leak into a model, and how much of it?

First the verdict: an exact test of "no swept item is a member" against the reference
non-members (:mod:`.verdict`, :mod:`blackbox_mia.evaluation.detection`). Then one
scorer, a threshold calibrated on known non-members for a target FPR, and the member fraction
of the swept items estimated with every source of uncertainty carried
(:func:`~blackbox_mia.evaluation.estimate_prevalence`, docs/design.md §5): the calibration and
the swept items are disjoint by construction (a calibration text found in the benchmark is
dropped from the swept items, and the report counts each role), the interval is exact and
distribution-free (simultaneous bounds of the flag rate, the conformal threshold's FPR and the
TPR), the realised FPR comes with its Clopper–Pearson CI, an estimate whose TPR − FPR is
not clearly above 0 is reported as not identifiable, and the one-sided lower bound, valid
without any known member, is the headline when no member is known. A one-sided Welch t-test
compares the benchmark with a non-member control built from the benchmark itself
(:mod:`blackbox_mia.controls`; Maini et al. 2024), whose own contamination is measured. When the
target is a canary (:func:`~blackbox_mia.canary.find_canary_manifest`), the true member
fraction of the swept items is reported beside the estimate.

Modules: :mod:`.plan` (the configuration and its checked plan: groups, calibration, control),
:mod:`.scores` (the groups' score matrices), :mod:`.verdict` (the exact test and the headline),
:mod:`.caveats` (what the report's reader must know) and :mod:`.run` (the audit).
"""

from .plan import SweepConfig, SweepPlan, prepare_sweep
from .run import run_sweep

__all__ = ["SweepConfig", "SweepPlan", "prepare_sweep", "run_sweep"]
