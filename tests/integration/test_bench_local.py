"""Smoke test of ``python -m benchmarks.bench_local`` at its smallest setting on CPU: the tiny
random GPT-2, two texts, one round, every setting in its own process, Min-K%++ statistics on."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_bench_local_smallest_setting(tmp_path):
    command = [sys.executable, "-m", "benchmarks.bench_local", "--json", "--models", "gpt2-tiny", "--n", "2",
               "--rounds", "1", "--threads", "1", "--vocab-stats", "--device", "cpu", "--work-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    runs = {r["setting"]: r for r in rows if r["setting"] not in ("peak", "summary")}
    assert set(runs) == {"batched", "single", "peer", "hf_dense"}
    assert not list(tmp_path.rglob("*.safetensors"))  # weights are built in each run, never saved
    tokens = runs["batched"]["tokens"]
    assert tokens > 50 and all(r["tokens"] == tokens and r["texts"] == 2 for r in runs.values())
    assert runs["single"]["max_abs_diff_vs_batched"] <= 1e-4 and runs["peer"]["max_abs_diff_vs_batched"] <= 1e-4
    # dense: one pass of full rows as wide as the longer text, one of the rest; single: one a text
    assert runs["hf_dense"]["forward_calls"] == 2 and runs["single"]["forward_calls"] == 2
    (summary,) = [r for r in rows if r["setting"] == "summary"]
    speed = {s: runs[s]["tokens_per_s"] for s in runs}
    assert {f"{s}_tokens_per_s": summary[f"{s}_tokens_per_s"] for s in runs} == {f"{s}_tokens_per_s": v for s, v in speed.items()}
    for other in ("single", "peer", "hf_dense"):
        assert summary[f"batched_over_{other}"] == round(speed["batched"] / speed[other], 2)
    assert summary["mfu"] is None and summary["peak_gpu_gb"] is None  # CPU
    for run in runs.values():  # a cold call, then the same call warm
        assert run["warm_tokens_per_s"] == pytest.approx(tokens / run["warm_seconds"], rel=1e-2)  # seconds rounded to ms
    # the two texts are 122 and 75 tokens (BOS included): fewer lengths than widths, one pass each
    assert runs["batched"]["shapes_per_call"] == runs["batched"]["forward_calls"] == 2
    assert runs["batched"]["padding_share"] == runs["single"]["padding_share"] == 0
    assert runs["single"]["shapes_per_call"] == 2 and runs["peer"]["padding_share"] is None
    assert summary["shapes_per_call"] == 2 and summary["padding_share"] == 0 and summary["text_set"] == "gsm8k"
    assert summary["batched_warm_tokens_per_s"] == runs["batched"]["warm_tokens_per_s"]
    (peak,) = [r for r in rows if r["setting"] == "peak"]
    assert summary["ceiling_over_single"] == round(peak["ceiling_tokens_per_s"] / speed["single"], 2)
