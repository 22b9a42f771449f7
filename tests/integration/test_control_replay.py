"""The number-perturbed control on the whole GSM8K test split (1,319 items, several seconds: an
integration test; tests/unit/test_control.py checks the control item by item)."""

import re
from fractions import Fraction

from blackbox_mia.controls import build_control
from blackbox_mia.controls.arith import safe_eval
from blackbox_mia.datasets import load_shipped_or_jsonl


def test_every_kept_gsm8k_item_replays_and_changes_its_answer():
    gsm8k_test = load_shipped_or_jsonl("gsm8k:test").items
    """Kept fraction on the full GSM8K test > 50% (it is 820 / 1319 = 62.2% at seed 0), and
    every kept item is self-consistent: all annotations re-evaluate, the final answer is the
    one recomputed, and it differs from the source's."""
    control = build_control(gsm8k_test)
    assert control.n_source == 1319
    assert len(control.items) + sum(control.dropped.values()) == 1319
    assert control.kept_fraction > 0.5
    source = {it.id: it for it in gsm8k_test}
    for item in control.items:
        answer = item.meta["answer"]
        for expr, result in re.findall(r"<<([^=<>]*)=([^<>]*)>>", answer):
            assert safe_eval(expr.replace(",", "")) == Fraction(result.replace(",", ""))
        old_final = source[item.meta["source_id"]].meta["answer"].rsplit("#### ", 1)[1]
        new_final = answer.rsplit("#### ", 1)[1]
        assert Fraction(new_final.replace(",", "")) != Fraction(old_final.replace(",", ""))
        assert item.meta["question"] != source[item.meta["source_id"]].meta["question"]
