"""ReCaLL and DC-PDD against hand-computed values on fixed token ids and log-probs."""

import json
import math

import numpy as np
import pytest

from blackbox_mia.scorers import Need, check_conditioning, parse_scorer
from blackbox_mia.scorers.recall import prefix_text
from blackbox_mia.types import BlackboxMIAError, Provenance, TokenLogprobs


def tlp(ids, values):
    prov = Provenance("test", "none", "fixed", True)
    return TokenLogprobs(np.asarray(ids), ["t"] * len(ids), values, (0,), prov)


@pytest.fixture
def prefix_file(tmp_path):
    path = tmp_path / "nonmembers.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": t, "label": 0}) + "\n" for i, t in enumerate(["a b", "c d"])))
    return path


def test_recall_is_ratio_of_conditional_to_plain_mean_loglik(prefix_file):
    scorer = parse_scorer(f"recall:prefix={prefix_file},shots=2")
    assert scorer.needs("x y") == [Need("a b\n\nc d\n\nx y")]
    plain = tlp([5, 6], [-1.0, -3.0])  # LL(x) = -2
    conditioned = tlp([1, 2, 5, 6], [-0.5, -0.5, -2.0, -4.0])  # LL(x | P) = mean(-2, -4) = -3
    assert scorer.score("x y", plain, [conditioned]).value == pytest.approx(1.5)  # > 1: P hurt x


def test_recall_refuses_a_text_tokenized_differently_after_the_prefix(prefix_file):
    scorer = parse_scorer(f"recall:prefix={prefix_file}")
    with pytest.raises(BlackboxMIAError, match="tokenized differently"):
        scorer.score("x y", tlp([5, 6], [-1.0, -3.0]), [tlp([1, 9, 6], [-0.5, -2.0, -4.0])])


def test_recall_needs_a_prefix_and_enough_shots(prefix_file):
    with pytest.raises(BlackboxMIAError, match="needs prefix=PATH"):
        parse_scorer("recall").needs("x")
    with pytest.raises(BlackboxMIAError, match="holds 2 texts"):
        prefix_text(str(prefix_file), 3, "recall")
    assert prefix_text(str(prefix_file), 1, "recall") == "a b"


def test_dc_pdd_hand_value():
    # corpus token counts c = [1, 2, 3] (V = 3 from the largest id), total 6: f = (1 + c) / 9
    corpus = [tlp([0, 1, 1, 2], [-1.0] * 4), tlp([2, 2], [-1.0] * 2)]
    # text ids 1, 2, 1, 0: the first occurrences are positions 0, 1, 3 (the second 1 is left out)
    text = tlp([1, 2, 1, 0], np.log([0.5, 0.1, 0.9, 0.2]))
    alphas = [min(0.5 * math.log(9 / 3), 0.4), 0.1 * math.log(9 / 4), 0.2 * math.log(9 / 2)]  # the first clipped at a
    score = parse_scorer("dc_pdd:a=0.4").score("t", text, corpus)
    assert score.value == pytest.approx(sum(alphas) / 3)
    assert score.value == pytest.approx((0.4 + 0.0810930 + 0.3008155) / 3)
    # default a = 0.01 clips all three
    assert parse_scorer("dc_pdd").score("t", text, corpus).value == pytest.approx(0.01)
    # vocab given: V = 5 smooths with 6 + 5; f(1) = 3 / 11
    wide = parse_scorer("dc_pdd:a=10,vocab=5").score("t", tlp([1], [math.log(0.5)]), corpus)
    assert wide.value == pytest.approx(0.5 * math.log(11 / 3))


def test_dc_pdd_refuses_ids_beyond_the_table():
    corpus = [tlp([0, 1, 2], [-1.0] * 3)]
    with pytest.raises(BlackboxMIAError, match="beyond vocab=2"):
        parse_scorer("dc_pdd:vocab=2").score("t", tlp([1], [-1.0]), corpus)
    with pytest.raises(BlackboxMIAError, match="beyond vocab=5"):
        parse_scorer("dc_pdd:vocab=5").score("t", tlp([7], [-1.0]), [tlp([0, 1, 1], [-1.0] * 3)])
    # vocab 0: V = 3 from the corpus; id 7 never in the corpus has f = 1 / (3 + 3)
    assert parse_scorer("dc_pdd:a=10").score("t", tlp([7], [math.log(0.5)]), corpus).value == pytest.approx(
        0.5 * math.log(6))


def test_dc_pdd_needs_the_first_corpus_texts_of_gsm8k_train_by_default():
    needs = parse_scorer("dc_pdd:n_corpus=3").needs("t")
    assert len(needs) == 3 and needs[0].text.startswith("Question: Natalia sold clips")


def test_recall_prefix_texts_are_refused_among_an_audits_items(prefix_file):
    scorer, loss = parse_scorer(f"recall:prefix={prefix_file},shots=2"), parse_scorer("loss")
    assert scorer.conditioning_texts() == ("a b", "c d") and loss.conditioning_texts() == ()
    check_conditioning((loss, scorer), ["x y", "a b c"], "the sweep's own items")  # no clash
    with pytest.raises(BlackboxMIAError, match="conditions on 1 text"):
        check_conditioning((loss, scorer), ["x y", "c d"], "the sweep's own items")
