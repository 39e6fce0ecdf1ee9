"""Image resizing: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

Both take a 4-D image, the output size either as two INT32 scalars (width, height) or, from
NNAPI 1.2, as two float scale factors (output size = floor(input size * scale)), an optional
layout flag (NCHW when true) and, from NNAPI 1.3, the optional ``align_corners`` and
``half_pixel_centers`` flags.

The arithmetic follows NNAPI's CPU implementation: bilinear interpolation is TFLite's reference
kernel, evaluated in float32 (float16 and quantized images are converted to float32, and the
interpolated value of a quantized image is rounded half up: ``floor(v + 0.5)``);
nearest neighbour picks ``floor(scaled)`` (``round`` with align_corners) clamped to the image.

AOSP and TFLite
---------------
RESIZE_BILINEAR: AOSP runs that reference kernel, which adds 0.5 and casts: for uint8 the same
rounding; for int8 the cast truncates toward zero, one step high on a negative value (an AOSP
defect: resizing one pixel must give that pixel). TFLite's uint8 kernel rounds as nnapi_ref does;
its int8 kernel (ResizeBilinearInteger) works in 1/1024ths (a 10-bit scale, so sample points move)
and rounds halves away from zero: up to 2 steps apart. The ``tflite`` convention computes TFLite's
int8 kernel (measured, tests/test_diverge.py).
RESIZE_NEAREST_NEIGHBOR: copies stored values, no rounding; identical (measured for int8 in the three
coordinate modes).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.types import DTYPES

_F32 = np.float32
MAX_DIMENSION = 2**31 - 1  # AOSP computes output sizes as int32


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


class _Resize(OperationRegistration):
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
            with np.errstate(over="ignore"):
                sizes = np.floor(_F32(w) * sw), np.floor(_F32(h) * sh)
            # A finite scale may still overflow float32 (or a dimension) once multiplied by the size.
            check(all(np.isfinite(s) and s <= MAX_DIMENSION for s in sizes),
                  f"{self.name}: scale factors {float(sw):g} x {float(sh):g} give an output size beyond "
                  f"{MAX_DIMENSION} for a {h}x{w} image")
            out_w, out_h = int(sizes[0]), int(sizes[1])
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
    zero_sized_inputs = None
    parameters = {1: "output width", 2: "output height", 3: "layout", 4: "align corners", 5: "half pixel centers"}
    accuracy = "relaxed"
    signatures = _bilinear_signatures()

    def resize(self, img, out_h, out_w, align, half):
        if img.dtype == np.int8 and requantization.convention() == "tflite":
            return _bilinear_integer(img, out_h, out_w, align, half)
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
            # halves up, the 0.5 added in float32 as TFLite's reference kernel adds its rounding offset
            whole = np.floor(val + _F32(0.5))
            return np.clip(whole, info.min, info.max).astype(img.dtype)
        return val.astype(img.dtype)


def _integer_axis(in_size: int, out_size: int, align: bool, half: bool):
    """TFLite's ComputeInterpolationValuesInteger: per output index the source coordinate in
    1/1024ths (the scale rounded to 10 fractional bits) and the lower/upper source indices."""
    if align and out_size > 1:
        scale = ((in_size - 1) * 1024 + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = (in_size * 1024 + out_size // 2) // out_size
    src = np.arange(out_size, dtype=np.int64) * scale + ((scale // 2 - 512) if half else 0)
    lo = np.maximum(np.trunc(src / 1024).astype(np.int64), 0)  # C division truncates
    hi = np.minimum(np.trunc((src + 1023) / 1024).astype(np.int64), in_size - 1)
    return src, lo, hi


def _bilinear_integer(img: np.ndarray, out_h: int, out_w: int, align: bool, half: bool) -> np.ndarray:
    """TFLite's int8 RESIZE_BILINEAR (reference_ops::ResizeBilinearInteger): weights in
    1/1024ths, the sum of the four products in 1/2**20ths rounded half away from zero (a
    truncating division after adding +-2**19). Near the edges with half-pixel centers the
    weights extrapolate, as TFLite's do."""
    ys, y0, y1 = _integer_axis(img.shape[1], out_h, align, half)
    xs, x0, x1 = _integer_axis(img.shape[2], out_w, align, half)
    dy = (ys - 1024 * y0)[None, :, None, None]
    dx = (xs - 1024 * x0)[None, None, :, None]
    f = img.astype(np.int64)
    total = (f[:, y0][:, :, x0] * (1024 - dy) * (1024 - dx) + f[:, y1][:, :, x0] * dy * (1024 - dx)
             + f[:, y0][:, :, x1] * (1024 - dy) * dx + f[:, y1][:, :, x1] * dy * dx)
    total += np.where(total > 0, 1 << 19, -(1 << 19))
    return (np.sign(total) * (np.abs(total) >> 20)).astype(np.int8)


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
    zero_sized_inputs = None
    parameters = {1: "output width", 2: "output height", 3: "layout", 4: "align corners", 5: "half pixel centers"}
    accuracy = "relaxed"
    signatures = _nearest_signatures()

    def resize(self, img, out_h, out_w, align, half):
        yi = _nearest_axis(img.shape[1], out_h, align, half)
        xi = _nearest_axis(img.shape[2], out_w, align, half)
        return img[:, yi][:, :, xi]
