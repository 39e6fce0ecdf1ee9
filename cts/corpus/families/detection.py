"""Detection and ROI operations, and LSH_PROJECTION."""
from __future__ import annotations

import math

import numpy as np

from .common import (F16, F32, I32, NONE, Q16A, Q16S, QA, QS, C, I, O, T, bsc, family, fsc, i32, model, rha, rnd, short,
                     tname, variants)


def bbox_apply(roi, d, img_h, img_w):
    """NNAPI box transform: roi (x1, y1, x2, y2), delta (dx, dy, dw, dh); clipped to the image."""
    w, h = roi[2] - roi[0], roi[3] - roi[1]
    cx, cy = roi[0] + 0.5 * w + d[0] * w, roi[1] + 0.5 * h + d[1] * h
    nw, nh = w * math.exp(d[2]), h * math.exp(d[3])
    return [min(max(cx - nw / 2, 0), img_w), min(max(cy - nh / 2, 0), img_h),
            min(max(cx + nw / 2, 0), img_w), min(max(cy + nh / 2, 0), img_h)]


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def det_types(code):
    """(data type, box type, score type) per detection-op tensor type."""
    if code == QA:
        return T(QA, 0.125, 128), T(Q16A, 0.125, 0), T(QA, 1 / 128, 0)
    if code == QS:
        return T(QS, 0.125, 0), T(Q16A, 0.125, 0), T(QS, 1 / 128, -128)
    return T(code), T(code), T(code)


def gen_detection():
    family("detection")
    # AXIS_ALIGNED_BBOX_TRANSFORM
    rois = np.array([[1.0, 2.0, 9.0, 6.0], [0.0, 0.0, 4.0, 4.0], [4.0, 4.0, 12.0, 14.0]])
    deltas = np.array([[0.25, -0.125, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
                       [0.125, 0.25, -0.25, 0.25, -0.5, -0.5, 0.0, 0.0],
                       [0.5, 0.5, 0.0, 0.25, 0.0, 0.0, 0.5, 0.5]])
    batch = np.array([0, 1, 1])
    info = np.array([[16.0, 16.0], [15.0, 12.0]])  # (height, width)
    out = np.array([[c for k in range(2) for c in bbox_apply(rois[i], deltas[i, 4 * k:4 * k + 4], *info[batch[i]])]
                    for i in range(3)])
    for code, rel in variants("AXIS_ALIGNED_BBOX_TRANSFORM") + [(Q16A, False)]:
        if code in (QA, QS, I32):
            continue
        if code == Q16A:
            tb, td = T(Q16A, 0.125, 0), T(QA, 0.0625, 128)
        else:
            tb = td = T(code)
        model(f"axis_aligned_bbox_transform_{tname(code, rel)}", "AXIS_ALIGNED_BBOX_TRANSFORM",
              [I(tb, rois), I(td, deltas), I(T(I32), batch), I(tb, info)], [O(tb, out)], relaxed=rel,
              level=29 if code != Q16A else 29)
    # ROI_ALIGN: average of sampling-point bilinear samples per output bin
    def roi_align(x, rois, bidx, oh, ow, hr, wr, sh, sw):
        n, h, w, c = x.shape
        out = np.zeros((len(rois), oh, ow, c))
        for r, roi in enumerate(rois):
            x1, y1, x2, y2 = roi[0] / wr, roi[1] / hr, roi[2] / wr, roi[3] / hr
            rw, rh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
            bw, bh = rw / ow, rh / oh
            for i in range(oh):
                for j in range(ow):
                    acc = np.zeros(c)
                    for yi in range(sh):
                        for xi in range(sw):
                            yy = y1 + i * bh + (yi + 0.5) * bh / sh
                            xx = x1 + j * bw + (xi + 0.5) * bw / sw
                            yy, xx = max(yy, 0.0), max(xx, 0.0)
                            y0, x0 = int(math.floor(yy)), int(math.floor(xx))
                            dy, dx = yy - y0, xx - x0
                            if y0 >= h - 1:
                                y0, dy = h - 1, 0.0
                            if x0 >= w - 1:
                                x0, dx = w - 1, 0.0
                            y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                            img = x[bidx[r]]
                            acc += (img[y0, x0] * (1 - dy) * (1 - dx) + img[y0, x1_] * (1 - dy) * dx +
                                    img[y1_, x0] * dy * (1 - dx) + img[y1_, x1_] * dy * dx)
                    out[r, i, j] = acc / (sh * sw)
        return out

    def roi_pool(x, rois, bidx, oh, ow, hr, wr):
        n, h, w, c = x.shape
        out = np.zeros((len(rois), oh, ow, c))
        for r, roi in enumerate(rois):
            x1, y1 = int(rha(roi[0] / wr)), int(rha(roi[1] / hr))
            x2, y2 = int(rha(roi[2] / wr)), int(rha(roi[3] / hr))
            rw, rh = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
            bw, bh = rw / ow, rh / oh
            for i in range(oh):
                for j in range(ow):
                    hs, he = int(math.floor(i * bh)) + y1, int(math.ceil((i + 1) * bh)) + y1
                    ws, we = int(math.floor(j * bw)) + x1, int(math.ceil((j + 1) * bw)) + x1
                    hs, he, ws, we = min(max(hs, 0), h), min(max(he, 0), h), min(max(ws, 0), w), min(max(we, 0), w)
                    win = x[bidx[r], hs:he, ws:we]
                    out[r, i, j] = win.max(axis=(0, 1)) if win.size else 0
        return out
    rng = np.random.default_rng(15)
    for code, rel in variants("ROI_ALIGN"):
        tx, tb, _ = det_types(code)
        x = tx.rt(rnd((2, 4, 4, 2), -4, 4, 0.25, rng))
        rois = np.array([[0.0, 0.0, 4.0, 4.0], [2.0, 2.0, 8.0, 8.0], [1.0, 3.0, 5.0, 6.0]])
        bidx = np.array([0, 1, 0])
        y = roi_align(x, rois, bidx, 2, 2, 2.0, 2.0, 2, 2)
        model(f"roi_align_{tname(code, rel)}", "ROI_ALIGN",
              [I(tx, x), I(tb, rois), C(T(I32), bidx), i32(2), i32(2), fsc(tx, 2.0), fsc(tx, 2.0), i32(2), i32(2),
               bsc(False)], [O(tx, y)], relaxed=rel, types=[code])
        rois_p = np.array([[0.0, 0.0, 6.0, 6.0], [2.0, 0.0, 6.0, 2.0]])
        bidx_p = np.array([1, 0])
        y = roi_pool(x, rois_p, bidx_p, 2, 2, 2.0, 2.0)
        model(f"roi_pooling_{tname(code, rel)}", "ROI_POOLING",
              [I(tx, x), I(tb, rois_p), C(T(I32), bidx_p), i32(2), i32(2), fsc(tx, 2.0), fsc(tx, 2.0), bsc(False)],
              [O(tx, y)], relaxed=rel, types=[code])
    # HEATMAP_MAX_KEYPOINT: a peak with a symmetric 3x3 neighbourhood (zero gradient: no sub-pixel
    # shift, score = peak value); keypoint = box start + (index + 0.5) * box size / heatmap size
    hm = np.zeros((2, 4, 4, 2))
    peaks = {(0, 0): (1, 2, 0.75), (0, 1): (2, 1, 0.5), (1, 0): (2, 2, 0.875), (1, 1): (1, 1, 0.625)}
    for (b, k), (py, px, v) in peaks.items():
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                hm[b, py + dy, px + dx, k] = v * (1.0 if dy == dx == 0 else 0.5 if dy == 0 or dx == 0 else 0.25)
    boxes = np.array([[2.0, 4.0, 10.0, 12.0], [0.0, 0.0, 16.0, 8.0]])
    scores = np.zeros((2, 2))
    kps = np.zeros((2, 2, 2))
    for (b, k), (py, px, v) in peaks.items():
        scores[b, k] = v
        kps[b, k] = [boxes[b, 0] + (px + 0.5) * (boxes[b, 2] - boxes[b, 0]) / 4,
                     boxes[b, 1] + (py + 0.5) * (boxes[b, 3] - boxes[b, 1]) / 4]
    for code, rel in variants("HEATMAP_MAX_KEYPOINT"):
        if code in (QA, QS):
            th, tb, ts = T(code, 1 / 128, 0 if code == QA else -128), T(Q16A, 0.125, 0), \
                T(code, 1 / 128, 0 if code == QA else -128)
        else:
            th = tb = ts = T(code)
        model(f"heatmap_max_keypoint_{tname(code, rel)}", "HEATMAP_MAX_KEYPOINT",
              [I(th, hm), I(tb, boxes), bsc(False)], [O(ts, scores), O(tb, kps)], relaxed=rel, types=[code])
    model("heatmap_max_keypoint_float32_nchw", "HEATMAP_MAX_KEYPOINT",
          [I(T(F32), hm.transpose(0, 3, 1, 2)), I(T(F32), boxes), bsc(True)], [O(T(F32), scores), O(T(F32), kps)])
    # BOX_WITH_NMS_LIMIT, hard NMS, one foreground class (class 0 is background): box B overlaps
    # A with IoU 81/119 > 0.5 and is suppressed; D is below the score threshold.
    A, B, Cb, D = [0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0], [0.0, 20.0, 8.0, 28.0]
    assert iou(A, B) > 0.5 and iou(A, Cb) == 0
    sc = np.array([[0.125, 0.875], [0.25, 0.75], [0.0, 0.625], [0.5, 0.25], [0.0, 0.5]])
    bx = np.array([[0.0] * 4 + A, [0.0] * 4 + B, [0.0] * 4 + Cb, [0.0] * 4 + D, [0.0] * 4 + A])
    bsplit = np.array([0, 0, 0, 0, 1])
    for code, rel in variants("BOX_WITH_NMS_LIMIT"):
        _, tb, ts = det_types(code)
        if code in (QA, QS):
            tb = T(Q16A, 0.125, 0)
        model(f"box_with_nms_limit_{tname(code, rel)}", "BOX_WITH_NMS_LIMIT",
              [I(ts, sc), I(tb, bx), I(T(I32), bsplit), fsc(ts, 0.375), i32(-1), i32(0), fsc(ts, 0.5),
               fsc(ts, 1.0), fsc(ts, 0.375)],
              [O(ts, [0.875, 0.625, 0.5]), O(tb, [A, Cb, A]), O(T(I32), [1, 1, 1]), O(T(I32), [0, 0, 1])],
              relaxed=rel, types=[code])
    # GENERATE_PROPOSALS: 1x2 feature map, one anchor; anchor shifted by (w * width_stride,
    # h * height_stride), transformed by the deltas, clipped; sorted by score; no overlap
    anchors = np.array([[0.0, 0.0, 4.0, 4.0]])
    scores = np.array([0.375, 0.875]).reshape(1, 1, 2, 1)
    gdel = np.array([[0.25, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0]]).reshape(1, 1, 2, 4)
    props = [bbox_apply([0.0 + 8 * j, 0.0, 4.0 + 8 * j, 4.0], gdel[0, 0, j], 16.0, 16.0) for j in range(2)]
    # First, as breadth-first runs a group's first model first: the same anchors in an image of
    # height 5 and width 13, where the second proposal, (10, 2, 14, 6), is clipped to the image's
    # edges (13, 5), not to its last pixel (12, 4).
    shifted = np.array([[0.25, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]]).reshape(1, 1, 2, 4)
    clipped = [bbox_apply([0.0 + 8 * j, 0.0, 4.0 + 8 * j, 4.0], shifted[0, 0, j], 5.0, 13.0) for j in range(2)]
    model("generate_proposals_float32_clipped_to_the_edges", "GENERATE_PROPOSALS",
          [I(T(F32), scores), I(T(F32), shifted), I(T(F32), anchors), I(T(F32), [[5.0, 13.0]]), fsc(F32, 8.0),
           fsc(F32, 8.0), i32(-1), i32(-1), fsc(F32, 0.5), fsc(F32, 1.0), bsc(False)],
          [O(T(F32), [0.875, 0.375]), O(T(F32), [clipped[1], clipped[0]]), O(T(I32), [0, 0])], types=[F32])
    for code, rel in variants("GENERATE_PROPOSALS"):
        if code in (QA, QS):
            ts, td, ta, tb = T(code, 1 / 128, 0 if code == QA else -128), T(code, 0.125, 0), \
                T(Q16S, 0.125, 0), T(Q16A, 0.125, 0)
        else:
            ts = td = ta = tb = T(code)
        model(f"generate_proposals_{tname(code, rel)}", "GENERATE_PROPOSALS",
              [I(ts, scores), I(td, gdel), I(ta, anchors), I(tb, [[16.0, 16.0]]), fsc(ts, 8.0), fsc(ts, 8.0),
               i32(-1), i32(-1), fsc(ts, 0.5), fsc(ts, 1.0), bsc(False)],
              [O(ts, [0.875, 0.375]), O(tb, [props[1], props[0]]), O(T(I32), [0, 0])], relaxed=rel, types=[code])
    # DETECTION_POSTPROCESSING (fast NMS): anchors (ycenter, xcenter, h, w); box = center +
    # delta / scale * anchor size, size * exp(delta / scale); per anchor its best non-background
    # class; anchor 1 overlaps anchor 0 and is suppressed.
    anc = np.array([[5.0, 5.0, 10.0, 10.0], [5.5, 5.5, 10.0, 10.0], [20.0, 20.0, 8.0, 8.0]])
    dl = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, -2.0, 0.5, 0.0]])
    cs = np.array([[0.0, 0.875, 0.125], [0.0, 0.75, 0.5], [0.25, 0.375, 0.625]])
    def decode(a, d):
        yc, xc = d[0] / 10 * a[2] + a[0], d[1] / 10 * a[3] + a[1]
        h, w = math.exp(d[2] / 5) * a[2], math.exp(d[3] / 5) * a[3]
        return [yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2]
    boxes = [decode(anc[i], dl[i]) for i in range(3)]
    for code, rel in variants("DETECTION_POSTPROCESSING"):
        t = T(code)
        model(f"detection_postprocessing_{tname(code, rel)}", "DETECTION_POSTPROCESSING",
              [I(t, cs[None]), I(t, dl[None]), I(t, anc), fsc(t, 10.0), fsc(t, 10.0), fsc(t, 5.0), fsc(t, 5.0),
               bsc(False), i32(2), i32(1), i32(1), fsc(t, 0.0), fsc(t, 0.5), bsc(True)],
              [O(t, [[0.875, 0.625]]), O(t, [[boxes[0], boxes[2]]]), O(T(I32), [[0, 1]]), O(T(I32), [2])],
              relaxed=rel, types=[code])


# == LSH_PROJECTION ===============================================================================

M64 = (1 << 64) - 1
K0, K1, K2 = 0xc3a5c85c97cb3127, 0xb492b66fbe98f273, 0x9ae16a3b2f90404f


def _rot(v, s):
    return ((v >> s) | (v << (64 - s))) & M64 if s else v


def _hl16(u, v, mul):
    a = ((u ^ v) * mul) & M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & M64
    b ^= b >> 47
    return (b * mul) & M64


def fingerprint64(s: bytes) -> int:
    """farmhash Fingerprint64 (farmhashna::Hash64) for keys of 4..16 bytes, as a signed int."""
    n = len(s)
    f64 = lambda o: int.from_bytes(s[o:o + 8], "little")
    f32 = lambda o: int.from_bytes(s[o:o + 4], "little")
    if n >= 8:
        mul = K2 + n * 2
        a = (f64(0) + K2) & M64
        b = f64(n - 8)
        c = (_rot(b, 37) * mul + a) & M64
        d = ((_rot(a, 25) + b) * mul) & M64
        h = _hl16(c, d, mul)
    elif n >= 4:
        mul = K2 + n * 2
        a = f32(0)
        h = _hl16((n + (a << 3)) & M64, f32(n - 4), mul)
    else:
        raise ValueError("key too short")
    return h - (1 << 64) if h >> 63 else h


def gen_lsh():
    family("lsh_projection")
    # sign bit (i, j) = sum_rows weight[r] * Fingerprint64(float32 seed hash[i, j] bytes + row bytes) > 0
    hashes = np.array([[0.123, 0.456], [-0.321, 0.789], [1.5, -2.25]], np.float32)
    rows_i = np.array([[12345], [54321], [67890]], np.int64)  # input [3, 1] int32: 8-byte keys
    rows_f = np.array([[1.25, -3.5], [0.5, 7.0]], np.float32)  # input [2, 2] float32: 12-byte keys
    weight = np.array([0.5, -1.25, 2.0])

    def bits(h, rows, w, dtype):
        out = np.zeros(h.shape, np.int64)
        for i in range(h.shape[0]):
            for j in range(h.shape[1]):
                score = 0.0
                for r in range(rows.shape[0]):
                    key = np.float32(h[i, j]).tobytes() + np.asarray(rows[r], dtype).tobytes()
                    score += (1.0 if w is None else w[r]) * float(fingerprint64(key))
                out[i, j] = score > 0
        return out
    for code, hcode in ((F32, F32), (F16, F16)):
        th = T(hcode)
        hv = th.rt(hashes).astype(np.float32)
        # type 2 (DENSE): every bit; type 3 (SPARSE): per function the bits as an integer plus i * 2^bits
        b = bits(hv, rows_i, weight, np.int32)
        sfx = short(code).lower()
        for kind, out in ((2, b.reshape(-1)), (3, (b * [1, 2]).sum(1) + 4 * np.arange(3))):
            model(f"lsh_projection_{sfx}_int32_rows_{'dense' if kind == 2 else 'sparse'}", "LSH_PROJECTION",
                  [C(th, hv), I(T(I32), rows_i), C(th, weight), i32(kind)], [O(T(I32), out)],
                  level=29 if kind == 3 or code == F16 else 27)
    b = bits(hashes[:2], rows_f, None, np.float32)
    model("lsh_projection_float32_float_rows_dense_no_weight", "LSH_PROJECTION",
          [C(T(F32), hashes[:2]), I(T(F32), rows_f), NONE(F32), i32(2)], [O(T(I32), b.reshape(-1))], level=27)
    b = bits(hashes, rows_i, None, np.int32)
    model("lsh_projection_float32_sparse_deprecated", "LSH_PROJECTION",  # type 1: no i * 2^bits offset
          [C(T(F32), hashes), I(T(I32), rows_i), NONE(F32), i32(1)], [O(T(I32), (b * [1, 2]).sum(1))], level=27)
