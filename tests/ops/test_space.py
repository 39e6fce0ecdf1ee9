"""TRANSPOSE, DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND, CHANNEL_SHUFFLE.

Expected values are worked out by hand from the operations' definitions; round trips
(DEPTH_TO_SPACE after SPACE_TO_DEPTH, BATCH_TO_SPACE_ND after SPACE_TO_BATCH_ND, TRANSPOSE by a
permutation and its inverse) must give the input back, in both data layouts.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import omitted, output, run_operation, scalar, tensor

from .support import assert_bad_data, const

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def layout(nchw):
    return [] if nchw is None else [scalar(T.BOOL, nchw)]


def depth_to_space(t, x, bs, nchw=None, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.DEPTH_TO_SPACE, [tensor(t, x, *quant), scalar(T.INT32, bs)] + layout(nchw),
                         [output(t, None, *(out_quant or quant))])[0]


def space_to_depth(t, x, bs, nchw=None, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.SPACE_TO_DEPTH, [tensor(t, x, *quant), scalar(T.INT32, bs)] + layout(nchw),
                         [output(t, None, *(out_quant or quant))])[0]


def batch_to_space(t, x, block, nchw=None, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.BATCH_TO_SPACE_ND, [tensor(t, x, *quant), const(I32, block)] + layout(nchw),
                         [output(t, None, *(out_quant or quant))])[0]


def space_to_batch(t, x, block, pads, nchw=None, quant=(0.0, 0), out_quant=None):
    ins = [tensor(t, x, *quant), const(I32, block), const(I32, pads)] + layout(nchw)
    return run_operation(Op.SPACE_TO_BATCH_ND, ins, [output(t, None, *(out_quant or quant))])[0]


# ---------------------------------------------------------------- DEPTH_TO_SPACE / SPACE_TO_DEPTH

def test_depth_to_space_nhwc():
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 4)   # two pixels of four channels
    out = depth_to_space(F32, x, 2)
    assert out.shape == (1, 2, 4, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[1, 2, 5, 6], [3, 4, 7, 8]])


def test_depth_to_space_keeps_channel_groups():
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 1, 8)   # block 2, two output channels
    out = depth_to_space(F32, x, 2, False)
    np.testing.assert_array_equal(out[0], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]])


def test_depth_to_space_nchw():
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 4, 1, 1)
    out = depth_to_space(F32, x, 2, True)
    assert out.shape == (1, 1, 2, 2)
    np.testing.assert_array_equal(out[0, 0], [[1, 2], [3, 4]])


def test_space_to_depth_nhwc():
    out = space_to_depth(F32, np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1), 2)
    assert out.shape == (1, 1, 1, 4)
    np.testing.assert_array_equal(out.ravel(), [1, 2, 3, 4])


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_depth_space_types(t):
    quant = (0.5, 2) if t in (Q8, S8) else (0.0, 0)
    x = np.array([1, 2, 3, 4]).reshape(1, 1, 1, 4)
    out = depth_to_space(t, x, 2, None, quant)
    np.testing.assert_array_equal(out.reshape(2, 2), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(space_to_depth(t, out, 2, False, quant), x)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(1, 3),
       st.booleans())
def test_depth_to_space_inverts_space_to_depth(batches, bs, hb, wb, c, nchw):
    dims = (batches, c, hb * bs, wb * bs) if nchw else (batches, hb * bs, wb * bs, c)
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    packed = space_to_depth(F32, x, bs, nchw)
    assert packed.shape == ((batches, c * bs * bs, hb, wb) if nchw else (batches, hb, wb, c * bs * bs))
    np.testing.assert_array_equal(depth_to_space(F32, packed, bs, nchw), x)


def test_depth_space_invalid():
    x = np.zeros((1, 2, 2, 4), np.float32)
    assert_bad_data(depth_to_space, F32, x, 0)
    assert_bad_data(depth_to_space, F32, x, 3)                     # 4 channels, 9 per block
    assert_bad_data(depth_to_space, F32, np.zeros((2, 2, 4), np.float32), 2)
    assert_bad_data(depth_to_space, Q8, x, 2, None, (0.5, 0), (0.5, 1))
    assert_bad_data(space_to_depth, F32, x, 0)
    assert_bad_data(space_to_depth, F32, np.zeros((1, 3, 2, 1), np.float32), 2)
    y = np.zeros((1, 4, 2, 3), np.float32)
    assert space_to_depth(F32, y, 2, False).shape == (1, 2, 1, 12)
    assert_bad_data(space_to_depth, F32, y, 2, True)               # as NCHW its width is 3
    assert_bad_data(space_to_depth, S8, x, 2, None, (0.5, 0), (0.25, 0))


# ---------------------------------------------------------------- BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND

def test_batch_to_space():
    x = np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1, 1)
    out = batch_to_space(F32, x, [2, 2])
    assert out.shape == (1, 2, 2, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[1, 2], [3, 4]])
    out = batch_to_space(F32, x, [1, 2])          # two output batches, width doubled
    np.testing.assert_array_equal(out[:, 0, :, 0], [[1, 3], [2, 4]])


def test_batch_to_space_nchw():
    x = np.arange(1, 9, dtype=np.float32).reshape(4, 2, 1, 1)   # two channels
    out = batch_to_space(F32, x, [2, 2], True)
    assert out.shape == (1, 2, 2, 2)
    np.testing.assert_array_equal(out[0, 0], [[1, 3], [5, 7]])
    np.testing.assert_array_equal(out[0, 1], [[2, 4], [6, 8]])


def test_space_to_batch_without_padding():
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    out = space_to_batch(F32, x, [2, 2], [[0, 0], [0, 0]])
    assert out.shape == (4, 1, 1, 1)
    np.testing.assert_array_equal(out.ravel(), [1, 2, 3, 4])


@pytest.mark.parametrize("t, quant, z", [(F32, (0.0, 0), 0), (Q8, (0.5, 5), 5), (S8, (0.5, -3), -3),
                                         (F16, (0.0, 0), 0)])
def test_space_to_batch_pads_with_zero(t, quant, z):
    x = np.array([[1, 2], [3, 4]]).reshape(1, 2, 2, 1)
    out = space_to_batch(t, x, [2, 2], [[1, 1], [0, 0]], None, quant)
    assert out.shape == (4, 2, 1, 1)
    # padded rows: [z z], [1 2], [3 4], [z z]; batch i*2+j takes padded[y*2+i, x*2+j]
    np.testing.assert_array_equal(out[:, :, 0, 0], [[z, 3], [z, 4], [1, z], [2, z]])


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2),
       st.integers(1, 2), st.booleans())
def test_batch_to_space_inverts_space_to_batch(batches, bh, bw, hb, wb, c, nchw):
    dims = (batches, c, hb * bh, wb * bw) if nchw else (batches, hb * bh, wb * bw, c)
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    spread = space_to_batch(F32, x, [bh, bw], [[0, 0], [0, 0]], nchw)
    assert spread.shape[0] == batches * bh * bw
    np.testing.assert_array_equal(batch_to_space(F32, spread, [bh, bw], nchw), x)


def test_batch_space_invalid():
    x = np.zeros((4, 1, 1, 1), np.float32)
    assert_bad_data(batch_to_space, F32, x, [3, 1])               # batch 4 not divisible by 3
    assert_bad_data(batch_to_space, F32, x, [0, 1])
    assert_bad_data(batch_to_space, F32, x, [2, 2, 1])
    assert_bad_data(batch_to_space, F32, np.zeros((4, 1, 1), np.float32), [2, 2])
    assert_bad_data(batch_to_space, Q8, x, [2, 2], None, (0.5, 0), (0.5, 1))
    y = np.zeros((1, 2, 2, 1), np.float32)
    assert_bad_data(space_to_batch, F32, y, [3, 1], [[0, 0], [0, 0]])  # height 2 not divisible by 3
    assert_bad_data(space_to_batch, F32, y, [2, 2], [[0, 1], [0, 0]])  # padded height 3
    assert_bad_data(space_to_batch, F32, y, [2, 2], [[-1, 1], [0, 0]])
    assert_bad_data(space_to_batch, F32, y, [0, 1], [[0, 0], [0, 0]])
    assert_bad_data(space_to_batch, F32, y, [1, 1], [[0, 0, 0], [0, 0, 0]])
    assert_bad_data(space_to_batch, S8, y, [1, 1], [[0, 0], [0, 0]], None, (0.5, 0), (0.5, 1))


# ---------------------------------------------------------------- TRANSPOSE

def transpose(t, x, perm, quant=(0.0, 0), out_quant=None):
    p = omitted(I32) if perm is None else const(I32, perm)
    return run_operation(Op.TRANSPOSE, [tensor(t, x, *quant), p], [output(t, None, *(out_quant or quant))])[0]


def test_transpose_2d_and_default_perm():
    x = [[1, 2, 3], [4, 5, 6]]
    expected = [[1, 4], [2, 5], [3, 6]]
    np.testing.assert_array_equal(transpose(F32, x, [1, 0]), expected)
    np.testing.assert_array_equal(transpose(F32, x, None), expected)


def test_transpose_3d():
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)    # x[a, b, c] = 4a + 2b + c
    out = transpose(F32, x, [2, 0, 1])                       # out[c, a, b] = x[a, b, c]
    np.testing.assert_array_equal(out[1], [[1, 3], [5, 7]])
    np.testing.assert_array_equal(out[0], [[0, 2], [4, 6]])


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_transpose_types(t):
    quant = (0.5, 4) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(transpose(t, [[1, 2]], [1, 0], quant), [[1], [2]])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data())
def test_transpose_then_inverse_is_identity(dims, data):
    perm = data.draw(st.permutations(range(len(dims))))
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    out = transpose(F32, x, perm)
    assert out.shape == tuple(dims[p] for p in perm)
    inverse = [perm.index(i) for i in range(len(dims))]
    np.testing.assert_array_equal(transpose(F32, out, inverse), x)


def test_transpose_invalid():
    x = [[1.0, 2.0]]
    assert_bad_data(transpose, F32, x, [0, 0])
    assert_bad_data(transpose, F32, x, [0, 2])
    assert_bad_data(transpose, F32, x, [1, 0, 2])
    assert_bad_data(transpose, F32, np.zeros((1, 1, 1, 1, 1), np.float32), [4, 3, 2, 1, 0])
    assert_bad_data(transpose, Q8, [[1]], [0, 1], (0.5, 0), (0.5, 1))


# ---------------------------------------------------------------- CHANNEL_SHUFFLE

def shuffle(t, x, groups, axis, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.CHANNEL_SHUFFLE, [tensor(t, x, *quant), scalar(T.INT32, groups), scalar(T.INT32, axis)],
                         [output(t, None, *(out_quant or quant))])[0]


@pytest.mark.parametrize("groups, expected", [(1, [0, 1, 2, 3, 4, 5]), (2, [0, 3, 1, 4, 2, 5]),
                                              (3, [0, 2, 4, 1, 3, 5]), (6, [0, 1, 2, 3, 4, 5])])
def test_channel_shuffle_1d(groups, expected):
    np.testing.assert_array_equal(shuffle(F32, np.arange(6), groups, 0), expected)


def test_channel_shuffle_axis():
    x = np.array([[0, 1, 2, 3], [10, 11, 12, 13]], np.float32)
    np.testing.assert_array_equal(shuffle(F32, x, 2, -1), [[0, 2, 1, 3], [10, 12, 11, 13]])
    np.testing.assert_array_equal(shuffle(F32, x, 2, 0), x)   # two channels in two groups of one


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_channel_shuffle_types(t):
    quant = (0.5, 1) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(shuffle(t, [[1, 2, 3, 4]], 2, 1, quant), [[1, 3, 2, 4]])


def test_channel_shuffle_invalid():
    x = np.zeros((2, 6), np.float32)
    assert_bad_data(shuffle, F32, x, 4, 1)       # 6 channels, 4 groups
    assert_bad_data(shuffle, F32, x, 0, 1)
    assert_bad_data(shuffle, F32, x, 2, 2)
    assert_bad_data(shuffle, F32, x, 2, -3)
    assert_bad_data(shuffle, F32, np.zeros((1, 1, 1, 1, 2), np.float32), 2, 4)
    assert_bad_data(shuffle, Q8, [[1, 2]], 2, 1, (0.5, 0), (0.25, 0))
    assert_bad_data(run_operation, Op.CHANNEL_SHUFFLE, [tensor(I32, [1, 2]), scalar(T.INT32, 2),
                                                        scalar(T.INT32, 0)], [output(I32)])


# ---------------------------------------------------------------- feature levels

@pytest.mark.parametrize("code, ins, outs, level", [
    (Op.DEPTH_TO_SPACE, [F32, T.INT32], [F32], 27),
    (Op.DEPTH_TO_SPACE, [F32, T.INT32, T.BOOL], [F32], 29),     # the layout flag is level 3
    (Op.SPACE_TO_DEPTH, [Q8, T.INT32], [Q8], 27),
    (Op.SPACE_TO_DEPTH, [F16, T.INT32], [F16], 29),
    (Op.BATCH_TO_SPACE_ND, [F32, I32], [F32], 28),
    (Op.BATCH_TO_SPACE_ND, [Q8, I32, T.BOOL], [Q8], 29),
    (Op.SPACE_TO_BATCH_ND, [S8, I32, I32], [S8], 30),
    (Op.SPACE_TO_BATCH_ND, [F32, I32, I32, T.BOOL], [F32], 29),
    (Op.TRANSPOSE, [Q8, I32], [Q8], 28),
    (Op.CHANNEL_SHUFFLE, [F32, T.INT32, T.INT32], [F32], 29),
    (Op.CHANNEL_SHUFFLE, [S8, T.INT32, T.INT32], [S8], 30),
])
def test_signature_levels(code, ins, outs, level):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs).level == level


@pytest.mark.parametrize("code, ins, outs", [
    (Op.DEPTH_TO_SPACE, [I32, T.INT32], [I32]),
    (Op.TRANSPOSE, [F32, I32], [F16]),
    (Op.SPACE_TO_BATCH_ND, [F32, I32], [F32]),
])
def test_signature_rejected(code, ins, outs):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs) is None


def test_transpose_zero_sized_shape():
    from nnapi_ref import ops
    from nnapi_ref.ops.base import Arg, Call
    x = np.zeros((0, 2, 3), np.float32)
    call = Call([Arg(F32, x.shape, value=x), Arg(I32, (3,), value=np.array([2, 0, 1], np.int32))],
                [Arg(F32, None)])
    assert ops.get(Op.TRANSPOSE).infer(call) == [(3, 0, 2)]
