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
  the Wilson 95% CI of their rate, and inside that CI corrected for the threshold's FPR and TPR
  (``(bound - FPR) / (TPR - FPR)`` clipped to [0, 1]; the FPR and TPR themselves taken as known);
  per kind of document in ``by_kind``;
* ``unlearning_precision``, ``unlearning_recall``, ``unlearning_base_rate``: ``null``, the
  unlearning audit is not run by this script yet (``unlearning_note`` says so).

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

UNLEARNING_NOTE = "the unlearning audit is not run by this script yet: its keys are null"


def has_command(name: str) -> bool:
    """Whether this install of ``bbmia`` has the command ``name``."""
    return subprocess.run(["bbmia", name, "--help"], capture_output=True, check=False).returncode == 0


def corrected(value: float, fpr: float, tpr: float) -> float | None:
    """``(value - fpr) / (tpr - fpr)`` clipped to [0, 1]; ``None`` when ``tpr <= fpr``."""
    if tpr <= fpr:
        return None
    return min(1.0, max(0.0, (value - fpr) / (tpr - fpr)))


def compare(rows: list[dict], truth: dict[str, dict], fpr: float, tpr: float) -> list[dict]:
    """One row per test document: its truth (manifest) beside its estimated rate (audit)."""
    out = []
    for row in rows:
        known = truth[row["doc_id"]]
        lo, hi = row["rate_ci"]
        clo, chi = corrected(lo, fpr, tpr), corrected(hi, fpr, tpr)
        share = known["planted_word_fraction"]
        out.append({
            "doc_id": row["doc_id"], "kind": known["kind"], "dup": known["dup"],
            "planted_fraction": known["planted_fraction"], "planted_word_fraction": share,
            "n_chunks": row["n_chunks"], "rate": row["rate"], "rate_ci": [lo, hi], "corrected": row["corrected"],
            "corrected_ci": None if clo is None else [clo, chi],
            "truth_in_rate_ci": lo <= share <= hi,
            "truth_in_corrected_ci": None if clo is None else clo <= share <= chi,
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
            "--n-boot", str(args.n_boot), "--seed", str(args.seed), "--out-dir", args.out_dir, "--quiet",
        )
        truth = {r["doc_id"]: r for r in load_manifest(trained["path"])["documents"]}
        compared = compare(audit["documents"], truth, audit["threshold_fpr"], audit["threshold_tpr"])
        if args.json:
            for row in compared:
                print(json.dumps(row))
        summary.update(summarize(compared, args.n_boot, args.seed))
        summary.update(threshold=audit["threshold"], threshold_rule=audit["threshold_rule"],
                       threshold_fpr=audit["threshold_fpr"], threshold_tpr=audit["threshold_tpr"],
                       auc_documents_labelled=audit["auc_documents"], report=args.out_dir)  # fmt: skip
    else:
        summary.update(documents_auc=None, documents_note="this install has no `bbmia documents`: nothing audited")
    summary.update(unlearning_precision=None, unlearning_recall=None, unlearning_base_rate=None,
                   unlearning_note=UNLEARNING_NOTE)  # fmt: skip
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
