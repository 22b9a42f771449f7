"""``bbmia eval``: how well scorers separate KNOWN members from non-members (labelled data).

AUC and TPR at low FPR with bootstrap CIs (Carlini et al. 2022; Duan et al. 2024), results by
length bucket (WikiMIA's 32/64/128/256 words; Shi et al. 2024), and the blind text-only
baseline beside them (Das, Zhang & Tramèr 2024), whose verdict says whether the split is
distribution-shifted. With ``truncate_tokens`` it adds the prompt-length ablation
(:mod:`.ablation`: each text cut to its first L tokens, a scorer × L table and heat map).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..canary.dataset import load_items
from ..config import check_number
from ..spend.guard import guard_spend
from ..spend.plan import estimate_groups
from ..datasets import Item
from ..evaluation import (
    DEFAULT_FPRS,
    WIKIMIA_EDGES,
    blind_baseline,
    bootstrap_ci,
    distribution_shift_verdict,
    evaluate_by_length,
    evaluate_scores,
    plot_roc,
)
from ..evaluation.blind import BlindBaseline
from ..option_names import named
from ..runner import run_config, score_items
from ..scorers import DEFAULT_SCORERS, TARGET, Scorer, check_conditioning, parse_scorers
from ..scorers.bounded import DEFAULT_TOLERANCE_NATS, check_tolerance
from ..text import DEFAULT_SEGMENTER, get_segmenter
from ..tokenizers import TokenCodec
from ..types import BlackboxMIAError
from .ablation import AblationResult, run_prompt_length_ablation, truncated_items
from .common import (
    SCORES_FILE,
    AuditResult,
    Dropped,
    Log,
    dropped,
    publish,
    quiet,
    report_config,
    require_labelled,
    score_column,
    usable,
)


def length_unit(segmenter: str) -> str:
    """What the length buckets of ``segmenter`` count: ``"characters"`` or ``"words"``."""
    return get_segmenter(segmenter).unit


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
        length_edges: length bucket edges, in the segmenter's words (WikiMIA: 32, 64, 128, 256).
        segmenter: what the length buckets count (:data:`blackbox_mia.text.SEGMENTERS`:
            ``whitespace`` words, ``chars`` characters, ``japanese`` MeCab words, ``auto``).
        truncate_tokens: prompt lengths L (target tokens, strictly increasing) of the
            prompt-length ablation; empty = none.
        limit: only the first ``limit`` items.
        resume: keep the rows already in the scores files (same configuration).
        drop_unscored: leave out the texts without a usable score for every scorer (tokens known
            only by bounds, NaN) and say so, instead of stopping; both classes must remain.
        score_tolerance: nats; a score resting on log-prob means known less precisely is null
            (:meth:`~blackbox_mia.results.ScoredText.from_scores`).
    """

    dataset: str
    scorers: tuple[str, ...] = DEFAULT_SCORERS
    fprs: tuple[float, ...] = DEFAULT_FPRS
    n_boot: int = 1000
    seed: int = 0
    blind_folds: int = 5
    length_edges: tuple[int, ...] = WIKIMIA_EDGES
    segmenter: str = DEFAULT_SEGMENTER
    truncate_tokens: tuple[int, ...] = ()
    limit: int | None = None
    resume: bool = True
    drop_unscored: bool = False
    score_tolerance: float = DEFAULT_TOLERANCE_NATS

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        check_tolerance(self.score_tolerance)
        check_number(named("n_boot"), self.n_boot, at_least=0, integer=True)
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        check_number(named("blind_folds"), self.blind_folds, at_least=2, integer=True)
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=1, integer=True)
        bad = [f for f in self.fprs if not 0 < f < 1]  # also NaN
        if not self.fprs or bad:
            raise BlackboxMIAError(f"FPR targets must lie in (0, 1), got {list(self.fprs)}")
        if not self.scorers:
            raise BlackboxMIAError("no scorer given")
        get_segmenter(self.segmenter)
        for length in self.truncate_tokens:
            check_number(named("truncate_tokens"), length, at_least=1, integer=True)
        if any(b <= a for a, b in zip(self.truncate_tokens, self.truncate_tokens[1:])):
            raise BlackboxMIAError(f"{named('truncate_tokens')} must be strictly increasing, got {list(self.truncate_tokens)}")


@dataclass(frozen=True)
class EvalPlan:
    """Checked input of :func:`run_eval` (from :func:`prepare_eval`).

    Attributes:
        lengths: each item's length in the segmenter's words (characters for ``chars``), which
            the length buckets count.
    """

    config: EvalConfig
    items: list[Item]
    meta: dict
    scorers: list[Scorer]
    lengths: list[int]

    def scored_groups(self, codec: TokenCodec) -> dict[str, list[Item]]:
        """The groups of items :func:`run_eval` scores, each in its own run (what ``--dry-run``
        estimates): ``eval``, the dataset, then per prompt length L of ``truncate_tokens`` its
        texts cut by the target's tokenizer ``codec`` (``L32``...: :func:`.ablation.truncated_items`).

        Raises:
            BlackboxMIAError: a cut that holds nothing to score.
        """
        groups = {"eval": list(self.items)}
        for length in self.config.truncate_tokens:
            groups[f"L{length}"] = truncated_items(self.items, codec, length)[0]
        return groups


def prepare_eval(config: EvalConfig, cache_dir: str | os.PathLike | None = None) -> EvalPlan:
    """Load and check the labelled dataset and the scorer specs (no model needed).

    Args:
        config: the evaluation configuration.
        cache_dir: cache root override, where the ``canary`` dataset spec is found
            (:func:`blackbox_mia.canary.dataset.load_items`).

    Raises:
        BlackboxMIAError: bad configuration, unreadable or unlabelled dataset, bad scorer spec,
            a segmenter whose extra is not installed (``japanese``: ``ja``), a scorer's prefix
            file that is unreadable or holds evaluated items (:func:`~blackbox_mia.scorers.check_conditioning`).
    """
    config.validate()
    scorers = parse_scorers(list(config.scorers))
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    require_labelled(items, meta["name"])
    check_conditioning(scorers, (it.text for it in items), "the evaluated items")
    segmenter = get_segmenter(config.segmenter)  # a missing extra (japanese) fails before any scoring
    return EvalPlan(config, items, meta, scorers, [len(segmenter.segment(it.text).words) for it in items])


def run_eval(plan: EvalPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True, log: Log = quiet,
             yes: bool = False) -> AuditResult:
    """Score, evaluate and report (see the module docstring). Before the first request, the run's
    estimate (:meth:`EvalPlan.scored_groups`, what ``--dry-run`` prints) goes through the spend
    guard (:func:`~blackbox_mia.spend.guard.guard_spend`): ``yes=True``, or a backend with
    ``max_cost=``, lets a run above it proceed. Files in ``out_dir``:
    ``scores.jsonl`` (+ ``.config.json``), ``roc_linear.png``, ``roc_log.png``, ``eval.json``,
    ``eval.md``; with ``truncate_tokens`` also ``scores_L{L}.jsonl`` per L and
    ``prompt_length_auc.png``, the report's ``prompt_length`` section and the summary's
    ``prompt_length`` entry (:func:`~.ablation.run_prompt_length_ablation`).

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: a scorer the backend cannot serve, non-finite scores, a resumed
            scores file of another configuration.
    """
    config = plan.config
    out_dir = Path(out_dir)
    # the groups are cut with the target's tokenizer only when the guard judges the run
    guard_spend(lambda: estimate_groups(plan.scored_groups(backends[TARGET].codec), plan.scorers, backends),
                backends, yes)
    run_cfg = run_config(plan.scorers, backends, plan.meta, config.score_tolerance)
    rows, items, lengths, gone = _score(plan, backends, out_dir, run_cfg, progress, log)
    labels = np.array([r.label for r in rows], dtype=np.int64)
    scores = {s.label: score_column(rows, s.label, droppable=True) for s in plan.scorers}
    log("metrics with bootstrap CIs")
    metrics = {name: evaluate_scores(labels, s, config.fprs, config.n_boot, config.seed) for name, s in scores.items()}
    unit = length_unit(config.segmenter)
    buckets = {name: evaluate_by_length(labels, s, lengths, config.length_edges, config.fprs, config.n_boot, config.seed)
               for name, s in scores.items()}
    log("blind baseline (TF-IDF + logistic regression, cross-validated)")
    notes: list[str] = []
    warnings: list[str] = [] if gone is None else [gone.sentence()]  # also on the console: without them the AUCs mislead
    measured = EvalMeasures(metrics, buckets, unit, _dataset_tests(plan.scorers, scores, labels, config.seed, notes), gone)
    _blind(measured, items, labels, config, notes, warnings)
    curves = {name: (labels, s) for name, s in scores.items()}
    if measured.baseline is not None:
        curves["blind (TF-IDF)"] = (labels, measured.baseline.scores)
    model = run_cfg["backends"][TARGET]["model"]
    plots = {
        "ROC (linear axes)": plot_roc(curves, out_dir / "roc_linear.png", dataset=plan.meta["name"], model=model),
        "ROC (log-log axes, Carlini et al. 2022)": plot_roc(curves, out_dir / "roc_log.png", log_scale=True,
                                                            dataset=plan.meta["name"], model=model),
    }
    notes.append(f"Length buckets count {unit} (segmenter {config.segmenter!r}).")
    if config.truncate_tokens:
        log(f"prompt-length ablation: texts cut to {', '.join(map(str, config.truncate_tokens))} tokens")
        measured.ablation = run_prompt_length_ablation(items, plan.scorers, backends, config.truncate_tokens, out_dir,
                                                       run_cfg, config.fprs, config.n_boot, config.seed, config.resume,
                                                       progress)
        plots["AUC by prompt length (scorer × L)"] = measured.ablation.plot
    report = {
        "title": f"Membership inference evaluation: {plan.meta['name']}",
        "config": report_config(run_cfg, "eval", config, len(items), {"bootstrap": config.seed, "blind_folds": config.seed}),
        "scorers": metrics,
        "length_buckets": buckets,
        "length_unit": unit,
        "plots": plots,
        "notes": notes,
        **measured.sections(),
    }
    if measured.verdict is not None and measured.verdict["distribution_shift"]:
        warnings.append(measured.verdict["message"])
    return publish(report, measured.summary(), out_dir, "eval", warnings=warnings)


@dataclass
class EvalMeasures:
    """What one eval measured beyond the per-scorer metrics' table: the report's optional sections
    and the summary (:meth:`sections`, :meth:`summary`).

    Attributes:
        metrics: per scorer label, :func:`~blackbox_mia.evaluation.evaluate_scores`' dict (AUC, CI, TPR@FPR).
        buckets: per scorer label, the metrics by text length.
        unit: what the length buckets count (words, characters).
        dataset_tests: per scorer with a paper's dataset-level test, its result on members and non-members.
        gone: the texts dropped for want of a usable score, or None.
        baseline: the blind text-only baseline, or None when it could not run.
        blind: its JSON section (AUC, bootstrap CI), or None.
        verdict: the distribution-shift verdict, or None.
        ablation: the prompt-length ablation, or None when not asked for.
    """

    metrics: dict
    buckets: dict
    unit: str
    dataset_tests: dict
    gone: Dropped | None
    baseline: BlindBaseline | None = None
    blind: dict | None = None
    verdict: dict | None = None
    ablation: AblationResult | None = None

    def sections(self) -> dict:
        """The report's optional sections, in the report's order: ``prompt_length``,
        ``dropped_unscored``, ``dataset_tests``, ``blind_baseline`` and ``distribution_shift``."""
        out: dict = {}
        if self.ablation is not None:
            out["prompt_length"] = self.ablation.section
        if self.gone is not None:
            out["dropped_unscored"] = asdict(self.gone)
        if self.dataset_tests:
            out["dataset_tests"] = self.dataset_tests
        if self.blind is not None:
            out["blind_baseline"] = self.blind
            out["distribution_shift"] = self.verdict
        return out

    def summary(self) -> dict:
        """The eval's summary: AUC, its CI and TPR@FPR per scorer, the blind baseline's AUC, the
        distribution-shift flag, and when present the ablation, dataset tests and dropped count."""
        out = {
            "auc": {name: m["auc"] for name, m in self.metrics.items()},
            "auc_ci": {name: m["auc_ci"] for name, m in self.metrics.items()},
            "tpr_at_fpr": {name: m["tpr_at_fpr"] for name, m in self.metrics.items()},
            "blind_auc": None if self.baseline is None else self.baseline.auc,
            "distribution_shift": None if self.verdict is None else self.verdict["distribution_shift"],
        }
        if self.ablation is not None:
            out["prompt_length"] = self.ablation.summary
        if self.dataset_tests:
            out["dataset_tests"] = self.dataset_tests
        if self.gone is not None:
            out["dropped_unscored"] = self.gone.n
        return out


def _score(plan: EvalPlan, backends: dict[str, Backend], out_dir: Path, run_cfg: dict, progress: bool,
           log: Log) -> tuple[list, list[Item], list[int], Dropped | None]:
    """Score every text (``scores.jsonl``, resumable); with ``drop_unscored``, leave out the texts
    without a usable score. Returns the rows, their items and lengths, and what was dropped."""
    config, items, lengths = plan.config, plan.items, plan.lengths
    log(f"scoring {len(items)} texts with {', '.join(s.label for s in plan.scorers)}")
    rows = score_items(items, plan.scorers, backends, out_dir / SCORES_FILE, run_cfg, resume=config.resume, progress=progress)
    if not config.drop_unscored:
        return rows, items, lengths, None
    keep = usable(rows, [s.label for s in plan.scorers])
    gone = dropped("eval", [r.id for r in rows], ~keep)
    if gone is not None:
        rows, items = [r for r, k in zip(rows, keep) if k], [it for it, k in zip(items, keep) if k]
        lengths = [n for n, k in zip(lengths, keep) if k]
        require_labelled(items, f"{plan.meta['name']} once the texts without a usable score are dropped")
    return rows, items, lengths, gone


def _blind(measured: EvalMeasures, items: list[Item], labels: np.ndarray, config: EvalConfig, notes: list[str],
           warnings: list[str]) -> None:
    """The blind text-only baseline (Das, Zhang & Tramèr 2024) and the distribution-shift verdict
    against the best scorer's AUC, recorded in ``measured``; a baseline that cannot run is a note
    and a warning."""
    try:
        baseline = blind_baseline([it.text for it in items], labels, config.blind_folds, config.seed)
    except BlackboxMIAError as exc:
        notes.append(f"blind baseline not run: {exc}")
        warnings.append(f"blind baseline not run ({exc}): a distribution shift between members and non-members "
                        "would go unnoticed")
        return
    best = max(measured.metrics, key=lambda name: measured.metrics[name]["auc"])
    blind = baseline.to_dict()
    if config.n_boot:
        blind["auc_ci"] = list(bootstrap_ci(labels, baseline.scores, "auc", config.n_boot, seed=config.seed))
    verdict = distribution_shift_verdict(baseline.auc, measured.metrics[best]["auc"])
    verdict["best_model_scorer"] = best
    notes.append(verdict["message"])
    measured.baseline, measured.blind, measured.verdict = baseline, blind, verdict


def _dataset_tests(scorers: list[Scorer], scores: dict[str, np.ndarray], labels: np.ndarray, seed: int,
                   notes: list[str]) -> dict[str, dict[str, dict]]:
    """Per scorer with a paper's dataset-level test (:meth:`Scorer.dataset_test`), that test on the
    members and on the non-members apart (``{label: {"members": ..., "nonmembers": ...}}``), each
    also as one note."""
    out: dict[str, dict[str, dict]] = {}
    for scorer in scorers:
        for group, y in (("members", 1), ("nonmembers", 0)):
            chosen = scores[scorer.label][labels == y]
            test = scorer.dataset_test(chosen, seed) if chosen.size else None
            if test is None:
                continue
            out.setdefault(scorer.label, {})[group] = test
            p = "" if "sign_test_p" not in test else (f": mean {test['mean']:.4f}, sign test p = {test['sign_test_p']:.3g}, "
                                                      f"paper's bootstrap p = {test['bootstrap_p']:.3g}")
            matches = f": {test['matches']} of {test['n']}" if "matches" in test else ""
            notes.append(f"{scorer.label} dataset test ({test['test']}) on the {group}{p}{matches}: "
                         f"{'contaminated' if test['significant'] else 'not significant'}.")
    return out
