"""nnapi_ref.ops.requantization at its edges, with expected values worked out by hand (each case
says how), never by the code under test; and FULLY_CONNECTED's requantization through the
runtime, at an exact half where gemmlowp's two roundings and a single rounding part ways.

Notation: SRDHM(a, b) = floor((a*b + 2**30) / 2**31), except MIN*MIN -> MAX (gemmlowp's nudge
then truncation); RDBP(x, e) = x / 2**e rounded half away from zero.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import requantization as rq
from nnapi_ref.runtime.devices import Device
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, scalar, tensor

MAX, MIN = 2**31 - 1, -2**31


@pytest.mark.parametrize("real, expected", [
    (0.0, (0, 0)),
    (0.5, (2**30, 0)),                     # 0.5 = 0.5 * 2**0
    (1.0, (2**30, 1)),                     # 1 = 0.5 * 2**1
    (0.75, (3 * 2**29, 0)),                # 0.75 * 2**31 = 3 * 2**29
    (0.5 - 2**-40, (2**30, 0)),            # just below 2**-1: mantissa (1 - 2**-39) * 2**31 rounds to 2**31 -> halved, shift + 1
    (0.5 + 2**-40, (2**30, 0)),            # just above: 2**30 + 2**-9 rounds down to 2**30
    (0.5 * (1 + 2**-31), (2**30 + 1, 0)),  # 2**30 + 0.5: std::round takes the half away from zero
    (1.0 - 2**-33, (2**30, 1)),            # just below 1: (1 - 2**-33) * 2**31 = 2**31 - 2**-2 rounds up to 2**31
    (2.0**-31, (2**30, -30)),              # 0.5 * 2**-30
    (2.0**-32, (2**30, -31)),              # shift -31: the smallest kept
    (2.0**-33, (0, 0)),                    # shift -32 < -31: flushed to zero
])
def test_quantize_multiplier_edges(real, expected):
    assert rq.quantize_multiplier(real) == expected
    m, s = rq.quantize_multipliers([real])
    assert (int(m[0]), int(s[0])) == expected


@pytest.mark.parametrize("x, multiplier, shift, expected", [
    (1000, 2**30, 1, 1000),          # x << 1 = 2000, SRDHM(2000, 2**30) = 1000 exactly
    (3, 2**30, 0, 2),                # 1.5: SRDHM rounds the half up
    (-3, 2**30, 0, -1),              # -1.5: SRDHM rounds the half up too (toward +inf), not away
    (-1, 2**30, 0, 0),               # -0.5 -> 0
    (-3, 2**30, -1, -1),             # SRDHM = -1 (-1.5 up), RDBP(-1, 1) = -1 (-0.5 away from zero)
    (-2, 2**30, -1, -1),             # SRDHM = -1 (exact), RDBP(-1, 1) = -1: the exact half -0.5 goes away from zero
    (2, 2**30, -1, 1),               # SRDHM = 1, RDBP(1, 1) = 1 (0.5 away from zero)
    (-6, 2**30, -2, -1),             # SRDHM = -3, RDBP(-3, 2) = round(-0.75) = -1
    (-5, 2**31 - 1, -1, -3),         # SRDHM(-5, MAX) = floor((-5*2**31 + 5 + 2**30) / 2**31) = -5; RDBP(-5, 1) = -3
    (MAX, MAX, 0, MAX - 1),          # (2**62 - 2**32 + 1 + 2**30) / 2**31 = 2**31 - 2 + 0.5 + 2**-31 -> 2**31 - 2
    (MAX, 2**30, -31, 1),            # SRDHM = 2**30, RDBP(2**30, 31) = round(0.5) = 1 (one rounding would give 0)
    (-MAX, 2**30, -31, 0),           # SRDHM = floor((-2**61 + 2**30 + 2**30) / 2**31) = -2**30 + 1; RDBP -> 0
    (MIN, 2**30, -31, -1),           # SRDHM = -2**30 exactly; RDBP(-2**30, 31) = -0.5 away from zero = -1
    (2**30, 2**30, 1, -2**30),       # 2**30 << 1 wraps to MIN in int32 (as C does); SRDHM(MIN, 2**30) = -2**30
    (MIN, MIN, 0, MAX),              # SRDHM's one saturation: MIN * MIN
])
def test_multiply_by_quantized_multiplier_edges(x, multiplier, shift, expected):
    assert int(rq.multiply_by_quantized_multiplier(x, multiplier, shift)) == expected
    per_channel = rq.multiply_by_quantized_multiplier(np.array([[x, 0]]), np.array([multiplier, 2**30]),
                                                     np.array([shift, 0]))
    assert per_channel.tolist() == [[expected, 0]]


@pytest.mark.parametrize("x, exponent, expected", [
    (5, 1, 3), (-5, 1, -3),          # +-2.5 away from zero
    (4, 3, 1), (-4, 3, -1),          # +-0.5 away from zero
    (3, 3, 0), (-3, 3, 0),           # +-0.375
    (7, 0, 7),
    (MAX, 31, 1), (MIN, 31, -1),     # (2**31 - 1) / 2**31 = 0.99999... -> 1; MIN / 2**31 = -1 exactly
])
def test_rounding_divide_by_pot_edges(x, exponent, expected):
    assert int(rq.rounding_divide_by_pot(x, exponent)) == expected


def test_convolution_multiplier_of_each_convention():
    """0.05 * 0.01 is 5.0000002e-4 in float32 (AOSP) but 5.000000237e-4 from the doubles of the
    two float32 scales (TFLite): Python's float arithmetic (double) gives the TFLite value
    independently, numpy's float32 product the AOSP one."""
    a, b, out = 0.05, 0.01, 0.08
    f32 = np.float32
    nnapi_real = float(f32(a) * f32(b)) / float(f32(out))
    tflite_real = float(f32(a)) * float(f32(b)) / float(f32(out))
    assert nnapi_real != tflite_real
    with rq.using("nnapi"):
        m_nnapi = rq.product_multipliers(a, [b], out)
    with rq.using("tflite"):
        m_tflite = rq.product_multipliers(a, [b], out)
        m_legacy = rq.product_multipliers(a, [b], out, tflite=rq.FLOAT32_PRODUCT)  # uint8 convolutions
        m_float = rq.product_multipliers(a, [b], out, tflite=rq.FLOAT32)  # MUL
    assert (int(m_legacy[0][0]), int(m_legacy[1][0])) == rq.quantize_multiplier(nnapi_real)
    assert (int(m_float[0][0]), int(m_float[1][0])) == rq.quantize_multiplier(float(f32(f32(a) * f32(b)) / f32(out)))
    assert (int(m_nnapi[0][0]), int(m_nnapi[1][0])) == rq.quantize_multiplier(nnapi_real)
    assert (int(m_tflite[0][0]), int(m_tflite[1][0])) == rq.quantize_multiplier(tflite_real)
    assert int(m_nnapi[0][0]) != int(m_tflite[0][0])
    assert rq.convention() == "nnapi"
    with pytest.raises(ValueError):
        with rq.using("gemmlowp"):
            pass


@pytest.mark.parametrize("x, bias, expected", [(129, 0, 101), (127, 0, 99), (131, 0, 101), (128, 0, 100),
                                                (255, 1000, 255)])
def test_fully_connected_rounds_as_aosp_at_exact_halves(x, bias, expected):
    """FULLY_CONNECTED quant8, input scale 0.5, weight scale 0.75, output scale 1, zero points
    128, 128 and 100, one weight of value 1 (so acc = x - 128 + bias): M = 0.375 = 0.75 * 2**-1,
    multiplier 3 * 2**29 with a right shift of 1. AOSP's FullyConnected (gemmlowp's output
    stage) and TFLite's kernel round twice, SRDHM then RDBP:
    acc = 1: SRDHM = round(0.75) = 1, RDBP(1, 1) = 1 (one rounding of 0.375 would give 0) -> 101;
    acc = -1: SRDHM = floor(-0.25) = -1, RDBP(-1, 1) = -1 (once: 0) -> 99;
    acc = 3: 1.125, SRDHM = round(2.25) = 2, RDBP(2, 1) = 1 -> 101; acc = 0 -> 100;
    acc = 127 + 1000: 0.375 * 1127 = 422.6, 100 + 423 saturates at 255."""
    out = run_operation(Op.FULLY_CONNECTED,
                        [tensor(T.TENSOR_QUANT8_ASYMM, [[x]], scale=0.5, zero_point=128),
                         tensor(T.TENSOR_QUANT8_ASYMM, [[129]], scale=0.75, zero_point=128, as_input=False),
                         tensor(T.TENSOR_INT32, [bias], scale=0.375, as_input=False),
                         scalar(T.INT32, 0)],
                        [output(T.TENSOR_QUANT8_ASYMM, [1, 1], 1.0, 100)])
    assert int(np.asarray(out[0]).reshape(-1)[0]) == expected


# ---- MEAN: AOSP truncates and keeps the quantization; TFLite rounds once and requantizes --------

@pytest.mark.parametrize("in_scale, out_scale, count, expected", [
    (1.0, 1.0, 3, (715827882, 0)),        # 1 -> (2**30, 1); fold 1: 2**31 // 3 = 715827882 (3 * it = 2**31 - 2)
    (1.0, 1.0, 4, (2**30, -1)),           # fold 2: 2**32 // 4 = 2**30, shift 1 - 2
    (0.5, 0.25, 2, (2**30, 1)),           # 2 -> (2**30, 2); fold 1: 2**31 // 2
    (2.0**-31, 1.0, 4, (2**29, -31)),     # (2**30, -30): fold capped at 31 - 30 = 1 -> 2**31 // 4, shift -31
    (1.0, 1.0, 2**33, (2**29, -31)),      # fold capped at 32: 2**62 // 2**33 = 2**29, shift 1 - 32
])
def test_tflite_mean_multiplier_folds_the_count_in_with_truncation(in_scale, out_scale, count, expected):
    assert rq.tflite_mean_multiplier(in_scale, out_scale, count) == expected


def test_tflite_mean_multiplier_is_not_the_multiplier_of_the_quotient():
    """1/3 as a Q31 multiplier is round(2**31 * 2/3) = 1431655765 with shift -1; TFLite's fold
    gives 715827882 with shift 0, i.e. 1431655764 with shift -1: one unit lower (truncated)."""
    assert rq.quantize_multiplier(1 / 3) == (1431655765, -1)
    assert rq.tflite_mean_multiplier(1.0, 1.0, 3) == (715827882, 0)


def run_under(convention, code, inputs, outputs) -> list:
    """One operation's first output (flattened) on the reference driver under ``convention``."""
    out = run_operation(code, inputs, outputs, devices=[Device(ReferenceDevice(convention=convention))])
    return np.asarray(out[0]).reshape(-1).tolist()


def mean(values, in_q, out_q, convention, code=T.TENSOR_QUANT8_ASYMM_SIGNED, keep_dims=0):
    """MEAN over the last axis of ``values`` (rows), on the reference driver under ``convention``."""
    values = np.asarray(values)
    shape = [values.shape[0], 1] if keep_dims else [values.shape[0]]
    return run_under(convention, Op.MEAN, [tensor(code, values, scale=in_q[0], zero_point=in_q[1]),
                                           tensor(T.TENSOR_INT32, [1], as_input=False), scalar(T.INT32, keep_dims)],
                     [output(code, shape, *out_q)])


def test_mean_truncates_under_nnapi_and_rounds_under_tflite():
    """Same quantization (scale 1, zero point 0): sums 3, -7, 5, -5 over 2, 4, 2, 2 elements.
    AOSP (tflite::reference_ops::Mean, C division) truncates toward zero. TFLite
    (QuantizedMeanOrSum): multiplier 2**30, shift 0 (count 2) or -1 (count 4), so
    SRDHM(x, 2**30) = floor((x + 1) / 2) (gemmlowp's halves go up): 3 -> 2, -7 -> -3, 5 -> 3,
    -5 -> -2; with count 4, RDBP(., 1) follows (halves away from zero): -7 -> SRDHM -3 -> -2
    (-1.75), and 5 -> SRDHM 3 -> 2: 1.25 becomes 2, gemmlowp's two roundings."""
    pairs = [[1, 2], [-2, -5]]
    assert mean(pairs, (1.0, 0), (1.0, 0), "nnapi") == [1, -3]        # 3 // 2 -> 1; -7 / 2 = -3.5 -> -3
    assert mean(pairs, (1.0, 0), (1.0, 0), "tflite") == [2, -3]       # 1.5 -> 2; -3.5 -> SRDHM floor(-6/2) = -3
    quads = [[-1, -2, -2, -2], [1, 1, 1, 2]]
    assert mean(quads, (1.0, 0), (1.0, 0), "nnapi") == [-1, 1]        # -7 / 4 -> -1; 5 / 4 -> 1
    assert mean(quads, (1.0, 0), (1.0, 0), "tflite") == [-2, 2]       # -1.75 -> -2; 1.25 -> 2 (twice rounded)
    halves = [[2, 3], [-2, -3]]
    assert mean(halves, (1.0, 0), (1.0, 0), "nnapi") == [2, -2]
    assert mean(halves, (1.0, 0), (1.0, 0), "tflite") == [3, -2]


def test_mean_requantizes_only_under_tflite():
    """Input (0.5, -128), output (0.25, 10) (uint8: input zero point 0): the real mean of
    0.5 * (3 + 4) / 2 = 1.75 is 7 output steps -> 17 (multiplier 2**30, shift 1: 7 exactly);
    that of 0.5 * (255 + 255) / 2 = 127.5 is 510 steps -> 520, saturated to the type's top.
    NNAPI's MEAN must keep the input's quantization: BAD_DATA under the NNAPI convention."""
    rows = [[-125, -124], [127, 127]]                 # q - z = 3, 4 and 255, 255 (real 127.5 -> 510 steps)
    assert mean(rows, (0.5, -128), (0.25, 10), "tflite") == [17, 127]
    assert mean(rows, (0.5, -128), (0.25, 10), "tflite", keep_dims=1) == [17, 127]
    assert mean([[3, 4], [255, 255]], (0.5, 0), (0.25, 10), "tflite", code=T.TENSOR_QUANT8_ASYMM) == [17, 255]
    with pytest.raises(NnapiError) as e:
        mean(rows, (0.5, -128), (0.25, 10), "nnapi")
    assert "MEAN" in str(e.value) and "scale" in str(e.value)


# ---- PRELU: where the quotients are rounded to float32 -------------------------------------------

S8 = T.TENSOR_QUANT8_ASYMM_SIGNED


def prelu(x, x_q, alpha, alpha_q, out_q, convention) -> int:
    return run_under(convention, Op.PRELU, [tensor(S8, [x], scale=x_q[0], zero_point=x_q[1]),
                                            tensor(S8, [alpha], scale=alpha_q[0], zero_point=alpha_q[1],
                                                   as_input=False)],
                     [output(S8, [1], *out_q)])[0]


@pytest.mark.parametrize("convention", ["nnapi", "tflite"])
def test_prelu_positive_multiplier_is_the_float32_quotient(convention):
    """Input scale 0.011305219 (zero point -128), output 0.029787131 (-128), x = 65: x - zp = 193.
    AOSP (PRelu.cpp) and TFLite both divide the two floats: M = 0.37953368 in float32, 0.37953369
    in double. Q31 (shift -1): 193 * m / 2**31 = 146.4999998 (float32) or 146.5000028 (double);
    SRDHM rounds to 146 or 147, RDBP by 2 gives 73 or 74 (73.5 away from zero): 73 - 128 = -55
    from the float32 quotient (-54 from the double one)."""
    assert prelu(65, (0.011305219493806362, -128), 5, (0.01, 0), (0.029787130653858185, -128), convention) == -55


@pytest.mark.parametrize("convention, expected", [("nnapi", 2), ("tflite", 3)])
def test_prelu_negative_multiplier_divides_as_each_convention(convention, expected):
    """Scales 0.060897633 (input, zero point 127), 0.0086802104 (alpha, 0), 1.5206258 (output, 0);
    x = -26, alpha = -47: (x - 127) * alpha = 7191. The float32 product 5.2860426e-4 divided by
    the output scale in double (AOSP: a double variable) is 3.4762283234e-4, in float32 (TFLite)
    3.4762284486e-4. Shift -11: 7191 * M * 2**11 = 5119.49985 or 5119.50003, SRDHM gives 5119
    or 5120, and RDBP by 2**11 gives 2 (2.4995) or 3 (2.5 exactly, away from zero)."""
    assert prelu(-26, (0.06089763343334198, 127), -47, (0.008680210448801517, 0),
                 (1.5206258296966553, 0), convention) == expected
