"""The ground truth of the unlearning audit (``bbmia unlearning``) and how a flagged set is
checked against it.

When the "after" model is an unlearned canary (``bbmia canary unlearn``), a forgotten member is
*still memorized* when its loss score under the unlearned canary (white box, computed locally)
exceeds the ``1 - target_fpr`` quantile of the canary's non-members' loss scores under the same
model (:func:`still_memorized`). The audit's flagged set is then scored against that label
(:func:`flag_metrics`: precision, recall, base rate, Fisher's exact test of enrichment), and
the ratio's ranking quality whatever the flag rule (:func:`closeness_auc`).
"""

from __future__ import annotations

import math
from pathlib import Path

from scipy import stats

from ...backends.base import Backend
from ...canary import canary_items
from ...canary.unlearn import memorized_members, unlearning_record
from ...evaluation import auc
from ...evaluation.documents import wilson_interval
from ...key_aliases import UNLEARNING_TRUTH_KEYS, with_old_keys
from ...runner import run_config, score_items
from ...scorers import TARGET
from ...scorers.loss import Loss
from ...types import BlackboxMIAError


def flag_metrics(flagged: set[str], positives: set[str], audited: list[str]) -> dict:
    """Precision, recall and base rate of a flagged set against a label.

    Args:
        flagged: ids flagged by the audit.
        positives: ids with label 1 (forgotten but still memorized).
        audited: every audited id.

    Returns:
        ``n_audited``, ``n_flagged``, ``n_positive``, ``true_positives``, ``precision``
        (None without a flagged id), ``recall`` (None without a positive) and ``base_rate``
        (positives / audited), each of the three with its Wilson 95% interval
        (``precision_ci``, ``recall_ci``, ``base_rate_ci``; None where the share is None), and
        ``fisher_p``: the one-sided Fisher exact p-value of "positives are enriched among the
        flagged" (the 2×2 table flagged × positive; 1.0 when nothing or everything is flagged).
        Enrichment shows as ``precision`` clearly above ``base_rate`` (a flagged set drawn at
        random has precision ``base_rate`` in expectation) and a small ``fisher_p``.
    """
    audited_set = set(audited)
    flagged, positives = flagged & audited_set, positives & audited_set
    tp = len(flagged & positives)
    shares = {"precision": (tp, len(flagged)), "recall": (tp, len(positives)),
              "base_rate": (len(positives), len(audited_set))}
    out = {"n_audited": len(audited_set), "n_flagged": len(flagged), "n_positive": len(positives), "true_positives": tp}
    for name, (k, n) in shares.items():
        out[name] = k / n if n else None
        out[f"{name}_ci"] = list(wilson_interval(k, n)) if n else None
    fp, fn = len(flagged) - tp, len(positives) - tp
    table = [[tp, fp], [fn, len(audited_set) - tp - fp - fn]]
    out["fisher_p"] = float(stats.fisher_exact(table, alternative="greater").pvalue)
    return out


def still_memorized(truth_dir: Path, truth_model: Backend, out: Path, target_fpr: float, resume: bool) -> dict:
    """The ground truth of an unlearned canary: its forgotten members whose loss score under
    the unlearned model (``truth_model``, loaded from ``truth_dir``) exceeds the ``1 - target_fpr``
    quantile of its non-members' loss scores (:func:`~blackbox_mia.canary.unlearn.memorized_members`,
    the rule that picks a forget set among the memorized members; scores saved to ``out``).

    Returns:
        ``ids`` (the still-memorized forgotten members), ``threshold`` (nats/token),
        ``n_forget``, ``target_fpr`` (and its old name ``fpr`` for one release:
        :data:`blackbox_mia.key_aliases.UNLEARNING_TRUTH_KEYS`), ``canary`` (the directory).

    Raises:
        BlackboxMIAError: ``truth_dir`` is not an unlearned canary.
    """
    record = unlearning_record(truth_dir)
    if record is None:
        raise BlackboxMIAError(f"{truth_dir} is a canary that was not unlearned (no 'unlearning' in its manifest)")
    items = canary_items(truth_dir)
    scorers = [Loss()]
    backends = {TARGET: truth_model}
    meta = {"name": f"canary:{truth_dir}", "n_items": len(items)}
    rows = score_items(items, scorers, backends, out, run_config(scorers, backends, meta), resume=resume,
                       progress=False)
    label = scorers[0].label
    memorized, threshold = memorized_members(items, {r.id: r.scores[label] for r in rows}, target_fpr)
    forget = set(record["forget_ids"])
    ids = sorted(set(memorized) & forget)
    return with_old_keys({"ids": ids, "threshold": threshold, "n_forget": len(forget), "target_fpr": target_fpr,
                          "canary": str(truth_dir)}, UNLEARNING_TRUTH_KEYS)


def log_change(ratio: float | None) -> float | None:
    """How far unlearning moved a text: ``|ln ratio|`` of its Min-K% ratio (0: unchanged);
    None without a positive ratio."""
    return abs(math.log(ratio)) if ratio is not None and ratio > 0 else None


def closeness_auc(rows: list[dict]) -> float | None:
    """AUC of the ratio's closeness to 1 (``-|ln ratio|``, :func:`log_change`) as a score of the
    label ``still_memorized``, over the rows with a ratio: the window's ranking quality whatever
    its width (0.5: the ratio says nothing about which texts stay memorized); None with one
    class."""
    known = [(r, change) for r in rows if (change := log_change(r["ratio"])) is not None]
    labels = [int(r["still_memorized"]) for r, _ in known]
    if len(set(labels)) < 2:
        return None
    return auc(labels, [-change for _, change in known])
