"""Each benchmark that drives ``bbmia`` against its own server runs in its smallest setting, with
the spend guard biting at every request (its limit patched to 0 in this process and, through a
``sitecustomize``, in every Python process the benchmark starts): a benchmark that forgets
``--yes`` / ``yes=True`` stops with "refusing to start" here instead of when someone reproduces
its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blackbox_mia.spend import guard

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def guard_bites(tmp_path, monkeypatch):
    """The spend guard refuses any run that sends a request, here and in child processes."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import blackbox_mia.spend.guard as g\ng.GUARD_REQUESTS = 0\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(guard, "GUARD_REQUESTS", 0)


def benchmark(module: str, *args) -> list[dict]:
    """``python -m benchmarks.<module> ARGS`` from the repository root; its JSON lines."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPENAI_API_KEY": "none", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refusing to start" not in done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_the_guard_bites_in_a_child_process(guard_bites):
    done = subprocess.run([sys.executable, "-c", "import blackbox_mia.spend.guard as g; print(g.GUARD_REQUESTS)"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "0"


@pytest.mark.parametrize("command", ["score", "probe"])
def test_bench_throughput_runs_pass_yes(command, tmp_path):
    """Its ``bbmia`` runs past the guard (they run end to end in :func:`test_bench_blackbox_smoke`)."""
    from benchmarks.bench_throughput import score_command

    cmd = score_command("http://127.0.0.1:1/v1", tmp_path, tmp_path, tmp_path / "out.jsonl", 2, 2, command)
    assert cmd[1] == command and "--yes" in cmd


@pytest.mark.slow
def test_bench_blackbox_smoke(guard_bites, memorizing_canary):
    """Every line, and bench_throughput's concurrency line (``bbmia score`` runs in child processes)."""
    lines = benchmark("bench_blackbox", "--smoke", "--canary", memorizing_canary, "--json")
    by_name = {line["strategy"]: line for line in lines}
    assert {"forced", "postbias", "bisect", "run", "run-memorized", "concurrency-2"} <= set(by_name)
    assert not [line for line in lines if "skipped" in line]
    assert by_name["forced"]["texts"] == 1 and by_name["concurrency-2"]["requests"] > 0


@pytest.mark.slow
def test_validate_blackbox_smallest_setting(guard_bites, memorizing_canary):
    lines = benchmark("validate_blackbox", memorizing_canary, "--n", "1", "--modes", "raw-echo", "--scorers", "loss")
    assert lines and all(line.get("n", 1) == 1 for line in lines)
