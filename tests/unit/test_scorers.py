"""Scorers against hand-computed values on fixed log-prob arrays."""

import math
import zlib
from collections import Counter

import numpy as np
import pytest

from blackbox_mia.scorers import REGISTRY, parse_scorer, parse_scorers, split_specs
from blackbox_mia.scorers.pac import swap_neighbours
from blackbox_mia.types import BlackboxMIAError, Provenance, TokenLogprobs

LP7 = [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
TEXT = "Natalia sold clips to 48 of her friends"


def tlp(values, mu=None, sigma=None):
    n = len(values)
    prov = Provenance("test", "none", "fixed", True)
    return TokenLogprobs(np.arange(n), ["t"] * n, values, (0,), prov, mu=mu, sigma=sigma)


def test_loss_is_mean_logprob():
    assert parse_scorer("loss").score(TEXT, tlp(LP7), []).value == pytest.approx(-4.0)


@pytest.mark.parametrize("k, expected", [(20, -7.0), (30, -6.5), (50, -6.0), (100, -4.0), (1, -7.0)])
def test_min_k_hand_values(k, expected):
    # N = 7: E = max(1, floor(7k/100)) -> k=20: 1, k=30: 2 (2.1), k=50: 3 (3.5), k=100: 7, k=1: 1
    assert parse_scorer(f"min_k:k={k}").score(TEXT, tlp(LP7), []).value == pytest.approx(expected)


def test_one_token_text():
    one = tlp([-2.5])
    assert parse_scorer("min_k").score(TEXT, one, []).value == pytest.approx(-2.5)
    assert parse_scorer("loss").score(TEXT, one, []).value == pytest.approx(-2.5)
    # PAC = mean PD of the neighbours - PD(text): PD of one token is 0 (its top 5% and bottom 30% are itself)
    assert parse_scorer("pac").score(TEXT, one, [tlp(LP7)]).value == pytest.approx(5.5)


def test_zlib_divides_by_compressed_bytes():
    size = len(zlib.compress(TEXT.encode("utf-8")))
    assert parse_scorer("zlib").score(TEXT, tlp(LP7), []).value == pytest.approx(-4.0 / size)


def test_lowercase_ratio_of_nll():
    scorer = parse_scorer("lowercase")
    assert [n.text for n in scorer.needs(TEXT)] == [TEXT.lower()]
    # NLL(lower) = 5, NLL(text) = 4 -> 1.25
    assert scorer.score(TEXT, tlp(LP7), [tlp([-5.0, -5.0])]).value == pytest.approx(1.25)


def test_min_k_pp_hand_values():
    lp = tlp(LP7, mu=[-2.0] * 7, sigma=[2.0] * 7)  # z = 0.5, 0, -0.5, ..., -2.5
    assert parse_scorer("min_k_pp").score(TEXT, lp, []).value == pytest.approx(-2.5)
    assert parse_scorer("min_k_pp:k=30").score(TEXT, lp, []).value == pytest.approx(-2.25)


def test_min_k_pp_refuses_without_vocab_stats():
    with pytest.raises(BlackboxMIAError, match="full next-token distribution"):
        parse_scorer("min_k_pp").score(TEXT, tlp(LP7), []).value


def test_ref_is_target_minus_reference_loss():
    scorer = parse_scorer("ref")
    assert [(n.text, n.role) for n in scorer.needs(TEXT)] == [(TEXT, "reference")]
    assert scorer.score(TEXT, tlp(LP7), [tlp([-3.0, -3.0, -3.0])]).value == pytest.approx(-1.0)


def test_ref_with_several_references_subtracts_their_mean():
    scorer = parse_scorer("ref:refs=3")
    assert scorer.label == "ref:refs=3"
    assert [n.role for n in scorer.needs(TEXT)] == ["reference", "reference2", "reference3"]
    # target mean -4; reference means -3, -5.5, -6 (own tokenizations: 3, 2, 1 tokens): -4 - (-14.5 / 3)
    refs = [tlp([-3.0, -3.0, -3.0]), tlp([-5.0, -6.0]), tlp([-6.0])]
    assert scorer.score(TEXT, tlp(LP7), refs).value == pytest.approx(-4.0 + 14.5 / 3)
    with pytest.raises(BlackboxMIAError, match="refs"):
        parse_scorer("ref:refs=0")


def test_polarized_distance_hand_value():
    # PD(LP7) with k1 = 5%: E1 = 1 -> top -1; k2 = 30%: E2 = 2 -> bottom mean -6.5; PD = 5.5 (a neighbour
    # here), minus PD of a constant text, 0
    assert parse_scorer("pac").score(TEXT, tlp([-1.0, -1.0, -1.0]), [tlp(LP7)]).value == pytest.approx(5.5)


def test_pac_score_is_mean_neighbour_pd_minus_pd():
    scorer = parse_scorer("pac")
    neighbours = [tlp([-1.0, -1.0, -1.0]), tlp([-2.0, -8.0, -2.0, -2.0])]  # PD 0 and 6 (E2 = 1)
    assert scorer.score(TEXT, tlp(LP7), neighbours).value == pytest.approx(3.0 - 5.5)


def test_pac_neighbours_deterministic_and_keep_words():
    text = "Weng earns $12 an hour for babysitting.\nYesterday, she just did 50 minutes of babysitting."
    first = swap_neighbours(text, 5, 0.3, seed=7)
    assert first == swap_neighbours(text, 5, 0.3, seed=7)
    assert first != swap_neighbours(text, 5, 0.3, seed=8)
    assert len(first) == 5
    for neighbour in first:
        assert sorted(neighbour.split()) == sorted(text.split())
        assert neighbour.count("\n") == 1  # whitespace stays in place
    assert any(n != text for n in first)
    assert swap_neighbours("single", 3, 0.3, seed=0) == ["single"] * 3


def test_pac_neighbours_are_the_recorded_ones():
    """Neighbours recorded from the whitespace-split implementation (``re.split(r"(\\s+)")``)
    before it moved onto the segmenter: the random stream and the slots must not change."""
    text = "Weng earns $12 an hour.\nYesterday,  she did 50\tminutes."
    assert swap_neighbours(text, 3, 0.3, seed=1) == [
        "Weng earns minutes. an hour.\nYesterday,  she did 50\t$12",
        "50 earns an $12 hour.\nYesterday,  Weng did she\tminutes.",
        "Weng earns $12 hour. an\nYesterday,  she did 50\tminutes.",
    ]
    assert swap_neighbours("  leading and trailing  ", 3, 0.3, seed=1) == [
        "  trailing and leading  ", "  and leading trailing  ", "  trailing and leading  ",
    ]
    assert swap_neighbours("a b c d e f g h i j", 2, 0.3, seed=1) == ["a j c d h f b e i g", "a g c d b h e f i j"]
    assert swap_neighbours("   ", 2, 0.3, seed=1) == ["   ", "   "]


def test_pac_neighbours_with_the_chars_segmenter_swap_characters():
    neighbours = swap_neighbours("日本語の文", 2, 0.3, seed=1, segmenter="chars")
    assert neighbours == ["日文語の本", "日本文の語"]  # W = 5 -> m = 1 swap each
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'nope'"):
        swap_neighbours("a b", 1, 0.3, seed=1, segmenter="nope")


def test_pac_needs_five_neighbours_by_default():
    assert len(parse_scorer("pac").needs(TEXT)) == 5


def _as_permutation(neighbour: str, words: list[str]) -> list[str] | None:
    """``words`` reordered so that they join to ``neighbour`` (each used once), or None."""
    if not words:
        return [] if neighbour == "" else None
    for i, word in enumerate(words):
        if neighbour.startswith(word):
            rest = _as_permutation(neighbour[len(word):], words[:i] + words[i + 1:])
            if rest is not None:
                return [word, *rest]
    return None


def test_pac_neighbours_of_japanese_text_permute_mecab_words():
    text = "東京は日本の首都です。"
    words = ["東京", "は", "日本", "の", "首都", "です", "。"]  # MeCab (unidic-lite); W = 7 -> m = 2 swaps
    scorer = parse_scorer("pac:segmenter=japanese")
    assert scorer.label == "pac:segmenter=japanese" and scorer.params()["segmenter"] == "japanese"
    neighbours = [need.text for need in scorer.needs(text)]
    assert neighbours == [  # recorded; the checks below say why they are right
        "は東京首都の日本です。",
        "東京はの首都日本です。",
        "東京はです首都の日本。",
        "東京です日本のは首都。",
        "は東京日本の。です首都",
    ]
    for neighbour in neighbours:
        order = _as_permutation(neighbour, words)
        assert order is not None and Counter(order) == Counter(words)  # same multiset of words
        assert order != words  # in another order
    # auto picks the japanese segmenter for this text: the same neighbours
    assert [need.text for need in parse_scorer("pac:segmenter=auto").needs(text)] == neighbours
    # the whitespace default sees one word: no swap
    assert [need.text for need in parse_scorer("pac").needs(text)] == [text] * 5


def test_pac_segmenter_default_keeps_label_and_unknown_fails_at_parse():
    assert parse_scorer("pac").label == "pac" and parse_scorer("pac").segmenter == "whitespace"
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'nope'"):
        parse_scorer("pac:segmenter=nope")


def test_parse_specs_and_labels():
    assert split_specs("loss,min_k:k=10,pac:k1=5,k2=20") == ["loss", "min_k:k=10", "pac:k1=5,k2=20"]
    scorers = parse_scorers("loss,min_k:k=10,min_k")
    assert [s.label for s in scorers] == ["loss", "min_k:k=10", "min_k"]
    assert scorers[1].k == 10.0
    assert set(REGISTRY) == {"loss", "zlib", "lowercase", "min_k", "min_k_pp", "pac", "ref", "recall", "con_recall", "dc_pdd", "samia", "cdd", "ts_guessing",
                             "ts_guessing_keyword", "guided", "decop"}


@pytest.mark.parametrize("spec", ["nope", "min_k:q=3", "min_k:k=abc", "min_k:k=0", "loss,loss"])
def test_bad_specs_raise(spec):
    with pytest.raises(BlackboxMIAError):
        scorers = parse_scorers(spec)
        scorers[0].score(TEXT, tlp(LP7), [])


def test_lowercase_with_a_zero_nll_text_is_infinite_not_a_crash():
    from blackbox_mia.scorers import parse_scorers

    [scorer] = parse_scorers("lowercase")
    prov = Provenance("test", "none", "fixed", True)
    certain = TokenLogprobs([1, 2], ["a", "b"], [0.0, 0.0], (0,), prov)
    lowered = TokenLogprobs([1, 2], ["a", "b"], [-1.0, -3.0], (0,), prov)
    assert scorer.score("AB", certain, [lowered]).value == math.inf
    assert math.isnan(scorer.score("AB", certain, [certain]).value)
