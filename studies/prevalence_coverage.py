"""Does the sweep's interval cover the truth on held-out data? (issue 11, docs/design.md §5)

For each trained GSM8K canary in ``cache/canary/`` with the default architecture (one per dup
level, the one with most members; or the ``--canary`` directories given), the 1,319 GSM8K test
problems and their number-perturbed control (:mod:`blackbox_mia.controls`) are scored ONCE with
the local backend (``--scorer``, default ``min_k``), cached and resumable under
``cache/prevalence_coverage/<canary hash>/<scorer>/``. Then, on the cached scores, ``--splits`` random
disjoint splits: half of the canary's members and as many non-members as half its labelled ones
calibrate, and the rest of GSM8K is the swept benchmark, whose true member fraction the
manifest gives. The calibration non-members are drawn from every GSM8K non-member (``--pool
all``, the default: coverage over calibration draws, as the interval claims) or only from the
canary's labelled ones (``--pool labelled``, the issue's first design: the splits then share
one pool of 100–200 non-members, and coverage is conditional on that pool's luck). Each split runs
:func:`~blackbox_mia.evaluation.estimate_prevalence` exactly as ``bbmia sweep`` does.

Prints one JSON line per dup (``--json``) with:

* ``true_prevalence``: members among the swept items (the same in every split);
* ``coverage``: share of the identifiable splits whose 95% CI holds the truth;
  ``mean_estimate``, ``mean_ci_width``, ``share_over_2x`` (estimates above twice the truth),
  all over the identifiable splits; ``share_not_identifiable``;
* ``realised_fpr_mean`` / ``_sd``: the threshold's FPR on the swept non-members (fresh data),
  ``fpr_ci_coverage``: how often its Clopper–Pearson CI holds it;
* ``lower_bound_mean`` and ``lower_bound_coverage`` (bound ≤ truth) with members known, and
  the same with the control as the only non-members (``control_*``, the closed-model path:
  the control of the swept items, TPR unknown), ``control_sources_flagged``: the control's
  contamination (share of control items whose source is above the threshold);
* ``clean``: the clean-benchmark check, the swept items restricted to non-members (true
  prevalence 0): ``lower_bound_positive`` (share of splits whose lower bound is > 0; stated
  error rate 0.05), ``ci_excludes_zero`` (splits whose estimate is confident: its CI misses 0),
  ``control_lower_bound_positive`` (the same with the control as non-members);
* ``share_confident`` (identifiable and the CI excludes 0), ``mean_confident_estimate``,
``share_confident_over_2x`` (over all splits: a confident estimate above twice the truth), and
a last line with ``min_coverage`` (over the dups where at least half the splits are
identifiable), ``max_mean_estimate_ratio`` (same dups), ``max_share_confident_over_2x`` (all dups;
at most the CI's one-sided miss rate 0.025 is expected), ``max_clean_lower_bound_positive``
(members known), ``max_clean_control_lower_bound_positive`` (control only),
``max_clean_ci_excludes_zero``, and whether each target of the issue is met.

Measured: docs/generated/prevalence_coverage.md (the table docs/design.md §5 includes, written from
this study's lines by ``scripts/docs_figures.py --only prevalence_coverage``; about 6 minutes on
2 loaded cores, the control scored once per canary and cached).

Usage:
    OMP_NUM_THREADS=1 nice -n 10 python -m studies.prevalence_coverage --json
    python -m studies.prevalence_coverage --canary cache/canary/6338e872951d --splits 100 --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from blackbox_mia.canary import CanaryConfig, ensure_canary, load_manifest
from blackbox_mia.controls import build_control
from blackbox_mia.canary.dataset import load_items
from blackbox_mia.evaluation import clopper_pearson, estimate_prevalence
from blackbox_mia.runner import run_config, score_items
from blackbox_mia.scorers import parse_scorers
from studies.table_format import figure, num

ARCHITECTURE = ("vocab_size", "n_layer", "n_embd", "n_head", "block_size", "epochs", "lr", "batch_size")
LEVEL = 0.95  # the nominal level of every interval and bound
TARGET_COVERAGE = 0.93
MIN_IDENTIFIABLE = 0.5  # a dup counts for min_coverage when at least this share of splits is identifiable


def study_canaries(cache: Path) -> list[tuple[dict, Path]]:
    """Every complete GSM8K canary in ``cache/canary`` with the default architecture, members
    planted shuffled: ``(manifest, directory)`` in directory order. Reference canaries (nothing
    planted), unlearned and canonical-order ones are left out."""
    default = CanaryConfig()
    found = []
    for manifest_path in sorted(cache.glob("canary/*/manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        config = manifest.get("config", {})
        if (not manifest.get("complete") or "unlearning" in manifest or "reference" in manifest
                or config.get("corpus", "gsm8k") != "gsm8k"
                or config.get("planted_order", "shuffled") != "shuffled"  # canonical order: one planted document
                or any(config.get(key) != getattr(default, key) for key in ARCHITECTURE)):
            continue
        found.append((manifest, manifest_path.parent))
    return found


def default_canaries(cache: Path, seed: int | None = None) -> list[Path]:
    """One canary of :func:`study_canaries` per dup level (most members first, then the lowest
    training seed; ``seed``: only that training seed's)."""
    best: dict[int, tuple[tuple[int, int], Path]] = {}
    for manifest, path in study_canaries(cache):
        if seed is not None and manifest["seed"] != seed:
            continue
        dup, rank = manifest["dup"], (len(manifest["member_ids"]), -manifest["seed"])
        if dup not in best or rank > best[dup][0]:
            best[dup] = (rank, path)
    return [best[dup][1] for dup in sorted(best)]


def cached_scores(canary: Path, scorer_spec: str, cache: Path, with_control: bool = True) -> dict:
    """GSM8K test and control scores under ``canary``, scored once: read back from the JSONL
    files when complete, else scored (resuming them) with the local backend.

    ``scorer_spec`` may name several scorers (``"min_k,loss"``: one model pass for all):
    ``result["benchmark"]`` and ``result["control"]`` hold the first one's scores, shape
    (n_items,) and (n_control,), and ``result["benchmark_columns"]`` /
    ``result["control_columns"]`` every scorer's, by label."""
    labels = [s.label for s in parse_scorers(scorer_spec)]
    out = cache / "prevalence_coverage" / canary.name / "+".join(labels)
    items, meta = load_items("gsm8k")
    control = build_control(items)
    sets = {"benchmark": (items, meta), "control": (control.items, {**meta, "name": "control"})}
    result = {"ids": np.array([it.id for it in items]),
              "control_sources": np.array([it.meta["source_id"] for it in control.items])}
    if not with_control:
        del sets["control"], result["control_sources"]
    for name, (its, m) in sets.items():
        path = out / f"{name}.jsonl"
        done = {}
        if path.is_file():
            done = {row["id"]: row["scores"] for row in map(json.loads, path.read_text().splitlines())}
        if any(it.id not in done for it in its):
            done = {r.id: r.scores for r in score_canary(canary, scorer_spec, its, m, path)}
        columns = {label: np.array([done[it.id][label] for it in its], dtype=np.float64) for label in labels}
        result[name], result[f"{name}_columns"] = columns[labels[0]], columns
    return result


def score_canary(canary: Path, scorer_spec: str, items: list, meta: dict, path: Path) -> list:
    """Score ``items`` under the canary with the local backend (resumable ``path``)."""
    from blackbox_mia.backends.registry import build_backend

    scorers = parse_scorers(scorer_spec)
    backends = {"target": build_backend(f"local:{canary}?device=cpu")}
    return score_items(items, scorers, backends, path, run_config(scorers, backends, meta), progress=False)


def held_out_splits(manifest: dict, ids: np.ndarray, splits: int, seed: int, pool_name: str):
    """Yield ``splits`` seeded ``(calibration members, calibration non-members, swept mask)``:
    index arrays into ``ids`` (half the canary's members; as many non-members as half its
    labelled ones, from ``pool_name``'s pool: see the module docstring) and a boolean mask of
    shape (len(ids),), the rest of the benchmark."""
    member = np.isin(ids, manifest["member_ids"])
    members, labelled_non = np.flatnonzero(member), np.flatnonzero(np.isin(ids, manifest["nonmember_ids"]))
    pool = labelled_non if pool_name == "labelled" else np.flatnonzero(~member)
    rng = np.random.default_rng(seed)
    for _ in range(splits):
        cal_pos = rng.choice(members, len(members) // 2, replace=False)
        cal_neg = rng.choice(pool, len(labelled_non) // 2, replace=False)
        swept = np.ones(len(ids), bool)
        swept[cal_pos] = swept[cal_neg] = False
        yield cal_pos, cal_neg, swept


def run_dup(canary: Path, scores: dict, splits: int, seed: int, target_fpr: float, pool_name: str) -> dict:
    """The coverage line of one canary (see the module docstring)."""
    manifest = load_manifest(canary)
    ids, s = scores["ids"], scores["benchmark"]
    member = np.isin(ids, manifest["member_ids"])
    members, labelled_non = np.flatnonzero(member), np.flatnonzero(np.isin(ids, manifest["nonmember_ids"]))
    by_id = dict(zip(ids, s))
    rows = []
    for cal_pos, cal_neg, swept in held_out_splits(manifest, ids, splits, seed, pool_name):
        truth = float(member[swept].mean())
        est = estimate_prevalence(s[swept], s[cal_neg], s[cal_pos], target_fpr=target_fpr)
        t = est["threshold"]["value"]
        fresh = s[swept & ~member]
        realised = float(np.mean(fresh > t))
        clean = swept & ~member
        est0 = estimate_prevalence(s[clean], s[cal_neg], s[cal_pos], target_fpr=target_fpr)
        row = {"truth": truth, "identifiable": est["identifiable"], "estimate": est["estimate"], "ci": est["ci"],
               "confident": bool(est["identifiable"] and est["detected"]), "clean_detected": bool(est0["detected"]),
               "realised_fpr": realised, "fpr_ci": est["fpr_ci"], "lower_bound": est["lower_bound"]["lower_bound"],
               "clean_lower_bound": est0["lower_bound"]["lower_bound"], "clean_identifiable": est0["identifiable"]}
        for key, keep in (("control", swept), ("clean_control", clean)):
            in_swept = np.isin(scores["control_sources"], ids[keep])
            control_est = estimate_prevalence(s[keep], scores["control"][in_swept], target_fpr=target_fpr)
            row[f"{key}_lower_bound"] = control_est["lower_bound"]["lower_bound"]
            sources = np.array([by_id[i] for i in scores["control_sources"][in_swept]])
            row[f"{key}_sources_flagged"] = float(np.mean(sources > control_est["threshold"]["value"]))
        rows.append(row)
    ok = [r for r in rows if r["identifiable"]]
    truth = rows[0]["truth"]
    clean_ok = [r for r in rows if r["clean_identifiable"]]
    return {
        "dup": manifest["dup"],
        "canary": canary.name,
        "pool": pool_name,
        "n_members_planted": len(members),
        "n_calibration": len(members) // 2 + len(labelled_non) // 2,
        "n_swept": int(len(s) - len(members) // 2 - len(labelled_non) // 2),
        "true_prevalence": truth,
        "splits": splits,
        "coverage": _mean([r["ci"][0] <= r["truth"] <= r["ci"][1] for r in ok]),
        "mean_estimate": _mean([r["estimate"] for r in ok]),
        "mean_ci_width": _mean([r["ci"][1] - r["ci"][0] for r in ok]),
        "share_not_identifiable": 1 - len(ok) / splits,
        "share_over_2x": _mean([r["estimate"] > 2 * r["truth"] for r in ok]),
        "share_confident": _mean([r["confident"] for r in rows]),
        "mean_confident_estimate": _mean([r["estimate"] for r in rows if r["confident"]]),
        "share_confident_over_2x": _mean([r["confident"] and r["estimate"] > 2 * r["truth"] for r in rows]),
        "misses_above": int(sum(r["ci"][0] > r["truth"] for r in ok)),
        "misses_below": int(sum(r["ci"][1] < r["truth"] for r in ok)),
        "realised_fpr_mean": _mean([r["realised_fpr"] for r in rows]),
        "realised_fpr_sd": float(np.std([r["realised_fpr"] for r in rows])),
        "fpr_ci_coverage": _mean([r["fpr_ci"][0] <= r["realised_fpr"] <= r["fpr_ci"][1] for r in rows]),
        "lower_bound_mean": _mean([r["lower_bound"] for r in rows]),
        "lower_bound_coverage": _mean([r["lower_bound"] <= r["truth"] for r in rows]),
        "control_lower_bound_mean": _mean([r["control_lower_bound"] for r in rows]),
        "control_lower_bound_coverage": _mean([r["control_lower_bound"] <= r["truth"] for r in rows]),
        "control_sources_flagged": _mean([r["control_sources_flagged"] for r in rows]),
        "clean": {
            "lower_bound_positive": _mean([r["clean_lower_bound"] > 0 for r in rows]),
            "ci_excludes_zero": _mean([r["clean_detected"] for r in rows]),
            "share_not_identifiable": 1 - len(clean_ok) / splits,
            "control_lower_bound_positive": _mean([r["clean_control_lower_bound"] > 0 for r in rows]),
            "error_rate_stated": round(1 - LEVEL, 10),
            "lower_bound_positive_ci": list(clopper_pearson(int(sum(r["clean_lower_bound"] > 0 for r in rows)), splits)),
        },
    }


def _mean(values) -> float | None:
    """The mean of ``values``; None when there are none."""
    return float(np.mean(values)) if len(values) else None


def summary(lines: list[dict]) -> dict:
    """The last line: the worst dup on each target."""
    counted = [line for line in lines if line["coverage"] is not None and line["share_not_identifiable"] <= MIN_IDENTIFIABLE]
    min_coverage = min((line["coverage"] for line in counted), default=None)
    ratios = [line["mean_estimate"] / line["true_prevalence"] for line in counted]
    over = max(line["share_confident_over_2x"] for line in lines)
    clean = max(line["clean"]["lower_bound_positive"] for line in lines)
    clean_control = max(line["clean"]["control_lower_bound_positive"] for line in lines)
    clean_detected = max(line["clean"]["ci_excludes_zero"] for line in lines)
    return {
        "min_coverage": min_coverage,
        "coverage_dups": [line["dup"] for line in counted],
        "max_mean_estimate_ratio": max(ratios, default=None),
        "max_share_confident_over_2x": over,
        "max_clean_lower_bound_positive": clean,
        "max_clean_control_lower_bound_positive": clean_control,
        "max_clean_ci_excludes_zero": clean_detected,
        "target_coverage_met": min_coverage is not None and min_coverage >= TARGET_COVERAGE,
        "target_no_2x_met": all(ratio <= 2 for ratio in ratios) and over <= (1 - LEVEL) / 2,
        "target_clean_met": max(clean, clean_control) <= 1 - LEVEL,
    }


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/design.md §5) from this study's ``--json`` lines (one per dup, the
    summary last): per dup, the truth, identifiability, coverage, mean estimate and width, the
    confident estimates, the realised FPR and the clean-benchmark checks; then the summary.

    Raises:
        ValueError: ``lines`` holds no summary line last.
    """
    *rows, last = lines
    if "min_coverage" not in last:
        raise ValueError("the last line is not the study's summary")
    out = ["| dup (members) | truth | not identifiable | coverage (identifiable splits) | mean estimate | "
           "mean CI width | confident | confident > 2× truth | realised FPR (mean) | clean: lower bound > 0 | "
           "clean: CI excludes 0 |", "| --- |" + " --- |" * 10]
    for r in sorted(rows, key=lambda r: r["dup"]):
        identifiable = round(r["splits"] * (1 - r["share_not_identifiable"]))
        coverage = "-" if r["coverage"] is None else f"{r['coverage']:.3f} ({identifiable} of {r['splits']})"
        out.append(f"| {r['dup']} ({r['n_members_planted']}) | {num(r['true_prevalence'])} | "
                   f"{num(r['share_not_identifiable'])} | {coverage} | {num(r['mean_estimate'])} | "
                   f"{num(r['mean_ci_width'])} | {num(r['share_confident'])} | {num(r['share_confident_over_2x'])} | "
                   f"{num(r['realised_fpr_mean'])} | {num(r['clean']['lower_bound_positive'])} | "
                   f"{num(r['clean']['ci_excludes_zero'])} |")
    figures = ", ".join(f"`{k}` {figure(v)}" for k, v in last.items() if isinstance(v, (bool, float, int)) or v is None)
    return "\n".join(out) + f"\n\nSummary line: {figures}.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--canary", action="append", type=Path, help="canary directory (repeatable; default: "
                        "one per dup level from CACHE/canary with the default architecture; none there: the "
                        "default canary, trained once)")
    parser.add_argument("--cache", type=Path, default=Path("cache"), help="cache root (default: cache)")
    parser.add_argument("--scorer", default="min_k")
    parser.add_argument("--splits", type=int, default=300)
    parser.add_argument("--target-fpr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool", choices=("all", "labelled"), default="all", help="where the calibration non-members "
                        "are drawn from: every GSM8K non-member (default) or only the canary's labelled ones")
    parser.add_argument("--json", action="store_true", help="one JSON line per dup, then the summary line")
    args = parser.parse_args()
    canaries = args.canary or default_canaries(args.cache)
    if not canaries:  # a clean checkout: the default canary (dup 8), trained once and cached
        canaries = [ensure_canary(CanaryConfig(), progress=not args.json, cache=args.cache)]
    lines = []
    for canary in canaries:
        scores = cached_scores(canary, args.scorer, args.cache)
        line = run_dup(canary, scores, args.splits, args.seed, args.target_fpr, args.pool)
        lines.append(line)
        print(json.dumps(line) if args.json else
              f"dup {line['dup']:>2}: truth {line['true_prevalence']:.3f}, coverage {line['coverage']}, "
              f"mean estimate {line['mean_estimate']}, not identifiable {line['share_not_identifiable']:.2f}", flush=True)
    print(json.dumps(summary(lines)) if args.json else summary(lines))


if __name__ == "__main__":
    main()
