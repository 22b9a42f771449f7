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

Story completion (:mod:`..completion`) then prompts the "after" model with each flagged text's
first W words and compares sampled continuations with the true one (ROUGE-L recall and
approximate memorization); the unflagged texts get the same treatment for comparison.

Ground truth, when the "after" model is an unlearned canary (``bbmia canary unlearn``): a
forgotten member is *still memorized* when its loss score under the unlearned canary (white
box, computed locally) exceeds the ``1 - truth_target_fpr`` quantile of the canary's
non-members' loss scores under the same model; the report gives the precision and recall of the flagged set
against that label and its base rate (the share of audited texts that are
forgotten-but-still-memorized): :mod:`.truth`.

Files in the output folder: ``scores_before.jsonl``, ``scores_after.jsonl`` (resumable, as
``bbmia score`` writes them), ``completions.jsonl`` (one row per text and sample, resumable),
``truth_scores.jsonl`` (with ground truth), ``unlearning_items.jsonl`` (per text: scores,
ratio, flag, mean similarities, label), ``rouge_l_recall.png``, ``approximate.png``,
``unlearning.json`` and ``unlearning.md``.

Modules: :mod:`.plan` (the configuration and the checked input), :mod:`.flags` (the ratio and the
flag rules), :mod:`.run` (the audit), :mod:`.compare` (similarities by group), :mod:`.truth` (the
ground truth) and :mod:`.report` (notes and caveats).
"""

from .compare import FLAGGED, MEASURES, NOT_STILL_MEMORIZED, STILL_MEMORIZED, UNFLAGGED, compare_groups, mean_difference, split_completed
from .flags import flag_rule, flag_texts, in_window, least_changed, score_ratio
from .plan import QA_SEPARATOR, RATIO_WINDOW, UnlearningConfig, UnlearningPlan, load_qa, prepare_unlearning
from .report import unlearning_warnings
from .run import estimate_unlearning, run_unlearning
from .truth import closeness_auc, flag_metrics, log_change, still_memorized

__all__ = [
    "FLAGGED", "MEASURES", "NOT_STILL_MEMORIZED", "QA_SEPARATOR", "RATIO_WINDOW", "STILL_MEMORIZED", "UNFLAGGED",
    "UnlearningConfig", "UnlearningPlan", "closeness_auc", "compare_groups", "estimate_unlearning", "flag_metrics",
    "flag_rule", "flag_texts", "in_window", "least_changed", "load_qa", "log_change", "mean_difference",
    "prepare_unlearning", "run_unlearning", "score_ratio", "split_completed", "still_memorized", "unlearning_warnings",
]
