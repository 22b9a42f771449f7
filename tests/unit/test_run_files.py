"""What a run writes (issue 30, item 7): one file mode for every file, and figures whose titles
fit and whose legends never cover a curve (checked on the drawn figure's bounding boxes)."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from matplotlib.text import Text

from blackbox_mia.evaluation.plots import roc_figure
from blackbox_mia.io import new_file_mode, write_text_atomic

from .test_cli import invoke

LONG_PATH = "/work/main/cache/canary/6338e872951d/with/a/much/longer/path/than/the/figure/is/wide"


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_an_atomic_write_gets_the_mode_of_any_new_file(tmp_path):
    with open(tmp_path / "plain.txt", "w") as f:
        f.write("x")
    assert mode(write_text_atomic(tmp_path / "atomic.txt", "x")) == mode(tmp_path / "plain.txt") == new_file_mode()


def test_every_file_of_an_eval_run_has_one_mode(tiny_model_dir, tmp_path):
    data = tmp_path / "items.jsonl"
    texts = [f"Question: {name} has {n} apples and buys {n + 2} more." for n, name in enumerate(
        ["Tom", "Ann", "Bob", "Eve", "Max", "Ivy", "Sam", "Zed", "Kim", "Lou", "Ada", "Ray"])]
    data.write_text("".join(json.dumps({"id": f"t{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "run"
    result = invoke("eval", data, "--local", tiny_model_dir, "--scorers", "loss,zlib", "--n-boot", 10,
                    "--blind-folds", 2, "--out", out, "--quiet", "--cache-dir", tmp_path / "cache")
    assert result.exit_code == 0, result.output
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} >= {".json", ".md", ".png", ".jsonl"}
    assert {p.name: mode(p) for p in files} == {p.name: new_file_mode() for p in files}


@pytest.mark.parametrize("log_scale", [False, True])
def test_roc_titles_fit_and_the_legend_covers_no_curve(log_scale):
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(100), np.zeros(100)]
    names = ["loss", "zlib", "lowercase", "min_k", "min_k_pp", "pac", "min_k:k=10", "blind (TF-IDF)"]
    curves = {name: (labels, labels * (i / 4) + rng.normal(0, 1, 200)) for i, name in enumerate(names)}
    fig = roc_figure(curves, log_scale, dataset=f"canary:{LONG_PATH}", model=LONG_PATH)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    frame = fig.bbox
    ax = fig.axes[0]
    (title,) = [t.get_window_extent(renderer) for t in fig.findobj(Text) if t.get_text().startswith("ROC")]
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert frame.x0 <= title.x0 and title.x1 <= frame.x1 and title.y1 <= frame.y1  # the whole title is drawn
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0  # the whole legend is drawn
    assert box.y1 < ax.get_tightbbox(renderer).y0 + 1  # under the axes and their labels: it covers no curve
    assert len(legend.get_texts()) == len(names) + 1  # every curve and the chance line
