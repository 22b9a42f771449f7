"""The machine-unlearning audit (Shi et al. 2024 §7): ROUGE-L recall, gradient-ascent
unlearning of a tiny canary, the ratio window and the audit end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_mia.audits.unlearning import (
    RATIO_WINDOW,
    UnlearningConfig,
    in_window,
    prepare_unlearning,
    run_unlearning,
    score_ratio,
)
from blackbox_mia.audits.unlearning.truth import flag_metrics
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary import canary_items, load_manifest
from blackbox_mia.canary.unlearn import (
    FORGET_FILE,
    UnlearnConfig,
    choose_forget,
    unlearn_canary,
)
from blackbox_mia.scorers.base import mean_logprob
from blackbox_mia.text.similarity import rouge_l_recall
from blackbox_mia.types import BlackboxMIAError


@pytest.fixture(scope="module")
def canary(memorizing_canary):
    return memorizing_canary


@pytest.fixture(scope="module")
def unlearned(canary):
    return unlearn_canary(canary, "10", UnlearnConfig(steps=20, lr=1e-4, seed=0))


def test_rouge_l_recall_hand_pairs():
    # LCS "the cat sat" of 4 reference words; case-folded
    assert rouge_l_recall("the cat sat", "the cat sat down") == pytest.approx(3 / 4)
    assert rouge_l_recall("The CAT", "the cat") == 1.0
    # LCS "a c" of the 3 words "a b c" (order matters: "c a" would match 1)
    assert rouge_l_recall("a x c", "a b c") == pytest.approx(2 / 3)
    assert rouge_l_recall("c a", "a b c") == pytest.approx(1 / 3)
    assert rouge_l_recall("anything", "") == 0.0
    # Japanese: MeCab words 猫|が|座っ|た vs 猫|が|座る (rouge-score's own tokenizer keeps none)
    assert rouge_l_recall("猫が座った", "猫が座る") == pytest.approx(2 / 3)
    assert rouge_l_recall("猫が座る", "猫が座る", "chars") == 1.0
    assert rouge_l_recall("犬", "猫が座る", "chars") == 0.0


def test_choose_forget(tmp_path):
    members = canary_items_fake(6)
    chosen = choose_forget(members, "3", seed=0)
    assert len(chosen) == 3 and chosen == choose_forget(members, "3", seed=0)
    assert [m.id for m in chosen] == sorted((m.id for m in chosen), key=lambda i: int(i[1:]))  # member order
    ids = tmp_path / "ids.txt"
    ids.write_text("m4\nm1\n\n", encoding="utf-8")
    assert [m.id for m in choose_forget(members, str(ids), 0)] == ["m4", "m1"]
    ids.write_text('["m2"]', encoding="utf-8")
    assert [m.id for m in choose_forget(members, str(ids), 0)] == ["m2"]
    ids.write_text("m9\n", encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match="not members"):
        choose_forget(members, str(ids), 0)
    with pytest.raises(BlackboxMIAError, match="between 1 and"):
        choose_forget(members, "7", 0)


def canary_items_fake(n):
    from blackbox_mia.datasets import Item

    return [Item(id=f"m{i}", text=f"text {i}", label=1) for i in range(n)]


def mean_loss_by_group(model_dir, items, forget_ids):
    backend = LocalBackend(LocalConfig(str(model_dir), device="cpu"))
    try:
        lps = backend.logprobs([it.text for it in items])
    finally:
        backend.close()
    groups = {"forget": [], "kept": [], "nonmembers": []}
    for item, lp in zip(items, lps):
        group = "forget" if item.id in forget_ids else "kept" if item.label == 1 else "nonmembers"
        groups[group].append(-mean_logprob(lp))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def test_gradient_ascent_raises_the_forget_loss(canary, unlearned):
    manifest = load_manifest(unlearned)
    record = manifest["unlearning"]
    assert record["method"] == "gradient_ascent" and record["steps"] == 20 and len(record["forget_ids"]) == 10
    assert manifest["member_ids"] == load_manifest(canary)["member_ids"]
    assert [json.loads(line)["id"] for line in (unlearned / FORGET_FILE).read_text().splitlines()] == record["forget_ids"]
    assert record["forget_loss_after"] > record["forget_loss_before"] + 0.05
    items = canary_items(canary)
    assert canary_items(unlearned) == items
    forget = set(record["forget_ids"])
    before = mean_loss_by_group(canary, items, forget)
    after = mean_loss_by_group(unlearned, items, forget)
    rise = {k: after[k] - before[k] for k in before}
    # measured: forget +0.10, kept members +0.035, non-members +0.032 nats/token
    assert rise["forget"] > 0.05
    assert rise["forget"] > 2 * rise["kept"] and rise["forget"] > 2 * rise["nonmembers"]
    # the same settings give the same directory and weights
    again = unlearn_canary(canary, "10", UnlearnConfig(steps=20, lr=1e-4, seed=0))
    assert again == unlearned
    assert load_manifest(again)["unlearning"]["forget_loss_after"] == pytest.approx(record["forget_loss_after"], abs=1e-6)


def test_target_loss_and_retain_weight(canary, unlearned):
    record = load_manifest(unlearned)["unlearning"]
    # a target below every window's loss: nothing is ascended, the weights stay as they were
    still = unlearn_canary(canary, "10", UnlearnConfig(steps=5, lr=1e-3, seed=0, target_loss=0.01))
    kept = load_manifest(still)["unlearning"]
    assert kept["ascended_windows"] == 0 and kept["target_loss"] == 0.01
    assert kept["ascents_per_item"] == dict.fromkeys(kept["forget_ids"], 0)
    assert sum(record["ascents_per_item"].values()) == record["ascended_windows"]
    # a short schedule (one step: a batch of at most 2 windows) reaches one or two of the 10 items, no other
    short = load_manifest(unlearn_canary(canary, "10", UnlearnConfig(steps=1, batch_size=2, seed=0)))["unlearning"]
    assert short["ascended_windows"] in (1, 2) and sum(short["ascents_per_item"].values()) == short["ascended_windows"]
    assert 1 <= sum(n > 0 for n in short["ascents_per_item"].values()) <= short["ascended_windows"]
    assert kept["forget_loss_after"] == pytest.approx(kept["forget_loss_before"], abs=1e-6)
    # without a target every window of every batch: whole passes over the forget windows, then part of one
    n, per_pass = record["n_forget_windows"], -(-record["n_forget_windows"] // 8)
    assert n * (20 // per_pass) <= record["ascended_windows"] <= n * -(-20 // per_pass)
    # the KL retain term keeps the kept members closer to the original than pure ascent does
    items = canary_items(canary)
    forget = set(record["forget_ids"])
    before = mean_loss_by_group(canary, items, forget)
    pure = mean_loss_by_group(unlearned, items, forget)
    retained = unlearn_canary(canary, "10", UnlearnConfig(steps=20, lr=1e-4, seed=0, retain_weight=1.0))
    kl = mean_loss_by_group(retained, items, forget)
    assert kl["kept"] - before["kept"] < pure["kept"] - before["kept"]
    with pytest.raises(BlackboxMIAError, match="retain_weight="):
        UnlearnConfig(retain_weight=-1.0).validate()
    with pytest.raises(BlackboxMIAError, match="target_loss="):
        UnlearnConfig(target_loss=0.0).validate()


def test_ratio_window_on_hand_made_scores():
    # Min-K% scores are negative: after / before
    assert score_ratio(-2.0, -2.2) == pytest.approx(1.1)
    assert score_ratio(0.0, -1.0) is None and score_ratio(None, -1.0) is None
    window = RATIO_WINDOW
    assert window == pytest.approx((1 / 1.15, 1.15))
    assert in_window(1.1, window) and in_window(1 / 1.1, window) and in_window(1.0, window)
    assert not in_window(1.15, window) and not in_window(1 / 1.15, window)  # strictly inside
    assert not in_window(1.5, window) and not in_window(0.5, window) and not in_window(None, window)
    scores = {"a": (-2.0, -2.1), "b": (-2.0, -4.0), "c": (-3.0, -2.0), "d": (-1.0, -1.14)}
    flagged = {i for i, (b, a) in scores.items() if in_window(score_ratio(b, a), window)}
    assert flagged == {"a", "d"}  # ratios 1.05, 2.0, 0.667, 1.14
    assert in_window(score_ratio(-2.0, -4.0), (0.4, 2.5))
    m = flag_metrics({"a", "d"}, {"a", "b"}, ["a", "b", "c", "d"])
    cis = {f"{k}_ci": m.pop(f"{k}_ci") for k in ("precision", "recall", "base_rate")}
    # Fisher one-sided: tables with tp >= 1 given the margins (2 flagged, 2 positive of 4): P(1) + P(2) = 4/6 + 1/6
    assert m.pop("fisher_p") == pytest.approx(5 / 6)
    assert m == {"n_audited": 4, "n_flagged": 2, "n_positive": 2, "true_positives": 1, "precision": 0.5,
                 "recall": 0.5, "base_rate": 0.5}
    # Wilson 95% of 1/2 and 2/4 (z = 1.959964)
    assert cis["precision_ci"] == cis["recall_ci"] == pytest.approx([0.094531, 0.905469], abs=1e-5)
    assert cis["base_rate_ci"] == pytest.approx([0.150036, 0.849964], abs=1e-5)
    assert flag_metrics(set(), set(), ["a"])["precision"] is None
    with pytest.raises(BlackboxMIAError, match="window="):
        UnlearningConfig("x", window=(1.2, 1.1)).validate()


def test_audit_end_to_end(canary, unlearned, tmp_path):
    config = UnlearningConfig(dataset=f"canary:{unlearned}", prompt_words=8, samples=3, max_new_tokens=16,
                              segmenter="whitespace")
    plan = prepare_unlearning(config)
    before = LocalBackend(LocalConfig(str(canary), device="cpu"))
    after = LocalBackend(LocalConfig(str(unlearned), device="cpu"))
    try:
        result = run_unlearning(plan, before, after, tmp_path / "out", truth=(unlearned, after), progress=False)
        again = run_unlearning(plan, before, after, tmp_path / "out", truth=(unlearned, after), progress=False)
    finally:
        before.close()
        after.close()
    s = result.summary
    assert again.summary == s  # resumed from the rows files
    items = [json.loads(line) for line in (tmp_path / "out" / "unlearning_items.jsonl").read_text().splitlines()]
    assert len(items) == s["n_items"] == 40
    for row in items:
        assert row["ratio"] == pytest.approx(row["min_k_after"] / row["min_k_before"])
        assert row["flagged"] == (1 / 1.15 < row["ratio"] < 1.15)
    assert s["flagged_ids"] == sorted(r["id"] for r in items if r["flagged"])
    completions = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert len(completions) == 3 * (40 - len(s["skipped_completion"]))
    assert all(0 <= r["rouge_l_recall"] <= 1 and 0 <= r["approximate"] <= 1 for r in completions)
    n_completed = {g: s["completion"][g]["rouge_l_recall"]["n"] for g in ("flagged", "unflagged")}
    assert sum(n_completed.values()) == 40 - len(s["skipped_completion"])
    truth = s["truth"]
    forget = set(load_manifest(unlearned)["unlearning"]["forget_ids"])
    positives = {r["id"] for r in items if r["still_memorized"]}
    assert positives <= forget and truth["n_positive"] == len(positives) and truth["n_forget"] == 10
    assert truth["base_rate"] == pytest.approx(len(positives) / 40)
    tp = len(positives & set(s["flagged_ids"]))
    assert truth["true_positives"] == tp
    if s["flagged_ids"]:
        assert truth["precision"] == pytest.approx(tp / len(s["flagged_ids"]))
    # the similarity split by the label, from the per-text rows (each the mean over its samples)
    completed = [r for r in items if "rouge_l_recall" in r]
    still = [r["rouge_l_recall"] for r in completed if r["still_memorized"]]
    rest = [r["rouge_l_recall"] for r in completed if not r["still_memorized"]]
    assert len(still) == truth["completion"]["still_memorized"]["rouge_l_recall"]["n"] >= 1
    assert len(rest) == truth["completion"]["not_still_memorized"]["rouge_l_recall"]["n"] >= 1
    by_label = truth["completion_difference"]["rouge_l_recall"]
    assert by_label["difference"] == pytest.approx(np.mean(still) - np.mean(rest))
    report = json.loads(result.json_path.read_text())
    assert {"window", "ratio", "flagged_ids", "completion", "truth", "notes", "config"} <= set(report)
    assert result.md_path.exists()
    # renamed keys keep their old names for one release (docs/migration.md)
    assert truth["target_fpr"] == truth["fpr"] == 0.05
    assert report["config"]["unlearning"]["truth_target_fpr"] == report["config"]["unlearning"]["truth_fpr"] == 0.05


def test_cli_unlearn_then_audit(canary, tmp_path):
    from typer.testing import CliRunner

    from blackbox_mia.cli import app

    runner = CliRunner()
    ids = tmp_path / "forget.txt"
    member_ids = load_manifest(canary)["member_ids"]
    ids.write_text("\n".join(member_ids[:4]), encoding="utf-8")
    made = runner.invoke(app, ["canary", "unlearn", str(canary), "--forget", str(ids), "--steps", "5",
                               "--out", str(tmp_path / "u"), "--json"])
    assert made.exit_code == 0, made.output
    summary = json.loads(made.stdout.strip().splitlines()[-1])
    assert summary["forget_ids"] == member_ids[:4] and summary["path"] == str(tmp_path / "u")
    audit = runner.invoke(app, ["unlearning", f"canary:{tmp_path / 'u'}", "--before", str(canary),
                                "--after", f"local:{tmp_path / 'u'}", "--prompt-words", "8", "--samples", "2",
                                "--max-new-tokens", "8", "--window", "0.9,1.1", "--limit", "10", "--device", "cpu",
                                "--out", str(tmp_path / "audit"), "--quiet", "--json"])
    assert audit.exit_code == 0, audit.output
    s = json.loads(audit.stdout.strip().splitlines()[-1])
    assert s["window"] == [0.9, 1.1] and s["n_items"] == 10
    assert s["truth"]["n_forget"] == 4 and s["truth"]["n_audited"] == 10  # --after is an unlearned canary
    bad = runner.invoke(app, ["unlearning", "gsm8k", "--before", "x", "--after", "y", "--window", "1.2"])
    assert bad.exit_code == 2 and "--window takes 2 comma-separated numbers" in bad.output
