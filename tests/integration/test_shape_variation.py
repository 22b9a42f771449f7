"""Values that move with the request's shape (llama.cpp's batch-dependent quantized kernels),
emulated by `bbmia serve --shape-noise`: identical requests agree, so repeating a request shows
nothing, but the probe reads known values in other shapes, reports the variation in the
capability record and the reading line, and every bound is widened by it: each white-box value
lies within its bounds, and an exact value's bounds are no wider than twice the variation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.probe_noise import SHAPE_MARGIN
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.cli import app
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..conftest import gsm8k_questions

SHAPE_NOISE = 0.05  # nats: each logit of a generated position moves by up to this with the prompt's length
EPSILON = 0.01


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


@pytest.fixture(scope="module")
def url(local, peaked_model_dir):
    config = ServerConfig(str(peaked_model_dir), echo=False, shape_noise=SHAPE_NOISE)
    with serve_in_background(config, backend=local) as url:
        yield url


def backend_for(url, model_dir, cache_dir, strategy):
    config = ApiConfig(base_url=url, model=str(model_dir), max_retries=1, backoff_base_s=0.01)
    return ApiBackend(config, tokenizer=str(model_dir), tracker=TrackerConfig(strategy=strategy, epsilon=EPSILON),
                      cache_dir=cache_dir)


def test_the_probe_measures_the_shape_variation(url, peaked_model_dir, tmp_path):
    backend = backend_for(url, peaked_model_dir, tmp_path, "auto")
    caps = backend.capabilities
    backend.close()
    assert caps.jitter == 0.0 and caps.evidence["repeat_noise"]["max_abs_diff"] == 0.0  # identical requests agree
    shape = caps.evidence["shape"]
    # a logit moves by at most SHAPE_NOISE, so a log-prob by at most twice that, and two reads by twice again
    assert 0 < shape["beyond_rounding"] <= 4 * SHAPE_NOISE
    assert caps.shape_variation == pytest.approx(SHAPE_MARGIN * shape["beyond_rounding"])
    assert caps.tolerance >= caps.shape_variation
    assert f"values move with the request's shape (±{caps.shape_variation:.3g} nats)" in caps.reading()
    assert caps.run_reading and caps.forced_readout  # the checks allow for the variation


@pytest.mark.parametrize("strategy", ["auto", "forced", "bisect"])
def test_every_value_within_bounds_widened_by_the_variation(strategy, url, local, peaked_model_dir, tmp_path):
    texts = [q[:40] for q in gsm8k_questions(3, split="test")]
    texts = texts[:1] if strategy == "bisect" else texts  # bisection costs ~11 requests a token
    backend = backend_for(url, peaked_model_dir, tmp_path, strategy)
    black = backend.logprobs(texts)
    shape = backend.capabilities.shape_variation
    backend.close()
    for b, w in zip(black, local.logprobs(texts)):
        assert b.token_ids.tolist() == w.token_ids.tolist()
        assert np.all(b.lower <= w.logprobs) and np.all(w.logprobs <= b.upper), strategy
        exact = [s not in ("bisect", "bisect~", "topn", "unsendable", "unbiasable") for s in b.strategies]
        width = (b.upper - b.lower)[exact]
        assert np.all(width <= 2 * shape + 1e-9) and np.all(width >= 2 * shape - 1e-9), strategy


def test_scores_are_null_at_the_default_tolerance_and_bounded_at_a_wider_one(url, local, peaked_model_dir, tmp_path):
    """``--score-tolerance``: at the default (0.05 nats) a score whose log-prob means carry the
    variation's ±bounds is null with its interval; at a tolerance above twice the variation it is
    a number, its interval beside it holds the white-box score, and the rerun pays nothing."""
    texts = [q[:40] for q in gsm8k_questions(2, split="test")]
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))

    def score(*more: str):
        args = ["score", str(tmp_path / "texts.jsonl"), "--target", f"api:{peaked_model_dir}@{url}",
                "--tokenizer", str(peaked_model_dir), "--scorers", "loss,min_k", "--cache-dir", str(tmp_path / "cache"),
                "--out", str(tmp_path / "scores.jsonl"), "--json", *more]
        result = CliRunner().invoke(app, args, env={"OPENAI_BASE_URL": None})
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
        return rows, json.loads(result.output.strip().splitlines()[-1])

    strict, _ = score()
    assert all(row["scores"]["loss"] is None and "tolerance 0.05" in row["unscored"]["loss"] for row in strict)
    caps = json.loads(next((tmp_path / "cache").glob("capabilities/*.json")).read_text())
    shape = caps["shape_variation"]
    wide, summary = score("--score-tolerance", f"{2 * shape + EPSILON:.4f}", "--overwrite")
    assert summary.get("usage", {}).get("requests", 0) == 0  # every answer came from the cache
    white = local.logprobs(texts)
    for row, w in zip(wide, white):
        loss = float(np.mean(w.logprobs))  # the loss score: mean log-prob (higher = member)
        lower, upper = row["score_bounds"]["loss"]
        assert row["scores"]["loss"] is not None and lower <= loss <= upper and upper - lower <= 2 * shape + 1e-9
        assert "loss" not in row.get("unscored", {})
