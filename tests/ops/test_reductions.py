"""MEAN, REDUCE_*, ARGMAX, ARGMIN, TOPK_V2 through the runtime.

Expected values are hand-computed, or computed with plain Python (math.fsum / math.prod /
max / min over explicitly gathered rows, sorted() for TOPK) rather than the numpy reductions the
implementation uses.
"""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as O
from nnts.generators.builders import output, run_operation, scalar, tensor

from .support import assert_op_bad_data

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S, B8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8


def reduce_inputs(code, x, axes, keep, type_=F32, scale=0.0, zp=0):
    keep_op = scalar(T.INT32, int(keep)) if code == O.MEAN else scalar(T.BOOL, bool(keep))
    return [tensor(type_, x, scale, zp), tensor(I32, axes, as_input=False), keep_op]


def run_reduce(code, x, axes, keep, type_=F32, scale=0.0, zp=0):
    (out,) = run_operation(code, reduce_inputs(code, x, axes, keep, type_, scale, zp), [output(type_, None, scale, zp)])
    return out


def python_reduce(x, axes, keep, fn):
    """Reduce with a Python function over explicitly gathered rows (independent of numpy's reductions)."""
    x = np.asarray(x)
    rank = x.ndim
    axes = sorted({a % rank for a in axes})
    kept = [i for i in range(rank) if i not in axes]
    out_shape = [x.shape[i] for i in kept]
    result = np.empty(out_shape or [1], dtype=object)
    for idx in itertools.product(*[range(x.shape[i]) for i in kept]):
        values = []
        for red in itertools.product(*[range(x.shape[i]) for i in axes]):
            full = [0] * rank
            for i, v in zip(kept, idx):
                full[i] = v
            for i, v in zip(axes, red):
                full[i] = v
            values.append(x[tuple(full)].item())
        result[idx if idx else (0,)] = fn(values)
    if keep:
        result = result.reshape([1 if i in axes else x.shape[i] for i in range(rank)])
    return result


# ---- MEAN ----------------------------------------------------------------------------------

def test_mean_float_hand_computed():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]], np.float32)
    np.testing.assert_allclose(run_reduce(O.MEAN, x, [1], 0), [2.0, 6.0])
    np.testing.assert_allclose(run_reduce(O.MEAN, x, [0], 1), [[2.5, 3.5, 6.0]])
    np.testing.assert_allclose(run_reduce(O.MEAN, x, [-1, 0], 0), [4.0])  # all reduced -> shape [1]
    np.testing.assert_allclose(run_reduce(O.MEAN, x, [1, 1, -1], 0), [2.0, 6.0])  # repeated axes count once


def test_mean_keep_dims_is_positive_int():
    x = np.ones((2, 3), np.float32)
    assert run_reduce(O.MEAN, x, [1], 5).shape == (2, 1)
    assert run_reduce(O.MEAN, x, [1], -1).shape == (2,)


def test_mean_float16():
    x = np.array([[0.5, 1.5], [2.0, 3.0]], np.float16)
    got = run_reduce(O.MEAN, x, [1], 0, F16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.array([1.0, 2.5], np.float16))


def test_mean_quant8_truncates():
    # Raw values are averaged with C integer division: 7 / 3 -> 2, not 2.33 rounded.
    x = np.array([[1, 2, 4], [10, 10, 11]], np.uint8)
    np.testing.assert_array_equal(run_reduce(O.MEAN, x, [1], 0, Q8, 0.5, 3), [2, 10])


def test_mean_quant8_signed_truncates_toward_zero():
    x = np.array([[-3, -4], [3, 4]], np.int8)
    np.testing.assert_array_equal(run_reduce(O.MEAN, x, [1], 0, Q8S, 0.25, -1), [-3, 3])


def test_mean_quant8_output_quantization_must_match():
    x = np.array([[1, 2]], np.uint8)
    assert_op_bad_data(O.MEAN, reduce_inputs(O.MEAN, x, [1], 0, Q8, 0.5, 3), [output(Q8, None, 0.25, 3)])
    assert_op_bad_data(O.MEAN, reduce_inputs(O.MEAN, x, [1], 0, Q8, 0.5, 3), [output(Q8, None, 0.5, 4)])


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4), data=st.data())
def test_mean_float_property(shape, data):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=3))
    keep = data.draw(st.booleans())
    x = np.random.default_rng(len(shape)).uniform(-10, 10, shape).astype(np.float32)
    expected = python_reduce(x, axes, keep, lambda v: math.fsum(v) / len(v)).astype(np.float64)
    np.testing.assert_allclose(run_reduce(O.MEAN, x, axes, keep), expected, rtol=1e-5, atol=1e-5)


# ---- REDUCE_* ------------------------------------------------------------------------------

REDUCE_FNS = {
    O.REDUCE_SUM: math.fsum,
    O.REDUCE_PROD: math.prod,
    O.REDUCE_MAX: max,
    O.REDUCE_MIN: min,
}


@settings(max_examples=20, deadline=None)
@given(code=st.sampled_from(sorted(REDUCE_FNS)), shape=st.lists(st.integers(1, 3), min_size=1, max_size=4),
       data=st.data())
def test_reduce_float_property(code, shape, data):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=3))
    keep = data.draw(st.booleans())
    x = np.random.default_rng(rank).uniform(-2, 2, shape).astype(np.float32)
    expected = python_reduce(x, axes, keep, REDUCE_FNS[code]).astype(np.float64)
    np.testing.assert_allclose(run_reduce(code, x, axes, keep), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("code", sorted(REDUCE_FNS))
def test_reduce_float16(code):
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], np.float16)
    expected = python_reduce(x.astype(np.float64), [1], False, REDUCE_FNS[code]).astype(np.float64)
    got = run_reduce(code, x, [1], False, F16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, expected, rtol=1e-3)


def test_reduce_prod_zero_times_infinity_is_zero():
    x = np.array([[0.0, np.inf], [2.0, np.inf]], np.float32)
    np.testing.assert_array_equal(run_reduce(O.REDUCE_PROD, x, [1], False), [0.0, np.inf])


@pytest.mark.parametrize("type_,zp,x", [(Q8, 100, [[3, 200, 7], [255, 0, 1]]),
                                          (Q8S, -5, [[-128, 5, 127], [-3, -7, -100]])])
def test_reduce_max_min_quantized(type_, zp, x):
    x = np.array(x)
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MAX, x, [1], False, type_, 0.5, zp), [max(r) for r in x.tolist()])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MIN, x, [0], True, type_, 0.5, zp),
                                  [[min(c) for c in x.T.tolist()]])


def test_reduce_max_quantized_output_quantization_must_match():
    x = np.array([[1, 2]], np.uint8)
    assert_op_bad_data(O.REDUCE_MAX, reduce_inputs(O.REDUCE_MAX, x, [1], False, Q8, 0.5, 3), [output(Q8, None, 0.5, 2)])


def test_reduce_any_all():
    x = np.array([[True, False, False], [False, False, False]])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_ANY, x, [1], False, B8), [True, False])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_ALL, x, [1], True, B8), [[False], [False]])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_ALL, np.ones((2, 2), bool), [0, 1], False, B8), [True])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_ANY, x, [0, -1], False, B8), [True])


@pytest.mark.parametrize("code,type_", [(O.MEAN, F32), (O.REDUCE_SUM, F32), (O.REDUCE_MAX, Q8), (O.REDUCE_ANY, B8)])
def test_reduce_validation(code, type_):
    scale = 0.5 if type_ == Q8 else 0.0
    x = np.zeros((2, 3), np.bool_ if type_ == B8 else np.float32).astype(np.uint8 if type_ == Q8 else None)
    out = [output(type_, None, scale, 0)]
    assert_op_bad_data(code, reduce_inputs(code, x, [2], 0, type_, scale), out)       # axis out of range
    assert_op_bad_data(code, reduce_inputs(code, x, [-3], 0, type_, scale), out)
    inputs = reduce_inputs(code, x, [[0]], 0, type_, scale)                     # axes not 1-D
    assert_op_bad_data(code, inputs, out)
    big = np.zeros((1, 1, 1, 1, 2), x.dtype)                                    # rank 5
    assert_op_bad_data(code, reduce_inputs(code, big, [0], 0, type_, scale), out)


def test_reduce_wrong_types_rejected():
    # REDUCE_SUM has no quantized variant; REDUCE_ANY takes only BOOL8.
    assert_op_bad_data(O.REDUCE_SUM, reduce_inputs(O.REDUCE_SUM, np.ones((2, 2), np.uint8), [0], 0, Q8, 0.5),
                    [output(Q8, None, 0.5)])
    assert_op_bad_data(O.REDUCE_ANY, reduce_inputs(O.REDUCE_ANY, np.ones((2, 2), np.float32), [0], 0, F32),
                    [output(F32)])


# ---- NaN in REDUCE_MAX / REDUCE_MIN -----------------------------------------------------------
# AOSP folds std::max(best, x) / std::min(best, x) from lowest / max (Reduce.cpp): false for a
# NaN x, so a NaN is skipped, and a row of NaN keeps the starting value.

NAN = float("nan")


@pytest.mark.parametrize("type_,lowest,highest", [(F32, -3.4028234663852886e38, 3.4028234663852886e38),
                                                  (F16, -65504.0, 65504.0)])
def test_reduce_max_min_skip_nan(type_, lowest, highest):
    x = np.array([[1, NAN, 3], [NAN, NAN, NAN]])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MAX, x, [1], False, type_), [3, lowest])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MIN, x, [1], False, type_), [1, highest])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MAX, x, [0], False, type_), [1, lowest, 3])
    np.testing.assert_array_equal(run_reduce(O.REDUCE_MIN, [NAN, -2, 5, NAN], [0], True, type_), [-2])


# ---- ARGMAX / ARGMIN -----------------------------------------------------------------------

def run_arg(code, x, axis, type_=F32, scale=0.0, zp=0):
    (out,) = run_operation(code, [tensor(type_, x, scale, zp), scalar(T.INT32, axis)], [output(I32)])
    return out


@pytest.mark.parametrize("type_", [F32, F16, I32, Q8, Q8S])
def test_argmax_argmin_types(type_):
    x = np.array([[1, 7, 3, 7], [5, 2, 2, 0]])
    scale = 0.5 if type_ in (Q8, Q8S) else 0.0
    np.testing.assert_array_equal(run_arg(O.ARGMAX, x, 1, type_, scale), [1, 0])   # tie: first index
    np.testing.assert_array_equal(run_arg(O.ARGMIN, x, -1, type_, scale), [0, 3])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, x, 0, type_, scale), [1, 0, 0, 0])
    np.testing.assert_array_equal(run_arg(O.ARGMIN, x, 0, type_, scale), [0, 1, 1, 1])


def test_argmax_rank1_gives_shape_1():
    np.testing.assert_array_equal(run_arg(O.ARGMAX, np.array([0.5, 2.0, -1.0], np.float32), 0), [1])


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_argmax_property(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(sum(shape)).integers(-3, 3, shape).astype(np.float32)
    expected = python_reduce(x, [axis], False, lambda v: v.index(max(v))).astype(np.int64)
    np.testing.assert_array_equal(run_arg(O.ARGMAX, x, axis), expected)


@pytest.mark.parametrize("type_", [F32, F16])
def test_argmax_argmin_skip_nan(type_):
    """AOSP (ArgMinMax.cpp) starts from the axis' first element and moves only to a strictly
    greater (smaller) one: a later NaN never compares true, a NaN first is never left."""
    x = np.array([1, NAN, 0, 0, 0, 5])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, x, 0, type_), [5])
    np.testing.assert_array_equal(run_arg(O.ARGMIN, x, 0, type_), [2])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, [NAN, 1, 2], 0, type_), [0])
    np.testing.assert_array_equal(run_arg(O.ARGMIN, [NAN, 1, 2], 0, type_), [0])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, [2, NAN, NAN], 0, type_), [0])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, [-np.inf, NAN, -np.inf], 0, type_), [0])
    rows = np.array([[3, NAN, 4], [NAN, 9, 1], [-1, -2, NAN]])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, rows, 1, type_), [2, 0, 0])
    np.testing.assert_array_equal(run_arg(O.ARGMIN, rows, 1, type_), [0, 0, 1])
    np.testing.assert_array_equal(run_arg(O.ARGMAX, rows, 0, type_), [0, 0, 0])
    np.testing.assert_array_equal(run_arg(O.ARGMIN, rows, 0, type_), [2, 0, 1])


def test_arg_validation():
    x = tensor(F32, np.zeros((2, 3), np.float32))
    assert_op_bad_data(O.ARGMAX, [x, scalar(T.INT32, 2)], [output(I32)])
    assert_op_bad_data(O.ARGMIN, [x, scalar(T.INT32, -3)], [output(I32)])
    assert_op_bad_data(O.ARGMAX, [x, scalar(T.INT32, 0)], [output(F32)])  # output must be TENSOR_INT32


# ---- TOPK_V2 -------------------------------------------------------------------------------

def run_topk(x, k, type_=F32, scale=0.0, zp=0):
    return run_operation(O.TOPK_V2, [tensor(type_, x, scale, zp), scalar(T.INT32, k)],
                         [output(type_, None, scale, zp), output(I32)])


def python_topk(row, k):
    order = sorted(range(len(row)), key=lambda i: (row[i], i), reverse=True)[:k]
    return [row[i] for i in order], order


@pytest.mark.parametrize("type_", [F32, F16, I32, Q8, Q8S])
def test_topk_types_and_ties(type_):
    x = np.array([[3, 1, 3, 2], [0, 5, 4, 5]])
    scale = 0.5 if type_ in (Q8, Q8S) else 0.0
    values, indices = run_topk(x, 3, type_, scale)
    # Ties give the larger index first.
    np.testing.assert_array_equal(indices, [[2, 0, 3], [3, 1, 2]])
    np.testing.assert_array_equal(values, [[3, 3, 2], [5, 5, 4]])


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_topk_property(shape, data):
    k = data.draw(st.integers(1, shape[-1]))
    x = np.random.default_rng(sum(shape)).integers(-4, 4, shape).astype(np.float32)
    values, indices = run_topk(x, k)
    rows = x.reshape(-1, shape[-1]).tolist()
    exp = [python_topk(r, k) for r in rows]
    np.testing.assert_array_equal(values.reshape(-1, k), [e[0] for e in exp])
    np.testing.assert_array_equal(indices.reshape(-1, k), [e[1] for e in exp])


def test_topk_validation():
    x = tensor(F32, np.zeros((2, 3), np.float32))
    assert_op_bad_data(O.TOPK_V2, [x, scalar(T.INT32, 0)], [output(F32), output(I32)])
    assert_op_bad_data(O.TOPK_V2, [x, scalar(T.INT32, 4)], [output(F32), output(I32)])
    q = tensor(Q8, np.zeros((2, 3), np.uint8), 0.5, 1)
    assert_op_bad_data(O.TOPK_V2, [q, scalar(T.INT32, 1)], [output(Q8, None, 0.5, 2), output(I32)])
