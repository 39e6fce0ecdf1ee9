"""Region-of-interest pooling: ROI_ALIGN and ROI_POOLING.

Both take a 4-D feature map, ROIs ``[num_rois, 4]`` as (x1, y1, x2, y2) in original-image
coordinates (TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 for quantized feature maps),
the batch index of every ROI, the output height and width, the ratios (strides) from the
original image to the feature map and a layout flag; ROI_ALIGN also takes the sampling ratios.

The arithmetic follows NNAPI's CPU implementation: ROI_ALIGN divides each bin into
``sampling ratio`` equal parts per axis (0: ``ceil(bin height)`` and ``ceil(bin width)``, the
bin's size in feature-map pixels) and averages the bilinear samples at their centres: exactly
``h_ratio * w_ratio`` samples, each at ``bin start + part / 2 + part * k`` in float32 (AOSP's loop
since April 2019; before, a float32 ``while (v < end)`` that could take one sample more or
less than it divided by). For quantized maps the bilinear weights are quantized to multiples of
1/255 and the sum is requantized in fixed point. ROI_POOLING rounds the
ROI to feature-map pixels and takes the maximum over each ``[floor(start), ceil(end))`` bin,
starting from the bin's first pixel and taking only greater values (a NaN there is the result,
a NaN elsewhere is skipped; an empty bin gives the zero point).

AOSP and TFLite
---------------
ROI_ALIGN, ROI_POOLING: TFLite has no such kernels; AOSP's arithmetic in both conventions.
"""
from __future__ import annotations

import math

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


def _samples(start: np.float32, step: np.float32, ratio: int, count: int, parts: range):
    """Sample coordinates of ``count`` bins of ``step`` pixels, each divided into ``ratio`` equal
    parts, at the centres of the parts k in ``parts``, in float32 as AOSP's loop evaluates
    ``(start + step * i) + part / 2 + part * k`` (part = step / ratio); returns (coords, bin of each)."""
    part = _F32(step / _F32(ratio))
    bin_start = (step * np.arange(count, dtype=_F32) + start).astype(_F32)
    offsets = (part * np.arange(parts.start, parts.stop, dtype=_F32)).astype(_F32)
    coords = ((bin_start + _F32(part / _F32(2)))[:, None] + offsets[None, :]).astype(_F32)
    return coords.reshape(-1), np.repeat(np.arange(count, dtype=np.int64), len(parts))


# Samples times channels computed at once: a huge sampling ratio is summed in blocks (bounded memory).
_BLOCK_ELEMENTS = 1 << 22


def _part_blocks(ratio: int, count: int, channels: int):
    """The parts 0 .. ratio - 1 of ``count`` bins along one axis, in ranges whose samples, times
    the other axis' and the channels, stay near _BLOCK_ELEMENTS."""
    per_axis = max(1, math.isqrt(_BLOCK_ELEMENTS // max(channels, 1)))
    size = max(1, per_axis // count)
    return (range(k, min(ratio, k + size)) for k in range(0, ratio, size))


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
    zero_sized_inputs = None
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
        x_arg = call.ins[0]
        if quant:
            w_unit = _F32(1) / _F32(255)
            f = img.astype(np.int64) - x_arg.zero_point
        else:
            f = img.astype(_F32)
        total = None
        for y_parts in _part_blocks(h_ratio, out_h, img.shape[2]):
            ys, yo = _samples(y1, h_step, h_ratio, out_h, y_parts)
            ylo, yhi, dy1 = _corners(ys, in_h)
            dy1 = dy1[:, None]
            dy2 = (_F32(1) - dy1).astype(_F32)
            for x_parts in _part_blocks(w_ratio, out_w, img.shape[2]):
                xs, xo = _samples(x1, w_step, w_ratio, out_w, x_parts)
                xlo, xhi, dx1 = _corners(xs, in_w)
                dx1 = dx1[None, :]
                dx2 = (_F32(1) - dx1).astype(_F32)
                weights = [dx2 * dy2, dx1 * dy2, dx2 * dy1, dx1 * dy1]
                corners = [(ylo, xlo), (ylo, xhi), (yhi, xlo), (yhi, xhi)]
                acc = None
                for w, (yy, xx) in zip(weights, corners):
                    if quant:
                        w = (w / w_unit).astype(_F32).astype(np.float64)
                        w = (np.sign(w) * np.floor(np.abs(w) + 0.5)).astype(np.int64)
                    term = w[:, :, None] * f[yy[:, None], xx[None, :]]
                    acc = term if acc is None else acc + term
                block = _bin_sum(_bin_sum(acc, yo, out_h, 0), xo, out_w, 1)
                total = block if total is None else total + block
        if not quant:
            return (total / _F32(num_points)).astype(img.dtype)
        out = call.outs[0]
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
        nans = np.isnan(img) if img.dtype.kind == "f" else None
        values = img if nans is None or not nans.any() else np.where(nans, np.asarray(-np.inf, img.dtype), img)
        rows = _pool_axis_max(values, hs, he, 0, empty)
        pooled = _pool_axis_max(rows, ws, we, 1, empty)
        if values is not img:
            # The bin's first pixel (row-major) starts the maximum and only a greater value
            # replaces it: a NaN there stays, a NaN elsewhere is passed over.
            first = nans[np.minimum(hs, in_h - 1)][:, np.minimum(ws, in_w - 1)]
            nonempty = ((he > hs)[:, None] & (we > ws)[None, :])[:, :, None]
            pooled = np.where(first & nonempty, np.asarray(np.nan, img.dtype), pooled)
        return pooled
