"""``bbmia unlearning``: did unlearning fail? (Shi et al. 2024 §7, the machine-unlearning audit).

Every text is scored under the original model ("before") and the unlearned one ("after") with
Min-K% Prob (the paper's definition, eq. 1: the mean log-probability of the k% least likely
tokens, nats/token, a negative number) and the loss score (mean log-probability). The ratio
``min_k(after) / min_k(before)`` of the two negative scores (equivalently, of the two mean
negative log-likelihoods of the k% tokens) stays near 1 when unlearning left the text as
likely as before: a text whose ratio lies strictly inside the window (default (1/1.15, 1.15))
is flagged, unlearning likely failed there. A ratio above the window means the text became
less likely (forgotten); below, more likely. The window's 1.15 is tied to the scores' scale (a
member that must lose 2 nats/token to be forgotten never stays inside it); the scale-free
alternative, ``flag_fraction`` (``--flag-least-changed F``), flags the share F of the texts that
unlearning changed least, the smallest ``|ln ratio|`` (:func:`least_changed`).

Story completion (:mod:`.completion`) then prompts the "after" model with each flagged text's
first W words and compares sampled continuations with the true one (ROUGE-L recall and
approximate memorization); the unflagged texts get the same treatment for comparison.

Ground truth, when the "after" model is an unlearned canary (``bbmia canary unlearn``): a
forgotten member is *still memorized* when its loss score under the unlearned canary (white
box, computed locally) exceeds the ``1 - truth_target_fpr`` quantile of the canary's
non-members' loss scores under the same model; the report gives the precision and recall of the flagged set
against that label and its base rate (the share of audited texts that are
forgotten-but-still-memorized): :mod:`.unlearning_truth`.

Files in the output folder: ``scores_before.jsonl``, ``scores_after.jsonl`` (resumable, as
``bbmia score`` writes them), ``completions.jsonl`` (one row per text and sample, resumable),
``truth_scores.jsonl`` (with ground truth), ``unlearning_items.jsonl`` (per text: scores,
ratio, flag, mean similarities, label), ``rouge_l_recall.png``, ``approximate.png``,
``unlearning.json`` and ``unlearning.md``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from .. import __version__
from ..backends.base import Backend
from ..canary.dataset import load_items
from ..config import check_number
from ..spend.guard import guard_spend
from ..spend.plan import estimate_report, estimate_texts
from ..datasets import Item, file_sha256, limit_items, read_jsonl
from ..datasets.formats import parse_label
from ..evaluation import bootstrap_ci, to_jsonable
from ..evaluation.plots import plot_histogram
from ..io import json_line, write_text_atomic
from ..key_aliases import UNLEARNING_CONFIG_KEYS, with_old_keys
from ..option_names import named
from ..runner import run_config, score_items
from ..scorers import TARGET
from ..scorers.loss import Loss
from ..scorers.min_k import MinK
from ..text.segment import get_segmenter
from ..types import BlackboxMIAError
from .common import AuditResult, Log, publish, quiet
from .completion import Completion, complete, cut_at, cut_completion
from .unlearning_truth import closeness_auc, flag_metrics, log_change, still_memorized

RATIO_WINDOW = (1 / 1.15, 1.15)  # Shi et al. 2024 §7.1
QA_SEPARATOR = " "  # between a question and its answer in the scored text
MEASURES = ("rouge_l_recall", "approximate")
FLAGGED, UNFLAGGED = "flagged", "unflagged"
STILL_MEMORIZED, NOT_STILL_MEMORIZED = "still_memorized", "not_still_memorized"  # groups by the ground truth


@dataclass(frozen=True)
class UnlearningConfig:
    """Configuration of one unlearning audit (saved in the report).

    Attributes:
        dataset: dataset spec of the audited texts (labels are not needed).
        window: (low, high): a text is flagged when low < ratio < high (the default rule).
        k: Min-K% percentage of tokens kept.
        prompt_words: W, the words of the story-completion prompt (segmenter words).
        samples: sampled continuations per text.
        temperature: sampling temperature (> 0).
        max_new_tokens: the most tokens generated (the reference is cut to as many).
        segmenter: segmenter name for W and ROUGE-L (``auto``: Japanese or whitespace words).
        unflagged: also complete the unflagged texts (the comparison).
        truth_target_fpr: ground truth: the non-members' share allowed above the label's threshold,
            the ``1 - truth_target_fpr`` quantile of their loss scores (a target FPR).
        seed: sampling seed (sample j of a text uses seed + j).
        limit: only the first ``limit`` texts.
        resume: keep the rows already in the output files (same configuration).
        qa: Q&A mode: ``dataset`` is a JSONL of ``question`` and ``answer`` (:func:`load_qa`);
            the ratio is taken on ``question + " " + answer``, the prompt is the question and
            the reference its answer (``prompt_words`` unused).
        flag_fraction: F in (0, 1), instead of the window: flag the share F of the texts (``F * n``
            rounded half up, at least one) with the smallest ``|ln ratio|`` (:func:`least_changed`);
            None: the window.
    """

    dataset: str
    window: tuple[float, float] = RATIO_WINDOW
    k: float = 20.0
    prompt_words: int = 200
    samples: int = 20
    temperature: float = 1.0
    max_new_tokens: int = 128
    segmenter: str = "auto"
    unflagged: bool = True
    truth_target_fpr: float = 0.05
    seed: int = 0
    limit: int | None = None
    resume: bool = True
    qa: bool = False
    flag_fraction: float | None = None

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        low, high = self.window
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise BlackboxMIAError(f"{named('window')} must be two finite numbers 0 < low < high, got {low}, {high}")
        if self.flag_fraction is not None:
            if not (math.isfinite(self.flag_fraction) and 0 < self.flag_fraction < 1):
                raise BlackboxMIAError(f"{named('flag_fraction')} must lie in (0, 1), got {self.flag_fraction}")
            if self.window != RATIO_WINDOW:
                raise BlackboxMIAError(f"{named('flag_fraction')} and {named('window')} are two flag rules: give one")
        if not 0 < self.k <= 100:
            raise BlackboxMIAError(f"{named('k')} must lie in (0, 100] percent, got {self.k}")
        check_number(named("prompt_words"), self.prompt_words, at_least=1, integer=True)
        check_number(named("samples"), self.samples, at_least=1, integer=True)
        check_number(named("max_new_tokens"), self.max_new_tokens, at_least=1, integer=True)
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise BlackboxMIAError(f"{named('temperature')} must be > 0 (sampling), got {self.temperature}")
        if not 0 < self.truth_target_fpr < 1:
            raise BlackboxMIAError(f"{named('truth_target_fpr')} must lie in (0, 1), got {self.truth_target_fpr}")
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=1, integer=True)
        get_segmenter(self.segmenter)


def score_ratio(before: float | None, after: float | None) -> float | None:
    """``after / before`` of two Min-K% scores (both <= 0, nats/token); None when either is
    missing or ``before`` is 0 (the ratio is undefined)."""
    if before is None or after is None or before == 0:
        return None
    return after / before


def in_window(ratio: float | None, window: tuple[float, float]) -> bool:
    """Whether ``ratio`` lies strictly inside ``window`` (flagged: unlearning likely failed)."""
    return ratio is not None and window[0] < ratio < window[1]


def least_changed(ratios: list[float | None], fraction: float) -> list[bool]:
    """The scale-free flag rule: flag the texts unlearning changed least.

    Args:
        ratios: per text, in text order, ``min_k(after) / min_k(before)`` (None: undefined).
        fraction: F in (0, 1), the share of the texts to flag.

    Returns:
        Per text, whether it is flagged: the ``max(1, floor(F * n + 0.5))`` texts (``F * n``
        rounded half up, ``n = len(ratios)``) with the smallest ``|ln ratio|``, ties going to
        the earlier text. A text without a positive ratio is never flagged (so fewer are
        flagged when fewer have one).
    """
    n_flag = max(1, math.floor(fraction * len(ratios) + 0.5))
    changes = [log_change(r) for r in ratios]
    ranked = sorted((i for i, c in enumerate(changes) if c is not None), key=lambda i: (changes[i], i))
    chosen = set(ranked[:n_flag])
    return [i in chosen for i in range(len(ratios))]


def flag_texts(ratios: list[float | None], window: tuple[float, float] = RATIO_WINDOW,
               fraction: float | None = None) -> list[bool]:
    """Per text (in text order), whether the audit's flag rule flags it: the share ``fraction``
    least changed (:func:`least_changed`) when it is given, else the ratio strictly inside
    ``window`` (:func:`in_window`)."""
    if fraction is not None:
        return least_changed(ratios, fraction)
    return [in_window(r, window) for r in ratios]


def flag_rule(config: UnlearningConfig) -> str:
    """The flag rule in words (for the console and the report)."""
    if config.flag_fraction is not None:
        return f"the {config.flag_fraction:.0%} of the texts with the smallest |ln ratio| (least changed)"
    return f"ratio inside {config.window[0]:.4g}..{config.window[1]:.4g}"


def load_qa(path: str | os.PathLike, limit: int | None = None) -> tuple[list[Item], dict[str, int], dict]:
    """Questions with reference answers (the paper's Q&A mode): a JSONL file, one object a line
    with non-empty strings ``question`` and ``answer``, an optional ``id`` (default ``qa-<line>``)
    and an optional ``label``.

    Returns:
        ``(items, prompt_ends, meta)``: one item per pair, its text ``question + QA_SEPARATOR +
        answer``; ``prompt_ends[id]`` = the question's length in characters (where the prompt
        ends); the dataset metadata (``name``, ``source``, ``sha256``).

    Raises:
        BlackboxMIAError: a missing file, a malformed line, a missing or empty question or
            answer, a repeated id, no pair; the message names the file and line.
    """
    path = Path(path)
    items: list[Item] = []
    ends: dict[str, int] = {}
    for number, obj in read_jsonl(path):
        question, answer = obj.get("question"), obj.get("answer")
        if not (isinstance(question, str) and question.strip() and isinstance(answer, str) and answer.strip()):
            raise BlackboxMIAError(f"{path}:{number}: Q&A mode needs non-empty strings 'question' and 'answer'")
        item_id = str(obj.get("id", f"qa-{number}"))
        if item_id in ends:
            raise BlackboxMIAError(f"{path}:{number}: duplicate id {item_id!r}")
        label = parse_label(obj.get("label"), f"{path}:{number}")
        items.append(Item(id=item_id, text=question + QA_SEPARATOR + answer, label=label))
        ends[item_id] = len(question)
    if not items:
        raise BlackboxMIAError(f"{path}: no question (empty file)")
    items = limit_items(items, limit)
    meta = {"name": f"qa:{path.name}", "source": str(path), "sha256": file_sha256(path)}
    return items, {it.id: ends[it.id] for it in items}, meta


@dataclass(frozen=True)
class UnlearningPlan:
    """Checked input of :func:`run_unlearning` (from :func:`prepare_unlearning`).

    Attributes:
        prompt_ends: Q&A mode: per id, the character where the question (the prompt) ends;
            None: story completion (the first ``prompt_words`` words are the prompt).
    """

    config: UnlearningConfig
    items: list[Item]
    meta: dict
    prompt_ends: dict[str, int] | None = None


def prepare_unlearning(config: UnlearningConfig, cache_dir: str | os.PathLike | None = None) -> UnlearningPlan:
    """Check the configuration and load the texts (no model needed).

    Raises:
        BlackboxMIAError: a bad configuration, an unreadable dataset, duplicate ids.
    """
    config.validate()
    if config.qa:
        items, ends, meta = load_qa(config.dataset, config.limit)
        return UnlearningPlan(config, items, meta, ends)
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    if len({it.id for it in items}) != len(items):
        raise BlackboxMIAError(f"{meta['name']}: item ids repeat; every item needs its own id")
    return UnlearningPlan(config, items, meta)


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


def _group_stats(values: list[float]) -> dict:
    """n, mean and median of per-text mean similarities (None when empty)."""
    if not values:
        return {"n": 0, "mean": None, "median": None}
    return {"n": len(values), "mean": float(np.mean(values)), "median": float(np.median(values))}


def mean_difference(flagged: list[float], unflagged: list[float], n_boot: int = 1000, seed: int = 0) -> dict | None:
    """Mean of ``flagged`` minus mean of ``unflagged`` (per-text similarities) with a percentile
    bootstrap 95% CI (texts resampled within each group, :func:`~blackbox_mia.evaluation.bootstrap_ci`)
    and the one-sided Mann–Whitney p-value of "flagged larger"; None unless both groups have a text.
    """
    if not flagged or not unflagged:
        return None
    labels = [1] * len(flagged) + [0] * len(unflagged)
    values = [*flagged, *unflagged]

    def difference(y: np.ndarray, v: np.ndarray) -> float:
        return float(v[y == 1].mean() - v[y == 0].mean())

    diff = float(np.mean(flagged) - np.mean(unflagged))
    ci = bootstrap_ci(labels, values, difference, n_boot, seed=seed)
    p = float(stats.mannwhitneyu(flagged, unflagged, alternative="greater").pvalue)
    return {"difference": diff, "ci": [float(ci[0]), float(ci[1])], "mann_whitney_p": p}


def split_completed(rows: Iterable[dict], key: str, names: tuple[str, str]) -> dict[str, list[dict]]:
    """The per-text rows that have similarities (story completion ran on them), in two groups:
    ``names[0]`` where ``row[key]`` is true, ``names[1]`` where it is false."""
    completed = [row for row in rows if MEASURES[0] in row]
    return {names[0]: [row for row in completed if row[key]], names[1]: [row for row in completed if not row[key]]}


def compare_groups(groups: dict[str, list[dict]], seed: int) -> tuple[dict, dict]:
    """Per group and measure, :func:`_group_stats` of the per-text mean similarities; per measure,
    :func:`mean_difference` of the first group minus the second (bootstrap seeded ``seed``)."""
    first, second = (groups[g] for g in groups)
    summary = {g: {m: _group_stats([row[m] for row in members]) for m in MEASURES} for g, members in groups.items()}
    difference = {m: mean_difference([row[m] for row in first], [row[m] for row in second], seed=seed)
                  for m in MEASURES}
    return summary, difference


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
    log(f"Min-K% ({config.k:g}%) and loss of {len(plan.items)} texts under the original and the unlearned model")
    scored = {"before": _scores(plan, before, out_dir / "scores_before.jsonl"),
              "after": _scores(plan, after, out_dir / "scores_after.jsonl")}
    per_item = {}
    for item in plan.items:
        b, a = scored["before"][item.id], scored["after"][item.id]
        per_item[item.id] = {"id": item.id, "label": item.label, "min_k_before": b["min_k"], "min_k_after": a["min_k"],
                             "loss_before": b["loss"], "loss_after": a["loss"],
                             "ratio": score_ratio(b["min_k"], a["min_k"])}
    no_ratio = sorted(i for i, row in per_item.items() if row["ratio"] is None)
    flags = flag_texts([row["ratio"] for row in per_item.values()], config.window, config.flag_fraction)
    for row, flag in zip(per_item.values(), flags):
        row["flagged"] = flag
    flagged = {i for i, row in per_item.items() if row["flagged"]}
    log(f"{len(flagged)} of {len(plan.items)} texts flagged ({flag_rule(config)})")

    segmenter = get_segmenter(config.segmenter)
    chosen = [it for it in plan.items if it.id in flagged or config.unflagged]
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
    groups = split_completed(per_item.values(), "flagged", (FLAGGED, UNFLAGGED))
    similarity, difference = compare_groups(groups, config.seed)
    plots = {}
    if all(groups.values()):
        for m in MEASURES:
            path = plot_histogram([row[m] for row in groups[FLAGGED]], [row[m] for row in groups[UNFLAGGED]], None,
                                  out_dir / f"{m}.png", title=f"Story completion: {m} (mean over samples)",
                                  labels=(FLAGGED, UNFLAGGED))
            plots[f"Story completion, {m}"] = path

    truth_summary = None
    if truth is not None:
        label = still_memorized(truth[0], truth[1], out_dir / "truth_scores.jsonl", config.truth_target_fpr,
                                config.resume)
        positives = set(label["ids"])
        for row in per_item.values():
            row["still_memorized"] = row["id"] in positives
        by_label, by_label_difference = compare_groups(
            split_completed(per_item.values(), "still_memorized", (STILL_MEMORIZED, NOT_STILL_MEMORIZED)), config.seed)
        truth_summary = {**flag_metrics(flagged, positives, list(per_item)),
                         "closeness_auc": closeness_auc(list(per_item.values())),
                         "completion": by_label, "completion_difference": by_label_difference,
                         **{k: label[k] for k in ("threshold", "n_forget", "target_fpr", "fpr", "canary")}}
    write_text_atomic(out_dir / "unlearning_items.jsonl",
                      "".join(json_line(to_jsonable(row), f"item {i!r}") for i, row in per_item.items()))

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
    prompt_note = ("Q&A: the question as the prompt, its answer as the reference (the ratio is taken on question + "
                   "answer)" if config.qa else f"Story completion: the first {config.prompt_words} {segmenter.unit} as "
                   "the prompt")
    rule_note = (f"A text is flagged when the ratio of its Min-K% scores (after / before, both negative) lies strictly "
                 f"inside ({config.window[0]:.4g}, {config.window[1]:.4g}): the unlearned model finds it about as likely "
                 "as the original, so unlearning likely failed there (Shi et al. 2024 §7).")
    if config.flag_fraction is not None:
        rule_note = (f"A text is flagged when it is among the {config.flag_fraction:.0%} of the texts (F * n rounded half "
                     "up, at least one; ties to the earlier text) whose Min-K% ratio (after / before, both negative) is "
                     "closest to 1, the smallest |ln ratio|: where unlearning changed the model least, so it likely "
                     "failed there (the paper's question, Shi et al. 2024 §7, without its scale-bound window 1/1.15..1.15).")
    notes = [
        rule_note,
        (f"{prompt_note}, {config.samples} samples at temperature {config.temperature:g}, at most "
        f"{config.max_new_tokens} new tokens; similarity per text is the mean over its samples (ROUGE-L recall on "
        "words; approximate memorization on characters). 'completion_difference': flagged minus unflagged mean, "
        "bootstrap 95% CI, one-sided Mann-Whitney p."),
    ]
    if truth_summary is not None:
        notes.append(f"Ground truth: a forgotten member is still memorized when its loss score under the unlearned canary "
                     f"exceeds the {1 - config.truth_target_fpr:.0%} quantile of the non-members' ({label['threshold']:.4f} "
                     "nats/token); base rate = still-memorized forgotten members / audited texts. 'truth.completion"
                     "_difference': the same similarity comparison split by this label (still memorized minus the "
                     "rest): the most a perfect flag could show.")
    report = {
        "title": f"Unlearning audit: {plan.meta['name']}",
        "config": {"package": "blackbox_mia", "version": __version__,
                   "unlearning": with_old_keys(asdict(config), UNLEARNING_CONFIG_KEYS), "before": before.describe(), "after": after.describe(), "dataset": plan.meta,
                   "seeds": {"sampling": config.seed}},
        "plots": plots,
        "notes": notes,
        **summary,
    }
    warnings = unlearning_warnings(len(plan.items), no_ratio, len(chosen), skipped,
                                   {g: len(rows) for g, rows in groups.items()}, config.unflagged)
    return publish(report, summary, out_dir, "unlearning", hidden=("flagged_ids",), warnings=warnings)


def unlearning_warnings(n_items: int, no_ratio: list[str], n_chosen: int, skipped: list[str],
                        completed: dict[str, int], compared: bool) -> list[str]:
    """What an unlearning report's reader must know before quoting its flags and similarities
    (the report lists them first, the console prints them one line each: :func:`~.common.publish`).

    Args:
        n_items: texts audited.
        no_ratio: ids of the texts without a usable Min-K% ratio (never flagged).
        n_chosen: texts chosen for completion (the flagged ones, or all).
        skipped: ids of the chosen texts that could not be cut into a prompt and a reference.
        completed: completed texts per group (``flagged``, ``unflagged``).
        compared: whether the unflagged texts were completed too (no ``--flagged-only``).

    Returns:
        One sentence per caveat: texts without a ratio; texts not completed; a comparison
        that could not be made (a group without a completed text).
    """
    warnings = []
    if no_ratio:
        warnings.append(f"{len(no_ratio)} of {n_items} texts have no usable Min-K% ratio (a score is null: its tokens "
                        "are known only by bounds, or it is 0 or not finite; see the scores files): they are never "
                        f"flagged (first: {no_ratio[0]!r})")
    if skipped:
        warnings.append(f"{len(skipped)} of {n_chosen} texts were not completed: nothing follows the prompt, or the "
                        f"prompt leaves no room in the model's context (first: {skipped[0]!r})")
    empty = [group for group, n in completed.items() if n == 0]
    if compared and empty:
        warnings.append(f"no flagged-vs-unflagged comparison: no {' and no '.join(empty)} text was completed")
    return warnings
