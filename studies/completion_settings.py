"""Which story-completion setting separates still-memorized from forgotten texts best (issue 10)?

On an unlearned GSM8K canary (``bbmia canary unlearn``; the tuning seed's, never a measured one),
the forget set's texts are split by the white-box label of the unlearning audit (still memorized:
loss under the unlearned canary above the non-members' 95% quantile,
:func:`~blackbox_mia.audits.unlearning.still_memorized`), not by the audit's flags. For each prompt
setting the unlearned canary samples ``--samples`` continuations at temperature 1 (sample ``j``
seeded ``seed + j``, as ``bbmia unlearning`` does); every cell of the grid

* prompt: ``w24``/``w48`` (the first 24/48 words), ``half`` (half the text's words), ``question``
  (the text up to and including ``\\nAnswer:``);
* length L: the generation's first L tokens against the truth's next L tokens (fewer where the
  model's context leaves less room), ``--lengths``;
* measure: ``rouge_l_recall`` (words), ``approximate`` (characters, the generation cut to the
  reference's length), ``token_prefix`` (leading generated tokens equal to the truth's, tokens);
* aggregate over samples: ``mean`` or ``max``, over the first 20 or all ``--samples``;

prints one JSON line per cell: the still-memorized minus forgotten mean of the per-text
aggregate, its percentile bootstrap 95% CI and the one-sided Mann-Whitney p (still memorized
larger). ``--split flags`` compares the texts ``bbmia unlearning`` flagged with the rest instead
(from ``audit_canaries.py``'s folders): what a chosen setting is measured by on fresh seeds.
Several ``--unlearned`` canaries: each one's lines, then the pooled ones (``canary: pooled``). A
shorter length is the same sample cut (sampling is token by token with one generator per
sample), so one generation per prompt serves every length, and the 48-token cells reproduce
``bbmia unlearning --max-new-tokens 48`` exactly. Generations are kept under ``--out`` and reused.

Measured (2 shared CPU cores, 5 min for seed 0's 192 cells; every cell in
records/unlearning-ground-truth.md): on tuning seed 0 the smallest p is w24 / L96 / ROUGE-L / max
over 20 (0.00034), then the audit's setting w24 / L48 / ROUGE-L / mean over 20 (0.00053, kept:
within a factor 2); longer prompts, approximate memorization and the token prefix separate worse.

Usage:
    python -m studies.completion_settings --unlearned cache/canary/6338e872951d-unlearned-07f29f2da88b
    python -m studies.completion_settings --excess --prompts w24 --unlearned DIR  # chance-corrected ROUGE-L
    python -m studies.completion_settings --split flags --prompts w24 --lengths 48,96 --samples 20 \\
        --unlearned DIR1,DIR2,DIR3  # fresh seeds, after audit_canaries.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from blackbox_mia.audits.completion import Completion, cut_at, cut_completion
from blackbox_mia.audits.unlearning import mean_difference
from blackbox_mia.audits.unlearning.truth import still_memorized
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary.unlearn import unlearning_record
from blackbox_mia.datasets import Item
from blackbox_mia.text.segment import get_segmenter
from blackbox_mia.text.similarity import approximate, common_prefix, rouge_l_recall

ANSWER_MARK = "\nAnswer:"  # where a GSM8K text's question ends
PROMPTS = ("w24", "w48", "half", "question")
MEASURES = ("rouge_l_recall", "approximate", "token_prefix")
AGGREGATES = {"mean": np.mean, "max": np.max}
CELL = ("prompt", "length", "measure", "aggregate", "samples")
BATCH = 16  # prompts per generate call


def cut(item: Item, prompt: str, room: int, segmenter, model) -> Completion | None:
    """``item`` cut by the prompt setting ``prompt`` (see the module docstring)."""
    if prompt == "question":
        return cut_at(item, item.text.index(ANSWER_MARK) + len(ANSWER_MARK), room, model)
    words = {"w24": 24, "w48": 48}.get(prompt) or len(segmenter.segment(item.text).words) // 2
    return cut_completion(item, words, room, segmenter, model)


def generations(completions: list[Completion], model, samples: int, seed: int, path: Path) -> dict[str, list[list[int]]]:
    """Per text id, ``samples`` generated token-id lists (each as long as its reference's budget,
    EOS cut off); read from ``path`` when it is there, else generated and saved."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, list[list[int]]] = {}
    for start in range(0, len(completions), BATCH):
        chunk = completions[start : start + BATCH]
        for budget in sorted({c.max_new_tokens for c in chunk}):
            group = [c for c in chunk if c.max_new_tokens == budget]
            made = model.generate([c.prompt for c in group], max_new_tokens=budget, temperature=1.0, n=samples,
                                  seed=seed, logprobs=False)  # fmt: skip
            for i, c in enumerate(group):
                out[c.item.id] = [_text_ids(made[i * samples + j]) for j in range(samples)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out), encoding="utf-8")
    return out


def _text_ids(generation) -> list[int]:
    """A generation's ids without its EOS (kept last in ``token_ids`` when it stopped)."""
    ids = [int(i) for i in generation.token_ids]
    return ids[:-1] if generation.finish_reason == "stop" else ids


def measure(generated: list[int], reference: list[int], codec, segmenter) -> dict[str, float]:
    """The three similarities of one sample cut to ``len(reference)`` tokens."""
    text, truth = codec.decode(generated[: len(reference)]), codec.decode(reference)
    return {"rouge_l_recall": rouge_l_recall(text, truth, segmenter),
            "approximate": approximate(text[: len(truth)], truth),
            "token_prefix": float(common_prefix(generated, reference))}  # fmt: skip


def excess(made: dict, refs: dict, values: dict, codec, segmenter, samples: int = 20) -> dict[str, dict[str, float]]:
    """Baseline-subtracted ROUGE-L recall per text, for the aggregates ``mean`` and ``max`` over
    ``samples`` samples: its own samples' aggregate minus the mean, over every other text, of the
    same aggregate of that text's samples against this text's reference (the overlap any
    continuation has with a reference full of common words)."""
    out: dict[str, dict[str, float]] = {agg: {} for agg in AGGREGATES}
    for i, ref in refs.items():
        truth = codec.decode(ref)
        cross = [[rouge_l_recall(codec.decode(g[: len(ref)]), truth, segmenter) for g in made[o][:samples]]
                 for o in refs if o != i]  # fmt: skip
        own = [v["rouge_l_recall"] for v in values[i][:samples]]
        for agg, fn in AGGREGATES.items():
            out[agg][i] = float(fn(own) - np.mean([fn(c) for c in cross]))
    return out


GROUPS = {"label": ("still", "forgotten"), "flags": ("flagged", "unflagged")}


def report(per: dict[str, float], positives: set[str], split: str, **keys) -> None:
    """One JSON line: the per-text values of the ``positives`` (still memorized, or flagged)
    against the rest (difference of means, bootstrap CI, one-sided Mann-Whitney p)."""
    yes_name, no_name = GROUPS[split]
    yes = [v for i, v in per.items() if i in positives]
    no = [v for i, v in per.items() if i not in positives]
    d = mean_difference(yes, no, seed=0)
    print(json.dumps({**keys, "split": split, f"n_{yes_name}": len(yes), f"n_{no_name}": len(no),
                      yes_name: float(np.mean(yes)), no_name: float(np.mean(no)), **d}), flush=True)  # fmt: skip


def cells(unlearned: Path, args: argparse.Namespace, segmenter) -> tuple[dict[tuple, dict[str, float]], set[str], dict]:
    """Every cell's per-text values on one unlearned canary (``{(prompt, length, measure,
    aggregate, samples): {id: value}}``), its still-memorized forget items and, per prompt, how
    many texts were too short to cut."""
    seed = unlearning_record(unlearned)["seed"] if args.seed is None else args.seed
    out = Path(args.out) / f"{unlearned.name}-seed{seed}"
    lengths = [int(x) for x in args.lengths.split(",")]
    model = LocalBackend(LocalConfig(str(unlearned), device="cpu"))
    found: dict[tuple, dict[str, float]] = {}
    skipped = {}
    try:
        positives = set(still_memorized(unlearned, model, out / "truth_scores.jsonl", 0.05, resume=True)["ids"])
        items = [Item(id=r["id"], text=r["text"], label=r.get("label"))
                 for r in map(json.loads, (unlearned / "forget_items.jsonl").read_text(encoding="utf-8").splitlines())]
        for prompt in args.prompts.split(","):
            cuts = [cut(it, prompt, max(lengths), segmenter, model) for it in items]
            completions = [c for c in cuts if c is not None]
            skipped[prompt] = len(cuts) - len(completions)
            made = generations(completions, model, args.samples, seed, out / f"generations_{prompt}.json")
            refs = {c.item.id: model.codec.encode(c.item.text[len(c.prompt):])[: c.max_new_tokens] for c in completions}
            for length in lengths:
                refs_l = {i: ref[:length] for i, ref in refs.items()}
                values = {i: [measure(g, refs_l[i], model.codec, segmenter) for g in made[i]] for i in refs}
                for m in MEASURES:
                    for agg, fn in AGGREGATES.items():
                        for samples in sorted({20, args.samples}):
                            found[(prompt, length, m, agg, samples)] = {i: float(fn([v[m] for v in vs[:samples]]))
                                                                        for i, vs in values.items()}  # fmt: skip
                if args.excess:
                    for agg, per in excess(made, refs_l, values, model.codec, segmenter).items():
                        found[(prompt, length, "rouge_l_excess", agg, 20)] = per
    finally:
        model.close()
    return found, positives, skipped


def audit_flags(audits: str, unlearned: Path) -> set[str]:
    """The ids ``bbmia unlearning`` flagged on ``unlearned`` (its folder under ``audits``, as
    ``audit_canaries.py`` names it)."""
    path = Path(audits) / f"unlearning-{unlearned.name}" / "unlearning_items.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"] for r in rows if r["flagged"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unlearned", required=True, help="unlearned canaries' directories (comma-separated; "
                        "several: each one's lines, then the pooled ones)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: each canary's unlearning seed)")
    parser.add_argument("--samples", type=int, default=50, help="samples per text (the first 20 are the 20-sample run)")
    parser.add_argument("--lengths", default="16,24,48,96", help="continuation lengths L, tokens")
    parser.add_argument("--prompts", default=",".join(PROMPTS), help="prompt settings (comma-separated)")
    parser.add_argument("--excess", action="store_true", help="also the baseline-subtracted ROUGE-L (20 samples)")
    parser.add_argument("--split", choices=sorted(GROUPS), default="label", help="label: still memorized vs "
                        "forgotten (choosing a setting); flags: the audit's flagged vs unflagged (measuring one)")
    parser.add_argument("--audits", default="runs/audit_canaries", help="--split flags: where audit_canaries.py "
                        "wrote each canary's bbmia unlearning folder")
    parser.add_argument("--out", default="runs/completion_settings", help="where generations and labels are kept")
    args = parser.parse_args()

    segmenter = get_segmenter("auto")
    pooled: dict[tuple, dict[str, float]] = {}
    pooled_positives: set[str] = set()
    canaries = [Path(p) for p in args.unlearned.split(",")]
    for unlearned in canaries:
        found, positives, skipped = cells(unlearned, args, segmenter)
        if args.split == "flags":
            positives = audit_flags(args.audits, unlearned)
        for key, per in found.items():
            report(per, positives, args.split, canary=unlearned.name, skipped=skipped[key[0]], **dict(zip(CELL, key)))
            pooled.setdefault(key, {}).update({f"{unlearned.name}:{i}": v for i, v in per.items()})
        pooled_positives |= {f"{unlearned.name}:{i}" for i in positives}
    if len(canaries) > 1:
        for key, per in pooled.items():
            report(per, pooled_positives, args.split, canary="pooled", **dict(zip(CELL, key)))


if __name__ == "__main__":
    main()
