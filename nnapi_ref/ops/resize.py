"""Image resizing: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

Both take a 4-D image, the output size either as two INT32 scalars (width, height) or, from
NNAPI 1.2, as two float scale factors (output size = floor(input size * scale)), an optional
layout flag (NCHW when true) and, from NNAPI 1.3, the optional ``align_corners`` and
``half_pixel_centers`` flags.

The arithmetic follows NNAPI's CPU implementation: bilinear interpolation is TFLite's reference
kernel, evaluated in float32 (float16 and quantized images are converted to float32, and the
interpolated value is cast back to the element type, truncating for the quantized types);
nearest neighbour picks ``floor(scaled)`` (``round`` with align_corners) clamped to the image.
"""
from __future__ import annotations

import numpy as np

from .base import Call, Operation, OperationCode, Signature, T, check, register
from ..types import DTYPES

_F32 = np.float32


def _bilinear_signatures() -> list[Signature]:
    sigs = [Signature(27, [T.TENSOR_FLOAT32, T.INT32, T.INT32], [T.TENSOR_FLOAT32])]
    level29 = [(T.TENSOR_FLOAT32, T.FLOAT32), (T.TENSOR_FLOAT16, T.FLOAT16), (T.TENSOR_QUANT8_ASYMM, T.FLOAT32)]
    for t, f in level29:
        for s in (T.INT32, f):
            sigs.append(Signature(29, [t, s, s, T.BOOL], [t], optional=1))
    for t, f in level29 + [(T.TENSOR_QUANT8_ASYMM_SIGNED, T.FLOAT32)]:
        for s in (T.INT32, f):
            sigs.append(Signature(30, [t, s, s, T.BOOL, T.BOOL, T.BOOL], [t], optional=3))
    return sigs


def _nearest_signatures() -> list[Signature]:
    sigs = []
    level29 = [(T.TENSOR_FLOAT32, T.FLOAT32), (T.TENSOR_FLOAT16, T.FLOAT16), (T.TENSOR_QUANT8_ASYMM, T.FLOAT32)]
    for t, f in level29:
        for s in (T.INT32, f):
            sigs.append(Signature(29, [t, s, s, T.BOOL], [t]))
    for t, f in level29 + [(T.TENSOR_QUANT8_ASYMM_SIGNED, T.FLOAT32)]:
        for s in (T.INT32, f):
            sigs.append(Signature(30, [t, s, s, T.BOOL, T.BOOL, T.BOOL], [t], optional=2))
    return sigs


def _flag(call: Call, index: int) -> bool:
    return len(call.ins) > index and bool(call.ins[index].scalar())


def _resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return _F32(in_size - 1) / _F32(out_size - 1)
    return _F32(in_size) / _F32(out_size)


class _Resize(Operation):
    """Shared shape inference, validation and layout handling."""

    min_inputs = 3

    def params(self, call: Call):
        nchw = _flag(call, 3)
        align = _flag(call, 4)
        half = _flag(call, 5)
        return nchw, align, half

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank == 4, f"{self.name} input must have rank 4, got {x.rank}")
        nchw, align, half = self.params(call)
        check(not (align and half), f"{self.name}: align_corners and half_pixel_centers cannot both be true")
        n, h, w, c = (x.shape[0], x.shape[2], x.shape[3], x.shape[1]) if nchw else x.shape
        check(h > 0 and w > 0 and c > 0, f"{self.name}: input height, width and depth must be positive, "
                                         f"got {h}, {w}, {c} (only the batch may be zero)")
        wp, hp = call.ins[1], call.ins[2]
        if wp.type == T.INT32:
            out_w, out_h = int(wp.scalar()), int(hp.scalar())
        else:
            sw, sh = _F32(wp.scalar()), _F32(hp.scalar())
            check(np.isfinite(sw) and np.isfinite(sh), f"{self.name}: scale factors must be finite")
            out_w = int(np.floor(_F32(w) * sw))
            out_h = int(np.floor(_F32(h) * sh))
        check(out_h > 0 and out_w > 0, f"{self.name}: output height and width must be positive, got {out_h}x{out_w}")
        return [(n, c, out_h, out_w) if nchw else (n, out_h, out_w, c)]

    def execute(self, call: Call):
        x, out = call.ins[0], call.outs[0]
        nchw, align, half = self.params(call)
        shape = self.infer(call)[0]
        img = x.value
        if nchw:
            img = img.transpose(0, 2, 3, 1)
        out_h, out_w = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
        res = self.resize(img, out_h, out_w, align, half)
        if nchw:
            res = res.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(res).astype(DTYPES[out.type], copy=False)]

    def resize(self, img, out_h, out_w, align, half):
        raise NotImplementedError


def _bilinear_axis(in_size: int, out_size: int, align: bool, half: bool):
    """Per output index: the float32 source coordinate and the lower/upper source indices."""
    scale = _resize_scale(in_size, out_size, align)
    pos = np.arange(out_size, dtype=_F32)
    if half:
        src = (pos + _F32(0.5)) * scale - _F32(0.5)
    else:
        src = pos * scale
    src = src.astype(_F32)
    lo = np.maximum(np.floor(src).astype(np.int64), 0)
    hi = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    return src, lo, hi


@register
class ResizeBilinear(_Resize):
    code = OperationCode.RESIZE_BILINEAR
    signatures = _bilinear_signatures()

    def resize(self, img, out_h, out_w, align, half):
        in_h, in_w = img.shape[1], img.shape[2]
        ys, y0, y1 = _bilinear_axis(in_h, out_h, align, half)
        xs, x0, x1 = _bilinear_axis(in_w, out_w, align, half)
        f = img.astype(_F32)
        # weights exactly as the float32 reference kernel evaluates them
        dy = (ys - y0.astype(_F32)).astype(_F32)[None, :, None, None]
        dx = (xs - x0.astype(_F32)).astype(_F32)[None, None, :, None]
        one = _F32(1)
        a = f[:, y0][:, :, x0]
        b = f[:, y1][:, :, x0]
        c = f[:, y0][:, :, x1]
        d = f[:, y1][:, :, x1]
        val = (a * (one - dy) * (one - dx) + b * dy * (one - dx)) + c * (one - dy) * dx + d * dy * dx
        if np.issubdtype(img.dtype, np.integer):
            info = np.iinfo(img.dtype)
            return np.clip(np.trunc(val), info.min, info.max).astype(img.dtype)
        return val.astype(img.dtype)


def _nearest_axis(in_size: int, out_size: int, align: bool, half: bool):
    scale = _resize_scale(in_size, out_size, align)
    pos = np.arange(out_size, dtype=_F32)
    src = ((pos + _F32(0.5)) * scale if half else pos * scale).astype(_F32)
    if align:
        s64 = src.astype(np.float64)  # roundf: halves away from zero, exactly
        idx = (np.sign(s64) * np.floor(np.abs(s64) + 0.5)).astype(np.int64)
    else:
        idx = np.floor(src).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    if half:
        idx = np.maximum(idx, 0)
    return idx


@register
class ResizeNearestNeighbor(_Resize):
    code = OperationCode.RESIZE_NEAREST_NEIGHBOR
    signatures = _nearest_signatures()

    def resize(self, img, out_h, out_w, align, half):
        yi = _nearest_axis(img.shape[1], out_h, align, half)
        xi = _nearest_axis(img.shape[2], out_w, align, half)
        return img[:, yi][:, :, xi]
