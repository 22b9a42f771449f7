"""The score matrices of a sweep's groups (:func:`.sweep.run_sweep`): the benchmark's, the
control's and the calibration's rows as arrays of shape (texts, F), one column per scorer of
:attr:`.plan.SweepPlan.scorers`, calibration texts already in the benchmark reusing its rows;
with ``drop_unscored`` a row without a usable score is all NaN (:func:`has_nan`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...backends.base import Backend
from ...datasets import Item
from ...results import ScoredText
from ...runner import run_config, score_items
from ..common import Log, score_column, usable
from .plan import SweepPlan


def control_scores(plan: SweepPlan, items: list[Item] | None, backends: dict[str, Backend], out_dir: Path,
                    progress: bool, log: Log) -> np.ndarray | None:
    """Scores of the control ``items`` (``control_scores.jsonl``), shape (n_c, F) (:func:`feature_matrix`);
    None without a usable control (``items`` None: see :meth:`SweepPlan.scored_groups`)."""
    if items is None:
        return None
    log(f"scoring {len(items)} control items")
    meta = {"name": f"control of {plan.meta['name']}", "source": plan.meta["source"],
            "sha256": plan.meta["sha256"], "construction": asdict(plan.control.config)}
    cfg = run_config(plan.scorers, backends, meta, plan.config.score_tolerance)
    rows = score_items(items, plan.scorers, backends, out_dir / "control_scores.jsonl", cfg, resume=plan.config.resume,
                       progress=progress)
    return feature_matrix(rows, plan)


def calibration_scores(plan: SweepPlan, todo: list[Item], known: dict[str, ScoredText], control: np.ndarray | None,
                        backends: dict[str, Backend], out_dir: Path, progress: bool,
                        log: Log) -> tuple[np.ndarray, np.ndarray | None, str, set[str]]:
    """``(non-member scores, member scores or None, description, calibration texts)`` of the
    calibration source (scores: shape (items, F), :func:`feature_matrix`): ``--calibration``, else ``--nonmembers``, else the control (whose texts
    are new, so none of them is in the benchmark). ``todo``: its items to score (the others'
    texts are in ``known``, the benchmark's scores by text: :meth:`SweepPlan.scored_groups`)."""
    path = out_dir / "calibration_scores.jsonl"
    if plan.calibration is not None:
        items, meta = plan.calibration
        scores = _scores_reusing(items, todo, known, plan, backends, path, meta, progress, log)
        labels = np.array([it.label for it in items])
        neg, pos = scores[labels == 0], scores[labels == 1]
        return neg, pos, f"calibration set {meta['name']} ({len(pos)} members, {len(neg)} non-members)", {it.text for it in items}
    if plan.nonmembers is not None:
        items, meta = plan.nonmembers
        neg = _scores_reusing(items, todo, known, plan, backends, path, meta, progress, log)
        return neg, None, f"known non-members {meta['name']} ({len(neg)})", {it.text for it in items}
    return control, None, f"the benchmark's own control ({len(control)} items with new numbers)", set()


def _scores_reusing(items: list[Item], todo: list[Item], known: dict[str, ScoredText], plan: SweepPlan,
                    backends: dict[str, Backend], out_path: Path, meta: dict, progress: bool, log: Log) -> np.ndarray:
    """Scores of ``items``, shape (len(items), F) (:func:`feature_matrix`): ``todo`` scored, the
    others' texts already scored (``known``: text → row)."""
    log(f"scoring {len(todo)} calibration items ({len(items) - len(todo)} reuse benchmark scores)")
    if todo:
        cfg = run_config(plan.scorers, backends, meta, plan.config.score_tolerance)
        rows = score_items(todo, plan.scorers, backends, out_path, cfg, resume=plan.config.resume, progress=progress)
        known = {**known, **{it.text: row for it, row in zip(todo, rows)}}
    return feature_matrix([known[it.text] for it in items], plan)


def feature_matrix(rows: Sequence[ScoredText], plan: SweepPlan) -> np.ndarray:
    """Shape (len(rows), F): the scores of :attr:`SweepPlan.scorers`, the sweep's scorer first;
    with ``drop_unscored`` a row without a usable score is all NaN (:func:`has_nan` finds it).

    Raises:
        BlackboxMIAError: without ``drop_unscored``, a row without a usable score (:func:`score_column`).
    """
    labels = [s.label for s in plan.scorers]
    if not plan.config.drop_unscored:
        return np.column_stack([score_column(rows, label, droppable=True) for label in labels])
    out = np.full((len(rows), len(labels)), np.nan)
    keep = usable(rows, labels)
    if keep.any():
        out[keep] = np.column_stack([score_column([r for r, k in zip(rows, keep) if k], label) for label in labels])
    return out


def has_nan(x: np.ndarray | None) -> np.ndarray:
    """Shape (len(x),) bool: the rows of a score matrix (:func:`feature_matrix`) left without a
    usable score; empty for None."""
    return np.zeros(0, dtype=bool) if x is None else np.isnan(x).any(axis=1)


def calibration_order(plan: SweepPlan) -> list[Item] | None:
    """The labelled calibration items in the order of :func:`calibration_scores`' rows
    (non-members, then members), or the known non-members; None when the control calibrates
    (its rows are the control's)."""
    if plan.calibration is not None:
        items = plan.calibration[0]
        return [it for it in items if it.label == 0] + [it for it in items if it.label == 1]
    return None if plan.nonmembers is None else list(plan.nonmembers[0])
