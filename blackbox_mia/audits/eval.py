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
from ..option_names import named
from ..runner import run_config, score_items
from ..scorers import DEFAULT_SCORERS, TARGET, Scorer, parse_scorers
from ..text import DEFAULT_SEGMENTER, get_segmenter
from ..tokenizers import TokenCodec
from ..types import BlackboxMIAError
from .ablation import run_prompt_length_ablation, truncated_items
from .common import (
    SCORES_FILE,
    AuditResult,
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

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
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
            a segmenter whose extra is not installed (``japanese``: ``ja``).
    """
    config.validate()
    scorers = parse_scorers(list(config.scorers))
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    require_labelled(items, meta["name"])
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
    config, items = plan.config, plan.items
    out_dir = Path(out_dir)
    # the groups are cut with the target's tokenizer only when the guard judges the run
    guard_spend(lambda: estimate_groups(plan.scored_groups(backends[TARGET].codec), plan.scorers, backends),
                backends, yes)
    run_cfg = run_config(plan.scorers, backends, plan.meta)
    log(f"scoring {len(items)} texts with {', '.join(s.label for s in plan.scorers)}")
    rows = score_items(items, plan.scorers, backends, out_dir / SCORES_FILE, run_cfg, resume=config.resume, progress=progress)
    lengths, gone = plan.lengths, None
    if config.drop_unscored:
        keep = usable(rows, [s.label for s in plan.scorers])
        gone = dropped("eval", [r.id for r in rows], ~keep)
        if gone is not None:
            rows, items = [r for r, k in zip(rows, keep) if k], [it for it, k in zip(items, keep) if k]
            lengths = [n for n, k in zip(lengths, keep) if k]
            require_labelled(items, f"{plan.meta['name']} once the texts without a usable score are dropped")
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
    dataset_tests = _dataset_tests(plan.scorers, scores, labels, config.seed, notes)
    blind, verdict = None, None
    try:
        baseline = blind_baseline([it.text for it in items], labels, config.blind_folds, config.seed)
    except BlackboxMIAError as exc:
        baseline = None
        notes.append(f"blind baseline not run: {exc}")
        warnings.append(f"blind baseline not run ({exc}): a distribution shift between members and non-members "
                        "would go unnoticed")
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
    model = run_cfg["backends"][TARGET]["model"]
    plots = {
        "ROC (linear axes)": plot_roc(curves, out_dir / "roc_linear.png", dataset=plan.meta["name"], model=model),
        "ROC (log-log axes, Carlini et al. 2022)": plot_roc(curves, out_dir / "roc_log.png", log_scale=True,
                                                            dataset=plan.meta["name"], model=model),
    }
    notes.append(f"Length buckets count {unit} (segmenter {config.segmenter!r}).")
    ablation = None
    if config.truncate_tokens:
        log(f"prompt-length ablation: texts cut to {', '.join(map(str, config.truncate_tokens))} tokens")
        ablation = run_prompt_length_ablation(items, plan.scorers, backends, config.truncate_tokens, out_dir, run_cfg,
                                              config.fprs, config.n_boot, config.seed, config.resume, progress)
        plots["AUC by prompt length (scorer × L)"] = ablation.plot
    report = {
        "title": f"Membership inference evaluation: {plan.meta['name']}",
        "config": report_config(run_cfg, "eval", config, len(items), {"bootstrap": config.seed, "blind_folds": config.seed}),
        "scorers": metrics,
        "length_buckets": buckets,
        "length_unit": unit,
        "plots": plots,
        "notes": notes,
    }
    if ablation is not None:
        report["prompt_length"] = ablation.section
    if gone is not None:
        report["dropped_unscored"] = asdict(gone)
    if dataset_tests:
        report["dataset_tests"] = dataset_tests
    if blind is not None:
        report["blind_baseline"] = blind
        report["distribution_shift"] = verdict
    summary = {
        "auc": {name: m["auc"] for name, m in metrics.items()},
        "auc_ci": {name: m["auc_ci"] for name, m in metrics.items()},
        "tpr_at_fpr": {name: m["tpr_at_fpr"] for name, m in metrics.items()},
        "blind_auc": None if baseline is None else baseline.auc,
        "distribution_shift": None if verdict is None else verdict["distribution_shift"],
    }
    if ablation is not None:
        summary["prompt_length"] = ablation.summary
    if dataset_tests:
        summary["dataset_tests"] = dataset_tests
    if verdict is not None and verdict["distribution_shift"]:
        warnings.append(verdict["message"])
    if gone is not None:
        summary["dropped_unscored"] = gone.n
    return publish(report, summary, out_dir, "eval", warnings=warnings)


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
