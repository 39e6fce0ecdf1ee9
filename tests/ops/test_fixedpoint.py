"""gemmlowp fixed-point primitives (nnapi_ref.ops.fixedpoint), checked against hand-computed
values and against math.exp / math.tanh within the precision the Q formats allow."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.ops import fixedpoint as fp

I32 = st.integers(min_value=fp.INT32_MIN, max_value=fp.INT32_MAX)


def q(x, integer_bits):
    """Real value -> raw Qm value (round to nearest)."""
    return int(round(x * 2.0 ** (31 - integer_bits)))


def real(raw, integer_bits):
    return np.asarray(raw, np.float64) / 2.0 ** (31 - integer_bits)


# ---- low-level integer primitives -----------------------------------------------------------

def test_srdhm_hand_values():
    # 0.5 * 0.5 = 0.25 in Q0.31
    assert fp.saturating_rounding_doubling_high_mul(1 << 30, 1 << 30) == 1 << 29
    # -1 * -1 saturates (1 is not representable)
    assert fp.saturating_rounding_doubling_high_mul(fp.INT32_MIN, fp.INT32_MIN) == fp.INT32_MAX
    # -1 * 0.5 = -0.5
    assert fp.saturating_rounding_doubling_high_mul(fp.INT32_MIN, 1 << 30) == -(1 << 30)
    # rounding: ties go up (the negative nudge is 1 - 2**30 and the division truncates):
    # 3 * 2**30 / 2**31 = 1.5 -> 2 ; -1.5 -> -1
    assert fp.saturating_rounding_doubling_high_mul(3, 1 << 30) == 2
    assert fp.saturating_rounding_doubling_high_mul(-3, 1 << 30) == -1
    assert fp.saturating_rounding_doubling_high_mul(1, 1 << 30) == 1  # 0.5 -> 1
    assert fp.saturating_rounding_doubling_high_mul(-1, 1 << 30) == 0  # -0.5 -> 0
    assert fp.saturating_rounding_doubling_high_mul(-5, 1 << 30) == -2  # -2.5 -> -2
    assert fp.saturating_rounding_doubling_high_mul(-7, 1 << 29) == -2  # -1.75 -> -2


@settings(max_examples=200, deadline=None)
@given(I32, I32)
def test_srdhm_matches_exact_rational_rounding(a, b):
    if a == b == fp.INT32_MIN:
        return
    # exact: floor(a*b / 2**31 + 1/2) (round half up), by Python integers
    expected = (a * b + (1 << 30)) >> 31
    assert fp.saturating_rounding_doubling_high_mul(a, b) == expected


@pytest.mark.parametrize("x,e,expected", [
    (5, 1, 3), (-5, 1, -3), (4, 1, 2), (7, 2, 2), (-7, 2, -2), (6, 2, 2), (-6, 2, -2),
    (10, 0, 10), (fp.INT32_MAX, 31, 1), (fp.INT32_MIN, 31, -1), (1, 31, 0),
])
def test_rounding_divide_by_pot(x, e, expected):
    assert fp.rounding_divide_by_pot(x, e) == expected


@settings(max_examples=200, deadline=None)
@given(I32, st.integers(min_value=0, max_value=31))
def test_rounding_divide_by_pot_is_round_half_away(x, e):
    d = 1 << e
    mag = (2 * abs(x) + d) // (2 * d)
    assert fp.rounding_divide_by_pot(x, e) == (mag if x >= 0 else -mag)


def test_saturating_rounding_multiply_by_pot():
    assert fp.saturating_rounding_multiply_by_pot(3, 2) == 12
    assert fp.saturating_rounding_multiply_by_pot(1 << 29, 2) == fp.INT32_MAX
    assert fp.saturating_rounding_multiply_by_pot(-(1 << 29), 2) == fp.INT32_MIN
    assert fp.saturating_rounding_multiply_by_pot((1 << 29) - 1, 2) == (1 << 31) - 4
    assert fp.saturating_rounding_multiply_by_pot(-(1 << 29) + 1, 2) == -(1 << 31) + 4
    assert fp.saturating_rounding_multiply_by_pot(6, -2) == 2
    assert fp.saturating_rounding_multiply_by_pot(7, 0) == 7


def test_rescale_changes_format_not_value():
    raw = q(1.25, 4)
    assert real(fp.rescale(raw, 4, 2), 2) == 1.25
    assert real(fp.rescale(raw, 4, 8), 8) == 1.25
    # 1.25 does not fit Q0: saturates to One()
    assert fp.rescale(raw, 4, 0) == fp.INT32_MAX


def test_rounding_half_sum():
    assert fp.rounding_half_sum(3, 4) == 4  # 3.5 -> 4
    assert fp.rounding_half_sum(-3, -4) == -4
    assert fp.rounding_half_sum(fp.INT32_MAX, fp.INT32_MAX) == fp.INT32_MAX
    assert fp.rounding_half_sum(2, 4) == 3


def test_wrap32():
    assert fp.wrap32(fp.INT32_MAX + 1) == fp.INT32_MIN
    assert fp.wrap32(fp.INT32_MIN - 1) == fp.INT32_MAX
    assert fp.wrap32(-(1 << 32) + 5) == 5


def test_constants():
    assert fp.one(0) == fp.INT32_MAX
    assert fp.one(4) == 1 << 27
    assert fp.constant_pot(-2, 0) == 1 << 29
    assert fp.constant_pot(-2, 4) == 1 << 25


# ---- transcendental functions ---------------------------------------------------------------

def test_exp_interval_polynomial():
    xs = np.linspace(-0.25, -1e-6, 1001)
    got = real(fp.exp_on_interval_between_negative_one_quarter_and_0_excl(fp.from_double(xs, 0)), 0)
    np.testing.assert_allclose(got, np.exp(xs), atol=3e-7)  # 5th-order Taylor term ~2.3e-7


@pytest.mark.parametrize("integer_bits", [0, 1, 3, 4, 5, 6, 8, 12])
def test_exp_on_negative_values_matches_math_exp(integer_bits):
    lo = -min(2.0 ** integer_bits, 40.0)
    xs = np.linspace(lo, 0.0, 4001)
    raw = fp.from_double(xs, integer_bits)
    got = real(fp.exp_on_negative_values(raw, integer_bits), 0)
    expected = np.exp(real(raw, integer_bits))
    np.testing.assert_allclose(got, expected, atol=5e-7)


def test_exp_on_negative_values_corners():
    assert fp.exp_on_negative_values(0, 4) == fp.INT32_MAX  # exp(0) = One()
    # below -32 (representable with > 5 integer bits) clamps to exactly 0
    assert fp.exp_on_negative_values(q(-33.0, 8), 8) == 0
    assert fp.exp_on_negative_values(fp.INT32_MIN, 10) == 0
    # exp(-16) in Q4 range edge is tiny but non-negative
    v = fp.exp_on_negative_values(fp.INT32_MIN, 4)
    assert 0 <= v <= 300  # exp(-16) * 2**31 ~= 241


def test_one_over_one_plus_x():
    xs = np.linspace(0, 0.999, 500)
    got = real(fp.one_over_one_plus_x_for_x_in_0_1(fp.from_double(xs, 0)), 0)
    np.testing.assert_allclose(got, 1 / (1 + xs), atol=1e-8)


def test_one_minus_x_over_one_plus_x():
    xs = np.linspace(0, 0.999, 500)
    got = real(fp.one_minus_x_over_one_plus_x_for_x_in_0_1(fp.from_double(xs, 0)), 0)
    np.testing.assert_allclose(got, (1 - xs) / (1 + xs), atol=1e-8)


@pytest.mark.parametrize("integer_bits", [2, 4, 5])
def test_logistic_and_tanh_match_math(integer_bits):
    top = 2.0 ** integer_bits
    xs = np.linspace(-top + 1e-3, top - 1e-3, 5001)
    raw = fp.from_double(xs, integer_bits)
    x = real(raw, integer_bits)
    np.testing.assert_allclose(real(fp.logistic(raw, integer_bits), 0), 1 / (1 + np.exp(-x)), atol=3e-7)
    np.testing.assert_allclose(real(fp.tanh(raw, integer_bits), 0), np.tanh(x), atol=3e-7)


def test_logistic_tanh_special_points():
    assert fp.logistic(0, 4) == 1 << 30  # exactly one half
    assert fp.tanh(0, 4) == 0
    assert fp.logistic(fp.INT32_MAX, 4) > fp.INT32_MAX - 1000  # ~1
    assert fp.logistic(fp.INT32_MIN, 4) < 1000  # ~0
    assert fp.tanh(fp.INT32_MAX, 4) == fp.INT32_MAX
    assert fp.tanh(fp.INT32_MIN, 4) == -fp.INT32_MAX


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(1 << 31) + 1, max_value=(1 << 31) - 1))
def test_logistic_symmetry_and_tanh_oddness(raw):
    a = int(fp.logistic(raw, 4))
    b = int(fp.logistic(-raw, 4))
    if raw != 0:
        assert a + b == fp.INT32_MAX  # logistic(-x) = 1 - logistic(x), One() = INT32_MAX
    assert int(fp.tanh(raw, 4)) == -int(fp.tanh(-raw, 4))


def test_vectorized_shapes_preserved():
    raw = np.zeros((2, 3), np.int64)
    assert fp.exp_on_negative_values(raw, 4).shape == (2, 3)
    assert fp.logistic(raw, 4).shape == (2, 3)


def test_get_reciprocal():
    # 3.0 in Q12: 1/3 = (raw / 2**31) / 2**bits
    x = np.array([q(3.0, 12), q(1.0, 12), q(100.0, 12)])
    raw, bits = fp.get_reciprocal(x, 12)
    got = real(raw, 0) * 2.0 ** -bits.astype(np.float64)
    np.testing.assert_allclose(got, [1 / 3, 1.0, 0.01], rtol=1e-7)


def test_calculate_input_radius():
    # (2**4 - 1) * 2**27 / 2**left_shift
    assert fp.calculate_input_radius(4, 20) == math.floor(15 * 2 ** 27 / 2 ** 20)
    assert fp.calculate_input_radius(4, 31) == 0


def test_multiply_by_quantized_multiplier_greater_than_one():
    # 1.5 = (3 * 2**29) * 2**1 / 2**31
    assert fp.multiply_by_quantized_multiplier_greater_than_one(10, 3 << 29, 1) == 15
    assert fp.multiply_by_quantized_multiplier_smaller_than_one(10, 3 << 29, 2) == 2  # 10 * 0.75 = 7.5 -> 8, then / 4
