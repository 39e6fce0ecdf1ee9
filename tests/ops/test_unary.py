"""FLOOR, ABS, EXP, LOG, NEG, SIN, SQRT, RSQRT through the runtime; expected values from the
math module (float64) or by hand."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as O
from nnts.generators.builders import output, run_operation, tensor

from .support import assert_op_bad_data

F32 = T.TENSOR_FLOAT32
F16 = T.TENSOR_FLOAT16
I32 = T.TENSOR_INT32
Q8 = T.TENSOR_QUANT8_ASYMM
Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED


def run1(code, x, out_type, scale=0.0, zp=0, relaxed=False):
    (result,) = run_operation(code, [x], [output(out_type, x.dims, scale, zp)], relaxed=relaxed)
    return result


MATH = {
    O.FLOOR: math.floor,
    O.ABS: abs,
    O.EXP: math.exp,
    O.LOG: math.log,
    O.NEG: lambda v: -v,
    O.SIN: math.sin,
    O.SQRT: math.sqrt,
    O.RSQRT: lambda v: 1 / math.sqrt(v),
}
DOMAIN = {  # inputs inside each function's domain
    O.FLOOR: [-2.5, -1.0, -0.25, 0.0, 0.75, 3.0, 3e4 + 0.5],
    O.ABS: [-7.5, -1.0, -0.0, 0.0, 2.25, 3e4],
    O.EXP: [-10.0, -1.0, 0.0, 0.5, 1.0, 5.0],
    O.LOG: [0.01, 0.5, 1.0, 2.718281828, 10.0, 1e4],
    O.NEG: [-3.5, -1.0, 0.0, 2.0, 3e4],
    O.SIN: [-3.14159, -1.0, 0.0, 0.5, 1.5707963, 10.0],
    O.SQRT: [0.0, 0.25, 1.0, 2.0, 9.0, 3e4],
    O.RSQRT: [0.01, 0.25, 1.0, 2.0, 9.0, 3e4],
}


@pytest.mark.parametrize("code", list(MATH))
@pytest.mark.parametrize("type_,rtol", [(F32, 2e-6), (F16, 2e-3)])
def test_float_matches_math(code, type_, rtol):
    x = np.asarray(DOMAIN[code], np.float32 if type_ == F32 else np.float16)
    x2 = np.stack([x, x[::-1]])  # rank 2
    got = run1(code, tensor(type_, x2), type_)
    assert got.dtype == x.dtype and got.shape == x2.shape
    expected = np.vectorize(lambda v: MATH[code](float(v)))(x2.astype(np.float64))
    if type_ == F16:
        expected = expected.astype(np.float16).astype(np.float64)  # the result is rounded to half
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("code", [O.EXP, O.LOG, O.SIN, O.SQRT, O.RSQRT, O.FLOOR])
def test_relaxed_float32(code):
    x = np.asarray(DOMAIN[code], np.float32)
    got = run1(code, tensor(F32, x), F32, relaxed=True)
    expected = [MATH[code](float(v)) for v in x]
    np.testing.assert_allclose(got, expected, rtol=1e-3)


def test_hand_values():
    np.testing.assert_array_equal(run1(O.FLOOR, tensor(F32, [-1.5, -0.5, 0.5, 1.5, 2.0]), F32),
                                  [-2.0, -1.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(run1(O.SQRT, tensor(F32, [0.0, 4.0, 16.0, 0.25]), F32), [0.0, 2.0, 4.0, 0.5])
    np.testing.assert_array_equal(run1(O.RSQRT, tensor(F32, [4.0, 16.0, 0.25]), F32), [0.5, 0.25, 2.0])
    np.testing.assert_array_equal(run1(O.EXP, tensor(F32, [0.0]), F32), [1.0])
    np.testing.assert_array_equal(run1(O.LOG, tensor(F32, [1.0]), F32), [0.0])


def test_special_values_follow_ieee():
    got = run1(O.LOG, tensor(F32, [0.0, -1.0]), F32)
    assert got[0] == -np.inf and np.isnan(got[1])
    assert np.isnan(run1(O.SQRT, tensor(F32, [-1.0]), F32)[0])
    assert run1(O.RSQRT, tensor(F32, [0.0]), F32)[0] == np.inf
    assert run1(O.EXP, tensor(F32, [1000.0]), F32)[0] == np.inf
    assert run1(O.EXP, tensor(F16, [20.0]), F16)[0] == np.inf  # e**20 exceeds half's range


@pytest.mark.parametrize("code,expected", [
    (O.ABS, [2147483647, 5, 0, 5, -2147483648]),
    (O.NEG, [-2147483647, 5, 0, -5, -2147483648]),
])
def test_int32(code, expected):
    x = np.array([2147483647, -5, 0, 5, -2147483648], np.int32)  # INT32_MIN wraps, as in C
    got = run1(code, tensor(I32, x), I32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-(2 ** 31) + 1, 2 ** 31 - 1), min_size=1, max_size=10))
def test_neg_abs_int32_property(values):
    x = np.array(values, np.int32)
    neg = run1(O.NEG, tensor(I32, x), I32)
    ab = run1(O.ABS, tensor(I32, x), I32)
    np.testing.assert_array_equal(neg.astype(np.int64), -x.astype(np.int64))
    np.testing.assert_array_equal(ab.astype(np.int64), np.abs(x.astype(np.int64)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=10))
def test_floor_property(values):
    got = run1(O.FLOOR, tensor(F32, values), F32)
    for g, v in zip(got, values):
        assert g == math.floor(v)


# ---- RSQRT on quant8 (feature level 7) ------------------------------------------------------

def rsqrt_quant_reference(x, in_scale, in_zp, out_scale, out_zp, lo, hi):
    out = []
    for q in x:
        r = (int(q) - in_zp) * in_scale
        if r <= 0:
            out.append(hi)  # inf (r == 0) and NaN (r < 0) saturate to the maximum
            continue
        y = 1 / math.sqrt(r) / out_scale
        out.append(min(hi, max(lo, out_zp + math.floor(y + 0.5))))
    return np.array(out)


@pytest.mark.parametrize("type_,lo,hi", [(Q8, 0, 255), (Q8S, -128, 127)])
@pytest.mark.parametrize("in_scale,in_zp_off,out_scale,out_zp_off", [
    (0.1, -100, 0.05, -100), (0.5, 0, 0.01, -128), (0.02, -120, 0.1, 0), (1.0, -128, 0.004, -128),
])
def test_rsqrt_quantized(type_, lo, hi, in_scale, in_zp_off, out_scale, out_zp_off):
    base = 128 if type_ == Q8 else 0
    in_zp, out_zp = base + in_zp_off, base + out_zp_off
    x = np.arange(lo, hi + 1)
    got = run1(O.RSQRT, tensor(type_, x, in_scale, in_zp), type_, out_scale, out_zp)
    expected = rsqrt_quant_reference(x, in_scale, in_zp, out_scale, out_zp, lo, hi)
    # float32 vs float64 evaluation may flip a rounding tie
    assert np.abs(got.astype(int) - expected).max() <= 1
    assert np.mean(got.astype(int) == expected) > 0.97


def test_rsqrt_quantized_hand_values():
    # in: scale 0.25, zp 0 -> real 0, 1, 4, 0.25 ; out: scale 0.5, zp 10
    # rsqrt: inf -> 255, 1 -> 10 + 2, 0.5 -> 10 + 1, 2 -> 10 + 4
    got = run1(O.RSQRT, tensor(Q8, [0, 4, 16, 1], 0.25, 0), Q8, 0.5, 10)
    np.testing.assert_array_equal(got, [255, 12, 11, 14])
    got = run1(O.RSQRT, tensor(Q8S, [-128, -124, -112, 0], 0.25, -128), Q8S, 0.5, -100)
    # real 0, 1, 4, 32 -> inf, 1, 0.5, 0.177 -> /0.5 -> 127 (saturated), -100 + 2, -100 + 1, -100 + 0
    np.testing.assert_array_equal(got, [127, -98, -99, -100])
    # negative real input: NaN saturates to the maximum as well
    np.testing.assert_array_equal(run1(O.RSQRT, tensor(Q8, [3, 5], 1.0, 4), Q8, 0.5, 10), [255, 12])


# ---- validation -----------------------------------------------------------------------------

def test_floor_rank_above_4_rejected():
    x = np.zeros((1, 1, 1, 1, 2), np.float32)
    assert_op_bad_data(O.FLOOR, [tensor(F32, x)], [output(F32, x.shape)])


@pytest.mark.parametrize("code", [O.EXP, O.LOG, O.SIN, O.SQRT, O.RSQRT, O.ABS, O.NEG])
def test_rank_above_4_allowed(code):
    x = np.ones((1, 1, 1, 1, 2), np.float32)
    assert run1(code, tensor(F32, x), F32).shape == x.shape


@pytest.mark.parametrize("code", list(MATH))
def test_output_type_must_match(code):
    assert_op_bad_data(code, [tensor(F32, [1.0])], [output(F16, (1,))])


@pytest.mark.parametrize("code", [O.FLOOR, O.EXP, O.LOG, O.SIN, O.SQRT, O.RSQRT])
def test_int32_rejected(code):
    assert_op_bad_data(code, [tensor(I32, [1])], [output(I32, (1,))])


@pytest.mark.parametrize("code", [O.FLOOR, O.ABS, O.EXP, O.LOG, O.NEG, O.SIN, O.SQRT])
def test_quant8_rejected(code):
    assert_op_bad_data(code, [tensor(Q8, [1], 0.5, 0)], [output(Q8, (1,), 0.5, 0)])


def test_shape_mismatch_rejected():
    assert_op_bad_data(O.EXP, [tensor(F32, [[1.0, 2.0]])], [output(F32, (2, 1))])
