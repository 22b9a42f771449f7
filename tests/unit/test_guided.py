"""Guided instruction (Golchin & Surdeanu 2024): the two prompts per form, ROUGE-L differences and
exact / near-exact flags computed by hand, the two generations shared by the three metrics, the
paired dataset-level test, and its notes in ``eval``."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.audits.eval import _dataset_tests
from blackbox_mia.evaluation.paired_difference import paired_difference_test
from blackbox_mia.text_only_runner import score_generated, target_view
from blackbox_mia.scorers import parse_scorer, parse_scorers
from blackbox_mia.scorers.guided import GENERAL_HEADER
from blackbox_mia.types import BlackboxMIAError
from tests.unit.test_text_only import Scripted

TEXT = "alpha beta gamma delta one two three four"  # cl100k: prefix "alpha beta gamma delta", suffix " one two three four"


def replies(guided: str, general: str):
    """An answer function: ``general`` for prompts that carry the general instruction, else ``guided``."""
    return lambda prompt, j: general if "Finish the second piece based on" in prompt else guided


def test_continuation_form_scores_by_hand():
    backend = Scripted(replies(" one two three four", " one two nine nine"))
    specs = "guided,guided:metric=exact,guided:metric=near_exact"
    scores = score_generated([TEXT], parse_scorers(specs), backend)[0]
    # guided ROUGE-L F = 1; general: LCS 2 of 4 and 4 tokens, F = 0.5; difference 0.5
    assert scores["guided"].value == pytest.approx(0.5)
    assert scores["guided:metric=exact"].value == 1.0 and scores["guided:metric=near_exact"].value == 1.0
    assert backend.sent == 2  # the three metrics read the same two greedy generations
    guided, general = parse_scorer("guided").requests(TEXT, target_view(backend))
    assert general.prompt == tuple(backend.codec.encode(GENERAL_HEADER)) + guided.prompt  # header, then the prefix ids
    assert backend.codec.decode(list(guided.prompt)) == "alpha beta gamma delta" and guided.max_new_tokens == 4


def test_near_exact_threshold_and_negative_difference():
    backend = Scripted(replies(" one three", " one two three four"))
    scores = score_generated([TEXT], parse_scorers("guided,guided:metric=exact,guided:metric=near_exact"), backend)[0]
    # guided: LCS 2, precision 2/2, recall 2/4, F = 2/3 (< 0.75: not near-exact); general F = 1
    assert scores["guided"].value == pytest.approx(2 / 3 - 1)
    assert scores["guided:metric=exact"].value == 0.0 and scores["guided:metric=near_exact"].value == 0.0


def test_instruction_form_names_dataset_and_split():
    backend = Scripted(replies("Second Piece: One two  three four", "nothing alike"), chat=True)
    scorer = parse_scorer("guided:dataset=GSM8K,split=test,metric=exact")
    guided, general = scorer.requests(TEXT, target_view(backend))
    assert "the test split of the GSM8K dataset" in guided.prompt and "First Piece: alpha beta gamma delta" in guided.prompt
    assert "GSM8K" not in general.prompt and general.prompt.endswith("Second Piece:")
    assert score_generated([TEXT], [scorer], backend)[0][scorer.label].value == 1.0  # label dropped, case and spaces
    with pytest.raises(BlackboxMIAError, match="dataset=NAME"):
        parse_scorer("guided").requests(TEXT, target_view(backend))
    with pytest.raises(BlackboxMIAError, match="metric must be one of"):
        parse_scorer("guided:metric=bleurt")


def test_general_prompt_keeps_its_last_tokens_in_a_short_window():
    backend = Scripted(replies("", ""), context=12)
    guided, general = parse_scorer("guided").requests(TEXT, target_view(backend))
    assert len(general.prompt) + general.max_new_tokens == 12 and general.prompt[-len(guided.prompt):] == guided.prompt


def test_paired_difference_test_by_hand():
    test = paired_difference_test([0.5, 0.2, -0.1, 0.0, 0.3], n_boot=0)
    assert (test["positive"], test["negative"]) == (3, 1) and test["mean"] == pytest.approx(0.18)
    assert test["sign_test_p"] == pytest.approx(5 / 16) and test["bootstrap_p"] is None and not test["significant"]
    all_up = paired_difference_test([0.1] * 5, n_boot=200)
    assert all_up["sign_test_p"] == pytest.approx(1 / 32) and all_up["bootstrap_p"] == 0.0 and all_up["significant"]
    assert paired_difference_test([0.0, 0.0])["sign_test_p"] == 1.0
    with pytest.raises(BlackboxMIAError):
        paired_difference_test([])


def test_eval_reports_the_dataset_tests_per_label():
    scorers = parse_scorers("guided,guided:metric=near_exact,loss")
    labels = np.array([1] * 5 + [0] * 4)
    scores = {"guided": np.array([0.5] * 5 + [0.1, -0.1, 0.2, -0.3]),
              "guided:metric=near_exact": np.array([1, 1, 0, 0, 0, 1, 0, 0, 0], dtype=float), "loss": np.zeros(9)}
    notes: list[str] = []
    tests = _dataset_tests(scorers, scores, labels, 0, notes)
    assert set(tests) == {"guided", "guided:metric=near_exact"}  # loss has no dataset test
    assert tests["guided"]["members"]["sign_test_p"] == pytest.approx(1 / 32) and tests["guided"]["members"]["significant"]
    assert tests["guided"]["nonmembers"]["sign_test_p"] == pytest.approx(11 / 16)  # 2 up, 2 down
    assert tests["guided:metric=near_exact"]["members"]["significant"]  # 2 near-exact: the paper's rule
    assert not tests["guided:metric=near_exact"]["nonmembers"]["significant"]  # 1 is not enough
    assert len(notes) == 4 and "contaminated" in notes[0]
