"""PAD, PAD_V2, MIRROR_PAD.

Expected values are written out by hand; a property checks that cutting the padding off again
(Python list slicing) gives the input back and that the border holds the pad value.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, scalar, tensor

from .support import assert_bad_data, const

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def pad(t, x, paddings, quant=(0.0, 0), out_quant=None, constant=True):
    p = const(I32, paddings) if constant else tensor(I32, paddings)
    return run_operation(Op.PAD, [tensor(t, x, *quant), p], [output(t, None, *(out_quant or quant))])[0]


def pad_v2(t, x, paddings, value_type, value, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.PAD_V2, [tensor(t, x, *quant), const(I32, paddings), scalar(value_type, value)],
                         [output(t, None, *(out_quant or quant))])[0]


def mirror(t, x, paddings, mode, quant=(0.0, 0), out_quant=None):
    return run_operation(Op.MIRROR_PAD, [tensor(t, x, *quant), const(I32, paddings), scalar(T.INT32, mode)],
                         [output(t, None, *(out_quant or quant))])[0]


# ---------------------------------------------------------------- PAD

def test_pad_float32():
    out = pad(F32, [[1, 2], [3, 4]], [[1, 0], [0, 2]])
    np.testing.assert_array_equal(out, [[0, 0, 0, 0], [1, 2, 0, 0], [3, 4, 0, 0]])
    assert out.dtype == np.float32


def test_pad_float16_and_paddings_fed_at_execution():
    out = pad(F16, [1.5], [[2, 1]], constant=False)
    np.testing.assert_array_equal(out, [0, 0, 1.5, 0])


@pytest.mark.parametrize("t, zp", [(Q8, 128), (Q8, 0), (S8, -5)])
def test_pad_quantized_uses_zero_point(t, zp):
    out = pad(t, [[10, 20]], [[0, 1], [1, 1]], (0.5, zp))
    np.testing.assert_array_equal(out, [[zp, 10, 20, zp], [zp, zp, zp, zp]])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data())
def test_pad_border_and_interior(dims, data):
    pads = [[data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))] for _ in dims]
    x = np.arange(1, int(np.prod(dims)) + 1, dtype=np.float32).reshape(dims)
    out = pad(F32, x, pads)
    assert out.shape == tuple(b + d + a for d, (b, a) in zip(dims, pads))
    interior = tuple(slice(b, b + d) for d, (b, _) in zip(dims, pads))
    np.testing.assert_array_equal(out[interior], x)
    assert out.sum() == x.sum()        # everything else is zero (the input is positive)


def test_pad_invalid():
    x = [[1.0, 2.0]]
    assert_bad_data(pad, F32, x, [[0, 0], [-1, 0]])
    assert_bad_data(pad, F32, x, [[0, 0]])                   # one row per dimension
    assert_bad_data(pad, F32, x, [[0, 0, 0], [0, 0, 0]])     # two columns
    assert_bad_data(pad, F32, x, [0, 0, 0, 0])               # a 2-D tensor
    assert_bad_data(pad, F32, np.zeros((1, 1, 1, 1, 1), np.float32), [[0, 0]] * 5)
    assert_bad_data(pad, Q8, [1], [[1, 1]], (0.5, 3), (0.5, 4))


# ---------------------------------------------------------------- PAD_V2

def test_pad_v2_float():
    out = pad_v2(F32, [[1, 2]], [[1, 0], [0, 1]], T.FLOAT32, -7.5)
    np.testing.assert_array_equal(out, [[-7.5, -7.5, -7.5], [1, 2, -7.5]])
    out = pad_v2(F16, [3], [[1, 1]], T.FLOAT16, 0.25)
    np.testing.assert_array_equal(out, [0.25, 3, 0.25])


@pytest.mark.parametrize("t, value", [(Q8, 255), (Q8, 9), (S8, -128), (S8, 100)])
def test_pad_v2_quantized(t, value):
    out = pad_v2(t, [5, 6], [[2, 0]], T.INT32, value, (0.5, 3))
    np.testing.assert_array_equal(out, [value, value, 5, 6])


def test_pad_v2_invalid():
    assert_bad_data(pad_v2, Q8, [1], [[1, 1]], T.INT32, 256, (0.5, 0))
    assert_bad_data(pad_v2, S8, [1], [[1, 1]], T.INT32, -129, (0.5, 0))
    assert_bad_data(pad_v2, F32, [1.0], [[-1, 1]], T.FLOAT32, 0.0)
    assert_bad_data(pad_v2, F32, [1.0], [[1, 1]], T.FLOAT16, 0.0)     # the value's type must match
    assert_bad_data(pad_v2, Q8, [1], [[1, 1]], T.INT32, 0, (0.5, 0), (0.5, 1))


# ---------------------------------------------------------------- MIRROR_PAD

def test_mirror_pad_reflect_1d():
    np.testing.assert_array_equal(mirror(F32, [1, 2, 3], [[2, 2]], 0), [3, 2, 1, 2, 3, 2, 1])


def test_mirror_pad_symmetric_1d():
    np.testing.assert_array_equal(mirror(F32, [1, 2, 3], [[3, 1]], 1), [3, 2, 1, 1, 2, 3, 3])


def test_mirror_pad_2d():
    x = [[1, 2, 3], [4, 5, 6]]
    np.testing.assert_array_equal(mirror(I32, x, [[1, 1], [2, 0]], 0),
                                  [[6, 5, 4, 5, 6], [3, 2, 1, 2, 3], [6, 5, 4, 5, 6], [3, 2, 1, 2, 3]])
    np.testing.assert_array_equal(mirror(I32, x, [[0, 2], [1, 1]], 1),
                                  [[1, 1, 2, 3, 3], [4, 4, 5, 6, 6], [4, 4, 5, 6, 6], [1, 1, 2, 3, 3]])


@pytest.mark.parametrize("t", [F16, Q8, S8])
def test_mirror_pad_types(t):
    quant = (0.5, 7) if t in (Q8, S8) else (0.0, 0)
    np.testing.assert_array_equal(mirror(t, [1, 2], [[1, 1]], 0, quant), [2, 1, 2, 1])


def test_mirror_pad_invalid():
    assert_bad_data(mirror, F32, [1, 2, 3], [[3, 0]], 0)     # REFLECT needs padding < size
    assert_bad_data(mirror, F32, [1, 2, 3], [[0, 4]], 1)     # SYMMETRIC needs padding <= size
    assert_bad_data(mirror, F32, [1, 2, 3], [[-1, 0]], 1)
    assert_bad_data(mirror, F32, [1, 2, 3], [[1, 1]], 2)     # mode
    assert_bad_data(mirror, F32, [1, 2, 3], [[1, 1], [1, 1]], 0)
    assert_bad_data(mirror, Q8, [1, 2], [[1, 1]], 0, (0.5, 0), (0.5, 1))


@pytest.mark.parametrize("code, ins, outs, level", [
    (Op.PAD, [F32, I32], [F32], 28),
    (Op.PAD, [Q8, I32], [Q8], 28),
    (Op.PAD, [F16, I32], [F16], 29),
    (Op.PAD, [S8, I32], [S8], 30),
    (Op.PAD_V2, [Q8, I32, T.INT32], [Q8], 29),
    (Op.PAD_V2, [S8, I32, T.INT32], [S8], 30),
    (Op.MIRROR_PAD, [I32, I32, T.INT32], [I32], 1000007),
])
def test_signature_levels(code, ins, outs, level):
    from nnapi_ref import ops
    assert ops.get(code).match(ins, outs).level == level
