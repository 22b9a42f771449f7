"""studies/bisect_floor.py: the optimal search tree and entropy behind the bisection floor,
against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from studies import bisect_floor


@pytest.fixture(scope="module")
def floor():
    return bisect_floor


def test_optimal_search_tree_questions(floor):
    # two equally likely ε-bins: one question
    assert floor.oracle_questions(np.array([0.5, 1.5]), 1.0) == pytest.approx(1.0)
    # bins 0, 1, 2 with weights 1/2, 1/4, 1/4: split {0} | {1, 2}: 1 + 1/2 questions
    assert floor.oracle_questions(np.array([0.5, 0.5, 1.5, 2.5]), 1.0) == pytest.approx(1.5)
    # eight equally likely bins: three questions
    assert floor.oracle_questions(np.arange(8) + 0.5, 1.0) == pytest.approx(3.0)
    # a skewed alphabetic case: weights 0.7, 0.1, 0.1, 0.1 -> {0} | {1, 2, 3}: 1 + 0.3 * 5/3
    gaps = np.array([0.5] * 7 + [1.5, 2.5, 3.5])
    assert floor.oracle_questions(gaps, 1.0) == pytest.approx(1.0 + 0.3 * (1 + 2 / 3))


def test_entropy_of_the_gaps_in_epsilon_bins(floor):
    # one gap per 0.25-nat histogram bin over [0, 1): 2 bits at ε = 0.25, 2 + log2(25) at ε = 0.01
    gaps = np.array([0.1, 0.35, 0.6, 0.85])
    assert floor.entropy_bits(gaps, 0.25) == pytest.approx(2.0)
    assert floor.entropy_bits(gaps, 0.01) == pytest.approx(2.0 + np.log2(25))
