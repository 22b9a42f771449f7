"""The two audits behind ``bbmia eval`` and ``bbmia sweep`` (library logic, no I/O to the terminal).

* :func:`run_eval` measures how well scorers separate KNOWN members from non-members (labelled
  data): AUC and TPR at low FPR with bootstrap CIs (Carlini et al. 2022; Duan et al. 2024),
  results by length bucket (WikiMIA's 32/64/128/256 words; Shi et al. 2024), and the blind
  text-only baseline beside them (Das, Zhang & Tramèr 2024), whose verdict says whether the
  split is distribution-shifted.
* :func:`run_sweep` estimates how much of an UNLABELLED benchmark leaked into a model: one
  scorer, a threshold calibrated on known non-members for a target FPR, the flag rate
  corrected for that FPR and the TPR measured on known members (Rogan & Gladen 1978,
  docs/design.md §5), and a one-sided Welch t-test of the benchmark against a non-member control
  built from the benchmark itself (:mod:`blackbox_mia.control`; Maini et al. 2024).

Both write the scores (JSONL, resumable through :func:`blackbox_mia.runner.score_items`), a JSON
+ Markdown report with the exact configuration (:func:`blackbox_mia.runner.run_config` plus the
audit's own config dataclass), and figures into one output folder. Convention: higher score =
more likely a member; labels 1 = member, 0 = non-member.

Each audit runs in two steps so that bad input fails before a model is loaded:
``prepare_*`` loads and checks the data (cheap), then ``run_*`` scores it with the backends.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..canary import MANIFEST, CanaryConfig, canary_dir, canary_items, load_manifest
from ..controls import ControlConfig, ControlSet, build_control, control_kind
from ..datasets import Dataset, Item, file_sha256, load_dataset
from ..evaluation import (
    DEFAULT_FPRS,
    RULES,
    WIKIMIA_EDGES,
    blind_baseline,
    bootstrap_ci,
    calibrate,
    dataset_level_test,
    distribution_shift_verdict,
    evaluate_by_length,
    evaluate_scores,
    plot_histogram,
    plot_roc,
    prevalence_with_ci,
    render_markdown,
    to_jsonable,
    write_report,
)
from ..runner import ScoredText, limit_items, run_config, score_items
from ..scorers import DEFAULT_SCORERS, Scorer, parse_scorer, parse_scorers
from ..types import BlackboxMIAError

CANARY = "canary"
TEXT_PREVIEW = 80  # characters of a text shown in the list of most suspicious items
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    """Default ``log``: say nothing."""


# ---------------------------------------------------------------------------------------------
# datasets


def _check_int(option: str, value: int, minimum: int) -> None:
    """Raise :class:`BlackboxMIAError` naming ``option`` unless ``value`` is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BlackboxMIAError(f"{option} must be an integer >= {minimum}, got {value!r}")


def is_canary_spec(spec: str) -> bool:
    """True for ``canary`` and ``canary:PATH``."""
    return spec == CANARY or spec.startswith(CANARY + ":")


def canary_spec_path(spec: str) -> Path:
    """The model directory of a canary spec: ``canary`` → ``canary_dir(CanaryConfig())`` (the
    default canary in the cache root), ``canary:PATH`` → PATH."""
    if spec == CANARY:
        return canary_dir(CanaryConfig())
    return Path(spec[len(CANARY) + 1 :]).expanduser()


def load_canary_dataset(spec: str) -> Dataset:
    """The labelled members (1) and non-members (0) of a trained canary, as a :class:`Dataset`.

    ``name`` is ``canary:<model dir>``, ``source`` the manifest and ``sha256`` the manifest's
    (it fixes the membership split).

    Raises:
        BlackboxMIAError: no complete canary there (train it with ``bbmia canary train``).
    """
    path = canary_spec_path(spec)
    if not (path / MANIFEST).is_file():
        hint = "bbmia canary train" if spec == CANARY else f"bbmia canary train --out {path}"
        raise BlackboxMIAError(f"no trained canary at {path} (no {MANIFEST}); train one with: {hint}")
    items = canary_items(path)
    return Dataset(f"{CANARY}:{path}", items, str(path / MANIFEST), file_sha256(path / MANIFEST))


def load_items(spec: str, limit: int | None = None) -> tuple[list[Item], dict]:
    """Items of a dataset spec (first ``limit``), and the dataset's metadata for the config.

    ``spec`` is anything :func:`blackbox_mia.datasets.load_dataset` takes, or ``canary`` /
    ``canary:PATH`` (see :func:`load_canary_dataset`).

    Raises:
        BlackboxMIAError: an unreadable dataset or missing canary, or ``limit`` < 1.
    """
    ds = load_canary_dataset(spec) if is_canary_spec(spec) else load_dataset(spec)
    return limit_items(ds.items, limit), {"name": ds.name, "source": ds.source, "sha256": ds.sha256}


def dataset_slug(name: str) -> str:
    """A folder-name-safe short name: a file's stem, ``canary`` for a canary, ``gsm8k-test``..."""
    if is_canary_spec(name):
        return CANARY
    if os.sep in name or "/" in name or name.endswith((".jsonl", ".json")):
        return Path(name).stem
    return name.replace(":", "-")


def require_labelled(items: Sequence[Item], name: str, what: str = "eval") -> None:
    """Raise unless every item has a label and both classes occur.

    Raises:
        BlackboxMIAError: unlabelled items, or a single class.
    """
    missing = sum(it.label is None for it in items)
    if missing:
        raise BlackboxMIAError(
            f"{what} needs a labelled dataset (label 1 = member, 0 = non-member on every item); "
            f"{name} has {missing} of {len(items)} items without a label. "
            "To estimate contamination of an unlabelled benchmark, use `bbmia sweep`."
        )
    classes = {it.label for it in items}
    if classes != {0, 1}:
        raise BlackboxMIAError(f"{what} needs both members (1) and non-members (0); {name} has only label {classes.pop()}")


# ---------------------------------------------------------------------------------------------
# eval


@dataclass(frozen=True)
class EvalConfig:
    """Configuration of one evaluation (saved in the report).

    Attributes:
        dataset: dataset spec (labelled).
        scorers: scorer specs (``min_k:k=10``...).
        fprs: FPR targets for TPR at low FPR (fractions).
        n_boot: bootstrap resamples for every CI (0 = no CI).
        seed: bootstrap seed and blind-baseline fold seed.
        blind_folds: cross-validation folds of the blind baseline.
        length_edges: word-count bucket edges (WikiMIA: 32, 64, 128, 256).
        limit: only the first ``limit`` items.
        resume: keep the rows already in the scores file (same configuration).
    """

    dataset: str
    scorers: tuple[str, ...] = DEFAULT_SCORERS
    fprs: tuple[float, ...] = DEFAULT_FPRS
    n_boot: int = 1000
    seed: int = 0
    blind_folds: int = 5
    length_edges: tuple[int, ...] = WIKIMIA_EDGES
    limit: int | None = None
    resume: bool = True

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        _check_int("--n-boot", self.n_boot, 0)
        _check_int("--seed", self.seed, 0)
        _check_int("--blind-folds", self.blind_folds, 2)
        if self.limit is not None:
            _check_int("--limit", self.limit, 1)
        bad = [f for f in self.fprs if not 0 < f < 1]  # also NaN
        if not self.fprs or bad:
            raise BlackboxMIAError(f"FPR targets must lie in (0, 1), got {list(self.fprs)}")
        if not self.scorers:
            raise BlackboxMIAError("no scorer given")


@dataclass(frozen=True)
class EvalPlan:
    """Checked input of :func:`run_eval` (from :func:`prepare_eval`)."""

    config: EvalConfig
    items: list[Item]
    meta: dict
    scorers: list[Scorer]


@dataclass(frozen=True)
class AuditResult:
    """What an audit produced.

    Attributes:
        summary: the machine-readable summary (the CLI's ``--json`` line).
        report: the full report dict.
        json_path, md_path: the report files.
        out_dir: the output folder (scores, figures, report).
    """

    summary: dict
    report: dict
    json_path: Path
    md_path: Path
    out_dir: Path


def default_scorer_specs(vocab_stats: bool) -> tuple[str, ...]:
    """The default scorers: all of ``DEFAULT_SCORERS``, without Min-K%++ when the target gives no
    full next-token distribution (black-box endpoints)."""
    return tuple(s for s in DEFAULT_SCORERS if vocab_stats or not parse_scorer(s).needs_vocab_stats)


def prepare_eval(config: EvalConfig) -> EvalPlan:
    """Load and check the labelled dataset and the scorer specs (no model needed).

    Raises:
        BlackboxMIAError: bad configuration, unreadable or unlabelled dataset, bad scorer spec.
    """
    config.validate()
    scorers = parse_scorers(list(config.scorers))
    items, meta = load_items(config.dataset, config.limit)
    require_labelled(items, meta["name"])
    return EvalPlan(config, items, meta, scorers)


def run_eval(plan: EvalPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True, log: Log = _quiet) -> AuditResult:
    """Score, evaluate and report (see the module docstring). Files in ``out_dir``:
    ``scores.jsonl`` (+ ``.config.json``), ``roc_linear.png``, ``roc_log.png``, ``eval.json``,
    ``eval.md``.

    Raises:
        BlackboxMIAError: a scorer the backend cannot serve, non-finite scores, a resumed
            scores file of another configuration.
    """
    config, items = plan.config, plan.items
    out_dir = Path(out_dir)
    run_cfg = run_config(plan.scorers, backends, plan.meta)
    log(f"scoring {len(items)} texts with {', '.join(s.label for s in plan.scorers)}")
    rows = score_items(items, plan.scorers, backends, out_dir / "scores.jsonl", run_cfg, resume=config.resume, progress=progress)
    labels = np.array([r.label for r in rows], dtype=np.int64)
    scores = {s.label: _column(rows, s.label) for s in plan.scorers}
    log("metrics with bootstrap CIs")
    metrics = {name: evaluate_scores(labels, s, config.fprs, config.n_boot, config.seed) for name, s in scores.items()}
    words = [len(it.text.split()) for it in items]
    buckets = {name: evaluate_by_length(labels, s, words, config.length_edges, config.fprs, config.n_boot, config.seed)
               for name, s in scores.items()}
    log("blind baseline (TF-IDF + logistic regression, cross-validated)")
    notes: list[str] = []
    blind, verdict = None, None
    try:
        baseline = blind_baseline([it.text for it in items], labels, config.blind_folds, config.seed)
    except BlackboxMIAError as exc:
        baseline = None
        notes.append(f"blind baseline not run: {exc}")
    best = max(scores, key=lambda name: metrics[name]["auc"])
    if baseline is not None:
        blind = baseline.to_dict()
        if config.n_boot:
            blind["auc_ci"] = list(bootstrap_ci(labels, baseline.scores, "auc", config.n_boot, seed=config.seed))
        verdict = distribution_shift_verdict(baseline.auc, metrics[best]["auc"])
        verdict["best_model_scorer"] = best
        notes.append(verdict["message"])
    curves = {name: (labels, s) for name, s in scores.items()}
    if baseline is not None:
        curves["blind (TF-IDF)"] = (labels, baseline.scores)
    plots = {
        "ROC (linear axes)": plot_roc(curves, out_dir / "roc_linear.png"),
        "ROC (log-log axes, Carlini et al. 2022)": plot_roc(curves, out_dir / "roc_log.png", log_scale=True),
    }
    notes.append("Length buckets count whitespace-separated words (unsegmented text such as Japanese "
                 "needs a word segmenter first).")
    report = {
        "title": f"Membership inference evaluation: {plan.meta['name']}",
        "config": {**run_cfg, "eval": asdict(config), "n_items": len(items), "scores_file": "scores.jsonl",
                   "seeds": {"bootstrap": config.seed, "blind_folds": config.seed}},
        "scorers": metrics,
        "length_buckets": buckets,
        "plots": plots,
        "notes": notes,
    }
    if blind is not None:
        report["blind_baseline"] = blind
        report["distribution_shift"] = verdict
    json_path, md_path = write_report(report, out_dir, "eval")
    summary = {
        "auc": {name: m["auc"] for name, m in metrics.items()},
        "auc_ci": {name: m["auc_ci"] for name, m in metrics.items()},
        "tpr_at_fpr": {name: m["tpr_at_fpr"] for name, m in metrics.items()},
        "blind_auc": None if baseline is None else baseline.auc,
        "distribution_shift": None if verdict is None else verdict["distribution_shift"],
        "report": str(json_path),
    }
    return AuditResult(to_jsonable(summary), report, json_path, md_path, out_dir)


def _column(rows: Sequence[ScoredText], label: str) -> np.ndarray:
    """The scores of one scorer as a float64 array.

    Raises:
        BlackboxMIAError: a row whose score was NaN or infinite (stored as null).
    """
    bad = [r.id for r in rows if r.scores[label] is None]
    if bad:
        raise BlackboxMIAError(
            f"scorer {label!r} gave a NaN or infinite score on {len(bad)} texts (first: {bad[0]!r}; null in the "
            "scores file): no metric can use it; drop those texts or choose another scorer"
        )
    return np.array([r.scores[label] for r in rows], dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# sweep


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
        _check_int("--n-boot", self.n_boot, 1)
        _check_int("--seed", self.seed, 0)
        _check_int("--top", self.top, 0)
        if self.limit is not None:
            _check_int("--limit", self.limit, 1)
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


def find_canary_manifest(calibration: str | None, target_paths: Sequence[str | None] = ()) -> Path | None:
    """The manifest of the canary being audited: in a target model directory (``--local``,
    ``--model`` or ``--tokenizer`` naming one), else in a ``canary…`` calibration; else None."""
    for candidate in target_paths:
        if candidate and (Path(candidate).expanduser() / MANIFEST).is_file():
            return Path(candidate).expanduser() / MANIFEST
    if calibration and is_canary_spec(calibration):
        path = canary_spec_path(calibration) / MANIFEST
        return path if path.is_file() else None
    return None


def prepare_sweep(config: SweepConfig, target_paths: Sequence[str | None] = (), log: Log = _quiet) -> SweepPlan:
    """Load the benchmark, the calibration data and build the control (no model needed).

    Args:
        config: the sweep configuration.
        target_paths: paths naming the target model (to find a canary manifest).
        log: receives progress messages.

    Raises:
        BlackboxMIAError: bad options, unreadable data, a calibration set without both classes,
            non-members labelled 1, or no source of non-members at all.
    """
    config.validate()
    scorer = parse_scorer(config.scorer)
    items, meta = load_items(config.dataset, config.limit)
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
        cal_items, cal_meta = load_items(config.calibration)
        require_labelled(cal_items, cal_meta["name"], "--calibration")
        calibration = (cal_items, cal_meta)
    elif config.nonmembers:
        non_items, non_meta = load_items(config.nonmembers)
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
    manifest = find_canary_manifest(config.calibration, target_paths)
    return SweepPlan(config, items, meta, scorer, calibration, nonmembers, control, manifest)


def run_sweep(plan: SweepPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True, log: Log = _quiet) -> AuditResult:
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
    rows = score_items(plan.items, [scorer], backends, out_dir / "scores.jsonl", run_cfg, resume=config.resume, progress=progress)
    bench = _column(rows, scorer.label)
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
        "config": {**run_cfg, "sweep": asdict(config), "n_items": len(plan.items),
                   "calibration": plan.calibration[1] if plan.calibration else None,
                   "nonmembers": plan.nonmembers[1] if plan.nonmembers else None,
                   "seeds": {"bootstrap": config.seed, "control": config.control_config.seed},
                   "scores_file": "scores.jsonl"},
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
    json_path, md_path = write_report(report, out_dir, "sweep")
    md_path.write_text(  # the same Markdown, with the suspicious items as a table
        render_markdown(to_jsonable({k: v for k, v in report.items() if k != "most_suspicious"}), out_dir)
        + _suspicious_table(suspicious),
        encoding="utf-8",
    )
    summary = {
        "flag_rate": prevalence["flag_rate"],
        "fpr": prevalence["fpr"],
        "tpr": prevalence["tpr"],
        "prevalence": {"estimate": prevalence["estimate"], "ci": prevalence["ci"]},
        "p_value": None if dataset_test is None else dataset_test["p_value"],
        "threshold": threshold.value,
        "n": len(plan.items),
        "report": str(json_path),
    }
    if planted is not None:
        summary["planted"] = planted["fraction"]
    return AuditResult(to_jsonable(summary), report, json_path, md_path, out_dir)


def _control_scores(plan: SweepPlan, backends: dict[str, Backend], out_dir: Path, progress: bool, log: Log) -> np.ndarray | None:
    """Scores of the control items (``control_scores.jsonl``); None without a usable control."""
    if plan.control is None or len(plan.control.items) < 2:
        return None
    log(f"scoring {len(plan.control.items)} control items")
    meta = {"name": f"control of {plan.meta['name']}", "source": plan.meta["source"],
            "sha256": plan.meta["sha256"], "construction": asdict(plan.control.config)}
    rows = score_items(plan.control.items, [plan.scorer], backends, out_dir / "control_scores.jsonl",
                       run_config([plan.scorer], backends, meta), resume=plan.config.resume, progress=progress)
    return _column(rows, plan.scorer.label)


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
        known = {**known, **dict(zip((it.text for it in todo), _column(rows, plan.scorer.label)))}
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


__all__ = [
    "AuditResult", "EvalConfig", "EvalPlan", "SweepConfig", "SweepPlan", "dataset_slug",
    "default_scorer_specs", "find_canary_manifest", "is_canary_spec", "load_canary_dataset",
    "load_items", "prepare_eval", "prepare_sweep", "require_labelled", "run_eval", "run_sweep",
]
