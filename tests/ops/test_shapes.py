"""RESHAPE, SQUEEZE, EXPAND_DIMS, FILL, RANK.

Expected values are written out by hand (these operations keep the row-major element order and
only change the shape), plus properties checked against plain Python lists.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Compilation, Execution
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import build_operation_model, omitted, output, run_operation, scalar, tensor

from .support import assert_bad_data, const

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def reshape(t, x, shape, scale=0.0, zp=0, out_scale=None, out_zp=None):
    out_scale = scale if out_scale is None else out_scale
    out_zp = zp if out_zp is None else out_zp
    return run_operation(Op.RESHAPE, [tensor(t, x, scale, zp), const(I32, shape)],
                         [output(t, None, out_scale, out_zp)])[0]


# ---------------------------------------------------------------- RESHAPE

def test_reshape_float32():
    out = reshape(F32, [[1, 2, 3], [4, 5, 6]], [3, 2])
    np.testing.assert_array_equal(out, [[1, 2], [3, 4], [5, 6]])
    assert out.dtype == np.float32


def test_reshape_infers_minus_one():
    out = reshape(F32, [[1, 2, 3], [4, 5, 6]], [-1])
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5, 6])
    out = reshape(F32, [1, 2, 3, 4, 5, 6], [2, -1, 1])
    assert out.shape == (2, 3, 1)
    np.testing.assert_array_equal(out[:, :, 0], [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("t, values", [
    (F16, [0.5, -1.5, 2.0, 4.0]),
    (I32, [7, -8, 9, 100000]),
    (Q8, [0, 12, 255, 3]),
    (S8, [-128, 0, 127, 5]),
])
def test_reshape_other_types(t, values):
    quant = (0.5, 3) if t in (Q8, S8) else (0.0, 0)
    out = reshape(t, values, [2, 2], *quant)
    np.testing.assert_array_equal(out, [values[:2], values[2:]])


def test_reshape_shape_fed_at_execution():
    out = run_operation(Op.RESHAPE, [tensor(F32, [1, 2, 3, 4]), tensor(I32, [2, 2])], [output(F32)])[0]
    np.testing.assert_array_equal(out, [[1, 2], [3, 4]])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reshape_keeps_row_major_order(dims, data):
    count = int(np.prod(dims))
    values = list(range(count))
    out = reshape(I32, values, dims)
    assert out.shape == tuple(dims)
    assert flatten(out.tolist()) == values


def flatten(nested):
    """Row-major listing of nested Python lists."""
    if not isinstance(nested, list):
        return [nested]
    return [v for item in nested for v in flatten(item)]


@pytest.mark.parametrize("shape", [[-1, -1], [4, 2], [-2, 3], [5, -1]])
def test_reshape_invalid_shape(shape):
    assert_bad_data(reshape, F32, [1, 2, 3, 4, 5, 6], shape)


def test_reshape_invalid_rank_and_quant():
    assert_bad_data(reshape, F32, np.zeros((1, 1, 1, 1, 2)), [2])
    assert_bad_data(reshape, F32, [1, 2], [1, 1, 1, 1, 2])
    assert_bad_data(reshape, Q8, [1, 2], [2, 1], 0.5, 0, out_scale=0.25)
    assert_bad_data(reshape, S8, [1, 2], [2, 1], 0.5, 0, out_zp=1)
    with pytest.raises(NnapiError) as info:   # a 2-D shape tensor
        run_operation(Op.RESHAPE, [tensor(F32, [1, 2]), const(I32, [[2, 1]])], [output(F32)])
    assert info.value.code == ResultCode.BAD_DATA


# ---------------------------------------------------------------- SQUEEZE

def squeeze(t, x, dims=None, scale=0.0, zp=0, out_zp=None):
    axes = omitted(I32) if dims is None else const(I32, dims)
    return run_operation(Op.SQUEEZE, [tensor(t, x, scale, zp), axes],
                         [output(t, None, scale, zp if out_zp is None else out_zp)])[0]


def test_squeeze_all_ones_when_omitted():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3)
    out = squeeze(F32, x)
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out, [[0, 1, 2], [3, 4, 5]])


def test_squeeze_listed_dims_and_negative_index():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3)
    assert squeeze(F32, x, [0]).shape == (2, 1, 3)
    assert squeeze(F32, x, [-2]).shape == (1, 2, 3)
    assert squeeze(F32, x, [2, 0, 2]).shape == (2, 3)


def test_squeeze_everything_gives_shape_one():
    out = squeeze(F32, [[[5.0]]])
    assert out.shape == (1,)
    assert out[0] == 5.0


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_squeeze_types(t):
    quant = (0.5, 2) if t in (Q8, S8) else (0.0, 0)
    out = squeeze(t, [[1], [2], [3]], [1], *quant)
    np.testing.assert_array_equal(out, [1, 2, 3])


def test_squeeze_invalid():
    x = np.zeros((1, 2, 1), np.float32)
    assert_bad_data(squeeze, F32, x, [1])      # size 2
    assert_bad_data(squeeze, F32, x, [3])      # out of range
    assert_bad_data(squeeze, F32, x, [-4])
    assert_bad_data(squeeze, F32, np.zeros((1, 1, 1, 1, 1), np.float32))
    assert_bad_data(squeeze, Q8, [[1]], [0], 0.5, 0, out_zp=1)


# ---------------------------------------------------------------- EXPAND_DIMS

def expand(t, x, axis, scale=0.0, zp=0, out_scale=None):
    return run_operation(Op.EXPAND_DIMS, [tensor(t, x, scale, zp), scalar(T.INT32, axis)],
                         [output(t, None, scale if out_scale is None else out_scale, zp)])[0]


@pytest.mark.parametrize("axis, shape", [(0, (1, 2, 3)), (1, (2, 1, 3)), (2, (2, 3, 1)),
                                         (-1, (2, 3, 1)), (-3, (1, 2, 3))])
def test_expand_dims(axis, shape):
    x = [[1, 2, 3], [4, 5, 6]]
    out = expand(F32, x, axis)
    assert out.shape == shape
    np.testing.assert_array_equal(out.reshape(2, 3), x)


@pytest.mark.parametrize("t", [F16, I32, Q8, S8])
def test_expand_dims_types(t):
    quant = (1.0, 1) if t in (Q8, S8) else (0.0, 0)
    out = expand(t, [3, 4], 0, *quant)
    np.testing.assert_array_equal(out, [[3, 4]])


def test_expand_dims_invalid():
    assert_bad_data(expand, F32, [[1, 2]], 3)
    assert_bad_data(expand, F32, [[1, 2]], -4)
    assert_bad_data(expand, Q8, [1, 2], 0, 0.5, 0, out_scale=1.0)


# ---------------------------------------------------------------- FILL

@pytest.mark.parametrize("out_type, scalar_type, value", [
    (F32, T.FLOAT32, 1.25), (F16, T.FLOAT16, -2.5), (I32, T.INT32, 7)])
def test_fill(out_type, scalar_type, value):
    out = run_operation(Op.FILL, [const(I32, [2, 3]), scalar(scalar_type, value)], [output(out_type)])[0]
    assert out.shape == (2, 3)
    assert (out == value).all()


def test_fill_dims_fed_at_execution():
    out = run_operation(Op.FILL, [tensor(I32, [4]), scalar(T.INT32, 3)], [output(I32)])[0]
    np.testing.assert_array_equal(out, [3, 3, 3, 3])


def test_fill_invalid():
    assert_bad_data(run_operation, Op.FILL, [const(I32, [2, -1]), scalar(T.FLOAT32, 1.0)], [output(F32)])
    assert_bad_data(run_operation, Op.FILL, [const(I32, [[2]]), scalar(T.FLOAT32, 1.0)], [output(F32)])
    # the scalar's type must match the output's
    assert_bad_data(run_operation, Op.FILL, [const(I32, [2]), scalar(T.INT32, 1)], [output(F32)])


# ---------------------------------------------------------------- RANK

def run_rank(t, x, **quant):
    """RANK has a scalar output: bind a one-element buffer (run_operation sizes tensor buffers)."""
    model, fed = build_operation_model(Op.RANK, [tensor(t, x, **quant)], [output(T.INT32)])
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, np.ascontiguousarray(np.asarray(x, tensor(t, x).value.dtype)))
    result = np.zeros(1, np.int32)
    execution.set_output(0, result)
    execution.compute()
    return int(result[0])


@pytest.mark.parametrize("t, x, quant", [
    (F32, [1.0], {}),
    (F16, [[1.0, 2.0]], {}),
    (I32, np.zeros((1, 2, 3), np.int32), {}),
    (T.TENSOR_BOOL8, np.zeros((2, 1, 1, 2), bool), {}),
    (Q8, [[1, 2]], {"scale": 0.5}),
    (S8, np.zeros((1, 1, 1, 1, 2), np.int8), {"scale": 0.5}),
    (T.TENSOR_QUANT16_SYMM, [[1, 2], [3, 4]], {"scale": 0.5}),
    (T.TENSOR_QUANT16_ASYMM, [1, 2], {"scale": 0.5}),
    (T.TENSOR_QUANT8_SYMM, [[[1]]], {"scale": 0.5}),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [[1, 2]], {"channel_scales": [0.5, 0.25], "channel_dim": 1}),
])
def test_rank(t, x, quant):
    assert run_rank(t, x, **quant) == np.asarray(x).ndim


def test_rank_wrong_output_type():
    assert_bad_data(build_operation_model, Op.RANK, [tensor(F32, [1.0])], [output(I32)])


@pytest.mark.parametrize("code, ins, outs, level", [
    (Op.RESHAPE, [F32, I32], [F32], 27),
    (Op.RESHAPE, [F16, I32], [F16], 29),
    (Op.RESHAPE, [S8, I32], [S8], 30),
    (Op.RESHAPE, [I32, I32], [I32], 1000006),
    (Op.SQUEEZE, [Q8, I32], [Q8], 28),
    (Op.EXPAND_DIMS, [I32, T.INT32], [I32], 29),
    (Op.FILL, [I32, T.FLOAT16], [F16], 30),
    (Op.RANK, [T.TENSOR_BOOL8], [T.INT32], 30),
])
def test_signature_levels(code, ins, outs, level):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs).level == level
