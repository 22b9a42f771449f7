"""``bbmia memorize`` on a tiny canary: the prompt/reference split, greedy continuations equal
to the white-box ones, resumable rows (a rerun generates nothing), the same audit through
``bbmia serve --no-logprobs`` (generation only, no probe), and members memorizing more."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.audits.memorization import (
    MemorizeConfig,
    generate_rows,
    prepare_memorize,
    run_memorize,
    split_text,
)
from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.cli import memorize  # noqa: F401  (registers the command)
from blackbox_mia.cli.app import app
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.evaluation.memorization import label_stats
from blackbox_mia.types import BlackboxMIAError

LENGTHS, R = (8, 16), 16

runner = CliRunner()


@pytest.fixture(scope="module")
def canary(memorizing_canary):
    return memorizing_canary


@pytest.fixture(scope="module")
def local(canary):
    backend = LocalBackend(LocalConfig(str(canary)))
    yield backend
    backend.close()


def plan_for(canary, **overrides):
    settings = {"dataset": f"canary:{canary}", "prompt_lengths": LENGTHS, "reference_length": R, "n_boot": 200}
    return prepare_memorize(MemorizeConfig(**{**settings, **overrides}))


def read_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_split_in_tokens_and_characters(local):
    codec = local.codec
    text = "Natalia sold clips to 48 of her friends in April."
    ids = codec.encode(text)
    s = split_text(text, 5, 7, "tokens", codec)
    assert s.prompt == s.prompt_ids == ids[:5] and s.reference_ids == ids[5:12] and s.max_new_tokens == 7
    assert (s.prompt_text, s.reference) == (codec.decode(ids[:5]), codec.decode(ids[5:12]))
    assert split_text(text, len(ids) - 3, 4, "tokens", codec) is None  # L + R > the text's tokens
    c = split_text(text, 10, 12, "chars", codec)
    assert (c.prompt, c.reference, c.prompt_ids) == ("Natalia so", "ld clips to ", None)
    assert c.max_new_tokens == len(codec.encode("ld clips to "))
    assert split_text(text, 40, len(text) - 39, "chars", codec) is None


def test_rows_split_generate_and_resume_without_generating(canary, local, tmp_path, monkeypatch):
    plan = plan_for(canary)
    result = run_memorize(plan, local, tmp_path, progress=False)
    rows = read_rows(tmp_path / "memorization.jsonl")
    texts = {it.id: it.text for it in plan.items}
    assert len(rows) == result.summary["n_rows"] == 2 * len(plan.items)  # every canary item is long enough
    assert {(r["id"], r["prompt_length"]) for r in rows} == {(i, L) for i in texts for L in LENGTHS}
    for r in rows[:: 7]:
        ids, L = local.codec.encode(texts[r["id"]]), r["prompt_length"]
        assert r["prompt_ids"] == ids[:L] and r["reference_ids"] == ids[L : L + R]
        assert r["reference"] == local.codec.decode(ids[L : L + R])
        want = local.generate([ids[:L]], max_new_tokens=R)[0]  # greedy, white-box
        assert r["generation"] == want.text
        prefix = 0
        while prefix < min(len(want.text), len(r["reference"])) and want.text[prefix] == r["reference"][prefix]:
            prefix += 1
        assert r["eidetic"] == prefix and r["exact"] == want.text.startswith(r["reference"])
    calls = []
    monkeypatch.setattr(local, "generate", lambda *a, **k: calls.append(a) or [])
    again = run_memorize(plan, local, tmp_path, progress=False)
    assert calls == [] and read_rows(tmp_path / "memorization.jsonl") == rows
    assert again.summary == result.summary
    for name in ("memorize.json", "memorize.md", "memorization.png", "memorization.jsonl.config.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_members_memorize_more_than_nonmembers(canary, local, tmp_path):
    result = run_memorize(plan_for(canary), local, tmp_path, progress=False)
    by_label = result.summary["by_label"]
    rows = read_rows(tmp_path / "memorization.jsonl")
    for L in LENGTHS:
        member = [r["eidetic"] for r in rows if r["label"] == 1 and r["prompt_length"] == L]
        nonmember = [r["eidetic"] for r in rows if r["label"] == 0 and r["prompt_length"] == L]
        assert by_label["member"][str(L)]["eidetic"]["mean"] == pytest.approx(np.mean(member))
        assert np.mean(member) > np.mean(nonmember)
    assert result.summary["auc"]["eidetic"] > 0.5
    lo, hi = result.summary["auc_ci"]["eidetic"]
    assert lo <= result.summary["auc"]["eidetic"] <= hi


def test_generation_only_endpoint_equals_local_and_rerun_is_free(canary, local, tmp_path):
    plan = plan_for(canary, limit=12)
    want = run_memorize(plan, local, tmp_path / "local", progress=False)
    with serve_in_background(ServerConfig(str(canary), logprobs=False), backend=local) as url:
        config = ApiConfig(base_url=url, model=str(canary), max_retries=0)
        api = ApiBackend(config, tokenizer=str(canary), cache_dir=tmp_path / "cache")
        got = run_memorize(plan, api, tmp_path / "api", progress=False)
        distinct = {tuple(r["prompt_ids"]) for r in read_rows(tmp_path / "local" / "memorization.jsonl")}
        assert api.usage.requests == len(distinct)  # one greedy request per distinct prompt: no probe
        api.close()
        scorer = ApiBackend(config, tokenizer=str(canary), cache_dir=tmp_path / "cache")
        try:
            with pytest.raises(BlackboxMIAError):  # scoring still needs log-probs: the probe says so
                scorer.logprobs(["Tom has 3 apples."])
        finally:
            scorer.close()
        rerun = ApiBackend(config, tokenizer=str(canary), cache_dir=tmp_path / "cache")
        run_memorize(plan_for(canary, limit=12, resume=False), rerun, tmp_path / "api", progress=False)
        assert rerun.usage.requests == 0  # every continuation from the response cache
        rerun.close()
    local_rows, api_rows = read_rows(tmp_path / "local" / "memorization.jsonl"), read_rows(tmp_path / "api" / "memorization.jsonl")
    assert [r["generation"] for r in api_rows] == [r["generation"] for r in local_rows]
    assert got.summary["by_label"] == want.summary["by_label"]


def test_context_too_small_pairs_are_skipped_and_counted(canary, local, tmp_path):
    plan = plan_for(canary, prompt_lengths=(8, 48), limit=6)  # 1 + 48 + 16 > 64 tokens of context
    rows, skipped = generate_rows(plan, local, tmp_path / "rows.jsonl", progress=False)
    assert {r["prompt_length"] for r in rows} == {8} and len(rows) == 6
    assert sum(skipped[48].values()) == 6 and skipped[8] == {"too_short": 0, "over_context": 0}


def test_label_stats_on_hand_rows():
    rows = [{"eidetic": e, "approximate": a, "exact": x} for e, a, x in ((0, 0.2, False), (60, 1.0, True), (10, 0.5, False))]
    s = label_stats(rows)
    assert s["eidetic"] == {"mean": 70 / 3, "median": 10.0, "max": 60.0}
    assert s["approximate"]["mean"] == pytest.approx(1.7 / 3) and s["approximate"]["median"] == 0.5
    assert s["share_eidetic_ge_50"] == pytest.approx(1 / 3) and s["share_exact"] == pytest.approx(1 / 3) and s["n"] == 3


def test_cli_json_line_and_clear_errors(canary, tmp_path):
    base = ["memorize", f"canary:{canary}", "--local", str(canary), "--limit", "6", "--prompt-lengths", "8,16",
            "--reference-tokens", "16", "--n-boot", "50", "--quiet"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "m"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary["auc"]) == {"eidetic", "approximate"} and summary["n_rows"] == 12
    # --limit 6 is stratified by label (issue 30): 3 members and 3 non-members, so an AUC, where the
    # first 6 canary items (all members) gave none
    assert set(summary["by_label"]) == {"member", "non-member"}
    assert summary["auc"]["eidetic"] is not None and summary["auc"]["approximate"] is not None
    for bad, message in (
        (["--prompt-lengths", "8,x"], "comma-separated integers"),
        (["--prompt-lengths", "0"], "--prompt-lengths must be an integer >= 1"),
        (["--prompt-lengths", "8,8"], "repeats"),
        (["--reference-tokens", "0"], "--reference-tokens must be an integer >= 1"),
        (["--unit", "words"], "--unit must be one of tokens, chars"),
    ):
        result = runner.invoke(app, [*base, *bad, "--out", str(tmp_path / "bad")])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
