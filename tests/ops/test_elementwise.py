"""ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, PRELU.

Expected values are worked out by hand from the operations' definitions, or come from float64
math on the real values (for quantized results: within one quantization step).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref import ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops.base import Arg, Call
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

from .support import assert_bad_data

Q8 = T.TENSOR_QUANT8_ASYMM
S8 = T.TENSOR_QUANT8_ASYMM_SIGNED
F32 = T.TENSOR_FLOAT32
F16 = T.TENSOR_FLOAT16
I32 = T.TENSOR_INT32


def binary(code, t, a, b, fuse=0, out_type=None, **quant):
    """Run a (input0, input1, fuse) operation; quant holds sa, za, sb, zb, so, zo."""
    out_type = out_type or t
    return run_operation(code, [tensor(t, a, quant.get("sa", 0.0), quant.get("za", 0)),
                                tensor(t, b, quant.get("sb", 0.0), quant.get("zb", 0)),
                                scalar(T.INT32, fuse)],
                         [output(out_type, None, quant.get("so", 0.0), quant.get("zo", 0))])[0]


def pair(code, t, a, b, out_type=None, **quant):
    """Run a two-input operation without a fuse code."""
    out_type = out_type or t
    return run_operation(code, [tensor(t, a, quant.get("sa", 0.0), quant.get("za", 0)),
                                tensor(t, b, quant.get("sb", 0.0), quant.get("zb", 0))],
                         [output(out_type, None, quant.get("so", 0.0), quant.get("zo", 0))])[0]


# ---------------------------------------------------------------- ADD

def test_add_float32_broadcast():
    out = binary(Op.ADD, F32, [[1.0, 2.0], [3.0, 4.0]], [10.0, -20.0])
    np.testing.assert_array_equal(out, [[11.0, -18.0], [13.0, -16.0]])
    assert out.dtype == np.float32


@pytest.mark.parametrize("fuse, expected", [
    (0, [-3.0, -0.5, 0.5, 4.0, 8.0]),
    (1, [0.0, 0.0, 0.5, 4.0, 8.0]),      # RELU
    (2, [-1.0, -0.5, 0.5, 1.0, 1.0]),    # RELU1
    (3, [0.0, 0.0, 0.5, 4.0, 6.0]),      # RELU6
])
def test_add_fused_activations(fuse, expected):
    out = binary(Op.ADD, F32, [-4.0, -1.0, 0.0, 3.0, 7.0], [1.0, 0.5, 0.5, 1.0, 1.0], fuse)
    np.testing.assert_array_equal(out, expected)


def test_add_float16_rounds_to_half():
    # 2048 + 1 is not representable in float16 (spacing 2 there): ties go to even.
    out = binary(Op.ADD, F16, [2048.0, 1.5], [1.0, 0.25])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [2048.0, 1.75])


def test_add_int32_wraps_around():
    out = binary(Op.ADD, I32, [2**31 - 1, -5, 7], [1, 3, -10])
    np.testing.assert_array_equal(out, [-(2**31), -2, -3])


def test_add_quant8_hand_computed():
    # a: scale 0.5 zp 0 -> reals 1.0, 2.0, 0.0; b: scale 0.5 zp 0 -> 3.0, 0.5, 0.0
    # sums 4.0, 2.5, 0.0 quantized with scale 1, zp 0: 4, 3 (half away from zero), 0.
    out = binary(Op.ADD, Q8, [2, 4, 0], [6, 1, 0], sa=0.5, sb=0.5, so=1.0)
    np.testing.assert_array_equal(out, [4, 3, 0])
    assert out.dtype == np.uint8


def test_add_quant8_different_scales_and_saturation():
    # a: scale 1, zp 128; b: scale 0.25, zp 0; out: scale 2, zp 100
    # reals: (200-128)=72 + 40*0.25=10 -> 82/2 = 41 -> 141; (0-128)=-128 + 0 -> -64 -> 36;
    # (255-128)=127 + 255*0.25=63.75 -> 190.75/2 = 95.375 -> 195.
    out = binary(Op.ADD, Q8, [200, 0, 255], [40, 0, 255], sa=1.0, za=128, sb=0.25, so=2.0, zo=100)
    np.testing.assert_array_equal(out, [141, 36, 195])
    # saturation at 255 and 0
    out = binary(Op.ADD, Q8, [255, 0], [255, 0], sa=1.0, sb=1.0, za=0, so=1.0, zo=0)
    np.testing.assert_array_equal(out, [255, 0])


def test_add_quant8_signed_relu():
    # reals: a (scale 0.5, zp -10): -20 -> -5.0, 10 -> 10.0 ; b (scale 0.5, zp -10): -10 -> 0
    # RELU on out (scale 0.5, zp 0): max(0, x)/0.5 -> 0, 20
    out = binary(Op.ADD, S8, [-20, 10], [-10, -10], fuse=1, sa=0.5, za=-10, sb=0.5, zb=-10, so=0.5, zo=0)
    np.testing.assert_array_equal(out, [0, 20])
    assert out.dtype == np.int8


quant_values = st.lists(st.integers(0, 255), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_add_quant8_commutative_and_close_to_real(data):
    n = data.draw(st.integers(1, 8))
    a = data.draw(st.lists(st.integers(0, 255), min_size=n, max_size=n))
    b = data.draw(st.lists(st.integers(0, 255), min_size=n, max_size=n))
    sa = data.draw(st.sampled_from([0.05, 0.1, 0.5, 1.0]))
    sb = data.draw(st.sampled_from([0.05, 0.1, 0.5, 1.0]))
    za, zb, zo = (data.draw(st.integers(0, 255)) for _ in range(3))
    so = data.draw(st.sampled_from([0.1, 0.5, 1.0, 2.0]))
    ab = binary(Op.ADD, Q8, a, b, sa=sa, za=za, sb=sb, zb=zb, so=so, zo=zo)
    ba = binary(Op.ADD, Q8, b, a, sa=sb, za=zb, sb=sa, zb=za, so=so, zo=zo)
    np.testing.assert_array_equal(ab, ba)
    real = (np.array(a) - za) * sa + (np.array(b) - zb) * sb
    expected = np.clip(np.round(real / so) + zo, 0, 255)
    assert np.max(np.abs(ab.astype(int) - expected)) <= 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=10), st.data())
def test_add_float_commutative(a, data):
    b = data.draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=len(a), max_size=len(a)))
    np.testing.assert_array_equal(binary(Op.ADD, F32, a, b), binary(Op.ADD, F32, b, a))
    np.testing.assert_array_equal(binary(Op.ADD, F32, a, b), np.float32(a) + np.float32(b))


@pytest.mark.parametrize("code", [Op.ADD, Op.SUB, Op.MUL, Op.DIV])
def test_zero_sized_input_shape(code):
    # A model input cannot be zero-sized, so ask the shape function directly (the executor
    # skips an operation whose outputs are all zero-sized).
    ins = [Arg(F32, (0, 2), value=np.zeros((0, 2), np.float32)), Arg(F32, (1, 2), value=np.ones((1, 2), np.float32)),
           Arg(T.INT32, (), value=np.asarray(0, np.int32))]
    assert tuple(ops.get(code).infer(Call(ins, [Arg(F32, None)]))[0]) == (0, 2)


# ---------------------------------------------------------------- SUB

def test_sub_float32_and_relu():
    np.testing.assert_array_equal(binary(Op.SUB, F32, [[5.0, 1.0]], [[2.0], [8.0]]),
                                  [[3.0, -1.0], [-3.0, -7.0]])
    np.testing.assert_array_equal(binary(Op.SUB, F32, [5.0, 1.0], [2.0, 8.0], fuse=1), [3.0, 0.0])


def test_sub_int32_and_float16():
    np.testing.assert_array_equal(binary(Op.SUB, I32, [-(2**31), 10], [1, 20]), [2**31 - 1, -10])
    np.testing.assert_array_equal(binary(Op.SUB, F16, [1.5, 0.0], [0.25, 3.0]), [1.25, -3.0])


def test_sub_quant8_hand_computed():
    # a: scale 1, zp 0 -> 10, 3 ; b: scale 0.5, zp 4 -> (8-4)*0.5=2, (20-4)*0.5=8
    # out: scale 1, zp 50 -> 10-2=8 -> 58 ; 3-8=-5 -> 45
    out = binary(Op.SUB, Q8, [10, 3], [8, 20], sa=1.0, sb=0.5, zb=4, so=1.0, zo=50)
    np.testing.assert_array_equal(out, [58, 45])
    out = binary(Op.SUB, S8, [10, 3], [8, 20], sa=1.0, sb=0.5, zb=4, so=1.0, zo=-50)
    np.testing.assert_array_equal(out, [-42, -55])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-128, 127), min_size=1, max_size=10),
       st.sampled_from([0.01, 0.3, 1.0, 7.5]), st.integers(-128, 127), st.integers(-128, 127))
def test_sub_self_is_zero(a, scale, zp, zo):
    out = binary(Op.SUB, S8, a, a, sa=scale, za=zp, sb=scale, zb=zp, so=0.5, zo=zo)
    np.testing.assert_array_equal(out, np.full(len(a), zo))
    np.testing.assert_array_equal(binary(Op.SUB, F32, np.float32(a) * scale, np.float32(a) * scale), 0.0)


# ---------------------------------------------------------------- MUL

def test_mul_float_int_and_relu6():
    np.testing.assert_array_equal(binary(Op.MUL, F32, [1.5, -2.0, 4.0], [2.0, 3.0, 2.0], fuse=3),
                                  [3.0, 0.0, 6.0])
    np.testing.assert_array_equal(binary(Op.MUL, I32, [65536, -3], [65536, 7]), [0, -21])  # 2**32 wraps to 0


def test_mul_quant8_hand_computed():
    # a: scale 0.5 zp 10 -> (14-10)*.5=2, (4-10)*.5=-3 ; b: scale 0.25 zp 0 -> 12*.25=3, 8*.25=2
    # products 6, -6 ; out scale 0.5 zp 128 -> 140, 116
    out = binary(Op.MUL, Q8, [14, 4], [12, 8], sa=0.5, za=10, sb=0.25, so=0.5, zo=128)
    np.testing.assert_array_equal(out, [140, 116])


def test_mul_quant8_output_scale_must_exceed_product():
    assert_bad_data(binary, Op.MUL, Q8, [1], [1], sa=0.5, sb=0.5, so=0.25)
    assert_bad_data(binary, Op.MUL, S8, [1], [1], sa=1.0, sb=2.0, so=1.5)


# ---------------------------------------------------------------- DIV

def test_div_float32_and_float16():
    np.testing.assert_array_equal(binary(Op.DIV, F32, [1.0, -6.0, 1.0], [4.0, 3.0, 0.0]), [0.25, -2.0, np.inf])
    np.testing.assert_array_equal(binary(Op.DIV, F16, [1.0, 3.0], [8.0, -2.0]), [0.125, -1.5])
    np.testing.assert_array_equal(binary(Op.DIV, F32, [6.0, -6.0], [4.0, 4.0], fuse=2), [1.0, -1.0])


def test_div_int32_floor_division():
    out = binary(Op.DIV, I32, [7, -7, 7, -7, 6, 0, 5], [2, 2, -2, -2, 3, 5, 0])
    np.testing.assert_array_equal(out, [3, -4, -4, 3, 2, 0, 0])  # x / 0 gives 0


def test_div_rejects_quant8():
    assert_bad_data(binary, Op.DIV, Q8, [1], [1], sa=1.0, sb=1.0, so=1.0)


# ---------------------------------------------------------------- validation shared by ADD/SUB/MUL/DIV

@pytest.mark.parametrize("code", [Op.ADD, Op.SUB, Op.MUL, Op.DIV])
def test_arithmetic_validation(code):
    assert_bad_data(binary, code, F32, np.zeros((1, 1, 1, 1, 2), np.float32), [1.0, 2.0])  # rank 5
    assert_bad_data(binary, code, F32, [1.0, 2.0], [1.0, 2.0], fuse=4)                     # bad fuse code
    assert_bad_data(binary, code, F32, [1.0, 2.0], [1.0, 2.0, 3.0])                        # not broadcastable
    assert_bad_data(binary, code, I32, [1, 2], [1, 2], fuse=1)                             # INT32 fuse != NONE
    with pytest.raises(NnapiError) as info:                                                # mixed types
        run_operation(code, [tensor(F32, [1.0]), tensor(F16, [1.0]), scalar(T.INT32, 0)], [output(F32)])
    assert info.value.code == ResultCode.BAD_DATA


# ---------------------------------------------------------------- MAXIMUM / MINIMUM

def test_maximum_minimum_float_and_int():
    a, b = [1.0, -2.0, 3.5], [[0.0, -1.0, 4.0], [2.0, -3.0, 3.0]]
    np.testing.assert_array_equal(pair(Op.MAXIMUM, F32, a, b), [[1.0, -1.0, 4.0], [2.0, -2.0, 3.5]])
    np.testing.assert_array_equal(pair(Op.MINIMUM, F32, a, b), [[0.0, -2.0, 3.5], [1.0, -3.0, 3.0]])
    np.testing.assert_array_equal(pair(Op.MAXIMUM, I32, [5, -7], [-2**31, 2**31 - 1]), [5, 2**31 - 1])
    np.testing.assert_array_equal(pair(Op.MINIMUM, F16, [0.5, 2.0], [1.0, -2.0]), [0.5, -2.0])


def test_maximum_minimum_quant8_requantize_each_input():
    # a: scale 1, zp 0 -> 10, 2 ; b: scale 0.5, zp 100 -> (110-100)*.5=5, (120-100)*.5=10
    # out: scale 2, zp 1: a -> 6, 2 (10/2+1, 2/2+1) ; b -> 3.5 -> 4 (half away), 6
    np.testing.assert_array_equal(pair(Op.MAXIMUM, Q8, [10, 2], [110, 120], sa=1.0, sb=0.5, zb=100, so=2.0, zo=1),
                                  [6, 6])
    np.testing.assert_array_equal(pair(Op.MINIMUM, Q8, [10, 2], [110, 120], sa=1.0, sb=0.5, zb=100, so=2.0, zo=1),
                                  [4, 2])
    # signed, with saturation of a requantized input: 100 * 1.0 / 0.5 = 200 -> 127
    np.testing.assert_array_equal(pair(Op.MAXIMUM, S8, [100, -100], [0, 0], sa=1.0, sb=1.0, so=0.5),
                                  [127, 0])
    np.testing.assert_array_equal(pair(Op.MINIMUM, S8, [100, -100], [0, 0], sa=1.0, sb=1.0, so=0.5),
                                  [0, -128])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=8), st.data())
def test_maximum_minimum_properties(a, data):
    b = data.draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=len(a), max_size=len(a)))
    hi, lo = pair(Op.MAXIMUM, F32, a, b), pair(Op.MINIMUM, F32, a, b)
    np.testing.assert_array_equal(hi, np.maximum(np.float32(a), np.float32(b)))
    assert np.all(lo <= hi)
    np.testing.assert_array_equal(np.sort(np.stack([lo, hi]), axis=0), np.stack([lo, hi]))


def test_maximum_validation():
    assert_bad_data(pair, Op.MAXIMUM, F32, [1.0, 2.0], [1.0, 2.0, 3.0])
    assert_bad_data(pair, Op.MINIMUM, F32, [[1.0, 2.0]], [[1.0], [2.0], [3.0]], out_type=F16)


# ---------------------------------------------------------------- POW

def test_pow_float32_against_math():
    base, exponent = [2.0, 9.0, 10.0, 0.5], [10.0, 0.5, -2.0, 3.0]
    out = pair(Op.POW, F32, base, exponent)
    np.testing.assert_allclose(out, [math.pow(x, y) for x, y in zip(base, exponent)], rtol=1e-6)


def test_pow_broadcast_and_float16():
    out = pair(Op.POW, F16, [[1.0, 2.0, 3.0]], [[2.0], [3.0]])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [[1.0, 4.0, 9.0], [1.0, 8.0, 27.0]])


def test_pow_validation():
    assert_bad_data(pair, Op.POW, F32, [1.0, 2.0], [1.0, 2.0, 3.0])
    assert_bad_data(pair, Op.POW, I32, [1, 2], [1, 2])


# ---------------------------------------------------------------- PRELU

def test_prelu_float_broadcast_alpha():
    x = [[-2.0, -1.0, 0.0, 3.0], [4.0, -4.0, -0.5, 1.0]]
    alpha = [0.5, 0.0, 2.0, -1.0]
    np.testing.assert_array_equal(pair(Op.PRELU, F32, x, alpha), [[-1.0, 0.0, 0.0, 3.0], [4.0, 0.0, -1.0, 1.0]])
    np.testing.assert_array_equal(pair(Op.PRELU, F16, [-3.0, 2.0], [0.25]), [-0.75, 2.0])


def test_prelu_quant8_hand_computed():
    # x: scale 0.5 zp 128 -> (120-128)*.5=-4, (140-128)*.5=6 ; alpha: scale 0.25 zp 50 -> (52-50)*.25=0.5
    # out: scale 0.25 zp 100 -> -2/0.25=-8 -> 92 ; 6/0.25=24 -> 124
    np.testing.assert_array_equal(pair(Op.PRELU, Q8, [120, 140], [52], sa=0.5, za=128, sb=0.25, zb=50,
                                       so=0.25, zo=100), [92, 124])
    # signed, saturating: 100*1.0/0.5 = 200 -> 127 ; -100 * alpha 1.0 -> -200 -> -128
    np.testing.assert_array_equal(pair(Op.PRELU, S8, [100, -100], [1], sa=1.0, sb=1.0, so=0.5), [127, -128])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=1, max_size=10), st.integers(0, 255),
       st.sampled_from([0.1, 0.5, 1.0]), st.sampled_from([0.02, 0.1, 0.5]), st.sampled_from([0.1, 0.5, 2.0]),
       st.integers(0, 255), st.integers(0, 255), st.integers(0, 255))
def test_prelu_quant8_close_to_real(x, alpha, sx, sa, so, zx, za, zo):
    out = pair(Op.PRELU, Q8, x, [alpha], sa=sx, za=zx, sb=sa, zb=za, so=so, zo=zo)
    real_x = (np.array(x) - zx) * sx
    real = np.where(real_x >= 0, real_x, real_x * (alpha - za) * sa)
    expected = np.clip(np.round(real / so) + zo, 0, 255)
    assert np.max(np.abs(out.astype(int) - expected)) <= 1


def test_prelu_validation():
    assert_bad_data(pair, Op.PRELU, F32, [1.0, 2.0], [1.0, 2.0, 3.0])
    assert_bad_data(pair, Op.PRELU, I32, [1, 2], [1, 2])
