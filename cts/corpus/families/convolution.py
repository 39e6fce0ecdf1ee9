"""Convolutions, fully connected, pooling, normalizations and resizes."""
from __future__ import annotations

import math

import numpy as np

from .common import (F16, F32, I32, LEVELS, QA, QPC, QS, C, I, O, T, bsc, ci32, family, fsc, i32, model, rha, rnd,
                     short, tname, tq, variants)


def conv_ref(x, w, b, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """Naive NHWC convolution. w: [O, kh, kw, C/groups]; pads: (top, bottom, left, right)."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    sh, sw = stride
    dh, dw = dil
    t, bt, l, r = pads
    oh = (h + t + bt - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + l + r - ((kw - 1) * dw + 1)) // sw + 1
    out = np.zeros((n, oh, ow, o))
    opg = o // groups
    for bi in range(n):
        for yy in range(oh):
            for xx in range(ow):
                for oc in range(o):
                    g = oc // opg
                    acc = b[oc]
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = yy * sh - t + ky * dh, xx * sw - l + kx * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                for ci in range(cg):
                                    acc += x[bi, iy, ix, g * cg + ci] * w[oc, ky, kx, ci]
                    out[bi, yy, xx, oc] = acc
    return out


def same_pads(size, k, stride, dil=1):
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dil + 1 - size, 0)
    return total // 2, total - total // 2


def conv_types(code):
    """(input, filter, bias, output) types for a convolution of ``code``."""
    if code == QA:
        return T(QA, 0.5, 128), T(QA, 0.25, 128), T(I32, 0.125), T(QA, 0.5, 100)
    if code == QS:
        return T(QS, 0.5, -10), T(QS, 0.25, 0), T(I32, 0.125), T(QS, 0.5, 5)
    t = T(code)
    return t, t, t, t


def gen_conv():
    family("convolution")
    rng = np.random.default_rng(9)
    for code, rel in variants("CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 4, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((3, 2, 2, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((3,), -1, 1, 0.125, rng=rng))
        y = conv_ref(x, w, b, pads=(0, 1, 1, 0))
        model(f"conv_2d_{tname(code, rel)}_explicit", "CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(0), i32(0), i32(1), i32(1), i32(1), i32(0)],
              [O(to, y)], relaxed=rel, types=[code])
        if code == F16 or rel:
            continue
        # implicit SAME padding, stride 2, RELU
        pt, pb = same_pads(3, 2, 2)
        pl, pr = same_pads(4, 2, 2)
        y = np.maximum(conv_ref(x, w, b, (2, 2), (pt, pb, pl, pr)), 0)
        model(f"conv_2d_{tname(code, rel)}_same_stride2_relu", "CONV_2D",
              [I(ti, x), I(tf, w), I(tb, b), i32(1), i32(2), i32(2), i32(1)],
              [O(to, y)], relaxed=rel, types=[code])
    # NCHW layout and dilation (feature level 3)
    x = rnd((1, 4, 4, 1), -2, 2, rng=rng)
    w = rnd((2, 2, 2, 1), -1, 1, 0.25, rng=rng)
    b = np.array([0.5, -0.25])
    y = conv_ref(x, w, b, dil=(2, 2))
    model("conv_2d_float32_nchw_dilation", "CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), b), i32(2), i32(1), i32(1), i32(0),
           bsc(True), i32(2), i32(2)], [O(T(F32), y.transpose(0, 3, 1, 2))], at_least=29)
    # per-channel quantized filter (feature level 3): bias scale = input scale * channel scale
    for code in (QA, QS):
        ti, _, _, to = conv_types(code)
        sc = [0.25, 0.5, 0.125]
        tf = T(QPC, 0.0, 0, (sc, 0))
        x = ti.rt(rnd((1, 2, 3, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((3, 1, 2, 2), -1, 1, 0.125, rng=rng))
        b = np.array([0.25, -0.5, 0.0625])
        bq = np.round(b / (0.5 * np.array(sc)))
        y = conv_ref(x, w, bq * 0.5 * np.array(sc))
        model(f"conv_2d_{short(code).lower()}_per_channel", "CONV_2D",
              [I(ti, x), C(tf, w), C(T(I32), stored=bq), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1), i32(0)],
              [O(to, y)], level=max(29, LEVELS["CONV_2D"][short(code)]))
    model("conv_2d_float32_bad_stride", "CONV_2D",
          [I(T(F32), np.zeros((1, 2, 2, 1))), C(T(F32), np.ones((1, 1, 1, 1))), C(T(F32), [0.0]), i32(2), i32(0),
           i32(1), i32(0)], [O(T(F32), np.zeros((1, 2, 2, 1)))], fail=True)
    # DEPTHWISE_CONV_2D: output channel k uses input channel k // multiplier. The first model is
    # the most general form (dilation, a depth multiplier above 1 and a bias together), as the
    # breadth-first order runs a group's first model first; its own generator keeps the values of
    # the models after it.
    own = np.random.default_rng(91)
    x = rnd((1, 5, 5, 2), -2, 2, rng=own)
    w = rnd((1, 2, 2, 4), -1, 1, 0.25, rng=own)
    b = rnd((4,), -1, 1, 0.125, rng=own)
    y = conv_ref(x, w[0].transpose(2, 0, 1)[..., None], b, dil=(2, 2), groups=2)
    model("depthwise_conv_2d_float32_dilation_multiplier", "DEPTHWISE_CONV_2D",
          [I(T(F32), x), C(T(F32), w), C(T(F32), b), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1), i32(2), i32(0),
           bsc(False), i32(2), i32(2)], [O(T(F32), y)], at_least=29)
    for code, rel in variants("DEPTHWISE_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 3, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((1, 2, 2, 4), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        wg = w[0].transpose(2, 0, 1)[..., None]  # [4, kh, kw, 1], groups = 2 input channels
        y = conv_ref(x, wg, b, groups=2)
        model(f"depthwise_conv_2d_{tname(code, rel)}", "DEPTHWISE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1), i32(2), i32(0)],
              [O(to, y)], relaxed=rel, types=[code])
        if code == F16 or rel:
            continue
        pt, pb = same_pads(3, 2, 1)
        y = np.clip(conv_ref(x, wg, b, pads=(pt, pb, pt, pb), groups=2), 0, 6)
        model(f"depthwise_conv_2d_{tname(code, rel)}_same_relu6", "DEPTHWISE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(1), i32(1), i32(2), i32(3)],
              [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 3, 3, 2), -2, 2, rng=rng)
    w = rnd((1, 2, 2, 2), -1, 1, 0.25, rng=rng)
    y = conv_ref(x, w[0].transpose(2, 0, 1)[..., None], np.zeros(2), dil=(2, 1), groups=2)
    model("depthwise_conv_2d_float32_nchw_dilation", "DEPTHWISE_CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), [0.0, 0.0]), i32(0), i32(0), i32(0), i32(0),
           i32(1), i32(1), i32(1), i32(0), bsc(True), i32(1), i32(2)], [O(T(F32), y.transpose(0, 3, 1, 2))],
          at_least=29)
    sc = [0.25, 0.5]
    tf = T(QPC, 0.0, 0, (sc, 3))
    x = T(QA, 0.5, 128).rt(rnd((1, 2, 2, 2), -2, 2, rng=rng))
    w = tf.rt(rnd((1, 2, 2, 2), -1, 1, 0.25, rng=rng))
    bq = np.array([3, -2])
    y = conv_ref(x, w[0].transpose(2, 0, 1)[..., None], bq * 0.5 * np.array(sc), groups=2)
    model("depthwise_conv_2d_quant8_asymm_per_channel", "DEPTHWISE_CONV_2D",
          [I(T(QA, 0.5, 128), x), C(tf, w), C(T(I32), stored=bq), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1),
           i32(1), i32(0)], [O(T(QA, 0.25, 128), y)], level=29)
    # GROUPED_CONV_2D
    for code, rel in variants("GROUPED_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 3, 4), -2, 2, rng=rng))
        w = tf.rt(rnd((4, 2, 2, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        y = conv_ref(x, w, b, pads=(1, 0, 0, 1), groups=2)
        model(f"grouped_conv_2d_{tname(code, rel)}", "GROUPED_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(0), i32(1), i32(1), i32(0), i32(1), i32(1), i32(2), i32(0),
               bsc(False)], [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 3, 3, 4), -2, 2, rng=rng)
    w = rnd((2, 2, 2, 2), -1, 1, 0.25, rng=rng)
    y = conv_ref(x, w, np.zeros(2), stride=(2, 2), groups=2)
    model("grouped_conv_2d_float32_nchw_valid_stride2", "GROUPED_CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), [0.0, 0.0]), i32(2), i32(2), i32(2), i32(2),
           i32(0), bsc(True)], [O(T(F32), y.transpose(0, 3, 1, 2))])
    # TRANSPOSE_CONV_2D: out[y*s + ky - pt, x*s + kx - pl, o] += in[y, x, c] * w[o, ky, kx, c]
    def tconv(x, w, b, s, pt, pl, oh, ow):
        n, h, wd, c = x.shape
        o, kh, kw, _ = w.shape
        out = np.zeros((n, oh, ow, o)) + b
        for bi in range(n):
            for yy in range(h):
                for xx in range(wd):
                    for ky in range(kh):
                        for kx in range(kw):
                            oy, ox = yy * s + ky - pt, xx * s + kx - pl
                            if 0 <= oy < oh and 0 <= ox < ow:
                                out[bi, oy, ox] += w[:, ky, kx, :] @ x[bi, yy, xx]
        return out
    for code, rel in variants("TRANSPOSE_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 2, 2, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((2, 3, 3, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((2,), -1, 1, 0.125, rng=rng))
        # explicit padding 1 on every side, stride 2: out = (2-1)*2 + 3 - 2 = 3
        y = tconv(x, w, b, 2, 1, 1, 3, 3)
        model(f"transpose_conv_2d_{tname(code, rel)}", "TRANSPOSE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(1), i32(1), i32(1), i32(2), i32(2), i32(0), bsc(False)],
              [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 2, 2, 1), -2, 2, rng=rng)
    w = rnd((1, 3, 3, 1), -1, 1, 0.25, rng=rng)
    # implicit SAME, stride 2, output shape 4x4: total pad = (2-1)*2 + 3 - 4 = 1 -> top/left 0, bottom/right 1
    y = tconv(x, w, np.array([0.25]), 2, 0, 0, 4, 4)
    model("transpose_conv_2d_float32_same_output_shape", "TRANSPOSE_CONV_2D",
          [I(T(F32), x), C(T(F32), w), C(T(F32), [0.25]), ci32([1, 4, 4, 1]), i32(1), i32(2), i32(2), i32(0),
           bsc(False)], [O(T(F32), y)])
    # FULLY_CONNECTED: y = x W^T + b
    for code, rel in variants("FULLY_CONNECTED"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((2, 3), -2, 2, rng=rng))
        w = tf.rt(rnd((4, 3), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        model(f"fully_connected_{tname(code, rel)}", "FULLY_CONNECTED", [I(ti, x), C(tf, w), C(tb, b), i32(0)],
              [O(to, x @ w.T + b)], relaxed=rel, types=[code])
    x = rnd((1, 2, 3), -2, 2, rng=rng)  # rank 3: flattened to [2, 3]
    w = rnd((2, 3), -1, 1, 0.25, rng=rng)
    model("fully_connected_float32_rank3_relu", "FULLY_CONNECTED",
          [I(T(F32), x), I(T(F32), w), I(T(F32), [0.5, -0.5]), i32(1)],
          [O(T(F32), np.maximum(x.reshape(2, 3) @ w.T + [0.5, -0.5], 0))])
    # BATCH_MATMUL
    for code, rel in variants("BATCH_MATMUL"):
        t = T(I32) if code == I32 else tq(code)
        to = T(QS, 1.0, 3) if code == QS else t
        a = t.rt(rnd((2, 2, 3), -2, 2, rng=rng))
        bm = t.rt(rnd((2, 3, 2), -2, 2, rng=rng))
        model(f"batch_matmul_{tname(code, rel)}", "BATCH_MATMUL", [I(t, a), I(t, bm), bsc(False), bsc(False)],
              [O(to, a @ bm)], relaxed=rel, types=[code])
    a, bm = rnd((3, 2), rng=rng), rnd((2, 3), rng=rng)
    model("batch_matmul_float32_adjoint", "BATCH_MATMUL", [I(T(F32), a), I(T(F32), bm), bsc(True), bsc(True)],
          [O(T(F32), a.T @ bm.T)])


def pool_ref(x, k, stride, pads, kind):
    n, h, w, c = x.shape
    kh, kw = k
    sh, sw = stride
    t, b, l, r = pads
    oh, ow = (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for yy in range(oh):
        for xx in range(ow):
            y0, x0 = yy * sh - t, xx * sw - l
            win = x[:, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, w), :]
            if kind == "avg":
                out[:, yy, xx] = win.mean(axis=(1, 2))  # padding is not counted
            elif kind == "max":
                out[:, yy, xx] = win.max(axis=(1, 2))
            else:
                out[:, yy, xx] = np.sqrt((win ** 2).mean(axis=(1, 2)))
    return out


def gen_pooling():
    family("pooling")
    rng = np.random.default_rng(10)
    for op, kind in (("AVERAGE_POOL_2D", "avg"), ("MAX_POOL_2D", "max"), ("L2_POOL_2D", "l2")):
        for code, rel in variants(op):
            t = tq(code)
            x = t.rt(rnd((1, 4, 5, 2), -4, 4, rng=rng))
            y = pool_ref(x, (2, 3), (2, 2), (0, 0, 1, 0), kind)
            model(f"{op.lower()}_{tname(code, rel)}_explicit", op,
                  [I(t, x), i32(1), i32(0), i32(0), i32(0), i32(2), i32(2), i32(3), i32(2), i32(0)],
                  [O(t, y)], relaxed=rel, types=[code])
            if code == F16 or rel:
                continue
            pt, pb = same_pads(4, 3, 1)
            pl, pr = same_pads(5, 3, 1)
            y = np.clip(pool_ref(x, (3, 3), (1, 1), (pt, pb, pl, pr), kind), -1, 1)
            model(f"{op.lower()}_{tname(code, rel)}_same_relu1", op,
                  [I(t, x), i32(1), i32(1), i32(1), i32(3), i32(3), i32(2)],
                  [O(t, y)], relaxed=rel, types=[code])
        x = rnd((1, 2, 3, 3), -4, 4, rng=rng)  # NCHW
        y = pool_ref(x.transpose(0, 2, 3, 1), (2, 2), (1, 1), (0, 0, 0, 0), kind)
        model(f"{op.lower()}_float32_nchw", op, [I(T(F32), x), i32(2), i32(1), i32(1), i32(2), i32(2), i32(0),
                                                 bsc(True)], [O(T(F32), y.transpose(0, 3, 1, 2))], at_least=29)
    model("max_pool_2d_float32_bad_filter", "MAX_POOL_2D",
          [I(T(F32), np.zeros((1, 2, 2, 1))), i32(2), i32(1), i32(1), i32(0), i32(0), i32(0)],
          [O(T(F32), np.zeros((1, 2, 2, 1)))], fail=True)


# == normalization, resize ========================================================================

def gen_normalization():
    family("normalization")
    rng = np.random.default_rng(11)
    for code, rel in variants("L2_NORMALIZATION"):
        t = tq(code, scale=0.25) if code in (QA, QS) else T(code)
        to = T(code, 1 / 128, 128 if code == QA else 0) if t.quant else t
        x = t.rt(rnd((1, 1, 2, 4), -3, 3, 0.25, rng))  # rank 4: the only rank before feature level 3
        model(f"l2_normalization_{tname(code, rel)}", "L2_NORMALIZATION", [I(t, x)],
              [O(to, x / np.sqrt((x ** 2).sum(-1, keepdims=True)))], relaxed=rel, types=[code])
    x = rnd((2, 3, 2), -3, 3, 0.25, rng)
    model("l2_normalization_float32_axis1", "L2_NORMALIZATION", [I(T(F32), x), i32(1)],
          [O(T(F32), x / np.sqrt((x ** 2).sum(1, keepdims=True)))], at_least=29)
    # LRN: x / (bias + alpha * sum_{d-r..d+r} x^2) ^ beta
    def lrn(x, r, bias, alpha, beta, axis=-1):
        x = np.moveaxis(x, axis, -1)
        sq = np.zeros_like(x)
        c = x.shape[-1]
        for d in range(c):
            sq[..., d] = (x[..., max(0, d - r):min(c, d + r + 1)] ** 2).sum(-1)
        return np.moveaxis(x / (bias + alpha * sq) ** beta, -1, axis)
    for code, rel in variants("LOCAL_RESPONSE_NORMALIZATION"):
        t = T(code)
        x = rnd((1, 1, 2, 5), -2, 2, 0.25, rng)
        model(f"local_response_normalization_{tname(code, rel)}", "LOCAL_RESPONSE_NORMALIZATION",
              [I(t, x), i32(1), fsc(t, 1.0), fsc(t, 0.5), fsc(t, 0.75)], [O(t, lrn(x, 1, 1.0, 0.5, 0.75))],
              relaxed=rel, types=[code])
    x = rnd((1, 4, 2), -2, 2, 0.25, rng)
    model("local_response_normalization_float32_axis1", "LOCAL_RESPONSE_NORMALIZATION",
          [I(T(F32), x), i32(2), fsc(F32, 2.0), fsc(F32, 0.25), fsc(F32, 0.5), i32(1)],
          [O(T(F32), lrn(x, 2, 2.0, 0.25, 0.5, axis=1))], at_least=29)
    # INSTANCE_NORMALIZATION: per (batch, channel) over H, W; gamma * (x - mean) / sqrt(var + eps) + beta
    for code, rel in variants("INSTANCE_NORMALIZATION"):
        t = T(code)
        x = rnd((2, 2, 2, 2), -2, 2, 0.25, rng)
        m, v = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
        y = 1.5 * (x - m) / np.sqrt(v + 0.01) + 0.25
        model(f"instance_normalization_{tname(code, rel)}", "INSTANCE_NORMALIZATION",
              [I(t, x), fsc(t, 1.5), fsc(t, 0.25), fsc(t, 0.01), bsc(False)], [O(t, y)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("instance_normalization_float32_nchw", "INSTANCE_NORMALIZATION",
                  [I(t, x.transpose(0, 3, 1, 2)), fsc(t, 1.5), fsc(t, 0.25), fsc(t, 0.01), bsc(True)],
                  [O(t, y.transpose(0, 3, 1, 2))])


def resize_ref(x, oh, ow, kind, align=False, half=False):
    n, h, w, c = x.shape
    def scale(i, o):
        return (i - 1) / (o - 1) if align and o > 1 else i / o
    sy, sx = scale(h, oh), scale(w, ow)
    out = np.zeros((n, oh, ow, c))
    for yy in range(oh):
        for xx in range(ow):
            if kind == "nearest":
                if align:
                    iy, ix = min(int(rha(yy * sy)), h - 1), min(int(rha(xx * sx)), w - 1)
                else:
                    off = 0.5 if half else 0.0
                    iy, ix = min(int(math.floor((yy + off) * sy)), h - 1), min(int(math.floor((xx + off) * sx)), w - 1)
                out[:, yy, xx] = x[:, iy, ix]
            else:
                fy = (yy + 0.5) * sy - 0.5 if half else yy * sy
                fx = (xx + 0.5) * sx - 0.5 if half else xx * sx
                fy, fx = max(fy, 0.0), max(fx, 0.0)
                y0, x0 = int(math.floor(fy)), int(math.floor(fx))
                y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                dy, dx = fy - y0, fx - x0
                out[:, yy, xx] = (x[:, y0, x0] * (1 - dy) * (1 - dx) + x[:, y0, x1] * (1 - dy) * dx +
                                  x[:, y1, x0] * dy * (1 - dx) + x[:, y1, x1] * dy * dx)
    return out


def gen_resize():
    family("resize")
    rng = np.random.default_rng(12)
    for code, rel in variants("RESIZE_BILINEAR"):
        t = tq(code)
        x = t.rt(rnd((1, 2, 3, 2), -4, 4, rng=rng))
        # out height 3, width 5 (inputs: width first, then height)
        model(f"resize_bilinear_{tname(code, rel)}", "RESIZE_BILINEAR", [I(t, x), i32(5), i32(3)],
              [O(t, resize_ref(x, 3, 5, "bilinear"))], relaxed=rel, types=[code])
        model(f"resize_nearest_neighbor_{tname(code, rel)}", "RESIZE_NEAREST_NEIGHBOR",
              [I(t, x), i32(5), i32(3), bsc(False)], [O(t, resize_ref(x, 3, 5, "nearest"))], relaxed=rel,
              types=[code])
        if code == F16 or rel:
            continue
        model(f"resize_bilinear_{tname(code, rel)}_half_pixel", "RESIZE_BILINEAR",
              [I(t, x), i32(4), i32(4), bsc(False), bsc(False), bsc(True)],
              [O(t, resize_ref(x, 4, 4, "bilinear", half=True))], relaxed=rel, types=[code], at_least=30)
        model(f"resize_nearest_neighbor_{tname(code, rel)}_align_corners", "RESIZE_NEAREST_NEIGHBOR",
              [I(t, x), i32(4), i32(3), bsc(False), bsc(True), bsc(False)],
              [O(t, resize_ref(x, 3, 4, "nearest", align=True))], relaxed=rel, types=[code], at_least=30)
    x = rnd((1, 3, 3, 1), -4, 4, rng=rng)
    model("resize_bilinear_float32_align_corners", "RESIZE_BILINEAR",
          [I(T(F32), x), i32(5), i32(2), bsc(False), bsc(True), bsc(False)],
          [O(T(F32), resize_ref(x, 2, 5, "bilinear", align=True))], at_least=30)
    model("resize_bilinear_float32_nchw_scales", "RESIZE_BILINEAR",
          [I(T(F32), x.transpose(0, 3, 1, 2)), fsc(F32, 2.0), fsc(F32, 1.5), bsc(True)],
          [O(T(F32), resize_ref(x, 4, 6, "bilinear").transpose(0, 3, 1, 2))], at_least=29)
    model("resize_nearest_neighbor_float32_half_pixel", "RESIZE_NEAREST_NEIGHBOR",
          [I(T(F32), x), i32(2), i32(5), bsc(False), bsc(False), bsc(True)],
          [O(T(F32), resize_ref(x, 5, 2, "nearest", half=True))], at_least=30)
    model("resize_bilinear_float32_bad_align_half", "RESIZE_BILINEAR",  # align_corners and half_pixel: invalid
          [I(T(F32), x), i32(5), i32(2), bsc(False), bsc(True), bsc(True)],
          [O(T(F32), np.zeros((1, 2, 5, 1)))], fail=True)
