"""CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D.

Expected values come from hand-worked cases, properties (a one-hot kernel shifts, a 1x1
convolution is a matmul, NCHW is NHWC transposed), scipy.signal.correlate, and a naive
explicit-loop convolution written here (float64, or exact integers requantized with the shared
scalar fixed-point helpers of nnapi_ref.ops.requantization).
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import requantization
from nnapi_ref.ops.requantization import multiply_by_quantized_multiplier, quantize_multiplier
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import (compile_operation, execute_operation, omitted, output, run_operation, scalar,
                                      tensor)

from .support import assert_bad_data as bad

F32, F16, Q8, S8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
PC, I32, INT, BOOL = T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32, T.INT32, T.BOOL
SAME, VALID = 1, 2
RNG = np.random.default_rng(1234)


# ---------------------------------------------------------------------------------------------
# Naive references (explicit loops, NHWC)
# ---------------------------------------------------------------------------------------------

def naive_conv(x, w, b, pads, strides, dil=(1, 1), groups=1, depth_mult=None):
    """x (N,H,W,C), w (O,KH,KW,C/groups) or depthwise (1,KH,KW,C*m); pads (l, r, t, b); float64
    or exact int64 sums, plus bias."""
    n, h, wd, c = x.shape
    left, right, top, bottom = pads
    sw, sh = strides
    dw, dh = dil
    if depth_mult is not None:
        kh, kw, o = w.shape[1], w.shape[2], w.shape[3]
    else:
        o, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    oh = (h - ((kh - 1) * dh + 1) + sh + top + bottom) // sh
    ow = (wd - ((kw - 1) * dw + 1) + sw + left + right) // sw
    out = np.zeros((n, oh, ow, o), dtype=np.result_type(x, w, np.int64) if x.dtype.kind == "i" else np.float64)
    for bi in range(n):
        for y in range(oh):
            for xx in range(ow):
                for oc in range(o):
                    s = 0
                    for i in range(kh):
                        for j in range(kw):
                            iy, ix = y * sh - top + i * dh, xx * sw - left + j * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                if depth_mult is not None:
                                    s += x[bi, iy, ix, oc // depth_mult] * w[0, i, j, oc]
                                else:
                                    cg = c // groups
                                    g = oc // (o // groups)
                                    s += np.dot(x[bi, iy, ix, g * cg:(g + 1) * cg], w[oc, i, j, :])
                    out[bi, y, xx, oc] = s + b[oc]
    return out


def naive_transpose_conv(x, w, b, pads, strides, out_hw):
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    left, _, top, _ = pads
    sw, sh = strides
    oh, ow = out_hw
    out = np.zeros((n, oh, ow, o), np.int64 if x.dtype.kind == "i" else np.float64)
    for bi in range(n):
        for y in range(h):
            for xx in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        oy, ox = y * sh - top + i, xx * sw - left + j
                        if 0 <= oy < oh and 0 <= ox < ow:
                            out[bi, oy, ox, :] += w[:, i, j, :] @ x[bi, y, xx, :]
    return out + b


def requant_ref(acc, real, zp, lo, hi):
    """Requantize exact int64 accumulators with the shared scalar helper (per channel if ``real``
    is a sequence)."""
    reals = np.broadcast_to(np.asarray(real, np.float64), (acc.shape[-1],))
    out = np.empty(acc.shape, np.int64)
    for ch in range(acc.shape[-1]):
        m, s = quantize_multiplier(float(reals[ch]))
        out[..., ch] = multiply_by_quantized_multiplier(acc[..., ch], m, s)
    return np.clip(out + zp, lo, hi)


def same_pads(size, k, s, d=1):
    eff = (k - 1) * d + 1
    outs = (size + s - 1) // s
    total = max((outs - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


# ---------------------------------------------------------------------------------------------
# Runners
# ---------------------------------------------------------------------------------------------

def conv(x, w, b, pads=(0, 0, 0, 0), strides=(1, 1), fuse=0, t=F32, implicit=None, nchw=None, dil=None,
         q=None, code=Op.CONV_2D, extra=(), wtype=None, channel_scales=None, channel_dim=0, out_type=None):
    """Run a convolution with explicit (pads) or implicit (implicit=SAME/VALID) padding.
    q = (sx, zx, sw, zw, so, zo) for quantized types."""
    sx, zx, sw_, zw, so, zo = q or (0.0, 0, 0.0, 0, 0.0, 0)
    wtype = wtype or t
    btype = I32 if t in (Q8, S8) else t
    bscale = 0.0 if channel_scales is not None else (float(np.float32(sx) * np.float32(sw_)) if q else 0.0)
    ins = [tensor(t, x, sx, zx), tensor(wtype, w, sw_, zw, channel_scales=channel_scales, channel_dim=channel_dim),
           tensor(btype, b, bscale)]
    if implicit is None:
        ins += [scalar(INT, v) for v in pads]
    else:
        ins.append(scalar(INT, implicit))
    ins += [scalar(INT, strides[0]), scalar(INT, strides[1])]
    ins += [scalar(INT, v) for v in extra]
    ins.append(scalar(INT, fuse))
    if nchw is not None or dil is not None:
        ins.append(scalar(BOOL, bool(nchw)))
    if dil is not None:
        ins += [scalar(INT, dil[0]), scalar(INT, dil[1])]
    return run_operation(code, ins, [output(out_type or t, None, so, zo)])[0]


def rand_f(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def assert_float(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# CONV_2D float
# ---------------------------------------------------------------------------------------------

def test_conv_hand_computed():
    # 3x3 input, 2x2 filter of ones, VALID: each output is the sum of a 2x2 block, plus bias.
    x = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    w = np.ones((1, 2, 2, 1), np.float32)
    out = conv(x, w, [0.5])
    np.testing.assert_array_equal(out.reshape(2, 2), [[12.5, 16.5], [24.5, 28.5]])
    # RELU6 clamps.
    out = conv(x, w, [-20.0], fuse=3)
    np.testing.assert_array_equal(out.reshape(2, 2), [[0, 0], [4, 6]])


def test_conv_one_hot_kernel_is_a_shift():
    x = rand_f(1, 5, 6, 2)
    w = np.zeros((2, 3, 3, 2), np.float32)
    w[0, 0, 2, 0] = 1  # output channel 0 reads input channel 0 at offset (-1, +1)
    w[1, 2, 1, 1] = 1  # output channel 1 reads input channel 1 at offset (+1, 0)
    out = conv(x, w, [0, 0], pads=(1, 1, 1, 1))
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(out[..., 0], xp[:, 0:5, 2:8, 0])
    np.testing.assert_array_equal(out[..., 1], xp[:, 2:7, 1:7, 1])


def test_conv_1x1_is_a_matmul():
    x, w, b = rand_f(2, 4, 5, 7), rand_f(3, 1, 1, 7), rand_f(3)
    out = conv(x, w, b)
    expected = x.reshape(-1, 7).astype(np.float64) @ w.reshape(3, 7).T.astype(np.float64) + b
    assert_float(out, expected.reshape(2, 4, 5, 3))


def test_conv_matches_scipy_correlate():
    signal = pytest.importorskip("scipy.signal")
    x, w = rand_f(1, 9, 8, 3), rand_f(1, 3, 4, 3)
    out = conv(x, w, [0.0])
    expected = signal.correlate(x[0].astype(np.float64), w[0].astype(np.float64), mode="valid")[..., 0]
    assert_float(out[0, ..., 0], expected)


@pytest.mark.parametrize("strides,dil,pads", [((1, 1), (1, 1), (0, 0, 0, 0)), ((2, 1), (1, 1), (1, 1, 0, 2)),
                                              ((1, 2), (2, 1), (2, 0, 1, 1)), ((3, 2), (2, 3), (1, 1, 2, 2))])
def test_conv_matches_naive(strides, dil, pads):
    x, w, b = rand_f(2, 9, 10, 3), rand_f(4, 3, 2, 3), rand_f(4)
    out = conv(x, w, b, pads=pads, strides=strides, dil=dil, nchw=False)
    assert_float(out, naive_conv(x.astype(np.float64), w.astype(np.float64), b, pads, strides, dil))


def test_conv_large_matches_naive_float32_blas_path():
    x, w, b = rand_f(1, 40, 40, 24), rand_f(48, 3, 3, 24), rand_f(48)
    out = conv(x, w, b, implicit=SAME, strides=(2, 2))
    pl, pr = same_pads(40, 3, 2)
    ref = naive_conv(x[:, :, :, :].astype(np.float64), w.astype(np.float64), b, (pl, pr, pl, pr), (2, 2))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_conv_implicit_same_and_valid(stride):
    x, w, b = rand_f(1, 7, 8, 2), rand_f(3, 3, 3, 2), rand_f(3)
    pl, pr = same_pads(8, 3, stride)
    pt, pb = same_pads(7, 3, stride)
    assert_float(conv(x, w, b, implicit=SAME, strides=(stride, stride)),
                 naive_conv(x, w, b, (pl, pr, pt, pb), (stride, stride)))
    assert_float(conv(x, w, b, implicit=VALID, strides=(stride, stride)),
                 naive_conv(x, w, b, (0, 0, 0, 0), (stride, stride)))


def test_conv_nchw_is_nhwc_transposed():
    x, w, b = rand_f(2, 6, 5, 3), rand_f(4, 3, 3, 3), rand_f(4)
    nhwc = conv(x, w, b, implicit=SAME, strides=(2, 1), nchw=False, dil=(1, 2))
    nchw = conv(x.transpose(0, 3, 1, 2), w, b, implicit=SAME, strides=(2, 1), nchw=True, dil=(1, 2))
    assert_float(nchw, nhwc.transpose(0, 3, 1, 2))


def test_conv_float16():
    x, w, b = rand_f(1, 5, 5, 2).astype(np.float16), rand_f(2, 3, 3, 2).astype(np.float16), rand_f(2)
    out = conv(x, w, b.astype(np.float16), pads=(1, 1, 1, 1), t=F16)
    assert out.dtype == np.float16
    ref = naive_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float16).astype(np.float64),
                     (1, 1, 1, 1), (1, 1))
    np.testing.assert_allclose(out, ref, rtol=5 * 2 ** -10, atol=5 * 2 ** -10)


def test_conv_zero_batch():
    # A zero-sized batch can only come from another operation, so call the operation directly.
    from nnapi_ref import ops
    from nnapi_ref.ops.base import Arg, Call

    def a(t, v):
        v = np.asarray(v)
        return Arg(t, v.shape, value=v)

    ins = [a(F32, np.zeros((0, 4, 4, 2), np.float32)), a(F32, rand_f(3, 3, 3, 2)), a(F32, rand_f(3))]
    ins += [a(INT, np.int32(v)) for v in (0, 0, 0, 0, 1, 1, 0)]
    assert ops.get(Op.CONV_2D).infer(Call(ins, [Arg(F32, None)])) == [(0, 2, 2, 3)]


# ---------------------------------------------------------------------------------------------
# Quantized convolutions
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", [Q8, S8])
@pytest.mark.parametrize("fuse", [0, 1, 3])
def test_conv_quant_matches_exact_reference(t, fuse):
    lo, hi = (0, 255) if t == Q8 else (-128, 127)
    x = RNG.integers(lo, hi + 1, (1, 7, 6, 5))
    w = RNG.integers(lo, hi + 1, (4, 3, 3, 5))
    b = RNG.integers(-3000, 3000, 4)
    q = (0.5, lo + 100, 0.25, lo + 130, 3.0, lo + 7)
    dt = np.uint8 if t == Q8 else np.int8
    out = conv(x.astype(dt), w.astype(dt), b, pads=(1, 0, 2, 1), strides=(2, 1), q=q, t=t, fuse=fuse)
    acc = naive_conv(x - q[1], w - q[3], b, (1, 0, 2, 1), (2, 1))
    act_lo = {0: lo, 1: max(lo, q[5]), 3: max(lo, q[5])}[fuse]
    act_hi = {0: hi, 1: hi, 3: min(hi, q[5] + 2)}[fuse]  # 6 / 3.0 = 2 steps
    real = float(np.float32(0.5) * np.float32(0.25)) / 3.0
    np.testing.assert_array_equal(out, requant_ref(acc, real, q[5], act_lo, act_hi))


@pytest.mark.parametrize("t", [Q8, S8])
def test_conv_per_channel_matches_exact_reference(t):
    lo, hi = (0, 255) if t == Q8 else (-128, 127)
    x = RNG.integers(lo, hi + 1, (2, 5, 5, 3))
    w = RNG.integers(-127, 128, (4, 2, 2, 3))
    scales = [0.01, 0.02, 0.5, 0.003]
    b = RNG.integers(-500, 500, 4)
    dt = np.uint8 if t == Q8 else np.int8
    out = conv(x.astype(dt), w.astype(np.int8), b, implicit=SAME, q=(0.1, lo + 20, 0.0, 0, 0.05, lo + 50), t=t,
               wtype=PC, channel_scales=scales, channel_dim=0, nchw=False)
    pl, pr = same_pads(5, 2, 1)
    acc = naive_conv(x - (lo + 20), w, b, (pl, pr, pl, pr), (1, 1))
    reals = [float(np.float32(0.1) * np.float32(s)) / float(np.float32(0.05)) for s in scales]
    np.testing.assert_array_equal(out, requant_ref(acc, reals, lo + 50, lo, hi))


def test_conv_quant_large_reduction_uses_exact_path():
    # K = 3*3*200 products of up to 255*255: beyond float32's exact range.
    x = RNG.integers(0, 256, (1, 4, 4, 200))
    w = RNG.integers(0, 256, (3, 3, 3, 200))
    b = RNG.integers(-10000, 10000, 3)
    q = (0.02, 3, 0.01, 250, 400.0, 128)
    out = conv(x.astype(np.uint8), w.astype(np.uint8), b, q=q, t=Q8)
    acc = naive_conv(x - 3, w - 250, b, (0, 0, 0, 0), (1, 1))
    real = float(np.float32(0.02) * np.float32(0.01)) / 400.0
    np.testing.assert_array_equal(out, requant_ref(acc, real, 128, 0, 255))


# ---------------------------------------------------------------------------------------------
# DEPTHWISE_CONV_2D
# ---------------------------------------------------------------------------------------------

def test_depthwise_hand_computed():
    # Two channels, 2x2 filter: channel 0 weights all 1, channel 1 weights all 2.
    x = np.stack([np.arange(9).reshape(3, 3), np.ones((3, 3))], -1).astype(np.float32)[None]
    w = np.stack([np.ones((2, 2)), 2 * np.ones((2, 2))], -1).astype(np.float32)[None]
    out = conv(x, w, [0, 1], code=Op.DEPTHWISE_CONV_2D, extra=(1,))
    np.testing.assert_array_equal(out[0, ..., 0], [[8, 12], [20, 24]])
    np.testing.assert_array_equal(out[0, ..., 1], [[9, 9], [9, 9]])


@pytest.mark.parametrize("mult,strides,dil,pads", [(1, (1, 1), (1, 1), (1, 1, 1, 1)), (2, (2, 1), (1, 1), (0, 1, 2, 0)),
                                                   (3, (1, 2), (2, 2), (2, 1, 1, 2))])
def test_depthwise_matches_naive(mult, strides, dil, pads):
    x, w, b = rand_f(2, 8, 7, 3), rand_f(1, 3, 3, 3 * mult), rand_f(3 * mult)
    out = conv(x, w, b, pads=pads, strides=strides, dil=dil, nchw=False, code=Op.DEPTHWISE_CONV_2D, extra=(mult,))
    assert_float(out, naive_conv(x, w, b, pads, strides, dil, depth_mult=mult))
    nchw = conv(x.transpose(0, 3, 1, 2), w, b, pads=pads, strides=strides, dil=dil, nchw=True,
                code=Op.DEPTHWISE_CONV_2D, extra=(mult,))
    assert_float(nchw, out.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("t", [Q8, S8])
def test_depthwise_quant_matches_exact_reference(t):
    lo, hi = (0, 255) if t == Q8 else (-128, 127)
    dt = np.uint8 if t == Q8 else np.int8
    x = RNG.integers(lo, hi + 1, (1, 6, 6, 4))
    w = RNG.integers(lo, hi + 1, (1, 3, 3, 8))
    b = RNG.integers(-2000, 2000, 8)
    q = (0.2, lo + 60, 0.1, lo + 128, 1.5, lo + 10)
    out = conv(x.astype(dt), w.astype(dt), b, implicit=SAME, strides=(2, 2), q=q, t=t, fuse=1,
               code=Op.DEPTHWISE_CONV_2D, extra=(2,))
    pl, pr = same_pads(6, 3, 2)
    acc = naive_conv(x - q[1], w - q[3], b, (pl, pr, pl, pr), (2, 2), depth_mult=2)
    real = float(np.float32(0.2) * np.float32(0.1)) / 1.5
    np.testing.assert_array_equal(out, requant_ref(acc, real, q[5], max(lo, q[5]), hi))


def test_depthwise_per_channel():
    x = RNG.integers(0, 256, (1, 5, 5, 2))
    w = RNG.integers(-127, 128, (1, 3, 3, 4))
    scales = [0.1, 0.02, 0.3, 0.004]
    b = RNG.integers(-300, 300, 4)
    out = conv(x.astype(np.uint8), w.astype(np.int8), b, q=(0.05, 128, 0.0, 0, 0.7, 100), t=Q8, wtype=PC,
               channel_scales=scales, channel_dim=3, code=Op.DEPTHWISE_CONV_2D, extra=(2,), pads=(1, 1, 1, 1))
    acc = naive_conv(x - 128, w, b, (1, 1, 1, 1), (1, 1), depth_mult=2)
    reals = [float(np.float32(0.05) * np.float32(s)) / float(np.float32(0.7)) for s in scales]
    np.testing.assert_array_equal(out, requant_ref(acc, reals, 100, 0, 255))


# ---------------------------------------------------------------------------------------------
# GROUPED_CONV_2D
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nchw", [False, True])
def test_grouped_matches_naive(nchw):
    x, w, b = rand_f(2, 6, 7, 6), rand_f(9, 2, 3, 2), rand_f(9)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    out = conv(xin, w, b, pads=(1, 1, 0, 1), strides=(1, 2), nchw=nchw, code=Op.GROUPED_CONV_2D, extra=(3,))
    ref = naive_conv(x, w, b, (1, 1, 0, 1), (1, 2), groups=3)
    assert_float(out, ref.transpose(0, 3, 1, 2) if nchw else ref)


def test_grouped_quant_matches_exact_reference():
    x = RNG.integers(-128, 128, (1, 5, 5, 4))
    w = RNG.integers(-128, 128, (6, 3, 3, 2))
    b = RNG.integers(-1000, 1000, 6)
    q = (0.3, -5, 0.05, 3, 0.9, -20)
    out = conv(x.astype(np.int8), w.astype(np.int8), b, implicit=SAME, q=q, t=S8, nchw=False,
               code=Op.GROUPED_CONV_2D, extra=(2,))
    acc = naive_conv(x + 5, w - 3, b, (1, 1, 1, 1), (1, 1), groups=2)
    real = float(np.float32(0.3) * np.float32(0.05)) / float(np.float32(0.9))
    np.testing.assert_array_equal(out, requant_ref(acc, real, -20, -128, 127))


# ---------------------------------------------------------------------------------------------
# TRANSPOSE_CONV_2D
# ---------------------------------------------------------------------------------------------

def transpose_conv(x, w, b, pads=None, strides=(1, 1), implicit=None, out_shape=None, fuse=0, nchw=False, t=F32,
                   q=None):
    sx, zx, sw_, zw, so, zo = q or (0.0, 0, 0.0, 0, 0.0, 0)
    btype = I32 if t in (Q8, S8) else t
    ins = [tensor(t, x, sx, zx), tensor(t, w, sw_, zw),
           tensor(btype, b, float(np.float32(sx) * np.float32(sw_)) if q else 0.0)]
    if implicit is None:
        ins += [scalar(INT, v) for v in pads]
    else:
        ins += [tensor(I32, out_shape, as_input=False), scalar(INT, implicit)]
    ins += [scalar(INT, strides[0]), scalar(INT, strides[1]), scalar(INT, fuse), scalar(BOOL, nchw)]
    return run_operation(Op.TRANSPOSE_CONV_2D, ins, [output(t, None, so, zo)])[0]


def test_transpose_conv_hand_computed():
    # Stride 2, 2x2 filter of ones, no padding: every input pixel becomes a 2x2 block.
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    out = transpose_conv(x, np.ones((1, 2, 2, 1), np.float32), [0.0], pads=(0, 0, 0, 0), strides=(2, 2))
    np.testing.assert_array_equal(out.reshape(4, 4), np.kron([[1, 2], [3, 4]], np.ones((2, 2))))


@pytest.mark.parametrize("strides,pads", [((1, 1), (0, 0, 0, 0)), ((2, 3), (1, 0, 0, 2)), ((3, 2), (2, 1, 1, 1))])
def test_transpose_conv_matches_naive(strides, pads):
    x, w, b = rand_f(2, 4, 3, 3), rand_f(5, 3, 4, 3), rand_f(5)
    out = transpose_conv(x, w, b, pads=pads, strides=strides)
    oh = 4 * strides[1] + 3 - strides[1] - pads[2] - pads[3]
    ow = 3 * strides[0] + 4 - strides[0] - pads[0] - pads[1]
    assert_float(out, naive_transpose_conv(x, w, b, pads, strides, (oh, ow)))


def test_transpose_conv_implicit_same_and_nchw():
    x, w, b = rand_f(1, 3, 4, 2), rand_f(3, 3, 3, 2), rand_f(3)
    out = transpose_conv(x, w, b, implicit=SAME, out_shape=[1, 6, 8, 3], strides=(2, 2))
    assert out.shape == (1, 6, 8, 3)
    # SAME for transpose conv: total padding (ceil(out/s) - 1) * s + k - out = 1, head 0.
    assert_float(out, naive_transpose_conv(x, w, b, (0, 1, 0, 1), (2, 2), (6, 8)))
    nchw = transpose_conv(x.transpose(0, 3, 1, 2), w, b, implicit=SAME, out_shape=[1, 3, 6, 8], strides=(2, 2),
                          nchw=True)
    assert_float(nchw, out.transpose(0, 3, 1, 2))


def test_transpose_conv_quant_matches_exact_reference():
    x = RNG.integers(0, 256, (1, 3, 3, 2))
    w = RNG.integers(0, 256, (2, 3, 3, 2))
    b = RNG.integers(-500, 500, 2)
    q = (0.5, 120, 0.5, 128, 4.0, 80)
    out = transpose_conv(x.astype(np.uint8), w.astype(np.uint8), b, pads=(1, 1, 1, 1), strides=(2, 2), q=q, t=Q8)
    acc = naive_transpose_conv(x - 120, w - 128, b, (1, 1, 1, 1), (2, 2), (5, 5))
    np.testing.assert_array_equal(out, requant_ref(acc, 0.25 / 4.0, 80, 0, 255))


def test_transpose_conv_against_torch():
    torch = pytest.importorskip("torch")
    x, w, b = rand_f(1, 5, 4, 3), rand_f(2, 3, 3, 3), rand_f(2)
    out = transpose_conv(x, w, b, pads=(1, 1, 1, 1), strides=(2, 2))
    ref = torch.nn.functional.conv_transpose2d(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
                                               torch.from_numpy(w.transpose(3, 0, 1, 2).copy()),
                                               torch.from_numpy(b), stride=2, padding=1)
    assert_float(out, ref.numpy().transpose(0, 2, 3, 1))


# ---------------------------------------------------------------------------------------------
# Validation: every documented constraint is BAD_DATA
# ---------------------------------------------------------------------------------------------

X, W, B = rand_f(1, 5, 5, 2), rand_f(3, 3, 3, 2), rand_f(3)


@pytest.mark.parametrize("case", [
    dict(x=rand_f(5, 5, 2)),                       # input rank 3
    dict(w=rand_f(3, 3, 3, 4)),                    # filter depth != input depth
    dict(b=rand_f(4)),                             # bias size != output depth
    dict(b=rand_f(1, 3)),                          # bias rank 2
    dict(pads=(-1, 0, 0, 0)),                      # negative padding
    dict(pads=(3, 0, 0, 0)),                       # padding >= filter size
    dict(strides=(0, 1)),                          # stride 0
    dict(fuse=4),                                  # bad fused activation
    dict(implicit=3),                              # bad padding scheme
    dict(dil=(0, 1)),                              # dilation 0
    dict(x=rand_f(1, 2, 2, 2)),                    # filter larger than input
])
def test_conv_validation(case):
    args = dict(x=X, w=W, b=B, pads=(0, 0, 0, 0))
    args.update(case)
    x, w, b = args.pop("x"), args.pop("w"), args.pop("b")
    bad(conv, x, w, b, **args)


def test_conv_one_dilation_factor_is_bad():
    ins = [tensor(F32, X), tensor(F32, W), tensor(F32, B), scalar(INT, SAME), scalar(INT, 1), scalar(INT, 1),
           scalar(INT, 0), scalar(BOOL, False), scalar(INT, 2)]
    bad(run_operation, Op.CONV_2D, ins, [output(F32)])


def test_conv_quant_bias_scale_must_match():
    x = np.zeros((1, 3, 3, 1), np.uint8)
    w = np.zeros((1, 1, 1, 1), np.uint8)
    ins = [tensor(Q8, x, 0.5, 0), tensor(Q8, w, 0.5, 0), tensor(I32, [0], 0.3), scalar(INT, VALID),
           scalar(INT, 1), scalar(INT, 1), scalar(INT, 0)]
    bad(run_operation, Op.CONV_2D, ins, [output(Q8, None, 1.0, 0)])


def test_conv_per_channel_validation():
    x = np.zeros((1, 3, 3, 2), np.uint8)
    w = np.zeros((2, 1, 1, 2), np.int8)
    q = (0.5, 0, 0.0, 0, 1.0, 0)
    bad(conv, x, w, [0, 0], q=q, t=Q8, wtype=PC, channel_scales=[0.1, 0.1], channel_dim=3)  # wrong dim
    bad(conv, x, w, [0, 0], q=q, t=Q8, wtype=PC, channel_scales=[0.1, 0.1, 0.1], channel_dim=0)  # count


def test_depthwise_validation():
    x, w = rand_f(1, 5, 5, 2), rand_f(1, 3, 3, 4)
    bad(conv, x, w, rand_f(4), code=Op.DEPTHWISE_CONV_2D, extra=(1,))      # 2 * 1 != 4
    bad(conv, x, w, rand_f(4), code=Op.DEPTHWISE_CONV_2D, extra=(0,))      # multiplier 0
    bad(conv, x, rand_f(2, 3, 3, 4), rand_f(4), code=Op.DEPTHWISE_CONV_2D, extra=(2,))  # dim 0 != 1
    bad(conv, x, w, rand_f(3), code=Op.DEPTHWISE_CONV_2D, extra=(2,))      # bias size


def test_grouped_validation():
    x = rand_f(1, 5, 5, 6)
    bad(conv, x, rand_f(4, 3, 3, 2), rand_f(4), code=Op.GROUPED_CONV_2D, extra=(3,), nchw=False)  # 4 % 3
    bad(conv, x, rand_f(6, 3, 3, 3), rand_f(6), code=Op.GROUPED_CONV_2D, extra=(3,), nchw=False)  # 3 * 3 != 6
    bad(conv, x, rand_f(6, 3, 3, 2), rand_f(6), code=Op.GROUPED_CONV_2D, extra=(0,), nchw=False)  # 0 groups


def test_transpose_conv_validation():
    x, w, b = rand_f(1, 3, 3, 2), rand_f(2, 3, 3, 2), rand_f(2)
    bad(transpose_conv, x, w, b, pads=(-1, 0, 0, 0))
    bad(transpose_conv, x, w, b, pads=(0, 0, 0, 0), strides=(0, 1))
    bad(transpose_conv, x, rand_f(2, 3, 3, 3), b, pads=(0, 0, 0, 0))
    bad(transpose_conv, x, w, rand_f(3), pads=(0, 0, 0, 0))
    bad(transpose_conv, x, w, b, implicit=SAME, out_shape=[1, 6, 6])       # output shape of 3 elements
    bad(transpose_conv, x, w, b, pads=(0, 0, 0, 0), fuse=7)


def test_optional_inputs_may_be_omitted_only_as_documented():
    # The layout flag cannot be an omitted operand in a 1.0-style call; leaving it out works.
    out = conv(X, W, B, implicit=VALID)
    assert out.shape == (1, 3, 3, 3)
    assert omitted  # imported helper exists for other files' conventions


# ---- requantization fast paths (table and float32 affine) against the direct fixed-point path ----

def _finish_quant_cases():
    rng = np.random.default_rng(7)
    for case in range(120):
        signed = bool(rng.random() < 0.5)
        yield pytest.param(case, signed, int(rng.integers(-128, 128) if signed else rng.integers(0, 256)),
                           float(rng.choice([0.05, 0.0123, 6 / 255, 1 / 128, 0.5])),
                           float(rng.choice([0.004, 0.0003, 0.02, 0.9, 1.7, 2.0 ** -9, 3.3e-5])),
                           int(rng.integers(1, 5)), bool(rng.random() < 0.5), int(rng.integers(0, 4)),
                           id=f"case{case}")


@pytest.mark.parametrize("case,signed,zp,scale,real,n_ch,per_channel,fuse", list(_finish_quant_cases()))
def test_finish_quant_fast_paths_are_exact(case, signed, zp, scale, real, n_ch, per_channel, fuse):
    from nnapi_ref.ops import conv_quantization as conv
    from nnapi_ref.ops.base import Arg
    rng = np.random.default_rng(case)
    out = Arg(T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM, (1,), scale, zp)
    reals = real * rng.uniform(0.5, 1.5, n_ch) if per_channel else np.array([real])
    mult, shift = requantization.quantize_multipliers(reals)
    bias = rng.integers(-3000, 3000, n_ch).astype(np.int32)
    bound = 2 ** 23
    acc = rng.integers(-bound, bound, (5000, n_ch)).astype(np.float32)
    acc[:2500] = rng.integers(-int(300 / real), int(300 / real), (2500, n_ch))  # around the steps
    direct = conv.finish_quant(acc.copy(), bias, mult, shift, out, fuse, None)
    fast = conv.finish_quant(acc.copy(), bias, mult, shift, out, fuse, float(bound))
    np.testing.assert_array_equal(fast, direct)


def _real_model_cases():
    for case in range(48):
        yield pytest.param(case, case % 2 == 0, case % 4 < 2, case % 3 != 0, id=f"case{case}")


@pytest.mark.parametrize("case,signed,relu,big_bias", list(_real_model_cases()))
def test_finish_quant_with_real_model_scales(case, signed, relu, big_bias):
    """Per-channel int8 models (TFLite's post-training quantization) have multipliers down to
    1e-7 and int32 biases up to ~1e9. The affine requantization, proven per channel (in float64
    where float32 is not exact enough; with the ramp at v = 0 where steps lie on both sides, as in
    linear layers), is found and agrees with the direct fixed-point path."""
    from nnapi_ref.ops import conv_quantization as conv
    from nnapi_ref.ops.base import Arg
    rng = np.random.default_rng(100 + case)
    n_ch = int(rng.integers(1, 40))
    lo, hi = (-128, 127) if signed else (0, 255)
    zp = int(rng.integers(lo, hi + 1))
    out = Arg(S8 if signed else Q8, (1,), 0.05, zp)
    fuse = 1 if relu else 0
    reals = np.exp(rng.uniform(np.log(1e-7), np.log(0.05), n_ch))
    mult, shift = requantization.quantize_multipliers(reals)
    bias = rng.integers(-2 ** 30, 2 ** 30, n_ch) if big_bias else rng.integers(-10 ** 5, 10 ** 5, n_ch)
    bound = 2 ** 22
    acc = rng.integers(-bound, bound + 1, (6000, n_ch))
    # Half the accumulators just around the steps of each channel: (level - zp) / real - bias.
    levels = rng.integers(lo, hi + 1, (3000, n_ch))
    near = np.round((levels - zp) / reals) - bias + rng.integers(-3, 4, (3000, n_ch))
    acc[:3000] = np.where(np.abs(near) <= bound, near, acc[:3000])
    acc = acc.astype(np.float32)
    direct = conv.finish_quant(acc.copy(), bias.astype(np.int32), mult, shift, out, fuse, None)
    fast = conv.finish_quant(acc.copy(), bias.astype(np.int32), mult, shift, out, fuse, float(bound))
    np.testing.assert_array_equal(fast, direct)
    act_lo, act_hi = conv.activation_range_quant(fuse, out)
    affine = conv.requant_affine(mult.tobytes(), shift.tobytes(), zp, act_lo, act_hi,
                                  np.dtype(np.int8 if signed else np.uint8).str, bias.astype(np.int64).tobytes(), bound)
    assert affine is not None
    if not relu and not big_bias:  # steps on both sides of v = 0 in some channel: the ramp is used
        assert affine[5] is not None and np.any(affine[5] > 0)


@pytest.mark.parametrize("signed", [False, True])
def test_affine_requantization_without_a_right_shift(signed):
    """Multipliers in [0.5, 1) have no RoundingDivideByPOT (q = floor(v * real + 1/2), no
    sign-dependent nudge), and those >= 1 shift left: ReLU-like outputs still get the proven
    affine path, and it agrees with the direct fixed-point path."""
    from nnapi_ref.ops import conv_quantization as conv
    from nnapi_ref.ops.base import Arg
    rng = np.random.default_rng(9)
    reals = np.array([0.72, 0.5, 0.99, 0.3, 1.3, 0.06])
    mult, shift = requantization.quantize_multipliers(reals)
    assert list(shift[:3]) == [0, 0, 0] and shift[4] > 0
    lo = -128 if signed else 0
    out = Arg(S8 if signed else Q8, (1,), 0.05, lo)
    bias = rng.integers(-5000, 5000, 6)
    acc = rng.integers(-20000, 20000, (20000, 6)).astype(np.float32)
    affine = conv.requant_affine(mult.tobytes(), shift.tobytes(), lo, lo, lo + 255,
                                  np.dtype(np.int8 if signed else np.uint8).str, bias.astype(np.int64).tobytes(), 20000)
    assert affine is not None
    direct = conv.finish_quant(acc.copy(), bias.astype(np.int32), mult, shift, out, 1, None)
    fast = conv.finish_quant(acc.copy(), bias.astype(np.int32), mult, shift, out, 1, 20000.0)
    np.testing.assert_array_equal(fast, direct)


def test_per_channel_conv_with_real_model_scales_takes_the_fast_path(monkeypatch):
    """An int8 1x1 convolution quantized like TFLite's per-channel models (weight scales spread
    over three decades, biases up to 2**28) runs on the prepared float path, exactly."""
    from nnapi_ref.ops import convolution as cv
    taken = []
    original = cv.conv2d_fast

    def spy(*args):
        result = original(*args)
        taken.append(result is not None)
        return result
    monkeypatch.setattr(cv, "conv2d_fast", spy)
    rng = np.random.default_rng(3)
    n_out, k = 24, 32
    x = rng.integers(-128, 128, (1, 20, 20, k))
    w = rng.integers(-127, 128, (n_out, 1, 1, k))
    scales = list(np.exp(rng.uniform(np.log(1e-5), np.log(1e-2), n_out)))
    b = rng.integers(-2 ** 28, 2 ** 28, n_out)
    sx, zx, so, zo = 0.02, -5, 0.03, -128
    ins, _ = _conv_operands(Op.CONV_2D, x.astype(np.int8), w.astype(np.int8), b, (0, 0, 0, 0), (1, 1), 3, S8,
                            (sx, zx, 0.0, 0, so, zo), True, wtype=PC, scales=scales, channel_dim=0)
    acc = _naive_for(Op.CONV_2D, x - zx, w, b, (0, 0, 0, 0), (1, 1), None)
    reals = [float(np.float32(sx) * np.float32(s)) / float(np.float32(so)) for s in scales]
    lo, hi = zo, zo + round(6 / so)  # ReLU6: [0, 6] quantized
    expected = requant_ref(acc, reals, zo, lo, hi)
    first, second = _run_compiled_twice(Op.CONV_2D, ins, output(S8, expected.shape, so, zo))
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, expected)
    assert taken == [True, True]


# ---- prepared (cached) fast paths: a compiled model run twice, weights constant or fed ----

def _run_compiled_twice(code, ins, out):
    """Compile a one-operation model once and execute it twice; returns both outputs."""
    compilation = compile_operation(code, ins, [out])
    return [execute_operation(compilation, ins, [out])[0] for _ in range(2)]


def _conv_operands(code, x, w, b, pads, strides, fuse, t, q, const, extra=(), wtype=None, scales=None,
                   channel_dim=0, nchw=False):
    sx, zx, sw_, zw, so, zo = q or (0.0, 0, 0.0, 0, 0.0, 0)
    btype = I32 if t in (Q8, S8) else t
    bscale = 0.0 if scales is not None or not q else float(np.float32(sx) * np.float32(sw_))
    ins = [tensor(t, x, sx, zx),
           tensor(wtype or t, w, sw_, zw, as_input=not const, channel_scales=scales, channel_dim=channel_dim),
           tensor(btype, b, bscale, as_input=not const)]
    ins += [scalar(INT, v) for v in pads] + [scalar(INT, strides[0]), scalar(INT, strides[1])]
    ins += [scalar(INT, v) for v in extra] + [scalar(INT, fuse), scalar(BOOL, nchw)]
    return ins, q


CACHED_CASES = [
    # (code, x shape, w shape, pads, strides, depth multiplier)
    (Op.CONV_2D, (2, 32, 32, 64), (64, 1, 1, 64), (0, 0, 0, 0), (1, 1), None),       # 1x1 matmul, float32 path
    (Op.CONV_2D, (1, 33, 31, 8), (48, 3, 3, 8), (1, 1, 0, 1), (2, 2), None),         # im2col, padded, strided
    (Op.CONV_2D, (1, 40, 40, 24), (16, 1, 1, 24), (0, 0, 0, 0), (2, 1), None),       # strided 1x1
    (Op.DEPTHWISE_CONV_2D, (2, 17, 19, 12), (1, 3, 3, 12), (1, 1, 1, 1), (1, 1), 1),
    (Op.DEPTHWISE_CONV_2D, (1, 18, 18, 16), (1, 3, 3, 16), (0, 1, 0, 1), (2, 2), 1),
    (Op.DEPTHWISE_CONV_2D, (1, 9, 10, 4), (1, 3, 3, 8), (2, 0, 1, 1), (1, 2), 2),
    # Horizontal strides > 1 split the input columns into phases: 3 phases x 2 taps, a kernel
    # width not a multiple of the stride, and a kernel narrower than the stride.
    (Op.DEPTHWISE_CONV_2D, (1, 11, 13, 5), (1, 5, 5, 5), (2, 2, 2, 2), (3, 3), 1),
    (Op.DEPTHWISE_CONV_2D, (1, 10, 9, 3), (1, 2, 4, 6), (1, 0, 0, 1), (3, 1), 2),
    (Op.DEPTHWISE_CONV_2D, (1, 9, 12, 4), (1, 3, 1, 4), (0, 0, 1, 1), (2, 1), 1),
    (Op.CONV_2D, (1, 12, 12, 8), (40, 1, 1, 8), (0, 0, 0, 0), (1, 1), None),         # K < C_out: offset in the gemm
]


def _naive_for(code, x, w, b, pads, strides, mult):
    return naive_conv(x, w, b, pads, strides, depth_mult=mult if code == Op.DEPTHWISE_CONV_2D else None)


@pytest.mark.parametrize("case", range(len(CACHED_CASES)))
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("nchw", [False, True])
def test_cached_float_paths(case, const, nchw):
    code, xs, ws, pads, strides, mult = CACHED_CASES[case]
    x, w = rand_f(*xs), rand_f(*ws)
    n_out = ws[3] if code == Op.DEPTHWISE_CONV_2D else ws[0]
    b = rand_f(n_out)
    ins, _ = _conv_operands(code, x.transpose(0, 3, 1, 2) if nchw else x, w, b, pads, strides, 3, F32, None, const,
                            extra=() if mult is None else (mult,), nchw=nchw)
    expected = np.clip(_naive_for(code, x, w, b, pads, strides, mult), 0, 6)
    shape = expected.shape if not nchw else tuple(np.array(expected.shape)[[0, 3, 1, 2]])
    first, second = _run_compiled_twice(code, ins, output(F32, shape))
    if nchw:
        first, second = first.transpose(0, 2, 3, 1), second.transpose(0, 2, 3, 1)
    assert_float(first, expected)
    np.testing.assert_array_equal(second, first)


@pytest.mark.parametrize("case", range(len(CACHED_CASES)))
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("t,fuse,zo,per_channel", [(Q8, 3, 0, False), (Q8, 0, 128, False), (S8, 1, -128, False),
                                                   (S8, 0, 3, False), (Q8, 0, 100, True), (S8, 3, -128, True)])
def test_cached_quant_paths(case, const, t, fuse, zo, per_channel):
    """Affine (ReLU-like outputs) and table (mid zero point) requantization, input zero point
    folded into the bias, against exact integer sums requantized by the scalar helpers."""
    code, xs, ws, pads, strides, mult = CACHED_CASES[case]
    lo, hi = (0, 255) if t == Q8 else (-128, 127)
    dt = np.uint8 if t == Q8 else np.int8
    rng = np.random.default_rng(case)
    x = rng.integers(lo, hi + 1, xs)
    dw = code == Op.DEPTHWISE_CONV_2D
    n_out = ws[3] if dw else ws[0]
    sx, zx, so = 0.05, lo + 90, 0.2
    if per_channel:
        w = rng.integers(-127, 128, ws)
        scales = list(rng.uniform(0.002, 0.02, n_out))
        q, wtype, zw = (sx, zx, 0.0, 0, so, zo), PC, 0
    else:
        w = rng.integers(lo, hi + 1, ws)
        scales, zw = None, lo + 120
        q, wtype = (sx, zx, 0.01, zw, so, zo), t
    b = rng.integers(-4000, 4000, n_out)
    ins, _ = _conv_operands(code, x.astype(dt), w.astype(np.int8 if per_channel else dt), b, pads, strides, fuse, t,
                            q, const, extra=() if mult is None else (mult,), wtype=wtype, scales=scales,
                            channel_dim=3 if dw else 0)
    acc = _naive_for(code, x - zx, w - zw, b, pads, strides, mult)
    if per_channel:
        reals = [float(np.float32(sx) * np.float32(s)) / float(np.float32(so)) for s in scales]
    else:
        reals = float(np.float32(sx) * np.float32(0.01)) / float(np.float32(so))
    act_lo = lo if fuse == 0 else max(lo, zo)
    act_hi = hi if fuse != 3 else min(hi, zo + 30)
    expected = requant_ref(acc, reals, zo, act_lo, act_hi)
    first, second = _run_compiled_twice(code, ins, output(t, expected.shape, so, zo))
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, expected)


def test_cached_quant_paths_are_taken(monkeypatch):
    """The prepared paths above are the ones exercised (not the general fallback)."""
    from nnapi_ref.ops import convolution as cv
    taken = []
    for name in ("conv2d_fast", "depthwise_fast"):
        original = getattr(cv, name)

        def spy(*args, _original=original):
            result = _original(*args)
            taken.append(result is not None)
            return result
        monkeypatch.setattr(cv, name, spy)
    test_cached_quant_paths(0, True, Q8, 3, 0, False)
    test_cached_quant_paths(3, True, S8, 0, 3, False)
    test_cached_float_paths(0, True, False)
    test_cached_float_paths(4, False, False)
    assert taken == [True] * 8  # two executions each


@pytest.mark.parametrize("code,extra", [(Op.CONV_2D, ()), (Op.DEPTHWISE_CONV_2D, (1,))])
@pytest.mark.parametrize("explicit", [True, False])
def test_dilation_factors_come_in_pairs(code, extra, explicit):
    """The optional layout and dilation inputs: none, the layout, or the layout and both dilation
    factors; a model with a single dilation factor is rejected when it is built (BAD_DATA)."""
    from nnts.generators.builders import build_operation_model
    x, w = rand_f(1, 5, 5, 2), rand_f(1, 3, 3, 2) if extra else rand_f(2, 3, 3, 2)
    pads = [scalar(INT, 1)] * 4 if explicit else [scalar(INT, 1)]
    head = [tensor(F32, x), tensor(F32, w, as_input=False), tensor(F32, rand_f(2), as_input=False), *pads,
            scalar(INT, 1), scalar(INT, 1), *[scalar(INT, v) for v in extra], scalar(INT, 0)]
    out = [output(F32, (1, 5, 5, 2) if explicit else None)]
    tails = {0: [], 1: [scalar(BOOL, False)], 3: [scalar(BOOL, False), scalar(INT, 1), scalar(INT, 1)]}
    for tail in tails.values():
        build_operation_model(code, head + tail, out)
    with pytest.raises(NnapiError) as e:
        build_operation_model(code, head + [scalar(BOOL, False), scalar(INT, 1)], out)
    assert e.value.code == ResultCode.BAD_DATA
