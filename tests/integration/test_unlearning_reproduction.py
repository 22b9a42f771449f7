"""studies/canary_reproduction.py (the go/no-go check of a canary for the unlearning audit's story
completion): its summary against the white-box label and the completion rows it wrote."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from blackbox_mia.canary import canary_items
from blackbox_mia.canary.unlearn import loss_scores, memorized_members

from studies import canary_reproduction, unlearning_recipes


@pytest.fixture(scope="module")
def reproduction():
    return canary_reproduction


def test_quartiles_hand_values(reproduction):
    q = reproduction.quartiles([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])
    # numpy's linear quantiles of 1..11: 10% at position 1 (2.0), 90% at position 9 (10.0)
    assert q == {"mean": 6.0, "median": 6.0, "q10": 2.0, "q90": 10.0}


def test_summary_matches_the_label_and_the_rows(reproduction, memorizing_canary, tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs"
    monkeypatch.setattr(sys, "argv", ["canary_reproduction.py", "--canary", str(memorizing_canary), "--texts", "2",
                                      "--samples", "2", "--prompt-words", "8", "--max-new-tokens", "8",
                                      "--out", str(out)])  # fmt: skip
    reproduction.main()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    items = canary_items(memorizing_canary)
    ids, threshold = memorized_members(items, loss_scores(memorizing_canary, items), 0.05)
    assert summary["members"] == sum(it.label == 1 for it in items)
    assert summary["memorized"] == len(ids)
    assert summary["memorized_threshold"] == pytest.approx(threshold)
    rows = [json.loads(line) for line in (out / memorizing_canary.name / "completions.jsonl").read_text().splitlines()]
    label = {it.id: it.label for it in items}
    per: dict[str, list[float]] = {}
    for row in rows:
        per.setdefault(row["id"], []).append(row["rouge_l_recall"])
    assert all(len(v) == 2 for v in per.values())
    members = [np.mean(v) for i, v in per.items() if label[i] == 1]
    nonmembers = [np.mean(v) for i, v in per.items() if label[i] == 0]
    assert (summary["completed_members"], summary["completed_nonmembers"]) == (len(members), len(nonmembers))
    assert summary["rouge_l_members"] == pytest.approx(np.mean(members))
    assert summary["rouge_l_difference"]["difference"] == pytest.approx(np.mean(members) - np.mean(nonmembers))


def test_ratio_quantiles_skip_missing_ratios():
    recipes = unlearning_recipes
    # linear quantiles of 1, 2, 3: 10% at position 0.2 (1.2), 50% at 1 (2.0), 90% at 1.8 (2.8)
    assert recipes.ratio_quantiles([None, 1.0, 2.0, 3.0]) == [1.2, 2.0, 2.8]
    assert recipes.ratio_quantiles([None]) is None
