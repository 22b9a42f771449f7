"""Run the sweep (:func:`run_sweep`): score every group of its plan, the verdict, the prevalence
estimate, the control test and the report (the method: :mod:`blackbox_mia.audits.sweep`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ...backends.base import Backend
from ...spend.guard import guard_groups
from ...datasets import Item
from ...evaluation import clopper_pearson, dataset_level_test, estimate_prevalence, plot_histogram
from ...option_names import as_arguments, named
from ...results import ScoredText
from ...runner import run_config, score_items
from ...types import BlackboxMIAError
from ..common import SCORES_FILE, AuditResult, Dropped, Log, Names, dropped, publish, quiet, report_config
from .plan import SweepConfig, SweepPlan, prepare_sweep
from .scores import calibration_order, calibration_scores, control_scores, feature_matrix, has_nan
from .verdict import (
    planted_fraction,
    reference_model_line,
    reference_models,
    suspicious_table,
    sweep_headline,
    sweep_verdict,
    verdict_notes,
)
from .caveats import sweep_warnings

__all__ = ["SweepConfig", "SweepPlan", "prepare_sweep", "run_sweep"]

TEXT_PREVIEW = 80  # characters of a text shown in the list of most suspicious items


def run_sweep(plan: SweepPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True, log: Log = quiet,
              names: Names = as_arguments, yes: bool = False) -> AuditResult:
    """Score the benchmark (and control, calibration), split the roles, estimate, test and report.
    Before the first request, the run's estimate (:meth:`SweepPlan.scored_groups`, what
    ``--dry-run`` prints) goes through the spend guard
    (:func:`~blackbox_mia.spend.guard.guard_spend`): ``yes=True``, or a backend with
    ``max_cost=``, lets a run above it proceed.

    Files in ``out_dir``: ``scores.jsonl``, ``control_scores.jsonl``, ``calibration_scores.jsonl``
    (each with ``.config.json``; only those needed), ``histogram.png``, ``sweep.json``,
    ``sweep.md``. Calibration texts already in the benchmark reuse its scores, and are then
    dropped from the swept items (the roles are disjoint: ``roles`` in the report). The report's
    notes and warnings name settings by ``names`` (Python arguments by default; the CLI passes
    :func:`~blackbox_mia.option_names.as_flags`).

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: the scorer cannot run on the backend, non-finite scores, a resumed
            scores file of another configuration, no benchmark item left once the calibration
            items are dropped.
    """
    config, scorer = plan.config, plan.scorer
    out_dir = Path(out_dir)
    groups = plan.scored_groups()
    guard_groups(groups, plan.scorers, backends, yes)
    run_cfg = run_config(plan.scorers, backends, plan.meta, config.score_tolerance)
    s = _score_roles(plan, groups, backends, out_dir, run_cfg, progress, log)
    bench, neg, pos, control = s.scores_x[s.swept, 0], s.neg_x[:, 0], None if s.pos_x is None else s.pos_x[:, 0], \
        None if s.control_x is None else s.control_x[:, 0]
    swept_items = [it for it, keep in zip(plan.items, s.swept) if keep]
    prevalence = estimate_prevalence(bench, neg, pos, rule=config.rule, target_fpr=config.target_fpr,
                                     tpr=None if pos is not None else config.assumed_tpr)
    threshold = prevalence.pop("threshold")
    roles = _roles(plan, len(s.rows), int(s.swept.sum()), len(neg), None if pos is None else len(pos), control, s.gone)
    contamination = None if control is None else _control_contamination(s.control_items, s.rows, s.scores_x[:, 0],
                                                                         control, threshold["value"])
    dataset_test = _dataset_test(bench, control, neg)
    planted = planted_fraction(plan.planted_manifest, [r for r, keep in zip(s.rows, s.swept) if keep])
    suspicious = [{"id": it.id, "score": float(v), "text": it.text[:TEXT_PREVIEW]}
                  for it, v in sorted(zip(swept_items, bench), key=lambda pair: -pair[1])[: config.top]]
    reference, ref_label = (control, "control") if control is not None else (neg, "calibration non-members")
    plots = {f"{scorer.label} scores: swept benchmark vs {ref_label}, threshold dashed": plot_histogram(
        bench, reference, threshold["value"], out_dir / "histogram.png",
        title=f"{plan.meta['name']}: {scorer.label}", labels=("benchmark (swept)", ref_label))}
    nonmembers_x = s.neg_x if plan.calibration is not None or plan.nonmembers is not None else None
    verdict = sweep_verdict(s.scores_x[s.swept], nonmembers_x, s.control_x, s.pos_x, roles["calibration_source"],
                            config.seed)
    reference_model = reference_model_line(run_cfg["backends"], plan.scorers)
    headline = sweep_headline(prevalence, roles["swept"], verdict) + ("" if reference_model is None else
                                                                      "\n" + reference_model)

    report = {
        "title": f"Contamination sweep: {plan.meta['name']}",
        "headline": headline,
        "config": report_config(run_cfg, "sweep", config, len(plan.items),
                                {"calibration_fraction": config.seed, "control": config.control_config.seed},
                                calibration=plan.calibration[1] if plan.calibration else None,
                                nonmembers=plan.nonmembers[1] if plan.nonmembers else None),
        "roles": roles,
        "sweep": {scorer.label: {"verdict": verdict, "threshold": threshold, "prevalence": prevalence,
                                 **({"dataset_test": dataset_test} if dataset_test else {})}},
        "plots": plots,
        "most_suspicious": suspicious,
        "notes": [*headline.split("\n"), *verdict_notes(verdict),
                  *_sweep_notes(plan, s.source, roles, prevalence, contamination, dataset_test, planted)],
    }
    if plan.control is not None:
        report["control"] = {**plan.control.to_dict(), **({"contamination": contamination} if contamination else {})}
    if s.gone:
        report["dropped_unscored"] = [asdict(d) for d in s.gone]
    if planted is not None:
        report["planted"] = planted
    summary = _summary(headline, verdict, prevalence, threshold, roles, contamination, dataset_test, planted,
                       reference_models(run_cfg["backends"]), len(plan.items))
    # the Markdown lists the suspicious items as a table rather than as JSON
    return publish(report, summary, out_dir, "sweep", appendix=suspicious_table(suspicious), hidden=("most_suspicious",),
                   warnings=[*(d.sentence() for d in s.gone),
                             *sweep_warnings(prevalence, threshold, contamination, None if control is None else len(control))],
                   names=names)


def _dataset_test(bench: np.ndarray, control: np.ndarray | None, neg: np.ndarray) -> dict | None:
    """The one-sided Welch t-test of the swept scores (:func:`~blackbox_mia.evaluation.dataset_level_test`)
    against the control, else against the calibration non-members (at least 2); None without either."""
    if control is not None:
        return {**dataset_level_test(bench, control), "against": "control built from the benchmark"}
    if len(neg) >= 2:
        return {**dataset_level_test(bench, neg), "against": "calibration non-members"}
    return None


@dataclass(frozen=True)
class _RoleScores:
    """Every role's feature scores, shape (n, F) (the first column the sweep's scorer), once the
    texts without a usable score are dropped from the calibration and the control.

    Attributes:
        rows: the benchmark's scored rows, one per item of the plan.
        scores_x: the benchmark's features, every item (NaN rows kept).
        swept: shape (n_items,), bool: the items swept (not calibration texts, usable scores).
        neg_x, pos_x: the calibration non-members' and members' features (``pos_x`` None without members).
        control_x, control_items: the control's features and items (None without a control).
        source: where the calibration came from (:func:`~.scores.calibration_scores`).
        gone: what was dropped for want of a usable score, per group.
    """

    rows: list[ScoredText]
    scores_x: np.ndarray
    swept: np.ndarray
    neg_x: np.ndarray
    pos_x: np.ndarray | None
    control_x: np.ndarray | None
    control_items: list[Item] | None
    source: str
    gone: list[Dropped]


def _score_roles(plan: SweepPlan, groups: dict, backends: dict[str, Backend], out_dir: Path, run_cfg: dict,
                 progress: bool, log: Log) -> _RoleScores:
    """Score the benchmark (resumable, ``scores.jsonl``), the control and the calibration
    (:mod:`.scores`), and split the roles.

    Raises:
        BlackboxMIAError: no usable calibration member or non-member score, or no benchmark item
            left to sweep (every one is a calibration text or has no usable score).
    """
    log(f"scoring {len(plan.items)} benchmark items with {', '.join(s.label for s in plan.scorers)}")
    rows = score_items(plan.items, plan.scorers, backends, out_dir / SCORES_FILE, run_cfg, resume=plan.config.resume,
                       progress=progress)
    scores_x = feature_matrix(rows, plan)
    known = {it.text: r for it, r in zip(plan.items, rows)}
    control_x = control_scores(plan, groups.get("control"), backends, out_dir, progress, log)
    control_items = None if control_x is None else plan.control.items
    neg_x, pos_x, source, calibration_texts = calibration_scores(plan, groups.get("calibration", []), known, control_x,
                                                                  backends, out_dir, progress, log)
    calibration_in_benchmark = np.array([it.text in calibration_texts for it in plan.items])
    calibration_items = calibration_order(plan)
    groups_dropped = (
        dropped("benchmark", [it.id for it in plan.items], ~calibration_in_benchmark & has_nan(scores_x)),
        None if calibration_items is None else dropped("calibration", [it.id for it in calibration_items],
                                                       np.concatenate([has_nan(neg_x), has_nan(pos_x)])),
        None if control_items is None else dropped("control", [it.id for it in control_items], has_nan(control_x)))
    gone = [d for d in groups_dropped if d is not None]  # warned about at the end (publish)
    if control_x is not None:
        control_items = [it for it, bad in zip(control_items, has_nan(control_x)) if not bad]
        control_x = control_x[~has_nan(control_x)]
    neg_x = neg_x[~has_nan(neg_x)]
    pos_x = None if pos_x is None else pos_x[~has_nan(pos_x)]
    if len(neg_x) == 0 or (pos_x is not None and len(pos_x) == 0):
        raise BlackboxMIAError(f"no calibration {'non-member' if len(neg_x) == 0 else 'member'} has a usable score: "
                               "nothing to calibrate on once the texts without one are dropped")
    swept = ~calibration_in_benchmark & ~has_nan(scores_x)
    if not swept.any():
        raise BlackboxMIAError(f"no item of {plan.meta['name']} is left to sweep: every one is in the calibration set "
                               "(the calibration and the swept items must be disjoint) or has no usable score")
    return _RoleScores(rows, scores_x, swept, neg_x, pos_x, control_x, control_items, source, gone)


def _summary(headline: str, verdict: dict, prevalence: dict, threshold: dict, roles: dict, contamination: dict | None,
             dataset_test: dict | None, planted: dict | None, reference_model: str | None, n: int) -> dict:
    """``sweep.json``'s summary: the headline, the verdict, the roles, the flag rate and realised
    FPR with their CIs, the TPR, the prevalence, the control's contamination, the t-test's p, the
    threshold, ``n`` (benchmark items) and, on a canary, the planted fraction."""
    summary = {
        "headline": headline,
        "verdict": {key: verdict[key] for key in ("detected", "p_value", "alpha", "test", "reference")},
        "reference_model": reference_model,
        "roles": roles,
        "flag_rate": prevalence["flag_rate"],
        "realised_fpr": prevalence["realised_fpr"],
        "realised_fpr_ci": prevalence["realised_fpr_ci"],
        "target_fpr": prevalence["target_fpr"],
        "flag_rate_ci": list(clopper_pearson(prevalence["n_flagged"], prevalence["n_benchmark"])),
        "tpr": prevalence["tpr"],
        "tpr_ci": prevalence["tpr_ci"],
        "tpr_minus_fpr_lower": prevalence["youden_j_lower"],
        "bounds_level": None if prevalence["bounds"] is None else prevalence["bounds"]["level"],
        "identifiable": prevalence["identifiable"],
        "prevalence": {"estimate": prevalence["estimate"], "ci": prevalence["ci"],
                       "lower_bound": prevalence["lower_bound"]["lower_bound"],
                       "lower_bound_confidence": prevalence["lower_bound"]["confidence"]},
        "control_contamination": None if contamination is None else contamination["share_sources_flagged"],
        "p_value": None if dataset_test is None else dataset_test["p_value"],
        "threshold": threshold["value"],
        "n": n,
    }
    if planted is not None:
        summary["planted"] = planted["fraction"]
    return summary


def _roles(plan: SweepPlan, n_items: int, n_swept: int, n_nonmembers: int, n_members: int | None,
           control: np.ndarray | None, dropped: Sequence[Dropped]) -> dict:
    """How many items each role had (once the texts without a usable score are dropped, with
    ``drop_unscored``); the calibration and the swept items are disjoint."""
    unscored = {d.group: d.n for d in dropped}
    if plan.calibration is not None:
        source = named("calibration", plan.calibration[1]["name"])
    elif plan.nonmembers is not None:
        source = named("nonmembers", plan.nonmembers[1]["name"])
    else:
        source = "the control built from the benchmark"
    return {
        "benchmark_items": n_items,
        "swept": n_swept,
        "dropped_calibration_overlap": n_items - n_swept - unscored.get("benchmark", 0),
        "dropped_unscored": unscored,
        "calibration_source": source,
        "calibration_nonmembers": n_nonmembers,
        "calibration_members": n_members or 0,
        "control_items": 0 if control is None else len(control),
        "disjoint": True,
        "rule": "a calibration text found in the benchmark is dropped from the swept items (matched by text); "
                "the estimate is the member fraction of the swept items only",
    }


def _control_contamination(items: Sequence[Item], rows: Sequence[ScoredText], scores: np.ndarray, control: np.ndarray,
                           threshold: float) -> dict:
    """How contaminated the control looks: the share of control items whose source (benchmark)
    item scores above the threshold, and the control's flag rate by its sources' flags (a
    control that inherits its sources' membership is flagged more where they are). ``items``:
    the control items, one per score of ``control``; those whose source has no usable score
    (NaN in ``scores``) are left out."""
    by_id = {r.id: s for r, s in zip(rows, scores)}
    source_scores = np.array([by_id[it.meta["source_id"]] for it in items])
    known = ~np.isnan(source_scores)
    sources, flagged = source_scores[known] > threshold, control[known] > threshold
    out = {
        "share_sources_flagged": float(sources.mean()),
        "control_flag_rate": float(flagged.mean()),
        "flag_rate_source_flagged": float(flagged[sources].mean()) if sources.any() else None,
        "flag_rate_source_not_flagged": float(flagged[~sources].mean()) if (~sources).any() else None,
        "n_control": int(known.sum()),
        "meaning": "share_sources_flagged: control items whose source benchmark item scores above the threshold; "
                   "a control item is a near-duplicate of its source, so where the source was memorised the control "
                   "may be flagged too (compare the two conditional flag rates)",
    }
    out["inherits_membership"] = _control_inherits(out)
    return out


INHERITANCE_RATIO = 3  # control flagged this many times more often where its source is flagged: it inherits membership


def _control_inherits(contamination: dict) -> bool:
    """Whether the control is flagged at least ``INHERITANCE_RATIO`` times more often where its
    source item is flagged than where it is not (both groups non-empty)."""
    hit, miss = contamination["flag_rate_source_flagged"], contamination["flag_rate_source_not_flagged"]
    return hit is not None and miss is not None and hit > 0 and hit >= INHERITANCE_RATIO * miss


def _sweep_notes(plan: SweepPlan, source: str, roles: dict, prevalence: dict, contamination: dict | None,
                 dataset_test: dict | None, planted: dict | None) -> list[str]:
    """The report's notes: roles, calibration source, realised FPR, control caveats, t-test, planted."""
    notes = [
        (f"Roles (disjoint): {roles['swept']} of {roles['benchmark_items']} benchmark items swept, "
        f"{roles['dropped_calibration_overlap']} dropped because they are calibration items; calibration: "
        f"{roles['calibration_members']} members, {roles['calibration_nonmembers']} non-members."),
        f"Threshold calibrated on {source}; a text is flagged when its score > threshold.",
    ]
    lo, hi = prevalence["realised_fpr_ci"]
    target = "" if prevalence["target_fpr"] is None else f" (target {prevalence['target_fpr']:g})"
    notes.append(f"Realised FPR {prevalence['realised_fpr']:.4f}{target}: {prevalence['n_false_positives']} of "
                 f"{prevalence['n_cal_nonmembers']} calibration non-members above the threshold, "
                 f"{100 * prevalence['ci_level']:g}% Clopper-Pearson CI [{lo:.4f}, {hi:.4f}].")
    notes += prevalence["notes"]
    control = plan.control
    if control is not None:
        notes.append(f"Control: {len(control.items)} of {control.n_source} items kept "
                     f"({100 * control.kept_fraction:.1f}%). It is conservative: perturbed items are "
                     "near-duplicates of the originals, so a model that memorised a problem's wording may "
                     "score its control high too, which under-estimates contamination.")
        if len(control.items) < 2:
            notes.append("The control is too small for the t-test.")
    if contamination is not None:
        cond = ", ".join(f"{rate:.3f} {what}" for rate, what in (
            (contamination["flag_rate_source_flagged"], "where the source is flagged"),
            (contamination["flag_rate_source_not_flagged"], "where it is not")) if rate is not None)
        used = plan.calibration is None and plan.nonmembers is None
        inherits = _control_inherits(contamination)
        notes.append(f"Control contamination: {100 * contamination['share_sources_flagged']:.1f}% of control items have a "
                     f"flagged source item; the control is flagged at {cond}."
                     + (" WARNING: the control inherits its sources' membership, so it is not a clean non-member set."
                        if inherits else "")
                     + (" The control is the calibration here: where it inherits its sources' membership its FPR is "
                        "over-estimated, which lowers the lower bound (it stays valid, but conservative); known "
                        f"non-members ({named('nonmembers')}) give a tighter one." if used else ""))
    if dataset_test is not None:
        notes.append(f"t-test ({dataset_test['test']}) against the {dataset_test['against']}: mean score "
                     f"{dataset_test['mean_benchmark']:.4g} vs {dataset_test['mean_control']:.4g} "
                     f"(difference {dataset_test['mean_difference']:+.4g}), p = {dataset_test['p_value']:.3g}.")
    if planted is not None:
        notes.append(f"Planted (canary manifest): {planted['n_members']} of {planted['n_scored']} swept items "
                     f"are members, fraction {planted['fraction']:.4f}.")
    return notes
