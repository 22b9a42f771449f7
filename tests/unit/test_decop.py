"""DE-COP (Duarte et al. 2024): the substitute paraphrases by hand, the 24 orders and the 4
rotations, a letter-biased model at chance and a memorising one at 1, paraphrases from a file,
and the errors a user can meet (scripted generation-only backend)."""

from __future__ import annotations

import json
import re

import pytest

from blackbox_mia.cli.documents import with_paraphrases
from blackbox_mia.text_only_runner import estimate_generated, score_generated, target_view
from blackbox_mia.scorers import parse_scorer
from blackbox_mia.scorers.decop import EXAM_INSTRUCTION, orders, substitute_paraphrases
from blackbox_mia.types import BlackboxMIAError
from tests.unit.test_text_only import Scripted

PASSAGE = "Tom has 4 apples and 10 pears."


def knows(passage: str):
    """A model that answers with the letter of ``passage`` among the prompt's options."""
    def answer(prompt: str, j: int) -> str:
        return next(m.group(1) for m in re.finditer(r"^([A-D])\. (.*)$", prompt, re.M) if m.group(2) == passage)
    return answer


def test_substitute_paraphrases_by_hand():
    assert substitute_paraphrases(PASSAGE) == ("Tom has 5 apples and 11 pears.", "Tom has 6 apples and 12 pears.",
                                               "Tom has 7 apples and 13 pears.")
    assert substitute_paraphrases("a b c d e") == ("e a b c d", "d e a b c", "c d e a b")  # no digit: words rotated
    with pytest.raises(BlackboxMIAError, match="no three distinct"):
        substitute_paraphrases("a b")


def test_orders_are_every_permutation_or_the_rotations():
    every = orders(24)
    assert len(set(every)) == 24 and all(sorted(o) == [0, 1, 2, 3] for o in every)
    assert [o.index(0) for o in orders(4)] == [0, 3, 2, 1]  # the passage once at each letter


@pytest.mark.parametrize("spec, sent", [("decop", 24), ("decop:permutations=4", 4)])
def test_a_letter_biased_model_scores_chance_and_a_memorising_one_scores_one(spec, sent):
    biased = Scripted(lambda prompt, j: " A")
    assert score_generated([PASSAGE], [parse_scorer(spec)], biased)[0][parse_scorer(spec).label].value == 0.25
    assert biased.sent == sent and estimate_generated([PASSAGE], [parse_scorer(spec)], biased).requests == sent
    memorising = Scripted(knows(PASSAGE))
    assert score_generated([PASSAGE], [parse_scorer(spec)], memorising)[0][parse_scorer(spec).label].value == 1.0
    silent = Scripted(lambda prompt, j: "I cannot tell")
    assert score_generated([PASSAGE], [parse_scorer(spec)], silent)[0][parse_scorer(spec).label].value == 0.0


def test_prompts_per_form():
    scorer = parse_scorer("decop:source=the GSM8K test split")
    base = scorer.requests(PASSAGE, target_view(Scripted(lambda p, j: "")))[0].prompt
    assert base.startswith("Question: Which of the following passages is verbatim from the the GSM8K test split?")
    assert "\nA. Tom has 4 apples and 10 pears.\nB. Tom has 5 apples" in base and base.endswith("\nAnswer:")
    chat = scorer.requests(PASSAGE, target_view(Scripted(lambda p, j: "", chat=True)))[0].prompt
    assert chat == EXAM_INSTRUCTION + base


def test_paraphrases_from_a_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"text": "Tom  has 4 apples\nand 10 pears.", "paraphrases": ["x", "y", "z"]}) + "\n")
    scorer = parse_scorer(with_paraphrases("decop:permutations=4", str(path)))
    assert scorer.options(PASSAGE) == (PASSAGE, "x", "y", "z")  # matched on whitespace-normalised text
    backend = Scripted(knows("z"))  # a model that prefers paraphrase z
    assert score_generated([PASSAGE], [scorer], backend)[0][scorer.label].value == 0.0
    with pytest.raises(BlackboxMIAError, match="has no paraphrases"):
        scorer.options("another passage")
    path.write_text(json.dumps({"text": PASSAGE, "paraphrases": ["x", "x", "z"]}) + "\n")
    with pytest.raises(BlackboxMIAError, match="three distinct strings"):
        parse_scorer(f"decop:paraphrases={path}").options(PASSAGE)


def test_errors_are_clear():
    with pytest.raises(BlackboxMIAError, match="permutations must be 24 or 4"):
        parse_scorer("decop:permutations=6")
    with pytest.raises(BlackboxMIAError, match="exceed the target's context"):
        parse_scorer("decop").requests(PASSAGE * 5, target_view(Scripted(lambda p, j: "", context=64)))
    with pytest.raises(BlackboxMIAError, match="read by --scorers decop"):
        with_paraphrases("min_k", "p.jsonl")
    with pytest.raises(BlackboxMIAError, match="cannot go in a scorer spec"):
        with_paraphrases("decop", "a,b.jsonl")
