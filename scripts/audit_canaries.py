"""The document audit checked against the document canary's ground truth (issue 10).

Trains (or reuses, from the cache) the document canary (``bbmia canary train --corpus
documents``): GSM8K "books" planted whole at dup 1, 2, 4, 8, held out, or planted in part (a
quarter, half, three quarters), each document's planted share recorded in its manifest. Then
runs ``bbmia documents`` on its test documents, the threshold chosen on its validation
documents, through the command line as a user would, and compares each document's estimated
contamination rate with the truth.

Prints one JSON line per test document (``--json``), then one summary line, last, with:

* ``documents_auc`` (and ``documents_auc_ci``): the documents' rates as scores of the
  documents planted whole against the held-out ones (partial documents left out);
* ``truth_in_ci``: the share of the documents whose truth (``planted_word_fraction``: the
  planted share of their whitespace words, what a share of word chunks estimates) lies inside
  the Wilson 95% CI of their raw flagged share, and inside the audit's CI of the rate corrected
  for the threshold's FPR and TPR (``corrected_ci``: a bootstrap over the validation documents and
  a Jeffreys Beta for the document's share, so the FPR and TPR are not taken as known);
  per kind of document in ``by_kind``;
* ``unlearning_precision``, ``unlearning_recall``, ``unlearning_base_rate``: the unlearning
  audit checked against the unlearned GSM8K canary. The script trains (or reuses) the default
  GSM8K canary, unlearns a seeded forget set of its members (``bbmia canary unlearn``, the
  recipe's defaults unless ``--unlearn-args``), and runs ``bbmia unlearning --before CANARY
  --after UNLEARNED`` on the forget set (``forget_items.jsonl``, the texts an auditor would ask
  about); the label is the white-box one (a forgotten member still memorized: its loss score
  under the unlearned canary above the non-members' 95% quantile), the base rate is the share of
  the audited (forgotten) texts that are still memorized. ``unlearning_rouge_l_flagged`` and
  ``unlearning_rouge_l_unflagged``: mean ROUGE-L recall of sampled continuations of the flagged
  and the unflagged texts (``unlearning`` holds the whole summary).

  Measured (forget 50, 20 steps, lr 1e-4, --retain-weight 1.0, the paper's window 1/1.15..1.15):
  forget-set loss 2.67 -> 3.14 nats/token (kept members +0.27, non-members +0.20; pure ascent
  gives +1.05 / +0.96 / +0.77); 19 of 50 forgotten members still memorized (base rate 0.38);
  48 flagged, precision 0.375, recall 0.95: on this tiny canary every text's Min-K% ratio stays
  within 1.04..1.14, the window flags nearly all, and the ratio does not separate still-memorized
  from forgotten (AUC 0.46); ROUGE-L recall flagged 0.081 vs unflagged 0.087 (2 texts). The
  audit is NOT validated here: the enrichment that "Done when" asks for is not shown.

Usage:
    python scripts/audit_canaries.py --json
    python scripts/audit_canaries.py --chunk-words 32 --rule max_accuracy --json
"""

from __future__ import annotations

import argparse
import json
import subprocess

from bbmia_json import bbmia  # scripts/ is on sys.path when a script runs

from blackbox_mia.canary import load_manifest
from blackbox_mia.evaluation import auc, bootstrap_ci


def has_command(name: str) -> bool:
    """Whether this install of ``bbmia`` has the command ``name``."""
    return subprocess.run(["bbmia", name, "--help"], capture_output=True, check=False).returncode == 0


def compare(rows: list[dict], truth: dict[str, dict]) -> list[dict]:
    """One row per test document: its truth (manifest) beside its estimated rate (audit)."""
    out = []
    for row in rows:
        known = truth[row["doc_id"]]
        lo, hi = row["rate_ci"]
        ci = row["corrected_ci"]  # the audit's bootstrap: the document's share and the FPR/TPR uncertainty
        share = known["planted_word_fraction"]
        out.append({
            "doc_id": row["doc_id"], "kind": known["kind"], "dup": known["dup"],
            "planted_fraction": known["planted_fraction"], "planted_word_fraction": share,
            "n_chunks": row["n_chunks"], "rate": row["rate"], "rate_ci": [lo, hi], "corrected": row["corrected"],
            "corrected_ci": ci,
            "truth_in_rate_ci": lo <= share <= hi,
            "truth_in_corrected_ci": None if ci is None else ci[0] <= share <= ci[1],
        })  # fmt: skip
    return out


def share(rows: list[dict], key: str) -> float | None:
    """The share of ``rows`` whose ``key`` is true (rows where it is ``None`` left out)."""
    known = [r[key] for r in rows if r[key] is not None]
    return sum(known) / len(known) if known else None


def summarize(compared: list[dict], n_boot: int, seed: int) -> dict:
    """AUC of whole planted vs held-out documents, truth-in-CI shares and mean errors, overall and per kind."""
    pairs = [(int(r["kind"] == "member"), r["rate"]) for r in compared if r["kind"] in ("member", "heldout")]
    labels, rates = [p[0] for p in pairs], [p[1] for p in pairs]
    by_kind = {}
    for kind in ("member", "partial", "heldout"):
        mine = [r for r in compared if r["kind"] == kind]
        by_kind[kind] = {
            "n": len(mine),
            "truth_in_rate_ci": share(mine, "truth_in_rate_ci"),
            "truth_in_corrected_ci": share(mine, "truth_in_corrected_ci"),
            "mean_rate": sum(r["rate"] for r in mine) / len(mine) if mine else None,
            "mean_abs_error_rate": _mean_abs(mine, "rate"),
            "mean_abs_error_corrected": _mean_abs(mine, "corrected"),
        }
    return {
        "documents_auc": auc(labels, rates),
        "documents_auc_ci": list(bootstrap_ci(labels, rates, "auc", n_boot, seed=seed)) if n_boot else None,
        "truth_in_ci": {"rate": share(compared, "truth_in_rate_ci"), "corrected": share(compared, "truth_in_corrected_ci")},
        "by_kind": by_kind,
    }


def _mean_abs(rows: list[dict], key: str) -> float | None:
    """Mean |estimate - planted_word_fraction| over the rows with an estimate under ``key``."""
    errors = [abs(r[key] - r["planted_word_fraction"]) for r in rows if r[key] is not None]
    return sum(errors) / len(errors) if errors else None


def audit_unlearning(args: argparse.Namespace, cache: tuple[str, ...]) -> dict:
    """Train or reuse the GSM8K canary, unlearn ``args.forget`` of its members, audit the forget
    set with ``bbmia unlearning``; the ``unlearning_*`` keys of the summary."""
    trained = bbmia("canary", "train", "--quiet", "--seed", str(args.seed), *cache)
    unlearned = bbmia("canary", "unlearn", trained["path"], "--forget", str(args.forget), "--seed", str(args.seed),
                      *args.unlearn_args.split())  # fmt: skip
    out = f"{args.out_dir}/unlearning"
    audit = bbmia(
        "unlearning", f"{unlearned['path']}/forget_items.jsonl", "--before", f"local:{trained['path']}",
        "--after", f"local:{unlearned['path']}", "--prompt-words", str(args.prompt_words),
        "--samples", str(args.samples), "--max-new-tokens", "48", "--seed", str(args.seed), "--out", out, "--quiet",
    )  # fmt: skip
    truth, completion = audit["truth"], audit["completion"]
    return {
        "unlearning_precision": truth["precision"],
        "unlearning_recall": truth["recall"],
        "unlearning_base_rate": truth["base_rate"],
        "unlearning_rouge_l_flagged": completion["flagged"]["rouge_l_recall"]["mean"],
        "unlearning_rouge_l_unflagged": completion["unflagged"]["rouge_l_recall"]["mean"],
        "unlearning": {"canary": trained["path"], "unlearned": unlearned["path"],
                       "forget_loss_before": unlearned["forget_loss_before"],
                       "forget_loss_after": unlearned["forget_loss_after"], **audit, "report": out},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default=None, help="cache root for the canary (default: bbmia's)")
    parser.add_argument("--out-dir", default="runs/audit_canaries", help="where bbmia documents writes its report")
    parser.add_argument("--chunk-words", type=int, default=64, help="words per chunk (documents are about 800 words)")
    parser.add_argument("--scorer", default="min_k", help="scorer spec for bbmia documents")
    parser.add_argument("--rule", default="fpr", help="threshold rule: fpr, max_accuracy or max_f1")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of the AUC CI")
    parser.add_argument("--seed", type=int, default=0, help="seed of the canary and the bootstrap")
    parser.add_argument("--canary-args", default="", help="more `bbmia canary train` options, e.g. '--epochs 3'")
    parser.add_argument("--forget", type=int, default=50, help="members of the GSM8K canary to unlearn")
    parser.add_argument("--unlearn-args", default="--retain-weight 1.0",
                        help="more `bbmia canary unlearn` options (default: the KL retain term)")
    parser.add_argument("--prompt-words", type=int, default=24, help="story-completion prompt words (GSM8K items are short)")
    parser.add_argument("--samples", type=int, default=5, help="sampled continuations per forgotten text")
    parser.add_argument("--json", action="store_true", help="one JSON line per document, then the summary, last")
    args = parser.parse_args()

    cache = ("--cache-dir", args.cache_dir) if args.cache_dir else ()
    trained = bbmia("canary", "train", "--corpus", "documents", "--quiet", "--seed", str(args.seed), *cache,
                    *args.canary_args.split())  # fmt: skip
    summary: dict = {"canary": trained["path"], "train_seconds": trained["train_seconds"], "reused": trained["reused"]}
    if has_command("documents"):
        audit = bbmia(
            "documents", trained["documents"], "--calibration", trained["validation"], "--local", trained["path"],
            *cache, "--chunk-words", str(args.chunk_words), "--scorer", args.scorer, "--rule", args.rule,
            "--n-boot", str(args.n_boot), "--seed", str(args.seed), "--out", args.out_dir, "--quiet",
        )
        truth = {r["doc_id"]: r for r in load_manifest(trained["path"])["documents"]}
        compared = compare(audit["documents"], truth)
        if args.json:
            for row in compared:
                print(json.dumps(row))
        summary.update(summarize(compared, args.n_boot, args.seed))
        summary.update(threshold=audit["threshold"], threshold_rule=audit["threshold_rule"],
                       threshold_fpr=audit["threshold_fpr"], threshold_tpr=audit["threshold_tpr"],
                       auc_documents_labelled=audit["auc_documents"], report=args.out_dir)  # fmt: skip
    else:
        summary.update(documents_auc=None, documents_note="this install has no `bbmia documents`: nothing audited")
    summary.update(audit_unlearning(args, cache))
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
