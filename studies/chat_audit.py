"""Does a contamination sweep through a chat template recover the planted fraction? (issue 14)

The chat canary (``CanaryConfig.chat_share``: members planted as raw text, chat fine-tuning on
background items only, ChatML saved as its ``chat_template``; :mod:`blackbox_mia.canary.chat`) is
trained or reused, served by ``bbmia serve --chat-template model`` (the model's own template
applied to every chat request, as a chat model's server does), and audited as a chat-only model:
``--endpoint chat --chat-template continuation --allow-chat-conditional``. From the canary's
labelled items (seeded): ``--calibration`` members and as many non-members calibrate (scored
through the same endpoint and template), and a disjoint swept set of ``--members`` members and
``--nonmembers`` non-members, whose planted fraction is known, is swept (no control: the
calibration's non-members set the threshold). The tracker's context (``--context-tokens``) is
the one the chat examples were cut with (the manifest's ``chat.context_tokens``: 32), so every
prefix is sent as the chat fine-tuning showed it.

Also: the same sweep on the local model (white-box, the raw texts); the AUCs of ``loss`` and
``min_k`` over every labelled item of the canary (200 members, 200 non-members), through the
template (the sweep's answers from the cache, the rest requested) and locally; and, on those
scores, the sweep's estimate on ``--splits`` further seeded splits of the same sizes
(``chat_splits`` / ``local_splits``: share identifiable, coverage, mean interval width and
estimate), so that one split's luck is not the whole answer.

Prints one JSON line (``--json``) with ``chat_auc`` (the sweep's scorer through the template),
``chat_auc_loss``, ``local_auc``, ``local_auc_loss``, ``planted_fraction`` (of the swept items
kept), ``estimate``, ``ci_low``, ``ci_high``, ``covers`` (identifiable and the interval holds the planted fraction),
``identifiable``, ``lower_bound`` (and ``lower_bound_holds``), ``tpr``, ``realised_fpr`` (also
as ``fpr`` for one release), ``requests`` (chat requests sent, the probe's included; a rerun on
the same ``--work`` pays 0), ``seconds`` (wall clock of the whole script), and the local sweep's ``local_estimate`` /
``local_ci``.

Texts whose tokens the chat endpoint resolves only by bounds (a prefix that ends inside a UTF-8
character cannot be sent as text, and no grammar spells it on this server) have no usable score:
the sweep drops them from the calibration and the swept items alike (``drop_unscored``) and
counts them (``roles``, ``chat_unscored_items``); the planted fraction is that of the swept items
kept. The figures: docs/generated/chat_audit.md, by ``python scripts/docs_figures.py --only
chat_audit``; the chat-share settings tried: records/canaries.md.

Usage:
    OMP_NUM_THREADS=1 nice -n 10 python -m studies.chat_audit --json
    python -m studies.chat_audit --canary cache/canary/HASH --calibration 40 --members 20 --nonmembers 60 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.validate_blackbox import wait_ready
from blackbox_mia.audits import SweepConfig, prepare_sweep, run_sweep
from blackbox_mia.canary import CanaryConfig, canary_items, ensure_canary, load_manifest
from blackbox_mia.cli.common import TargetOptions, build_backends, close_all
from blackbox_mia.spend.plan import TOTAL, usage_report
from blackbox_mia.evaluation import estimate_prevalence
from blackbox_mia.evaluation.metrics import auc
from blackbox_mia.runner import score_items
from blackbox_mia.scorers import parse_scorer
from studies.table_format import figure, num

CHAT_SHARE = 6.0  # the default chat canary: six chat examples per background item (see canary/chat.py)
SERVED_NAME = "chat-canary"
# The threshold's FPR: at the chat canary's signal (Min-K% AUC 0.73 through the template) 0.05 leaves
# the sweep identifiable in 39% of seeded 100 + 100 / 50 + 100 splits of white-box chat values, 0.1 in 75%
# (power only: the estimate and its coverage were not looked at to choose it).
TARGET_FPR = 0.1


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_jsonl(path: Path, items, labelled: bool) -> None:
    with path.open("w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps({"id": it.id, "text": it.text, **({"label": it.label} if labelled else {})}) + "\n")


def split(items, n_cal: int, n_members: int, n_nonmembers: int, seed: int):
    """Seeded disjoint calibration (n_cal of each label) and swept (n_members + n_nonmembers) items."""
    rng = np.random.default_rng(seed)
    members = [items[i] for i in rng.permutation([i for i, it in enumerate(items) if it.label == 1])]
    nonmembers = [items[i] for i in rng.permutation([i for i, it in enumerate(items) if it.label == 0])]
    if n_cal + n_members > len(members) or n_cal + n_nonmembers > len(nonmembers):
        raise SystemExit(f"the canary has {len(members)} members and {len(nonmembers)} non-members: too few")
    calibration = members[:n_cal] + nonmembers[:n_cal]
    swept = members[n_cal:n_cal + n_members] + nonmembers[n_cal:n_cal + n_nonmembers]
    return calibration, swept


def sweep(plan, options: TargetOptions, out: Path, items) -> dict:
    """Run the sweep, then score every labelled item of the canary (``items``) with loss, min_k
    and the sweep's scorer on the same backend (the audited ones' answers from its cache); the
    sweep's summary, the AUCs, the sweep scorer's score by item id, and the requests."""
    scorers = [parse_scorer(spec) for spec in dict.fromkeys(("loss", "min_k", plan.config.scorer))]
    backends = build_backends(options, scorers)
    try:
        summary = run_sweep(plan, backends, out, progress=False, yes=True).summary  # its own server
        rows = score_items(items, scorers, backends, progress=False)
        usage = usage_report(backends)
    finally:
        close_all(backends)
    aucs = {s.label: auc([it.label for it, r in zip(items, rows) if r.scores[s.label] is not None],
                         [r.scores[s.label] for r in rows if r.scores[s.label] is not None]) for s in scorers}
    scores = {it.id: r.scores[plan.scorer.label] for it, r in zip(items, rows)}
    return {"summary": summary, "auc": aucs, "scores": scores, "unscored": sum(s is None for s in scores.values()),
            "requests": None if usage is None else usage[TOTAL]["requests"]}


def split_study(scores: dict, items, args) -> dict:
    """The sweep's estimate (:func:`estimate_prevalence`, as ``bbmia sweep`` runs it) on
    ``args.splits`` seeded splits (seeds 1, 2, ...) of the same sizes, on the scores of every
    labelled item: share identifiable, coverage of the identifiable intervals, their mean width
    and estimate. Items without a usable score (None) are dropped from the calibration and the
    swept items alike, as ``bbmia sweep --drop-unscored`` drops them; the truth is the member
    fraction of the swept items kept."""
    identifiable, covered, widths, estimates = 0, 0, [], []
    for seed in range(1, args.splits + 1):
        calibration, swept = split(items, args.calibration, args.members, args.nonmembers, seed)
        calibration = [it for it in calibration if scores[it.id] is not None]
        swept = [it for it in swept if scores[it.id] is not None]
        truth = sum(it.label for it in swept) / len(swept)
        member = [scores[it.id] for it in calibration if it.label == 1]
        nonmember = [scores[it.id] for it in calibration if it.label == 0]
        result = estimate_prevalence(np.array([scores[it.id] for it in swept]), np.array(nonmember),
                                     np.array(member), target_fpr=args.target_fpr)
        if result["identifiable"]:
            identifiable += 1
            low, high = result["ci"]
            covered += low <= truth <= high
            widths.append(high - low)
            estimates.append(result["estimate"])
    return {"splits": args.splits, "identifiable": identifiable / args.splits,
            "coverage": covered / identifiable if identifiable else None,
            "mean_ci_width": float(np.mean(widths)) if widths else None,
            "mean_estimate": float(np.mean(estimates)) if estimates else None}


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/blackbox-overview.md, "Chat-only models") from this study's ``--json``
    line: AUCs through the template and locally, the audited split's sweep through the chat
    endpoint and locally, the texts dropped for want of a usable score, the further splits.

    Raises:
        ValueError: no study line.
    """
    if not lines or "chat_auc" not in lines[-1]:
        raise ValueError("the last line is not the study's result")
    r = lines[-1]
    dropped = r["roles"]["dropped_unscored"]
    chat_ci = None if r["ci_low"] is None else [r["ci_low"], r["ci_high"]]

    def estimate(value: float | None, ci: list[float] | None) -> str:
        return "not identifiable" if ci is None else f"{figure(value)} [{ci[0]:.3f}, {ci[1]:.3f}]"

    def splits(s: dict) -> str:
        return (f"identifiable in {s['identifiable']:.0%} of {s['splits']}, coverage {figure(s['coverage'])}, "
                f"mean width {figure(s['mean_ci_width'])}, mean estimate {figure(s['mean_estimate'])}")

    n = r["n_auc_items"]
    rows = [
        ("AUC over the canary's labelled items (Min-K% / loss; items scored)",
         f"{num(r['chat_auc_min_k'])} / {num(r['chat_auc_loss'])} ({n - r['chat_unscored_items']} of {n})",
         f"{num(r['local_auc_min_k'])} / {num(r['local_auc_loss'])} ({n - r['local_unscored_items']} of {n})"),
        (f"the audited split's sweep ({r['scorer']}, target FPR {r['target_fpr']:g}): estimate [95% CI]",
         f"{estimate(r['estimate'], chat_ci)}; planted {num(r['planted_fraction'])}, covered: {figure(r['covers'])}",
         estimate(r["local_estimate"], r["local_ci"])),
        ("texts dropped for want of a usable score (swept / calibration)",
         f"{dropped.get('benchmark', 0)} / {dropped.get('calibration', 0)}", "0 / 0"),
        ("further seeded splits of the same sizes", splits(r["chat_splits"]), splits(r["local_splits"])),
    ]
    out = ["| | through the chat template | locally (white-box) |", "| --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canary", type=Path, help="a trained chat canary (default: train or reuse the default "
                        "configuration with --chat-share)")
    parser.add_argument("--chat-share", type=float, default=CHAT_SHARE)
    parser.add_argument("--calibration", type=int, default=100, help="calibration members and as many non-members")
    parser.add_argument("--members", type=int, default=50, help="swept members")
    parser.add_argument("--nonmembers", type=int, default=100, help="swept non-members")
    parser.add_argument("--scorer", default="min_k")
    parser.add_argument("--target-fpr", type=float, default=TARGET_FPR)
    parser.add_argument("--seed", type=int, default=0, help="seed of the audited split")
    parser.add_argument("--splits", type=int, default=200, help="further seeded splits for the coverage study")
    parser.add_argument("--port", type=int, default=8766, help="fixed, so that a rerun reuses the response cache")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--work", type=Path, default=Path("runs/chat_audit"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()

    canary = args.canary or ensure_canary(CanaryConfig(chat_share=args.chat_share), progress=False, log=log)
    canary = canary.resolve()
    manifest = load_manifest(canary)
    if "chat" not in manifest:
        raise SystemExit(f"{canary} is not a chat canary (trained with chat_share 0)")
    labelled = canary_items(canary)
    calibration, swept = split(labelled, args.calibration, args.members, args.nonmembers, args.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    cal_path, swept_path = args.work / "calibration.jsonl", args.work / "swept.jsonl"
    write_jsonl(cal_path, calibration, labelled=True)
    write_jsonl(swept_path, swept, labelled=False)
    config = SweepConfig(dataset=str(swept_path), scorer=args.scorer, calibration=str(cal_path), control=False,
                         target_fpr=args.target_fpr, drop_unscored=True)
    plan = prepare_sweep(config, target_model=canary)  # the manifest gives the report its planted fraction

    log(f"local sweep of {len(swept)} items ({args.members} members), calibration {len(calibration)}")
    local = sweep(plan, TargetOptions(local=str(canary), device="cpu", threads=1), args.work / "sweep-local", labelled)

    context = manifest["chat"]["context_tokens"]  # the windows its chat examples were cut as
    url = f"http://127.0.0.1:{args.port}/v1"
    bbmia = str(Path(sys.executable).with_name("bbmia"))
    serve = [bbmia, "serve", str(canary), "--served-name", SERVED_NAME, "--port", str(args.port),
             "--chat-template", "model", "--threads", "1", "--device", "cpu"]
    server = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    os.environ.setdefault("OPENAI_API_KEY", "none")
    try:
        wait_ready(url)
        log(f"chat sweep through {url} (ChatML, continuation messages, context {context} tokens)")
        options = TargetOptions(base_url=url, model=SERVED_NAME, tokenizer=str(canary), endpoint="chat",
                                chat_template="continuation", allow_chat_conditional=True, context=context,
                                concurrency=args.concurrency, cache_dir=args.work / "cache")
        chat = sweep(plan, options, args.work / "sweep-chat", labelled)
    finally:
        server.terminate()
        server.wait(30)

    summary = chat["summary"]
    prevalence = summary["prevalence"]
    ci = prevalence["ci"]
    planted = summary["planted"]  # the member fraction of the swept items kept (the manifest's truth)
    covers = bool(summary["identifiable"] and ci is not None and ci[0] <= planted <= ci[1])
    line = {
        "canary": str(canary), "chat_share": manifest["config"]["chat_share"],
        "chat_auc": chat["auc"][plan.scorer.label],
        "chat_auc_loss": chat["auc"]["loss"], "chat_auc_min_k": chat["auc"]["min_k"],
        "local_auc": local["auc"][plan.scorer.label],
        "local_auc_loss": local["auc"]["loss"], "local_auc_min_k": local["auc"]["min_k"],
        "n_auc_items": len(labelled), "scorer": args.scorer, "target_fpr": args.target_fpr,
        "planted_fraction": planted,
        "estimate": prevalence["estimate"], "ci_low": None if ci is None else ci[0],
        "ci_high": None if ci is None else ci[1], "covers": covers, "identifiable": summary["identifiable"],
        "lower_bound": prevalence["lower_bound"], "lower_bound_holds": prevalence["lower_bound"] <= planted,
        "tpr": summary["tpr"], "realised_fpr": summary["realised_fpr"], "fpr": summary["realised_fpr"], "tpr_minus_fpr_lower": summary["tpr_minus_fpr_lower"],
        "roles": summary["roles"], "context_tokens": context,
        "chat_unscored_items": chat["unscored"], "local_unscored_items": local["unscored"],
        "local_estimate": local["summary"]["prevalence"]["estimate"], "local_ci": local["summary"]["prevalence"]["ci"],
        "local_identifiable": local["summary"]["identifiable"],
        "chat_splits": split_study(chat["scores"], labelled, args),
        "local_splits": split_study(local["scores"], labelled, args),
        "requests": chat["requests"], "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(line) if args.json else json.dumps(line, indent=1), flush=True)


if __name__ == "__main__":
    main()
