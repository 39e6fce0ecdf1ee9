"""The shared gemmlowp/TFLite fixed-point helpers of nnapi_ref.ops.requantization (and common.wrap) against slow scalar
references written here from the C++ definitions (Python ints, C truncating division)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.ops import common, fixedpoint, requantization

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
int32s = st.integers(INT32_MIN, INT32_MAX)


def c_div(a: int, b: int) -> int:
    """C integer division: truncation toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def wrap_ref(x: int, bits: int = 32) -> int:
    m = 1 << bits
    x %= m
    return x - m if x >= m // 2 else x


def srdhm_ref(a: int, b: int, bits: int = 32) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul for intN_t (N = bits)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if a == lo and b == lo:
        return hi
    ab = a * b
    nudge = (1 << (bits - 2)) if ab >= 0 else 1 - (1 << (bits - 2))
    return c_div(ab + nudge, 1 << (bits - 1))


def rdbpot_ref(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def mbqm_ref(x: int, multiplier: int, shift: int) -> int:
    """TFLite MultiplyByQuantizedMultiplier (the left shift wraps in int32)."""
    left = shift if shift > 0 else 0
    right = 0 if shift > 0 else -shift
    return rdbpot_ref(srdhm_ref(wrap_ref(x * (1 << left)), multiplier), right)


SPECIAL = [INT32_MIN, INT32_MIN + 1, -(1 << 30), -(1 << 30) - 1, -3, -2, -1, 0, 1, 2, 3, 1 << 30, INT32_MAX - 1,
           INT32_MAX]


@given(int32s, int32s)
def test_srdhm_matches_reference(a, b):
    assert int(requantization.saturating_rounding_doubling_high_mul(a, b)) == srdhm_ref(a, b)


def test_srdhm_special_values_and_saturation():
    a, b = np.meshgrid(np.array(SPECIAL, np.int64), np.array(SPECIAL, np.int64))
    got = requantization.saturating_rounding_doubling_high_mul(a, b)
    want = np.array([[srdhm_ref(int(x), int(y)) for x, y in zip(ra, rb)] for ra, rb in zip(a, b)])
    np.testing.assert_array_equal(got, want)
    assert int(requantization.saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN)) == INT32_MAX


def test_srdhm_ties():
    # a * b = +-2**30 is exactly half a unit: gemmlowp rounds +0.5 up and -0.5 toward zero.
    assert int(requantization.saturating_rounding_doubling_high_mul(1 << 15, 1 << 15)) == 1 == srdhm_ref(1 << 15, 1 << 15)
    assert int(requantization.saturating_rounding_doubling_high_mul(-(1 << 15), 1 << 15)) == 0 == srdhm_ref(-(1 << 15), 1 << 15)
    assert int(requantization.saturating_rounding_doubling_high_mul(-3 << 29, 1)) == srdhm_ref(-3 << 29, 1)


@given(st.integers(-(1 << 15), (1 << 15) - 1), st.integers(-(1 << 15), (1 << 15) - 1))
def test_srdhm_16_bit(a, b):
    assert int(requantization.saturating_rounding_doubling_high_mul(a, b, 16)) == srdhm_ref(a, b, 16)
    assert int(requantization.saturating_rounding_doubling_high_mul(-32768, -32768, 16)) == 32767


@given(int32s, st.integers(0, 31))
def test_rounding_divide_by_pot_matches_reference(x, e):
    assert int(requantization.rounding_divide_by_pot(x, e)) == rdbpot_ref(x, e)


def test_rounding_divide_by_pot_negative_ties():
    x = np.array([-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7], np.int64)
    for e in range(4):
        np.testing.assert_array_equal(requantization.rounding_divide_by_pot(x, e), [rdbpot_ref(int(v), e) for v in x])
    # -2.5 -> -3 and 2.5 -> 3: halves away from zero.
    assert list(requantization.rounding_divide_by_pot(np.array([-5, 5]), 1)) == [-3, 3]


@given(st.lists(int32s, min_size=1, max_size=8), st.lists(st.integers(0, 31), min_size=1, max_size=8))
def test_rounding_divide_by_pot_array_exponent(xs, es):
    n = min(len(xs), len(es))
    x, e = np.array(xs[:n], np.int64), np.array(es[:n], np.int64)
    np.testing.assert_array_equal(requantization.rounding_divide_by_pot(x, e), [rdbpot_ref(a, b) for a, b in zip(xs, es)])
    # Broadcasting: a column of values against a row of exponents.
    got = requantization.rounding_divide_by_pot(x[:, None], e[None, :])
    np.testing.assert_array_equal(got, [[rdbpot_ref(a, b) for b in es[:n]] for a in xs[:n]])


multipliers = st.one_of(st.integers(1 << 30, INT32_MAX), st.integers(INT32_MIN, INT32_MAX), st.just(0))


@given(int32s, multipliers, st.integers(-31, 30))
def test_multiply_by_quantized_multiplier_matches_reference(x, m, shift):
    assert int(requantization.multiply_by_quantized_multiplier(x, m, shift)) == mbqm_ref(x, m, shift)


@settings(max_examples=50)
@given(st.lists(int32s, min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(1 << 30, INT32_MAX), st.integers(-31, 8)), min_size=1, max_size=5))
def test_multiply_by_quantized_multiplier_per_channel(xs, channels):
    x = np.array(xs, np.int64)[:, None]
    m = np.array([c[0] for c in channels], np.int64)
    s = np.array([c[1] for c in channels], np.int64)
    got = requantization.multiply_by_quantized_multiplier(x, m, s)
    want = [[mbqm_ref(v, mm, ss) for mm, ss in channels] for v in xs]
    np.testing.assert_array_equal(got, want)


def test_multiply_by_quantized_multiplier_extremes():
    x = np.array(SPECIAL, np.int64)
    for m in (INT32_MIN, -(1 << 30), 1 << 30, INT32_MAX, 1518500250):
        for shift in (-31, -12, -1, 0, 1, 5):
            np.testing.assert_array_equal(requantization.multiply_by_quantized_multiplier(x, m, shift),
                                          [mbqm_ref(int(v), m, shift) for v in x])


@given(st.integers(-(1 << 40), 1 << 40), st.sampled_from([8, 16, 32]))
def test_wrap(x, bits):
    assert int(common.wrap(x, bits)) == wrap_ref(x, bits)


def test_fixedpoint_reuses_the_shared_helpers():
    assert fixedpoint.saturating_rounding_doubling_high_mul is requantization.saturating_rounding_doubling_high_mul
    assert fixedpoint.rounding_divide_by_pot is requantization.rounding_divide_by_pot


@pytest.mark.parametrize("real", [1e-6, 0.0037, 0.25, 0.5, 0.99999999, 1.0, 1.5, 3.7, 1000.0])
def test_quantize_multiplier_round_trip(real):
    m, shift = requantization.quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31)
    assert abs(m * 2.0 ** (shift - 31) - real) <= real * 2 ** -30
