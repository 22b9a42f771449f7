"""Run the unlearning audit: score every text under both models, flag, complete, compare and report
(the method: :mod:`blackbox_mia.audits.unlearning`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ... import __version__
from ...backends.base import Backend
from ...datasets import Item
from ...evaluation import to_jsonable
from ...evaluation.plots import plot_histogram
from ...io import json_line, write_text_atomic
from ...runner import run_config, score_items
from ...scorers import TARGET
from ...scorers.loss import Loss
from ...scorers.min_k import MinK
from ...spend.guard import guard_spend
from ...spend.plan import estimate_report, estimate_texts
from ...text.segment import Segmenter, get_segmenter
from ..common import AuditResult, Log, publish, quiet
from ..completion import Completion, complete, cut_at, cut_completion
from .compare import FLAGGED, MEASURES, NOT_STILL_MEMORIZED, STILL_MEMORIZED, UNFLAGGED, compare_groups, split_completed
from .flags import flag_rule, flag_texts, score_ratio
from .plan import UnlearningPlan
from .report import unlearning_report, unlearning_warnings
from .truth import closeness_auc, flag_metrics, still_memorized


def _scores(plan: UnlearningPlan, model: Backend, path: Path) -> dict[str, dict[str, float | None]]:
    """``{id: {"min_k": ..., "loss": ...}}`` of every text under ``model`` (rows saved to ``path``)."""
    scorers = [MinK(plan.config.k), Loss()]
    backends = {TARGET: model}
    rows = score_items(plan.items, scorers, backends, path, run_config(scorers, backends, plan.meta),
                       resume=plan.config.resume, progress=False)
    return {r.id: {"min_k": r.scores[scorers[0].label], "loss": r.scores[scorers[1].label]} for r in rows}


def _cuts(plan: UnlearningPlan, items: Iterable[Item], after: Backend) -> list[Completion | None]:
    """Each item cut for story completion by ``after`` (its question in Q&A mode, else its first
    ``prompt_words`` words); None for an item too short or too long for it."""
    config = plan.config
    if plan.prompt_ends is not None:
        return [cut_at(it, plan.prompt_ends[it.id], config.max_new_tokens, after) for it in items]
    segmenter = get_segmenter(config.segmenter)
    return [cut_completion(it, config.prompt_words, config.max_new_tokens, segmenter, after) for it in items]


def estimate_unlearning(plan: UnlearningPlan, before: Backend, after: Backend) -> dict[str, dict]:
    """What :func:`run_unlearning` is expected to cost, sending nothing but a capability probe
    (:func:`~blackbox_mia.spend.plan.estimate_groups`' shape): the Min-K% and loss scores of every
    text under ``before`` (group ``scores_before``) and ``after`` (``scores_after``), and
    ``samples`` sampled continuations of every text long enough for a prompt (``completions``;
    with ``unflagged=False`` only the flagged texts are completed, so this is an upper bound).

    Raises:
        BlackboxMIAError: a backend that cannot give the scores' log-probs; a failed capability probe.
    """
    config = plan.config
    texts = [it.text for it in plan.items]
    scorers = [MinK(config.k), Loss()]
    cuts = [c for c in _cuts(plan, plan.items, after) if c is not None]
    completions = after.estimate_generation([len(after.codec.encode(c.prompt)) for c in cuts],
                                            [c.max_new_tokens for c in cuts], [config.samples] * len(cuts))
    return estimate_report({"scores_before": {"before": estimate_texts(texts, scorers, {TARGET: before})[TARGET]},
                            "scores_after": {"after": estimate_texts(texts, scorers, {TARGET: after})[TARGET]},
                            "completions": {"after": completions}})


def run_unlearning(
    plan: UnlearningPlan,
    before: Backend,
    after: Backend,
    out_dir: Path,
    truth: tuple[Path, Backend] | None = None,
    progress: bool = True,
    log: Log = quiet,
    yes: bool = False,
) -> AuditResult:
    """Score, flag, complete and report (see the module docstring). Before the first request,
    the estimate (:func:`estimate_unlearning`, what ``--dry-run`` prints) goes through the spend
    guard (:func:`~blackbox_mia.spend.guard.guard_spend`): ``yes=True``, or backends with
    ``max_cost=``, let a run above it proceed.

    Args:
        plan: from :func:`prepare_unlearning`.
        before: the original model (``logprobs``).
        after: the unlearned model (``logprobs`` and ``generate``).
        out_dir: the output folder.
        truth: (directory, local backend) of the unlearned canary that gives the ground
            truth, or None.
        yes: run even when the estimate exceeds the spend guard.

    Returns:
        The :class:`AuditResult`; its summary holds ``window`` (None under ``flag_fraction``),
        ``flag_fraction``, ``flag_rule`` (the rule in words), ``n_items``, ``n_flagged``,
        ``flagged_ids``, ``no_ratio_ids`` (texts without a usable ratio, never flagged),
        ``completion`` (per group ``flagged``/``unflagged`` and measure: n,
        mean and median of the per-text mean over samples), ``completion_difference``
        (:func:`mean_difference` per measure), ``skipped_completion`` and, with ``truth``,
        ``truth`` (:func:`flag_metrics`, :func:`closeness_auc`, the label's threshold, and
        ``completion`` / ``completion_difference`` as above but split by the label: the
        ``still_memorized`` texts minus the ``not_still_memorized`` ones, what the similarity
        can show at best when the flags are perfect).

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: a backend lacking a feature; a resumed file of another configuration.
    """
    config = plan.config
    out_dir = Path(out_dir)
    guard_spend(lambda: estimate_unlearning(plan, before, after), {"before": before, "after": after}, yes)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_item = _flag(plan, before, after, out_dir, log)
    flagged = {i for i, row in per_item.items() if row["flagged"]}
    segmenter = get_segmenter(config.segmenter)
    chosen = [it for it in plan.items if it.id in flagged or config.unflagged]
    skipped = _complete(plan, chosen, after, per_item, segmenter, out_dir, progress, log)
    groups = split_completed(per_item.values(), "flagged", (FLAGGED, UNFLAGGED))
    similarity, difference = compare_groups(groups, config.seed)
    truth_summary = None if truth is None else _truth(plan, truth, per_item, flagged, out_dir)
    write_text_atomic(out_dir / "unlearning_items.jsonl",
                      "".join(json_line(to_jsonable(row), f"item {i!r}") for i, row in per_item.items()))
    no_ratio = sorted(i for i, row in per_item.items() if row["ratio"] is None)
    summary = {
        "window": None if config.flag_fraction is not None else list(config.window),
        "flag_fraction": config.flag_fraction,
        "flag_rule": flag_rule(config),
        "ratio": f"min_k(after) / min_k(before), Min-K% at k = {config.k:g}% (mean log-prob of the k% least likely "
                 "tokens, nats/token, negative)",
        "n_items": len(plan.items),
        "n_flagged": len(flagged),
        "flagged_ids": sorted(flagged),
        "no_ratio_ids": no_ratio,
        "completion": similarity,
        "completion_difference": difference,
        "skipped_completion": skipped,
        "truth": truth_summary,
    }
    report = unlearning_report(plan, before, after, summary, _plots(groups, out_dir), segmenter.unit)
    warnings = unlearning_warnings(len(plan.items), no_ratio, len(chosen), skipped,
                                   {g: len(rows) for g, rows in groups.items()}, config.unflagged)
    return publish(report, summary, out_dir, "unlearning", hidden=("flagged_ids",), warnings=warnings)


def _flag(plan: UnlearningPlan, before: Backend, after: Backend, out_dir: Path, log: Log) -> dict[str, dict]:
    """Per text id, its row: Min-K% and loss before and after (``scores_before.jsonl``,
    ``scores_after.jsonl``), their ratio and whether the flag rule flags it."""
    config = plan.config
    log(f"Min-K% ({config.k:g}%) and loss of {len(plan.items)} texts under the original and the unlearned model")
    scored = {"before": _scores(plan, before, out_dir / "scores_before.jsonl"),
              "after": _scores(plan, after, out_dir / "scores_after.jsonl")}
    per_item = {}
    for item in plan.items:
        b, a = scored["before"][item.id], scored["after"][item.id]
        per_item[item.id] = {"id": item.id, "label": item.label, "min_k_before": b["min_k"], "min_k_after": a["min_k"],
                             "loss_before": b["loss"], "loss_after": a["loss"],
                             "ratio": score_ratio(b["min_k"], a["min_k"])}
    flags = flag_texts([row["ratio"] for row in per_item.values()], config.window, config.flag_fraction)
    for row, flag in zip(per_item.values(), flags):
        row["flagged"] = flag
    log(f"{sum(flags)} of {len(plan.items)} texts flagged ({flag_rule(config)})")
    return per_item


def _complete(plan: UnlearningPlan, chosen: list[Item], after: Backend, per_item: dict[str, dict],
              segmenter: Segmenter, out_dir: Path, progress: bool, log: Log) -> list[str]:
    """Story completion of the ``chosen`` texts by ``after`` (``completions.jsonl``, resumable): each
    completed text's row in ``per_item`` gets its mean similarity per measure and its reference.
    Returns the ids of the chosen texts that could not be cut into a prompt and a reference."""
    config = plan.config
    cuts = _cuts(plan, chosen, after)
    completions = [c for c in cuts if c is not None]
    skipped = sorted(it.id for it, c in zip(chosen, cuts) if c is None)
    log(f"story completion: {config.samples} samples for each of {len(completions)} texts ({len(skipped)} too short)")
    rows_config = {"package": "blackbox_mia", "version": __version__, "after": after.describe_generation(),
                   "dataset": plan.meta, "prompt_words": config.prompt_words, "max_new_tokens": config.max_new_tokens,
                   "segmenter": config.segmenter, "temperature": config.temperature, "seed": config.seed,
                   "qa": config.qa}
    rows = complete(completions, after, out_dir / "completions.jsonl", to_jsonable(rows_config), config.samples,
                    config.temperature, config.seed, segmenter, config.resume, progress)
    for completion in completions:
        mine = [r for r in rows if r["id"] == completion.item.id]
        for m in MEASURES:
            per_item[completion.item.id][m] = float(np.mean([r[m] for r in mine]))
        per_item[completion.item.id]["reference"] = completion.reference
    return skipped


def _plots(groups: dict[str, list[dict]], out_dir: Path) -> dict[str, Path]:
    """One histogram per measure of the flagged and unflagged texts' similarities (none unless both
    groups have a completed text)."""
    if not all(groups.values()):
        return {}
    return {f"Story completion, {m}": plot_histogram(
                [row[m] for row in groups[FLAGGED]], [row[m] for row in groups[UNFLAGGED]], None, out_dir / f"{m}.png",
                title=f"Story completion: {m} (mean over samples)", labels=(FLAGGED, UNFLAGGED))
            for m in MEASURES}


def _truth(plan: UnlearningPlan, truth: tuple[Path, Backend], per_item: dict[str, dict], flagged: set[str],
           out_dir: Path) -> dict:
    """The flags against the ground truth of an unlearned canary (:func:`still_memorized`, rows in
    ``truth_scores.jsonl``): each row gets ``still_memorized``; returns :func:`flag_metrics`,
    :func:`closeness_auc`, the label's threshold and the similarity comparison split by the label."""
    config = plan.config
    label = still_memorized(truth[0], truth[1], out_dir / "truth_scores.jsonl", config.truth_target_fpr, config.resume)
    positives = set(label["ids"])
    for row in per_item.values():
        row["still_memorized"] = row["id"] in positives
    by_label, by_label_difference = compare_groups(
        split_completed(per_item.values(), "still_memorized", (STILL_MEMORIZED, NOT_STILL_MEMORIZED)), config.seed)
    return {**flag_metrics(flagged, positives, list(per_item)),
            "closeness_auc": closeness_auc(list(per_item.values())),
            "completion": by_label, "completion_difference": by_label_difference,
            **{k: label[k] for k in ("threshold", "n_forget", "target_fpr", "fpr", "canary")}}
