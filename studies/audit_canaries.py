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
* ``unlearning_precision``, ``unlearning_recall``, ``unlearning_base_rate`` (each with a Wilson
  95% ``_ci``) and ``unlearning_fisher_p`` (one-sided Fisher exact test of enrichment): the
  unlearning audit checked against the unlearned GSM8K canary. The script trains (or reuses) a
  GSM8K canary, unlearns a forget set of 50 members drawn among those it memorized (``bbmia canary
  unlearn``), both as ``--setup`` says (:data:`SETUPS`: ``least-changed``, the default, a dup-32
  canary and the least-changed flag rule; ``paper-window``, the default dup-8 canary and the
  paper's window; ``--unlearn-canary-args``, ``--unlearn-args``, ``--flag-least-changed`` /
  ``--window`` override a setup's parts), seeds ``--unlearn-seeds``, and runs ``bbmia unlearning --before CANARY --after
  UNLEARNED`` on the forget set (``forget_items.jsonl``, the texts an auditor would ask about; the
  paper's window, or with ``--flag-least-changed F`` the share F of them whose ratio is closest to 1,
  per seed, passed to every ``bbmia unlearning`` run); the
  label is the white-box one (a forgotten member still memorized: its loss score under the
  unlearned canary above the non-members' 95% quantile), the base rate the share of the audited
  texts still memorized. ``unlearning_closeness_auc``: AUC of ``-|ln ratio|`` for that label.
  ``unlearning_rouge_l_flagged`` / ``_unflagged`` (and ``_approximate_``): mean similarity of
  sampled continuations to the truth, flagged vs unflagged, ``_difference`` with a bootstrap CI
  and a Mann-Whitney p. ``unlearning_qa_*``: the same in Q&A mode (question = the text up to
  ``\nAnswer:``, reference = the answer). ``--serve``: ``unlearning_blackbox`` reruns the story
  audit with both models behind ``bbmia serve`` (per-text score differences, flags that differ,
  its own keys).

  ``unlearning_*_by_label_difference``: the same similarity comparison split by the white-box label
  (still memorized minus the rest), the most a perfect flag could show. ``--unlearn-seeds`` (default
  1,2,3): one unlearned canary per seed; the first gives the keys above, ``unlearning_by_seed``
  each seed's and ``unlearning_pooled_*`` every seed's texts pooled into one table.

  Measured: docs/generated/audit_canaries_window.md (``--setup paper-window --serve``) and
  docs/generated/audit_canaries.md (the default setup, ``--skip-documents``), the tables
  docs/documents-unlearning.md includes, written from this study's lines by
  ``scripts/docs_figures.py --only audit_canaries_window,audit_canaries``.

Usage:
    python -m studies.audit_canaries --json
    python -m studies.audit_canaries --setup paper-window --serve --json
    python -m studies.audit_canaries --chunk-words 32 --rule max_accuracy --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from blackbox_mia.audits.unlearning import (
    FLAGGED,
    NOT_STILL_MEMORIZED,
    STILL_MEMORIZED,
    UNFLAGGED,
    compare_groups,
    split_completed,
)
from blackbox_mia.audits.unlearning.truth import closeness_auc, flag_metrics
from blackbox_mia.canary import load_manifest
from blackbox_mia.evaluation import auc, bootstrap_ci
from blackbox_mia.key_aliases import DOCUMENTS_SUMMARY_KEYS, with_old_keys
from studies.bbmia_json import bbmia
from studies.table_format import ci, num, p_value

ANSWER_MARK = "\nAnswer:"  # where a GSM8K text's question ends (datasets.gsm8k_text)
# The unlearning setups: (canary options, unlearning recipe, least-changed share F or None for the paper's
# window). The forget set is drawn among the members the canary memorized before (the paper's setting); each
# recipe is, of those tried on unlearning seed 0 (studies/unlearning_recipes.py, every one listed in
# records/unlearning-ground-truth.md), the one with the smallest Fisher p of enrichment under its flag rule;
# measured on fresh seeds (--unlearn-seeds, default 1,2,3).
# - "least-changed" (the default): a dup-32 canary, which reproduces its members when sampled, and the
#   scale-free rule (the 30% of the forget set whose Min-K% ratio is closest to 1; F fixed before measuring).
# - "paper-window": the default dup-8 canary and the paper's window (1/1.15, 1.15); its continuations
#   are not closer (the canary reproduces almost nothing), and on dup 24-32 that window flags no forgotten text.
SETUPS = {
    "least-changed": ("--dup 32 --n-members 160 --n-nonmembers 100 --n-background 1000",
                      "--steps 150 --lr 3e-4 --retain-weight 10 --forget-from memorized", 0.3),
    "paper-window": ("", "--steps 6 --lr 3e-3 --retain-weight 10 --forget-from memorized", None),
}
DEFAULT_SETUP = "least-changed"
TUNE_SEED = 0  # the unlearning seed the recipe and the completion setting were chosen on: never a measured one
# The story-completion setting: of the 192 settings compared on unlearning seed 0 by how well they separate the
# white-box label (studies/completion_settings.py: prompt, continuation length, measure, mean or max over samples,
# 20 or 50 samples; every one in records/unlearning-ground-truth.md), this one, ROUGE-L recall averaged over the
# samples at temperature 1, was within a factor 2 of the smallest Mann-Whitney p (0.00053 vs 0.00034).
PROMPT_WORDS, MAX_NEW_TOKENS, SAMPLES = 24, 48, 20


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


def qa_pairs(forget_file: str, path: Path) -> Path:
    """The forget set as Q&A pairs for ``bbmia unlearning --qa``: each GSM8K text cut after
    ``\nAnswer:`` (the question, prompt) and the rest (the answer, reference); question + " " +
    answer is the canary's own text, so the ratio is the same as in story mode."""
    rows = []
    for line in Path(forget_file).read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        cut = item["text"].index(ANSWER_MARK) + len(ANSWER_MARK)
        rows.append({"id": item["id"], "question": item["text"][:cut], "answer": item["text"][cut:].lstrip(" ")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def unlearning_keys(audit: dict, prefix: str) -> dict:
    """The summary keys of one ``bbmia unlearning --json`` run (``prefix`` + name), or of the
    pooled rows of several (:func:`pooled_audit`)."""
    truth, completion, diff = audit["truth"], audit["completion"], audit["completion_difference"]
    out = {f"{prefix}{k}": truth[k] for k in ("precision", "recall", "base_rate")}
    out.update({f"{prefix}{k}_ci": truth[f"{k}_ci"] for k in ("precision", "recall", "base_rate")})
    out[f"{prefix}fisher_p"] = truth["fisher_p"]
    out[f"{prefix}n_flagged"], out[f"{prefix}n_audited"] = truth["n_flagged"], truth["n_audited"]
    out[f"{prefix}n_positive"] = truth["n_positive"]
    out[f"{prefix}closeness_auc"] = truth["closeness_auc"]
    for measure in ("rouge_l_recall", "approximate"):
        short = "rouge_l" if measure == "rouge_l_recall" else measure
        for group in ("flagged", "unflagged"):
            out[f"{prefix}{short}_{group}"] = completion[group][measure]["mean"]
        out[f"{prefix}{short}_difference"] = diff[measure]
        for group in (STILL_MEMORIZED, NOT_STILL_MEMORIZED):  # split by the white-box label instead of the flags
            out[f"{prefix}{short}_{group}"] = truth["completion"][group][measure]["mean"]
        out[f"{prefix}{short}_by_label_difference"] = truth["completion_difference"][measure]
    return out


def pooled_audit(folders: dict[int, str], seed: int) -> dict:
    """The per-text rows of several ``bbmia unlearning`` runs (``{unlearning seed: output folder}``,
    each on its own unlearned canary) pooled into one audit summary shaped like ``--json``'s
    (``truth``, ``completion``, ``completion_difference``): one 2x2 table flagged x still memorized
    (precision, recall, base rate, one-sided Fisher p) and the similarity comparisons over every
    text, ids made unique by their seed (a member forgotten under two seeds counts twice)."""
    rows = [{**row, "id": f"{s}:{row['id']}"} for s, folder in folders.items()
            for row in read_rows(f"{folder}/unlearning_items.jsonl")]  # fmt: skip
    flagged = {r["id"] for r in rows if r["flagged"]}
    positives = {r["id"] for r in rows if r["still_memorized"]}
    completion, difference = compare_groups(split_completed(rows, "flagged", (FLAGGED, UNFLAGGED)), seed)
    by_label = compare_groups(split_completed(rows, "still_memorized", (STILL_MEMORIZED, NOT_STILL_MEMORIZED)), seed)
    truth = {**flag_metrics(flagged, positives, [r["id"] for r in rows]), "closeness_auc": closeness_auc(rows),
             "completion": by_label[0], "completion_difference": by_label[1]}
    return {"truth": truth, "completion": completion, "completion_difference": difference}


def audit_unlearning(args: argparse.Namespace, cache: tuple[str, ...]) -> dict:
    """Train or reuse the GSM8K canary; for each unlearning seed, unlearn ``args.forget`` of its
    members and audit the forget set with ``bbmia unlearning`` (story completion); Q&A mode and,
    with ``--serve``, the black-box rerun on the first seed; the ``unlearning_*`` keys of the
    summary (the first seed's), ``unlearning_by_seed`` and ``unlearning_pooled_*`` (every seed's texts)."""
    trained = bbmia("canary", "train", "--quiet", "--seed", str(args.seed), *cache, *args.unlearn_canary_args.split())
    seeds = [int(s) for s in args.unlearn_seeds.split(",")]
    if TUNE_SEED in seeds:
        print(f"warning: unlearning seed {TUNE_SEED} is the seed the recipe and the completion setting were chosen "
              "on: not a fresh measurement", file=sys.stderr)  # fmt: skip
    runs = {seed: audit_seed(args, trained["path"], seed) for seed in seeds}
    first = runs[seeds[0]]
    unlearned, audit, out, common = first["unlearned"], first["audit"], first["out"], first["common"]
    record = load_manifest(unlearned["path"])["unlearning"]
    forget_file = f"{unlearned['path']}/forget_items.jsonl"
    before, after = f"local:{trained['path']}", f"local:{unlearned['path']}"
    qa_file = qa_pairs(forget_file, Path(f"{out}-qa") / "qa.jsonl")
    qa = bbmia("unlearning", str(qa_file), "--qa", "--before", before, "--after", after, *common,
               "--truth", unlearned["path"], "--out", f"{out}-qa")  # fmt: skip
    reached = sum(n > 0 for n in record["ascents_per_item"].values())
    memorized_before = set(record["memorized_before"]["ids"])
    summary = {
        **unlearning_keys(audit, "unlearning_"),
        **unlearning_keys(qa, "unlearning_qa_"),
        "unlearning": {"setup": args.setup, "canary": trained["path"], "canary_args": args.unlearn_canary_args,
                       "unlearned": unlearned["path"], "recipe": args.unlearn_args,
                       "flag_least_changed": args.flag_least_changed,
                       "unlearn_seed": seeds[0], "tune_seed": TUNE_SEED,
                       "completion": {"prompt_words": args.prompt_words, "max_new_tokens": args.max_new_tokens,
                                      "samples": args.samples, "temperature": 1.0, "aggregate": "mean"},
                       "forget_loss_before": unlearned["forget_loss_before"],
                       "forget_loss_after": unlearned["forget_loss_after"],
                       "forget_items_reached": reached, "n_forget": len(record["forget_ids"]),
                       "n_memorized_before": len(memorized_before),
                       "forget_memorized_before": len(memorized_before & set(record["forget_ids"])), "report": out},
        "unlearning_by_seed": {str(seed): {**unlearning_keys(run["audit"], ""), "unlearned": run["unlearned"]["path"],
                                           "report": run["out"]} for seed, run in runs.items()},
    }
    if len(seeds) > 1:
        summary["unlearning_pooled_seeds"] = seeds
        summary.update(unlearning_keys(pooled_audit({seed: run["out"] for seed, run in runs.items()}, args.seed),
                                       "unlearning_pooled_"))  # fmt: skip
    if args.serve:
        summary["unlearning_blackbox"] = unlearning_through_serve(args, trained["path"], unlearned["path"], forget_file,
                                                                  common, out)  # fmt: skip
    return summary


def audit_seed(args: argparse.Namespace, canary: str, seed: int) -> dict:
    """Unlearn ``args.forget`` members of ``canary`` at unlearning seed ``seed`` (into the same
    directory each time) and run the story-completion audit on the forget set (sampling seed ``seed``; resumed
    from its folder, one per unlearned canary): ``unlearned`` (``bbmia canary unlearn``'s summary),
    ``audit`` (``bbmia unlearning``'s), ``out`` (its folder) and ``common`` (the shared options)."""
    unlearned = bbmia("canary", "unlearn", canary, "--forget", str(args.forget), "--seed", str(seed),
                      *args.unlearn_args.split())  # fmt: skip
    common = ("--samples", str(args.samples), "--max-new-tokens", str(args.max_new_tokens), "--seed", str(seed),
              "--quiet", *flag_rule_args(args))  # fmt: skip
    out = f"{args.out_dir}/unlearning-{Path(unlearned['path']).name}"
    audit = bbmia("unlearning", f"{unlearned['path']}/forget_items.jsonl", "--before", f"local:{canary}", "--after",
                  f"local:{unlearned['path']}", "--prompt-words", str(args.prompt_words), *common, "--out", out)  # fmt: skip
    return {"unlearned": unlearned, "audit": audit, "out": out, "common": common}


def flag_rule_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``bbmia unlearning`` flag-rule options: ``--flag-least-changed F`` when given, else none (the window)."""
    return () if args.flag_least_changed is None else ("--flag-least-changed", str(args.flag_least_changed))


def unlearning_through_serve(args, canary: str, unlearned: str, forget_file: str, common: tuple, local_out: str) -> dict:
    """The story-completion audit again with both models behind ``bbmia serve`` (black box):
    per-text Min-K%/loss differences from the local run, flags that differ, and the black-box
    run's own keys (its samples come from the server's RNG, so similarities agree in distribution only)."""
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    out = f"{local_out}-blackbox"
    models = [LocalBackend(LocalConfig(path, device="cpu")) for path in (canary, unlearned)]
    try:
        with serve_in_background(ServerConfig(canary), backend=models[0]) as url_before, \
                serve_in_background(ServerConfig(unlearned), backend=models[1]) as url_after:
            audit = bbmia("unlearning", forget_file, "--before", f"api:{canary}@{url_before}", "--tokenizer", canary,
                          "--after", f"api:{unlearned}@{url_after}", "--context-tokens", "128", "--truth", unlearned,
                          "--prompt-words", str(args.prompt_words), *common, "--out", out,
                          "--overwrite", "--yes")  # fmt: skip  # a new port each run: nothing to resume; own servers
    finally:
        for model in models:
            model.close()
    local = {r["id"]: r for r in read_rows(f"{local_out}/unlearning_items.jsonl")}
    remote = read_rows(f"{out}/unlearning_items.jsonl")
    keys = ("min_k_before", "min_k_after", "loss_before", "loss_after")
    return {
        "max_abs_score_diff": max(abs(r[k] - local[r["id"]][k]) for r in remote for k in keys),
        "flags_differ": sum(r["flagged"] != local[r["id"]]["flagged"] for r in remote),
        **unlearning_keys(audit, ""),
        "report": out,
    }


def read_rows(path: str) -> list[dict]:
    """The JSON objects of a JSONL file."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _unlearning_row(name: str, keys: dict, prefix: str = "") -> str:
    """One table row of :func:`unlearning_keys`' keys (``prefix`` + name)."""
    k = {name[len(prefix):]: value for name, value in keys.items() if name.startswith(prefix)}
    rouge = k["rouge_l_difference"] or {}
    label = k["rouge_l_by_label_difference"] or {}
    return (f"| {name} | {k['n_flagged']} / {k['n_audited']} | {num(k['precision'])}{ci(k['precision_ci'])} | "
            f"{num(k['base_rate'])}{ci(k['base_rate_ci'])} | {p_value(k['fisher_p'])} | {num(k['recall'])} | "
            f"{num(k['closeness_auc'])} | {num(k['rouge_l_flagged'])} vs {num(k['rouge_l_unflagged'])}: "
            f"{num(rouge.get('difference'))}{ci(rouge.get('ci'))}, p = {p_value(rouge.get('mann_whitney_p'))} | "
            f"{num(label.get('difference'))}, p = {p_value(label.get('mann_whitney_p'))} |")


def markdown(lines: list[dict]) -> str:
    """The docs' tables (docs/documents-unlearning.md) from this study's ``--json`` lines (one per
    document, then the summary): the document audit against the truth per kind of document, and
    the unlearning audit against the white-box label per seed, pooled, in Q&A mode and through
    ``bbmia serve``.

    Raises:
        ValueError: ``lines`` holds no summary line last.
    """
    *documents, last = lines
    if "unlearning" not in last:
        raise ValueError("the last line is not the study's summary")
    out = []
    if "documents_auc" in last and last["documents_auc"] is not None:
        out += [f"Documents: AUC of the rates, planted whole vs held out, {num(last['documents_auc'])}"
                f"{ci(last['documents_auc_ci'])}; threshold at realised FPR {num(last['threshold_realised_fpr'])}, "
                f"TPR {num(last['threshold_tpr'])} on the validation documents.", "",
                "| documents | n | truth in the rate's Wilson CI | truth in the corrected CI | mean rate | "
                "mean error, rate | mean error, corrected |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for kind, k in last["by_kind"].items():
            out.append(f"| {kind} | {k['n']} | {num(k['truth_in_rate_ci'], 2)} | {num(k['truth_in_corrected_ci'], 2)} | "
                       f"{num(k['mean_rate'])} | {num(k['mean_abs_error_rate'])} | {num(k['mean_abs_error_corrected'])} |")
        inside = sum(bool(d["truth_in_corrected_ci"]) for d in documents)
        wilson = sum(bool(d["truth_in_rate_ci"]) for d in documents)
        out += ["", f"All {len(documents)} test documents: truth inside the corrected CI for {inside}, inside the raw "
                f"rate's Wilson CI for {wilson}."]
        if "documents_blackbox" in last:
            box = last["documents_blackbox"]
            out += ["", f"Through `bbmia serve`: {box['n_chunks']} chunks, largest score difference from the local "
                    f"run {box['max_abs_score_diff']:.2g} nats/token, {box['flags_differ']} flags and "
                    f"{box['rates_differ']} document rates differ."]
        out.append("")
    setup = last["unlearning"]
    rule = (f"the {setup['flag_least_changed']:.0%} least changed" if setup["flag_least_changed"] is not None
            else "the paper's window")
    canary = f"`bbmia canary train {setup['canary_args']}`" if setup["canary_args"] else "the default canary"
    out += [f"Unlearning (setup `{setup['setup']}`: {canary}, recipe "
            f"`{setup['recipe']}`, flags: {rule}; forget loss {num(setup['forget_loss_before'], 2)} → "
            f"{num(setup['forget_loss_after'], 2)} nats/token on seed {setup['unlearn_seed']}):", "",
            "| seed | flagged / audited | precision (still memorized among flagged) | base rate | Fisher p | recall | "
            "closeness AUC | ROUGE-L flagged vs unflagged: difference, p | by the label: difference, p |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for seed, keys in last["unlearning_by_seed"].items():
        out.append(_unlearning_row(seed, keys))
    if "unlearning_pooled_seeds" in last:
        out.append(_unlearning_row("pooled " + ", ".join(map(str, last["unlearning_pooled_seeds"])), last,
                                   "unlearning_pooled_"))
    out.append(_unlearning_row(f"{setup['unlearn_seed']}, Q&A", last, "unlearning_qa_"))
    if "unlearning_blackbox" in last:
        box = last["unlearning_blackbox"]
        out.append(_unlearning_row(f"{setup['unlearn_seed']}, through `bbmia serve`", box))
        out += ["", f"Through `bbmia serve`: largest score difference from the local run "
                f"{box['max_abs_score_diff']:.2g} nats/token, {box['flags_differ']} flags differ (its own samples)."]
    return "\n".join(out) + "\n"


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
    parser.add_argument("--setup", choices=sorted(SETUPS), default=DEFAULT_SETUP, help="the unlearning canary, "
                        "recipe and flag rule together (see SETUPS; the options below override its parts)")
    parser.add_argument("--unlearn-canary-args", default=None, help="`bbmia canary train` options for the "
                        "GSM8K canary that is unlearned, e.g. '--dup 64 --n-members 100' (default: the setup's)")
    parser.add_argument("--unlearn-seeds", default="1,2,3", help="comma-separated seeds of the forget sample, the "
                        "unlearning batches and the sampling, one unlearned canary each; the first gives the "
                        f"unlearning_* keys, all of them the pooled ones (default 1,2,3: fresh; the recipe and the "
                        f"completion setting were chosen on {TUNE_SEED})")
    parser.add_argument("--unlearn-args", default=None, help="`bbmia canary unlearn` options (default: the setup's recipe)")
    parser.add_argument("--prompt-words", type=int, default=PROMPT_WORDS, help="story-completion prompt words (GSM8K items are short)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, help="story-completion continuation "
                        "length, tokens (the reference is cut to as many)")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="sampled continuations per forgotten text (the paper's 20)")
    rule = parser.add_mutually_exclusive_group()
    rule.add_argument("--flag-least-changed", type=float, default=None, metavar="F", help="bbmia unlearning's "
                      "flag rule: the share F of the forget set whose ratio is closest to 1 (default: the setup's)")
    rule.add_argument("--window", action="store_true", help="bbmia unlearning's flag rule: the paper's window")
    parser.add_argument("--serve", action="store_true", help="also run the unlearning audit through bbmia serve "
                        "(black box) and compare it with the local run")
    parser.add_argument("--skip-documents", action="store_true", help="run only the unlearning audit")
    parser.add_argument("--json", action="store_true", help="one JSON line per document, then the summary, last")
    args = parser.parse_args()
    canary_args, recipe, fraction = SETUPS[args.setup]
    args.unlearn_canary_args = canary_args if args.unlearn_canary_args is None else args.unlearn_canary_args
    args.unlearn_args = recipe if args.unlearn_args is None else args.unlearn_args
    if args.flag_least_changed is None and not args.window:
        args.flag_least_changed = fraction

    cache = ("--cache-dir", args.cache_dir) if args.cache_dir else ()
    summary: dict = {}
    if not args.skip_documents:
        summary.update(audit_documents(args, cache))
    summary.update(audit_unlearning(args, cache))
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))


def audit_documents(args: argparse.Namespace, cache: tuple[str, ...]) -> dict:
    """Train or reuse the document canary and run ``bbmia documents`` on it; the ``documents_*``
    keys of the summary (one JSON line per document first, with ``--json``)."""
    trained = bbmia("canary", "train", "--corpus", "documents", "--quiet", "--seed", str(args.seed), *cache,
                    *args.canary_args.split())  # fmt: skip
    summary: dict = {"canary": trained["path"], "train_seconds": trained["train_seconds"], "reused": trained["reused"]}
    if has_command("documents"):
        audit = bbmia(
            "documents", trained["documents"], "--calibration", trained["validation"], "--local", trained["path"],
            *cache, "--chunk-words", str(args.chunk_words), "--scorers", args.scorer, "--rule", args.rule,
            "--n-boot", str(args.n_boot), "--seed", str(args.seed), "--out", args.out_dir, "--quiet",
        )
        truth = {r["doc_id"]: r for r in load_manifest(trained["path"])["documents"]}
        compared = compare(audit["documents"], truth)
        if args.json:
            for row in compared:
                print(json.dumps(row))
        summary.update(summarize(compared, args.n_boot, args.seed))
        summary.update(threshold=audit["threshold"], threshold_rule=audit["threshold_rule"],
                       threshold_realised_fpr=audit["threshold_realised_fpr"], threshold_tpr=audit["threshold_tpr"],
                       auc_documents_labelled=audit["auc_documents"], report=args.out_dir)  # fmt: skip
        summary = with_old_keys(summary, DOCUMENTS_SUMMARY_KEYS)
        if args.serve:
            summary["documents_blackbox"] = documents_through_serve(args, trained, audit)
    else:
        summary.update(documents_auc=None, documents_note="this install has no `bbmia documents`: nothing audited")
    return summary


def documents_through_serve(args: argparse.Namespace, trained: dict, local: dict) -> dict:
    """``bbmia documents`` again with the canary behind ``bbmia serve`` (black box): the largest
    chunk-score difference from the local run (nats/token), the flags and document rates that
    differ, both thresholds and AUCs."""
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    out = f"{args.out_dir}/documents_blackbox"
    model = LocalBackend(LocalConfig(trained["path"], device="cpu"))
    try:
        with serve_in_background(ServerConfig(trained["path"]), backend=model) as url:
            remote = bbmia(
                "documents", trained["documents"], "--calibration", trained["validation"], "--base-url", url,
                "--model", trained["path"], "--tokenizer", trained["path"], "--context-tokens", "128",
                "--chunk-words", str(args.chunk_words), "--scorers", args.scorer, "--rule", args.rule,
                "--n-boot", str(args.n_boot), "--seed", str(args.seed), "--out", out, "--quiet",
                "--overwrite",  # the server's port is new each run: nothing to resume
                "--yes",  # past the spend guard: the server is this study's own
            )
    finally:
        model.close()
    chunks = {key: {(r["doc_id"], r["start"]): r for r in read_rows(f"{folder}/chunks.jsonl")}
              for key, folder in (("local", args.out_dir), ("api", out))}
    rates = {key: {r["doc_id"]: r["rate"] for r in run["documents"]} for key, run in (("local", local), ("api", remote))}
    return {
        "n_chunks": len(chunks["api"]),
        "max_abs_score_diff": max(abs(r["score"] - chunks["local"][k]["score"]) for k, r in chunks["api"].items()),
        "flags_differ": sum(r["flagged"] != chunks["local"][k]["flagged"] for k, r in chunks["api"].items()),
        "rates_differ": sum(rate != rates["local"][d] for d, rate in rates["api"].items()),
        "threshold": [local["threshold"], remote["threshold"]],
        "auc_documents": [local["auc_documents"], remote["auc_documents"]],
        "report": out,
    }


if __name__ == "__main__":
    main()
