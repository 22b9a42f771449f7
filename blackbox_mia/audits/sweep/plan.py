"""What a contamination sweep is asked to do (:class:`SweepConfig`) and what it runs on
(:class:`SweepPlan`, from :func:`prepare_sweep`): the benchmark, the calibration or known
non-members, the control built from the benchmark, the canary manifest that knows the truth.
Nothing here needs a model; :func:`.sweep.run_sweep` scores and reports."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...canary import find_canary_manifest
from ...canary.dataset import load_items
from ...config import check_number
from ...controls import ControlConfig, ControlSet, build_control, control_kind
from ...datasets import Item
from ...evaluation import RULES, min_nonmembers
from ...option_names import named
from ...scorers import Scorer, check_conditioning, parse_scorer, parse_scorers
from ...scorers.bounded import DEFAULT_TOLERANCE_NATS, check_tolerance
from ...types import BlackboxMIAError
from ..common import Log, quiet, require_labelled


@dataclass(frozen=True)
class SweepConfig:
    """Configuration of one contamination sweep (saved in the report).

    Attributes:
        dataset: the benchmark spec (labels, if any, are ignored).
        scorer: one scorer spec (default ``min_k``, k = 20%).
        features: more scorer specs, scored in the same pass: with labelled members
            (``--calibration``) the verdict tests their combination with ``scorer``
            (:func:`~blackbox_mia.evaluation.detection.combined_scores`); "" = ``scorer`` alone.
        rule: threshold rule, one of ``evaluation.RULES`` (``max_*`` need labelled members).
        target_fpr: FPR asked for by rule ``fpr`` (fraction).
        calibration: a labelled calibration spec (JSONL with labels, ``canary``, ``canary:PATH``).
        calibration_fraction: calibrate on a seeded (``seed``), label-stratified share of the
            calibration items; the others are not calibration items, so those in the benchmark
            stay among the swept items, unlabelled (1 = all calibrate).
        nonmembers: a spec of known non-members only (labels must be 0 or absent).
        assumed_tpr: the threshold's TPR to assume when no members are known (fraction).
        control: build the non-member control from the benchmark: None = whenever the items are
            GSM8K or AQuA problems; True = required; False = never.
        control_config: the control's construction (seed, perturbation size).
        limit: only the first ``limit`` benchmark items.
        seed: seed of the ``calibration_fraction`` share.
        top: how many of the highest-scoring items the report lists.
        resume: keep the rows already in the score files (same configuration).
        drop_unscored: leave out the texts (benchmark, calibration, control) without a usable
            score for every scorer (tokens known only by bounds, NaN) and say so, instead of
            stopping. The same rule, a property of the text and the endpoint, applies to the
            calibration and to the swept items, so calibration non-members exchangeable with the
            benchmark's stay exchangeable with the swept ones: the estimate is then the member
            fraction of the kept swept items.
        score_tolerance: nats; a score resting on log-prob means known less precisely is null
            (:meth:`~blackbox_mia.results.ScoredText.from_scores`).
    """

    dataset: str
    scorer: str = "min_k"
    features: str = ""
    rule: str = "fpr"
    target_fpr: float = 0.05
    calibration: str | None = None
    calibration_fraction: float = 1.0
    nonmembers: str | None = None
    assumed_tpr: float | None = None
    control: bool | None = None
    control_config: ControlConfig = field(default_factory=ControlConfig)
    limit: int | None = None
    seed: int = 0
    top: int = 10
    resume: bool = True
    drop_unscored: bool = False
    score_tolerance: float = DEFAULT_TOLERANCE_NATS

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible or contradictory options."""
        check_tolerance(self.score_tolerance)
        if self.rule not in RULES:
            raise BlackboxMIAError(f"unknown {named('rule')} {self.rule!r}; choose from {', '.join(RULES)}")
        if not 0 < self.target_fpr < 1:
            raise BlackboxMIAError(f"{named('target_fpr')} must be in (0, 1), got {self.target_fpr}")
        if self.calibration and self.nonmembers:
            raise BlackboxMIAError(f"give {named('calibration')} (labelled) or {named('nonmembers')}, not both")
        if self.assumed_tpr is not None:
            if not 0 < self.assumed_tpr <= 1:
                raise BlackboxMIAError(f"{named('assumed_tpr')} must be in (0, 1], got {self.assumed_tpr}")
            if self.calibration:
                raise BlackboxMIAError(f"{named('assumed_tpr')} is for calibrations without members; "
                                       f"with {named('calibration')} the TPR is measured on its members")
        if not 0 < self.calibration_fraction <= 1:
            raise BlackboxMIAError(f"{named('calibration_fraction')} must be in (0, 1], got {self.calibration_fraction}")
        if self.calibration_fraction < 1 and not self.calibration:
            raise BlackboxMIAError(f"{named('calibration_fraction')} needs {named('calibration')}")
        if self.rule != "fpr" and not self.calibration:
            raise BlackboxMIAError(f"{named('rule', self.rule)} needs labelled members: give {named('calibration')}")
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        check_number(named("top"), self.top, at_least=0, integer=True)
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=1, integer=True)
        self.control_config.validate()


@dataclass(frozen=True)
class SweepPlan:
    """Checked input of :func:`.sweep.run_sweep` (from :func:`prepare_sweep`).

    Attributes:
        calibration: labelled calibration items (from ``--calibration``), else None.
        nonmembers: known non-members (from ``--nonmembers``), else None.
        control: the control built from the benchmark, else None.
        planted_manifest: a canary manifest whose members give the true member fraction.
        features: the scorers of ``config.features`` (scored with ``scorer``, one pass).
    """

    config: SweepConfig
    items: list[Item]
    meta: dict
    scorer: Scorer
    calibration: tuple[list[Item], dict] | None
    nonmembers: tuple[list[Item], dict] | None
    control: ControlSet | None
    planted_manifest: Path | None
    features: tuple[Scorer, ...] = ()

    @property
    def scorers(self) -> list[Scorer]:
        """Every scorer a sweep runs: its scorer, then the features."""
        return [self.scorer, *self.features]

    def scored_groups(self) -> dict[str, list[Item]]:
        """The groups of items :func:`.sweep.run_sweep` scores, each in its own run (what ``--dry-run``
        estimates): the benchmark, the control (with the two items a sweep needs), and the
        calibration or known non-members not in the benchmark (the others reuse its scores)."""
        benchmark = {it.text for it in self.items}
        groups = {"benchmark": list(self.items)}
        if self.control is not None and len(self.control.items) >= 2:
            groups["control"] = list(self.control.items)
        labelled = self.calibration if self.calibration is not None else self.nonmembers
        if labelled is not None:
            groups["calibration"] = [it for it in labelled[0] if it.text not in benchmark]
        return groups


def sweep_scorers(scorer: str, features: str) -> tuple[Scorer, ...]:
    """The sweep's scorers, read once from their specs: ``scorer``, then the ``features``
    (:attr:`SweepConfig.scorer`, :attr:`SweepConfig.features`).

    Raises:
        BlackboxMIAError: a bad spec, two features alike, or a feature that repeats the scorer.
    """
    first = parse_scorer(scorer)
    features_read = tuple(parse_scorers(features)) if features else ()
    if first.label in {f.label for f in features_read}:
        raise BlackboxMIAError(f"{named('features')} repeats {named('scorer', scorer)}")
    return (first, *features_read)


def prepare_sweep(config: SweepConfig, target_model: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None, log: Log = quiet,
                  scorers: tuple[Scorer, ...] | None = None) -> SweepPlan:
    """Load the benchmark, the calibration data and build the control (no model needed).

    Args:
        config: the sweep configuration.
        scorers: its scorer and features as the command read them (:func:`sweep_scorers` of
            ``config.scorer`` and ``config.features``, read once at the command's edge); ``None``:
            read here.
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
    scorer, *features = scorers if scorers is not None else sweep_scorers(config.scorer, config.features)
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    kind = control_kind(items)
    if config.control and kind is None:
        raise BlackboxMIAError(f"{named('control', True)} needs GSM8K or AQuA problems; {meta['name']} holds other items")
    control = None
    if config.control is not False and kind is not None:
        control = build_control(items, config.control_config)
        log(f"control: kept {len(control.items)} of {control.n_source} {kind} items "
            f"({100 * control.kept_fraction:.1f}%) with new numbers")
    calibration = nonmembers = None
    if config.calibration:
        cal_items, cal_meta = load_items(config.calibration, cache_dir=cache_dir)
        require_labelled(cal_items, cal_meta["name"], named("calibration"))
        if config.calibration_fraction < 1:
            cal_items = _stratified_share(cal_items, config.calibration_fraction, config.seed)
            cal_meta = {**cal_meta, "fraction": config.calibration_fraction, "n_used": len(cal_items)}
        calibration = (cal_items, cal_meta)
    elif config.nonmembers:
        non_items, non_meta = load_items(config.nonmembers, cache_dir=cache_dir)
        if any(it.label == 1 for it in non_items):
            raise BlackboxMIAError(f"{named('nonmembers', non_meta['name'])} holds items labelled 1 (members); "
                                   f"give a labelled set with {named('calibration')} instead")
        nonmembers = (non_items, non_meta)
    elif control is None:
        raise BlackboxMIAError(
            f"no known non-members to calibrate on: give {named('calibration')} (a labelled set, or canary / "
            f"canary:PATH) or {named('nonmembers')} (a path), or sweep GSM8K/AQuA problems (a control is then built)"
        )
    need = min_nonmembers(config.target_fpr)
    if not calibration and not nonmembers and len(control.items) < need:
        raise BlackboxMIAError(
            f"the control kept only {len(control.items)} of {control.n_source} items: too few to estimate an FPR "
            f"at the target {config.target_fpr:g} (need >= {need}, so that at least one non-member lies above the "
            f"threshold); give known non-members with {named('calibration')} (a labelled set) or "
            f"{named('nonmembers')} (a path)"
        )
    manifest = find_canary_manifest(target_model)
    groups = [items, *(group[0] for group in (calibration, nonmembers) if group)]
    check_conditioning((scorer, *features), (it.text for group in groups for it in group), "the sweep's own items")
    return SweepPlan(config, items, meta, scorer, calibration, nonmembers, control, manifest, tuple(features))


def _stratified_share(items: list[Item], fraction: float, seed: int) -> list[Item]:
    """A seeded share of ``items``: round(fraction · n) of each label (at least one), in input order.

    Raises:
        BlackboxMIAError: a label left with no item.
    """
    rng = np.random.default_rng(seed)
    keep = set()
    for label in (0, 1):
        index = [i for i, it in enumerate(items) if it.label == label]
        n = max(1, round(fraction * len(index)))
        keep.update(rng.choice(index, n, replace=False).tolist())
    return [it for i, it in enumerate(items) if i in keep]
