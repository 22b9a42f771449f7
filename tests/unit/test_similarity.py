"""Memorization measures (Ishihara & Takahashi 2024) on hand-made pairs, counted in characters."""

from __future__ import annotations

import pytest

from blackbox_mia.text.similarity import approximate, common_prefix, eidetic, exact


@pytest.mark.parametrize(
    ("generation", "reference", "want"),
    [
        ("abcx", "abcd", 3),
        ("abcd", "abcd", 4),
        ("abcdef", "abc", 3),  # longer generation: at most the reference
        ("ab", "abc", 2),  # shorter generation: what it has
        ("xbcd", "abcd", 0),  # the first mismatch ends the count, later matches do not count
        ("", "abc", 0),
        ("東京都に住む", "東京都で働く", 3),  # characters, not bytes (9 equal bytes) or words
        ("今日は晴れ", "今日は晴れ", 5),
    ],
)
def test_eidetic_counts_forward_matching_characters(generation, reference, want):
    assert eidetic(generation, reference) == want


@pytest.mark.parametrize(
    ("generation", "reference", "want"),
    [([5, 7, 9], [5, 7, 8], 2), ([5, 7, 9], [5, 7], 2), ([4, 7], [5, 7], 0), ([], [1], 0)],
)
def test_common_prefix_counts_leading_equal_token_ids(generation, reference, want):
    assert common_prefix(generation, reference) == want


@pytest.mark.parametrize(
    ("generation", "reference", "want"),
    [
        ("abcd", "abcd", 1.0),
        ("kitten", "sitting", 1 - 3 / 7),  # 2 substitutions + 1 insertion, longer has 7
        ("abcdef", "abc", 1 - 3 / 6),  # longer generation: 3 deletions over 6
        ("ab", "abcd", 1 - 2 / 4),  # shorter generation: 2 insertions over 4
        ("東京都に住む", "東京都で働く", 1 - 3 / 6),  # 3 substituted characters of 6
        ("", "abc", 0.0),
        ("", "", 1.0),  # two empty strings are identical (not 0/0)
    ],
)
def test_approximate_is_one_minus_normalised_levenshtein(generation, reference, want):
    assert approximate(generation, reference) == pytest.approx(want, abs=1e-12)


def test_exact_means_the_generation_starts_with_the_whole_reference():
    assert exact("abc and more", "abc") and exact("東京都で働く。", "東京都で働く") and exact("abc", "abc")
    assert not exact("ab", "abc") and not exact("xabc", "abc")
    assert exact("anything", "")  # an empty reference is trivially reproduced
