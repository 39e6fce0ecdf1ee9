"""CONCATENATION, SPLIT, PACK, SLICE, STRIDED_SLICE, GATHER, TILE, REVERSE.

Expected values are written out by hand or come from Python list operations (slicing, repetition,
reversal); round trips (SPLIT then CONCATENATION, REVERSE twice) must give the input back.
Requantized CONCATENATION results are worked out from real = scale * (q - zeroPoint).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

from .support import assert_bad_data, assert_fails, const

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


# ---------------------------------------------------------------- CONCATENATION

def concat(t, parts, axis, quants=None, out_quant=(0.0, 0)):
    quants = quants or [(0.0, 0)] * len(parts)
    ins = [tensor(t, p, s, z) for p, (s, z) in zip(parts, quants)] + [scalar(T.INT32, axis)]
    return run_operation(Op.CONCATENATION, ins, [output(t, None, *out_quant)])[0]


def test_concat_float32_axes():
    a, b = [[1, 2], [3, 4]], [[5, 6]]
    np.testing.assert_array_equal(concat(F32, [a, b], 0), [[1, 2], [3, 4], [5, 6]])
    c = [[7], [8]]
    np.testing.assert_array_equal(concat(F32, [a, c, a], 1), [[1, 2, 7, 1, 2], [3, 4, 8, 3, 4]])


def test_concat_float16_single_input():
    out = concat(F16, [[0.5, 1.5]], 0)
    np.testing.assert_array_equal(out, [0.5, 1.5])
    assert out.dtype == np.float16


def test_concat_quant8_same_params_copies():
    out = concat(Q8, [[0, 255], [7]], 0, [(0.5, 3), (0.5, 3)], (0.5, 3))
    np.testing.assert_array_equal(out, [0, 255, 7])


def test_concat_quant8_requantizes():
    # input 0: reals 0.5 * [2, 4] = [1, 2]; in the output's scale 0.25, zp 10: [14, 18].
    # input 1 already has the output's parameters and is copied.
    out = concat(Q8, [[2, 4], [10, 14]], 0, [(0.5, 0), (0.25, 10)], (0.25, 10))
    np.testing.assert_array_equal(out, [14, 18, 10, 14])


def test_concat_quant8_rounds_half_away_and_clamps():
    # reals [3, 5, 255] in scale 2: [1.5, 2.5, 127.5] -> [2, 3, 128]; input 1: 200 * 4 / 2 = 400 -> 255
    out = concat(Q8, [[3, 5, 255], [200]], 0, [(1.0, 0), (4.0, 0)], (2.0, 0))
    np.testing.assert_array_equal(out, [2, 3, 128, 255])


def test_concat_quant8_signed_requantizes():
    # reals [-3, -5, 4] with scale 1 -> scale 2: [-1.5, -2.5, 2] -> [-2, -3, 2]; input 1: (-128 - 0)*1/2 -> -64
    out = concat(S8, [[-3, -5, 4], [-128]], 0, [(1.0, 0), (1.0, 0)], (2.0, 0))
    np.testing.assert_array_equal(out, [-2, -3, 2, -64])
    # zero points: (q - (-10)) * 0.5 / 0.25 + 1
    out = concat(S8, [[-10, -9], [1]], 0, [(0.5, -10), (0.25, 1)], (0.25, 1))
    np.testing.assert_array_equal(out, [1, 3, 1])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.integers(1, 3), st.data())
def test_split_then_concat_is_identity(dims, splits, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    dims[axis] *= splits
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    parts = run_operation(Op.SPLIT, [tensor(F32, x), scalar(T.INT32, axis), scalar(T.INT32, splits)],
                          [output(F32)] * splits)
    assert all(p.shape[axis] == dims[axis] // splits for p in parts)
    np.testing.assert_array_equal(concat(F32, parts, axis), x)


def test_concat_invalid():
    a = [[1.0, 2.0]]
    assert_bad_data(concat, F32, [a, a], -1)                    # NNAPI's axis is non-negative
    assert_bad_data(concat, F32, [a, a], 2)
    assert_bad_data(concat, F32, [a, [[1.0, 2.0, 3.0]]], 0)     # dimension 1 differs
    assert_bad_data(concat, F32, [a, [1.0, 2.0]], 0)            # ranks differ
    x5 = np.zeros((1, 1, 1, 1, 2), np.float32)
    assert_bad_data(concat, F32, [x5, x5], 4)


# ---------------------------------------------------------------- SPLIT

def split(t, x, axis, n, outs=None, quant=(0.0, 0), out_quant=None):
    out_quant = out_quant or quant
    return run_operation(Op.SPLIT, [tensor(t, x, *quant), scalar(T.INT32, axis), scalar(T.INT32, n)],
                         [output(t, None, *out_quant)] * (outs or n))


@pytest.mark.parametrize("t", [F32, F16, I32, Q8, S8])
def test_split_types(t):
    quant = (0.5, 1) if t in (Q8, S8) else (0.0, 0)
    a, b, c = split(t, [1, 2, 3, 4, 5, 6], 0, 3, quant=quant)
    np.testing.assert_array_equal(a, [1, 2])
    np.testing.assert_array_equal(b, [3, 4])
    np.testing.assert_array_equal(c, [5, 6])


def test_split_negative_axis():
    a, b = split(F32, [[1, 2], [3, 4]], -1, 2)
    np.testing.assert_array_equal(a, [[1], [3]])
    np.testing.assert_array_equal(b, [[2], [4]])


def test_split_invalid():
    assert_bad_data(split, F32, [1, 2, 3, 4], 0, 3)             # 4 not divisible by 3
    assert_bad_data(split, F32, [1, 2, 3, 4], 0, 2, outs=3)     # outputs != splits
    assert_bad_data(split, F32, [1, 2, 3, 4], 1, 2)             # axis out of range
    assert_bad_data(split, F32, [1, 2, 3, 4], 0, 0, outs=1)
    assert_bad_data(split, Q8, [1, 2], 0, 2, quant=(0.5, 0), out_quant=(0.5, 1))


# ---------------------------------------------------------------- PACK

def pack(t, axis, parts, quants=None, out_quant=(0.0, 0)):
    quants = quants or [out_quant] * len(parts)
    ins = [scalar(T.INT32, axis)] + [tensor(t, p, s, z) for p, (s, z) in zip(parts, quants)]
    return run_operation(Op.PACK, ins, [output(t, None, *out_quant)])[0]


def test_pack_axes():
    a, b, c = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]
    np.testing.assert_array_equal(pack(F32, 0, [a, b, c]), [a, b, c])
    np.testing.assert_array_equal(pack(F32, 1, [a, b, c]),
                                  [[[1, 2], [5, 6], [9, 10]], [[3, 4], [7, 8], [11, 12]]])
    np.testing.assert_array_equal(pack(F32, 2, [a, b, c]),
                                  [[[1, 5, 9], [2, 6, 10]], [[3, 7, 11], [4, 8, 12]]])


@pytest.mark.parametrize("t", [F16, I32, Q8, S8])
def test_pack_types(t):
    quant = (0.5, 2) if t in (Q8, S8) else (0.0, 0)
    out = pack(t, 0, [[1, 2], [3, 4]], out_quant=quant)
    np.testing.assert_array_equal(out, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(pack(t, 1, [[1, 2]], out_quant=quant), [[1], [2]])


def test_pack_invalid():
    assert_bad_data(pack, F32, 2, [[1, 2], [3, 4]])                 # axis range is [0, R + 1)
    assert_bad_data(pack, F32, -1, [[1, 2], [3, 4]])
    assert_bad_data(pack, F32, 0, [[1, 2], [3, 4, 5]])              # shapes differ
    assert_bad_data(pack, Q8, 0, [[1], [2]], [(0.5, 0), (0.5, 1)], (0.5, 0))
    assert_bad_data(pack, S8, 0, [[1], [2]], [(0.5, 0), (0.25, 0)], (0.5, 0))


# ---------------------------------------------------------------- SLICE

def slice_op(t, x, begin, size, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.SLICE, [tensor(t, x, *quant), const(I32, begin), const(I32, size)],
                         [output(t, None, *(out_quant or quant))])[0]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_slice_matches_list_slicing(rows, cols, data):
    x = [[10 * r + c for c in range(cols)] for r in range(rows)]
    b0, b1 = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))
    s0 = data.draw(st.sampled_from([-1] + list(range(1, rows - b0 + 1))))
    s1 = data.draw(st.sampled_from([-1] + list(range(1, cols - b1 + 1))))
    e0 = rows if s0 == -1 else b0 + s0
    e1 = cols if s1 == -1 else b1 + s1
    expected = [row[b1:e1] for row in x[b0:e0]]
    np.testing.assert_array_equal(slice_op(I32, x, [b0, b1], [s0, s1]), expected)


@pytest.mark.parametrize("t", [F32, F16, Q8, S8])
def test_slice_types(t):
    quant = (0.5, 4) if t in (Q8, S8) else (0.0, 0)
    out = slice_op(t, [[1, 2, 3], [4, 5, 6]], [1, 1], [1, -1], quant)
    np.testing.assert_array_equal(out, [[5, 6]])


def test_slice_invalid():
    x = [[1, 2, 3], [4, 5, 6]]
    assert_bad_data(slice_op, F32, x, [1, 2], [2, 1])       # 1 + 2 > 2
    assert_bad_data(slice_op, F32, x, [0, 4], [1, -1])      # begin beyond the dimension
    assert_bad_data(slice_op, F32, x, [-1, 0], [1, 1])
    assert_bad_data(slice_op, F32, x, [0, 0], [1, -2])
    assert_bad_data(slice_op, F32, x, [0], [1])             # begin/size length != rank
    assert_bad_data(slice_op, Q8, x, [0, 0], [1, 1], (0.5, 0), (0.5, 1))


# ---------------------------------------------------------------- STRIDED_SLICE

def strided(t, x, begin, end, strides, begin_mask=0, end_mask=0, shrink=0, quant=(0.0, 0), out_quant=None):
    ins = [tensor(t, x, *quant), const(I32, begin), const(I32, end), const(I32, strides),
           scalar(T.INT32, begin_mask), scalar(T.INT32, end_mask), scalar(T.INT32, shrink)]
    return run_operation(Op.STRIDED_SLICE, ins, [output(t, None, *(out_quant or quant))])[0]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(-8, 8), st.integers(-8, 8),
       st.integers(-3, 3).filter(lambda s: s != 0))
def test_strided_slice_1d_matches_python_slicing(n, begin, end, stride):
    x = list(range(100, 100 + n))
    expected = x[begin:end:stride]
    assume(expected)  # zero-sized model outputs are left to the runtime tests
    np.testing.assert_array_equal(strided(F32, x, [begin], [end], [stride]), expected)


def test_strided_slice_masks_and_negative_stride():
    x = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    # begin_mask on dim 0 and end_mask on dim 1: x[:2, 1:]
    np.testing.assert_array_equal(strided(F32, x, [2, 1], [2, 0], [1, 1], 1, 2), [[2, 3, 4], [6, 7, 8]])
    # negative strides with masks: x[::-1, ::-2]
    np.testing.assert_array_equal(strided(F32, x, [0, 0], [0, 0], [-1, -2], 3, 3),
                                  [[12, 10], [8, 6], [4, 2]])


def test_strided_slice_shrink_axis():
    x = [[1, 2, 3], [4, 5, 6]]
    out = strided(F32, x, [1, 0], [2, 3], [1, 1], shrink=1)
    np.testing.assert_array_equal(out, [4, 5, 6])
    out = strided(F32, x, [0, -1], [2, 3], [1, 1], shrink=2)
    np.testing.assert_array_equal(out, [3, 6])
    out = strided(F32, x, [1, 2], [2, 3], [1, 1], shrink=3)   # every dimension shrunk: shape [1]
    assert out.shape == (1,)
    assert out[0] == 6


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_strided_slice_types(t):
    quant = (0.5, 3) if t in (Q8, S8) else (0.0, 0)
    out = strided(t, [1, 2, 3, 4, 5], [0], [5], [2], quant=quant)
    np.testing.assert_array_equal(out, [1, 3, 5])


def test_strided_slice_invalid():
    x = [[1.0, 2.0], [3.0, 4.0]]
    assert_bad_data(strided, F32, x, [0, 0], [2, 2], [1, 0])              # zero stride
    assert_bad_data(strided, F32, x, [0, 0], [2, 2], [1, 1], shrink=1)    # shrinking a size-2 slice
    assert_bad_data(strided, F32, x, [1, 0], [0, 2], [-1, 1], shrink=1)   # shrink with negative stride
    assert_bad_data(strided, F32, x, [0], [2], [1])                       # lengths != rank
    assert_bad_data(strided, F32, np.zeros((1, 1, 1, 1, 1), np.float32), [0] * 5, [1] * 5, [1] * 5)
    assert_bad_data(strided, Q8, [1, 2], [0], [2], [1], quant=(0.5, 0), out_quant=(0.25, 0))


# ---------------------------------------------------------------- GATHER

def gather(t, x, axis, indices, quant=(0.0, 0), out_quant=None, constant=True):
    idx = const(I32, indices) if constant else tensor(I32, indices)
    return run_operation(Op.GATHER, [tensor(t, x, *quant), scalar(T.INT32, axis), idx],
                         [output(t, None, *(out_quant or quant))])[0]


def test_gather_vector_and_matrix_indices():
    x = [[1, 2], [3, 4], [5, 6]]
    np.testing.assert_array_equal(gather(F32, x, 0, [2, 0, 2]), [[5, 6], [1, 2], [5, 6]])
    out = gather(F32, x, 1, [[1], [0]])
    np.testing.assert_array_equal(out, [[[2], [1]], [[4], [3]], [[6], [5]]])
    np.testing.assert_array_equal(gather(F32, x, -1, [[1], [0]]), out)


@pytest.mark.parametrize("t", [F16, I32, Q8, S8])
def test_gather_types(t):
    quant = (0.5, 1) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(gather(t, [7, 8, 9], 0, [1, 1, 0], quant), [8, 8, 7])


def test_gather_invalid():
    x = [[1, 2], [3, 4]]
    assert_bad_data(gather, F32, x, 2, [0])
    assert_bad_data(gather, F32, x, 0, [2])         # constant index out of range: compilation fails
    assert_bad_data(gather, F32, x, 0, [-1])
    assert_fails(ResultCode.OP_FAILED, gather, F32, x, 0, [0, 5], constant=False)  # found at execution
    assert_bad_data(gather, Q8, [1, 2], 0, [0], (0.5, 0), (0.5, 2))


# ---------------------------------------------------------------- TILE

def tile(t, x, multiples, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.TILE, [tensor(t, x, *quant), const(I32, multiples)],
                         [output(t, None, *(out_quant or quant))])[0]


def test_tile_2d():
    x = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(tile(F32, x, [2, 1]), [[1, 2], [3, 4], [1, 2], [3, 4]])
    np.testing.assert_array_equal(tile(F32, x, [1, 2]), [[1, 2, 1, 2], [3, 4, 3, 4]])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=4), st.integers(1, 4))
def test_tile_1d_repeats_list(x, m):
    np.testing.assert_array_equal(tile(I32, x, [m]), x * m)


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_tile_types(t):
    quant = (0.5, 1) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(tile(t, [1, 2], [3], quant), [1, 2, 1, 2, 1, 2])


def test_tile_invalid():
    assert_bad_data(tile, F32, [[1, 2]], [2])        # multiples length != rank
    assert_bad_data(tile, F32, [1, 2], [-1])
    assert_bad_data(tile, Q8, [1, 2], [1], (0.5, 0), (0.5, 3))


# ---------------------------------------------------------------- REVERSE

def reverse(t, x, axis, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.REVERSE, [tensor(t, x, *quant), const(I32, axis)],
                         [output(t, None, *(out_quant or quant))])[0]


def test_reverse_2d():
    x = [[1, 2, 3], [4, 5, 6]]
    np.testing.assert_array_equal(reverse(F32, x, [0]), [[4, 5, 6], [1, 2, 3]])
    np.testing.assert_array_equal(reverse(F32, x, [1]), [[3, 2, 1], [6, 5, 4]])


@pytest.mark.parametrize("t", [F16, I32, Q8, S8])
def test_reverse_types(t):
    quant = (0.5, 0) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(reverse(t, [1, 2, 3], [0], quant), [3, 2, 1])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=8), st.data())
def test_reverse_twice_is_identity(dims, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    x = np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims)
    once = reverse(I32, x, [axis])
    if dims[axis] > 1:
        assert not np.array_equal(once, x)
    np.testing.assert_array_equal(reverse(I32, once, [axis]), x)


def test_reverse_invalid():
    assert_bad_data(reverse, F32, [[1, 2]], [2])
    assert_bad_data(reverse, F32, [[1, 2]], [-1])
    assert_bad_data(reverse, F32, [[1, 2]], [0, 1])          # the axis tensor has one entry
    assert_bad_data(reverse, F32, np.zeros((1,) * 9, np.float32), [0])
    assert_bad_data(reverse, Q8, [1, 2], [0], (0.5, 0), (0.5, 1))


# ---------------------------------------------------------------- feature levels

@pytest.mark.parametrize("code, ins, outs, level", [
    (Op.CONCATENATION, [F32, F32, T.INT32], [F32], 27),
    (Op.CONCATENATION, [F16, T.INT32], [F16], 29),
    (Op.CONCATENATION, [S8, S8, S8, T.INT32], [S8], 30),
    (Op.SPLIT, [I32, T.INT32, T.INT32], [I32, I32, I32], 29),
    (Op.PACK, [T.INT32, Q8, Q8], [Q8], 1000006),
    (Op.SLICE, [S8, I32, I32], [S8], 30),
    (Op.STRIDED_SLICE, [Q8, I32, I32, I32, T.INT32, T.INT32, T.INT32], [Q8], 28),
    (Op.GATHER, [I32, T.INT32, I32], [I32], 29),
    (Op.TILE, [F16, I32], [F16], 29),
    (Op.REVERSE, [I32, I32], [I32], 1000007),
])
def test_signature_levels(code, ins, outs, level):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs).level == level


@pytest.mark.parametrize("code, ins, outs", [
    (Op.CONCATENATION, [I32, I32, T.INT32], [I32]),
    (Op.CONCATENATION, [F32, F16, T.INT32], [F32]),
    (Op.SPLIT, [F32, T.INT32, T.INT32], [F32, F16]),
    (Op.STRIDED_SLICE, [I32, I32, I32, I32, T.INT32, T.INT32, T.INT32], [I32]),
    (Op.PACK, [Q8, Q8], [Q8]),
])
def test_signature_rejected(code, ins, outs):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs) is None


# ---------------------------------------------------------------- zero-sized inputs (called directly)

def _arg(t, value, scale=0.0, zp=0):
    from nnapi_ref.ops.base import Arg
    from nnapi_ref.types import DTYPES
    value = np.asarray(value, DTYPES[t])
    return Arg(t, value.shape, scale, zp, None, value)


def test_concat_with_zero_sized_input():
    from nnapi_ref import ops
    from nnapi_ref.ops.base import Arg, Call
    x = np.array([[1, 2], [3, 4]], np.float32)
    call = Call([_arg(F32, np.zeros((0, 2))), _arg(F32, x), _arg(T.INT32, 0)], [Arg(F32, None)])
    impl = ops.get(Op.CONCATENATION)
    assert impl.infer(call) == [(2, 2)]
    np.testing.assert_array_equal(impl.execute(call)[0], x)
    q = Call([_arg(Q8, np.zeros((0, 2)), 0.5, 1), _arg(Q8, [[2, 4]], 0.5, 0), _arg(T.INT32, 0)],
             [Arg(Q8, None, 0.25, 0)])
    np.testing.assert_array_equal(impl.execute(q)[0], [[4, 8]])


def test_slice_of_zero_sized_input():
    from nnapi_ref import ops
    from nnapi_ref.ops.base import Arg, Call
    call = Call([_arg(F32, np.zeros((0, 3))), _arg(I32, [0, 1]), _arg(I32, [-1, 2])], [Arg(F32, None)])
    assert ops.get(Op.SLICE).infer(call) == [(0, 2)]
