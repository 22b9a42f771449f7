"""Story completion's similarities compared between two groups of texts (flagged and unflagged,
or by the ground truth): per group n, mean and median; the difference of the means with a bootstrap
interval and a one-sided Mann-Whitney p-value."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy import stats

from ...evaluation import bootstrap_ci

MEASURES = ("rouge_l_recall", "approximate")  # story completion's similarities (per text: the mean over samples)
FLAGGED, UNFLAGGED = "flagged", "unflagged"
STILL_MEMORIZED, NOT_STILL_MEMORIZED = "still_memorized", "not_still_memorized"  # groups by the ground truth


def _group_stats(values: list[float]) -> dict:
    """n, mean and median of per-text mean similarities (None when empty)."""
    if not values:
        return {"n": 0, "mean": None, "median": None}
    return {"n": len(values), "mean": float(np.mean(values)), "median": float(np.median(values))}


def mean_difference(flagged: list[float], unflagged: list[float], n_boot: int = 1000, seed: int = 0) -> dict | None:
    """Mean of ``flagged`` minus mean of ``unflagged`` (per-text similarities) with a percentile
    bootstrap 95% CI (texts resampled within each group, :func:`~blackbox_mia.evaluation.bootstrap_ci`)
    and the one-sided Mann–Whitney p-value of "flagged larger"; None unless both groups have a text.
    """
    if not flagged or not unflagged:
        return None
    labels = [1] * len(flagged) + [0] * len(unflagged)
    values = [*flagged, *unflagged]

    def difference(y: np.ndarray, v: np.ndarray) -> float:
        return float(v[y == 1].mean() - v[y == 0].mean())

    diff = float(np.mean(flagged) - np.mean(unflagged))
    ci = bootstrap_ci(labels, values, difference, n_boot, seed=seed)
    p = float(stats.mannwhitneyu(flagged, unflagged, alternative="greater").pvalue)
    return {"difference": diff, "ci": [float(ci[0]), float(ci[1])], "mann_whitney_p": p}


def split_completed(rows: Iterable[dict], key: str, names: tuple[str, str]) -> dict[str, list[dict]]:
    """The per-text rows that have similarities (story completion ran on them), in two groups:
    ``names[0]`` where ``row[key]`` is true, ``names[1]`` where it is false."""
    completed = [row for row in rows if MEASURES[0] in row]
    return {names[0]: [row for row in completed if row[key]], names[1]: [row for row in completed if not row[key]]}


def compare_groups(groups: dict[str, list[dict]], seed: int) -> tuple[dict, dict]:
    """Per group and measure, :func:`_group_stats` of the per-text mean similarities; per measure,
    :func:`mean_difference` of the first group minus the second (bootstrap seeded ``seed``)."""
    first, second = (groups[g] for g in groups)
    summary = {g: {m: _group_stats([row[m] for row in members]) for m in MEASURES} for g, members in groups.items()}
    difference = {m: mean_difference([row[m] for row in first], [row[m] for row in second], seed=seed)
                  for m in MEASURES}
    return summary, difference
