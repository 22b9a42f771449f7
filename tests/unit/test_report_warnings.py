"""Whatever a report warns about, the console says too (issue 30, item 3): a sweep's caveats
computed from its numbers, listed first in the Markdown and printed one line each."""

from __future__ import annotations

import numpy as np

from blackbox_mia.audits.sweep_warnings import sweep_warnings
from blackbox_mia.evaluation import estimate_prevalence, render_markdown


def caveats(bench, neg, pos=None, contamination=None, n_control=None, **options):
    prevalence = estimate_prevalence(np.asarray(bench, float), np.asarray(neg, float),
                                     None if pos is None else np.asarray(pos, float), **options)
    threshold = prevalence.pop("threshold")
    return sweep_warnings(prevalence, threshold, contamination, n_control)


def test_a_target_fpr_that_ties_cannot_realise_is_said():
    # 200 non-members with one score: the threshold is that score, no non-member is above it,
    # realised FPR 0 with a 95% Clopper-Pearson CI [0, 0.0183] that excludes the target 0.05
    found = caveats(bench=[0.0] * 50 + [2.0] * 50, neg=[1.0] * 200, pos=[2.0] * 100, target_fpr=0.05)
    assert found == ["target FPR 0.05 not realised: realised FPR 0.0000 (0 of 200 calibration non-members above "
                     "the threshold), 95% CI [0.0000, 0.0183]"]


def test_too_few_nonmembers_and_a_lower_bound_of_zero_without_members_are_said():
    found = caveats(bench=[0.0] * 10, neg=[0.1 * i for i in range(10)], target_fpr=0.05)
    assert found[0] == ("10 non-members are too few to guarantee FPR ≤ 0.05 out of sample (need ≥ 19); "
                        "threshold = largest non-member score")
    assert found[-1].startswith("the lower bound is 0.000: it rules nothing out")
    assert len(found) == 2  # realised FPR 0 of 10: CI [0, 0.308] holds the target


def test_a_control_that_inherits_membership_an_assumed_tpr_and_a_tiny_control_are_said():
    contamination = {"flag_rate_source_flagged": 0.9, "flag_rate_source_not_flagged": 0.05, "inherits_membership": True}
    found = caveats(bench=np.linspace(0, 1, 100), neg=np.linspace(0, 1, 100), contamination=contamination,
                    n_control=1, target_fpr=0.05, tpr=0.6)
    assert any(w.startswith("the control inherits its sources' membership (flagged at 0.900 where its source is "
                            "flagged, 0.050 where not)") for w in found)
    assert "the control is too small for the t-test" in found
    assert any(w.startswith("the TPR is assumed (--assumed-tpr)") for w in found)


def test_a_clean_sweep_has_no_warning():
    rng = np.random.default_rng(0)
    neg, pos = rng.normal(0, 1, 400), rng.normal(3, 1, 400)
    assert caveats(bench=np.concatenate([neg[:100], pos[:100]]), neg=neg[100:], pos=pos[100:], target_fpr=0.05) == []


def test_the_markdown_lists_the_warnings_first():
    text = render_markdown({"title": "T", "notes": ["a note"], "warnings": ["mind this"]})
    assert text.index("## Warnings") < text.index("## Notes") and "- **mind this**" in text
