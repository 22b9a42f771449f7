"""The canary's version of the Japanese-newspaper study (Ishihara & Takahashi 2024).

Trains (or reuses) canaries at several duplication levels (``--dups``) and two model sizes
(``--sizes``), then on each runs the two audits the study reports:

* ``bbmia memorize``: greedy continuation of the first L tokens, eidetic / approximate
  memorization of the next R tokens, their AUC as membership scores (their Tables 1 and 2);
* ``bbmia eval --truncate-tokens``: AUC of loss, Min-K% (k = 20, the default) and Min-K% k = 10
  on the first L tokens of each text (their Table 4).

Everything goes through the command line, as a user would run it, and is resumable: trained
canaries are reused from the cache, ``memorize`` and ``eval`` resume their rows. Writes
``study.md`` (the tables), ``study.json`` and two plots into ``--out-dir``; with ``--json`` prints
one JSON line per canary, then one line with the trends the study found, each checked
(``true``/``false``) on these canaries.

Usage:
    python -m studies.memorization_study --json                # all dups, two sizes (long, CPU)
    python -m studies.memorization_study --dups 1,8 --sizes small --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the file backend

from studies.bbmia_json import bbmia
from studies.table_format import figure, num

# model shapes: (layers, embedding width, heads); "small" is the default canary's shape
SIZES = {"small": (2, 128, 4), "large": (4, 256, 4)}
SCORERS = ("loss", "min_k", "min_k:k=10")
MEASURES = ("eidetic", "approximate")


def run_canary(size: str, dup: int, args: argparse.Namespace) -> dict:
    """Train (or reuse) one canary and run both audits on it; one summary row."""
    layers, width, heads = SIZES[size]
    cache = ("--cache-dir", args.cache_dir) if args.cache_dir else ()
    trained = bbmia(
        "canary", "train", "--quiet", *cache, "--dup", str(dup), "--n-members", str(args.n_members),
        "--n-nonmembers", str(args.n_nonmembers), "--n-background", str(args.n_background),
        "--n-layer", str(layers), "--n-embd", str(width), "--n-head", str(heads),
    )
    model = trained["path"]
    out = Path(args.out_dir) / f"{size}-dup{dup}"
    memorized = bbmia(
        "memorize", f"canary:{model}", "--local", model, *cache, "--prompt-lengths", args.prompt_lengths,
        "--reference-tokens", str(args.reference_tokens), "--out", str(out / "memorize"),
    )
    evaluated = bbmia(
        "eval", f"canary:{model}", "--local", model, *cache, "--scorers", ",".join(SCORERS),
        "--truncate-tokens", args.truncate_tokens, "--out", str(out / "eval"), "--quiet",
    )
    by_label = memorized["by_label"]
    return {
        "size": size,
        "dup": dup,
        "model": model,
        "train_seconds": trained["train_seconds"],
        "memorization": {
            label: {length: {m: stats[m]["mean"] for m in MEASURES} for length, stats in per_length.items()}
            for label, per_length in by_label.items()
        },
        "memorization_auc": memorized["auc"],
        "memorization_auc_ci": memorized["auc_ci"],
        "auc": evaluated["auc"],
        "auc_ci": evaluated["auc_ci"],
        "auc_by_length": evaluated["prompt_length"]["auc"],
    }


def rising(values: list[float | None]) -> bool:
    """Whether the last value exceeds the first (the study's trends are about the ends, not
    every step: small canaries are noisy)."""
    known = [v for v in values if v is not None]
    return len(known) >= 2 and known[-1] > known[0]


def trends(rows: list[dict], sizes: list[str]) -> dict:
    """The study's findings, each checked on these canaries (per model size)."""
    out: dict = {}
    for size in sizes:
        mine = sorted((r for r in rows if r["size"] == size), key=lambda r: r["dup"])
        out[size] = {
            "memorization_auc_rises_with_dup": rising([r["memorization_auc"]["eidetic"] for r in mine]),
            "member_eidetic_rises_with_dup": rising([_mean_member_eidetic(r) for r in mine]),
            "min_k_auc_rises_with_dup": rising([r["auc"]["min_k"] for r in mine]),
            "auc_rises_with_prompt_length": all(rising(_by_length(r, "min_k")) for r in mine),
            "k10_beats_k20": sum(r["auc"]["min_k:k=10"] > r["auc"]["min_k"] for r in mine) / max(1, len(mine)),
        }
    by_dup = {}
    for dup in sorted({r["dup"] for r in rows}):
        pair = {r["size"]: r for r in rows if r["dup"] == dup}
        if len(pair) == 2:
            small, large = (pair[s] for s in sizes)
            by_dup[dup] = large["auc"]["min_k"] > small["auc"]["min_k"]
    out["larger_model_higher_min_k_auc"] = by_dup
    return out


def _by_length(row: dict, scorer: str) -> list[float | None]:
    """The scorer's AUC at each prompt length, shortest first (JSON keys are strings)."""
    by = row["auc_by_length"][scorer]
    return [by[n] for n in sorted(by, key=int)]


def _mean_member_eidetic(row: dict) -> float | None:
    member = row["memorization"].get("member")
    if not member:
        return None
    values = [stats["eidetic"] for stats in member.values()]
    return sum(values) / len(values)


def tables(rows: list[dict], lengths: list[str]) -> str:
    """The study's tables, on canaries: per (size, dup) row, memorization and AUCs; then Min-K%'s
    AUC at each prompt length of ``lengths`` (tokens, as strings)."""
    lines = [
        ("| size | dup | eidetic member / non-member (chars, mean over L) | approximate member / non-member "
         "| memorization AUC eidetic | approximate | AUC loss | min_k (k=20) | min_k k=10 |"),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        def mean(label: str, measure: str, mem: dict = r["memorization"]) -> str:
            per = mem.get(label) or {}
            values = [s[measure] for s in per.values()]
            return f"{sum(values) / len(values):.3f}" if values else "-"

        auc = r["auc"]
        mauc = r["memorization_auc"]
        lines.append(
            f"| {r['size']} | {r['dup']} | {mean('member', 'eidetic')} / {mean('non-member', 'eidetic')} "
            f"| {mean('member', 'approximate')} / {mean('non-member', 'approximate')} "
            f"| {num(mauc['eidetic'])} | {num(mauc['approximate'])} "
            f"| {num(auc['loss'])} | {num(auc['min_k'])} | {num(auc['min_k:k=10'])} |"
        )
    lines += ["", "AUC of Min-K% (k = 20) on the first L tokens (the study's Table 4):", "",
              "| size | dup | " + " | ".join(f"L={n}" for n in lengths) + " |",
              "| --- | --- | " + " | ".join("---" for _ in lengths) + " |"]
    for r in rows:
        by = r["auc_by_length"]["min_k"]
        lines.append(f"| {r['size']} | {r['dup']} | " + " | ".join(num(by.get(n)) for n in lengths) + " |")
    return "\n".join(lines) + "\n"


def markdown(lines: list[dict]) -> str:
    """The docs' tables (docs/memorization.md) from this study's ``--json`` lines (one per canary,
    the trends last): :func:`tables`, then the trends as checked.

    Raises:
        ValueError: ``lines`` holds no trends line last.
    """
    *rows, last = lines
    if "trends" not in last:
        raise ValueError("the last line is not the study's trends")
    lengths = sorted({n for r in rows for n in r["auc_by_length"]["min_k"]}, key=int)
    found = last["trends"]
    checked = [f"{size}: " + ", ".join(f"`{k}` {figure(v)}" for k, v in found[size].items())
               for size in found if size != "larger_model_higher_min_k_auc"]
    larger = ", ".join(f"dup {d}: {figure(v)}" for d, v in found["larger_model_higher_min_k_auc"].items())
    return (tables(rows, lengths) + "\nTrends as checked on these canaries (last line): " + "; ".join(checked)
            + f"; `larger_model_higher_min_k_auc` {larger}.\n")


def plot(rows: list[dict], sizes: list[str], lengths: list[str], out_dir: Path) -> list[str]:
    """AUC vs dup (per size and scorer) and AUC vs prompt length (per canary)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for size in sizes:
        mine = sorted((r for r in rows if r["size"] == size), key=lambda r: r["dup"])
        for name in ("min_k", "memorization eidetic"):
            values = [r["memorization_auc"]["eidetic"] if name.startswith("mem") else r["auc"][name] for r in mine]
            ax.plot([r["dup"] for r in mine], values, marker="o", label=f"{size}: {name}")
    ax.set(xscale="log", xlabel="copies of each member (dup)", ylabel="AUC", title="Detection and memorization vs dup")
    ax.legend(fontsize=7)
    by_dup = out_dir / "auc_vs_dup.png"
    fig.tight_layout()
    fig.savefig(by_dup, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        by = r["auc_by_length"]["min_k"]
        ax.plot([int(n) for n in lengths], [by.get(n) for n in lengths], marker="o", label=f"{r['size']} dup {r['dup']}")
    ax.set(xscale="log", xlabel="prompt length L (tokens)", ylabel="Min-K% AUC", title="Min-K% AUC vs prompt length")
    ax.legend(fontsize=7)
    by_length = out_dir / "auc_vs_prompt_length.png"
    fig.tight_layout()
    fig.savefig(by_length, dpi=120)
    plt.close(fig)
    return [str(by_dup), str(by_length)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dups", default="1,2,4,8,16", help="duplication levels (comma-separated)")
    parser.add_argument("--sizes", default="small,large", help=f"model sizes among {', '.join(SIZES)}")
    parser.add_argument("--n-members", type=int, default=100)
    parser.add_argument("--n-nonmembers", type=int, default=100)
    parser.add_argument("--n-background", type=int, default=1000)
    parser.add_argument("--prompt-lengths", default="16,32,64", help="memorize: prompt lengths (tokens)")
    parser.add_argument("--reference-tokens", type=int, default=32, help="memorize: reference length (tokens)")
    parser.add_argument("--truncate-tokens", default="8,16,32,64", help="eval: prompt lengths of the ablation")
    parser.add_argument("--out-dir", default="runs/memorization-study")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--json", action="store_true", help="one JSON line per canary, then the trends")
    args = parser.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"unknown size(s) {unknown}: choose among {', '.join(SIZES)}")
    dups = [int(d) for d in args.dups.split(",")]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in sizes:
        for dup in dups:
            row = run_canary(size, dup, args)
            rows.append(row)
            if args.json:
                print(json.dumps(row, sort_keys=True), flush=True)
    lengths = [n for n in args.truncate_tokens.split(",") if n]
    found = trends(rows, sizes)
    (out_dir / "study.md").write_text(tables(rows, lengths), encoding="utf-8")
    (out_dir / "study.json").write_text(json.dumps({"rows": rows, "trends": found}, indent=2), encoding="utf-8")
    plots = plot(rows, sizes, lengths, out_dir)
    if args.json:
        print(json.dumps({"trends": found, "table": str(out_dir / "study.md"), "plots": plots}, sort_keys=True))
    else:
        print(tables(rows, lengths))


if __name__ == "__main__":
    main()
