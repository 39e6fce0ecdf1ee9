"""AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.

Expected values are hand-computed or come from a naive explicit-loop pooling written here
(windows count only the input elements they cover; quantized averages round half away from zero).
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

F32, F16, Q8, S8, INT, BOOL = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM,
                               T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32, T.BOOL)
SAME, VALID = 1, 2
RNG = np.random.default_rng(7)


def pool(code, x, filt, pads=(0, 0, 0, 0), strides=(1, 1), fuse=0, implicit=None, nchw=None, t=F32, q=(0.0, 0),
         out_q=None):
    ins = [tensor(t, x, *q)]
    ins += [scalar(INT, implicit)] if implicit is not None else [scalar(INT, v) for v in pads]
    ins += [scalar(INT, strides[0]), scalar(INT, strides[1]), scalar(INT, filt[0]), scalar(INT, filt[1]),
            scalar(INT, fuse)]
    if nchw is not None:
        ins.append(scalar(BOOL, nchw))
    return run_operation(code, ins, [output(t, None, *(out_q or q))])[0]


def naive_pool(x, kind, filt, pads, strides):
    """kind: 'avg' | 'max' | 'l2' | 'qavg' (exact integer average, half away from zero)."""
    n, h, w, c = x.shape
    fw, fh = filt
    left, right, top, bottom = pads
    sw, sh = strides
    oh = (h - fh + sh + top + bottom) // sh
    ow = (w - fw + sw + left + right) // sw
    out = np.zeros((n, oh, ow, c), np.float64 if kind != "qavg" else np.int64)
    for b in range(n):
        for y in range(oh):
            for xx in range(ow):
                y0, x0 = y * sh - top, xx * sw - left
                win = x[b, max(y0, 0):min(y0 + fh, h), max(x0, 0):min(x0 + fw, w), :].reshape(-1, c)
                if kind == "avg":
                    out[b, y, xx] = win.astype(np.float64).mean(0)
                elif kind == "max":
                    out[b, y, xx] = win.max(0)
                elif kind == "l2":
                    out[b, y, xx] = np.sqrt((win.astype(np.float64) ** 2).mean(0))
                else:
                    s, cnt = win.astype(np.int64).sum(0), len(win)
                    out[b, y, xx] = [int(np.sign(v)) * ((abs(int(v)) + cnt // 2) // cnt) for v in s]
    return out


def same_pads(size, k, s):
    outs = (size + s - 1) // s
    total = max((outs - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def test_hand_computed():
    x = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.float32).reshape(1, 3, 3, 1)
    avg = pool(Op.AVERAGE_POOL_2D, x, (2, 2), pads=(0, 1, 0, 1), strides=(2, 2))
    # Windows at the edge average only the covered elements: (3+6)/2, (7+8)/2, 9/1.
    np.testing.assert_allclose(avg.reshape(2, 2), [[3, 4.5], [7.5, 9]])
    mx = pool(Op.MAX_POOL_2D, -x, (2, 2), pads=(1, 0, 1, 0), strides=(2, 2))
    np.testing.assert_array_equal(mx.reshape(2, 2), [[-1, -2], [-4, -5]])
    l2 = pool(Op.L2_POOL_2D, x, (3, 1))
    np.testing.assert_allclose(l2.reshape(3), np.sqrt([14 / 3, 77 / 3, 194 / 3]), rtol=1e-6)
    relu1 = pool(Op.MAX_POOL_2D, x, (2, 2), fuse=2)
    np.testing.assert_array_equal(relu1, np.ones((1, 2, 2, 1)))


@pytest.mark.parametrize("code,kind", [(Op.AVERAGE_POOL_2D, "avg"), (Op.MAX_POOL_2D, "max"), (Op.L2_POOL_2D, "l2")])
@pytest.mark.parametrize("filt,pads,strides", [((2, 2), (0, 0, 0, 0), (2, 2)), ((3, 2), (2, 1, 0, 1), (1, 2)),
                                               ((3, 3), (1, 1, 1, 1), (3, 1))])
def test_float_matches_naive(code, kind, filt, pads, strides):
    x = RNG.uniform(-2, 2, (2, 7, 8, 3)).astype(np.float32)
    out = pool(code, x, filt, pads, strides)
    np.testing.assert_allclose(out, naive_pool(x, kind, filt, pads, strides), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("code,kind", [(Op.AVERAGE_POOL_2D, "avg"), (Op.MAX_POOL_2D, "max"), (Op.L2_POOL_2D, "l2")])
def test_implicit_padding_and_nchw(code, kind):
    x = RNG.uniform(0, 2, (1, 7, 5, 4)).astype(np.float32)
    pl, pr = same_pads(5, 3, 2)
    pt, pb = same_pads(7, 3, 2)
    nhwc = pool(code, x, (3, 3), implicit=SAME, strides=(2, 2), nchw=False)
    np.testing.assert_allclose(nhwc, naive_pool(x, kind, (3, 3), (pl, pr, pt, pb), (2, 2)), rtol=1e-5)
    nchw = pool(code, x.transpose(0, 3, 1, 2), (3, 3), implicit=SAME, strides=(2, 2), nchw=True)
    np.testing.assert_allclose(nchw, nhwc.transpose(0, 3, 1, 2), rtol=1e-6)
    valid = pool(code, x, (3, 3), implicit=VALID, strides=(2, 2))
    np.testing.assert_allclose(valid, naive_pool(x, kind, (3, 3), (0, 0, 0, 0), (2, 2)), rtol=1e-5)


def test_float16():
    x = RNG.uniform(-1, 1, (1, 4, 4, 2)).astype(np.float16)
    out = pool(Op.AVERAGE_POOL_2D, x, (2, 2), t=F16)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, naive_pool(x.astype(np.float32), "avg", (2, 2), (0,) * 4, (1, 1)), atol=2e-3)


@pytest.mark.parametrize("t,lo,hi", [(Q8, 0, 255), (S8, -128, 127)])
def test_quant_average_rounds_half_away_from_zero(t, lo, hi):
    x = RNG.integers(lo, hi + 1, (1, 6, 7, 3))
    dt = np.uint8 if t == Q8 else np.int8
    out = pool(Op.AVERAGE_POOL_2D, x.astype(dt), (3, 2), pads=(1, 2, 1, 0), strides=(2, 2), t=t, q=(0.5, lo + 3))
    np.testing.assert_array_equal(out, naive_pool(x, "qavg", (3, 2), (1, 2, 1, 0), (2, 2)))
    # Hand-computed: averages of (-1, -2) = -1.5 -> -2 and of (1, 2) = 1.5 -> 2 (signed).
    if t == S8:
        y = np.array([-1, -2, 1, 2], np.int8).reshape(1, 2, 2, 1)
        out = pool(Op.AVERAGE_POOL_2D, y, (2, 1), t=S8, q=(1.0, 0))
        np.testing.assert_array_equal(out.reshape(-1), [-2, 2])


@pytest.mark.parametrize("t,lo,hi", [(Q8, 0, 255), (S8, -128, 127)])
def test_quant_max_and_activation(t, lo, hi):
    x = RNG.integers(lo, hi + 1, (2, 5, 5, 2))
    dt = np.uint8 if t == Q8 else np.int8
    out = pool(Op.MAX_POOL_2D, x.astype(dt), (2, 2), pads=(1, 0, 1, 0), strides=(2, 2), t=t, q=(0.1, lo + 100))
    np.testing.assert_array_equal(out, naive_pool(x, "max", (2, 2), (1, 0, 1, 0), (2, 2)))
    relu6 = pool(Op.MAX_POOL_2D, x.astype(dt), (2, 2), fuse=3, t=t, q=(0.1, lo + 100))
    np.testing.assert_array_equal(relu6, np.clip(naive_pool(x, "max", (2, 2), (0,) * 4, (1, 1)), lo + 100, lo + 160))


def bad(*args, **kwargs):
    with pytest.raises(NnapiError) as e:
        pool(*args, **kwargs)
    assert e.value.code == ResultCode.BAD_DATA, e.value


@pytest.mark.parametrize("code", [Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D])
def test_validation(code):
    x = np.zeros((1, 4, 4, 1), np.float32)
    bad(code, x.reshape(4, 4, 1), (2, 2))                     # rank 3
    bad(code, x, (0, 2))                                      # filter width 0
    bad(code, x, (2, 2), strides=(1, 0))                      # stride 0
    bad(code, x, (2, 2), pads=(0, -1, 0, 0))                  # negative padding
    bad(code, x, (2, 2), pads=(2, 0, 0, 0))                   # padding >= filter
    bad(code, x, (5, 2))                                      # filter wider than the input
    bad(code, x, (2, 2), fuse=5)                              # fused activation
    bad(code, x, (2, 2), implicit=0)                          # padding scheme


def test_quant_output_must_keep_input_quantization():
    x = np.zeros((1, 4, 4, 1), np.uint8)
    bad(Op.AVERAGE_POOL_2D, x, (2, 2), t=Q8, q=(0.5, 1), out_q=(0.25, 1))
    bad(Op.MAX_POOL_2D, x, (2, 2), t=Q8, q=(0.5, 1), out_q=(0.5, 2))


def test_l2_pool_has_no_quantized_form():
    bad(Op.L2_POOL_2D, np.zeros((1, 4, 4, 1), np.uint8), (2, 2), t=Q8, q=(0.5, 0))
