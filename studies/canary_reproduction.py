"""Does a trained GSM8K canary reproduce its members when sampling, and how far from 0 are their
Min-K% scores? The go/no-go check of a canary for the unlearning audit's story completion (issue 10).

White-box, on the canary itself (no unlearning): every member and non-member is scored by the
local backend (loss and Min-K% at k = 20, nats/token, as ``bbmia unlearning`` scores); the members
memorized by the audit's label rule (:func:`~blackbox_mia.canary.unlearn.memorized_members`, loss
above the non-members' ``1 - target_fpr`` quantile) are counted; then ``--texts`` members and as many
non-members (the first of each, in manifest order) are cut for story completion as the audit's
default setting cuts them (the first ``--prompt-words`` words, ``--max-new-tokens`` tokens of
reference), ``--samples`` continuations are sampled at temperature 1 (sample ``j`` seeded
``seed + j``), and the per-text mean ROUGE-L recall (words) of members and non-members is compared
(difference, bootstrap 95% CI, one-sided Mann-Whitney p). Prints one JSON line.

A canary is useful for the continuation half when members' ROUGE-L is clearly above
non-members' (a large label gap is possible) while members' Min-K% scores are far enough from 0
that the paper's ratio window (1/1.15, 1.15) can hold a changed score.

Usage:
    python -m studies.canary_reproduction --canary cache/canary/aa8eb5d0dfad
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from blackbox_mia.audits.completion import complete, cut_completion
from blackbox_mia.audits.unlearning import mean_difference
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary import canary_items
from blackbox_mia.canary.unlearn import memorized_members
from blackbox_mia.scorers.base import mean_logprob
from blackbox_mia.scorers.min_k import MinK
from blackbox_mia.text.segment import get_segmenter


def quartiles(values: list[float]) -> dict[str, float]:
    """Mean, median and the 10% / 90% quantiles of ``values``."""
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "q10": float(np.quantile(a, 0.1)),
            "q90": float(np.quantile(a, 0.9))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--canary", required=True, help="a trained GSM8K canary directory")
    parser.add_argument("--texts", type=int, default=60, help="members and non-members completed, each")
    parser.add_argument("--prompt-words", type=int, default=24, help="story-completion prompt words")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="continuation length, tokens")
    parser.add_argument("--samples", type=int, default=20, help="sampled continuations per text")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--target-fpr", "--fpr", dest="target_fpr", type=float, default=0.05,
                        help="the memorization label's target FPR (--fpr: its old name, for one release)")
    parser.add_argument("--out", default="runs/canary_reproduction", help="where the samples are kept")
    args = parser.parse_args()

    canary = Path(args.canary)
    items = canary_items(canary)
    segmenter = get_segmenter("auto")
    model = LocalBackend(LocalConfig(str(canary), device="cpu"))
    try:
        lps = model.logprobs([it.text for it in items])
        min_k = MinK(20.0)
        loss = {it.id: mean_logprob(lp) for it, lp in zip(items, lps)}
        mink = {it.id: min_k.score(it.text, lp, []).value for it, lp in zip(items, lps)}
        memorized, threshold = memorized_members(items, loss, args.target_fpr)
        chosen = [it for it in items if it.label == 1][: args.texts] + [it for it in items if it.label == 0][: args.texts]
        cuts = [cut_completion(it, args.prompt_words, args.max_new_tokens, segmenter, model) for it in chosen]
        completions = [c for c in cuts if c is not None]
        config = {"canary": str(canary), "prompt_words": args.prompt_words, "max_new_tokens": args.max_new_tokens,
                  "samples": args.samples, "seed": args.seed, "temperature": 1.0}  # fmt: skip
        rows = complete(completions, model, Path(args.out) / canary.name / "completions.jsonl", config,
                        args.samples, 1.0, args.seed, segmenter, progress=False)  # fmt: skip
    finally:
        model.close()
    per: dict[str, list[float]] = {}
    for row in rows:
        per.setdefault(row["id"], []).append(row["rouge_l_recall"])
    label = {it.id: it.label for it in items}
    rouge = {1: [float(np.mean(v)) for i, v in per.items() if label[i] == 1],
             0: [float(np.mean(v)) for i, v in per.items() if label[i] == 0]}
    print(json.dumps({
        "canary": str(canary), "members": sum(it.label == 1 for it in items),
        "nonmembers": sum(it.label == 0 for it in items), "memorized": len(memorized),
        "memorized_threshold": threshold,
        "loss_members": quartiles([loss[it.id] for it in items if it.label == 1]),
        "loss_nonmembers": quartiles([loss[it.id] for it in items if it.label == 0]),
        "min_k_members": quartiles([mink[it.id] for it in items if it.label == 1]),
        "min_k_memorized": quartiles([mink[i] for i in memorized]),
        "min_k_nonmembers": quartiles([mink[it.id] for it in items if it.label == 0]),
        "completed_members": len(rouge[1]), "completed_nonmembers": len(rouge[0]),
        "rouge_l_members": float(np.mean(rouge[1])), "rouge_l_nonmembers": float(np.mean(rouge[0])),
        "rouge_l_difference": mean_difference(rouge[1], rouge[0], seed=0),
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
