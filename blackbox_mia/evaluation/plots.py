"""Figures for reports: ROC curves (linear and log-log), score histograms and heat maps.

Figures are built with ``matplotlib.figure.Figure`` and written by the Agg canvas: no pyplot
state, no window, safe in threads and on headless machines. The log-log ROC follows Carlini et
al. 2022, where the low-FPR region that matters for membership inference is visible.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..types import BlackboxMIAError
from .metrics import auc, check_binary, roc

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure

ROC_MARGIN = 0.02
"""Room around the unit square on linear ROC axes (a fraction of it), so a perfect curve (AUC
1.0), which runs along FPR = 0 and TPR = 1, is drawn inside the frame, not on it."""

TITLE_CHAR_WIDTH = 0.62
"""Width of a title character, as a fraction of the font size (DejaVu Sans, paths and names:
0.57 measured): with :data:`TITLE_WIDTH`, the budget :func:`fit_title` wraps a title line to."""

TITLE_WIDTH = 0.92  # share of the figure's width a title line may take

LEGEND_ROW_INCHES = 0.2  # height a figure gains per row of the legend under it

ROC_LOG_MARGIN = 1.25
"""The same room on log-log ROC axes, as a factor: the axes run from the lowest drawn rate
divided by it to 1 times it."""


def roc_title(scorers: Sequence[str], dataset: str | None = None, model: str | None = None,
              log_scale: bool = False) -> str:
    """A ROC figure's title naming what it shows: ``"ROC (log-log): loss, min_k"`` and, on a
    second line when given, ``"wikimia64 · cache/canary/x"`` (dataset · model)."""
    kind = "ROC (log-log)" if log_scale else "ROC"
    audited = " · ".join(part for part in (dataset, model) if part)
    return f"{kind}: {', '.join(scorers)}" + (f"\n{audited}" if audited else "")


def roc_figure(
    curves: Mapping[str, tuple],
    log_scale: bool = False,
    title: str | None = None,
    *,
    dataset: str | None = None,
    model: str | None = None,
) -> Figure:
    """One ROC curve per scorer, with its AUC in the legend and the chance line.

    Args:
        curves: ``{name: (labels, scores)}``, each of shape (n,) (1 = member; higher score =
            member).
        log_scale: False → linear axes on [0, 1]; True → log-log axes (Carlini et al. 2022),
            rates from ``lo`` = half of min(1/(largest non-member count), 0.001) to 1. Points at
            FPR or TPR 0 are drawn at ``lo``, so a curve's rise from 0 stays visible.
        title: the figure's title (default :func:`roc_title` of the curves, ``dataset`` and
            ``model``).
        dataset, model: what was audited, named in the default title.

    The axes leave room around the drawn rates (:data:`ROC_MARGIN`, :data:`ROC_LOG_MARGIN`): a
    curve at AUC 1.0 is drawn inside the frame, not on it.

    Raises:
        BlackboxMIAError: no curves, or bad labels/scores (see metrics.check_binary).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not curves:
        raise BlackboxMIAError("plot_roc needs at least one curve")
    checked = {name: check_binary(labels, scores) for name, (labels, scores) in curves.items()}
    legend_rows = -(-(len(checked) + 1) // 2)  # two columns: the curves and the chance line
    fig = Figure(figsize=(5, 5 + LEGEND_ROW_INCHES * legend_rows), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    lo = min(min(1.0 / int((y == 0).sum()) for y, _ in checked.values()), 1e-3) / 2
    for name, (y, s) in checked.items():
        fpr, tpr, _ = roc(y, s)
        if log_scale:
            fpr, tpr = np.maximum(fpr, lo), np.maximum(tpr, lo)
        ax.plot(fpr, tpr, lw=1.5, label=f"{name} (AUC {auc(y, s):.3f})")
    if log_scale:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo / ROC_LOG_MARGIN, ROC_LOG_MARGIN)
        ax.set_ylim(lo / ROC_LOG_MARGIN, ROC_LOG_MARGIN)
        grid = np.logspace(np.log10(lo), 0, 100)
        ax.plot(grid, grid, "k--", lw=0.8, label="chance")
    else:
        ax.set_xlim(-ROC_MARGIN, 1 + ROC_MARGIN)
        ax.set_ylim(-ROC_MARGIN, 1 + ROC_MARGIN)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="chance")
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    fit_title(fig, title or roc_title(list(curves), dataset, model, log_scale))
    legend_below(ax)
    return fig


def plot_roc(
    curves: Mapping[str, tuple],
    path: str | Path,
    log_scale: bool = False,
    title: str | None = None,
    *,
    dataset: str | None = None,
    model: str | None = None,
) -> Path:
    """Write :func:`roc_figure` (same arguments) to ``path`` (PNG by extension; parent folders
    are created).

    Returns:
        ``path`` as a Path.

    Raises:
        BlackboxMIAError: no curves, or bad labels/scores (see metrics.check_binary).
    """
    return save_figure(roc_figure(curves, log_scale, title, dataset=dataset, model=model), path)


def plot_histogram(
    benchmark_scores,
    control_scores,
    threshold: float | None,
    path: str | Path,
    title: str = "Score distributions",
    labels: tuple[str, str] = ("benchmark", "control"),
) -> Path:
    """Overlaid density histograms of benchmark and control scores, with the threshold.

    Args:
        benchmark_scores: shape (n_b,), finite scores.
        control_scores: shape (n_c,), finite scores (known non-members).
        threshold: drawn as a vertical dashed line (flag = score > threshold); None or a
            non-finite value draws none.
        path: output image; parent folders are created.
        title: figure title.
        labels: legend names of the two sets.

    Returns:
        ``path`` as a Path.

    Raises:
        BlackboxMIAError: an empty or non-finite score set.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sets = []
    for name, values in zip(labels, (benchmark_scores, control_scores)):
        arr = np.asarray(values, dtype=np.float64).ravel()
        if arr.size == 0 or not np.isfinite(arr).all():
            raise BlackboxMIAError(f"{name} scores must be non-empty and finite")
        sets.append((name, arr))
    bins = np.histogram_bin_edges(np.concatenate([a for _, a in sets]), bins="auto")
    if len(bins) > 61:
        bins = np.linspace(bins[0], bins[-1], 61)
    fig = Figure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, arr in sets:
        ax.hist(arr, bins=bins, density=True, alpha=0.5, label=f"{name} (n={arr.size})")
    if threshold is not None and np.isfinite(threshold):
        ax.axvline(threshold, color="k", ls="--", lw=1, label=f"threshold {threshold:.4g}")
    ax.set_xlabel("score (higher = more likely member)")
    ax.set_ylabel("density")
    fit_title(fig, title)
    legend_below(ax)
    return save_figure(fig, path)


def plot_heatmap(
    values,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    path: str | Path,
    title: str = "",
    xlabel: str = "",
    colorbar: str = "",
    limits: tuple[float, float] = (0.0, 1.0),
) -> Path:
    """A grid of values as coloured cells, each written in its cell (3 decimals; "n/a" for NaN).

    Args:
        values: shape (n_rows, n_cols), e.g. AUC of each scorer (row) at each prompt length
            (column).
        row_labels: n_rows names (y axis, top to bottom).
        col_labels: n_cols names (x axis, left to right).
        path: output image; parent folders are created.
        title, xlabel: figure title and x-axis label.
        colorbar: the colour bar's label.
        limits: the colour scale's (low, high) (AUC: 0 to 1).

    Returns:
        ``path`` as a Path.

    Raises:
        BlackboxMIAError: ``values`` not 2-D and non-empty, or labels of another count.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    grid = np.asarray(values, dtype=np.float64)
    if grid.ndim != 2 or grid.size == 0:
        raise BlackboxMIAError(f"a heat map needs a non-empty 2-D grid of values, got shape {grid.shape}")
    if grid.shape != (len(row_labels), len(col_labels)):
        raise BlackboxMIAError(f"{grid.shape} values for {len(row_labels)} row and {len(col_labels)} column labels")
    fig = Figure(figsize=(1.2 + 1.0 * grid.shape[1] + 0.05 * max(map(len, row_labels)), 1.2 + 0.5 * grid.shape[0]),
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=limits[0], vmax=limits[1], aspect="auto")
    middle = (limits[0] + limits[1]) / 2
    for (i, j), value in np.ndenumerate(grid):
        text = "n/a" if not np.isfinite(value) else f"{value:.3f}"
        ax.text(j, i, text, ha="center", va="center", fontsize="small",
                color="black" if np.isfinite(value) and value > middle else "white")
    ax.set_xticks(range(len(col_labels)), list(col_labels))
    ax.set_yticks(range(len(row_labels)), list(row_labels))
    ax.set_xlabel(xlabel)
    fit_title(fig, title)
    fig.colorbar(image, ax=ax, label=colorbar)
    return save_figure(fig, path)


def fit_title(fig, title: str, fontsize: str | float = "medium"):
    """Set ``title`` as the figure's title (centred on the figure, not on the axes), each line
    wrapped to :data:`TITLE_WIDTH` of the figure's width at :data:`TITLE_CHAR_WIDTH` of the font
    size per character, so a long dataset or model path is wrapped, never cut.

    Returns:
        The title's ``matplotlib.text.Text``.
    """
    from matplotlib.font_manager import FontProperties

    points = FontProperties(size=fontsize).get_size_in_points()
    chars = max(20, int(TITLE_WIDTH * fig.get_figwidth() * 72 / (points * TITLE_CHAR_WIDTH)))
    lines = [textwrap.fill(line, chars, break_long_words=True, break_on_hyphens=False) for line in title.split("\n")]
    return fig.suptitle("\n".join(lines), fontsize=fontsize)


def legend_below(ax) -> None:
    """The legend of ``ax`` under the whole figure, outside every plotting area: it never covers
    a curve (two columns when there are more than three entries). The figure must use the
    constrained layout, which makes room for it."""
    handles, labels = ax.get_legend_handles_labels()
    ax.figure.legend(handles, labels, loc="outside lower center", ncol=2 if len(labels) > 3 else 1,
                     fontsize="small", frameon=False)


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` (constrained layout) to ``path`` (parents created), cropped to what is drawn:
    titles, labels and a legend outside the axes all lie inside the image."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", pad_inches=0.1)
    return path
