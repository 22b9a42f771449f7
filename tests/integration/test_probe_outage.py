"""A short outage during the capability probe (every answer invalid: NaN log-probs, through the
fault proxy in front of ``bbmia serve``) is not saved as the endpoint's verdict: the run stops
with one line that names no text-only way out, nothing is cached, and once the endpoint has
recovered the same command probes again and scores."""

from __future__ import annotations

import dataclasses
import json

from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.emulator import ServerConfig, serve_in_background
from tests.tools.fault_proxy import FaultConfig, proxy_in_background

runner = CliRunner()


def score(tmp_path, model, url: str, retries: int, *more: str, command: str = "score"):
    """``bbmia score`` (or ``command``) of ``tmp_path/texts.jsonl`` through ``url``, caching in
    ``tmp_path/cache``."""
    args = [command, str(tmp_path / "texts.jsonl"), "--target", f"api:{model}@{url}?max_retries={retries}",
            "--tokenizer", str(model), "--scorers", "loss", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(tmp_path / "scores.jsonl"), *more]
    return runner.invoke(app, args, env={"OPENAI_BASE_URL": None})


def test_a_probe_whose_answers_are_all_invalid_saves_nothing_and_reruns(tiny_model_dir, tmp_path):
    rows = [{"text": "Tom has 3 apples.", "label": 0}, {"text": "Ivy walks 4 miles.", "label": 1}]
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    cache = tmp_path / "cache"
    with serve_in_background(ServerConfig(str(tiny_model_dir))) as upstream:
        with proxy_in_background(FaultConfig(upstream=upstream, rate=1.0, classes=("nan",))) as proxy:
            failed = score(tmp_path, tiny_model_dir, proxy.base_url, 1, command="eval")  # offers --methods when it may
            assert not list(cache.glob("capabilities/*.json"))  # no verdict saved
            proxy.config = dataclasses.replace(proxy.config, rate=0.0)  # the endpoint recovers
            sent_before = proxy.stats.requests
            recovered = score(tmp_path, tiny_model_dir, proxy.base_url, 1)
            sent = proxy.stats.requests - sent_before
    assert failed.exit_code == 2 and "Traceback" not in failed.output, failed.output
    assert "nothing saved" in failed.output and "--methods" not in failed.output, failed.output
    assert recovered.exit_code == 0, recovered.output
    assert sent > 0 and list(cache.glob("capabilities/*.json"))
    rows = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["scores"]["loss"] is not None for row in rows)


def test_a_cached_no_logprobs_verdict_names_its_record_and_reprobe(tiny_model_dir, tmp_path):
    """Answers without log-probs look like a server that has none: that verdict is saved, and the
    error names where, and ``--reprobe``, which probes the recovered endpoint again."""
    (tmp_path / "texts.jsonl").write_text(json.dumps({"text": "Tom has 3 apples."}) + "\n")
    cache = tmp_path / "cache"
    with serve_in_background(ServerConfig(str(tiny_model_dir))) as upstream:
        with proxy_in_background(FaultConfig(upstream=upstream, rate=1.0, classes=("no_logprobs",))) as proxy:
            failed = score(tmp_path, tiny_model_dir, proxy.base_url, 0)
            proxy.config = dataclasses.replace(proxy.config, rate=0.0)
            sent_before = proxy.stats.requests
            cached = score(tmp_path, tiny_model_dir, proxy.base_url, 0)
            assert proxy.stats.requests == sent_before  # the saved verdict: nothing sent
            reprobed = score(tmp_path, tiny_model_dir, proxy.base_url, 0, "--reprobe")
    (record,) = cache.glob("capabilities/*.json")
    for result in (failed, cached):
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "absolute" in result.output and str(record) in result.output and "--reprobe" in result.output
    assert reprobed.exit_code == 0, reprobed.output
