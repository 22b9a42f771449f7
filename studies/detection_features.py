"""The feature sets and the oracle of the detection-power study (issue 43; :mod:`studies.detection_power`).

Beyond today's features (:data:`studies.detection_power.FEATURES`), three more columns per
GSM8K test item, each scored once per canary and cached under
``cache/prevalence_coverage/<canary>/``:

* ``ref``: the target's mean log-prob minus the MEAN of the reference canaries' (Carlini et al.
  2021 §6; the ``ref:refs=N`` scorer's formula, ``bbmia sweep --ref A --ref B ...``),
  nats/token: the target's ``loss`` column minus the references' mean ``loss`` column, each
  reference scored once (``cache/prevalence_coverage/<reference>/loss/``). The references are
  every canary of the cache trained with ``bbmia canary train --reference-of`` (nothing
  planted, another sample of GSM8K train) with the canary's architecture and recipe, of any
  training seed: none saw GSM8K test, so each is a valid reference (one of another seed has a
  background that overlaps the canary's by chance).
* ``one_ref``: the same with ONE reference, the canary's own seed's of the canaries' size (else
  the first of the others): what averaging several references adds.
* ``recall``: ReCaLL (:mod:`blackbox_mia.scorers.recall`) with one shot, the shortest GSM8K
  TRAIN problem outside the canary's background (``recall_prefix.jsonl``): a non-member of
  the canary that is no GSM8K test item, so it is in no split (neither calibration nor swept)
  and the tail test's level stays exact.
* ``dc_pdd``: DC-PDD (:mod:`blackbox_mia.scorers.dc_pdd`) with its shipped frequency corpus (the
  first 500 GSM8K train problems, tokenized by the canary) and ``vocab`` the canary's.

Feature sets (:data:`FEATURE_SETS`) add these columns to today's; each runs the headline test
(the tail test on the features combined by a logistic regression on the calibration members).

The oracle (:func:`oracle_power`): the Neyman–Pearson test of "the swept items hold a share pi
of members" against "none", with the member and non-member densities of one feature known (taken
to be the Gaussian KDEs of ALL its labelled scores) and its null distribution simulated, so it
needs no reference items: no test on that feature does better, and where the headline's power
is near it the dup is at the information limit of that feature.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import stats

from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.scorers import parse_scorers

from .prevalence_coverage import cached_scores, score_canary

EXTRA = ("ref", "recall", "dc_pdd")
TODAY = "today"
FEATURE_SETS = {"one_ref": (TODAY, "one_ref"), "ref": (TODAY, "ref"), "ref_alone": ("ref",),
                "recall_dc_pdd": (TODAY, "recall", "dc_pdd"), "all": (TODAY, *EXTRA)}
"""Feature set name -> its columns: :data:`TODAY` (today's features, all of them) and extra columns
(today's alone: the headline)."""
RECALL_SHOTS = 1  # the canaries' 128-token context holds one short problem before the scored one
PREFIX_FILE = "recall_prefix.jsonl"
ORACLE_TRIALS = 1000  # simulated swept sets under the null and under the alternative
ORACLE_GRID = 4096  # points the log likelihood ratio is tabulated at (interpolated between)


def find_references(manifest: dict, cache: Path) -> list[Path]:
    """The reference canaries for a canary (see the module docstring): every complete reference of
    its architecture and recipe in the cache (of any seed and size), its own seed's of the
    canaries' size first (``one_ref``), then by seed and size; empty without any."""
    found = []
    for path in sorted(cache.glob("canary/*/manifest.json")):
        other = json.loads(path.read_text())
        config = other.get("config", {})
        same = all(config.get(k) == manifest["config"].get(k) for k in ("corpus", "vocab_size", "n_layer", "n_embd",
                                                                         "n_head", "block_size", "epochs", "lr"))
        if "reference" in other and other.get("complete") and same:
            size = config.get("reference_size") or 0  # 0: the canaries' n_background
            found.append(((other["seed"] != manifest["seed"] or size != 0, other["seed"], size), path.parent))
    return [path for _, path in sorted(found)]


def recall_prefix(canary: Path, manifest: dict, cache: Path) -> Path:
    """Write (once) and return the ReCaLL prefix file of a canary: the shortest GSM8K train problem
    outside its background (ties: the first), as a one-line JSONL with label 0."""
    path = cache / "prevalence_coverage" / canary.name / PREFIX_FILE
    if not path.is_file():
        seen = set(manifest["background_ids"])
        outside = [it for it in load_shipped_or_jsonl("gsm8k:train").items if it.id not in seen]
        shortest = min(outside, key=lambda it: len(it.text))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"id": shortest.id, "text": shortest.text, "label": 0}) + "\n")
    return path


def extra_columns(canary: Path, manifest: dict, target_loss: np.ndarray, cache: Path) -> dict:
    """``{"references": the reference canaries' directory names (own seed's first; empty without
    one), "columns": {name: shape (1319,)}}``: ``ref`` and ``one_ref`` (with a reference canary),
    ``recall`` and ``dc_pdd`` for the GSM8K test items in their file order; scored once and
    cached (resumable)."""
    columns = {}
    references = find_references(manifest, cache)
    if references:
        losses = [cached_scores(path, "loss", cache, with_control=False)["benchmark"] for path in references]
        columns["ref"] = target_loss - np.mean(losses, axis=0)
        columns["one_ref"] = target_loss - losses[0]
    specs = (f"recall:prefix={recall_prefix(canary, manifest, cache)},shots={RECALL_SHOTS},"
             f"dc_pdd:vocab={manifest['config']['vocab_size']}")
    labels = [s.label for s in parse_scorers(specs)]
    path = cache / "prevalence_coverage" / canary.name / "recall+dc_pdd" / "benchmark.jsonl"
    items = load_shipped_or_jsonl("gsm8k").items
    done = {}
    if path.is_file():
        done = {row["id"]: row["scores"] for row in map(json.loads, path.read_text().splitlines())}
    if any(it.id not in done for it in items):
        meta = load_shipped_or_jsonl("gsm8k").metadata()
        done = {r.id: r.scores for r in score_canary(canary, specs, items, meta, path)}
    for name, label in zip(("recall", "dc_pdd"), labels):
        columns[name] = np.array([done[it.id][label] for it in items], dtype=np.float64)
    return {"references": [path.name for path in references], "columns": columns}


def feature_sets(base: np.ndarray, extra: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each feature set's matrix, shape (n_items, F): its columns in order, :data:`TODAY` being
    today's columns ``base``; a set whose extra columns are not all in ``extra`` is left out."""
    return {name: np.column_stack([base if c == TODAY else extra[c] for c in cols])
            for name, cols in FEATURE_SETS.items() if all(c == TODAY or c in extra for c in cols)}


def oracle_power(feature: np.ndarray, member: np.ndarray, n_swept: int, n_members: int, alpha: float,
                 seed: int, trials: int = ORACLE_TRIALS) -> float:
    """The power of the Neyman–Pearson test with the densities known (see the module docstring).

    The "true" densities are the Gaussian KDEs f1, f0 of the members' and the non-members'
    scores of the feature; swept sets are drawn from them (``n_members`` from f1, the rest from
    f0; the null: all from f0), so the test is exactly the most powerful one for these densities.

    Args:
        feature: shape (n_items,), one feature of every benchmark item.
        member: shape (n_items,), bool, the truth.
        n_swept, n_members: the swept set's size and its members (the held-out splits').
        alpha: the level; the critical value is the simulated null's (1 - alpha) quantile.

    Returns:
        The share of ``trials`` simulated swept sets whose statistic
        T = sum log(1 - pi + pi f1(x) / f0(x)), pi = n_members / n_swept, exceeds the critical value.
    """
    f1, f0 = stats.gaussian_kde(feature[member]), stats.gaussian_kde(feature[~member])
    pi = n_members / n_swept
    spread = feature.max() - feature.min()
    grid = np.linspace(feature.min() - spread, feature.max() + spread, ORACLE_GRID)
    log_ratio = np.log(1 - pi + pi * f1(grid) / np.maximum(f0(grid), 1e-300))

    def statistic(sample: np.ndarray) -> np.ndarray:  # (trials, n) draws -> (trials,) statistics
        return np.interp(sample, grid, log_ratio).sum(axis=1)

    rng = np.random.default_rng(seed)
    null = statistic(f0.resample(trials * n_swept, seed=rng).reshape(trials, n_swept))
    alternative = (statistic(f1.resample(trials * n_members, seed=rng).reshape(trials, n_members))
                   + statistic(f0.resample(trials * (n_swept - n_members), seed=rng).reshape(trials, -1)))
    return float(np.mean(alternative > np.quantile(null, 1 - alpha)))
