"""``bbmia canary unlearn``'s forget rule (``--forget-from memorized``: among the members the base
canary memorized) and the alternative-label method (Eldan & Russinovich 2023)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blackbox_mia.canary import canary_items, load_manifest
from blackbox_mia.canary.unlearn import UnlearnConfig, loss_scores, memorized_members, unlearn_canary
from blackbox_mia.canary.unlearn_config import ALTERNATIVE_LABELS
from blackbox_mia.datasets import Item
from blackbox_mia.types import BlackboxMIAError

from . import test_unlearning

canary = test_unlearning.canary
mean_loss_by_group = test_unlearning.mean_loss_by_group


def test_memorized_members_hand_values():
    items = [Item("m1", "a", 1), Item("m2", "b", 1), Item("m3", "c", 1), Item("m4", "d", 1)]
    items += [Item(f"n{i}", "x", 0) for i in range(5)]
    scores = {"m1": -1.0, "m2": -2.5, "m3": -2.0, "m4": None, "n0": -3.0, "n1": -2.8, "n2": -2.6, "n3": -2.4, "n4": -2.0}
    # non-members sorted: -3.0 -2.8 -2.6 -2.4 -2.0; the 60% quantile, method "higher": index ceil(0.6*4) = 3 -> -2.4
    assert memorized_members(items, scores, 0.4) == (["m1", "m3"], -2.4)
    # the 95% quantile is the largest non-member score, -2.0: m3 ties it and is not above it
    assert memorized_members(items, scores, 0.05) == (["m1"], -2.0)
    with pytest.raises(BlackboxMIAError, match="non-members"):
        memorized_members(items[:4], scores, 0.05)


@pytest.fixture(scope="module")
def half_forgotten(canary, tmp_path_factory):
    """The tiny canary (which memorizes all its 20 members) after strong gradient ascent on 10
    of them: a base canary that memorizes some members and not others."""
    return unlearn_canary(canary, "10", UnlearnConfig(steps=20, lr=3e-3), tmp_path_factory.mktemp("half") / "c")


def test_forget_from_memorized(half_forgotten, tmp_path):
    canary = half_forgotten
    items = canary_items(canary)
    scores = loss_scores(canary, items)
    memorized, threshold = memorized_members(items, scores, 0.05)
    members = [it.id for it in items if it.label == 1]
    # this canary memorizes some members, not all (else the rule would change nothing)
    assert 3 <= len(memorized) < len(members)
    config = UnlearnConfig(steps=2, lr=1e-4, forget_from="memorized")
    out = unlearn_canary(canary, "3", config, tmp_path / "u")
    record = load_manifest(out)["unlearning"]
    assert record["forget_from"] == "memorized" and record["memorized_target_fpr"] == record["memorized_fpr"] == 0.05
    assert record["memorized_before"] == {"target_fpr": 0.05, "fpr": 0.05, "threshold": pytest.approx(threshold, abs=1e-6),
                                          "ids": memorized}  # the renamed keys and their old names (docs/migration.md)
    assert len(record["forget_ids"]) == 3 and set(record["forget_ids"]) <= set(memorized)
    assert all(scores[i] > threshold for i in record["forget_ids"])
    # every memorized member at once; one more is refused, naming the pool
    every = load_manifest(unlearn_canary(canary, str(len(memorized)), config, tmp_path / "all"))["unlearning"]
    assert every["forget_ids"] == memorized
    with pytest.raises(BlackboxMIAError, match=f"between 1 and the canary's {len(memorized)} memorized members"):
        unlearn_canary(canary, str(len(memorized) + 1), config, tmp_path / "x")
    # a file naming a member that was not memorized is refused
    ids = tmp_path / "ids.txt"
    ids.write_text(next(m for m in members if m not in memorized), encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match="not memorized members of the canary"):
        unlearn_canary(canary, str(ids), config, tmp_path / "y")
    # a looser rule (--memorized-fpr 0.5: above the non-members' median) admits more members
    loose, median = memorized_members(items, scores, 0.5)
    assert set(loose) > set(memorized) and median < threshold
    wide = load_manifest(unlearn_canary(canary, str(len(loose)), UnlearnConfig(steps=1, forget_from="memorized",
                                                                             memorized_target_fpr=0.5), tmp_path / "w"))
    assert wide["unlearning"]["forget_ids"] == loose
    assert wide["unlearning"]["memorized_before"]["threshold"] == pytest.approx(median, abs=1e-6)
    # the default samples all members and still records who was memorized before
    plain = load_manifest(unlearn_canary(canary, "3", UnlearnConfig(steps=1), tmp_path / "p"))["unlearning"]
    assert plain["forget_from"] == "members" and plain["memorized_before"]["ids"] == memorized


def test_alternative_labels_forget_the_forget_set(canary, tmp_path):
    config = UnlearnConfig(steps=20, lr=3e-3, seed=0, method=ALTERNATIVE_LABELS, alpha=5.0)
    out = unlearn_canary(canary, "10", config, tmp_path / "alt")
    record = load_manifest(out)["unlearning"]
    assert record["method"] == "alternative_labels" and record["alpha"] == 5.0
    # the reinforced model's boost replaces part of the true next tokens by generic ones
    assert 0.05 < record["changed_labels"] < 1
    assert record["forget_loss_after"] > record["forget_loss_before"] + 0.1
    items = canary_items(canary)
    forget = set(record["forget_ids"])
    before = mean_loss_by_group(canary, items, forget)
    after = mean_loss_by_group(out, items, forget)
    rise = {k: after[k] - before[k] for k in before}
    # measured: forget +0.82, kept members +0.41, non-members +0.55 nats/token (the tiny model generalises a lot)
    assert rise["forget"] > max(rise["kept"], rise["nonmembers"]) + 0.2
    # gradient ascent has no alternative labels
    ga = load_manifest(unlearn_canary(canary, "10", UnlearnConfig(steps=1), tmp_path / "ga"))["unlearning"]
    assert ga["changed_labels"] is None and ga["method"] == "gradient_ascent"
    # the same settings give the same weights
    again = load_manifest(unlearn_canary(canary, "10", config, tmp_path / "alt2"))["unlearning"]
    assert again["forget_loss_after"] == pytest.approx(record["forget_loss_after"], abs=1e-6)
    assert np.isfinite(again["changed_labels"])


def test_alternative_labels_small_alpha_changes_fewer_labels(canary, tmp_path):
    # a tiny alpha leaves the base model's argmax: on memorized windows that is mostly the true token
    record = load_manifest(unlearn_canary(canary, "10", UnlearnConfig(steps=1, lr=1e-4, method=ALTERNATIVE_LABELS,
                                                                         alpha=1e-6), tmp_path / "a"))["unlearning"]
    strong = load_manifest(unlearn_canary(canary, "10", UnlearnConfig(steps=20, lr=3e-3, method=ALTERNATIVE_LABELS,
                                                                         alpha=5.0), tmp_path / "b"))["unlearning"]
    assert record["changed_labels"] < strong["changed_labels"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"method": "retrain"}, "method= must be one of gradient_ascent, alternative_labels"),
        ({"method": ALTERNATIVE_LABELS, "target_loss": 1.0}, "target_loss= applies to gradient_ascent only"),
        ({"alpha": 0.0}, "alpha= must be > 0"),
        ({"forget_from": "all"}, "forget_from= must be one of members, memorized"),
        ({"memorized_target_fpr": 1.0}, "memorized_target_fpr= must lie in"),
    ],
)
def test_unlearn_config_rejects(settings, message):
    with pytest.raises(BlackboxMIAError, match=message):
        UnlearnConfig(**settings).validate()


def test_cli_forget_from_memorized_and_method(canary, tmp_path):
    from typer.testing import CliRunner

    from blackbox_mia.cli import app

    runner = CliRunner()
    made = runner.invoke(app, ["canary", "unlearn", str(canary), "--forget", "2", "--forget-from", "memorized",
                               "--method", "alternative_labels", "--alpha", "2", "--steps", "2",
                               "--out", str(tmp_path / "u"), "--json"])
    assert made.exit_code == 0, made.output
    summary = json.loads(made.stdout.strip().splitlines()[-1])
    record = load_manifest(tmp_path / "u")["unlearning"]
    assert summary["method"] == "alternative_labels" and summary["forget_from"] == "memorized"
    assert summary["n_memorized_before"] == len(record["memorized_before"]["ids"])
    assert set(summary["forget_ids"]) <= set(record["memorized_before"]["ids"]) and record["alpha"] == 2.0
    bad = runner.invoke(app, ["canary", "unlearn", str(canary), "--forget", "2", "--method", "nope"])
    assert bad.exit_code == 2 and "--method must be one of" in bad.output
