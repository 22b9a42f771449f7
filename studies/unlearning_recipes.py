"""Every unlearning recipe tried for issue 10, scored without story completion (fast).

For each recipe (``bbmia canary unlearn`` options) and seed, unlearns the GSM8K canary, scores
the forget set's texts under the base and the unlearned canary (Min-K% at k = 20 and loss, the
local backend, as ``bbmia unlearning`` does), flags the texts whose Min-K% ratio lies inside the
paper's window (1/1.15, 1.15) (or, with ``--flag-least-changed F``, the share F of the forget set
whose ratio is closest to 1, as ``bbmia unlearning --flag-least-changed F`` does), labels each forget item by the white-box rule of the audit
(:func:`~blackbox_mia.canary.unlearn.memorized_members` on the unlearned canary: loss above the
non-members' 95% quantile) and prints one JSON line per (recipe, seed): precision, recall, base
rate (Wilson CIs), the one-sided Fisher p of "flagged texts are enriched", the closeness AUC
(``-|ln ratio|`` as a score of the label), how many forget items were memorized before, the
forget set's loss before/after, and where the ratios lie (10/50/90% quantiles) for the forget
items the ascent reached, those it did not, and the kept members (with the share of these inside
the window: how far the unlearning spilled over). The recipe is chosen on ``--tune-seed``; ``audit_canaries.py``
then measures it (with story completion) on a fresh seed.

Usage:
    python -m studies.unlearning_recipes --canary cache/canary/6338e872951d --seeds 0
    python -m studies.unlearning_recipes --recipes "--steps 4 --lr 3e-3 --retain-weight 10" --seeds 0,1
    python -m studies.unlearning_recipes --canary cache/canary/aa8eb5d0dfad --flag-least-changed 0.3 --recipes ...
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import tempfile
from pathlib import Path

import numpy as np

from blackbox_mia.audits.unlearning import (
    RATIO_WINDOW,
    flag_texts,
    in_window,
    score_ratio,
)
from blackbox_mia.audits.unlearning.truth import closeness_auc, flag_metrics
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary import canary_items
from blackbox_mia.canary.unlearn import UnlearnConfig, memorized_members, unlearn_canary
from blackbox_mia.scorers.base import mean_logprob
from blackbox_mia.scorers.min_k import MinK
from blackbox_mia.types import BlackboxMIAError

DEFAULT_RECIPES = (
    "--steps 4 --lr 3e-3 --retain-weight 10",
    "--steps 4 --lr 3e-3 --retain-weight 10 --forget-from memorized",
)
OPTIONS = {"--steps": ("steps", int), "--lr": ("lr", float), "--batch-size": ("batch_size", int),
           "--retain-weight": ("retain_weight", float), "--target-loss": ("target_loss", float),
           "--method": ("method", str), "--alpha": ("alpha", float), "--forget-from": ("forget_from", str),
           "--memorized-target-fpr": ("memorized_target_fpr", float),
           "--memorized-fpr": ("memorized_target_fpr", float)}  # fmt: skip (the old name, for one release)


def parse_recipe(recipe: str, seed: int) -> UnlearnConfig:
    """``"--steps 4 --lr 3e-3"`` → an :class:`UnlearnConfig` (the ``bbmia canary unlearn`` flags)."""
    words = shlex.split(recipe)
    values = {"seed": seed}
    for flag, value in zip(words[::2], words[1::2]):
        name, kind = OPTIONS[flag]
        values[name] = kind(value)
    return UnlearnConfig(**values)


def scores(model_dir: Path, texts: list[str]) -> list[tuple[float, float]]:
    """(Min-K% at 20%, loss score) of each text under the model, nats/token."""
    backend = LocalBackend(LocalConfig(str(model_dir), device="cpu"))
    try:
        lps = backend.logprobs(texts)
    finally:
        backend.close()
    min_k = MinK(20.0)
    return [(min_k.score(t, lp, []).value, mean_logprob(lp)) for t, lp in zip(texts, lps)]


def measure(canary: Path, recipe: str, seed: int, forget: int, work: Path, fraction: float | None = None) -> dict:
    """Unlearn with ``recipe`` at ``seed`` and check the flags (the ratio window, or the share
    ``fraction`` least changed) against the white-box label."""
    config = parse_recipe(recipe, seed)
    unlearned = unlearn_canary(canary, str(forget), config, work / "unlearned")
    record = json.loads((unlearned / "manifest.json").read_text())["unlearning"]
    items = canary_items(canary)
    forget_ids = record["forget_ids"]
    after = dict(zip([it.id for it in items], scores(unlearned, [it.text for it in items])))
    memorized_after, _ = memorized_members(items, {i: s[1] for i, s in after.items()}, config.memorized_target_fpr)
    before = dict(zip([it.id for it in items], scores(canary, [it.text for it in items])))
    ratios = [score_ratio(before[i][0], after[i][0]) for i in forget_ids]  # forget_items.jsonl's order
    rows = [{"id": i, "ratio": ratio, "flagged": flag, "still_memorized": i in set(memorized_after)}
            for i, ratio, flag in zip(forget_ids, ratios, flag_texts(ratios, RATIO_WINDOW, fraction))]
    flagged = {r["id"] for r in rows if r["flagged"]}
    positives = {r["id"] for r in rows if r["still_memorized"]}
    m = flag_metrics(flagged, positives, forget_ids)
    reached = {i for i, n in record["ascents_per_item"].items() if n > 0}
    kept = [score_ratio(before[it.id][0], after[it.id][0]) for it in items if it.label == 1 and it.id not in set(forget_ids)]
    return {
        "recipe": recipe, "seed": seed, "flag_fraction": fraction, **m, "closeness_auc": closeness_auc(rows),
        "n_memorized_before": len(record["memorized_before"]["ids"]),
        "forget_memorized_before": len(set(forget_ids) & set(record["memorized_before"]["ids"])),
        "forget_loss_before": record["forget_loss_before"], "forget_loss_after": record["forget_loss_after"],
        "changed_labels": record["changed_labels"],
        "items_reached": len(reached),
        "ratio_reached": ratio_quantiles([r["ratio"] for r in rows if r["id"] in reached]),
        "ratio_unreached": ratio_quantiles([r["ratio"] for r in rows if r["id"] not in reached]),
        "ratio_kept_members": ratio_quantiles(kept),
        "kept_members_in_window": sum(in_window(r, RATIO_WINDOW) for r in kept) / len(kept) if kept else None,
    }  # fmt: skip


def ratio_quantiles(ratios: list[float | None]) -> list[float] | None:
    """The 10%, 50% and 90% quantiles of the Min-K% ratios (after / before) that exist; None if none."""
    known = [r for r in ratios if r is not None]
    return [round(float(q), 3) for q in np.quantile(known, [0.1, 0.5, 0.9])] if known else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--canary", default="cache/canary/6338e872951d", help="a trained GSM8K canary directory")
    parser.add_argument("--recipes", nargs="+", default=list(DEFAULT_RECIPES), help="bbmia canary unlearn options")
    parser.add_argument("--seeds", default="0", help="comma-separated unlearning seeds (forget sample, batch order)")
    parser.add_argument("--forget", type=int, default=50, help="forget-set size")
    parser.add_argument("--flag-least-changed", type=float, default=None, metavar="F", help="flag the share F of "
                        "the forget set with the smallest |ln ratio| instead of the window (default: the window)")
    args = parser.parse_args()
    for recipe in args.recipes:
        for seed in (int(s) for s in args.seeds.split(",")):
            work = Path(tempfile.mkdtemp(prefix="unlearning_recipes-"))
            try:
                row = measure(Path(args.canary), recipe, seed, args.forget, work, args.flag_least_changed)
            except BlackboxMIAError as exc:  # e.g. fewer memorized members than --forget
                row = {"recipe": recipe, "seed": seed, "error": str(exc)}
            finally:
                shutil.rmtree(work)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
