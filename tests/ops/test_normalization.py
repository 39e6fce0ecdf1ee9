"""SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION
through the runtime.

Float expectations come from scipy.special (softmax, log_softmax), numpy.linalg.norm, the Python
statistics module or explicit loops; quantized expectations are the real-valued results quantized
independently, allowing the one unit the fixed-point kernels may differ by.
"""
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.special import log_softmax, softmax

from nnapi_ref.types import OperandCode as T, OperationCode as O
from nnts.generators.builders import output, run_operation, scalar, tensor

from .support import assert_op_bad_data

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
FSCALAR = {F32: T.FLOAT32, F16: T.FLOAT16}


# ---- SOFTMAX -------------------------------------------------------------------------------

def run_softmax(x, beta, axis=None, type_=F32, scale=0.0, zp=0, out_scale=0.0, out_zp=0, relaxed=False):
    beta_type = T.FLOAT16 if type_ == F16 else T.FLOAT32
    ins = [tensor(type_, x, scale, zp), scalar(beta_type, beta)]
    if axis is not None:
        ins.append(scalar(T.INT32, axis))
    (out,) = run_operation(O.SOFTMAX, ins, [output(type_, None, out_scale, out_zp)], relaxed=relaxed)
    return out


def test_softmax_hand_computed():
    x = np.array([[0.0, math.log(3.0)]], np.float32)
    np.testing.assert_allclose(run_softmax(x, 1.0), [[0.25, 0.75]], rtol=1e-6)
    # beta scales the exponent: beta = 0.5 on [0, 2 ln 3] gives the same
    np.testing.assert_allclose(run_softmax(x * 2, 0.5), [[0.25, 0.75]], rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_softmax_float_property(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    beta = data.draw(st.sampled_from([0.1, 1.0, 2.5]))
    x = np.random.default_rng(sum(shape)).normal(0, 3, shape).astype(np.float32)
    expected = softmax(beta * x.astype(np.float64), axis=axis)
    np.testing.assert_allclose(run_softmax(x, beta, axis), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 5), (1, 2, 2, 3)])
def test_softmax_default_axis_is_last(shape):
    x = np.random.default_rng(1).normal(0, 1, shape).astype(np.float32)
    np.testing.assert_allclose(run_softmax(x, 1.0), softmax(x.astype(np.float64), axis=-1), rtol=1e-5)


def test_softmax_float16_and_relaxed():
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 5.0]], np.float32)
    expected = softmax(x.astype(np.float64), axis=1)
    got16 = run_softmax(x.astype(np.float16), 1.0, type_=F16)
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16, expected, rtol=5e-3, atol=5e-3)
    np.testing.assert_allclose(run_softmax(x, 1.0, relaxed=True), expected, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("type_,zp_in,out_zp", [(Q8, 128, 0), (Q8S, 0, -128)])
@pytest.mark.parametrize("beta,scale", [(1.0, 0.1), (1.0, 0.05), (0.5, 0.2), (2.0, 1 / 16)])
def test_softmax_quantized_within_one_unit(type_, zp_in, out_zp, beta, scale):
    lo, hi = (0, 255) if type_ == Q8 else (-128, 127)
    x = np.random.default_rng(7).integers(lo, hi + 1, (4, 6))
    real = softmax(beta * (x - zp_in) * scale, axis=-1)
    expected = np.clip(np.round(real * 256) + out_zp, lo, hi)
    got = run_softmax(x, beta, None, type_, scale, zp_in, 1 / 256, out_zp)
    assert np.max(np.abs(got.astype(int) - expected)) <= 1


def test_softmax_quantized_uniform_row_is_exact():
    # Four equal inputs: each probability is exactly 1/4 = 64/256.
    got = run_softmax(np.full((1, 4), 77), 1.0, None, Q8, 0.5, 100, 1 / 256, 0)
    np.testing.assert_array_equal(got, [[64, 64, 64, 64]])


def test_softmax_quantized_axis():
    x = np.random.default_rng(3).integers(0, 256, (3, 4, 2))
    real = softmax((x - 128) * 0.1, axis=1)
    got = run_softmax(x, 1.0, 1, Q8, 0.1, 128, 1 / 256, 0)
    assert np.max(np.abs(got.astype(int) - np.clip(np.round(real * 256), 0, 255))) <= 1


def test_softmax_validation():
    x = np.zeros((2, 3), np.float32)
    out = [output(F32)]
    assert_op_bad_data(O.SOFTMAX, [tensor(F32, x), scalar(T.FLOAT32, 0.0)], out)            # beta must be > 0
    assert_op_bad_data(O.SOFTMAX, [tensor(F32, x), scalar(T.FLOAT32, -1.0)], out)
    assert_op_bad_data(O.SOFTMAX, [tensor(F32, x), scalar(T.FLOAT32, 1.0), scalar(T.INT32, 2)], out)   # axis
    assert_op_bad_data(O.SOFTMAX, [tensor(F32, x), scalar(T.FLOAT32, 1.0), scalar(T.INT32, -3)], out)
    assert_op_bad_data(O.SOFTMAX, [tensor(F32, np.zeros((1, 1, 1, 1, 2), np.float32)), scalar(T.FLOAT32, 1.0)], out)
    assert_op_bad_data(O.SOFTMAX, [tensor(F16, x), scalar(T.FLOAT32, 1.0)], [output(F16)])  # beta type for float16
    q = np.zeros((2, 3), np.uint8)
    for scale, zp in [(1 / 128, 0), (1 / 256, 1)]:
        assert_op_bad_data(O.SOFTMAX, [tensor(Q8, q, 0.5, 0), scalar(T.FLOAT32, 1.0)], [output(Q8, None, scale, zp)])
    qs = np.zeros((2, 3), np.int8)
    assert_op_bad_data(O.SOFTMAX, [tensor(Q8S, qs, 0.5, 0), scalar(T.FLOAT32, 1.0)], [output(Q8S, None, 1 / 256, 0)])


# ---- LOG_SOFTMAX ---------------------------------------------------------------------------

@pytest.mark.parametrize("type_", [F32, F16])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_log_softmax(type_, axis):
    x = np.random.default_rng(5).normal(0, 2, (3, 4, 2)).astype(np.float32)
    beta = 0.7
    ins = [tensor(type_, x.astype(type_ == F16 and np.float16 or np.float32)), scalar(FSCALAR[type_], beta),
           scalar(T.INT32, axis)]
    (got,) = run_operation(O.LOG_SOFTMAX, ins, [output(type_)])
    xin = x.astype(np.float16).astype(np.float64) if type_ == F16 else x.astype(np.float64)
    tol = 1e-5 if type_ == F32 else 1e-2
    np.testing.assert_allclose(got, log_softmax(beta * xin, axis=axis), rtol=tol, atol=tol)


def test_log_softmax_validation():
    x = tensor(F32, np.zeros((2, 3), np.float32))
    assert_op_bad_data(O.LOG_SOFTMAX, [x, scalar(T.FLOAT32, 1.0), scalar(T.INT32, 2)], [output(F32)])
    assert_op_bad_data(O.LOG_SOFTMAX, [x, scalar(T.FLOAT32, 0.0), scalar(T.INT32, 0)], [output(F32)])


# ---- L2_NORMALIZATION ----------------------------------------------------------------------

def run_l2(x, axis=None, type_=F32, scale=0.0, zp=0, out_scale=0.0, out_zp=0):
    ins = [tensor(type_, x, scale, zp)]
    if axis is not None:
        ins.append(scalar(T.INT32, axis))
    (out,) = run_operation(O.L2_NORMALIZATION, ins, [output(type_, None, out_scale, out_zp)])
    return out


def test_l2_float_hand_computed():
    np.testing.assert_allclose(run_l2(np.array([[3.0, 4.0], [0.0, -2.0]], np.float32)), [[0.6, 0.8], [0.0, -1.0]],
                               rtol=1e-6)
    # all zeros along the axis give zeros
    np.testing.assert_array_equal(run_l2(np.zeros((1, 1, 1, 3), np.float32)), np.zeros((1, 1, 1, 3)))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("type_", [F32, F16])
def test_l2_float_axes(axis, type_):
    x = np.random.default_rng(axis + 5).normal(0, 1, (2, 3, 4)).astype(np.float16 if type_ == F16 else np.float32)
    xf = x.astype(np.float64)
    expected = xf / np.linalg.norm(xf, axis=axis, keepdims=True)
    tol = 1e-5 if type_ == F32 else 3e-3
    np.testing.assert_allclose(run_l2(x, axis, type_), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("type_,zp_in,out_zp", [(Q8, 128, 128), (Q8S, -3, 0)])
@pytest.mark.parametrize("axis", [-1, 0])
def test_l2_quantized_within_one_unit(type_, zp_in, out_zp, axis):
    lo, hi = (0, 255) if type_ == Q8 else (-128, 127)
    x = np.random.default_rng(11).integers(lo, hi + 1, (3, 5))
    real = (x - zp_in) * 0.1
    expected = np.clip(np.round(real / np.linalg.norm(real, axis=axis, keepdims=True) * 128) + out_zp, lo, hi)
    got = run_l2(x, axis, type_, 0.1, zp_in, 1 / 128, out_zp)
    assert np.max(np.abs(got.astype(int) - expected)) <= 1


def test_l2_validation():
    q = np.zeros((2, 3), np.uint8)
    assert_op_bad_data(O.L2_NORMALIZATION, [tensor(Q8, q, 0.5, 1)], [output(Q8, None, 1 / 256, 128)])
    assert_op_bad_data(O.L2_NORMALIZATION, [tensor(Q8, q, 0.5, 1)], [output(Q8, None, 1 / 128, 0)])
    assert_op_bad_data(O.L2_NORMALIZATION, [tensor(Q8S, q.astype(np.int8), 0.5, 1)], [output(Q8S, None, 1 / 128, 128)])
    x = tensor(F32, np.ones((2, 3), np.float32))
    assert_op_bad_data(O.L2_NORMALIZATION, [x, scalar(T.INT32, 2)], [output(F32)])
    assert_op_bad_data(O.L2_NORMALIZATION, [tensor(F32, np.ones((1, 1, 1, 1, 2), np.float32))], [output(F32)])


# ---- LOCAL_RESPONSE_NORMALIZATION ----------------------------------------------------------

def lrn_loops(x, radius, bias, alpha, beta, axis):
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    out = np.empty_like(x)
    n = x.shape[-1]
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        for i in range(n):
            s = sum(row[d] ** 2 for d in range(max(0, i - radius), min(n, i + radius + 1)))
            out[idx + (i,)] = row[i] / (bias + alpha * s) ** beta
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("type_", [F32, F16])
@pytest.mark.parametrize("radius,axis", [(0, None), (1, None), (2, 1), (5, 0), (1, -2)])
def test_lrn(type_, radius, axis):
    x = np.random.default_rng(radius).normal(0, 1, (2, 3, 5)).astype(np.float16 if type_ == F16 else np.float32)
    bias, alpha, beta = 1.5, 0.3, 0.75
    s = FSCALAR[type_]
    ins = [tensor(type_, x), scalar(T.INT32, radius), scalar(s, bias), scalar(s, alpha), scalar(s, beta)]
    if axis is not None:
        ins.append(scalar(T.INT32, axis))
    (got,) = run_operation(O.LOCAL_RESPONSE_NORMALIZATION, ins, [output(type_)])
    expected = lrn_loops(x, radius, bias, alpha, beta, -1 if axis is None else axis)
    tol = 1e-5 if type_ == F32 else 3e-3
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_lrn_validation():
    x = tensor(F32, np.ones((1, 1, 1, 3), np.float32))
    params = [scalar(T.INT32, 1), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 0.5)]
    assert_op_bad_data(O.LOCAL_RESPONSE_NORMALIZATION, [x, *params, scalar(T.INT32, 4)], [output(F32)])
    zero_bias = [scalar(T.INT32, 1), scalar(T.FLOAT32, 0.0), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 0.5)]
    assert_op_bad_data(O.LOCAL_RESPONSE_NORMALIZATION, [x, *zero_bias], [output(F32)])
    f16 = [scalar(T.INT32, 1), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 0.5)]
    assert_op_bad_data(O.LOCAL_RESPONSE_NORMALIZATION, [tensor(F16, np.ones((1, 3), np.float16)), *f16], [output(F16)])


# ---- INSTANCE_NORMALIZATION ----------------------------------------------------------------

def instance_norm_loops(x, gamma, beta, eps, nchw):
    x = np.asarray(x, np.float64)
    if nchw:
        x = x.transpose(0, 2, 3, 1)
    out = np.empty_like(x)
    b, h, w, c = x.shape
    for n in range(b):
        for ch in range(c):
            vals = [float(v) for v in x[n, :, :, ch].ravel()]
            mean = statistics.fmean(vals)
            var = statistics.pvariance(vals, mean)
            out[n, :, :, ch] = (x[n, :, :, ch] - mean) * gamma / math.sqrt(var + eps) + beta
    return out.transpose(0, 3, 1, 2) if nchw else out


@pytest.mark.parametrize("type_", [F32, F16])
@pytest.mark.parametrize("nchw", [False, True])
def test_instance_normalization(type_, nchw):
    x = np.random.default_rng(2).normal(1, 2, (2, 3, 4, 2)).astype(np.float16 if type_ == F16 else np.float32)
    gamma, beta, eps = 1.5, -0.5, 1e-3
    s = FSCALAR[type_]
    ins = [tensor(type_, x), scalar(s, gamma), scalar(s, beta), scalar(s, eps), scalar(T.BOOL, nchw)]
    (got,) = run_operation(O.INSTANCE_NORMALIZATION, ins, [output(type_)])
    tol = 1e-5 if type_ == F32 else 1e-2
    np.testing.assert_allclose(got, instance_norm_loops(x, gamma, beta, eps, nchw), rtol=tol, atol=tol)


def test_instance_normalization_constant_plane():
    # A constant plane has zero variance: the output is beta.
    x = np.full((1, 2, 2, 1), 3.0, np.float32)
    ins = [tensor(F32, x), scalar(T.FLOAT32, 2.0), scalar(T.FLOAT32, 0.25), scalar(T.FLOAT32, 1e-4),
           scalar(T.BOOL, False)]
    (got,) = run_operation(O.INSTANCE_NORMALIZATION, ins, [output(F32)])
    np.testing.assert_array_equal(got, np.full((1, 2, 2, 1), 0.25))


def test_instance_normalization_validation():
    ins = [tensor(F32, np.ones((2, 3, 4), np.float32)), scalar(T.FLOAT32, 1.0), scalar(T.FLOAT32, 0.0),
           scalar(T.FLOAT32, 1e-3), scalar(T.BOOL, False)]
    assert_op_bad_data(O.INSTANCE_NORMALIZATION, ins, [output(F32)])
