"""Pooling: AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.

Vectorized over batches, positions and channels; windows are combined separably (the filter's
rows, then its columns), each step a strided slice of the padded input. Windows only count the input elements they cover
(padding is never averaged in). Quantized AVERAGE_POOL_2D divides the exact integer sum by the
element count rounding half away from zero (TFLite's integer kernels: ``(acc +- count/2) / count``
with C truncation); quantized outputs share the input's scale and zero point.

AOSP and TFLite
---------------
AVERAGE_POOL_2D, MAX_POOL_2D: identical, TFLite's integer kernels in both (measured for int8
and uint8, VALID and SAME padding).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import (Call, OperationCode, OperationRegistration, Signature, T, WindowInputs, check, register,
                                window_parameters)
from nnapi_ref.ops.common import QUANT_RANGE, apply_activation
from nnapi_ref.ops.spatial import (from_nhwc, layout_shape, nhwc_dims, out_size, padded_window_input, parse_spatial,
                                   resolve_padding, to_nhwc)

F32, F16, Q8, S8, I32, BOOL = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM,
                              T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32, T.BOOL)
QUANT8 = (Q8, S8)


def _pool_signatures(by_level: dict[int, tuple]) -> list[Signature]:
    sigs = []
    for level, types in by_level.items():
        for t in types:
            for n in (9, 6):  # explicit, implicit
                if level == 27:
                    sigs.append(Signature(27, [t] + [I32] * n, [t]))
                sigs.append(Signature(max(level, 29), [t] + [I32] * n + [BOOL], [t], optional=1))
    return sigs


class _Pool(OperationRegistration):
    window_inputs = (WindowInputs(7, 6, 7), WindowInputs(10, 9, 10))
    parameters = window_parameters(1, ("filter width", "filter height"), dilation=False)

    def geometry(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        name = self.name
        check(inp.rank == 4, f"{name}: input must be 4-D, got rank {inp.rank}")
        p = parse_spatial(call, name, 1, 2, dilation=False)
        fw, fh = int(p.extra[0]), int(p.extra[1])
        check(fw > 0 and fh > 0, f"{name}: filter width and height must be > 0, got {fw}x{fh}")
        n, h, w, c = nhwc_dims(inp.shape, p.nchw)
        check(h > 0 and w > 0 and c > 0, f"{name}: input height, width and depth must be > 0, got {inp.shape}")
        resolve_padding(p, h, w, fh, fw)
        left, right, top, bottom = p.pads
        check(left < fw and right < fw and top < fh and bottom < fh,
              f"{name}: paddings {list(p.pads)} must be smaller than the filter ({fw}x{fh})")
        oh = out_size(h, fh, p.stride_h, 1, top, bottom)
        ow = out_size(w, fw, p.stride_w, 1, left, right)
        check(oh > 0 and ow > 0, f"{name}: output would be {oh}x{ow}: the filter does not fit the padded input")
        if inp.type in QUANT8:
            check(out.scale == inp.scale and out.zero_point == inp.zero_point,
                  f"{name}: output scale/zero point ({out.scale}, {out.zero_point}) must equal the input's "
                  f"({inp.scale}, {inp.zero_point})")
        return p, (n, h, w, c), (fh, fw), (oh, ow)

    def infer(self, call: Call):
        p, (n, _, _, c), _, (oh, ow) = self.geometry(call)
        return [layout_shape(n, oh, ow, c, p.nchw)]

    def windows(self, call: Call, x: np.ndarray, fill, combine, init):
        """Combine (``combine(acc, slice, out=acc)``) every tap's strided slice of the padded
        NHWC input; returns (acc, params, count) with count the covered elements per position."""
        p, (n, h, w, c), (fh, fw), (oh, ow) = self.geometry(call)
        left, _, top, _ = p.pads
        sh, sw = p.stride_h, p.stride_w
        # Taps that see only padding at every output position add ``fill`` (neutral) and are
        # skipped, so a filter far larger than the input costs no more than one that covers it.
        ky0, ky1 = max(0, top - (oh - 1) * sh), min(fh, top + h)
        kx0, kx1 = max(0, left - (ow - 1) * sw), min(fw, left + w)
        need_h, need_w = (oh - 1) * sh + ky1 - ky0, (ow - 1) * sw + kx1 - kx0
        xp = padded_window_input(x, top - ky0, left - kx0, need_h, need_w, fill)
        # Sums and maxima are separable: combine the filter's rows first (at the output rows, over
        # the full padded width), then its columns: fh + fw passes instead of fh * fw.
        rows = xp[:, 0:(oh - 1) * sh + 1:sh].copy()
        for ky in range(1, ky1 - ky0):
            combine(rows, xp[:, ky:ky + (oh - 1) * sh + 1:sh], out=rows)
        acc = rows[:, :, 0:(ow - 1) * sw + 1:sw].copy()
        for kx in range(1, kx1 - kx0):
            combine(acc, rows[:, :, kx:kx + (ow - 1) * sw + 1:sw], out=acc)
        # Elements covered by each window: separable in rows and columns.
        rows = np.arange(oh) * sh - top
        cols = np.arange(ow) * sw - left
        count_h = np.minimum(rows + fh, h) - np.maximum(rows, 0)
        count_w = np.minimum(cols + fw, w) - np.maximum(cols, 0)
        count = (count_h[:, None] * count_w[None, :])[None, :, :, None]
        return acc, p, count


def _float_input(inp) -> np.ndarray:
    return inp.value.astype(np.float32, copy=False)


@register
class AveragePool2D(_Pool):
    code = OperationCode.AVERAGE_POOL_2D
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = _pool_signatures({27: (F32, Q8), 29: (F16,), 30: (S8,)})

    def execute(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        if inp.type in QUANT8:
            p0 = parse_spatial(call, self.name, 1, 2, dilation=False)
            x = to_nhwc(inp.value.astype(np.int32), p0.nchw)
            acc, p, count = self.windows(call, x, 0, np.add, 0)
            # Padding adds 0; the covered elements sum exactly. Round half away from zero.
            half = count // 2
            q = np.where(acc >= 0, (acc + half) // count, -((half - acc) // count))
            return [from_nhwc(apply_activation(q, p.fuse, out), p.nchw)]
        p0 = parse_spatial(call, self.name, 1, 2, dilation=False)
        x = to_nhwc(_float_input(inp), p0.nchw)
        acc, p, count = self.windows(call, x, 0.0, np.add, 0.0)
        return [from_nhwc(apply_activation(acc / count.astype(np.float32), p.fuse, out), p.nchw)]


@register
class MaxPool2D(_Pool):
    code = OperationCode.MAX_POOL_2D
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = _pool_signatures({27: (F32, Q8), 29: (F16,), 30: (S8,)})

    def execute(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        p0 = parse_spatial(call, self.name, 1, 2, dilation=False)
        if inp.type in QUANT8:
            lo = QUANT_RANGE[inp.type][0]
            x = to_nhwc(inp.value, p0.nchw)
            acc, p, _ = self.windows(call, x, lo, np.maximum, lo)
            return [from_nhwc(apply_activation(acc.astype(np.int32), p.fuse, out), p.nchw)]
        x = to_nhwc(_float_input(inp), p0.nchw)
        acc, p, _ = self.windows(call, x, -np.inf, np.maximum, -np.inf)
        return [from_nhwc(apply_activation(acc, p.fuse, out), p.nchw)]


@register
class L2Pool2D(_Pool):
    code = OperationCode.L2_POOL_2D
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = _pool_signatures({27: (F32,), 29: (F16,)})

    def execute(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        p0 = parse_spatial(call, self.name, 1, 2, dilation=False)
        x = to_nhwc(_float_input(inp), p0.nchw)
        acc, p, count = self.windows(call, np.square(x), 0.0, np.add, 0.0)
        return [from_nhwc(apply_activation(np.sqrt(acc / count.astype(np.float32)), p.fuse, out), p.nchw)]
