"""A backend kind from outside the package (issue 44): two files (tests/kinds/uniform_kind.py
and tests/kinds/uniform_backend.py) that an installed distribution names in the
``blackbox_mia.backends`` entry-point group; the command line then builds it from ``--target``,
with its own flag and range, and no line of the package names it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "blackbox_mia"


def _bbmia(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``bbmia ARGS`` in a fresh interpreter that sees the distribution installed in ``site``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "BBMIA_CACHE_DIR": str(cwd / "cache"),
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", "from blackbox_mia.cli import app; app()", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _install(site: Path) -> None:
    """A distribution's metadata naming the test kind's module as an entry point (what ``pip
    install`` of a package declaring ``[project.entry-points."blackbox_mia.backends"]`` writes)."""
    info = site / "bbmia_uniform-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bbmia-uniform\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[blackbox_mia.backends]\nuniform = tests.kinds.uniform_kind\n")


def test_a_kind_outside_the_package_is_usable_from_the_command_line(tmp_path):
    site = tmp_path / "site"
    _install(site)
    texts = ["Tom has 3 apples.", "Sara reads 12 pages."]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))

    result = _bbmia(site, tmp_path, "score", "items.jsonl", "--target", "uniform:u", "--uniform-vocab", "512",
                    "--scorers", "loss", "--out", "out.jsonl")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # every byte after the first (context, no BOS) has log p = -ln 512 nats: the loss score is that mean
    assert [r["n_tokens"] for r in rows] == [len(t.encode()) - 1 for t in texts]
    assert all(abs(r["scores"]["loss"] - -math.log(512)) < 1e-12 for r in rows)  # -6.2383 nats

    refused = _bbmia(site, tmp_path, "score", "items.jsonl", "--target", "uniform:u", "--uniform-vocab", "10",
                     "--out", "o.jsonl")
    assert refused.returncode == 2 and refused.stderr.strip() == "error: --uniform-vocab must be an integer >= 256, got 10"
    queried = _bbmia(site, tmp_path, "score", "items.jsonl", "--target", "uniform:u?vocab=5", "--out", "o.jsonl")
    assert queried.returncode == 2 and "uniform: option vocab must be an integer >= 256, got 5" in queried.stderr
    helped = _bbmia(site, tmp_path, "score", "--help")
    assert "--uniform-vocab" in helped.stdout and "vocabulary of the uniform model" in helped.stdout

    without = _bbmia(tmp_path / "empty", tmp_path, "score", "items.jsonl", "--target", "uniform:u", "--out", "o.jsonl")
    assert without.returncode == 2 and "unknown backend kind 'uniform'" in without.stderr  # not installed: not known


def test_the_package_does_not_name_the_test_kind():
    assert not [p for p in PACKAGE.rglob("*.py") if "uniform_kind" in p.read_text(encoding="utf-8")]
