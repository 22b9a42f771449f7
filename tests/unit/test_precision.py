"""Reported precision: significant bits of values, the formats a server rounds to, and the error
bound the tracker widens values by (blackbox_mia/backends/api/precision.py)."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.precision import report_bits, round_to, rounding_error, significant_bits
from blackbox_mia.backends.api.tracker.strategies import topn_upper_bound

RNG_VALUES = -np.random.default_rng(0).exponential(6.0, 2000).astype(np.float32).astype(np.float64)


def test_significant_bits_by_hand():
    assert significant_bits(-22.125) == 8  # 10110.001 in binary
    assert significant_bits(-16.0) == 1
    assert significant_bits(-0.75) == 2
    assert significant_bits(-0.1) == 52  # 0x3FB999999999999A: not a short binary fraction
    assert significant_bits(0.0) == 0


@pytest.mark.parametrize("precision, dtype", [("bfloat16", "bfloat16"), ("float16", "float16")])
def test_rounding_equals_torch_casts(precision, dtype):
    torch = pytest.importorskip("torch")
    expected = torch.tensor(RNG_VALUES, dtype=torch.float32).to(getattr(torch, dtype)).double().numpy()
    assert np.array_equal(round_to(RNG_VALUES, precision), expected)


@pytest.mark.parametrize("precision, bits", [("bfloat16", 8), ("float16", 11), ("float32", None)])
def test_the_format_is_read_off_the_values_and_bounds_its_error(precision, bits):
    reported = round_to(RNG_VALUES, precision)
    assert report_bits(reported.tolist()) == bits
    error = np.abs(reported - RNG_VALUES)
    assert np.all(error <= rounding_error(reported, bits))  # the bound holds at every value...
    if bits is not None:
        assert error.max() > rounding_error(reported, bits).max() / 4  # ...and is not loose by orders
    assert report_bits(reported[:7].tolist()) is None  # too few values to tell


def test_bfloat16_at_minus_16_is_off_by_up_to_a_sixteenth():
    # -16.06 rounds to -16.0 (bf16 steps are 0.125 above 16 in magnitude): 0.06 nats off
    assert round_to(np.asarray([-16.06]), "bfloat16")[0] == -16.0
    assert rounding_error(np.asarray([-16.0]), 8)[0] == 0.0625


def test_the_topn_bound_allows_for_rounded_listed_values():
    exact = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, True)
    rounded = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, True, report_bits=8)
    answer = NextToken(frozenset({0}), -0.5, (Listed(frozenset({0}), -0.5), Listed(frozenset({1}), -12.0)))
    # the mass bound: log(1 - e^-0.5) = -0.933 is above -12: the listed minimum binds
    assert topn_upper_bound(answer, 7, exact) == pytest.approx(-12.0)
    # reported -12.0 in bfloat16 may be -12.046875: an unlisted token may lie up to there
    assert topn_upper_bound(answer, 7, rounded) == pytest.approx(-12.0 + 12 / 256)


def test_jitter_widens_every_value():
    caps = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, True, report_bits=8, jitter=0.2)
    assert caps.report_error(np.asarray([-2.0, 0.0])) == pytest.approx([2 / 256 + 0.2, 0.2])
