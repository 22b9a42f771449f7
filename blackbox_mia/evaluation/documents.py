"""Per-document contamination rates (Shi et al. 2024, §5): the share of a document's chunks
flagged by a calibrated threshold, its Wilson interval, the rate corrected for the threshold's
FPR and TPR with a bootstrap interval that carries the uncertainty of all three
(:class:`CalibrationBootstrap`), and the histogram of rates over documents (their Figure 4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..types import BlackboxMIAError
from .calibration import Threshold
from .plots import save_figure, fit_title, legend_below
from .prevalence import _rogan_gladen, corrected_prevalence

JEFFREYS_PRIOR = 0.5  # Beta(½, ½): the prior of the Jeffreys interval of a proportion


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
    from scipy import stats

    if n < 1 or not 0 <= flagged <= n or not 0 < alpha < 1:
        raise BlackboxMIAError(f"need 0 <= flagged <= n, n >= 1 and alpha in (0, 1); got {flagged}, {n}, {alpha}")
    z = float(stats.norm.ppf(1 - alpha / 2))
    p = flagged / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    # at p̂ = 0 (or 1) the bound is exactly 0 (or 1); floating point leaves ~1e-17 there
    low = 0.0 if flagged == 0 else max(0.0, (centre - half) / denom)
    high = 1.0 if flagged == n else min(1.0, (centre + half) / denom)
    return low, high


class CalibrationBootstrap:
    """Bootstrap resamples of a threshold's FPR and TPR, for the corrected rates' intervals.

    The validation documents are resampled with replacement within each label (a cluster
    bootstrap: the chunks of one document are not independent), and each resample's FPR
    (TPR) is the flagged share of the drawn non-member (member) documents' chunks, pooled.
    The same ``n_boot`` resamples serve every document, so the documents' intervals share the
    calibration's uncertainty as their point estimates share the threshold.

    Args:
        flagged: shape (n_docs,), flagged chunks per validation document.
        scored: shape (n_docs,), scored chunks per validation document (each >= 1).
        labels: shape (n_docs,), 1 member, 0 non-member (both present).
        n_boot: resamples (>= 1).
        seed: seed of the resamples and of :meth:`corrected_ci`'s draws.

    Raises:
        BlackboxMIAError: mismatched shapes, a document without chunks or with more flagged
            than scored, labels not 0/1 or one class missing, ``n_boot`` < 1.
    """

    def __init__(self, flagged: Sequence[int], scored: Sequence[int], labels: Sequence[int], n_boot: int,
                 seed: int = 0):
        flagged, scored, labels = (np.asarray(a, dtype=np.int64) for a in (flagged, scored, labels))
        if not flagged.shape == scored.shape == labels.shape or flagged.ndim != 1:
            raise BlackboxMIAError("flagged, scored and labels need one value per validation document")
        if (scored < 1).any() or (flagged < 0).any() or (flagged > scored).any():
            raise BlackboxMIAError("every validation document needs 0 <= flagged <= scored and scored >= 1")
        if set(labels.tolist()) != {0, 1}:
            raise BlackboxMIAError("the calibration bootstrap needs member (1) and non-member (0) documents")
        if n_boot < 1:
            raise BlackboxMIAError(f"n_boot must be >= 1, got {n_boot}")
        self.n_boot = n_boot
        self._rng = np.random.default_rng(seed)
        self.fpr, self.tpr = (self._pooled(flagged[labels == c], scored[labels == c]) for c in (0, 1))

    def _pooled(self, flagged: np.ndarray, scored: np.ndarray) -> np.ndarray:
        """Shape (n_boot,): the flagged share of the chunks of documents drawn with replacement."""
        drawn = self._rng.integers(0, flagged.size, (self.n_boot, flagged.size))
        return flagged[drawn].sum(axis=1) / scored[drawn].sum(axis=1)

    def corrected_ci(self, flagged: int, scored: int, alpha: float = 0.05) -> list[float] | None:
        """Percentile interval of one document's corrected rate: each resample draws the
        document's flagged share from Jeffreys' Beta(flagged + ½, scored − flagged + ½) (not
        the binomial bootstrap, which is degenerate at 0 or all chunks flagged; the Jeffreys
        interval covers well at small n: Brown, Cai & DasGupta 2001, §4.1.2), pairs it with
        one calibration resample, and applies Rogan–Gladen clipped to [0, 1]; resamples with
        TPR <= FPR are dropped.

        Returns:
            ``[low, high]`` covering 1 − alpha, or None when every resample has TPR <= FPR.

        Raises:
            BlackboxMIAError: counts out of range, alpha outside (0, 1).
        """
        if scored < 1 or not 0 <= flagged <= scored or not 0 < alpha < 1:
            raise BlackboxMIAError(f"need 0 <= flagged <= scored, scored >= 1 and alpha in (0, 1); "
                                   f"got {flagged}, {scored}, {alpha}")
        rate = self._rng.beta(flagged + JEFFREYS_PRIOR, scored - flagged + JEFFREYS_PRIOR, self.n_boot)
        boot = _rogan_gladen(rate, self.fpr, self.tpr)
        boot = boot[np.isfinite(boot)]
        if not boot.size:
            return None
        lo, hi = np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        return [float(lo), float(hi)]


def document_rate(doc_id: str, n_chunks: int, scores: Sequence[float], threshold: Threshold,
                  label: int | None = None, bootstrap: CalibrationBootstrap | None = None) -> dict:
    """One document's row: chunks in the document and scored, flagged count and share (flag =
    score > threshold), its Wilson 95% CI, the Rogan–Gladen rate corrected for the threshold's
    FPR and TPR (None when the TPR is unknown or not above the FPR) and its bootstrap 95% CI
    (``corrected_ci``; None without ``bootstrap`` or a corrected rate).

    Args:
        doc_id: the document.
        n_chunks: its chunks before sampling.
        scores: shape (n_scored,), the scored chunks' scores (n_scored >= 1).
        threshold: the calibrated threshold (``realised_fpr``/``tpr`` on the validation chunks).
        label: the document's label (1 member, 0 non-member) when given.
        bootstrap: resamples of the threshold's FPR and TPR on the validation documents.

    Raises:
        BlackboxMIAError: no scores.
    """
    flags = threshold.flag(scores)
    n, k = int(flags.size), int(flags.sum())
    lo, hi = wilson_interval(k, n)
    tpr = threshold.tpr
    fpr = threshold.realised_fpr
    corrected = None if tpr is None or tpr <= fpr else corrected_prevalence(k / n, fpr, tpr)
    corrected_ci = None if corrected is None or bootstrap is None else bootstrap.corrected_ci(k, n)
    row = {"doc_id": doc_id, "n_chunks": n_chunks, "n_scored": n, "n_flagged": k, "rate": k / n,
           "rate_ci": [lo, hi], "corrected": corrected, "corrected_ci": corrected_ci,
           "mean_score": float(np.mean(scores))}
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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not rows:
        raise BlackboxMIAError("no documents to plot")
    groups = {"documents": [r["rate"] for r in rows if "label" not in r],
              "members (label 1)": [r["rate"] for r in rows if r.get("label") == 1],
              "non-members (label 0)": [r["rate"] for r in rows if r.get("label") == 0]}
    fig = Figure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    bins = np.linspace(0, 1, 21)
    for name, rates in groups.items():
        if rates:
            ax.hist(rates, bins=bins, alpha=0.6, label=f"{name} (n={len(rates)})")
    ax.set_xlabel("contamination rate (share of chunks flagged)")
    ax.set_ylabel("documents")
    fit_title(fig, title)
    legend_below(ax)
    return save_figure(fig, path)
