"""Text-only audits end to end on a tiny canary: ``bbmia eval`` with SaMIA and CDD through
``bbmia serve --no-logprobs`` scores every text, a rerun sends nothing (every answer cached and
the same rows), ``--dry-run`` counts exactly the requests sent, and ``--methods auto`` routes an endpoint
without log-probs to the text-only tests (eval and sweep). Membership signal itself is measured
by studies/text_only_study.py (docs/text_only.md): on this tiny canary SaMIA at the paper's
temperature 1.0 with 4 samples showed none (AUC CI lower end 0.34 on 20 + 20 items)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.cli import evaluate  # noqa: F401  (registers the commands)
from blackbox_mia.cli.app import app
from blackbox_mia.emulator import ServerConfig, serve_in_background

runner = CliRunner()
SCORERS = "samia:n=4,cdd:n=4"


@pytest.fixture(scope="module")
def served(memorizing_canary):
    local = LocalBackend(LocalConfig(str(memorizing_canary)))
    with serve_in_background(ServerConfig(str(memorizing_canary), logprobs=False), backend=local) as url:
        yield url
    local.close()


def balanced(canary, tmp_path, n=8):
    rows = [json.loads(line) for line in (canary / "canary_items.jsonl").read_text().splitlines()]
    chosen = [r for r in rows if r["label"] == 1][:n] + [r for r in rows if r["label"] == 0][:n]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


def invoke(*args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def api(url, canary, cache):
    return ["--base-url", url, "--model", str(canary), "--tokenizer", str(canary), "--cache-dir", str(cache),
            "--context-tokens", "64"]  # the canary's block size


def test_eval_through_a_generation_only_endpoint(memorizing_canary, served, tmp_path):
    data = balanced(memorizing_canary, tmp_path)
    base = ["eval", str(data), "--scorers", SCORERS, "--n-boot", "50", "--quiet"]
    white = invoke(*base, "--local", str(memorizing_canary), "--out", str(tmp_path / "local"))
    endpoint = api(served, memorizing_canary, tmp_path / "cache")
    dry = invoke(*base, *endpoint, "--out", str(tmp_path / "api"), "--dry-run")
    black = invoke(*base, *endpoint, "--out", str(tmp_path / "api"))
    # both score every text (the emulator samples with its own seeded generator, so sampled
    # answers are not the local backend's: only the row structure is compared)
    assert set(black["auc"]) == set(white["auc"]) == {"samia:n=4", "cdd:n=4"}
    rows = [json.loads(line) for line in (tmp_path / "api" / "scores.jsonl").read_text().splitlines()]
    local_rows = [json.loads(line) for line in (tmp_path / "local" / "scores.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in local_rows] and {r["n_tokens"] for r in rows} == {0}
    assert all(0 <= r["scores"]["samia:n=4"] <= 1 and 0 <= r["scores"]["cdd:n=4"] <= 1 for r in rows)
    # --dry-run counts what is sent: per text 4 SaMIA samples, CDD's greedy output and 4 samples
    sent = black["usage"]["total"]["requests"]
    assert dry["estimate"]["total"]["all"]["requests"] == sent == 16 * (4 + 1 + 4)
    again = invoke(*base, *endpoint, "--out", str(tmp_path / "api"), "--overwrite")
    rescored = [json.loads(line) for line in (tmp_path / "api" / "scores.jsonl").read_text().splitlines()]
    assert rescored == rows and again["auc"] == black["auc"]  # every answer from the cache
    assert "usage" in again and again["usage"]["total"]["requests"] == 0
    assert again["usage"]["total"]["cache_hits"] == sent


def test_methods_auto_routes_to_text_only_tests(memorizing_canary, served, tmp_path):
    data = balanced(memorizing_canary, tmp_path)
    endpoint = api(served, memorizing_canary, tmp_path / "cache")
    evaluated = invoke("eval", str(data), *endpoint, "--methods", "auto", "--n-boot", "20", "--quiet",
                       "--out", str(tmp_path / "e"))
    assert set(evaluated["auc"]) == {"samia", "cdd"} and evaluated["route"]["methods"] == "text-only"
    assert "no usable log-probs" in evaluated["route"]["reason"]
    swept = invoke("sweep", str(data), *endpoint, "--methods", "auto", "--calibration", str(data),
                   "--calibration-fraction", "0.5", "--quiet", "--out", str(tmp_path / "s"))
    assert swept["route"]["methods"] == "text-only" and swept["roles"]["swept"] == 8
    # without --methods the log-prob default is refused with the offer of the text-only tests
    result = runner.invoke(app, ["eval", str(data), *endpoint, "--quiet", "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "--methods auto runs them" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["eval", str(data), *endpoint, "--methods", "nope", "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "--methods must be one of" in result.output
    # a white-box target keeps its log-prob scorers
    local = invoke("eval", str(data), "--local", str(memorizing_canary), "--methods", "auto", "--n-boot", "20",
                   "--quiet", "--out", str(tmp_path / "w"))
    assert local["route"]["methods"] == "logprobs" and "samia" not in local["auc"]
