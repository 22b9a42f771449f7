"""Whatever a report warns about, the console says too (issue 30, item 3): an audit's caveats
(sweep, unlearning, memorize) computed from its numbers, listed first in the Markdown and printed
one line each."""

from __future__ import annotations

import json

import numpy as np

from blackbox_mia.audits.memorization import memorize_warnings
from blackbox_mia.audits.sweep.caveats import sweep_warnings
from blackbox_mia.audits.unlearning import unlearning_warnings
from blackbox_mia.audits.common import publish
from blackbox_mia.evaluation import estimate_prevalence, render_markdown
from blackbox_mia.option_names import as_arguments, as_flags, named

from .test_cli import invoke, labelled_jsonl  # noqa: F401  (a fixture)


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
    assert any(as_flags(w).startswith("the TPR is assumed (--assumed-tpr)") for w in found)
    assert any(as_arguments(w).startswith("the TPR is assumed (assumed_tpr=)") for w in found)


def test_a_clean_sweep_has_no_warning():
    rng = np.random.default_rng(0)
    neg, pos = rng.normal(0, 1, 400), rng.normal(3, 1, 400)
    assert caveats(bench=np.concatenate([neg[:100], pos[:100]]), neg=neg[100:], pos=pos[100:], target_fpr=0.05) == []


def test_the_markdown_lists_the_warnings_first():
    text = render_markdown({"title": "T", "notes": ["a note"], "warnings": ["mind this"]})
    assert text.index("## Warnings") < text.index("## Notes") and "- **mind this**" in text


def test_memorize_warns_about_skipped_items_and_missing_aucs():
    skipped = {32: {"too_short": 3, "over_context": 0}, 64: {"too_short": 0, "over_context": 0},
               128: {"too_short": 5, "over_context": 2}}
    some = {"eidetic": {"auc": 0.9}}
    found = memorize_warnings(skipped, {"32": some, "64": some, "128": None, "pooled": some}, "tokens", 1024)
    assert found == [
        "L=32: 3 items shorter than L + R tokens and 0 items whose prompt and reference exceed the target's context "
        "(1024 tokens) were skipped",
        "L=128: 5 items shorter than L + R tokens and 2 items whose prompt and reference exceed the target's context "
        "(1024 tokens) were skipped",
        "no AUC at L=128: the rows left there do not hold both members and non-members (the pooled AUC counts the "
        "other lengths only)",
    ]
    assert memorize_warnings({}, {"32": None, "pooled": None}, "chars", 64) == [
        "no membership AUC: the rows do not hold both members (label 1) and non-members (label 0)"]
    assert memorize_warnings({32: {"too_short": 0, "over_context": 0}}, {"32": some, "pooled": some}, "tokens", 64) == []


def test_unlearning_warns_about_texts_without_ratio_or_completion_and_a_missing_comparison():
    found = unlearning_warnings(10, ["a", "b"], 8, ["c"], {"flagged": 0, "unflagged": 7}, compared=True)
    assert found[0].startswith("2 of 10 texts have no usable Min-K% ratio") and found[0].endswith("(first: 'a')")
    assert found[1].startswith("1 of 8 texts were not completed") and found[1].endswith("(first: 'c')")
    assert found[2] == "no flagged-vs-unflagged comparison: no flagged text was completed"
    # --flagged-only asks for no comparison: an empty unflagged group is no caveat
    assert unlearning_warnings(4, [], 2, [], {"flagged": 2, "unflagged": 0}, compared=False) == []
    assert unlearning_warnings(4, [], 4, [], {"flagged": 2, "unflagged": 2}, compared=True) == []


def console_warnings(result) -> list[str]:
    return [line[len("warning: "):] for line in result.output.splitlines() if line.startswith("warning: ")]


def test_the_console_prints_what_the_unlearning_and_memorize_reports_warn_about(tiny_model_dir, labelled_jsonl,
                                                                                 tmp_path):
    # the same model before and after: every ratio is 1, inside the window: all 4 texts flagged, none unflagged
    out = tmp_path / "unlearning"
    result = invoke("unlearning", labelled_jsonl, "--before", tiny_model_dir, "--after", f"local:{tiny_model_dir}",
                    "--prompt-words", "3", "--samples", "1", "--max-new-tokens", "4", "--device", "cpu",
                    "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "unlearning.json").read_text())
    assert report["warnings"] == ["no flagged-vs-unflagged comparison: no unflagged text was completed"]
    assert console_warnings(result) == report["warnings"]
    assert f"- **{report['warnings'][0]}**" in (out / "unlearning.md").read_text()

    # the texts are 8 words (< 40 tokens): L=40 has no row and so no AUC
    out = tmp_path / "memorize"
    result = invoke("memorize", labelled_jsonl, "--local", tiny_model_dir, "--prompt-lengths", "2,40",
                    "--reference-tokens", "3", "--n-boot", "0", "--device", "cpu", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "memorize.json").read_text())
    assert report["warnings"][0].startswith("L=40: 4 items shorter than L + R tokens and 0 items")
    assert report["warnings"][1].startswith("no AUC at L=40:") and len(report["warnings"]) == 2
    assert console_warnings(result) == report["warnings"]
    assert all(f"- **{w}**" in (out / "memorize.md").read_text() for w in report["warnings"])


def test_a_report_names_settings_as_its_caller_does(tmp_path):
    # the library's caller reads Python arguments, the command line's user flags: in the
    # summary, the report and both files alike
    warning = f"the TPR is assumed ({named('assumed_tpr')}), not measured"
    note = f"known non-members ({named('nonmembers', 'n.jsonl')}) make the level exact"
    for names, assumed, nonmembers in ((as_arguments, "assumed_tpr=", "nonmembers='n.jsonl'"),
                                       (as_flags, "--assumed-tpr", "--nonmembers n.jsonl")):
        out = tmp_path / names.__name__
        result = publish({"title": "T", "notes": [note]}, {"headline": note}, out, "report", warnings=[warning],
                         appendix=f"\n{note}\n", names=names)
        assert result.summary["warnings"] == [f"the TPR is assumed ({assumed}), not measured"]
        assert result.summary["headline"] == result.report["notes"][0] == f"known non-members ({nonmembers}) make the level exact"
        for path in (result.json_path, result.md_path):
            text = path.read_text()
            assert assumed in text and "\x1f" not in text
        assert result.md_path.read_text().endswith(f"known non-members ({nonmembers}) make the level exact\n")
