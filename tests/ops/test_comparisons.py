"""EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL, LOGICAL_AND, LOGICAL_OR,
LOGICAL_NOT and SELECT. Expected values are worked out by hand or with Python's operators on
the real values."""
from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import output, run_operation, tensor

from .support import assert_bad_data

Q8 = T.TENSOR_QUANT8_ASYMM
S8 = T.TENSOR_QUANT8_ASYMM_SIGNED
F32 = T.TENSOR_FLOAT32
F16 = T.TENSOR_FLOAT16
I32 = T.TENSOR_INT32
B8 = T.TENSOR_BOOL8

COMPARISONS = {
    Op.EQUAL: operator.eq, Op.NOT_EQUAL: operator.ne, Op.GREATER: operator.gt,
    Op.GREATER_EQUAL: operator.ge, Op.LESS: operator.lt, Op.LESS_EQUAL: operator.le,
}


def compare(code, t, a, b, sa=0.0, za=0, sb=0.0, zb=0, out_type=B8):
    return run_operation(code, [tensor(t, a, sa, za), tensor(t, b, sb, zb)], [output(out_type)])[0]


def expected(code, a, b):
    f = COMPARISONS[code]
    a, b = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return np.vectorize(lambda x, y: bool(f(x, y)), otypes=[bool])(a, b)


@pytest.mark.parametrize("code", list(COMPARISONS))
@pytest.mark.parametrize("t", [F32, F16, I32])
def test_comparisons_plain_types_with_broadcast(code, t):
    a = [[1, 2, 3], [4, 5, 6]]
    b = [3, 2, 7]
    out = compare(code, t, a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, expected(code, a, b))


@pytest.mark.parametrize("code", list(COMPARISONS))
def test_comparisons_bool8(code):
    a = [False, False, True, True]
    b = [False, True, False, True]
    np.testing.assert_array_equal(compare(code, B8, a, b), expected(code, [0, 0, 1, 1], [0, 1, 0, 1]))


@pytest.mark.parametrize("code", list(COMPARISONS))
def test_comparisons_quant8_compare_real_values(code):
    # a: scale 1.0, zp 128 -> 2, -1, 0 ; b: scale 0.5, zp 0 -> 2, 0.5, 0 (raw values differ)
    a, b = [130, 127, 128], [4, 1, 0]
    out = compare(code, Q8, a, b, sa=1.0, za=128, sb=0.5, zb=0)
    np.testing.assert_array_equal(out, expected(code, [2.0, -1.0, 0.0], [2.0, 0.5, 0.0]))
    # signed: a: scale 0.25, zp -10 -> (-2+10)*.25 = 2 ; b: scale 2, zp 0 -> 1*2 = 2
    out = compare(code, S8, [-2, -10], [1, 1], sa=0.25, za=-10, sb=2.0, zb=0)
    np.testing.assert_array_equal(out, expected(code, [2.0, 0.0], [2.0, 2.0]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=1, max_size=8), st.data())
def test_equal_and_not_equal_are_complements(a, data):
    b = data.draw(st.lists(st.integers(0, 255), min_size=len(a), max_size=len(a)))
    eq = compare(Op.EQUAL, Q8, a, b, sa=0.5, za=3, sb=0.25, zb=9)
    ne = compare(Op.NOT_EQUAL, Q8, a, b, sa=0.5, za=3, sb=0.25, zb=9)
    np.testing.assert_array_equal(eq, ~ne)
    lt = compare(Op.LESS, Q8, a, b, sa=0.5, za=3, sb=0.25, zb=9)
    gt = compare(Op.GREATER, Q8, b, a, sa=0.25, za=9, sb=0.5, zb=3)
    np.testing.assert_array_equal(lt, gt)
    np.testing.assert_array_equal(eq, (np.array(a) - 3) * 0.5 == (np.array(b) - 9) * 0.25)


def test_comparison_validation():
    assert_bad_data(compare, Op.LESS, F32, [1.0, 2.0], [1.0, 2.0, 3.0])          # not broadcastable
    assert_bad_data(compare, Op.EQUAL, F32, [1.0], [1.0], out_type=F32)           # output must be BOOL8
    with pytest.raises(NnapiError) as info:                                      # mixed input types
        run_operation(Op.GREATER, [tensor(F32, [1.0]), tensor(I32, [1])], [output(B8)])
    assert info.value.code == ResultCode.BAD_DATA


# ---------------------------------------------------------------- logical

def test_logical_and_or_broadcast():
    a = [[True, False], [True, True]]
    b = [False, True]
    land = run_operation(Op.LOGICAL_AND, [tensor(B8, a), tensor(B8, b)], [output(B8)])[0]
    lor = run_operation(Op.LOGICAL_OR, [tensor(B8, a), tensor(B8, b)], [output(B8)])[0]
    np.testing.assert_array_equal(land, [[False, False], [False, True]])
    np.testing.assert_array_equal(lor, [[True, True], [True, True]])


def test_logical_not():
    out = run_operation(Op.LOGICAL_NOT, [tensor(B8, [[True, False, False]])], [output(B8)])[0]
    np.testing.assert_array_equal(out, [[False, True, True]])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=10), st.data())
def test_de_morgan(a, data):
    b = data.draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
    land = run_operation(Op.LOGICAL_AND, [tensor(B8, a), tensor(B8, b)], [output(B8)])[0]
    na = run_operation(Op.LOGICAL_NOT, [tensor(B8, a)], [output(B8)])[0]
    nb = run_operation(Op.LOGICAL_NOT, [tensor(B8, b)], [output(B8)])[0]
    nor = run_operation(Op.LOGICAL_OR, [tensor(B8, na), tensor(B8, nb)], [output(B8)])[0]
    np.testing.assert_array_equal(land, ~nor)
    np.testing.assert_array_equal(land, [x and y for x, y in zip(a, b)])


def test_logical_validation():
    assert_bad_data(run_operation, Op.LOGICAL_AND, [tensor(B8, [True, False]), tensor(B8, [True] * 3)], [output(B8)])
    assert_bad_data(run_operation, Op.LOGICAL_OR, [tensor(I32, [1]), tensor(I32, [0])], [output(B8)])
    assert_bad_data(run_operation, Op.LOGICAL_NOT, [tensor(F32, [1.0])], [output(F32)])


# ---------------------------------------------------------------- SELECT

@pytest.mark.parametrize("t", [F32, F16, I32])
def test_select_plain_types(t):
    cond = [[True, False, True], [False, False, True]]
    a = [[1, 2, 3], [4, 5, 6]]
    b = [[-1, -2, -3], [-4, -5, -6]]
    out = run_operation(Op.SELECT, [tensor(B8, cond), tensor(t, a), tensor(t, b)], [output(t)])[0]
    np.testing.assert_array_equal(out, [[1, -2, 3], [-4, -5, 6]])


def test_select_quant8_requantizes_to_output():
    # a: scale 1, zp 0 -> 10, 20 ; b: scale 0.5, zp 100 -> (90-100)*.5=-5, (130-100)*.5=15
    # out: scale 2, zp 50 -> a: 55, 60 ; b: -2.5 -> -3 (half away) -> 47, 7.5 -> 8 -> 58
    args = [tensor(B8, [True, False]), tensor(Q8, [10, 20], 1.0, 0), tensor(Q8, [90, 130], 0.5, 100)]
    out = run_operation(Op.SELECT, args, [output(Q8, None, 2.0, 50)])[0]
    np.testing.assert_array_equal(out, [55, 58])
    args = [tensor(B8, [False, True]), tensor(S8, [10, 127], 1.0, 0), tensor(S8, [-128, 0], 0.5, 100)]
    out = run_operation(Op.SELECT, args, [output(S8, None, 0.5, 0)])[0]
    np.testing.assert_array_equal(out, [-128, 127])  # (-128-100)*.5/.5 = -228 -> -128 ; 127/.5 -> 127


def test_select_validation():
    # condition, input1 and input2 must all have the same shape (no broadcasting)
    assert_bad_data(run_operation, Op.SELECT, [tensor(B8, [True]), tensor(F32, [1.0, 2.0]), tensor(F32, [1.0, 2.0])],
                    [output(F32)])
    assert_bad_data(run_operation, Op.SELECT, [tensor(B8, [True, False]), tensor(F32, [1.0, 2.0]),
                                               tensor(F32, [[1.0, 2.0]])], [output(F32)])
    assert_bad_data(run_operation, Op.SELECT, [tensor(I32, [1, 0]), tensor(F32, [1.0, 2.0]), tensor(F32, [1.0, 2.0])],
                    [output(F32)])
    assert_bad_data(run_operation, Op.SELECT, [tensor(B8, [True]), tensor(B8, [True]), tensor(B8, [False])],
                    [output(B8)])
