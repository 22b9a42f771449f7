"""Summaries, tables and the figure of a memorization audit (``bbmia memorize``).

Input: one row per (item, prompt length L) with the measures of
:mod:`blackbox_mia.text.similarity` (``eidetic`` in characters, ``approximate`` in [0, 1],
``exact`` a bool) and the item's label (1 = member, 0 = non-member, None = unknown).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .metrics import DEFAULT_FPRS, evaluate_scores
from .plots import save_figure, legend_below

MEASURES = ("eidetic", "approximate")
"""The memorization measures used as membership scores (higher = more likely a member)."""
EIDETIC_CHARS = 50
"""The study's bar for a memorized text: at least this many forward-matching characters."""
LABEL_NAMES = {1: "member", 0: "non-member", None: "unlabelled"}
POOLED = "pooled"


def label_stats(rows: Sequence[Mapping]) -> dict:
    """Mean, median and max of ``eidetic`` (characters) and ``approximate``, the share of rows
    with ``eidetic >= EIDETIC_CHARS`` characters and the share of exact matches, over ``rows``
    (non-empty)."""
    eid = np.array([r["eidetic"] for r in rows], dtype=np.float64)
    app = np.array([r["approximate"] for r in rows], dtype=np.float64)
    out: dict = {"n": len(rows)}
    for name, values in (("eidetic", eid), ("approximate", app)):
        out[name] = {"mean": float(values.mean()), "median": float(np.median(values)), "max": float(values.max())}
    out[f"share_eidetic_ge_{EIDETIC_CHARS}"] = float((eid >= EIDETIC_CHARS).mean())
    out["share_exact"] = float(np.mean([bool(r["exact"]) for r in rows]))
    return out


def membership_metrics(rows: Sequence[Mapping], n_boot: int, seed: int) -> dict | None:
    """AUC and TPR at low FPR, with bootstrap CIs, of each measure as a membership score
    (:func:`~.metrics.evaluate_scores`) on the labelled ``rows``; None unless both members and
    non-members occur."""
    labelled = [r for r in rows if r["label"] is not None]
    labels = np.array([r["label"] for r in labelled], dtype=np.int64)
    if len(set(labels.tolist())) < 2:
        return None
    return {m: evaluate_scores(labels, np.array([r[m] for r in labelled], dtype=np.float64), DEFAULT_FPRS, n_boot, seed)
            for m in MEASURES}


def summarize(rows: Sequence[Mapping], prompt_lengths: Sequence[int], n_boot: int = 1000, seed: int = 0) -> dict:
    """The audit's summary.

    Args:
        rows: dicts with ``label``, ``prompt_length``, ``eidetic``, ``approximate``, ``exact``.
        prompt_lengths: the prompt lengths L, in the order to report them.
        n_boot, seed: bootstrap resamples and seed of every CI (0 = no CI).

    Returns:
        ``{"by_label": {label name: {str(L): label_stats}}, "metrics": {str(L) and "pooled":
        {measure: evaluate_scores(...)} or None}}``. "pooled" takes every row of every L (an
        item counts once per prompt length it was long enough for).
    """
    by_label: dict[str, dict] = {}
    for label in (1, 0, None):
        per_length = {}
        for length in prompt_lengths:
            chosen = [r for r in rows if r["label"] == label and r["prompt_length"] == length]
            if chosen:
                per_length[str(length)] = label_stats(chosen)
        if per_length:
            by_label[LABEL_NAMES[label]] = per_length
    metrics = {str(length): membership_metrics([r for r in rows if r["prompt_length"] == length], n_boot, seed)
               for length in prompt_lengths}
    metrics[POOLED] = membership_metrics(rows, n_boot, seed)
    return {"by_label": by_label, "metrics": metrics}


def markdown_tables(summary: Mapping, unit: str) -> str:
    """Markdown: memorization by label × prompt length, then AUC [95% CI] of each measure per
    prompt length and pooled (``unit``: what L counts, ``tokens`` or ``chars``)."""
    lines = ["## Memorization by label and prompt length", "",
             (f"| label | L ({unit}) | n | eidetic mean (chars) | median | max | approximate mean | median | max "
             f"| share eidetic ≥ {EIDETIC_CHARS} | share exact |"),
             "| --- " * 11 + "|"]
    for label, per_length in summary["by_label"].items():
        for length, s in per_length.items():
            e, a = s["eidetic"], s["approximate"]
            lines.append(f"| {label} | {length} | {s['n']} | {e['mean']:.2f} | {e['median']:.1f} | {e['max']:.0f} "
                         f"| {a['mean']:.3f} | {a['median']:.3f} | {a['max']:.3f} "
                         f"| {s[f'share_eidetic_ge_{EIDETIC_CHARS}']:.3f} | {s['share_exact']:.3f} |")
    lines += ["", "## Memorization as a membership score (AUC [95% CI], TPR@10%FPR)", "",
              f"| L ({unit}) | " + " | ".join(f"{m} AUC | {m} TPR@10%" for m in MEASURES) + " |",
              "| --- " * (1 + 2 * len(MEASURES)) + "|"]
    for length, per_measure in summary["metrics"].items():
        if per_measure is None:
            lines.append(f"| {length} | " + " | ".join("n/a (one class)" for _ in range(2 * len(MEASURES))) + " |")
            continue
        cells = []
        for m in MEASURES:
            metric = per_measure[m]
            ci = metric["auc_ci"]
            cells.append(f"{metric['auc']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
            tpr = metric["tpr_at_fpr"].get("0.1")
            cells.append("n/a" if tpr is None else f"{tpr:.3f}")
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_memorization(by_label: Mapping[str, Mapping[str, Mapping]], unit: str, path: str | Path) -> Path:
    """Mean eidetic (characters) and mean approximate memorization against the prompt length,
    one line per label (two panels), written as an image (PNG by extension; folders created).

    Args:
        by_label: ``summarize(...)["by_label"]``.
        unit: what the prompt length counts (axis label).
        path: output image.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, measure, ylabel in zip(axes, MEASURES, ("mean eidetic memorization (characters)",
                                                     "mean approximate memorization")):
        for label, per_length in by_label.items():
            lengths = [int(k) for k in per_length]
            ax.plot(lengths, [per_length[k][measure]["mean"] for k in per_length], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ticks = sorted({int(k) for per_length in by_label.values() for k in per_length})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel(f"prompt length ({unit})")
        ax.set_ylabel(ylabel)
    legend_below(axes[0])  # the same labels in both panels: one legend for the figure
    fig.suptitle("Memorization vs prompt length")
    return save_figure(fig, path)
