"""The machine-unlearning audit (Shi et al. 2024 §7): ROUGE-L recall, gradient-ascent
unlearning of a tiny canary, the ratio window and the audit end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary import CanaryConfig, canary_items, load_manifest, train_canary
from blackbox_mia.canary.unlearn import (
    FORGET_FILE,
    UnlearnConfig,
    choose_forget,
    unlearn_canary,
)
from blackbox_mia.scorers.base import mean_logprob
from blackbox_mia.text.similarity import rouge_l_recall
from blackbox_mia.types import BlackboxMIAError

# members seen 10 times over 3 epochs (as in test_memorization): their loss is well below the non-members'
TINY = CanaryConfig(
    n_background=60, n_members=20, n_nonmembers=20, dup=10, vocab_size=300,
    n_layer=1, n_embd=32, n_head=2, block_size=64, epochs=3, batch_size=8,
)  # fmt: skip


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    return train_canary(TINY, tmp_path_factory.mktemp("canary") / "model", progress=False)


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
