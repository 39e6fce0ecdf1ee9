"""Bit-exact models of how the runtime-backed drivers compute some quantized operations, for the
rounding classes of :mod:`nnts.runners.known_classes`.

A rounding class explains a random-graph failure by recomputing the failing model with the
runtime's arithmetic where the class applies. Rounding the exact real result (half to even, say)
is not enough where the runtime's own float32 arithmetic lands beside an exact half: a resized
value of exactly 142.5 steps, computed as ONNX Runtime does, can come out as 142.49998 or
142.50002, and the following operations amplify the one step (random-graph seed 3002408). The
functions here follow the runtimes' arithmetic operation by operation (float32 where they use
float32, the same order of additions), each checked against the runtime in
``tests/test_runtime_arithmetic.py``:

* :func:`ort_quantized_resize_bilinear`: ONNX Runtime's DequantizeLinear -> Resize (linear) ->
  QuantizeLinear, the driver's mapping of a quantized RESIZE_BILINEAR (onnxruntime's
  ``SetupUpsampleBilinear`` weights and ``UpsampleBilinear`` sum, MLAS's QuantizeLinear: float32
  division, halves to even).
* :func:`xnnpack_quantized_mean`: XNNPACK's quantized MEAN (the ``tflite`` driver), float32
  scaling with the output zero point added before rounding halves to even.
* :func:`xnnpack_quantized_resize_bilinear`: XNNPACK's quantized RESIZE_BILINEAR (the ``tflite``
  driver), Q11 weights and int32 interpolation rounded half up.
* :func:`tflite_builtin_quantized_fully_connected`: TFLite's builtin quantized FULLY_CONNECTED (the
  ``tflite`` driver where XNNPACK declines the node), NNAPI's fixed point with the right shift's
  ties rounded up.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.requantization import saturating_rounding_doubling_high_mul, wrap_int32

_F = np.float32


def ort_dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """DequantizeLinear: (q - zero_point) * scale, the difference in int32, the product in float32."""
    return (np.asarray(q, np.int32) - np.int32(zero_point)).astype(_F) * _F(scale)


def ort_quantize(x: np.ndarray, scale: float, zero_point: int, low: int, high: int) -> np.ndarray:
    """QuantizeLinear (MLAS): x / scale in float32, rounded half to even, plus the zero point,
    clamped to [low, high]."""
    with np.errstate(all="ignore"):
        q = np.rint(np.asarray(x, _F) / _F(scale)).astype(np.float64) + zero_point
    return np.clip(q, low, high)


def _ort_bilinear_axis(in_size: int, out_size: int, mode: str):
    """Source indices and weights along one axis as onnxruntime's SetupUpsampleBilinear computes
    them (float32): the coordinate of each output index (``mode``: align_corners, half_pixel or
    asymmetric, with the scale out_size / in_size in float32), clamped to the image; the lower
    and upper neighbours; the weights |c - lower| and |c - upper|, both 0.5 where the neighbours
    coincide."""
    scale = _F(out_size) / _F(in_size)
    lower, upper, d1, d2 = [], [], [], []
    for i in range(out_size):
        if scale == 1:
            c = _F(i)
        elif mode == "align_corners":
            c = _F(0) if out_size == 1 else _F(_F(i) * _F(in_size - 1)) / _F(out_size - 1)
        elif mode == "half_pixel":
            c = _F(_F(_F(i) + _F(0.5)) / scale) - _F(0.5)
        else:
            c = _F(i) / scale
        c = max(_F(0), min(_F(c), _F(in_size - 1)))
        i1 = min(int(c), in_size - 1)
        i2 = min(i1 + 1, in_size - 1)
        lower.append(i1)
        upper.append(i2)
        if i1 == i2:
            d1.append(_F(0.5))
            d2.append(_F(0.5))
        else:
            d1.append(abs(c - _F(i1)))
            d2.append(abs(c - _F(i2)))
    return np.array(lower), np.array(upper), np.array(d1, _F), np.array(d2, _F)


def ort_resize_bilinear(image: np.ndarray, out_h: int, out_w: int, mode: str) -> np.ndarray:
    """onnxruntime's float32 bilinear Resize of NHWC ``image``: each output is
    dx2*dy2*X11 + dx1*dy2*X21 + dx2*dy1*X12 + dx1*dy1*X22, products and sums in float32 from
    left to right (X11 the upper-left neighbour, X21 the one to its right)."""
    image = np.asarray(image, _F)
    y1, y2, dy1, dy2 = _ort_bilinear_axis(image.shape[1], out_h, mode)
    x1, x2, dx1, dx2 = _ort_bilinear_axis(image.shape[2], out_w, mode)
    dy1, dy2 = dy1[None, :, None, None], dy2[None, :, None, None]
    dx1, dx2 = dx1[None, None, :, None], dx2[None, None, :, None]
    rows1, rows2 = image[:, y1], image[:, y2]
    x11, x21, x12, x22 = rows1[:, :, x1], rows1[:, :, x2], rows2[:, :, x1], rows2[:, :, x2]
    total = (dx2 * dy2) * x11
    total = total + (dx1 * dy2) * x21
    total = total + (dx2 * dy1) * x12
    return total + (dx1 * dy1) * x22


def ort_quantized_resize_bilinear(q: np.ndarray, scale: float, zero_point: int, out_h: int, out_w: int,
                                  mode: str, out_scale: float, out_zero_point: int, low: int, high: int,
                                  nchw: bool = False) -> np.ndarray:
    """The driver's quantized RESIZE_BILINEAR on ONNX Runtime: DequantizeLinear, the float32
    Resize, QuantizeLinear (stored values in [low, high]), on an NHWC image (NCHW with
    ``nchw``)."""
    image = ort_dequantize(q, scale, zero_point)
    if nchw:
        image = image.transpose(0, 2, 3, 1)
    result = ort_quantize(ort_resize_bilinear(image, out_h, out_w, mode), out_scale, out_zero_point, low, high)
    return result.transpose(0, 3, 1, 2) if nchw else result


def xnnpack_quantized_mean(q: np.ndarray, axes: tuple, scale: float, zero_point: int, out_scale: float,
                           out_zero_point: int, low: int, high: int, keep_dims: bool = False) -> np.ndarray:
    """XNNPACK's quantized MEAN (the tflite driver's delegate): the exact sum less ``count``
    input zero points, converted to float32, times the float32 scale
    (input_scale / output_scale) * (1 / count), plus the output zero point, then rounded half
    to even (so a tie goes to the even *stored* value: 29.5 at zero point 29 is stored 58, where
    rounding before adding the zero point gives 59), clamped to [low, high]. NNAPI truncates the
    mean of the stored values; TFLite's reference kernel rounds halves away from zero in fixed
    point."""
    q = np.asarray(q)
    count = int(np.prod([q.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    acc = np.sum(q.astype(np.int64), axis=axes, keepdims=keep_dims) - np.int64(zero_point) * count
    factor = _F(_F(scale) / _F(out_scale)) * _F(_F(1) / _F(max(count, 1)))
    with np.errstate(all="ignore"):
        result = np.rint(acc.astype(_F) * _F(factor) + _F(out_zero_point)).astype(np.float64)
    return np.clip(result, low, high)


def _xnnpack_bilinear_axis(in_size: int, out_size: int, mode: str):
    """Source indices and Q11 weights along one axis as XNNPACK's resize-bilinear indirection
    computes them (float32): scale (in - a) / (out - a) with a = 1 for align_corners (more than
    one output), the coordinate i * scale (asymmetric, align_corners) or i * scale + (scale / 2 -
    1/2) clamped to [0, in - 1] (half-pixel centres), its integer part, the next index (clamped)
    and the fraction as lrintf(fraction * 2048)."""
    adjust = 1 if mode == "align_corners" and out_size != 1 else 0
    scale = _F(_F(in_size - adjust) / _F(out_size - adjust))
    top, bottom, alpha = [], [], []
    for i in range(out_size):
        c = _F(_F(i) * scale)
        if mode == "half_pixel":
            c = _F(c + _F(_F(_F(0.5) * scale) - _F(0.5)))
            c = min(max(c, _F(0)), _F(in_size - 1))
        t = int(c)
        top.append(t)
        bottom.append(min(t + 1, in_size - 1))
        alpha.append(int(np.rint(_F(_F(c - _F(t)) * _F(2048)))))
    return np.array(top), np.array(bottom), np.array(alpha, np.int64)


def xnnpack_quantized_resize_bilinear(q: np.ndarray, out_h: int, out_w: int, mode: str,
                                      nchw: bool = False) -> np.ndarray:
    """XNNPACK's quantized RESIZE_BILINEAR (the tflite driver's delegate) of the stored values of
    an NHWC image (NCHW with ``nchw``): Q11 weights, the horizontal interpolation of the top and
    bottom rows, then the vertical one, in int32, rounded half up (+ 2**21, >> 22). The
    quantization is the input's."""
    image = np.asarray(q, np.int64)
    if nchw:
        image = image.transpose(0, 2, 3, 1)
    y0, y1, ay = _xnnpack_bilinear_axis(image.shape[1], out_h, mode)
    x0, x1, ax = _xnnpack_bilinear_axis(image.shape[2], out_w, mode)
    ax, ay = ax[None, None, :, None], ay[None, :, None, None]
    rows0, rows1 = image[:, y0], image[:, y1]
    tl, tr, bl, br = rows0[:, :, x0], rows0[:, :, x1], rows1[:, :, x0], rows1[:, :, x1]
    top = (tl << 11) + (tr - tl) * ax
    bottom = (bl << 11) + (br - bl) * ax
    result = ((top << 11) + (bottom - top) * ay + (1 << 21)) >> 22
    return result.transpose(0, 3, 1, 2) if nchw else result


def tflite_builtin_quantized_fully_connected(x: np.ndarray, x_zero_point: int, w: np.ndarray, w_zero_point: int,
                                             bias, multiplier: int, shift: int, out_zero_point: int, low: int,
                                             high: int) -> np.ndarray:
    """TFLite's builtin quantized FULLY_CONNECTED (the tflite driver where XNNPACK declines the node:
    int8 weights with a non-zero zero point, or weights that are not constant): the exact int32
    accumulator of ``x`` ([batches, input_size]) and ``w`` ([units, input_size]) plus ``bias``,
    requantized with NNAPI's Q31 ``multiplier`` and ``shift`` and the same doubling high multiply,
    but a right shift that rounds ties up, toward +infinity (gemmlowp's RoundingDivideByPOT, NNAPI's,
    rounds them away from zero): a negative result whose first rounding ends on a half comes out
    one step higher. The output zero point added, clamped to [low, high]."""
    acc = (np.asarray(x, np.int64) - x_zero_point) @ (np.asarray(w, np.int64) - w_zero_point).T
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)
    acc = wrap_int32(acc)
    if shift > 0:
        acc = wrap_int32(acc << shift)
    result = saturating_rounding_doubling_high_mul(acc, multiplier)
    right = max(-shift, 0)
    if right:
        result = (result + (1 << (right - 1))) >> right
    return np.clip(result + out_zero_point, low, high)
