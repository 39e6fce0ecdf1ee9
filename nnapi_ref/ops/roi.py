"""Region-of-interest pooling: ROI_ALIGN and ROI_POOLING.

Both take a 4-D feature map, ROIs ``[num_rois, 4]`` as (x1, y1, x2, y2) in original-image
coordinates (TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 for quantized feature maps),
the batch index of every ROI, the output height and width, the ratios (strides) from the
original image to the feature map and a layout flag; ROI_ALIGN also takes the sampling ratios.

The arithmetic follows NNAPI's CPU implementation: ROI_ALIGN averages bilinear samples taken at
the centres of a regular sub-grid of each bin (adaptive ``ceil(bin size)`` samples when the
sampling ratio is 0), evaluated in float32; for quantized maps the bilinear weights are
quantized to multiples of 1/255 and the sum is requantized in fixed point. ROI_POOLING rounds the
ROI to feature-map pixels and takes the maximum over each ``[floor(start), ceil(end))`` bin.

AOSP and TFLite
---------------
ROI_ALIGN, ROI_POOLING: TFLite has no such kernels; AOSP's arithmetic in both conventions.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Arg, Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.ops.requantization import multiply_by_quantized_multiplier, quantize_multiplier
from nnapi_ref.types import DTYPES

_F32 = np.float32
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _roi_signatures(extra_int: int) -> list[Signature]:
    """(input, rois, batch indices, out h, out w, h ratio, w ratio, [sampling ratios], layout)."""
    sigs = []
    tail = [T.INT32] * extra_int + [T.BOOL]
    for level, t, roi, f in [(29, T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.FLOAT32),
                             (29, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.FLOAT16),
                             (29, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_ASYMM, T.FLOAT32),
                             (30, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM, T.FLOAT32)]:
        sigs.append(Signature(level, [t, roi, T.TENSOR_INT32, T.INT32, T.INT32, f, f] + tail, [t]))
    return sigs


def roi_values(rois: Arg) -> np.ndarray:
    """ROI coordinates as float32, the way NNAPI's CPU implementation reads them."""
    if rois.type == T.TENSOR_QUANT16_ASYMM:
        return ((rois.value.astype(np.int32) - rois.zero_point).astype(_F32) * _F32(rois.scale)).astype(_F32)
    return rois.value.astype(_F32)


class _RoiOp(OperationRegistration):
    layout_index: int

    def infer(self, call: Call):
        x, rois, batches = call.ins[0], call.ins[1], call.ins[2]
        nchw = bool(call.ins[self.layout_index].scalar())
        check(x.rank == 4, f"{self.name}: input must have rank 4, got {x.rank}")
        check(rois.rank == 2, f"{self.name}: ROI tensor must have rank 2, got {rois.rank}")
        check(rois.shape[1] == 4, f"{self.name}: ROI tensor must have shape [num_rois, 4], got {list(rois.shape)}")
        check(batches.rank == 1, f"{self.name}: batch index tensor must have rank 1, got {batches.rank}")
        num_rois = rois.shape[0]
        check(batches.shape[0] == num_rois, f"{self.name}: batch index tensor has {batches.shape[0]} entries, "
                                            f"expected one per ROI ({num_rois})")
        out_h, out_w = int(call.ins[3].scalar()), int(call.ins[4].scalar())
        check(out_h > 0 and out_w > 0, f"{self.name}: output height and width must be positive, got {out_h}x{out_w}")
        h_ratio, w_ratio = float(call.ins[5].scalar()), float(call.ins[6].scalar())
        check(h_ratio > 0 and w_ratio > 0, f"{self.name}: height and width ratios must be positive, "
                                           f"got {h_ratio} and {w_ratio}")
        if rois.type == T.TENSOR_QUANT16_ASYMM:
            check(rois.scale == 0.125 and rois.zero_point == 0,
                  f"{self.name}: TENSOR_QUANT16_ASYMM ROIs must have scale 0.125 and zero point 0, "
                  f"got {rois.scale} and {rois.zero_point}")
        self.extra_checks(call)
        _, h, w, c = self.nhwc(x.shape, nchw)
        return [(num_rois, c, out_h, out_w) if nchw else (num_rois, out_h, out_w, c)]

    def extra_checks(self, call: Call) -> None:
        pass

    @staticmethod
    def nhwc(shape, nchw):
        return (shape[0], shape[2], shape[3], shape[1]) if nchw else tuple(shape)

    def execute(self, call: Call):
        x, rois, batches, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        nchw = bool(call.ins[self.layout_index].scalar())
        img = x.value.transpose(0, 2, 3, 1) if nchw else x.value
        n, in_h, in_w, c = img.shape
        out_h, out_w = int(call.ins[3].scalar()), int(call.ins[4].scalar())
        dtype = _F32 if x.type == T.TENSOR_FLOAT16 else None
        h_ratio = _F32(call.ins[5].value.astype(_F32))
        w_ratio = _F32(call.ins[6].value.astype(_F32))
        h_scale, w_scale = _F32(1) / h_ratio, _F32(1) / w_ratio
        boxes = roi_values(rois)
        idx = batches.value
        result = np.zeros((len(boxes), out_h, out_w, c), DTYPES[out.type])
        for r, box in enumerate(boxes):
            b = int(idx[r])
            check(0 <= b < n, f"{self.name}: ROI {r} has batch index {b}, outside [0, {n})")
            check(bool(np.all(box >= 0)), f"{self.name}: ROI {r} has a negative coordinate: {box.tolist()}")
            check(box[0] * w_scale <= in_w and box[2] * w_scale <= in_w and
                  box[1] * h_scale <= in_h and box[3] * h_scale <= in_h,
                  f"{self.name}: ROI {r} {box.tolist()} lies outside the {in_h}x{in_w} feature map")
            check(box[0] <= box[2] and box[1] <= box[3], f"{self.name}: ROI {r} {box.tolist()} has x2 < x1 or y2 < y1")
            result[r] = self.one_roi(call, img[b], box, h_scale, w_scale, out_h, out_w, dtype)
        if nchw:
            result = result.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(result)]

    def one_roi(self, call, img, box, h_scale, w_scale, out_h, out_w, dtype):
        raise NotImplementedError


def _samples(start: np.float32, step: np.float32, bin_size: np.float32, count: int):
    """Sample coordinates of ``count`` bins, accumulated in float32 exactly as the C loop
    ``for (v = start + bin/2; v < end; v += bin)`` does; returns (coords, bin id of each)."""
    coords, owner = [], []
    half = bin_size / _F32(2)
    for i in range(count):
        lo = _F32(step * _F32(i) + start)
        hi = _F32(step * _F32(i + 1) + start)
        v = _F32(lo + half)
        guard = 0
        while v < hi and guard < 1 << 16:
            coords.append(v)
            owner.append(i)
            v = _F32(v + bin_size)
            guard += 1
    return np.asarray(coords, _F32), np.asarray(owner, np.int64)


def _corners(coords: np.ndarray, size: int):
    """Lower/upper pixel and the fractional offset of each sample, clamped at the far border."""
    lo = np.floor(coords).astype(np.int64)
    frac = (coords - lo.astype(_F32)).astype(_F32)
    edge = lo >= size - 1
    lo = np.where(edge, size - 1, lo)
    hi = np.where(edge, size - 1, lo + 1)
    frac = np.where(edge, _F32(0), frac).astype(_F32)
    return lo, hi, frac


def _bin_sum(values: np.ndarray, owner: np.ndarray, count: int, axis: int) -> np.ndarray:
    """Sum the samples of each bin along ``axis`` (bins without a sample give 0)."""
    shape = list(values.shape)
    shape[axis] = count
    out = np.zeros(shape, values.dtype)
    np.add.at(out, (slice(None),) * axis + (owner,), values)
    return out


@register
class RoiAlign(_RoiOp):
    code = OperationCode.ROI_ALIGN
    parameters = {3: "output height", 4: "output width", 5: "height ratio", 6: "width ratio", 7: "height samples",
                  8: "width samples", 9: "layout"}
    accuracy = "relaxed"
    signatures = _roi_signatures(2)
    layout_index = 9

    def extra_checks(self, call):
        hs, ws = int(call.ins[7].scalar()), int(call.ins[8].scalar())
        check(hs >= 0 and ws >= 0, f"ROI_ALIGN: sampling ratios must be >= 0, got {hs} and {ws}")

    def one_roi(self, call, img, box, h_scale, w_scale, out_h, out_w, dtype):
        in_h, in_w, _ = img.shape
        quant = call.ins[0].type in QUANT8
        # (for QUANT16 ROIs, roi * 0.125 * scale == roi * scale * 0.125 exactly: 0.125 is a power of 2)
        x1, y1, x2, y2 = (box[0] * w_scale, box[1] * h_scale, box[2] * w_scale, box[3] * h_scale)
        x1, y1, x2, y2 = (_F32(v) for v in (x1, y1, x2, y2))
        roi_w = max(_F32(x2 - x1), _F32(1))
        roi_h = max(_F32(y2 - y1), _F32(1))
        w_step = _F32(roi_w / _F32(out_w))
        h_step = _F32(roi_h / _F32(out_h))
        hs, ws = int(call.ins[7].scalar()), int(call.ins[8].scalar())
        w_ratio = ws if ws > 0 else int(np.ceil(w_step))
        h_ratio = hs if hs > 0 else int(np.ceil(h_step))
        num_points = w_ratio * h_ratio
        w_bin = _F32(w_step / _F32(w_ratio))
        h_bin = _F32(h_step / _F32(h_ratio))
        ys, yo = _samples(y1, h_step, h_bin, out_h)
        xs, xo = _samples(x1, w_step, w_bin, out_w)
        ylo, yhi, dy1 = _corners(ys, in_h)
        xlo, xhi, dx1 = _corners(xs, in_w)
        dy1, dx1 = dy1[:, None], dx1[None, :]
        dy2, dx2 = (_F32(1) - dy1).astype(_F32), (_F32(1) - dx1).astype(_F32)
        weights = [dx2 * dy2, dx1 * dy2, dx2 * dy1, dx1 * dy1]
        corners = [(ylo, xlo), (ylo, xhi), (yhi, xlo), (yhi, xhi)]
        if not quant:
            f = img.astype(_F32)
            acc = None
            for w, (yy, xx) in zip(weights, corners):
                term = w[:, :, None] * f[yy[:, None], xx[None, :]]
                acc = term if acc is None else acc + term
            total = _bin_sum(_bin_sum(acc, yo, out_h, 0), xo, out_w, 1)
            return (total / _F32(num_points)).astype(img.dtype)
        x_arg, out = call.ins[0], call.outs[0]
        w_unit = _F32(1) / _F32(255)
        q = img.astype(np.int64) - x_arg.zero_point
        acc = None
        for w, (yy, xx) in zip(weights, corners):
            wq = (w / w_unit).astype(_F32).astype(np.float64)
            wq = (np.sign(wq) * np.floor(np.abs(wq) + 0.5)).astype(np.int64)
            term = wq[:, :, None] * q[yy[:, None], xx[None, :]]
            acc = term if acc is None else acc + term
        total = _bin_sum(_bin_sum(acc, yo, out_h, 0), xo, out_w, 1)
        real = _F32(_F32(_F32(_F32(x_arg.scale) * w_unit) / _F32(out.scale)) / _F32(num_points))
        m, s = quantize_multiplier(float(real))
        raw = multiply_by_quantized_multiplier(total, m, s) + out.zero_point
        lo, hi = QUANT_RANGE[out.type]
        return np.clip(raw, lo, hi)


def _pool_axis_max(values: np.ndarray, starts: np.ndarray, ends: np.ndarray, axis: int, empty) -> np.ndarray:
    """Max of values over [start, end) along axis for each bin; ``empty`` for an empty bin."""
    size = values.shape[axis]
    pad_shape = list(values.shape)
    pad_shape[axis] = 1
    padded = np.concatenate([values, np.zeros(pad_shape, values.dtype)], axis=axis)
    s = np.minimum(starts, size)
    idx = np.empty(2 * len(starts), np.int64)
    idx[0::2] = s
    idx[1::2] = np.maximum(ends, s)
    red = np.maximum.reduceat(padded, idx, axis=axis)
    red = np.take(red, np.arange(0, 2 * len(starts), 2), axis=axis)
    bad = ends <= starts
    if bad.any():
        shape = [1] * values.ndim
        shape[axis] = -1
        red = np.where(bad.reshape(shape), np.asarray(empty, values.dtype), red)
    return red


@register
class RoiPooling(_RoiOp):
    code = OperationCode.ROI_POOLING
    parameters = {3: "output height", 4: "output width", 5: "height ratio", 6: "width ratio", 7: "layout"}
    accuracy = "relaxed"
    signatures = _roi_signatures(0)
    layout_index = 7

    def extra_checks(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            check(out.scale == x.scale and out.zero_point == x.zero_point,
                  "ROI_POOLING: output scale and zero point must equal the input's")

    def one_roi(self, call, img, box, h_scale, w_scale, out_h, out_w, dtype):
        in_h, in_w, _ = img.shape

        def rnd(v):
            v = float(_F32(v))
            return int(np.sign(v) * np.floor(abs(v) + 0.5))

        x1, y1 = rnd(box[0] * w_scale), rnd(box[1] * h_scale)
        x2, y2 = rnd(box[2] * w_scale), rnd(box[3] * h_scale)
        roi_w = _F32(max(x2 - x1 + 1, 1))
        roi_h = _F32(max(y2 - y1 + 1, 1))
        w_step = _F32(roi_w / _F32(out_w))
        h_step = _F32(roi_h / _F32(out_h))
        j = np.arange(out_w, dtype=_F32)
        i = np.arange(out_h, dtype=_F32)
        ws = np.floor((w_step * j + _F32(x1)).astype(_F32)).astype(np.int64)
        we = np.ceil((w_step * (j + _F32(1)) + _F32(x1)).astype(_F32)).astype(np.int64)
        hs = np.floor((h_step * i + _F32(y1)).astype(_F32)).astype(np.int64)
        he = np.ceil((h_step * (i + _F32(1)) + _F32(y1)).astype(_F32)).astype(np.int64)
        ws, we = np.minimum(ws, in_w), np.minimum(we, in_w)
        hs, he = np.minimum(hs, in_h), np.minimum(he, in_h)
        empty = call.ins[0].zero_point if call.ins[0].type in QUANT8 else 0
        rows = _pool_axis_max(img, hs, he, 0, empty)
        return _pool_axis_max(rows, ws, we, 1, empty)
