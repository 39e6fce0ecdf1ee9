"""A vectorized numpy port of gemmlowp's fixed-point arithmetic (``fixedpoint.h``), the integer
math behind NNAPI's (TFLite's) quantized LOGISTIC, TANH, SOFTMAX and LOG_SOFTMAX kernels.

Representation
--------------
Every function works on numpy ``int64`` arrays whose values are int32 values, and returns the
same; results are exactly what the C++ code computes with ``std::int32_t`` (including int32
wrap-around where gemmlowp's plain ``+``/``-`` overflow, and saturation where it saturates).

Q formats
---------
A raw int32 ``r`` in gemmlowp's ``FixedPoint<int32_t, m>`` ("m integer bits") stands for the real
number ``r / 2**(31 - m)``: one sign bit, ``m`` integer bits and ``31 - m`` fractional bits, range
``[-2**m, 2**m)``. In Q notation that is Q``m``.``31-m``:

* ``m = 0`` (Q0.31): ``[-1, 1)``, ``r / 2**31``. ``One()`` is ``2**31 - 1`` (1 itself is not
  representable). Results of exp/logistic/tanh are in this format.
* ``m = 4`` (Q4.27): ``[-16, 16)``, the input format of quantized LOGISTIC and TANH.
* ``m = 2`` (Q2.29): the format of the Newton-Raphson reciprocal iterations.

The product of a Q``a`` and a Q``b`` value (:func:`mul`, i.e. SaturatingRoundingDoublingHighMul)
is a Q``a+b`` value; :func:`rescale` moves a value between formats with a saturating / rounding
power-of-two multiplication. Functions taking ``integer_bits`` need the input's format, as the
C++ templates do.

Precision
---------
``exp_on_negative_values`` is accurate to about 2.3e-7 absolute (the truncation error of its
4th-order Taylor polynomial on [-1/4, 0)), ``logistic``/``tanh`` to about 2e-7; NNAPI's
quantized outputs then round to 8 bits.
"""
from __future__ import annotations

import math

import numpy as np

# The primitives shared with the rest of the package (one implementation, in requantization).
from nnapi_ref.ops.requantization import (INT32_MAX, INT32_MIN, multiply_by_quantized_multiplier,
                                          rounding_divide_by_pot, saturating_rounding_doubling_high_mul, wrap_int32)

__all__ = [
    "INT32_MIN", "INT32_MAX", "wrap32", "saturate32", "saturating_rounding_doubling_high_mul", "mul",
    "rounding_divide_by_pot", "saturating_rounding_multiply_by_pot", "rescale", "rounding_half_sum",
    "constant_pot", "one", "from_double", "to_double", "exp_on_interval_between_negative_one_quarter_and_0_excl",
    "exp_on_negative_values", "one_over_one_plus_x_for_x_in_0_1", "one_minus_x_over_one_plus_x_for_x_in_0_1",
    "logistic", "tanh", "multiply_by_quantized_multiplier", "multiply_by_quantized_multiplier_greater_than_one",
    "multiply_by_quantized_multiplier_smaller_than_one", "get_reciprocal", "calculate_input_radius",
]


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def wrap32(x) -> np.ndarray:
    """Reduce int64 values to int32 by two's-complement wrap-around (C's int32 overflow)."""
    return wrap_int32(x)


def saturate32(x) -> np.ndarray:
    return np.clip(_i64(x), INT32_MIN, INT32_MAX)


def mul(a, b) -> np.ndarray:
    """FixedPoint multiplication: Q(m) * Q(n) -> Q(m + n) (raw values)."""
    return saturating_rounding_doubling_high_mul(a, b)


def saturating_rounding_multiply_by_pot(x, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent>: a saturating left shift for
    exponent > 0, a rounding right shift for exponent < 0."""
    x = _i64(x)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    result = wrap32(x << exponent)
    result = np.where(x > threshold, np.int64(INT32_MAX), result)
    return np.where(x < -threshold, np.int64(INT32_MIN), result)


def rescale(x, src_integer_bits: int, dst_integer_bits: int) -> np.ndarray:
    """gemmlowp Rescale<dst>: convert a Q(src) raw value to Q(dst)."""
    return saturating_rounding_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp RoundingHalfSum (ARM VRHADD): (a + b) / 2 rounded away from zero."""
    s = _i64(a) + _i64(b)
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t >> 1, -((-t) >> 1))


def constant_pot(exponent: int, integer_bits: int) -> int:
    """Raw value of 2**exponent in Q(integer_bits) (FixedPoint::ConstantPOT)."""
    offset = 31 - integer_bits + exponent
    assert 0 <= offset < 31, "constant not exactly representable"
    return 1 << offset


def one(integer_bits: int) -> int:
    """Raw value of FixedPoint::One() in Q(integer_bits)."""
    return INT32_MAX if integer_bits == 0 else 1 << (31 - integer_bits)


def from_double(x, integer_bits: int) -> np.ndarray:
    """FixedPoint::FromDouble: round half away from zero, saturating."""
    v = np.asarray(x, np.float64) * float(1 << (31 - integer_bits))
    v = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(v, INT32_MIN, INT32_MAX).astype(np.int64)


def to_double(x, integer_bits: int) -> np.ndarray:
    return _i64(x) / float(1 << (31 - integer_bits))


# Raw Q0.31 constants used by gemmlowp.
_EXP_MINUS_ONE_EIGHTH = 1895147668      # exp(-1/8)
_ONE_THIRD = 715827883                   # 1/3
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))  # (k, exp(-2**k))
_48_OVER_17 = 1515870810                 # 48/17 in Q2.29
_NEG_32_OVER_17 = -1010580540            # -32/17 in Q2.29


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(a) for a Q0.31 value a in [-1/4, 0): 4th-order Taylor expansion around -1/8.
    Returns Q0.31."""
    a = _i64(a)
    x = wrap32(a + constant_pot(-3, 0))
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2)
    poly = saturating_rounding_multiply_by_pot(
        wrap32(mul(wrap32(x4_over_4 + x3), _ONE_THIRD) + x2), -1)
    return wrap32(_EXP_MINUS_ONE_EIGHTH + mul(_EXP_MINUS_ONE_EIGHTH, wrap32(x + poly)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """exp(a) for a Q(integer_bits) value a <= 0 (gemmlowp exp_on_negative_values).
    Returns Q0.31; exp(0) is One() = INT32_MAX, and inputs below -32 give 0 (when the
    format can hold them)."""
    a = _i64(a)
    fractional_bits = 31 - integer_bits
    one_quarter = constant_pot(-2, integer_bits)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = wrap32((a & mask) - one_quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = wrap32(a_mod_quarter_minus_one_quarter - a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            shift = fractional_bits + exponent
            result = np.where((remainder & (1 << shift)) != 0, mul(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))  # -32 in Q(integer_bits)
        result = np.where(a < clamp, np.int64(0), result)
    return np.where(a == 0, np.int64(INT32_MAX), result)


def _newton_reciprocal_of_half_denominator(half_denominator) -> np.ndarray:
    """Three Newton-Raphson steps for 1 / half_denominator (half_denominator Q0.31 in
    [1/2, 1)); returns Q2.29."""
    x = wrap32(_48_OVER_17 + mul(half_denominator, _NEG_32_OVER_17))
    one_q2 = one(2)
    for _ in range(3):
        half_denominator_times_x = mul(half_denominator, x)
        one_minus = wrap32(one_q2 - half_denominator_times_x)
        x = wrap32(x + rescale(mul(x, one_minus), 4, 2))
    return x


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1 / (1 + a) for a Q0.31 value a in [0, 1). Returns Q0.31."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = _newton_reciprocal_of_half_denominator(half_denominator)
    # ExactMulByPot<-1> turns the Q2.29 value into Q1.30 with the same raw bits.
    return rescale(x, 1, 0)


def one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """(1 - a) / (1 + a) for a Q0.31 value a in [0, 1). Returns Q0.31."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = _newton_reciprocal_of_half_denominator(half_denominator)
    return rescale(wrap32(x - one(2)), 2, 0)


def logistic(a, integer_bits: int) -> np.ndarray:
    """1 / (1 + exp(-a)) for a Q(integer_bits) value a. Returns Q0.31."""
    a = _i64(a)
    positive = a > 0
    abs_input = np.where(positive, a, wrap32(-a))
    result_if_positive = one_over_one_plus_x_for_x_in_0_1(
        exp_on_negative_values(wrap32(-abs_input), integer_bits))
    result_if_negative = wrap32(INT32_MAX - result_if_positive)
    result = np.where(positive, result_if_positive, result_if_negative)
    return np.where(a == 0, np.int64(1 << 30), result)


def tanh(a, integer_bits: int) -> np.ndarray:
    """tanh(a) for a Q(integer_bits) value a. Returns Q0.31."""
    a = _i64(a)
    negative = a < 0
    n = np.where(negative, a, wrap32(-a))
    # neg_tanh_on_negative_values: ExactMulByPot<1> makes n a Q(integer_bits + 1) value 2n.
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    result = np.where(negative, wrap32(-t), t)
    return np.where(a == 0, np.int64(0), result)


# ---- TFLite helpers built on the primitives -------------------------------------------------

def multiply_by_quantized_multiplier_greater_than_one(x, multiplier: int, left_shift: int) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplierGreaterThanOne: SRDHM(x * 2**left_shift, multiplier),
    the shift done in int32 (wrapping) as in C."""
    return mul(wrap32(_i64(x) << left_shift), multiplier)


def multiply_by_quantized_multiplier_smaller_than_one(x, multiplier: int, right_shift: int) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplierSmallerThanOneExp: RDBP(SRDHM(x, multiplier), right_shift)."""
    return rounding_divide_by_pot(mul(x, multiplier), right_shift)


def _count_leading_zeros32(x) -> np.ndarray:
    """Leading zero bits of non-negative int32 values (32 for 0); exact via frexp."""
    _, e = np.frexp(_i64(x).astype(np.float64))  # x = m * 2**e, m in [0.5, 1): bit length e
    return 32 - e.astype(np.int64)


def get_reciprocal(x, x_integer_digits: int):
    """TFLite GetReciprocal: for positive int32 ``x`` (a Q(x_integer_digits) value) return
    (raw, num_bits_over_unit) with ``raw`` a Q0.31 value such that
    ``1 / x ~= (raw / 2**31) / 2**num_bits_over_unit``."""
    x = _i64(x)
    headroom_plus_one = _count_leading_zeros32(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted_sum_minus_one = wrap32((x << headroom_plus_one) - (np.int64(1) << 31))
    shifted_scale = one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
    return shifted_scale, num_bits_over_unit


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """TFLite CalculateInputRadius: the largest |input - zero_point| whose rescaled value fits
    the Q(input_integer_bits) format."""
    max_input_rescaled = (1.0 * ((1 << input_integer_bits) - 1)
                          * float(1 << (total_signed_bits - input_integer_bits)) / float(1 << input_left_shift))
    return int(math.floor(max_input_rescaled))
