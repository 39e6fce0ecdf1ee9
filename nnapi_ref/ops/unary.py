"""Unary elementwise math: FLOOR, ABS, EXP, LOG, NEG, SIN, SQRT, RSQRT.

Float16 inputs are computed in float32 and narrowed back (as NNAPI's CPU implementation does);
float32 is computed in float32. ABS and NEG also take TENSOR_INT32 (two's-complement wrap for
INT32_MIN, as in C). RSQRT on quant8 tensors (feature level 7) dequantizes to float32, computes
``1 / sqrt(x)`` in float32 and requantizes with round-half-away-from-zero and clamping; as in the
CPU implementation, an infinite result (x == 0) saturates to the largest quantized value, and so
does NaN (x < 0), because the C++ clamp ``max(min, min(max, NaN))`` yields the maximum.

AOSP and TFLite
---------------
RSQRT (quant8): AOSP dequantizes, computes in float32 and requantizes; TFLite's int8 RSQRT gives
the same on every int8 input (measured).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, T, check, register, signatures
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import DTYPES

FLOATS = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _unary_signatures(by_level: dict[int, tuple]) -> list:
    sigs = []
    for level, types in by_level.items():
        sigs += signatures(level, types, [None], [None])
    return sigs


class _UnaryMath(OperationRegistration):
    """Shape-preserving elementwise function of one tensor."""

    signatures = _unary_signatures({29: FLOATS})
    max_rank: int | None = None  # documented rank: "from 1"

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank >= 1, f"{self.name} input must have rank >= 1, got {x.rank}")
        if self.max_rank is not None:
            check(x.rank <= self.max_rank, f"{self.name} input must have rank <= {self.max_rank}, got {x.rank}")
        return [x.shape]

    def execute(self, call: Call):
        x, out = call.ins[0], call.outs[0]
        with np.errstate(all="ignore"):  # inf/NaN results follow IEEE, as in C
            if x.type in FLOATS:
                result = self.compute(x.value.astype(np.float32, copy=False))
            else:
                result = self.compute_other(x, out)
            return [np.asarray(result).astype(DTYPES[out.type], copy=False)]

    def compute(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def compute_other(self, x, out) -> np.ndarray:
        raise NotImplementedError


@register
class Floor(_UnaryMath):
    code = OperationCode.FLOOR
    accuracy = "medium"
    signatures = _unary_signatures({27: (T.TENSOR_FLOAT32,), 29: (T.TENSOR_FLOAT16,)})
    max_rank = 4

    def compute(self, v):
        return np.floor(v)


@register
class Abs(_UnaryMath):
    code = OperationCode.ABS
    accuracy = "medium"
    signatures = _unary_signatures({29: FLOATS, 30: (T.TENSOR_INT32,)})

    def compute(self, v):
        return np.abs(v)

    def compute_other(self, x, out):
        return np.abs(x.value)  # int32: abs(INT32_MIN) wraps to INT32_MIN, as in C


@register
class Exp(_UnaryMath):
    code = OperationCode.EXP
    accuracy = "relaxed"

    def compute(self, v):
        return np.exp(v)


@register
class Log(_UnaryMath):
    code = OperationCode.LOG
    accuracy = "relaxed"

    def compute(self, v):
        return np.log(v)


@register
class Neg(_UnaryMath):
    code = OperationCode.NEG
    accuracy = "medium"
    signatures = _unary_signatures({29: FLOATS + (T.TENSOR_INT32,)})

    def compute(self, v):
        return np.negative(v)

    def compute_other(self, x, out):
        return np.negative(x.value)  # int32 wrap-around for INT32_MIN


@register
class Sin(_UnaryMath):
    code = OperationCode.SIN
    accuracy = "relaxed"

    def compute(self, v):
        return np.sin(v)


@register
class Sqrt(_UnaryMath):
    code = OperationCode.SQRT
    accuracy = "relaxed"

    def compute(self, v):
        return np.sqrt(v)


@register
class Rsqrt(_UnaryMath):
    code = OperationCode.RSQRT
    accuracy = "relaxed"
    signatures = _unary_signatures({29: FLOATS, 1000007: QUANT8})

    def compute(self, v):
        return np.float32(1) / np.sqrt(v)

    def compute_other(self, x, out):
        real = (x.value.astype(np.int32) - np.int32(x.zero_point)).astype(np.float32) * np.float32(x.scale)
        with np.errstate(all="ignore"):
            res = self.compute(real)
            scaled = res / np.float32(out.scale)
            wide = scaled.astype(np.float64)  # exact, so that the rounding below is std::round's
            rounded = (np.sign(wide) * np.floor(np.abs(wide) + 0.5)).astype(np.float32)
            q = np.float32(out.zero_point) + rounded
        qmin, qmax = QUANT_RANGE[out.type]
        q = np.where(np.isnan(q), np.float32(qmax), q)
        return np.clip(q, qmin, qmax)
