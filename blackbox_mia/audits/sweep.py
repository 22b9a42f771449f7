"""``bbmia sweep``: how much of an UNLABELLED benchmark leaked into a model.

One scorer, a threshold calibrated on known non-members for a target FPR, the flag rate
corrected for that FPR and the TPR measured on known members (Rogan & Gladen 1978,
docs/design.md §5), and a one-sided Welch t-test of the benchmark against a non-member control
built from the benchmark itself (:mod:`blackbox_mia.controls`; Maini et al. 2024). When the
target is a canary (:func:`~blackbox_mia.canary.find_canary_manifest`), the true member
fraction of the scored items is reported beside the estimate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..canary import find_canary_manifest, load_manifest
from ..controls import ControlConfig, ControlSet, build_control, control_kind
from ..datasets import Item, load_items
from ..evaluation import (
    RULES,
    calibrate,
    dataset_level_test,
    plot_histogram,
    prevalence_with_ci,
)
from ..runner import ScoredText, run_config, score_items
from ..scorers import Scorer, parse_scorer
from ..types import BlackboxMIAError
from .common import (
    SCORES_FILE,
    AuditResult,
    Log,
    check_int,
    publish,
    quiet,
    report_config,
    require_labelled,
    score_column,
)

TEXT_PREVIEW = 80  # characters of a text shown in the list of most suspicious items


@dataclass(frozen=True)
class SweepConfig:
    """Configuration of one contamination sweep (saved in the report).

    Attributes:
        dataset: the benchmark spec (labels, if any, are ignored).
        scorer: one scorer spec (default ``min_k``, k = 20%).
        rule: threshold rule, one of ``evaluation.RULES`` (``max_*`` need labelled members).
        target_fpr: FPR asked for by rule ``fpr`` (fraction).
        calibration: a labelled calibration spec (JSONL with labels, ``canary``, ``canary:PATH``).
        nonmembers: a spec of known non-members only (labels must be 0 or absent).
        assumed_tpr: the threshold's TPR to assume when no members are known (fraction).
        control: build the non-member control from the benchmark: None = whenever the items are
            GSM8K or AQuA problems; True = required; False = never.
        control_config: the control's construction (seed, perturbation size).
        limit: only the first ``limit`` benchmark items.
        n_boot: bootstrap resamples of the prevalence CI.
        seed: bootstrap seed.
        top: how many of the highest-scoring items the report lists.
        resume: keep the rows already in the score files (same configuration).
    """

    dataset: str
    scorer: str = "min_k"
    rule: str = "fpr"
    target_fpr: float = 0.05
    calibration: str | None = None
    nonmembers: str | None = None
    assumed_tpr: float | None = None
    control: bool | None = None
    control_config: ControlConfig = field(default_factory=ControlConfig)
    limit: int | None = None
    n_boot: int = 1000
    seed: int = 0
    top: int = 10
    resume: bool = True

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible or contradictory options."""
        if self.rule not in RULES:
            raise BlackboxMIAError(f"unknown --rule {self.rule!r}; choose from {', '.join(RULES)}")
        if not 0 < self.target_fpr < 1:
            raise BlackboxMIAError(f"--target-fpr must be in (0, 1), got {self.target_fpr}")
        if self.calibration and self.nonmembers:
            raise BlackboxMIAError("give --calibration (labelled) or --nonmembers, not both")
        if self.assumed_tpr is not None:
            if not 0 < self.assumed_tpr <= 1:
                raise BlackboxMIAError(f"--assumed-tpr must be in (0, 1], got {self.assumed_tpr}")
            if self.calibration:
                raise BlackboxMIAError("--assumed-tpr is for calibrations without members; "
                                       "with --calibration the TPR is measured on its members")
        if self.rule != "fpr" and not self.calibration:
            raise BlackboxMIAError(f"--rule {self.rule} needs labelled members: give --calibration")
        check_int("--n-boot", self.n_boot, 1)
        check_int("--seed", self.seed, 0)
        check_int("--top", self.top, 0)
        if self.limit is not None:
            check_int("--limit", self.limit, 1)
        self.control_config.validate()


@dataclass(frozen=True)
class SweepPlan:
    """Checked input of :func:`run_sweep` (from :func:`prepare_sweep`).

    Attributes:
        calibration: labelled calibration items (from ``--calibration``), else None.
        nonmembers: known non-members (from ``--nonmembers``), else None.
        control: the control built from the benchmark, else None.
        planted_manifest: a canary manifest whose members give the true member fraction.
    """

    config: SweepConfig
    items: list[Item]
    meta: dict
    scorer: Scorer
    calibration: tuple[list[Item], dict] | None
    nonmembers: tuple[list[Item], dict] | None
    control: ControlSet | None
    planted_manifest: Path | None


def prepare_sweep(config: SweepConfig, target_model: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None, log: Log = quiet) -> SweepPlan:
    """Load the benchmark, the calibration data and build the control (no model needed).

    Args:
        config: the sweep configuration.
        target_model: the local target model directory (``--local``), or None for an endpoint.
            When it holds a canary manifest, the report gives the true member fraction
            (:func:`~blackbox_mia.canary.find_canary_manifest`: the only rule).
        cache_dir: cache root override, where the ``canary`` dataset spec is found.
        log: receives progress messages.

    Raises:
        BlackboxMIAError: bad options, unreadable data, a calibration set without both classes,
            non-members labelled 1, or no source of non-members at all.
    """
    config.validate()
    scorer = parse_scorer(config.scorer)
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    kind = control_kind(items)
    if config.control and kind is None:
        raise BlackboxMIAError(f"--control needs GSM8K or AQuA problems; {meta['name']} holds other items")
    control = None
    if config.control is not False and kind is not None:
        control = build_control(items, config.control_config)
        log(f"control: kept {len(control.items)} of {control.n_source} {kind} items "
            f"({100 * control.kept_fraction:.1f}%) with new numbers")
    calibration = nonmembers = None
    if config.calibration:
        cal_items, cal_meta = load_items(config.calibration, cache_dir=cache_dir)
        require_labelled(cal_items, cal_meta["name"], "--calibration")
        calibration = (cal_items, cal_meta)
    elif config.nonmembers:
        non_items, non_meta = load_items(config.nonmembers, cache_dir=cache_dir)
        if any(it.label == 1 for it in non_items):
            raise BlackboxMIAError(f"--nonmembers {non_meta['name']} holds items labelled 1 (members); "
                                   "give a labelled set with --calibration instead")
        nonmembers = (non_items, non_meta)
    elif control is None:
        raise BlackboxMIAError(
            "no known non-members to calibrate on: give --calibration (a labelled set, or canary / "
            "canary:PATH) or --nonmembers PATH, or sweep GSM8K/AQuA problems (a control is then built)"
        )
    if not calibration and not nonmembers and len(control.items) < 2:
        raise BlackboxMIAError(f"the control kept only {len(control.items)} items: too few to calibrate on; "
                               "give --calibration or --nonmembers")
    manifest = find_canary_manifest(target_model)
    return SweepPlan(config, items, meta, scorer, calibration, nonmembers, control, manifest)


def run_sweep(plan: SweepPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True, log: Log = quiet) -> AuditResult:
    """Score the benchmark (and control, calibration), calibrate, estimate, test and report.

    Files in ``out_dir``: ``scores.jsonl``, ``control_scores.jsonl``, ``calibration_scores.jsonl``
    (each with ``.config.json``; only those needed), ``histogram.png``, ``sweep.json``,
    ``sweep.md``. Calibration texts already in the benchmark reuse its scores.

    Raises:
        BlackboxMIAError: the scorer cannot run on the backend, non-finite scores, a resumed
            scores file of another configuration.
    """
    config, scorer = plan.config, plan.scorer
    out_dir = Path(out_dir)
    run_cfg = run_config([scorer], backends, plan.meta)
    log(f"scoring {len(plan.items)} benchmark items with {scorer.label}")
    rows = score_items(plan.items, [scorer], backends, out_dir / SCORES_FILE, run_cfg, resume=config.resume, progress=progress)
    bench = score_column(rows, scorer.label)
    known = {it.text: r.scores[scorer.label] for it, r in zip(plan.items, rows)}
    control = _control_scores(plan, backends, out_dir, progress, log)
    neg, pos, source = _calibration_scores(plan, known, control, backends, out_dir, progress, log)

    threshold = calibrate(neg, pos, config.rule, config.target_fpr)
    if pos is not None:
        prevalence = prevalence_with_ci(bench, threshold.value, neg, pos, config.n_boot, config.seed)
    elif config.assumed_tpr is not None:
        prevalence = prevalence_with_ci(bench, threshold.value, neg, None, config.n_boot, config.seed, tpr=config.assumed_tpr)
        prevalence["tpr_source"] = "assumed (--assumed-tpr)"
    else:
        prevalence = _prevalence_unavailable(bench, threshold.value, neg)
    dataset_test = None
    if control is not None:
        dataset_test = {**dataset_level_test(bench, control), "against": "control built from the benchmark"}
    elif len(neg) >= 2:
        dataset_test = {**dataset_level_test(bench, neg), "against": "calibration non-members"}
    planted = _planted(plan.planted_manifest, rows)
    top = sorted(zip(plan.items, bench), key=lambda pair: -pair[1])[: config.top]
    suspicious = [{"id": it.id, "score": float(s), "text": it.text[:TEXT_PREVIEW]} for it, s in top]
    reference, ref_label = (control, "control") if control is not None else (neg, "calibration non-members")
    plots = {f"{scorer.label} scores: benchmark vs {ref_label}, threshold dashed": plot_histogram(
        bench, reference, threshold.value, out_dir / "histogram.png",
        title=f"{plan.meta['name']}: {scorer.label}", labels=("benchmark", ref_label))}

    report = {
        "title": f"Contamination sweep: {plan.meta['name']}",
        "config": report_config(run_cfg, "sweep", config, len(plan.items),
                                {"bootstrap": config.seed, "control": config.control_config.seed},
                                calibration=plan.calibration[1] if plan.calibration else None,
                                nonmembers=plan.nonmembers[1] if plan.nonmembers else None),
        "sweep": {scorer.label: {"threshold": threshold.to_dict(), "prevalence": prevalence,
                                 **({"dataset_test": dataset_test} if dataset_test else {})}},
        "plots": plots,
        "most_suspicious": suspicious,
        "notes": _sweep_notes(plan, source, pos is not None, dataset_test, planted),
    }
    if plan.control is not None:
        report["control"] = plan.control.to_dict()
    if planted is not None:
        report["planted"] = planted
    summary = {
        "flag_rate": prevalence["flag_rate"],
        "fpr": prevalence["fpr"],
        "tpr": prevalence["tpr"],
        "prevalence": {"estimate": prevalence["estimate"], "ci": prevalence["ci"]},
        "p_value": None if dataset_test is None else dataset_test["p_value"],
        "threshold": threshold.value,
        "n": len(plan.items),
    }
    if planted is not None:
        summary["planted"] = planted["fraction"]
    # the Markdown lists the suspicious items as a table rather than as JSON
    return publish(report, summary, out_dir, "sweep", appendix=_suspicious_table(suspicious), hidden=("most_suspicious",))


def _control_scores(plan: SweepPlan, backends: dict[str, Backend], out_dir: Path, progress: bool, log: Log) -> np.ndarray | None:
    """Scores of the control items (``control_scores.jsonl``); None without a usable control."""
    if plan.control is None or len(plan.control.items) < 2:
        return None
    log(f"scoring {len(plan.control.items)} control items")
    meta = {"name": f"control of {plan.meta['name']}", "source": plan.meta["source"],
            "sha256": plan.meta["sha256"], "construction": asdict(plan.control.config)}
    rows = score_items(plan.control.items, [plan.scorer], backends, out_dir / "control_scores.jsonl",
                       run_config([plan.scorer], backends, meta), resume=plan.config.resume, progress=progress)
    return score_column(rows, plan.scorer.label)


def _calibration_scores(plan: SweepPlan, known: dict[str, float], control: np.ndarray | None,
                        backends: dict[str, Backend], out_dir: Path, progress: bool,
                        log: Log) -> tuple[np.ndarray, np.ndarray | None, str]:
    """``(non-member scores, member scores or None, description)`` of the calibration source:
    ``--calibration``, else ``--nonmembers``, else the control."""
    path = out_dir / "calibration_scores.jsonl"
    if plan.calibration is not None:
        items, meta = plan.calibration
        scores = _scores_reusing(items, known, plan, backends, path, meta, progress, log)
        labels = np.array([it.label for it in items])
        neg, pos = scores[labels == 0], scores[labels == 1]
        return neg, pos, f"calibration set {meta['name']} ({len(pos)} members, {len(neg)} non-members)"
    if plan.nonmembers is not None:
        items, meta = plan.nonmembers
        neg = _scores_reusing(items, known, plan, backends, path, meta, progress, log)
        return neg, None, f"known non-members {meta['name']} ({len(neg)})"
    return control, None, f"the benchmark's own control ({len(control)} items with new numbers)"


def _sweep_notes(plan: SweepPlan, source: str, has_members: bool, dataset_test: dict | None, planted: dict | None) -> list[str]:
    """The report's notes: calibration source, control caveats, missing TPR, t-test, planted."""
    notes = [f"Threshold calibrated on {source}; a text is flagged when its score > threshold."]
    control = plan.control
    if control is not None:
        notes.append(f"Control: {len(control.items)} of {control.n_source} items kept "
                     f"({100 * control.kept_fraction:.1f}%). It is conservative: perturbed items are "
                     "near-duplicates of the originals, so a model that memorised a problem's wording may "
                     "score its control high too, which under-estimates contamination.")
        if len(control.items) < 2:
            notes.append("The control is too small for the t-test.")
    if not has_members and plan.config.assumed_tpr is None:
        notes.append("No known members: the TPR of the threshold is unknown, so the corrected prevalence "
                     "is not available (give --calibration with members, or --assumed-tpr). The flag rate "
                     "minus the FPR is a lower bound on prevalence × TPR only.")
    if dataset_test is not None:
        notes.append(f"t-test ({dataset_test['test']}) against the {dataset_test['against']}: mean score "
                     f"{dataset_test['mean_benchmark']:.4g} vs {dataset_test['mean_control']:.4g} "
                     f"(difference {dataset_test['mean_difference']:+.4g}), p = {dataset_test['p_value']:.3g}.")
    if planted is not None:
        notes.append(f"Planted (canary manifest): {planted['n_members']} of {planted['n_scored']} scored items "
                     f"are members, fraction {planted['fraction']:.4f}.")
    return notes


def _scores_reusing(items: list[Item], known: dict[str, float], plan: SweepPlan, backends: dict[str, Backend],
                    out_path: Path, meta: dict, progress: bool, log: Log) -> np.ndarray:
    """Scores of ``items``; texts already scored (``known``: text → score) are not scored again."""
    todo = [it for it in items if it.text not in known]
    log(f"scoring {len(todo)} calibration items ({len(items) - len(todo)} reuse benchmark scores)")
    if todo:
        rows = score_items(todo, [plan.scorer], backends, out_path, run_config([plan.scorer], backends, meta),
                           resume=plan.config.resume, progress=progress)
        known = {**known, **dict(zip((it.text for it in todo), score_column(rows, plan.scorer.label)))}
    return np.array([known[it.text] for it in items], dtype=np.float64)


def _suspicious_table(rows: list[dict]) -> str:
    """Markdown table of the highest-scoring items (id, score, start of the text)."""
    lines = ["## Most suspicious items (highest scores)", "", "| id | score | text |", "| --- | --- | --- |"]
    for row in rows:
        text = " ".join(row["text"].split()).replace("|", "\\|")
        lines.append(f"| {row['id']} | {row['score']:.4f} | {text} |")
    return "\n".join(lines) + "\n"


def _prevalence_unavailable(bench: np.ndarray, threshold: float, nonmembers: np.ndarray) -> dict:
    """The prevalence entry when the TPR is unknown: flag rate and FPR only."""
    return {
        "flag_rate": float(np.mean(bench > threshold)),
        "fpr": float(np.mean(nonmembers > threshold)),
        "tpr": None,
        "estimate": None,
        "ci": [None, None],
        "threshold": float(threshold),
        "n_benchmark": len(bench),
        "n_cal_nonmembers": len(nonmembers),
        "n_cal_members": 0,
        "tpr_source": None,
        "notes": ["TPR unknown (no known members): corrected prevalence not available."],
    }


def _planted(manifest_path: Path | None, rows: Sequence[ScoredText]) -> dict | None:
    """The true member fraction of the scored items under a canary manifest."""
    if manifest_path is None:
        return None
    members = set(load_manifest(manifest_path)["member_ids"])
    n_members = sum(r.id in members for r in rows)
    return {"fraction": n_members / len(rows) if rows else math.nan, "n_members": n_members,
            "n_scored": len(rows), "manifest": str(manifest_path)}
