"""FULLY_CONNECTED, BATCH_MATMUL.

Expected values: hand-computed cases, float64 numpy matmuls, and exact integer products
requantized with the shared scalar fixed-point helpers of nnapi_ref.ops.requantization.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref.ops.requantization import multiply_by_quantized_multiplier, quantize_multiplier
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import compile_operation, execute_operation, output, run_operation, scalar, tensor

from .support import assert_bad_data as bad

F32, F16, Q8, S8, I32, INT, BOOL = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM,
                                    T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32, T.INT32, T.BOOL)
RNG = np.random.default_rng(99)


def fc(x, w, b, fuse=0, t=F32, q=None, bias_scale=None):
    sx, zx, sw, zw, so, zo = q or (0.0, 0, 0.0, 0, 0.0, 0)
    bt = I32 if t in (Q8, S8) else t
    bs = bias_scale if bias_scale is not None else (float(np.float32(sx) * np.float32(sw)) if q else 0.0)
    return run_operation(Op.FULLY_CONNECTED, [tensor(t, x, sx, zx), tensor(t, w, sw, zw), tensor(bt, b, bs),
                                              scalar(INT, fuse)], [output(t, None, so, zo)])[0]


def requant(acc, real, zp, lo, hi):
    m, s = quantize_multiplier(real)
    return np.clip(multiply_by_quantized_multiplier(acc, m, s) + zp, lo, hi)


def test_fc_hand_computed():
    out = fc([[1, 2, 3]], [[1, 0, -1], [2, 2, 2]], [10, -100], fuse=1)
    np.testing.assert_array_equal(out, [[8, 0]])


def test_fc_flattens_input_and_matches_numpy():
    x, w, b = RNG.standard_normal((2, 3, 2, 4), np.float32), RNG.standard_normal((5, 8), np.float32), \
        RNG.standard_normal(5).astype(np.float32)
    out = fc(x, w, b)
    assert out.shape == (6, 5)
    expected = x.reshape(6, 8).astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_fc_large_float32_path():
    x, w, b = RNG.standard_normal((64, 512), np.float32), RNG.standard_normal((300, 512), np.float32), \
        RNG.standard_normal(300).astype(np.float32)
    expected = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(fc(x, w, b), expected, rtol=1e-4, atol=1e-4)


def test_fc_float16():
    x, w, b = (RNG.uniform(-1, 1, s).astype(np.float16) for s in ((2, 6), (3, 6), (3,)))
    out = fc(x, w, b, t=F16)
    assert out.dtype == np.float16
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(out, ref, rtol=5 * 2 ** -10, atol=5 * 2 ** -10)


@pytest.mark.parametrize("t,lo,hi", [(Q8, 0, 255), (S8, -128, 127)])
@pytest.mark.parametrize("k", [7, 1000])  # 1000 * 255 * 255 exceeds float32's exact range
def test_fc_quant_matches_exact_reference(t, lo, hi, k):
    dt = np.uint8 if t == Q8 else np.int8
    x = RNG.integers(lo, hi + 1, (3, k))
    w = RNG.integers(lo, hi + 1, (4, k))
    b = RNG.integers(-5000, 5000, 4)
    q = (0.25, lo + 10, 0.125, lo + 200, 8.0 if k > 100 else 0.75, lo + 60)
    out = fc(x.astype(dt), w.astype(dt), b, q=q, t=t, fuse=3)
    acc = (x - q[1]) @ (w - q[3]).T + b
    real = float(np.float32(0.25) * np.float32(0.125)) / q[4]
    act_hi = min(hi, q[5] + int(np.round(6 / q[4])))
    np.testing.assert_array_equal(out, requant(acc, real, q[5], max(lo, q[5]), act_hi))


def test_fc_validation():
    x, w, b = np.ones((2, 4), np.float32), np.ones((3, 4), np.float32), np.ones(3, np.float32)
    bad(fc, np.ones(4, np.float32), w, b)                      # input rank 1
    bad(fc, np.ones((1, 1, 1, 1, 4), np.float32), w, b)        # input rank 5
    bad(fc, x, np.ones((3, 4, 1), np.float32), b)              # weights rank 3
    bad(fc, np.ones((2, 5), np.float32), w, b)                 # 10 elements are not rows of 4
    bad(fc, x, w, np.ones(2, np.float32))                      # bias size
    bad(fc, x, w, b, fuse=9)                                   # fused activation
    q = (0.5, 0, 0.5, 0, 1.0, 0)
    bad(fc, x.astype(np.uint8), w.astype(np.uint8), [0, 0, 0], t=Q8, q=q, bias_scale=0.5)  # bias scale


def bmm(a, b, adj_x=False, adj_y=False, t=F32, q=None):
    sa, za, sb, zb, so, zo = q or (0.0, 0, 0.0, 0, 0.0, 0)
    return run_operation(Op.BATCH_MATMUL, [tensor(t, a, sa, za), tensor(t, b, sb, zb), scalar(BOOL, adj_x),
                                           scalar(BOOL, adj_y)], [output(t, None, so, zo)])[0]


def test_batch_matmul_hand_computed():
    out = bmm([[1, 2], [3, 4]], [[5, 6], [7, 8]])
    np.testing.assert_array_equal(out, [[19, 22], [43, 50]])


@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_adjoints(adj_x, adj_y):
    a = RNG.standard_normal((2, 3, 4, 5), np.float32)
    b = RNG.standard_normal((2, 3, 5, 6), np.float32)
    aa = a.swapaxes(-1, -2).copy() if adj_x else a
    bb = b.swapaxes(-1, -2).copy() if adj_y else b
    out = bmm(aa, bb, adj_x, adj_y)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_batch_matmul_int32_and_float16():
    a, b = RNG.integers(-50, 50, (4, 3)), RNG.integers(-50, 50, (3, 2))
    np.testing.assert_array_equal(bmm(a, b, t=I32), a @ b)
    af, bf = a.astype(np.float16) / 8, b.astype(np.float16) / 8
    np.testing.assert_allclose(bmm(af, bf, t=F16), af.astype(np.float64) @ bf.astype(np.float64), rtol=5e-3)


def test_batch_matmul_quant_signed():
    a, b = RNG.integers(-128, 128, (2, 3, 8)), RNG.integers(-128, 128, (2, 8, 4))
    q = (0.5, -3, 0.25, 5, 20.0, 2)
    out = bmm(a.astype(np.int8), b.astype(np.int8), t=S8, q=q)
    acc = (a + 3) @ (b - 5)
    np.testing.assert_array_equal(out, requant(acc, 0.125 / 20.0, 2, -128, 127))


def test_batch_matmul_validation():
    a = np.ones((2, 3), np.float32)
    bad(bmm, a, np.ones((4, 2), np.float32))                  # 3 != 4
    bad(bmm, a, np.ones((1, 3, 2), np.float32))               # ranks differ
    bad(bmm, np.ones(3, np.float32), np.ones(3, np.float32))  # rank 1
    bad(bmm, a, np.ones((2, 3), np.float32), adj_x=False, adj_y=False)


def test_batch_matmul_batches_must_be_equal():
    """NeuralNetworksTypes.h: the two inputs "have the same batch size" (no broadcasting)."""
    a, b = np.ones((2, 2, 3), np.float32), np.ones((1, 3, 2), np.float32)
    bad(bmm, a, b)                                                     # a batch of 1 against 2
    bad(bmm, b.swapaxes(-1, -2), a.swapaxes(-1, -2))
    bad(bmm, np.ones((2, 3, 2, 3), np.float32), np.ones((3, 2, 3, 2), np.float32))
    np.testing.assert_array_equal(bmm(a, np.ones((2, 3, 2), np.float32)), np.full((2, 2, 2), 3))


# ---- prepared (cached) paths: a compiled model run twice, weights constant or fed ----

def _fc_compiled_twice(ins, out):
    compilation = compile_operation(Op.FULLY_CONNECTED, ins, [out])
    return [execute_operation(compilation, ins, [out])[0] for _ in range(2)]


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("t,fuse,zo", [(Q8, 3, 0), (Q8, 0, 128), (S8, 1, -128), (S8, 0, 5)])
def test_fc_quant_cached(const, t, fuse, zo):
    lo, hi = (0, 255) if t == Q8 else (-128, 127)
    dt = np.uint8 if t == Q8 else np.int8
    x = RNG.integers(lo, hi + 1, (5, 300))
    w = RNG.integers(lo, hi + 1, (40, 300))
    b = RNG.integers(-5000, 5000, 40)
    sx, zx, sw, zw, so = 0.05, lo + 70, 0.01, lo + 130, 0.4
    ins = [tensor(t, x.astype(dt), sx, zx), tensor(t, w.astype(dt), sw, zw, as_input=not const),
           tensor(I32, b, float(np.float32(sx) * np.float32(sw)), as_input=not const), scalar(INT, fuse)]
    acc = (x - zx) @ (w - zw).T + b
    real = float(np.float32(sx) * np.float32(sw)) / float(np.float32(so))
    act_lo = lo if fuse == 0 else max(lo, zo)
    act_hi = hi if fuse != 3 else min(hi, zo + 15)
    expected = requant(acc, real, zo, act_lo, act_hi)
    for result in _fc_compiled_twice(ins, output(t, (5, 40), so, zo)):
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("shape", [(2, 30), (3, 600)])  # float64 and float32 weight paths
def test_fc_float_cached(const, shape):
    units, k = shape[0] * 7, shape[1]
    x = RNG.uniform(-1, 1, (4, k)).astype(np.float32)
    w = RNG.uniform(-1, 1, (units, k)).astype(np.float32)
    b = RNG.uniform(-1, 1, units).astype(np.float32)
    ins = [tensor(F32, x), tensor(F32, w, as_input=not const), tensor(F32, b, as_input=not const), scalar(INT, 1)]
    expected = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    first, second = _fc_compiled_twice(ins, output(F32, (4, units)))
    np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(second, first)
