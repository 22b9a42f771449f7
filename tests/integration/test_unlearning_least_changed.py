"""The unlearning audit's scale-free flag rule (``--flag-least-changed F``: the share F of the
texts whose Min-K% ratio is closest to 1) against hand values, its refusals, the command line
end to end on the tiny canary, and the scripts passing it through."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from blackbox_mia.audits.unlearning import (
    RATIO_WINDOW,
    UnlearningConfig,
    flag_texts,
    least_changed,
)
from blackbox_mia.canary import load_manifest
from blackbox_mia.types import BlackboxMIAError
from studies import audit_canaries

from . import test_unlearning

# the fixtures of tests/integration/test_unlearning.py: the tiny canary and its copy unlearned on 10 members
canary, unlearned = test_unlearning.canary, test_unlearning.unlearned

# |ln ratio|: 0.693, 0.0953, -, 0.693 (exactly |ln 2|, a tie with text 0), 0, 1.099, 1.386, 1.386, 0.405, 0.223
RATIOS = [2.0, 1.1, None, 0.5, 1.0, 3.0, 0.25, 4.0, 1.5, 0.8]


def flagged(fraction, ratios=RATIOS):
    return {i for i, flag in enumerate(least_changed(ratios, fraction)) if flag}


def test_least_changed_hand_values():
    assert flagged(0.3) == {4, 1, 9}  # 3 of 10: |ln| 0, 0.095, 0.223
    assert flagged(0.25) == {4, 1, 9}  # 2.5 rounded half up: 3
    assert flagged(0.2) == {4, 1}
    assert flagged(0.45) == {4, 1, 9, 8, 0}  # 4.5 -> 5: the tie at |ln 2| goes to the earlier text, 0 (not 3)
    assert flagged(0.6) == {4, 1, 9, 8, 0, 3}
    assert flagged(0.01) == {4}  # 0.1 rounds to 0: at least one text
    assert flagged(0.99) == set(range(10)) - {2}  # 10 asked, 9 have a ratio: the missing one never flagged
    # a ratio <= 0 (an "after" score of 0) has no logarithm: never flagged, as a missing one
    assert flagged(0.5, [0.0, 1.2, 2.0, -1.0]) == {1, 2}
    assert least_changed([1.3, 1.3, 1.3], 0.5) == [True, True, False]  # 1.5 -> 2, all tied: text order
    # the same rule through flag_texts; without a fraction, the window (strictly inside)
    assert flag_texts(RATIOS, fraction=0.3) == least_changed(RATIOS, 0.3)
    assert flag_texts(RATIOS) == [False, True, False, False, True, False, False, False, False, False]
    assert flag_texts(RATIOS, (0.7, 1.6)) == [False, True, False, False, True, False, False, False, True, True]
    # scale-free: the ranking of |ln ratio| is the same whatever unit the ratios' logarithms change by
    squared = [None if r is None else r**2 for r in RATIOS]
    assert least_changed(squared, 0.3) == least_changed(RATIOS, 0.3)
    assert abs(math.log(0.5)) == abs(math.log(2.0))  # the tie above is exact


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5, float("nan"), float("inf")])
def test_bad_fraction_refused(fraction):
    with pytest.raises(BlackboxMIAError, match=r"flag_fraction= must lie in"):
        UnlearningConfig("x", flag_fraction=fraction).validate()


def test_window_and_fraction_refused_together():
    with pytest.raises(BlackboxMIAError, match="two flag rules"):
        UnlearningConfig("x", window=(0.8, 1.25), flag_fraction=0.3).validate()
    UnlearningConfig("x", window=RATIO_WINDOW, flag_fraction=0.3).validate()  # the default window is no choice


def test_cli_flags_the_least_changed(canary, unlearned, tmp_path):
    from typer.testing import CliRunner

    from blackbox_mia.cli import app

    runner = CliRunner()
    out = tmp_path / "audit"
    audit = runner.invoke(app, ["unlearning", f"canary:{unlearned}", "--before", str(canary),
                                "--after", f"local:{unlearned}", "--prompt-words", "8", "--samples", "2",
                                "--max-new-tokens", "8", "--flag-least-changed", "0.25", "--limit", "10",
                                "--device", "cpu", "--out", str(out), "--quiet", "--json"])  # fmt: skip
    assert audit.exit_code == 0, audit.output
    s = json.loads(audit.stdout.strip().splitlines()[-1])
    assert s["window"] is None and s["flag_fraction"] == 0.25 and "least changed" in s["flag_rule"]
    assert s["n_items"] == 10 and s["n_flagged"] == 3  # 2.5 rounded half up
    rows = [json.loads(line) for line in (out / "unlearning_items.jsonl").read_text().splitlines()]
    by_change = sorted(range(10), key=lambda i: (abs(math.log(rows[i]["ratio"])), i))
    assert s["flagged_ids"] == sorted(rows[i]["id"] for i in by_change[:3])
    assert [r["flagged"] for r in rows] == [i in by_change[:3] for i in range(10)]
    assert s["truth"]["n_flagged"] == 3 and s["truth"]["n_forget"] == len(load_manifest(unlearned)["unlearning"]["forget_ids"])
    report = json.loads((out / "unlearning.json").read_text())
    assert report["config"]["unlearning"]["flag_fraction"] == 0.25
    assert any("smallest |ln ratio|" in note for note in report["notes"])
    both = runner.invoke(app, ["unlearning", "gsm8k", "--before", "x", "--after", "y", "--window", "0.9,1.1",
                               "--flag-least-changed", "0.3"])  # fmt: skip
    assert both.exit_code == 2 and "two flag rules" in both.output
    bad = runner.invoke(app, ["unlearning", "gsm8k", "--before", "x", "--after", "y", "--flag-least-changed", "1"])
    assert bad.exit_code == 2 and "--flag-least-changed must lie in (0, 1)" in bad.output


def test_scripts_pass_the_rule_through():
    assert audit_canaries.flag_rule_args(SimpleNamespace(flag_least_changed=None)) == ()
    assert audit_canaries.flag_rule_args(SimpleNamespace(flag_least_changed=0.3)) == ("--flag-least-changed", "0.3")
