"""RELU, RELU1, RELU6, LOGISTIC, TANH, ELU, HARD_SWISH through the runtime.

Expected values are hand-computed or come from the real-valued math (math / scipy.special),
quantized independently; the fixed-point kernels may differ from real rounding by one unit.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.special import expit

from nnapi_ref.errors import NnapiError
from nnapi_ref.ops.base import REGISTRY, Arg, Call
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import Operand, output, run_operation, scalar, tensor

from .support import assert_op_bad_data

Q8 = T.TENSOR_QUANT8_ASYMM
Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED
F32 = T.TENSOR_FLOAT32
F16 = T.TENSOR_FLOAT16
QRANGE = {Q8: (0, 255), Q8S: (-128, 127)}


def run1(code, x: Operand, out_type, scale=0.0, zp=0, relaxed=False, extra=()):
    (result,) = run_operation(code, [x, *extra], [output(out_type, x.dims, scale, zp)], relaxed=relaxed)
    return result


# ---- RELU family ----------------------------------------------------------------------------

RELU_CASES = [
    (O.RELU, [-3.0, -0.5, 0.0, 0.5, 7.25], [0.0, 0.0, 0.0, 0.5, 7.25]),
    (O.RELU1, [-3.0, -0.5, 0.0, 0.5, 7.25], [-1.0, -0.5, 0.0, 0.5, 1.0]),
    (O.RELU6, [-3.0, -0.5, 0.0, 5.5, 7.25], [0.0, 0.0, 0.0, 5.5, 6.0]),
]


@pytest.mark.parametrize("code,x,expected", RELU_CASES)
@pytest.mark.parametrize("type_", [F32, F16])
def test_relu_float(code, x, expected, type_):
    got = run1(code, tensor(type_, np.reshape(x, (1, 5))), type_)
    assert got.dtype == np.dtype(np.float32 if type_ == F32 else np.float16)
    np.testing.assert_array_equal(got, np.reshape(expected, (1, 5)))


@pytest.mark.parametrize("code,x,expected", RELU_CASES)
def test_relu_relaxed(code, x, expected):
    got = run1(code, tensor(F32, x), F32, relaxed=True)
    np.testing.assert_allclose(got, expected, atol=1e-3)


def test_relu_nan_and_inf_follow_the_cpu_implementation():
    # std::min(std::max(lo, x), hi): NaN -> lo; RELU's upper bound is FLT_MAX
    x = [np.nan, np.inf, -np.inf]
    fmax = np.finfo(np.float32).max
    np.testing.assert_array_equal(run1(O.RELU, tensor(F32, x), F32), [0.0, fmax, 0.0])
    np.testing.assert_array_equal(run1(O.RELU1, tensor(F32, x), F32), [-1.0, 1.0, -1.0])
    np.testing.assert_array_equal(run1(O.RELU6, tensor(F16, x), F16), [0.0, 6.0, 0.0])
    np.testing.assert_array_equal(run1(O.RELU, tensor(F16, x), F16), [0.0, np.inf, 0.0])


def test_relu_rank4_float():
    x = np.arange(-8, 8, dtype=np.float32).reshape(1, 2, 2, 4)
    np.testing.assert_array_equal(run1(O.RELU6, tensor(F32, x), F32), np.where(x < 0, 0, np.where(x > 6, 6, x)))


# scale 0.5, zero point 128 (unsigned) / 0 (signed): quantized -1 = zp - 2, 0 = zp, 1 = zp + 2, 6 = zp + 12
@pytest.mark.parametrize("type_,zp", [(Q8, 128), (Q8S, 0)])
@pytest.mark.parametrize("code,lo,hi", [(O.RELU, 0, None), (O.RELU1, -2, 2), (O.RELU6, 0, 12)])
def test_relu_quantized_clamps_in_quantized_domain(type_, zp, code, lo, hi):
    qmin, qmax = QRANGE[type_]
    x = np.array([qmin, zp - 3, zp - 2, zp - 1, zp, zp + 1, zp + 2, zp + 12, zp + 13, qmax])
    expected = np.clip(x, zp + lo, qmax if hi is None else zp + hi)
    got = run1(code, tensor(type_, x, 0.5, zp), type_, 0.5, zp)
    np.testing.assert_array_equal(got, expected)


def test_relu_quantized_range_outside_representable():
    # scale 1, zero point 250: 6.0 would be 256 > 255, so RELU6 clamps at 255 only
    x = np.array([0, 249, 250, 251, 255])
    np.testing.assert_array_equal(run1(O.RELU6, tensor(Q8, x, 1.0, 250), Q8, 1.0, 250), [250, 250, 250, 251, 255])
    # RELU1 with a large scale: -1 and 1 both round to the zero point
    np.testing.assert_array_equal(run1(O.RELU1, tensor(Q8, x, 4.0, 250), Q8, 4.0, 250), [250] * 5)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=12))
def test_relu6_property(values):
    got = run1(O.RELU6, tensor(F32, values), F32)
    v = np.asarray(values, np.float32)
    assert np.all((got >= 0) & (got <= 6))
    inside = (v >= 0) & (v <= 6)
    np.testing.assert_array_equal(got[inside], v[inside])


@pytest.mark.parametrize("code", [O.RELU, O.RELU1, O.RELU6, O.LOGISTIC, O.TANH])
def test_rank_above_4_rejected(code):
    x = np.zeros((1, 1, 1, 1, 2), np.float32)
    assert_op_bad_data(code, [tensor(F32, x)], [output(F32, x.shape)])


@pytest.mark.parametrize("code", [O.RELU, O.RELU1, O.RELU6])
@pytest.mark.parametrize("scale,zp", [(0.25, 128), (0.5, 100)])
def test_relu_quantized_output_params_must_match(code, scale, zp):
    assert_op_bad_data(code, [tensor(Q8, [1, 2], 0.5, 128)], [output(Q8, (2,), scale, zp)])


@pytest.mark.parametrize("code", [O.RELU, O.RELU1, O.RELU6, O.LOGISTIC, O.TANH, O.HARD_SWISH])
def test_type_mismatch_rejected(code):
    assert_op_bad_data(code, [tensor(F32, [1.0, 2.0])], [output(F16, (2,))])


@pytest.mark.parametrize("code", [O.RELU, O.LOGISTIC, O.TANH, O.HARD_SWISH])
def test_int32_rejected(code):
    assert_op_bad_data(code, [tensor(T.TENSOR_INT32, [1, 2])], [output(T.TENSOR_INT32, (2,))])


# ---- LOGISTIC, TANH: float ------------------------------------------------------------------

X_FLOAT = [-20.0, -3.5, -1.0, -0.25, 0.0, 0.25, 1.0, 3.5, 20.0]


@pytest.mark.parametrize("type_,tol", [(F32, 1e-6), (F16, 1e-3)])
def test_logistic_float(type_, tol):
    got = run1(O.LOGISTIC, tensor(type_, X_FLOAT), type_)
    np.testing.assert_allclose(got.astype(np.float64), expit(np.float16(X_FLOAT) if type_ == F16 else X_FLOAT),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("type_,tol", [(F32, 1e-6), (F16, 1e-3)])
def test_tanh_float(type_, tol):
    got = run1(O.TANH, tensor(type_, X_FLOAT), type_)
    np.testing.assert_allclose(got.astype(np.float64), [math.tanh(v) for v in X_FLOAT], rtol=tol, atol=tol)


def test_logistic_float_extremes_no_nan():
    got = run1(O.LOGISTIC, tensor(F32, [-1e30, -100.0, 100.0, 1e30]), F32)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, [0.0, 0.0, 1.0, 1.0], atol=1e-30)


# ---- LOGISTIC, TANH: quantized --------------------------------------------------------------

def quantized_reference(func, x, in_scale, in_zp, out_scale, out_zp, type_):
    lo, hi = QRANGE[type_]
    real = (np.asarray(x, np.float64) - in_zp) * in_scale
    return np.clip(np.round(func(real) / out_scale) + out_zp, lo, hi)


@pytest.mark.parametrize("type_,out_zp", [(Q8, 0), (Q8S, -128)])
@pytest.mark.parametrize("in_scale,in_zp_offset", [(0.5, 0), (0.0625, 5), (0.01, -7), (0.2, 0)])
def test_logistic_quantized_matches_real_math(type_, out_zp, in_scale, in_zp_offset):
    lo, hi = QRANGE[type_]
    in_zp = (lo + hi + 1) // 2 + in_zp_offset
    x = np.arange(lo, hi + 1)
    got = run1(O.LOGISTIC, tensor(type_, x, in_scale, in_zp), type_, 1 / 256, out_zp)
    expected = quantized_reference(expit, x, in_scale, in_zp, 1 / 256, out_zp, type_)
    assert np.abs(got.astype(int) - expected).max() <= 1
    # exact points: logistic(0) = 1/2 -> 128 units of 1/256
    assert got[x == in_zp][0] == 128 + out_zp


@pytest.mark.parametrize("type_,out_zp", [(Q8, 128), (Q8S, 0)])
@pytest.mark.parametrize("in_scale,in_zp_offset", [(0.5, 0), (0.0625, 5), (0.01, -7), (0.2, 0)])
def test_tanh_quantized_matches_real_math(type_, out_zp, in_scale, in_zp_offset):
    lo, hi = QRANGE[type_]
    in_zp = (lo + hi + 1) // 2 + in_zp_offset
    x = np.arange(lo, hi + 1)
    got = run1(O.TANH, tensor(type_, x, in_scale, in_zp), type_, 1 / 128, out_zp)
    expected = quantized_reference(np.tanh, x, in_scale, in_zp, 1 / 128, out_zp, type_)
    assert np.abs(got.astype(int) - expected).max() <= 1
    assert got[x == in_zp][0] == out_zp  # tanh(0) = 0


def test_logistic_tanh_quantized_saturation():
    # scale 1, zero point 0: inputs 20..255 are far beyond the Q4 range (+-16): saturate
    x = np.array([0, 20, 100, 255])
    np.testing.assert_array_equal(run1(O.LOGISTIC, tensor(Q8, x, 1.0, 0), Q8, 1 / 256, 0), [128, 255, 255, 255])
    np.testing.assert_array_equal(run1(O.TANH, tensor(Q8, x, 1.0, 0), Q8, 1 / 128, 128), [128, 255, 255, 255])
    xs = np.array([-128, -100, 0, 100, 127])
    np.testing.assert_array_equal(run1(O.LOGISTIC, tensor(Q8S, xs, 1.0, 0), Q8S, 1 / 256, -128),
                                  [-128, -128, 0, 127, 127])
    np.testing.assert_array_equal(run1(O.TANH, tensor(Q8S, xs, 1.0, 0), Q8S, 1 / 128, 0), [-128, -128, 0, 127, 127])


@settings(max_examples=20, deadline=None)
@given(st.floats(0.002, 0.5), st.integers(0, 255))
def test_quantized_logistic_tanh_monotone(scale, zp):
    x = np.arange(256)
    for code, out_scale, out_zp in [(O.LOGISTIC, 1 / 256, 0), (O.TANH, 1 / 128, 128)]:
        got = run1(code, tensor(Q8, x, scale, zp), Q8, out_scale, out_zp).astype(int)
        assert np.all(np.diff(got) >= 0)


@pytest.mark.parametrize("code,type_,scale,zp", [
    (O.LOGISTIC, Q8, 1 / 128, 0), (O.LOGISTIC, Q8, 1 / 256, 1), (O.LOGISTIC, Q8S, 1 / 256, 0),
    (O.TANH, Q8, 1 / 128, 0), (O.TANH, Q8, 1 / 256, 128), (O.TANH, Q8S, 1 / 128, 128),
])
def test_logistic_tanh_output_quantization_enforced(code, type_, scale, zp):
    assert_op_bad_data(code, [tensor(type_, [1, 2], 0.5, 0)], [output(type_, (2,), scale, zp)])


# ---- ELU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0])
def test_elu_float32(alpha):
    x = [-5.0, -1.0, -0.1, 0.0, 0.1, 3.0]
    expected = [v if v > 0 else alpha * math.expm1(v) for v in x]
    got = run1(O.ELU, tensor(F32, x), F32, extra=[scalar(T.FLOAT32, alpha)])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_elu_float16():
    x = np.array([[-2.0, -0.5], [0.5, 4.0]], np.float16)
    expected = np.where(x > 0, x, 0.75 * np.expm1(x.astype(np.float64)))
    got = run1(O.ELU, tensor(F16, x), F16, extra=[scalar(T.FLOAT16, 0.75)])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-3)


def test_elu_alpha_type_must_match():
    assert_op_bad_data(O.ELU, [tensor(F32, [1.0]), scalar(T.FLOAT16, 1.0)], [output(F32, (1,))])
    assert_op_bad_data(O.ELU, [tensor(F16, [1.0]), scalar(T.FLOAT32, 1.0)], [output(F16, (1,))])
    assert_op_bad_data(O.ELU, [tensor(Q8, [1], 0.5, 0), scalar(T.FLOAT32, 1.0)], [output(Q8, (1,), 0.5, 0)])


# ---- HARD_SWISH -----------------------------------------------------------------------------

def hard_swish(x):
    x = np.asarray(x, np.float64)
    return x * np.clip(x + 3, 0, 6) / 6


@pytest.mark.parametrize("type_", [F32, F16])
def test_hard_swish_float(type_):
    x = [-5.0, -3.0, -1.5, 0.0, 1.0, 3.0, 6.0]
    # hand values: -1.5 * 1.5 / 6 = -0.375 ; 1 * 4 / 6 ; 3 * 6 / 6 = 3 ; 6 * 6 / 6 = 6
    expected = [0.0, 0.0, -0.375, 0.0, 4 / 6, 3.0, 6.0]
    got = run1(O.HARD_SWISH, tensor(type_, x), type_)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-3 if type_ == F16 else 1e-6)


def test_hard_swish_higher_rank_allowed():
    x = np.linspace(-4, 4, 32, dtype=np.float32).reshape(1, 2, 2, 2, 4)
    np.testing.assert_allclose(run1(O.HARD_SWISH, tensor(F32, x), F32), hard_swish(x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("type_", [Q8, Q8S])
@pytest.mark.parametrize("in_scale,out_scale,in_off,out_off", [
    (0.05, 0.04, 0, 0), (0.1, 0.1, 10, -20), (0.02, 0.03, -30, 40), (0.2, 0.1, 5, 0), (0.01, 0.01, 0, 60),
])
def test_hard_swish_quantized_matches_real_math(type_, in_scale, out_scale, in_off, out_off):
    lo, hi = QRANGE[type_]
    mid = (lo + hi + 1) // 2
    in_zp, out_zp = mid + in_off, mid + out_off
    x = np.arange(lo, hi + 1)
    got = run1(O.HARD_SWISH, tensor(type_, x, in_scale, in_zp), type_, out_scale, out_zp)
    expected = quantized_reference(hard_swish, x, in_scale, in_zp, out_scale, out_zp, type_)
    assert np.abs(got.astype(int) - expected).max() <= 1
    assert got[x == in_zp][0] == out_zp  # hard_swish(0) = 0


# ---- zero-sized tensors (directly at the operation: the runtime feeds them only as temporaries)

@pytest.mark.parametrize("code,type_", [(O.RELU, F32), (O.RELU6, Q8), (O.LOGISTIC, Q8S), (O.TANH, F16),
                                        (O.HARD_SWISH, Q8)])
def test_zero_sized_execute(code, type_):
    from nnapi_ref.types import DTYPES
    scale, zp = {O.LOGISTIC: (1 / 256, -128), O.TANH: (0, 0)}.get(code, (0.5, 0))
    arg = Arg(type_, (0, 3), 0.5 if type_ in (Q8, Q8S) else 0.0, 0, value=np.zeros((0, 3), DTYPES[type_]))
    out = Arg(type_, (0, 3), scale if type_ in (Q8, Q8S) else 0.0, zp)
    call = Call([arg], [out])
    op = REGISTRY[code]
    assert op.infer(call) == [(0, 3)]
    (result,) = op.execute(call)
    assert result.shape == (0, 3) and result.dtype == DTYPES[type_]


# ---- execution-time failures of the quantized kernels (OP_FAILED, as in the CPU implementation)

def test_hard_swish_output_scale_too_small_fails_at_execution():
    # input_scale / 128 / output_scale must be < 1 (the output multiplier only shifts right)
    with pytest.raises(NnapiError) as info:
        run_operation(O.HARD_SWISH, [tensor(Q8, [1, 2], 1.0, 0)], [output(Q8, (2,), 1 / 1024, 0)])
    assert info.value.code == ResultCode.OP_FAILED


def test_logistic_input_scale_too_small_fails_at_execution():
    # input_scale * 2**27 must exceed 1 for QuantizeMultiplierGreaterThanOne
    with pytest.raises(NnapiError) as info:
        run_operation(O.LOGISTIC, [tensor(Q8, [1, 2], 2.0 ** -28, 0)], [output(Q8, (2,), 1 / 256, 0)])
    assert info.value.code == ResultCode.OP_FAILED


@settings(max_examples=15, deadline=None)
@given(st.floats(0.005, 0.5), st.integers(-128, 127), st.floats(0.3, 3.0), st.integers(-128, 127))
def test_hard_swish_quantized_property(in_scale, in_zp, ratio, out_zp):
    x = np.arange(-128, 128)
    out_scale = in_scale * ratio
    got = run1(O.HARD_SWISH, tensor(Q8S, x, in_scale, in_zp), Q8S, out_scale, out_zp)
    expected = quantized_reference(hard_swish, x, in_scale, in_zp, out_scale, out_zp, Q8S)
    assert np.abs(got.astype(int) - expected).max() <= 1
