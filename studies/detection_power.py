"""How often does each dataset-level test say "contaminated" when it is, and when it is not? (issue 29)

For each trained GSM8K canary with the default architecture (every dup and training seed, as
:func:`studies.prevalence_coverage.study_canaries` lists them; or the ``--canary`` directories
given), the 1,319 GSM8K test problems are scored ONCE with every scorer of ``--features`` (one
model pass, cached under ``cache/prevalence_coverage/<canary>/<labels>/``, resumable; the first
scorer, ``min_k``, is the sweep's), and (issue 43, unless ``--no-extra``) with ``ref`` against
the mean of the reference canaries (``bbmia canary train --reference-of``; every one in the
cache), ``one_ref`` against the canary's own seed's alone, ReCaLL and DC-PDD
(:mod:`studies.detection_features`): the headline test then runs on each feature set (today's
features; + ``one_ref``; + ``ref``; ``ref`` alone; + ``recall``, ``dc_pdd``; all), and an
oracle with the densities of one feature known gives the power no test on that feature exceeds
(the information limit). Then, on the same held-out splits as
``prevalence_coverage.py`` (:func:`studies.prevalence_coverage.held_out_splits`: half the
canary's members and 100 GSM8K non-members calibrate, the rest is swept), each test decides at
alpha = 0.05 whether the swept items hold members (power), and whether the swept items with
their members removed do (the clean benchmark: false alarms; ``--clean-splits`` splits, the first
``--splits`` of them the power splits):

* ``tail_combined`` (the sweep's headline with ``--features`` and members known): the tail test
  of :mod:`blackbox_mia.evaluation.detection` on the features combined by a logistic regression of
  the calibration members against the pooled swept + reference items;
* ``tail``: the tail test on ``min_k`` alone (the headline without features or members);
* ``max_reference``: the count of swept items above the largest reference score (exact);
* ``fisher_pooled_95``: a Fisher (hypergeometric) test of the share above the pooled sample's
  95th percentile (exact);
* ``welch``: the one-sided Welch t-test of ``min_k`` (today's ``dataset_test``; asymptotic);
* ``dataset_inference``: Maini et al. 2024 on every feature (asymptotic), with its
  two-validation-halves false-positive check (``check_false_alarm``: the check's own rejection rate);
* ``interval``: today's prevalence interval excludes 0 (and ``coverage``: its 95% CI holds
  the truth, over the identifiable splits).

Prints one JSON line per (canary, test) with ``power`` and ``clean_false_alarm``, each with its
Clopper–Pearson 95% CI (``tail_combined+<set>``: a feature set; ``oracle``: power only), then a
last line: ``power_dup8`` / ``power_dup16`` (the headline test, lowest training seed),
``power_dup1_ref`` ... ``power_dup8_ref`` (with ``ref``, the lowest over the training seeds),
``max_clean_false_alarm`` (every feature set, over the canaries) with its CI and
``max_exact_clean_false_alarm`` (the headline's exact level at the clean sizes, computed:
:func:`exact_size`), ``min_coverage`` (the
interval, over dups identifiable in at least half the splits), ``exchangeability_p_canonical``
and ``exchangeability_false_alarm`` (null without ``--canonical-canary``), and whether each
target is met. Measured: docs/generated/detection_power.md (the tables docs/contamination.md
includes, written from this study's lines by ``scripts/docs_figures.py --only detection_power``;
one run of about 26 minutes on a loaded 2-core machine with the scores cached).

The exchangeability test (Oren et al. 2024, ``bbmia exchangeability``; defaults 50 shards × 250
shuffled orders) runs on each canary's 200 members in GSM8K file order, for ``--xchg-seeds``
seeds of the shuffled orders, and (the exact null) as many "shufflings": the members shuffled
within their shards, that order taken as the canonical one. Every distinct shard text is scored
once (cached under ``cache/prevalence_coverage/<canary>/exchangeability/``); shards of 4 items
have 24 orders, so every seed reuses them. One line per canary (``test`` exchangeability):
the largest and median p over the seeds, the rejection rate at alpha over the seeds and over
the shufflings (Clopper-Pearson CIs). The canaries trained with ``--planted-order canonical``
(``--canonical-canary``, repeatable: several training seeds) give ``exchangeability_p_canonical``
(the largest p over their seeds); the others (shuffled order) ``exchangeability_false_alarm``
(the largest rejection rate, seeds or shufflings). ``--xchg-only`` skips the split tests.
Measured: the same generated tables.

Usage:
    OMP_NUM_THREADS=1 nice -n 10 python -m studies.detection_power --json
    python -m studies.detection_power --xchg-only --canonical-canary cache/canary/25eeca3e5873 --json
    python -m studies.detection_power --canary cache/canary/6338e872951d --splits 100 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from scipy import stats

from blackbox_mia.audits.exchangeability import ExchangeabilityConfig, full_logprobs, plan_shards, shard_logprobs
from blackbox_mia.canary import CanaryConfig, ensure_canary, load_manifest
from blackbox_mia.canary.manifest import canonical_members
from blackbox_mia.datasets import Item
from blackbox_mia.evaluation.exchangeability import exchangeability_test
from blackbox_mia.evaluation import clopper_pearson, dataset_level_test, estimate_prevalence
from blackbox_mia.evaluation.dataset_inference import dataset_inference
from blackbox_mia.evaluation.detection import combined_scores, min_p_value, rank_pvalues, tail_ranks, tail_test

from .detection_features import FEATURE_SETS, TODAY, extra_columns, feature_sets, oracle_power
from .prevalence_coverage import cached_scores, held_out_splits, study_canaries
from .table_format import ci as interval
from .table_format import figure, num

FEATURES = "min_k,loss,zlib,min_k:k=5,min_k:k=10,min_k:k=50,min_k_pp,min_k_pp:k=5,min_k_pp:k=50"
HEADLINE = "tail_combined"
ALPHA = 0.05
POOLED_QUANTILE = 0.95  # threshold of the Fisher test: this quantile of the pooled swept + reference scores
TARGET_POWER = 0.80
MIN_IDENTIFIABLE = 0.5  # a dup counts for min_coverage when at least this share of splits is identifiable
XCHG_TEST = "exchangeability"
ORACLE = "oracle"
POWER_DUPS = (1, 2, 4, 8)  # the summary's power_dup<d>_ref keys
TARGET_REF_POWER = {4: 0.8, 2: 0.5}  # issue 43: with a reference canary, on every training seed


def fisher_pooled(swept: np.ndarray, reference: np.ndarray, quantile: float = POOLED_QUANTILE) -> float:
    """One-sided hypergeometric p-value of the swept share above the pooled ``quantile``: the
    threshold is a function of the pooled sample only, so given it the reference items above it
    are Hypergeometric(N + n, n, K) under exchangeability (Fisher's exact test)."""
    pooled = np.concatenate([swept, reference])
    above = pooled > np.quantile(pooled, quantile)
    k_ref = int(above[len(swept):].sum())
    return float(stats.hypergeom.cdf(k_ref, len(pooled), len(reference), int(above.sum())))


def exact_size(n_swept: int, n_reference: int, alpha: float = ALPHA) -> float:
    """The tail test's exact false-alarm rate at these sizes, P(p ≤ alpha) under exchangeability:
    p = :func:`min_p_value` of the largest attainable statistic (a p_j value) whose p-value is
    ≤ alpha (the p-value rises with the statistic: bisection over the attainable values)."""
    ranks = tail_ranks(n_reference)
    grid = np.repeat(np.arange(n_swept + 1)[:, None], len(ranks), axis=1)
    values = np.unique(rank_pvalues(grid, n_swept, n_reference, ranks))
    lo, hi = -1, len(values) - 1  # invariant: values[lo] rejects (or lo = -1), values[hi + 1:] do not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if min_p_value(values[mid], n_swept, n_reference, ranks) <= alpha else (lo, mid - 1)
    return 0.0 if lo < 0 else min_p_value(values[lo], n_swept, n_reference, ranks)


def split_decisions(s: dict, cal_pos: np.ndarray, cal_neg: np.ndarray, keep: np.ndarray, member: np.ndarray,
                    seed: int) -> dict:
    """Every test's p-value (and the interval's decision) for the swept items ``keep`` (mask)."""
    x, main = s["features"], s["main"]
    n_swept = int(keep.sum())
    comb_swept, comb_ref, _ = combined_scores(x[keep], x[cal_neg], x[cal_pos])
    single = tail_test(main[keep], main[cal_neg])
    di = dataset_inference(x[keep], x[cal_neg], seed=seed)
    est = estimate_prevalence(main[keep], main[cal_neg], main[cal_pos])
    truth = float(member[keep].mean())
    by_set = {}
    for name, xs in s["sets"].items():
        set_swept, set_ref, _ = combined_scores(xs[keep], xs[cal_neg], xs[cal_pos])
        by_set[f"{HEADLINE}+{name}"] = tail_test(set_swept, set_ref)["p_value"]
    return {
        **by_set,
        "tail_combined": tail_test(comb_swept, comb_ref)["p_value"],
        "tail": single["p_value"],
        "max_reference": single["rank_p_values"][1],
        "fisher_pooled_95": fisher_pooled(main[keep], main[cal_neg]),
        "welch": dataset_level_test(main[keep], main[cal_neg])["p_value"],
        "dataset_inference": di["p_value"],
        "di_check": di["false_positive_check"]["p_value"],
        "interval": 0.0 if est["detected"] else 1.0,  # a decision, not a p-value: 0 = the CI excludes 0
        "covered": None if not est["identifiable"] else est["ci"][0] <= truth <= est["ci"][1],
        "truth": truth,
        "n_swept": n_swept,
    }


def run_canary(canary: Path, s: dict, splits: int, clean_splits: int, seed: int) -> list[dict]:
    """One line per test on one canary (see the module docstring)."""
    manifest = load_manifest(canary)
    member = np.isin(s["ids"], manifest["member_ids"])
    power, clean = [], []
    for i, (cal_pos, cal_neg, swept) in enumerate(held_out_splits(manifest, s["ids"], max(splits, clean_splits),
                                                                  seed, "all")):
        if i < splits:
            power.append(split_decisions(s, cal_pos, cal_neg, swept, member, seed + i))
        if i < clean_splits:
            clean.append(split_decisions(s, cal_pos, cal_neg, swept & ~member, member, seed + i))
    lines = []
    for test in ("tail_combined", *(f"{HEADLINE}+{name}" for name in s["sets"]), "tail", "max_reference",
                 "fisher_pooled_95", "welch", "dataset_inference", "interval"):
        hits = sum(r[test] <= ALPHA for r in power)
        alarms = sum(r[test] <= ALPHA for r in clean)
        line = {"canary": canary.name, "dup": manifest["dup"], "seed": manifest["seed"],
                "n_members_planted": len(manifest["member_ids"]), "reference_canaries": s["references"],
                "test": test, "headline": test == HEADLINE, "true_prevalence": power[0]["truth"],
                "n_swept": power[0]["n_swept"], "n_reference": len(manifest["nonmember_ids"]) // 2,
                "splits": splits, "power": hits / splits, "power_ci": list(clopper_pearson(hits, splits)),
                "clean_splits": clean_splits, "clean_false_alarm": alarms / clean_splits,
                "clean_false_alarm_ci": list(clopper_pearson(alarms, clean_splits))}
        if test.startswith(HEADLINE) or test == "tail":  # all run the tail test at the same sizes
            line["exact_clean_false_alarm"] = exact_size(clean[0]["n_swept"], len(manifest["nonmember_ids"]) // 2)
        if test == "interval":
            covered = [r["covered"] for r in power if r["covered"] is not None]
            line["coverage"] = float(np.mean(covered)) if covered else None
            line["share_identifiable"] = len(covered) / splits
        if test == "dataset_inference":
            checks = sum(r["di_check"] <= ALPHA for r in power)
            line["check_false_alarm"] = checks / splits
            line["check_false_alarm_ci"] = list(clopper_pearson(checks, splits))
        lines.append(line)
    lines += oracle_lines(s, manifest, member, power[0]["n_swept"], round(power[0]["truth"] * power[0]["n_swept"]),
                          seed)
    return lines


def oracle_lines(s: dict, manifest: dict, member: np.ndarray, n_swept: int, n_members: int, seed: int) -> list[dict]:
    """One ``oracle`` line per oracle feature (``ref`` when scored, and ``min_k``, the sweep's
    scorer): :func:`studies.detection_features.oracle_power` at the held-out splits' sizes."""
    features = {"min_k": s["main"], **({"ref": s["extra"]["ref"]} if "ref" in s["extra"] else {})}
    shuffled = np.random.default_rng(seed).permutation(member)  # no signal: the oracle's noise floor
    return [{"canary": s["canary"], "dup": manifest["dup"], "seed": manifest["seed"], "test": ORACLE,
             "headline": False, "oracle_feature": name, "n_swept": n_swept, "n_members_swept": n_members,
             "power": oracle_power(values, member, n_swept, n_members, ALPHA, seed),
             "oracle_noise_floor": oracle_power(values, shuffled, n_swept, n_members, ALPHA, seed)}
            for name, values in features.items()]


def exchangeability_line(canary: Path, seeds: int, cache: Path) -> dict:
    """The exchangeability test on one canary's members in GSM8K file order: ``seeds`` seeds of the
    shuffled orders, and ``seeds`` shufflings within the shards taken as the canonical order (the
    exact null), every distinct text scored once with the local backend (cached, resumable)."""
    from blackbox_mia.backends.registry import build_backend
    from blackbox_mia.runner import score_items
    from blackbox_mia.scorers import parse_scorer

    manifest = load_manifest(canary)
    members = canonical_members(canary)
    plans = {}
    for seed in range(seeds):
        config = ExchangeabilityConfig(dataset=f"canary:{canary}", seed=seed)
        plans["seed", seed] = plan_shards(config, members, {})
        rng = np.random.default_rng([1, seed])  # the shuffling of the canonical order within the shards
        shuffled = [members[i] for a, b in plans["seed", seed].bounds for i in a + rng.permutation(b - a)]
        plans["shuffling", seed] = plan_shards(config, shuffled, {})
    # ids as bbmia exchangeability names the texts of the file order (a scores file it wrote can seed the cache)
    ids = {item.text: item.id for (kind, _), plan in plans.items() if kind == "seed" for item in plan.texts}
    for plan in plans.values():
        ids.update({item.text: f"text-{hashlib.sha256(item.text.encode()).hexdigest()[:12]}" for item in plan.texts
                    if item.text not in ids})
    items = [Item(i, text) for text, i in ids.items()]
    out = cache / "prevalence_coverage" / canary.name / XCHG_TEST / "scores.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    backend = build_backend(f"local:{canary}")
    try:
        rows = score_items(items, [parse_scorer("loss")], {"target": backend}, out, None, progress=False)
    finally:
        backend.close()
    total_by_text = {item.text: value for item, value in zip(items, full_logprobs(rows).values())}
    line = {"canary": canary.name, "dup": manifest["dup"], "planted_order": manifest["config"].get("planted_order", "shuffled"),
            "n_members_planted": len(manifest["member_ids"]), "test": XCHG_TEST, "headline": False,
            "shards": config.shards, "permutations": config.permutations, "n_distinct_texts": len(items)}
    for kind in ("seed", "shuffling"):
        p_values, t_values = [], []
        for seed in range(seeds):
            plan = plans[kind, seed]
            text_of = {item.id: item.text for item in plan.texts}
            test = exchangeability_test(*shard_logprobs(plan, {i: total_by_text[t] for i, t in text_of.items()}), alpha=ALPHA)
            p_values.append(test["p_value"])
            t_values.append(test["t_test"]["p_value"])
        rejected = sum(p <= ALPHA for p in p_values)
        line[f"{kind}s"] = seeds
        line[f"max_p_{kind}s"] = max(p_values)
        line[f"median_p_{kind}s"] = float(np.median(p_values))
        line[f"rejection_rate_{kind}s"] = rejected / seeds
        line[f"rejection_rate_{kind}s_ci"] = list(clopper_pearson(rejected, seeds))
        line[f"t_test_rejection_rate_{kind}s"] = sum(p is not None and p <= ALPHA for p in t_values) / seeds
    return line


def summary(lines: list[dict]) -> dict:
    """The last line: the headline test's power at dups 8 and 16, its worst false-alarm rate,
    the interval's worst coverage, and the targets."""
    xchg = [line for line in lines if line["test"] == XCHG_TEST]
    canonical = [line["max_p_seeds"] for line in xchg if line["planted_order"] == "canonical"]
    alarms = [max(line["rejection_rate_seeds"], line["rejection_rate_shufflings"]) for line in xchg
              if line["planted_order"] != "canonical"]
    lines = [line for line in lines if line["test"] not in (XCHG_TEST, ORACLE)]
    head = {line["dup"]: line for line in first_seed(lines) if line["headline"]}
    combined = [line for line in lines if line["test"].startswith(HEADLINE)]  # every feature set, every seed
    worst = max(combined, key=lambda line: line["clean_false_alarm"], default=None)
    intervals = [line for line in lines if line["test"] == "interval" and line["coverage"] is not None
                 and line["share_identifiable"] >= MIN_IDENTIFIABLE]
    min_coverage = min((line["coverage"] for line in intervals), default=None)
    power8, power16 = (head[d]["power"] if d in head else None for d in (8, 16))
    return {
        "headline_test": HEADLINE,
        "power_dup8": power8,
        "power_dup16": power16,
        "max_clean_false_alarm": None if worst is None else worst["clean_false_alarm"],
        "max_clean_false_alarm_ci": None if worst is None else worst["clean_false_alarm_ci"],
        "max_clean_false_alarm_ci_familywise": None if worst is None else familywise_ci(worst, len(combined)),
        "max_exact_clean_false_alarm": max((line["exact_clean_false_alarm"] for line in combined), default=None),
        **ref_power(lines),
        **ref_power(lines, "ref_alone"),
        "min_coverage": min_coverage,
        "coverage_dups": [line["dup"] for line in intervals],
        "exchangeability_p_canonical": max(canonical, default=None),
        "exchangeability_false_alarm": max(alarms, default=None),
        "exchangeability_note": "largest p over the permutation seeds of the canonical-order canaries; largest "
                                "rejection rate at alpha over seeds or shufflings of the others",
        "target_exchangeability_met": bool(canonical and alarms and max(canonical) < 0.01 and max(alarms) <= ALPHA),
        "target_power_met": all(p is not None and p >= TARGET_POWER for p in (power8, power16)),
        "target_false_alarm_rule": "the headline's exact level (computed) <= alpha at every canary, and every measured "
                                    "rate consistent with it: the largest rate's Clopper-Pearson CI at the family-wise "
                                    "level 1 - 0.05/m (Bonferroni over the m feature-set lines) reaches alpha",
        "target_false_alarm_met": worst is not None and familywise_ci(worst, len(combined))[0] <= ALPHA
        and all(line["exact_clean_false_alarm"] <= ALPHA for line in combined),
        "per_line_cis_above_alpha": sum(line["clean_false_alarm_ci"][0] > ALPHA for line in combined),
        "per_line_cis_above_alpha_expected": round(len(combined) * ALPHA / 2, 2),
        "target_coverage_met": min_coverage is not None and min_coverage >= 1 - ALPHA,
    }


def familywise_ci(line: dict, m: int) -> list[float]:
    """The Clopper-Pearson CI of a line's clean false-alarm rate at the family-wise level
    1 - 0.05/m (Bonferroni, Dunn 1961): the CI that holds for the largest of ``m`` measured rates.
    Per line, a 95% CI misses an exact level's rate from below with probability 0.025, so among
    ``m`` lines about 0.025 m do even when every test is exact; the largest rate needs this one."""
    alarms = round(line["clean_false_alarm"] * line["clean_splits"])
    return list(clopper_pearson(alarms, line["clean_splits"], alpha=0.05 / m))


def first_seed(lines: list[dict]) -> list[dict]:
    """The lines of the lowest training seed at each dup (the study's single-canary tables and keys)."""
    lowest = {}
    for line in lines:  # lines saved before the seed was recorded: seed 0
        lowest[line["dup"]] = min(lowest.get(line["dup"], line.get("seed", 0)), line.get("seed", 0))
    return [line for line in lines if line.get("seed", 0) == lowest[line["dup"]]]


def ref_power(lines: list[dict], feature_set: str = "ref") -> dict:
    """The summary's reference-model keys of one feature set (``ref``: today's + ``ref``;
    ``ref_alone``): ``power_dup<d>_<set>`` (the headline test on that set, the LOWEST power over
    the training seeds, None where no canary has it; each seed's: the feature-set table) and
    ``target_<set>_power_met``: issue 43's target (power >= 0.8 at dup 4 and >= 0.5 at dup 2 on
    every seed, at least two seeds)."""
    by = {}
    for line in lines:
        if line["test"] == f"{HEADLINE}+{feature_set}":
            by.setdefault(line["dup"], {})[line["seed"]] = line["power"]
    keys = {f"power_dup{d}_{feature_set}": min(by[d].values()) if d in by else None for d in POWER_DUPS}
    seeds = {d: len(by.get(d, {})) for d in (2, 4)}
    met = (min(seeds.values()) >= 2 and keys[f"power_dup4_{feature_set}"] >= TARGET_REF_POWER[4]
           and keys[f"power_dup2_{feature_set}"] >= TARGET_REF_POWER[2])
    return {**keys, f"target_{feature_set}_power_met": met}


def load_features(canary: Path, features: str, cache: Path, extra: bool = True) -> dict:
    """``ids``, ``features`` (shape (1319, F), the scorers' order), ``main`` (the first scorer),
    and with ``extra`` the feature sets' columns (:mod:`studies.detection_features`, ``features``
    must hold ``loss``): ``extra`` (name -> shape (1319,)), ``sets`` (name -> shape
    (1319, F')), ``references`` (the reference canaries' names, own seed's first; empty without)."""
    scores = cached_scores(canary, features, cache, with_control=False)
    columns = list(scores["benchmark_columns"].values())
    out = {"canary": canary.name, "ids": scores["ids"], "features": np.column_stack(columns), "main": columns[0],
           "extra": {}, "sets": {}, "references": []}
    if extra:
        found = extra_columns(canary, load_manifest(canary), scores["benchmark_columns"]["loss"], cache)
        out.update(extra=found["columns"], references=found["references"],
                   sets=feature_sets(out["features"], found["columns"]))
    return out


TEST_NAMES = {
    "tail_combined": "**tail test, combined features** (headline with `--features` and members)",
    "tail": "tail test, `min_k` alone (headline without)",
    "max_reference": "count above the largest reference score",
    "fisher_pooled_95": "Fisher test above the pooled 95th percentile",
    "welch": "Welch t-test (`dataset_test`)",
    "dataset_inference": "dataset inference (Maini et al.)",
    "interval": "prevalence interval excludes 0",
}
"""How the docs' tables name each split test (the headline first), in this order."""
ASYMPTOTIC = {"welch", "dataset_inference"}


def _two(value: float | None) -> str:
    """Two decimals, or ``n/a`` (a coverage over no identifiable split)."""
    return "n/a" if value is None else f"{value:.2f}"


def _rate(rate: float, ci: list[float], bold: bool = False) -> str:
    text = num(rate) + interval(ci)
    return f"**{text}**" if bold else text


def markdown(lines: list[dict]) -> str:
    """The docs' tables (docs/contamination.md) from this study's ``--json`` lines (the summary
    last): power per test and dup level, clean false alarms, the exact level and the interval's
    coverage, the exchangeability test per canary, and the summary's figures.

    Raises:
        ValueError: ``lines`` holds no summary line last.
    """
    *rows, last = lines
    if "power_dup8" not in last:
        raise ValueError("the last line is not the study's summary")
    split = first_seed([r for r in rows if r["test"] in TEST_NAMES])
    dups = sorted({r["dup"] for r in split})
    by = {(r["test"], r["dup"]): r for r in split}
    out = []
    if split:
        head = "| test | level | " + " | ".join(f"dup {d} power" for d in dups) + " |"
        out += [head, "|" + " --- |" * (2 + len(dups))]
        for test, name in TEST_NAMES.items():
            cells = [_rate(by[test, d]["power"], by[test, d]["power_ci"], by[test, d]["headline"]) for d in dups]
            level = "asymptotic" if test in ASYMPTOTIC else "exact"
            out.append(f"| {name} | {level} | " + " | ".join(cells) + " |")
        n_clean = {r["clean_splits"] for r in split}
        out += ["", f"Clean-benchmark false alarms (the swept items with their members removed; "
                f"{', '.join(map(str, sorted(n_clean)))} splits per canary):", "",
                "| test | " + " | ".join(f"dup {d}" for d in dups) + " |", "|" + " --- |" * (1 + len(dups))]
        for test, name in TEST_NAMES.items():
            cells = [_rate(by[test, d]["clean_false_alarm"], by[test, d]["clean_false_alarm_ci"]) for d in dups]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        levels = sorted({f"{r['exact_clean_false_alarm']:.4f}" for r in split if "exact_clean_false_alarm" in r})
        per_dup = "; ".join(
            f"dup {d}: coverage {_two(by['interval', d]['coverage'])}, identifiable in "
            f"{by['interval', d]['share_identifiable']:.2f} of splits, dataset inference's check alarms in "
            f"{by['dataset_inference', d]['check_false_alarm']:.3f}" for d in dups)
        out += ["", f"The tail tests' exact level at the clean sizes, computed (`exact_size`): {', '.join(levels)}. "
                f"{per_dup}."]
    out += feature_set_tables(rows)
    xchg = [r for r in rows if r["test"] == XCHG_TEST]
    if xchg:
        out += ["", "| canary | planted order | p over the seeds (max; median) | rejections, seeds | "
                "rejections, shufflings (exact null) | t-test rejections (seeds; shufflings) |",
                "| --- | --- | --- | --- | --- | --- |"]
        for r in xchg:
            canonical = r["planted_order"] == "canonical"
            order = "**canonical**" if canonical else r["planted_order"]
            p = f"{figure(r['max_p_seeds'])}; {figure(r['median_p_seeds'])}"
            out.append(f"| `{r['canary']}` (dup {r['dup']}) | {order} | {f'**{p}**' if canonical else p} | "
                       f"{_rate(r['rejection_rate_seeds'], r['rejection_rate_seeds_ci'], canonical)} | "
                       f"{_rate(r['rejection_rate_shufflings'], r['rejection_rate_shufflings_ci'])} | "
                       f"{r['t_test_rejection_rate_seeds']:.2f}; {r['t_test_rejection_rate_shufflings']:.2f} |")
    figures = {k: v for k, v in last.items() if not k.endswith(("_note", "_rule")) and k != "headline_test"}
    out += ["", "Summary line: " + ", ".join(f"`{k}` {figure(v)}" for k, v in figures.items()) + "."]
    return "\n".join(out) + "\n"


SET_NAMES = {HEADLINE: "today's features", **{f"{HEADLINE}+{name}": " + ".join("today's" if c == TODAY else f"`{c}`"
                                                                             for c in cols)
                                                for name, cols in FEATURE_SETS.items()}}
"""How the feature-set table names each headline variant, in this order."""


def feature_set_tables(rows: list[dict]) -> list[str]:
    """The feature-set tables (issue 43): the headline test's power per feature set, and the
    oracles', per (dup, training seed); then its clean false alarms. Empty without feature-set lines."""
    sets = [r for r in rows if r["test"] in SET_NAMES and "seed" in r]
    if not any(r["test"] != HEADLINE for r in sets):
        return []
    columns = sorted({(r["dup"], r["seed"]) for r in sets})
    by = {(r["test"], r["dup"], r["seed"]): r for r in sets}
    oracles = {(r["oracle_feature"], r["dup"], r["seed"]): r["power"] for r in rows if r["test"] == ORACLE}
    header = "| feature set (tail test, combined) | " + " | ".join(f"dup {d}, seed {s}" for d, s in columns) + " |"
    references = sorted({name for r in sets for name in r.get("reference_canaries", [])})
    out = ["", "Power per feature set (the headline test), by dup and training seed; `ref`: the target's mean log-prob "
           "minus the mean of the reference canaries' (" + ", ".join(f"`{name}`" for name in references) + "; "
           "`one_ref`: the canary's own seed's reference only):", "",
           header, "|" + " --- |" * (1 + len(columns))]
    for test, name in SET_NAMES.items():
        cells = [_rate(by[test, d, s]["power"], by[test, d, s]["power_ci"], test == f"{HEADLINE}+ref")
                 if (test, d, s) in by else "n/a" for d, s in columns]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    for feature in sorted({f for f, _, _ in oracles}):
        cells = [num(oracles[feature, d, s]) if (feature, d, s) in oracles else "n/a" for d, s in columns]
        out.append(f"| oracle, `{feature}` densities known (no test on `{feature}` does better) | "
                   + " | ".join(cells) + " |")
    floors = sorted(r["oracle_noise_floor"] for r in rows if r["test"] == ORACLE and "oracle_noise_floor" in r)
    if floors:
        out += ["", f"The oracle takes the KDE of 200 member scores as the truth, sampling noise included: with the "
                f"labels shuffled (no signal) it reads {num(floors[0])} to {num(floors[-1])} (alpha {ALPHA:g}), so it "
                "bounds the power from above, loosely where it is low."]
    out += ["", "Clean-benchmark false alarms of the same tests:", "", header.replace("feature set (tail test, combined)",
            "feature set"), "|" + " --- |" * (1 + len(columns))]
    for test, name in SET_NAMES.items():
        cells = [_rate(by[test, d, s]["clean_false_alarm"], by[test, d, s]["clean_false_alarm_ci"])
                 if (test, d, s) in by else "n/a" for d, s in columns]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--canary", action="append", type=Path, help="canary directory (repeatable; default: one per "
                        "dup level from CACHE/canary with the default architecture; none there: the default canary)")
    parser.add_argument("--cache", type=Path, default=Path("cache"), help="cache root (default: cache)")
    parser.add_argument("--features", default=FEATURES, help="scorers, the first being the sweep's (default: %(default)s)")
    parser.add_argument("--splits", type=int, default=300, help="held-out splits for power (default 300)")
    parser.add_argument("--clean-splits", type=int, default=1000, help="splits of the clean check (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--canonical-canary", action="append", type=Path, default=[],
                        help="a canary trained with --planted-order canonical (repeatable): the exchangeability test's power")
    parser.add_argument("--xchg-seeds", type=int, default=100,
                        help="seeds of the exchangeability test's shuffled orders, and shufflings (default 100)")
    parser.add_argument("--xchg-only", action="store_true", help="only the exchangeability test (no split tests)")
    parser.add_argument("--no-xchg", action="store_true", help="no exchangeability test (its summary keys null)")
    parser.add_argument("--no-extra", action="store_true", help="only today's features (no ref, recall, dc_pdd)")
    parser.add_argument("--json", action="store_true", help="one JSON line per (canary, test), then the summary line")
    args = parser.parse_args()
    canaries = args.canary or [path for _, path in study_canaries(args.cache)]
    if not canaries:  # a clean checkout: the default canary (dup 8), trained once and cached
        canaries = [ensure_canary(CanaryConfig(), progress=not args.json, cache=args.cache)]
    lines = []
    for canary in canaries:
        if args.xchg_only:
            continue
        for line in run_canary(canary, load_features(canary, args.features, args.cache, not args.no_extra),
                               args.splits, args.clean_splits, args.seed):
            lines.append(line)
            print(json.dumps(line) if args.json else
                  f"dup {line['dup']:>2} seed {line['seed']} {line['test']:<24} {line.get('oracle_feature', '')} "
                  f"power {line['power']:.3f}" +
                  ("" if "clean_false_alarm" not in line else f"  clean false alarms {line['clean_false_alarm']:.3f}"),
                  flush=True)
    seeds = {path: load_manifest(path)["seed"] for path in canaries}
    lowest = {}  # the exchangeability test runs on the lowest training seed's canary at each dup
    for path in sorted(canaries, key=lambda p: -seeds[p]):
        lowest[load_manifest(path)["dup"]] = path
    for canary in [] if args.no_xchg else [*lowest.values(), *args.canonical_canary]:
        line = exchangeability_line(canary, args.xchg_seeds, args.cache)
        lines.append(line)
        print(json.dumps(line) if args.json else
              f"dup {line['dup']:>2} {XCHG_TEST} ({line['planted_order']} order): max p {line['max_p_seeds']:.3g}, "
              f"rejections {line['rejection_rate_seeds']:.3f} (seeds) {line['rejection_rate_shufflings']:.3f} "
              "(shufflings)", flush=True)
    print(json.dumps(summary(lines)) if args.json else summary(lines))


if __name__ == "__main__":
    main()
