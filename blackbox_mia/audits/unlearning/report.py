"""The unlearning audit's report: its notes (the flag rule, the completion settings, the ground
truth in words), its caveats (:func:`unlearning_warnings`) and the report dict itself."""

from __future__ import annotations

from dataclasses import asdict

from ... import __version__
from ...backends.base import Backend
from ...key_aliases import UNLEARNING_CONFIG_KEYS, with_old_keys
from .plan import UnlearningConfig, UnlearningPlan


def unlearning_notes(config: UnlearningConfig, unit: str, truth_threshold: float | None) -> list[str]:
    """The report's notes, in words: the flag rule, how texts were completed and compared (``unit``:
    the segmenter's word unit, for the story-completion prompt) and, with a ground truth, its label
    (``truth_threshold``: the non-members' loss quantile, nats/token; ``None`` without one)."""
    prompt_note = ("Q&A: the question as the prompt, its answer as the reference (the ratio is taken on question + "
                   "answer)" if config.qa else f"Story completion: the first {config.prompt_words} {unit} as "
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
    if truth_threshold is not None:
        notes.append(f"Ground truth: a forgotten member is still memorized when its loss score under the unlearned canary "
                     f"exceeds the {1 - config.truth_target_fpr:.0%} quantile of the non-members' ({truth_threshold:.4f} "
                     "nats/token); base rate = still-memorized forgotten members / audited texts. 'truth.completion"
                     "_difference': the same similarity comparison split by this label (still memorized minus the "
                     "rest): the most a perfect flag could show.")
    return notes


def unlearning_report(plan: UnlearningPlan, before: Backend, after: Backend, summary: dict, plots: dict,
                      unit: str) -> dict:
    """The report dict (:func:`~..common.publish` writes it as JSON and Markdown): title, the typed
    configuration with both models and the dataset, ``plots``, the notes (:func:`unlearning_notes`)
    and ``summary``'s keys."""
    config = plan.config
    truth = summary["truth"]
    return {
        "title": f"Unlearning audit: {plan.meta['name']}",
        "config": {"package": "blackbox_mia", "version": __version__,
                   "unlearning": with_old_keys(asdict(config), UNLEARNING_CONFIG_KEYS), "before": before.describe(),
                   "after": after.describe(), "dataset": plan.meta, "seeds": {"sampling": config.seed}},
        "plots": plots,
        "notes": unlearning_notes(config, unit, None if truth is None else truth["threshold"]),
        **summary,
    }


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
