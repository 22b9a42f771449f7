"""The non-member control built from GSM8K / AQuA problems with new numbers."""

import re
from fractions import Fraction

import pytest

from blackbox_mia.controls import (
    ControlConfig,
    ExpressionError,
    build_control,
    control_kind,
    safe_eval,
    visible_equations,
)
from blackbox_mia.datasets import Item, gsm8k_text, load_shipped_or_jsonl

JANET = "gsm8k-test-0"


@pytest.fixture(scope="module")
def gsm8k_test():
    return load_shipped_or_jsonl("gsm8k:test").items


@pytest.mark.parametrize(
    "expr",
    ["__import__('os').system('true')", "x + 1", "abs(-3)", "(1).real", "2 ** 3", "1 if 1 else 2",
     "'a' * 3", "[1, 2]", "1 < 2", "lambda: 1", "7 % 3", "2 // 1", ""],
)
def test_safe_eval_refuses_anything_but_arithmetic(expr):
    with pytest.raises(ExpressionError):
        safe_eval(expr)


def test_safe_eval_is_exact_arithmetic():
    assert safe_eval("16-3-4") == 9
    assert safe_eval("(2 + 3) * -4 / 8") == Fraction(-5, 2)
    assert safe_eval("0.1+0.2") == Fraction(3, 10)  # no float rounding
    assert safe_eval("80000*1.5") == 120000
    with pytest.raises(ExpressionError, match="division by zero"):
        safe_eval("1/(2-2)")


def test_visible_equations_check_the_arithmetic_people_read():
    text = "He pays 80,000+50,000=$130,000, then 3 x 4 = 12 and 10/3 = 3.33 but 2+2 = 5. Total = 9"
    assert visible_equations(text) == [True, True, True, False, None]


def test_janet_ducks_maps_to_a_consistent_new_problem(gsm8k_test):
    source = next(it for it in gsm8k_test if it.id == JANET)
    control = build_control([source], ControlConfig(seed=0))
    assert len(control.items) == 1 and control.dropped == {}
    item = control.items[0]
    q, a = item.meta["question"], item.meta["answer"]
    assert item.id == f"{JANET}-control" and item.label == 0 and item.meta["source_id"] == JANET
    assert item.text == gsm8k_text(q, a)
    eggs = int(re.search(r"lay (\d+) eggs", q).group(1))
    price = int(re.search(r"for \$(\d+) per fresh duck egg", q).group(1))
    assert (eggs, price) != (16, 2) and eggs != 16 and price != 2
    # "three" and "four" are words: they stay, and the solution keeps subtracting 3 and 4
    assert "She eats three for breakfast" in q and "with four." in q
    left = eggs - 3 - 4
    assert a.splitlines()[0] == f"Janet sells {eggs} - 3 - 4 = <<{eggs}-3-4={left}>>{left} duck eggs a day."
    total = left * price
    assert a.splitlines()[1] == f"She makes {left} * {price} = $<<{left}*{price}={total}>>{total} every day at the farmer’s market."
    assert a.endswith(f"\n#### {total}") and total != 18
    assert item.meta["mapping"]["16"] == str(eggs) and item.meta["mapping"]["18"] == str(total)


def test_same_seed_same_control_other_seed_other_numbers(gsm8k_test):
    items = gsm8k_test[:40]
    a, b = build_control(items, ControlConfig(seed=3)), build_control(items, ControlConfig(seed=3))
    assert [(i.id, i.text) for i in a.items] == [(i.id, i.text) for i in b.items]
    c = build_control(items, ControlConfig(seed=4))
    common = {i.id for i in a.items} & {i.id for i in c.items}
    assert common and any(x.text != y.text for x in a.items for y in c.items if x.id == y.id)
    # an item's rewrite does not depend on which other items are in the batch
    alone = build_control([items[0]], ControlConfig(seed=3))
    assert [i.text for i in alone.items] == [i.text for i in a.items if i.id == f"{items[0].id}-control"]


def test_ambiguous_number_words_drop_the_item():
    # "half" (2) and a written 2 that is mapped: the solution's 2 cannot be attributed
    item = Item("t-0", "", None, {
        "question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?",
        "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total is 2+1=<<2+1=3>>3 bolts\n#### 3",
    })
    control = build_control([item])
    assert control.items == [] and control.dropped == {"ambiguous number (also written as a word or fraction)": 1}


def test_aqua_control_keeps_only_verifiable_items():
    items = load_shipped_or_jsonl("aqua:test").items
    assert control_kind(items) == "aqua"
    control = build_control(items)
    assert 0 < len(control.items) < 0.1 * len(items)  # free-text rationales: most are dropped
    for item in control.items:
        for line in item.meta["rationale"].splitlines():
            assert False not in visible_equations(line)
        correct = item.meta["correct"]
        option = next(o for o in item.meta["options"] if o.upper().startswith(correct.upper()))
        source = next(it for it in items if it.id == item.meta["source_id"])
        old_option = next(o for o in source.meta["options"] if o.upper().startswith(correct.upper()))
        assert option != old_option


def test_non_benchmark_items_have_no_control():
    items = [Item("x", "some text", 1)]
    assert control_kind(items) is None
    with pytest.raises(Exception, match="GSM8K-style"):
        build_control(items)
