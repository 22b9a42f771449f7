"""Text-only contamination tests validated on canaries with planted members (issue 31).

For each canary (GSM8K at dup 8 and 16, AQuA at dup 8; ``--canaries``) the study trains it or
reuses it from the cache, draws a balanced sample of its labelled items (``--n`` members and
``--n`` non-members, the first of each in the canary's item file), and runs ``bbmia eval`` on it
with the text-only scorers (SaMIA, CDD, guided instruction, TS-Guessing's keyword form, and its
multiple-choice form on AQuA) beside Min-K% and the blind
TF-IDF baseline on the very same items, all on the local model (its generations are those a
``bbmia serve`` endpoint returns; tests/integration/test_text_only_audit.py checks that). It
reports per (method, canary) the AUC with its bootstrap 95% CI, TPR at 5% FPR, and the
requests and tokens per text a black-box run sends (from the scorers' own request lists: what
``--dry-run`` counts; Min-K%'s depend on the endpoint's tracker strategy, so null here), and for
each TS-Guessing form the one-sided Fisher exact test of members' exact-match rate against
non-members', for guided instruction the paper's dataset-level test on the members and on the
non-members (``dataset_tests``). DE-COP scores passages of documents (``bbmia documents
--scorers decop``), not these items: it is not run here.

Output: ``--json`` prints one JSON line per (method, canary) with ``method``, ``canary``, ``auc``,
``auc_ci``, ``tpr_at_5_fpr``, ``requests_per_text``, ``tokens_per_text`` (and ``exact_match``,
``p_value`` for TS-Guessing, ``dataset_tests`` for guided instruction), then a last line with
``best_text_only_auc_gsm8k_dup16`` and ``ts_guessing_p_aqua_dup8``. Every run resumes (canaries from the cache, ``eval`` its rows).

Usage:
    python -m studies.text_only_study --json
    python -m studies.text_only_study --canaries gsm8k-dup8 --n 50 --cdd-samples 10 --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy.stats import fisher_exact

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.text_only_runner import target_view
from blackbox_mia.scorers import parse_scorers
from studies.bbmia_json import bbmia
from studies.table_format import figure, p_value

CANARIES = {"gsm8k-dup8": ("gsm8k", 8), "gsm8k-dup16": ("gsm8k", 16), "aqua-dup8": ("aqua", 8)}
LOGPROB_BASELINE = "min_k"
GUIDED_NAMES = {"gsm8k": "GSM8K", "aqua": "AQuA-RAT"}  # the dataset the guided prompt names (instruction form)


def methods(corpus: str, args: argparse.Namespace) -> list[str]:
    """The scorer specs run on a canary: Min-K%, SaMIA, CDD (``--cdd-samples``; at the paper's
    α = 0.05 and at α = 0.2, which reads the very same generations), guided instruction (its
    difference and near-exact flag, the same generations), and TS-Guessing: its multiple-choice
    form on AQuA, its keyword form on GSM8K (the paper's forms for the two kinds of benchmark;
    some AQuA questions are all numbers and symbols, with no key word to hide)."""
    specs = [LOGPROB_BASELINE, f"samia:n={args.samia_samples}", f"cdd:n={args.cdd_samples}",
             f"cdd:n={args.cdd_samples},alpha=0.2", f"guided:dataset={GUIDED_NAMES[corpus]}",
             f"guided:dataset={GUIDED_NAMES[corpus]},metric=near_exact"]
    return specs + (["ts_guessing"] if corpus == "aqua" else ["ts_guessing_keyword"])


def balanced(model: str, n: int, path: Path) -> Path:
    """The first ``n`` members and ``n`` non-members of the canary's items, as a JSONL file."""
    rows = [json.loads(line) for line in (Path(model) / "canary_items.jsonl").read_text(encoding="utf-8").splitlines()]
    chosen = [r for r in rows if r["label"] == 1][:n] + [r for r in rows if r["label"] == 0][:n]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
    return path


def request_costs(model: str, texts: list[str], specs: list[str]) -> dict[str, tuple[float, float]]:
    """Per text-only scorer label: mean requests and tokens (prompt + budget, per request sent)
    per text of a black-box run, from the scorers' request lists on this canary's tokenizer."""
    backend = LocalBackend(LocalConfig(model))
    try:
        view = target_view(backend)
        out = {}
        for scorer in parse_scorers(specs):
            if scorer.needs_logprobs:
                continue
            requests = [scorer.requests(t, view) for t in texts]
            sent = sum(r.sent for rs in requests for r in rs)
            tokens = sum(r.sent * ((len(r.prompt) if not isinstance(r.prompt, str) else len(view.codec.encode(r.prompt)))
                                   + r.max_new_tokens) for rs in requests for r in rs)
            out[scorer.label] = (sent / len(texts), tokens / len(texts))
        return out
    finally:
        backend.close()


def exact_match_test(scores_file: Path, label: str) -> dict:
    """Exact-match counts of members and non-members and the one-sided Fisher exact p-value
    (H1: members' rate is higher)."""
    rows = [json.loads(line) for line in scores_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    hits = {y: sum(r["scores"][label] == 1.0 for r in rows if r["label"] == y) for y in (0, 1)}
    sizes = {y: sum(r["label"] == y for r in rows) for y in (0, 1)}
    table = [[hits[1], sizes[1] - hits[1]], [hits[0], sizes[0] - hits[0]]]
    return {"exact_match": {"members": hits[1] / sizes[1], "nonmembers": hits[0] / sizes[0]},
            "p_value": float(fisher_exact(table, alternative="greater").pvalue)}


def run_canary(name: str, args: argparse.Namespace) -> list[dict]:
    """Train or reuse one canary, evaluate every method on its balanced sample; one row per method."""
    corpus, dup = CANARIES[name]
    cache = ("--cache-dir", args.cache_dir) if args.cache_dir else ()
    model = bbmia("canary", "train", "--quiet", *cache, "--corpus", corpus, "--dup", str(dup))["path"]
    out = Path(args.out_dir) / name
    data = balanced(model, args.n, out / "items.jsonl")
    specs = methods(corpus, args)
    evaluated = bbmia("eval", str(data), "--local", model, *cache, "--scorers", ",".join(specs),
                      "--n-boot", str(args.n_boot), "--out", str(out / "eval"), "--quiet")
    texts = [json.loads(line)["text"] for line in data.read_text(encoding="utf-8").splitlines()]
    costs = request_costs(model, texts, specs)
    rows = []
    for label, auc in evaluated["auc"].items():
        requests, tokens = costs.get(label, (None, None))
        row = {"method": label, "canary": name, "auc": auc, "auc_ci": evaluated["auc_ci"][label],
               "tpr_at_5_fpr": evaluated["tpr_at_fpr"][label]["0.05"], "requests_per_text": requests,
               "tokens_per_text": tokens, "text_only": label in costs, "n": 2 * args.n}
        if label.startswith("ts_guessing"):
            row.update(exact_match_test(out / "eval" / "scores.jsonl", label))
        if label in evaluated.get("dataset_tests", {}):
            row["dataset_tests"] = evaluated["dataset_tests"][label]
        rows.append(row)
    rows.append({"method": "blind (TF-IDF)", "canary": name, "auc": evaluated["blind_auc"], "auc_ci": None,
                 "tpr_at_5_fpr": None, "requests_per_text": 0, "tokens_per_text": 0, "text_only": False, "n": 2 * args.n})
    return rows


def _comparison(row: dict) -> str:
    """The members-vs-non-members cell: TS-Guessing's exact-match rates and Fisher p, guided
    instruction's dataset-level tests; ``-`` for the others."""
    if "exact_match" in row:
        rates = row["exact_match"]
        return f"exact match {rates['members']:.2f} vs {rates['nonmembers']:.2f}, Fisher p = {p_value(row['p_value'])}"
    tests = row.get("dataset_tests")
    if not tests:
        return "-"
    members, nonmembers = tests["members"], tests["nonmembers"]
    if "matches" in members:
        return f"near-exact matches {members['matches']}/{members['n']} vs {nonmembers['matches']}/{nonmembers['n']}"
    return (f"guided > general: members sign test p = {p_value(members['sign_test_p'])} (bootstrap "
            f"{p_value(members['bootstrap_p'])}), non-members {p_value(nonmembers['sign_test_p'])} "
            f"({p_value(nonmembers['bootstrap_p'])})")


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/text_only.md) from this study's ``--json`` lines (the summary last):
    one row per (canary, method), AUC with its bootstrap 95% CI, TPR at 5% FPR, requests and
    tokens per text of a black-box run, the members-vs-non-members test; then the summary.

    Raises:
        ValueError: ``lines`` holds no summary line last.
    """
    *rows, last = lines
    if "best_text_only_auc_gsm8k_dup16" not in last:
        raise ValueError("the last line is not the study's summary")
    out = ["| method | canary | AUC [95% CI] | TPR @ 5% FPR | requests / text | tokens / text | members vs non-members |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row["requests_per_text"] == 0:  # the blind baseline: no model at all
            method = row["method"]
        else:
            method = f"`{row['method']}`" + ("" if row["text_only"] else " (log-probs, white-box)")
        auc = f"{row['auc']:.3f}" + (f" [{row['auc_ci'][0]:.3f}, {row['auc_ci'][1]:.3f}]" if row["auc_ci"] else "")
        tpr = "-" if row["tpr_at_5_fpr"] is None else f"{row['tpr_at_5_fpr']:.2f}"
        requests = "endpoint-dependent" if row["requests_per_text"] is None else f"{row['requests_per_text']:.0f}"
        tokens = "-" if row["tokens_per_text"] is None else f"{row['tokens_per_text']:.0f}"
        out.append(f"| {method} | {row['canary']} | {auc} | {tpr} | {requests} | {tokens} | {_comparison(row)} |")
    best, ts_p = last["best_text_only_auc_gsm8k_dup16"], last["ts_guessing_p_aqua_dup8"]
    settings = ", ".join(f"{k} {v}" for k, v in last["settings"].items())
    out += ["", f"Summary line: `best_text_only_auc_gsm8k_dup16` {figure(best)}, "
            f"`ts_guessing_p_aqua_dup8` {figure(ts_p)} ({settings})."]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--canaries", default=",".join(CANARIES), help="comma-separated, from " + ", ".join(CANARIES))
    parser.add_argument("--n", type=int, default=100, help="members and as many non-members per canary")
    parser.add_argument("--samia-samples", type=int, default=10, help="SaMIA samples per text (paper: 10)")
    parser.add_argument("--cdd-samples", type=int, default=20, help="CDD samples per text (paper: 50; fewer on CPU)")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--out-dir", default="runs/text_only_study")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--json", action="store_true", help="one JSON line per (method, canary), then the summary")
    args = parser.parse_args()
    rows = [row for name in args.canaries.split(",") for row in run_canary(name.strip(), args)]
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    text_only = [r for r in rows if r["text_only"] and r["canary"] == "gsm8k-dup16"]
    ts = [r for r in rows if r["method"] == "ts_guessing" and r["canary"] == "aqua-dup8"]
    summary = {"best_text_only_auc_gsm8k_dup16": max((r["auc"] for r in text_only), default=None),
               "ts_guessing_p_aqua_dup8": ts[0]["p_value"] if ts else None,
               "settings": {"n_per_class": args.n, "samia_samples": args.samia_samples, "cdd_samples": args.cdd_samples,
                            "n_boot": args.n_boot}}
    (Path(args.out_dir) / "study.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    for row in rows:
        print(json.dumps(row) if args.json else f"{row['canary']:12} {row['method']:18} AUC {row['auc']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
