"""Data movement and shapes, space/depth/batch rearrangements, reductions and arg ops, casts and
quantization, lookups."""
from __future__ import annotations

import numpy as np

from .common import (B8, F16, F32, I32, NONE, Q8S, Q16A, Q16S, QA, QPC, QS, C, Graph, I, O, Spec, T, bsc, ci32, emit,
                     family, fsc, i32, model, rnd, short, tname, tq, variants)


def movement_types(op, relaxed_too=False):
    """(T, relaxed) for data-movement ops: quant types keep their scale / zero point. No relaxed
    variant unless asked: relaxed precision does not matter when values are only moved."""
    out = []
    for code, relaxed in variants(op):
        if relaxed and not relaxed_too:
            continue
        out.append((T(I32) if code == I32 else tq(code), relaxed))
    return out


def gen_shapes():
    family("shapes")
    rng = np.random.default_rng(5)
    for t, rel in movement_types("RESHAPE"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"reshape_{tname(t.code, rel)}", "RESHAPE", [I(t, x), ci32([3, -1])], [O(t, x.reshape(3, 2))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("SQUEEZE"):
        x = t.rt(rnd((1, 3, 1, 2), rng=rng))
        model(f"squeeze_{tname(t.code, rel)}", "SQUEEZE", [I(t, x), ci32([0, 2])], [O(t, x.reshape(3, 2))],
              relaxed=rel, types=[t.code])
    x = rnd((1, 2, 1), rng=rng)
    model("squeeze_float32_all", "SQUEEZE", [I(T(F32), x), NONE(I32)], [O(T(F32), x.reshape(2))], at_least=28)
    for t, rel in movement_types("EXPAND_DIMS"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"expand_dims_{tname(t.code, rel)}", "EXPAND_DIMS", [I(t, x), i32(-1)], [O(t, x.reshape(2, 3, 1))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("TRANSPOSE"):
        x = t.rt(rnd((2, 3, 4), rng=rng))
        model(f"transpose_{tname(t.code, rel)}", "TRANSPOSE", [I(t, x), ci32([2, 0, 1])],
              [O(t, x.transpose(2, 0, 1))], relaxed=rel, types=[t.code])
    x = rnd((2, 3), rng=rng)
    model("transpose_float32_default_perm", "TRANSPOSE", [I(T(F32), x), NONE(I32)], [O(T(F32), x.T)])
    for t, rel in movement_types("CONCATENATION"):
        a, b = t.rt(rnd((2, 2), rng=rng)), t.rt(rnd((2, 3), rng=rng))
        model(f"concatenation_{tname(t.code, rel)}", "CONCATENATION", [I(t, a), I(t, b), i32(1)],
              [O(t, np.concatenate([a, b], 1))], relaxed=rel, types=[t.code])
    for code in (QA, QS):  # differing input scales (feature level 4 for asymm)
        ta, tb, to = T(code, 0.5, 10), T(code, 0.25, 3), T(code, 0.25, 0)
        a, b = ta.rt(rnd((1, 3), -4, 4, rng=rng)), tb.rt(rnd((2, 3), -4, 4, rng=rng))
        model(f"concatenation_{short(code).lower()}_scales", "CONCATENATION", [I(ta, a), I(tb, b), i32(0)],
              [O(to, np.concatenate([a, b], 0))], at_least=29)
    for t, rel in movement_types("SPLIT"):
        x = t.rt(rnd((2, 6), rng=rng))
        parts = np.split(x, 3, axis=1)
        model(f"split_{tname(t.code, rel)}", "SPLIT", [I(t, x), i32(1), i32(3)], [O(t, p) for p in parts],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("SLICE"):
        x = t.rt(rnd((3, 4), rng=rng))
        model(f"slice_{tname(t.code, rel)}", "SLICE", [I(t, x), ci32([1, 1]), ci32([2, -1])],
              [O(t, x[1:3, 1:])], relaxed=rel, types=[t.code])
    for t, rel in movement_types("STRIDED_SLICE"):
        x = t.rt(rnd((3, 5), rng=rng))
        # begin [2, 0], end [0, 5], strides [-1, 2], no masks; then shrink axis 0 in a second model
        model(f"strided_slice_{tname(t.code, rel)}", "STRIDED_SLICE",
              [I(t, x), ci32([2, 0]), ci32([0, 5]), ci32([-1, 2]), i32(0), i32(0), i32(0)],
              [O(t, x[2:0:-1, 0:5:2])], relaxed=rel, types=[t.code])
    x = rnd((3, 4), rng=rng)
    model("strided_slice_float32_masks", "STRIDED_SLICE",
          [I(T(F32), x), ci32([1, 0]), ci32([2, 1]), ci32([1, -1]), i32(2), i32(0), i32(1)],
          [O(T(F32), x[1, 3:1:-1])], at_least=28)  # begin_mask bit 1: axis 1 starts at its last element (stride < 0)
    for t, rel in movement_types("TILE"):
        x = t.rt(rnd((2, 2), rng=rng))
        model(f"tile_{tname(t.code, rel)}", "TILE", [I(t, x), ci32([2, 3])], [O(t, np.tile(x, (2, 3)))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("REVERSE"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"reverse_{tname(t.code, rel)}", "REVERSE", [I(t, x), ci32([1])], [O(t, x[:, ::-1])],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("PACK"):
        a, b, c = (t.rt(rnd((2, 2), rng=rng)) for _ in range(3))
        model(f"pack_{tname(t.code, rel)}", "PACK", [i32(1), I(t, a), I(t, b), I(t, c)],
              [O(t, np.stack([a, b, c], 1))], relaxed=rel, types=[t.code])
    for t, rel in movement_types("GATHER"):
        x = t.rt(rnd((3, 4), rng=rng))
        idx = np.array([[2, 0], [1, 2]])
        model(f"gather_{tname(t.code, rel)}", "GATHER", [I(t, x), i32(1), I(T(I32), idx)],
              [O(t, np.take(x, idx, axis=1))], relaxed=rel, types=[t.code])
    model("gather_float32_bad_index", "GATHER", [I(T(F32), [1.0, 2.0]), i32(0), C(T(I32), [2])],
          [O(T(F32), [0.0])], fail=True)
    # PAD (pads with the zero point, i.e. real 0.0), PAD_V2 (explicit pad value), MIRROR_PAD
    for t, rel in movement_types("PAD"):
        x = t.rt(rnd((1, 2, 3), rng=rng))
        pads = [[0, 0], [1, 0], [2, 1]]
        model(f"pad_{tname(t.code, rel)}", "PAD", [I(t, x), ci32(pads)], [O(t, np.pad(x, pads))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("PAD_V2"):
        x = t.rt(rnd((2, 2), rng=rng))
        pads = [[1, 1], [0, 2]]
        if t.quant:
            pv, real = i32(t.zp + 3), 1.5
        else:
            pv, real = fsc(t, -2.5), -2.5
        model(f"pad_v2_{tname(t.code, rel)}", "PAD_V2", [I(t, x), ci32(pads), pv],
              [O(t, np.pad(x, pads, constant_values=real))], relaxed=rel, types=[t.code])
    for t, rel in movement_types("MIRROR_PAD"):
        x = t.rt(rnd((2, 3), rng=rng))
        pads = [[1, 1], [2, 1]]
        model(f"mirror_pad_{tname(t.code, rel)}_reflect", "MIRROR_PAD", [I(t, x), ci32(pads), i32(0)],
              [O(t, np.pad(x, pads, mode="reflect"))], relaxed=rel, types=[t.code])
        if t.code in (F16, I32):
            continue
        model(f"mirror_pad_{tname(t.code, rel)}_symmetric", "MIRROR_PAD", [I(t, x), ci32(pads), i32(1)],
              [O(t, np.pad(x, pads, mode="symmetric"))], relaxed=rel, types=[t.code])
    # invalid: the paddings tensor must have shape [rank(input), 2]
    model("pad_float32_bad_paddings_shape", "PAD", [I(T(F32), [1.0, 2.0]), ci32([[1, 0, 0]])],
          [O(T(F32), [0.0, 1.0, 2.0])], fail=True)
    # RANK: a scalar INT32 output
    for code in (F32, F16, I32, QA, QS, B8, Q8S, Q16A, Q16S):
        t = tq(code)
        x = np.zeros((2, 1, 3)) if code != B8 else np.zeros((2, 1, 3), bool)
        g = Graph()
        g.op("RANK", [I(t, x)], [Spec("SUBGRAPH_OUTPUT", "INT32", [], [3])])
        emit(f"rank_{short(code).lower()}", 30, g)
    g = Graph()
    g.op("RANK", [I(T(QPC, 0.0, 0, ([0.5, 0.25], 1)), stored=np.zeros((3, 2), np.int64))],
         [Spec("SUBGRAPH_OUTPUT", "INT32", [], [2])])
    emit("rank_quant8_symm_per_channel", 30, g)
    # FILL: dims tensor + scalar value
    for code, sc in ((F32, "FLOAT32"), (F16, "FLOAT16"), (I32, "INT32")):
        v = 1.5 if code != I32 else -7
        model(f"fill_{short(code).lower()}", "FILL", [I(T(I32), [2, 3]), Spec("CONSTANT_COPY", sc, [], [v])],
              [O(T(code), np.full((2, 3), v))], level=30)


def gen_space():
    family("space")
    rng = np.random.default_rng(6)
    for t, rel in movement_types("DEPTH_TO_SPACE"):
        x = t.rt(rnd((1, 2, 2, 8), rng=rng))
        n, h, w, c = x.shape
        b = 2
        y = x.reshape(n, h, w, b, b, c // 4).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, c // 4)
        model(f"depth_to_space_{tname(t.code, rel)}", "DEPTH_TO_SPACE", [I(t, x), i32(2)], [O(t, y)],
              relaxed=rel, types=[t.code])
        model(f"space_to_depth_{tname(t.code, rel)}", "SPACE_TO_DEPTH", [I(t, y), i32(2)], [O(t, x)],
              relaxed=rel, types=[t.code])
        if t.code == F32 and not rel:  # NCHW layout (feature level 3)
            model("depth_to_space_float32_nchw", "DEPTH_TO_SPACE", [I(t, x.transpose(0, 3, 1, 2)), i32(2), bsc(True)],
                  [O(t, y.transpose(0, 3, 1, 2))], at_least=29)
            model("space_to_depth_float32_nchw", "SPACE_TO_DEPTH", [I(t, y.transpose(0, 3, 1, 2)), i32(2), bsc(True)],
                  [O(t, x.transpose(0, 3, 1, 2))], at_least=29)
    for t, rel in movement_types("BATCH_TO_SPACE_ND"):
        # input batch 4 = 2x2 blocks of a [1, 4, 4, 1] image
        img = t.rt(rnd((1, 4, 4, 2), rng=rng))
        blocks = np.stack([img[0, i::2, j::2, :] for i in range(2) for j in range(2)])  # [4, 2, 2, 2]
        model(f"batch_to_space_nd_{tname(t.code, rel)}", "BATCH_TO_SPACE_ND", [I(t, blocks), ci32([2, 2])],
              [O(t, img)], relaxed=rel, types=[t.code])
        # SPACE_TO_BATCH_ND with padding: pad width 3 -> 4 on the right
        img3 = t.rt(rnd((1, 2, 3, 1), rng=rng))
        padded = np.pad(img3, [[0, 0], [0, 0], [0, 1], [0, 0]])
        sb = np.stack([padded[0, i::1, j::2, :] for i in range(1) for j in range(2)])  # block [1, 2]
        model(f"space_to_batch_nd_{tname(t.code, rel)}", "SPACE_TO_BATCH_ND",
              [I(t, img3), ci32([1, 2]), ci32([[0, 0], [0, 1]])], [O(t, sb)], relaxed=rel, types=[t.code])
    x = rnd((1, 2, 4, 4), rng=rng)  # NCHW
    blocks = np.stack([x[0, :, i::2, j::2] for i in range(2) for j in range(2)])
    model("space_to_batch_nd_float32_nchw", "SPACE_TO_BATCH_ND", [I(T(F32), x), ci32([2, 2]), ci32([[0, 0], [0, 0]]),
                                                                 bsc(True)], [O(T(F32), blocks)], at_least=29)
    model("batch_to_space_nd_float32_nchw", "BATCH_TO_SPACE_ND", [I(T(F32), blocks), ci32([2, 2]), bsc(True)],
          [O(T(F32), x)], at_least=29)
    # CHANNEL_SHUFFLE: reshape channels to [groups, C/groups], transpose, flatten
    for t, rel in movement_types("CHANNEL_SHUFFLE"):
        x = t.rt(rnd((2, 6), rng=rng))
        y = x.reshape(2, 2, 3).transpose(0, 2, 1).reshape(2, 6)
        model(f"channel_shuffle_{tname(t.code, rel)}", "CHANNEL_SHUFFLE", [I(t, x), i32(2), i32(-1)], [O(t, y)],
              relaxed=rel, types=[t.code])
    x = rnd((1, 6, 2), rng=rng)
    model("channel_shuffle_float32_axis1", "CHANNEL_SHUFFLE", [I(T(F32), x), i32(3), i32(1)],
          [O(T(F32), x.reshape(1, 3, 2, 2).transpose(0, 2, 1, 3).reshape(1, 6, 2))])


# == reductions, arg ops, casts, lookups ==========================================================

def gen_reductions():
    family("reductions")
    rng = np.random.default_rng(7)
    for t, rel in movement_types("MEAN", True):
        x = t.rt(rnd((2, 3, 2), rng=rng))
        model(f"mean_{tname(t.code, rel)}", "MEAN", [I(t, x), ci32([1]), i32(0)], [O(t, x.mean(axis=1))],
              relaxed=rel, types=[t.code])
    x = rnd((2, 3, 2), rng=rng)
    model("mean_float32_keepdims_neg_axes", "MEAN", [I(T(F32), x), ci32([-1, 0]), i32(1)],
          [O(T(F32), x.mean(axis=(0, 2), keepdims=True))], at_least=28)
    fns = {"REDUCE_SUM": np.sum, "REDUCE_PROD": np.prod, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min}
    for op, fn in fns.items():
        for t, rel in movement_types(op, op in ("REDUCE_SUM", "REDUCE_PROD")):
            x = t.rt(rnd((2, 3), -2, 2, rng=rng))
            model(f"{op.lower()}_{tname(t.code, rel)}", op, [I(t, x), ci32([1]), bsc(False)], [O(t, fn(x, axis=1))],
                  relaxed=rel, types=[t.code])
        x = rnd((2, 2, 2), -2, 2, rng=rng)
        model(f"{op.lower()}_float32_keepdims", op, [I(T(F32), x), ci32([0, -1]), bsc(True)],
              [O(T(F32), fn(x, axis=(0, 2), keepdims=True))])
    b = np.array([[True, False, True], [True, True, True]])
    for op, fn in (("REDUCE_ALL", np.all), ("REDUCE_ANY", np.any)):
        model(f"{op.lower()}_bool8", op, [I(T(B8), b), ci32([1]), bsc(False)], [O(T(B8), fn(b, axis=1))])
        model(f"{op.lower()}_bool8_axis0_keep", op, [I(T(B8), b), ci32([0]), bsc(True)],
              [O(T(B8), fn(b, axis=0, keepdims=True))])
    for op, fn in (("ARGMAX", np.argmax), ("ARGMIN", np.argmin)):
        for t, rel in movement_types(op):
            x = np.array([[1.0, 3.5, -2.0, 0.5], [-1.5, 0.0, 2.0, 4.0], [2.5, -3.0, 1.5, -0.5]])
            if t.code == I32:
                x = x * 2
            model(f"{op.lower()}_{tname(t.code, rel)}", op, [I(t, x), i32(1)], [O(T(I32), fn(x, axis=1))],
                  relaxed=rel, types=[t.code])
            model(f"{op.lower()}_{tname(t.code, rel)}_axis0", op, [I(t, x), i32(0)], [O(T(I32), fn(x, axis=0))],
                  relaxed=rel, types=[t.code])
    for t, rel in movement_types("TOPK_V2"):
        x = np.array([[1.0, 3.5, -2.0, 0.5, 2.0], [-1.5, 0.0, 2.5, 4.0, -3.0]])
        order = np.argsort(-x, axis=1, kind="stable")[:, :3]
        model(f"topk_v2_{tname(t.code, rel)}", "TOPK_V2", [I(t, x), i32(3)],
              [O(t, np.take_along_axis(x, order, 1)), O(T(I32), order)], relaxed=rel, types=[t.code])


def gen_conversions():
    family("conversions")
    # CAST: numeric conversion of the stored values (quantization parameters are ignored),
    # saturating at the output type's range; float -> integer on integral values only.
    vals = {F32: np.array([1.0, -2.0, 3.0, 100.0, 0.0, 7.0]), F16: np.array([1.0, -2.0, 3.0, 100.0, 0.0, 7.0]),
            I32: np.array([1, -2, 3, 100, 0, 7]), QA: np.array([1, 0, 3, 100, 255, 7])}
    for src in (F32, F16, I32, QA):
        for dst in (F32, F16, I32, QA):
            ts, td = (T(c, 0.5, 3) if c == QA else T(c) for c in (src, dst))
            x = vals[src]
            y = x.astype(np.float64)
            if dst == QA:
                y = np.clip(y, 0, 255)
            model(f"cast_{short(src).lower()}_to_{short(dst).lower()}", "CAST",
                  [I(ts, stored=x)], [O(td, stored=y)], level=29)
    # feature level 4: identity casts of the newly allowed types
    for code, x in ((B8, [True, False, True]), (Q16A, [0, 100, 65535]), (Q16S, [-32768, 5, 32767]),
                    (QS, [-128, 0, 127]), (Q8S, [-128, 1, 127])):
        t = tq(code)
        model(f"cast_{short(code).lower()}_identity", "CAST", [I(t, stored=np.array(x))],
              [O(t, stored=np.array(x))], level=30)
    # QUANTIZE: round(x / scale) + zero_point, clamped (values away from .5 ties)
    x = np.array([-10.3, -1.2, 0.0, 0.7, 3.3, 60.2, 100.0, -70.0])
    for src, dst, lv in ((F32, QA, 29), (F16, QA, 29), (F32, QS, 30), (F16, QS, 30)):
        to = T(dst, 0.5, 120 if dst == QA else -3)
        model(f"quantize_{short(src).lower()}_to_{short(dst).lower()}", "QUANTIZE", [I(T(src), x)],
              [O(to, T(src).rt(x))], level=lv)
    # DEQUANTIZE: (q - zero_point) * scale
    for src, dst, lv in ((QA, F32, 27), (QA, F16, 29), (Q8S, F32, 29), (Q8S, F16, 29), (QS, F32, 30),
                         (QS, F16, 30)):
        ti = T(src, 0.25, 0 if src == Q8S else (100 if src == QA else -5))
        q = np.array([0, 1, 50, 127, -128, -1]) if src != QA else np.array([0, 1, 100, 127, 255, 200])
        model(f"dequantize_{short(src).lower()}_to_{short(dst).lower()}", "DEQUANTIZE", [I(ti, stored=q)],
              [O(T(dst), ti.dec(q))], level=lv)
    model("dequantize_quant8_asymm_relaxed", "DEQUANTIZE", [I(T(QA, 0.5, 10), stored=np.array([0, 10, 20, 255]))],
          [O(T(F32), [-5.0, 0.0, 5.0, 122.5])], level=28, relaxed=True)
    scales = [0.5, 0.25, 2.0]
    tpc = T(QPC, 0.0, 0, (scales, 1))
    q = np.array([[1, -2, 3], [127, -128, 0]])
    for dst in (F32, F16):
        model(f"dequantize_quant8_symm_per_channel_to_{short(dst).lower()}", "DEQUANTIZE", [I(tpc, stored=q)],
              [O(T(dst), q * np.array(scales))], level=29)


def gen_lookups():
    family("lookups")
    rng = np.random.default_rng(8)
    for code in (F32, I32, QA, QS, F16):
        t = T(I32) if code == I32 else tq(code)
        values = t.rt(rnd((4, 2, 2), rng=rng))
        lk = np.array([2, 0, 2])
        model(f"embedding_lookup_{short(code).lower()}", "EMBEDDING_LOOKUP", [I(T(I32), lk), I(t, values)],
              [O(t, values[lk])], types=[code])
    model("embedding_lookup_float32_relaxed", "EMBEDDING_LOOKUP",
          [I(T(I32), [1]), I(T(F32), [[1.0, 2.0], [3.0, 4.0]])], [O(T(F32), [[3.0, 4.0]])], relaxed=True)
    # HASHTABLE_LOOKUP: output row i = values[j] where keys[j] == lookups[i], else zeros; hits 1/0
    for code in (F32, I32, QA):
        # quant: zero point 0, so "filled with zeros" means the same for stored and real values
        t = T(I32) if code == I32 else T(code) if code == F32 else T(code, 0.5, 0)
        keys = np.array([-3, 1, 7, 20])
        values = t.rt(rnd((4, 2), 0, 4, rng=rng))
        lk = np.array([7, 2, -3, 20])
        out = np.zeros((4, 2))
        hits = np.zeros(4)
        for i, k in enumerate(lk):
            if k in keys:
                out[i] = values[list(keys).index(k)]
                hits[i] = 1
        model(f"hashtable_lookup_{short(code).lower()}", "HASHTABLE_LOOKUP",
              [I(T(I32), lk), I(T(I32), keys), I(t, values)],
              [O(t, out), O(T(QA, 1.0, 0), hits)], level=27)
