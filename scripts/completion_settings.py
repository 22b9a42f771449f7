"""Which story-completion setting separates still-memorized from forgotten texts best (issue 10)?

On one unlearned GSM8K canary (``bbmia canary unlearn``; the tuning seed's, never a measured one),
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

prints one JSON line: the still-memorized minus forgotten mean of the per-text aggregate, its
percentile bootstrap 95% CI and the one-sided Mann-Whitney p (still memorized larger). A shorter
length is the same sample cut (sampling is token by token with one generator per sample), so one
generation per prompt serves every length. Generations are kept in ``--out`` and reused.

Usage:
    python scripts/completion_settings.py --unlearned cache/canary/6338e872951d-unlearned-07f29f2da88b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from blackbox_mia.audits.completion import Completion, cut_at, cut_completion
from blackbox_mia.audits.unlearning import mean_difference, still_memorized
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary.unlearn import unlearning_record
from blackbox_mia.datasets import Item
from blackbox_mia.text.segment import get_segmenter
from blackbox_mia.text.similarity import approximate, common_prefix, rouge_l_recall

ANSWER_MARK = "\nAnswer:"  # where a GSM8K text's question ends
PROMPTS = ("w24", "w48", "half", "question")
MEASURES = ("rouge_l_recall", "approximate", "token_prefix")
AGGREGATES = {"mean": np.mean, "max": np.max}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unlearned", required=True, help="an unlearned canary's directory")
    parser.add_argument("--canary", default=None, help="its base canary (default: from its manifest)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: the unlearning seed)")
    parser.add_argument("--samples", type=int, default=50, help="samples per text (the first 20 are the 20-sample run)")
    parser.add_argument("--lengths", default="16,24,48,96", help="continuation lengths L, tokens")
    parser.add_argument("--out", default=None, help="where generations and labels are kept (default: runs/completion_settings/NAME)")
    args = parser.parse_args()

    unlearned = Path(args.unlearned)
    record = unlearning_record(unlearned)
    seed = record["seed"] if args.seed is None else args.seed
    out = Path(args.out or f"runs/completion_settings/{unlearned.name}-seed{seed}")
    lengths = [int(x) for x in args.lengths.split(",")]
    model = LocalBackend(LocalConfig(str(unlearned), device="cpu"))
    segmenter = get_segmenter("auto")
    try:
        label = still_memorized(unlearned, model, out / "truth_scores.jsonl", 0.05, resume=True)
        positives = set(label["ids"])
        items = [Item(id=r["id"], text=r["text"], label=r.get("label"))
                 for r in map(json.loads, (unlearned / "forget_items.jsonl").read_text(encoding="utf-8").splitlines())]
        for prompt in PROMPTS:
            cuts = [cut(it, prompt, max(lengths), segmenter, model) for it in items]
            completions = [c for c in cuts if c is not None]
            made = generations(completions, model, args.samples, seed, out / f"generations_{prompt}.json")
            refs = {c.item.id: model.codec.encode(c.item.text[len(c.prompt):])[: c.max_new_tokens] for c in completions}
            for length in lengths:
                values = {c.item.id: [measure(g, refs[c.item.id][:length], model.codec, segmenter)
                                      for g in made[c.item.id]] for c in completions}  # fmt: skip
                for m in MEASURES:
                    for agg, fn in AGGREGATES.items():
                        for samples in sorted({20, args.samples}):
                            per = {i: float(fn([v[m] for v in vs[:samples]])) for i, vs in values.items()}
                            yes = [v for i, v in per.items() if i in positives]
                            no = [v for i, v in per.items() if i not in positives]
                            d = mean_difference(yes, no, seed=0)
                            print(json.dumps({"prompt": prompt, "length": length, "measure": m, "aggregate": agg,
                                              "samples": samples, "n_still": len(yes), "n_forgotten": len(no),
                                              "still": float(np.mean(yes)), "forgotten": float(np.mean(no)), **d,
                                              "skipped": len(cuts) - len(completions)}), flush=True)  # fmt: skip
    finally:
        model.close()


if __name__ == "__main__":
    main()
