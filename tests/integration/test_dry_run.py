"""``--dry-run`` sends no scoring or generation request, in every command that has it: the server's
POST requests are counted by a fault-free proxy (``bbmia serve`` behind it)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.cli import app
from blackbox_mia.emulator import ServerConfig, serve_in_background
from tests.tools.fault_proxy import FaultConfig, proxy_in_background

from ..conftest import gsm8k_questions

TEXTS = ["Tom has 3 red apples and eats one.", "A robe takes 2 bolts of blue fiber.",
         "Zed sells 5 kites at the fair.", "Ivy walks 4 miles to school daily."]


@pytest.fixture(scope="module")
def proxy(tiny_model_dir):
    """The emulator behind a proxy that injects nothing and counts every POST."""
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        with proxy_in_background(FaultConfig(upstream=url, rate=0.0)) as counting:
            yield counting


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("dry")
    labelled = root / "items.jsonl"
    labelled.write_text("".join(json.dumps({"id": f"t{i}", "text": t, "label": int(i < 2)}) + "\n"
                                for i, t in enumerate(TEXTS)))
    docs = root / "docs"
    docs.mkdir()
    for i, question in enumerate(gsm8k_questions(3)):
        (docs / f"doc{i}.txt").write_text(question)
    calibration = root / "calibration.jsonl"
    calibration.write_text("".join(json.dumps({"doc_id": f"c{i}", "text": t, "label": int(i < 2)}) + "\n"
                                   for i, t in enumerate(TEXTS)))
    return {"labelled": labelled, "docs": docs, "calibration": calibration}


def bbmia(proxy, model_dir, cache, *args):
    """Run a command against the proxy; ``(result, POST requests it sent)``."""
    before = proxy.stats.requests
    target = ["--base-url", proxy.base_url, "--model", str(model_dir), "--tokenizer", str(model_dir),
              "--cache-dir", str(cache)]
    result = CliRunner().invoke(app, [str(a) for a in (*args, *target)],
                                env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"}, catch_exceptions=False)
    return result, proxy.stats.requests - before


def probe_requests(proxy, model_dir, cache) -> int:
    """POST requests the capability probe alone sends on an empty cache."""
    before = proxy.stats.requests
    with ApiBackend(ApiConfig(base_url=proxy.base_url, model=str(model_dir), api_key="none"), str(model_dir),
                    cache_dir=cache) as backend:
        backend.probe()
    return proxy.stats.requests - before


def test_probe_dry_run_sends_only_the_capability_probe(proxy, tiny_model_dir, tmp_path):
    probe_only = probe_requests(proxy, tiny_model_dir, tmp_path / "probe-only")
    result, sent = bbmia(proxy, tiny_model_dir, tmp_path / "cache", "probe", "--dry-run", "--json", TEXTS[0])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["dry_run"] is True and report["n"] == {"probe": 1}
    assert report["estimate"]["total"]["all"]["requests"] > 0
    assert sent == probe_only > 0  # the probe (not cached yet), and not one scoring request
    again, sent = bbmia(proxy, tiny_model_dir, tmp_path / "cache", "probe", "--dry-run", TEXTS[1])
    assert again.exit_code == 0, again.output
    assert sent == 0 and "requests" in again.stdout  # the estimate's table, from the cached record


@pytest.mark.parametrize("command", [
    ["probe", "--dataset", "{labelled}"],
    ["score", "{labelled}", "--scorers", "loss,zlib", "--out", "{tmp}/score.jsonl"],
    ["eval", "{labelled}", "--scorers", "loss,min_k", "--out", "{tmp}/eval"],
    ["sweep", "{labelled}", "--calibration", "{labelled}", "--no-control", "--out", "{tmp}/sweep"],
    ["documents", "{docs}", "--calibration", "{calibration}", "--chunk-words", "8", "--out", "{tmp}/documents"],
    ["memorize", "{labelled}", "--prompt-lengths", "3", "--reference-tokens", "3", "--out", "{tmp}/memorize"],
], ids=lambda c: c[0])
def test_every_dry_run_sends_no_scoring_request(proxy, tiny_model_dir, files, tmp_path, command):
    cache = tmp_path / "cache"
    probe_requests(proxy, tiny_model_dir, cache)  # the capability record is cached: nothing left to ask
    args = [a.format(tmp=tmp_path, **files) for a in command]
    result, sent = bbmia(proxy, tiny_model_dir, cache, *args, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    assert sent == 0, f"{command[0]} --dry-run sent {sent} requests"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["dry_run"] is True and report["estimate"]["total"]["all"]["requests"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name != "cache"]  # no output written


def test_eval_dry_run_counts_the_texts_the_prompt_length_ablation_scores(proxy, tiny_model_dir, files, tmp_path):
    """The estimate comes from the audit's plan (EvalPlan.scored_groups): the cut texts too."""
    cache = tmp_path / "cache"
    probe_requests(proxy, tiny_model_dir, cache)
    plain, _ = bbmia(proxy, tiny_model_dir, cache, "eval", files["labelled"], "--scorers", "loss", "--dry-run", "--json")
    cut, sent = bbmia(proxy, tiny_model_dir, cache, "eval", files["labelled"], "--scorers", "loss",
                      "--truncate-tokens", "4", "--dry-run", "--json")
    assert plain.exit_code == 0 and cut.exit_code == 0 and sent == 0, cut.output
    plain, cut = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (plain, cut))
    assert plain["n"] == {"eval": 4} and cut["n"] == {"eval": 4, "L4": 4}
    assert cut["estimate"]["eval"] == plain["estimate"]["eval"] and cut["estimate"]["L4"]["target"]["requests"] > 0
    total = cut["estimate"]["total"]["all"]["requests"]
    assert total == plain["estimate"]["total"]["all"]["requests"] + cut["estimate"]["L4"]["target"]["requests"]


def test_score_over_the_spend_guard_is_refused_without_max_cost_or_yes(proxy, tiny_model_dir, files, tmp_path,
                                                                      monkeypatch):
    from blackbox_mia.spend import guard

    cache = tmp_path / "cache"
    probe_requests(proxy, tiny_model_dir, cache)
    score = ["score", files["labelled"], "--scorers", "loss", "--out", tmp_path / "score.jsonl"]
    estimate, _ = bbmia(proxy, tiny_model_dir, cache, *score, "--dry-run", "--json")
    requests = json.loads(estimate.stdout.strip().splitlines()[-1])["estimate"]["total"]["all"]["requests"]
    monkeypatch.setattr(guard, "GUARD_REQUESTS", requests - 1)  # this small run now counts as a big one
    refused, sent = bbmia(proxy, tiny_model_dir, cache, *score)
    assert refused.exit_code == 2 and sent == 0
    assert f"estimated at {requests:,} requests (unpriced model)" in refused.output
    assert "--max-cost" in refused.output and "--yes" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "score.jsonl").exists()
    probe, sent = bbmia(proxy, tiny_model_dir, cache, "probe", "--dataset", files["labelled"])
    assert probe.exit_code == 2 and sent == 0 and "refusing to start" in probe.output
    confirmed, sent = bbmia(proxy, tiny_model_dir, cache, *score, "--yes")
    assert confirmed.exit_code == 0, confirmed.output
    assert 0 < sent <= requests and len((tmp_path / "score.jsonl").read_text().splitlines()) == len(TEXTS)
    monkeypatch.setattr(guard, "GUARD_REQUESTS", requests)  # at the limit: runs without a flag
    allowed, sent = bbmia(proxy, tiny_model_dir, cache, *score, "--overwrite")
    assert allowed.exit_code == 0 and sent == 0  # every answer cached by the confirmed run
