"""Plots and reports: files are written, JSON is strict, Markdown holds the tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from blackbox_mia.evaluation import (
    blind_baseline,
    calibrate,
    dataset_level_test,
    distribution_shift_verdict,
    estimate_prevalence,
    evaluate_by_length,
    evaluate_scores,
    plot_histogram,
    plot_roc,
    write_report,
)
from blackbox_mia.evaluation.plots import roc_figure, roc_title
from blackbox_mia.types import BlackboxMIAError

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def scored():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(60, int), np.zeros(60, int)]
    return {
        "loss": (labels, rng.normal(size=120) + 0.5 * labels),
        "min_k": (labels, rng.normal(size=120) + 1.5 * labels),
    }


@pytest.mark.parametrize("log_scale", [False, True])
def test_plot_roc_writes_png(tmp_path, scored, log_scale):
    path = plot_roc(scored, tmp_path / "figs" / "roc.png", log_scale=log_scale)
    assert path == tmp_path / "figs" / "roc.png"
    assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5000


@pytest.mark.parametrize("log_scale", [False, True])
def test_roc_names_what_it_shows_and_keeps_a_perfect_curve_inside_the_frame(log_scale):
    labels = np.array([1, 1, 0, 0, 0, 0])
    fig = roc_figure({"loss": (labels, np.array([6.0, 5, 4, 3, 2, 1]))}, log_scale=log_scale,
                     dataset="wikimia64", model="cache/canary/x")
    ax = fig.axes[0]
    kind = "ROC (log-log)" if log_scale else "ROC"
    assert fig.get_suptitle() == f"{kind}: loss\nwikimia64 · cache/canary/x"  # the figure's title (issue 30)
    curve = ax.get_lines()[0]
    assert curve.get_label() == "loss (AUC 1.000)"
    x, y = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert y.max() == 1.0 and x1 == y1 == pytest.approx(1.25 if log_scale else 1.02)  # TPR 1 below the top
    if log_scale:  # lo = half of min(1/4 non-members, 0.001); FPR 0 and TPR 0 drawn there, inside the frame
        assert (x0, y0) == (pytest.approx(4e-4), pytest.approx(4e-4))
        assert list(x) == pytest.approx([5e-4, 5e-4, 5e-4, 0.25, 0.5, 0.75, 1.0])
        assert list(y) == pytest.approx([5e-4, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    else:
        assert (x0, y0) == (pytest.approx(-0.02), pytest.approx(-0.02)) and x.min() == 0.0 > x0
    assert roc_title(["loss", "min_k"]) == "ROC: loss, min_k"


def test_plot_histogram_writes_png(tmp_path):
    rng = np.random.default_rng(1)
    path = plot_histogram(rng.normal(1, 1, 300), rng.normal(0, 1, 200), 1.6,
                          tmp_path / "a" / "b" / "hist.png", "GSM8K vs control")
    assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5000
    with pytest.raises(BlackboxMIAError):
        plot_histogram([], [1.0], None, tmp_path / "x.png", "t")
    with pytest.raises(BlackboxMIAError):
        plot_roc({}, tmp_path / "y.png")


def test_write_report(tmp_path, scored):
    labels = scored["loss"][0]
    metrics = {name: evaluate_scores(y, s, n_boot=100) for name, (y, s) in scored.items()}
    texts = [f"old text number {i} about steam" if y else f"new text {i} about apps"
             for i, y in enumerate(labels)]
    blind = blind_baseline(texts, labels, folds=5).to_dict()
    verdict = distribution_shift_verdict(blind["auc"], max(m["auc"] for m in metrics.values()))
    words = np.random.default_rng(2).integers(10, 300, len(labels))
    y, s = scored["min_k"]
    threshold = calibrate(s[y == 0], s[y == 1], target_fpr=0.05)
    rng = np.random.default_rng(3)
    bench = np.r_[rng.normal(1.5, 1, 30), rng.normal(0, 1, 70)]
    plots = {"ROC": plot_roc(scored, tmp_path / "out" / "roc.png")}
    report = {
        "title": "WikiMIA audit",
        "config": {"model": "tiny-gpt2", "scorers": ["loss", "min_k"], "seed": 0},
        "scorers": metrics,
        "blind_baseline": blind,
        "distribution_shift": verdict,
        "length_buckets": {"min_k": evaluate_by_length(y, s, words, n_boot=50)},
        "plots": plots,
        "sweep": {"gsm8k/min_k": {
            "threshold": threshold.to_dict(),
            "prevalence": {k: v for k, v in estimate_prevalence(bench, s[y == 0], s[y == 1]).items() if k != "threshold"},
            "dataset_test": dataset_level_test(bench, s[y == 0]),
        }},
        "notes": ["synthetic data"],
        "extra_info": {"a": np.float64(math.nan)},
    }
    json_path, md_path = write_report(report, tmp_path / "out", "wikimia")
    assert (json_path.name, md_path.name) == ("wikimia.json", "wikimia.md")

    text = json_path.read_text()
    data = json.loads(text)  # strict JSON: NaN became null
    assert "NaN" not in text and data["extra_info"] == {"a": None}
    assert list(data) == sorted(data)
    assert data["scorers"]["min_k"]["auc"] == pytest.approx(metrics["min_k"]["auc"])
    assert data["scorers"]["min_k"]["tpr_at_fpr"]["0.001"] is None  # 60 non-members

    md = md_path.read_text()
    m = metrics["min_k"]
    # 60 non-members: TPR@0.1% and TPR@1% are not measurable (1/60 > 1%).
    row = (f"| min_k | {m['auc']:.3f} [{m['auc_ci'][0]:.3f}, {m['auc_ci'][1]:.3f}] | n/a* | "
           f"n/a* | {m['tpr_at_fpr']['0.05']:.3f} | {m['tpr_at_fpr']['0.1']:.3f} | 60 | 60 |")
    assert row in md
    assert "\\* min_k, TPR@1%: not measurable" in md
    assert "| scorer | AUC [95% CI] | TPR@0.1% | TPR@1% | TPR@5% | TPR@10% |" in md
    assert "| loss |" in md
    assert "Blind baseline (TF-IDF" in md and f"AUC {blind['auc']:.3f}" in md
    assert verdict["message"] in md
    assert "| min_k | ≤32 |" in md or "| min_k | ≤64 |" in md
    assert "![ROC](roc.png)" in md
    prev = report["sweep"]["gsm8k/min_k"]["prevalence"]
    assert f"| {prev['flag_rate']:.3f} |" in md and f"{prev['estimate']:.3f} [" in md
    assert "## Contamination sweep" in md and "fpr (5%)" in md
    assert "## extra_info" in md and "- synthetic data" in md


def test_write_report_rejects_bad_stem(tmp_path):
    with pytest.raises(BlackboxMIAError):
        write_report({}, tmp_path, "a/b")
