"""How precisely a server reports log-probs: rounding to a short float format, read off the values.

Some hosted models return log-probs rounded to bfloat16 (8 significant bits: values such as
−22.125, off by up to 0.0625 nats at −16) or float16 (11 bits). A value rounded to nearest with
``s`` significant bits is within ``|r| · 2^-s`` of the true value ``v`` (half a unit in the last
place of the larger binade; IEEE 754 round-to-nearest), plus, for float16, half its smallest
subnormal step near 0. The capability probe reads the significant bits of the values it was
sent (:func:`report_bits`, no extra request) and the tracker widens every value it reports by
:func:`rounding_error` (:meth:`~.capabilities.Capabilities.report_error`). The emulator rounds with
:func:`round_to` (``bbmia serve --logprob-precision``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .http.wire import FLOOR_LOGPROB

SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11, "float32": 24}
"""Significant bits (the implicit leading bit included) of the formats a server may round to."""

MIN_VALUES_READ = 8
"""Fewest reported values from which the probe names a short format (a float32 value needs at
most 11 bits by chance with probability 2^-13, so eight such values do not happen by accident)."""

FLOAT16_SUBNORMAL_HALF_STEP = 2.0**-25  # nats: float16 rounds |v| < 2^-14 to multiples of 2^-24


def significant_bits(value: float) -> int:
    """Significant bits of ``value``'s binary mantissa (0 for 0; 53 at most for a float64).

    ``−22.125 = −10110.001₂`` needs 8; ``−0.1`` needs 53 (it is not a short binary fraction).
    """
    if value == 0 or not math.isfinite(value):
        return 0
    mantissa, _ = math.frexp(abs(value))  # in [0.5, 1)
    integer = int(mantissa * 2**53)  # exact: the float64 mantissa has 53 bits
    return 53 - ((integer & -integer).bit_length() - 1)


def report_bits(values: Iterable[float]) -> int | None:
    """The short format a server rounds its log-probs to, read off the ``values`` it reported:
    8 (bfloat16) or 11 (float16) significant bits when every finite nonzero value (the
    :data:`~.http.wire.FLOOR_LOGPROB` stand-in for −inf excluded) fits in them; ``None`` when
    one needs more (float32 or finer: values are taken as exact) or fewer than
    :data:`MIN_VALUES_READ` values could be read."""
    read = [v for v in values if v != 0 and v != FLOOR_LOGPROB and math.isfinite(v)]
    if len(read) < MIN_VALUES_READ:
        return None
    needed = max(significant_bits(v) for v in read)
    return next((bits for bits in sorted(SIGNIFICANT_BITS.values()) if needed <= bits < SIGNIFICANT_BITS["float32"]),
                None)


def rounding_error(values: np.ndarray, bits: int | None) -> np.ndarray:
    """The largest |reported − true| (nats) of log-probs reported with ``bits`` significant bits:
    ``|v| · 2^-bits`` (plus float16's subnormal half step); zeros for ``None`` (exact reports).
    Shape of ``values``; infinite where a value is infinite."""
    values = np.abs(np.asarray(values, dtype=np.float64))
    if bits is None:
        return np.zeros_like(values)
    return values * 2.0**-bits + (FLOAT16_SUBNORMAL_HALF_STEP if bits == SIGNIFICANT_BITS["float16"] else 0.0)


def computation_error(values: np.ndarray, bits: int | None) -> np.ndarray:
    """The largest |reported − model's| (nats) of log-probs a server computes in the format it
    reports them in (``bits`` significant bits; ``None``: float32, the finest servers compute
    log-probs in): ``(|v| + 1) · 2^-s``. Beyond :func:`rounding_error`'s ``|v| · 2^-s``, the
    constant term is log_softmax's own: the log of a normalising sum near 1 is off by up to half
    a unit at 1 (round to nearest, IEEE 754), so a value near 0 is known to ``2^-s`` nats, not to
    its own relative precision. What a closed form that amplifies values near 0 must allow for
    (post-bias read-out, :mod:`.tracker.postbias`). Shape of ``values``."""
    values = np.abs(np.asarray(values, dtype=np.float64))
    return (values + 1.0) * 2.0 ** -(SIGNIFICANT_BITS["float32"] if bits is None else bits)


def round_to(values: np.ndarray, precision: str) -> np.ndarray:
    """``values`` rounded to nearest (ties to even) in ``precision`` (a key of
    :data:`SIGNIFICANT_BITS`), returned as float64; ±inf stay. float16 keeps its range
    (subnormals included); bfloat16 has float32's exponent range, so only the mantissa is cut.

    Raises:
        ValueError: an unknown precision.
    """
    values = np.asarray(values, dtype=np.float64)
    if precision == "float16":
        return values.astype(np.float16).astype(np.float64)
    if precision == "float32":
        return values.astype(np.float32).astype(np.float64)
    if precision != "bfloat16":
        raise ValueError(f"unknown precision {precision!r}: use {', '.join(SIGNIFICANT_BITS)}")
    bits = SIGNIFICANT_BITS["bfloat16"]
    with np.errstate(invalid="ignore"):
        mantissa, exponent = np.frexp(values)
        rounded = np.ldexp(np.round(mantissa * 2.0**bits) / 2.0**bits, exponent)
    return np.where(np.isfinite(values), rounded, values)
