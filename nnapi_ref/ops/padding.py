"""Padding: PAD (zeros; a quantized tensor's logical zero, its zero point), PAD_V2 (a given value)
and MIRROR_PAD (REFLECT or SYMMETRIC copies of the edges).

AOSP and TFLite
---------------
PAD, PAD_V2, MIRROR_PAD: identical (the fill is the zero point, or the given value, in both;
read, not measured).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register, signatures
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.ops.shapes import QUANT8, check_same_quant
from nnapi_ref.types import DTYPES, ResultCode

MIRROR_REFLECT, MIRROR_SYMMETRIC = 0, 1


def paddings(name: str, arg, rank: int) -> list[tuple[int, int]]:
    """The [rank, 2] paddings tensor as (before, after) pairs, all non-negative."""
    check(arg.rank == 2 and tuple(arg.shape) == (rank, 2),
          f"{name}: paddings must have shape [{rank}, 2], got {list(arg.shape)}")
    values = np.asarray(arg.value).reshape(rank, 2)
    check(bool((values >= 0).all()), f"{name}: paddings must be non-negative, got {values.tolist()}")
    return [(int(a), int(b)) for a, b in values]


def padded_shape(shape, pads) -> tuple:
    return tuple(before + d + after for d, (before, after) in zip(shape, pads))


def pad_constant(x: np.ndarray, pads, value) -> np.ndarray:
    out = np.full(padded_shape(x.shape, pads), value, x.dtype)
    out[tuple(slice(before, before + d) for d, (before, _) in zip(x.shape, pads))] = x
    return out


class _Pad(OperationRegistration):
    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank <= 4, f"{self.name}: input rank {x.rank} exceeds 4")
        check_same_quant(self.name, x, call.outs[0])
        return [padded_shape(x.shape, paddings(self.name, call.ins[1], x.rank))]


@register
class Pad(_Pad):
    code = OperationCode.PAD
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "paddings"}
    accuracy = "strict"
    signatures = (signatures(28, (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM), [None, T.TENSOR_INT32], [None])
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.TENSOR_INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32], [None]))

    def execute(self, call: Call):
        x = call.ins[0]
        value = x.zero_point if x.type in QUANT8 else 0
        return [pad_constant(x.value, paddings(self.name, call.ins[1], x.rank), value)]


@register
class PadV2(_Pad):
    code = OperationCode.PAD_V2
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "paddings", 2: "pad value"}
    accuracy = "strict"
    same_when_signed = False  # the pad value is an INT32 scalar in the quantized domain
    signatures = [Signature(29, [T.TENSOR_FLOAT32, T.TENSOR_INT32, T.FLOAT32], [T.TENSOR_FLOAT32]),
                  Signature(29, [T.TENSOR_FLOAT16, T.TENSOR_INT32, T.FLOAT16], [T.TENSOR_FLOAT16]),
                  Signature(29, [T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32, T.INT32], [T.TENSOR_QUANT8_ASYMM]),
                  Signature(30, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32, T.INT32],
                            [T.TENSOR_QUANT8_ASYMM_SIGNED])]

    def infer(self, call: Call):
        x = call.ins[0]
        if x.type in QUANT8:
            lo, hi = QUANT_RANGE[x.type]
            value = call.ins[2].scalar()
            check(lo <= value <= hi, f"PAD_V2: quantized pad value {value} out of range [{lo}, {hi}]")
        return super().infer(call)

    def execute(self, call: Call):
        x = call.ins[0]
        value = np.asarray(call.ins[2].value).astype(DTYPES[x.type])
        return [pad_constant(x.value, paddings(self.name, call.ins[1], x.rank), value)]


@register
class MirrorPad(OperationRegistration):
    code = OperationCode.MIRROR_PAD
    parameters = {1: "paddings", 2: "mode"}
    accuracy = "strict"
    signatures = signatures(1000007, (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM,
                                      T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
                            [None, T.TENSOR_INT32, T.INT32], [None])

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank >= 1, "MIRROR_PAD: input must have rank >= 1")
        check_same_quant("MIRROR_PAD", x, call.outs[0])
        mode = call.ins[2].scalar()
        check(mode in (MIRROR_REFLECT, MIRROR_SYMMETRIC), f"MIRROR_PAD: mode {mode} is not 0 (REFLECT) or 1 (SYMMETRIC)")
        pads = paddings("MIRROR_PAD", call.ins[1], x.rank)
        for d, (n, (before, after)) in enumerate(zip(x.shape, pads)):
            limit = n - 1 if mode == MIRROR_REFLECT else n
            check(before <= limit and after <= limit, f"MIRROR_PAD: paddings ({before}, {after}) of dimension {d} "
                  f"exceed {limit} for size {n} in {'REFLECT' if mode == MIRROR_REFLECT else 'SYMMETRIC'} mode")
        return [padded_shape(x.shape, pads)]

    def execute(self, call: Call):
        x = call.ins[0]
        out = x.value
        reflect = call.ins[2].scalar() == MIRROR_REFLECT
        for axis, (before, after) in enumerate(paddings("MIRROR_PAD", call.ins[1], x.rank)):
            n = x.shape[axis]
            # Output position p maps to input position q = p - before, mirrored at both edges:
            # REFLECT excludes the edge element (q -> -q, 2(n-1) - q), SYMMETRIC repeats it (q -> -1 - q, 2n - 1 - q).
            q = np.arange(-before, n + after)
            edge = 0 if reflect else 1
            q = np.where(q < 0, -q - edge, q)
            q = np.where(q >= n, 2 * n - 2 + edge - q, q)
            out = np.take(out, q, axis=axis)
        return [out]
