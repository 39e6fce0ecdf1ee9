"""QUANTIZE, DEQUANTIZE and CAST. Expected values are worked out by hand from the documented
formulas (quantize: clamp(round(x / scale) + zeroPoint), halves away from zero; dequantize:
(q - zeroPoint) * scale; cast: direct value conversion)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, tensor

from .support import assert_bad_data

Q8 = T.TENSOR_QUANT8_ASYMM
S8 = T.TENSOR_QUANT8_ASYMM_SIGNED
F32 = T.TENSOR_FLOAT32
F16 = T.TENSOR_FLOAT16
I32 = T.TENSOR_INT32
B8 = T.TENSOR_BOOL8


def quantize(t_in, x, t_out, scale, zp, dims=None):
    return run_operation(Op.QUANTIZE, [tensor(t_in, x)], [output(t_out, dims, scale, zp)])[0]


def dequantize(t_in, q, scale, zp, t_out=F32, **kw):
    return run_operation(Op.DEQUANTIZE, [tensor(t_in, q, scale, zp, **kw)], [output(t_out)])[0]


QUANTIZED = {Q8, S8, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM}


def cast(t_in, x, t_out, scale=0.0, zp=0, dims=None):
    """CAST; ``scale``/``zp`` go to whichever operands are quantized."""
    qin = (scale, zp) if t_in in QUANTIZED else (0.0, 0)
    qout = (scale, zp) if t_out in QUANTIZED else (0.0, 0)
    return run_operation(Op.CAST, [tensor(t_in, x, *qin)], [output(t_out, dims, *qout)])[0]


# ---------------------------------------------------------------- QUANTIZE

def test_quantize_float32_to_quant8_rounds_half_away_and_saturates():
    # scale 0.5, zp 10: 0 -> 10 ; 1 -> 12 ; -1.25 -> -2.5 -> -3 -> 7 ; 1.25 -> 3 -> 13 ; +-1000 saturate
    out = quantize(F32, [0.0, 1.0, -1.25, 1.25, 1000.0, -1000.0], Q8, 0.5, 10)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, [10, 12, 7, 13, 255, 0])


def test_quantize_rounds_just_below_half_down():
    # 0.49999997 (the float32 below 0.5) rounds to 0, not 1; exact halves go away from zero.
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    out = quantize(F32, [below_half, -below_half, 0.5, -0.5], Q8, 1.0, 10)
    np.testing.assert_array_equal(out, [10, 10, 11, 9])


def test_quantize_nan_and_infinities_saturate():
    # NaN goes to the top of the range (NNAPI's min/max chain), infinities to their end.
    out = quantize(F32, [np.nan, np.inf, -np.inf, -np.nan], S8, 0.1, 3)
    np.testing.assert_array_equal(out, [127, 127, -128, 127])


def test_quantize_float16_to_signed():
    # scale 0.25, zp -1: 0.125 -> 0.5 -> 1 -> 0 ; -0.375 -> -1.5 -> -2 -> -3 ; 40 -> 160 -> 127
    out = quantize(F16, [[0.125, -0.375], [40.0, -40.0]], S8, 0.25, -1)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [[0, -3], [127, -128]])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([0.01, 0.1, 0.37, 2.0]), st.integers(0, 255), st.data())
def test_dequantize_of_quantize_within_half_a_step(scale, zp, data):
    lo, hi = (0 - zp) * scale, (255 - zp) * scale
    x = np.float32(data.draw(st.lists(st.floats(lo, hi), min_size=1, max_size=10)))
    q = quantize(F32, x, Q8, scale, zp)
    back = dequantize(Q8, q, scale, zp)
    assert np.all(np.abs(back.astype(np.float64) - x) <= scale / 2 * (1 + 1e-5))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-128, 127), min_size=1, max_size=10), st.sampled_from([0.02, 0.5, 3.0]),
       st.integers(-128, 127))
def test_quantize_of_dequantize_is_identity(q, scale, zp):
    x = dequantize(S8, q, scale, zp)
    np.testing.assert_array_equal(quantize(F32, x, S8, scale, zp), q)


def test_quantize_validation():
    assert_bad_data(quantize, I32, [1], Q8, 1.0, 0)            # input must be float
    assert_bad_data(quantize, F32, [1.0], I32, 0.0, 0)         # output must be quant8 asymm
    assert_bad_data(quantize, F32, [1.0, 2.0], Q8, 1.0, 0, dims=[3])  # output shape is the input's


# ---------------------------------------------------------------- DEQUANTIZE

def test_dequantize_quant8_and_signed():
    np.testing.assert_array_equal(dequantize(Q8, [0, 128, 255], 0.5, 128), [-64.0, 0.0, 63.5])
    out = dequantize(S8, [[-128, 0], [1, 127]], 0.25, -2, F16)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [[-31.5, 0.5], [0.75, 32.25]])
    np.testing.assert_array_equal(dequantize(T.TENSOR_QUANT8_SYMM, [-3, 0, 5], 1.5, 0), [-4.5, 0.0, 7.5])


def test_dequantize_float16_output_rounds():
    # 255 * 0.1 = 25.5 (float32: 25.500000372...) -> nearest float16 is 25.5
    out = dequantize(Q8, [255, 1], np.float32(0.1), 0, F16)
    np.testing.assert_array_equal(out, np.array([25.5, 0.1], np.float16))


def test_dequantize_per_channel():
    q = [[1, -2, 3], [4, 5, -6]]
    out = dequantize(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, q, 0.0, 0, channel_scales=[0.5, 2.0, 0.25], channel_dim=1)
    np.testing.assert_array_equal(out, [[0.5, -4.0, 0.75], [2.0, 10.0, -1.5]])
    out = dequantize(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, q, 0.0, 0, F16, channel_scales=[1.0, 0.5], channel_dim=0)
    np.testing.assert_array_equal(out, [[1.0, -2.0, 3.0], [2.0, 2.5, -3.0]])


def test_dequantize_validation():
    assert_bad_data(dequantize, Q8, np.zeros((1, 1, 1, 1, 2), np.uint8), 1.0, 0)   # rank 5
    assert_bad_data(dequantize, F32, [1.0], 0.0, 0)                                # input must be quantized
    assert_bad_data(dequantize, Q8, [1], 1.0, 0, I32)                              # output must be float
    assert_bad_data(dequantize, T.TENSOR_QUANT16_SYMM, [1], 1.0, 0)                # not a listed input type


# ---------------------------------------------------------------- CAST

def test_cast_float_to_int32_truncates():
    np.testing.assert_array_equal(cast(F32, [2.7, -2.7, 0.5, -0.5, 1e6], I32), [2, -2, 0, 0, 1000000])
    np.testing.assert_array_equal(cast(F16, [3.5, -7.75], I32), [3, -7])


def test_cast_to_quant8_saturates():
    np.testing.assert_array_equal(cast(F32, [-3.5, 300.25, 7.9, 255.0], Q8, 1.0, 0), [0, 255, 7, 255])
    np.testing.assert_array_equal(cast(I32, [-1, 256, 42, 2**31 - 1], Q8, 1.0, 0), [0, 255, 42, 255])
    np.testing.assert_array_equal(cast(F16, [-0.5, 12.5], Q8, 1.0, 0), [0, 12])


def test_cast_from_quant8_ignores_scale_and_zero_point():
    x = run_operation(Op.CAST, [tensor(Q8, [0, 7, 255], 0.5, 100)], [output(F32)])[0]
    np.testing.assert_array_equal(x, [0.0, 7.0, 255.0])
    x = run_operation(Op.CAST, [tensor(Q8, [0, 7, 255], 0.5, 100)], [output(I32)])[0]
    np.testing.assert_array_equal(x, [0, 7, 255])
    x = run_operation(Op.CAST, [tensor(Q8, [3, 200], 0.5, 100)], [output(Q8, None, 2.0, 3)])[0]
    np.testing.assert_array_equal(x, [3, 200])


def test_cast_to_float():
    out = cast(I32, [2049, -3, 70000], F16)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [2048.0, -3.0, np.inf])  # 2049 ties to even; 70000 overflows
    np.testing.assert_array_equal(cast(I32, [16777217, 5], F32), [16777216.0, 5.0])
    np.testing.assert_array_equal(cast(F32, [0.1, 65520.0], F16), np.array([0.1, np.inf], np.float16))
    np.testing.assert_array_equal(cast(F16, [0.1, -2.0], F32), np.array([0.1, -2.0], np.float16).astype(np.float32))


@pytest.mark.parametrize("t, values, scale, zp", [
    (F32, [1.5, -2.0], 0.0, 0),
    (I32, [1, -2**31], 0.0, 0),
    (F16, [0.5, 3.0], 0.0, 0),
    (Q8, [0, 255], 0.5, 3),
    (B8, [True, False], 0.0, 0),
    (T.TENSOR_QUANT16_ASYMM, [0, 65535], 0.5, 7),
    (T.TENSOR_QUANT16_SYMM, [-32768, 32767], 0.5, 0),
    (S8, [-128, 127], 0.5, -3),
    (T.TENSOR_QUANT8_SYMM, [-128, 127], 0.5, 0),
])
def test_cast_identity(t, values, scale, zp):
    out = cast(t, [values, values], t, scale, zp)
    np.testing.assert_array_equal(out, [values, values])


def test_cast_validation():
    assert_bad_data(cast, S8, [1], F32, 1.0, 0)          # level-4 types: identity only
    assert_bad_data(cast, B8, [True], I32)
    assert_bad_data(cast, F32, [1.0], S8, 1.0, 0)
    assert_bad_data(cast, F32, [1.0, 2.0], I32, dims=[3])          # output shape must be the input's
    assert_bad_data(cast, F32, [[1.0, 2.0]], I32, dims=[2])
