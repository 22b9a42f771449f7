"""Per-document contamination rates (Shi et al. 2024, §5): the share of a document's chunks
flagged by a calibrated threshold, its Wilson interval, the rate corrected for the threshold's
FPR and TPR, and the histogram of rates over documents (their Figure 4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from ..types import BlackboxMIAError
from .calibration import Threshold
from .plots import _save
from .prevalence import corrected_prevalence


def wilson_interval(flagged: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927, "Probable inference, the law
    of succession, and statistical inference", JASA 22:209–212; Brown, Cai & DasGupta 2001, eq. 4):

        (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n),  z = Φ⁻¹(1 − α/2), p̂ = flagged/n.

    Args:
        flagged: successes (flagged chunks), 0 <= flagged <= n.
        n: trials (scored chunks), >= 1.
        alpha: the interval covers 1 − alpha.

    Returns:
        ``(low, high)`` in [0, 1].

    Raises:
        BlackboxMIAError: counts out of range, alpha outside (0, 1).
    """
    if n < 1 or not 0 <= flagged <= n or not 0 < alpha < 1:
        raise BlackboxMIAError(f"need 0 <= flagged <= n, n >= 1 and alpha in (0, 1); got {flagged}, {n}, {alpha}")
    z = float(stats.norm.ppf(1 - alpha / 2))
    p = flagged / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return max(0.0, (centre - half) / denom), min(1.0, (centre + half) / denom)


def document_rate(doc_id: str, n_chunks: int, scores: Sequence[float], threshold: Threshold,
                  label: int | None = None) -> dict:
    """One document's row: chunks in the document and scored, flagged count and share (flag =
    score > threshold), its Wilson 95% CI, and the Rogan–Gladen rate corrected for the
    threshold's FPR and TPR (None when the TPR is unknown or not above the FPR).

    Args:
        doc_id: the document.
        n_chunks: its chunks before sampling.
        scores: shape (n_scored,), the scored chunks' scores (n_scored >= 1).
        threshold: the calibrated threshold (``fpr``/``tpr`` on the validation chunks).
        label: the document's label (1 member, 0 non-member) when given.

    Raises:
        BlackboxMIAError: no scores.
    """
    flags = threshold.flag(scores)
    n, k = int(flags.size), int(flags.sum())
    lo, hi = wilson_interval(k, n)
    tpr = threshold.tpr
    corrected = None if tpr is None or tpr <= threshold.fpr else corrected_prevalence(k / n, threshold.fpr, tpr)
    row = {"doc_id": doc_id, "n_chunks": n_chunks, "n_scored": n, "n_flagged": k, "rate": k / n,
           "rate_ci": [lo, hi], "corrected": corrected, "mean_score": float(np.mean(scores))}
    if label is not None:
        row["label"] = label
    return row


def rank_documents(rows: Sequence[dict]) -> list[dict]:
    """The rows most contaminated first: by flagged share, then mean score (both descending),
    then document id."""
    return sorted(rows, key=lambda r: (-r["rate"], -r["mean_score"], r["doc_id"]))


def plot_document_rates(rows: Sequence[dict], path: str | Path, title: str) -> Path:
    """Histogram of the documents' flagged shares (Shi et al. 2024, Figure 4), one colour per
    label when the documents carry labels; bins of width 0.05 over [0, 1].

    Raises:
        BlackboxMIAError: no rows.
    """
    if not rows:
        raise BlackboxMIAError("no documents to plot")
    groups = {"documents": [r["rate"] for r in rows if "label" not in r],
              "members (label 1)": [r["rate"] for r in rows if r.get("label") == 1],
              "non-members (label 0)": [r["rate"] for r in rows if r.get("label") == 0]}
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    bins = np.linspace(0, 1, 21)
    for name, rates in groups.items():
        if rates:
            ax.hist(rates, bins=bins, alpha=0.6, label=f"{name} (n={len(rates)})")
    ax.set_xlabel("contamination rate (share of chunks flagged)")
    ax.set_ylabel("documents")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return _save(fig, path)
