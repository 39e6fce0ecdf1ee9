"""QUANTIZE, DEQUANTIZE and CAST.

QUANTIZE computes ``clamp(round(x / scale) + zeroPoint)`` in float32 (float16 inputs are promoted
to float32), rounding halves away from zero; a NaN saturates to the top of the range, as NNAPI's
CPU implementation's min/max chain gives.

DEQUANTIZE computes ``scale * (q - zeroPoint)`` in float32 (per channel for
TENSOR_QUANT8_SYMM_PER_CHANNEL) and rounds the result to the output type.

CAST converts values directly, ignoring scales and zero points: floats go to integers by
truncation toward zero; conversions to TENSOR_QUANT8_ASYMM saturate to [0, 255]. From feature
level 4, the other tensor types may be cast to themselves (identity).

AOSP and TFLite
---------------
QUANTIZE, DEQUANTIZE: identical (measured on every int8 value and on reals at the rounding
halves). CAST moves values without requantizing in both.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import QUANT_RANGE, check_rank_at_least_1
from nnapi_ref.types import DTYPES, ResultCode

F32 = np.float32



@register
class Quantize(OperationRegistration):
    code = OperationCode.QUANTIZE
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = [Signature(29 if out == T.TENSOR_QUANT8_ASYMM else 30, [inp], [out])
                  for inp in (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)
                  for out in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)]

    def infer(self, call: Call):
        check_rank_at_least_1(self.name, call.ins[0])
        return [call.ins[0].shape]

    def execute(self, call: Call):
        x = call.ins[0].value.astype(F32, copy=False)
        out = call.outs[0]
        lo, hi = QUANT_RANGE[out.type]
        with np.errstate(all="ignore"):
            # x / scale in float32; rounded half away from zero in float64, where adding +-0.5 to a
            # float32 value is exact (in float32, 0.49999997 + 0.5 rounds up to 1.0 and would round
            # the value the wrong way).
            q = np.divide(x, F32(out.scale), dtype=F32).astype(np.float64)
            q += np.copysign(0.5, q)
            np.trunc(q, out=q)
            q += out.zero_point
            np.clip(q, lo, hi, out=q)
            q[np.isnan(q)] = hi
        return [q.astype(DTYPES[out.type])]


_DEQUANTIZE_INPUTS = {
    T.TENSOR_QUANT8_ASYMM: 27,
    T.TENSOR_QUANT8_SYMM: 29,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 29,
    T.TENSOR_QUANT8_ASYMM_SIGNED: 30,
}


@register
class Dequantize(OperationRegistration):
    code = OperationCode.DEQUANTIZE
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = [Signature(max(level, 29 if out == T.TENSOR_FLOAT16 else 27), [inp], [out])
                  for inp, level in _DEQUANTIZE_INPUTS.items()
                  for out in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)]

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank <= 4, f"DEQUANTIZE input must have rank <= 4, got {x.rank}")
        if x.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = x.channel_quant
            check(cq is not None, "DEQUANTIZE per-channel input has no per-channel quantization parameters")
            check(0 <= cq.channel_dim < x.rank,
                  f"DEQUANTIZE channel dimension {cq.channel_dim} out of range for rank {x.rank}")
            check(len(cq.scales) == x.shape[cq.channel_dim],
                  f"DEQUANTIZE has {len(cq.scales)} channel scales for a dimension of size {x.shape[cq.channel_dim]}")
        return [x.shape]

    def execute(self, call: Call):
        x = call.ins[0]
        out = call.outs[0]
        q = x.value.astype(np.int32)
        if x.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            shape = [1] * q.ndim
            shape[x.channel_quant.channel_dim] = -1
            scale = np.asarray(x.channel_quant.scales, F32).reshape(shape)
            real = scale * q.astype(F32)
        else:
            real = F32(x.scale) * (q - np.int32(x.zero_point)).astype(F32)
        return [real.astype(F32).astype(np.float16 if out.type == T.TENSOR_FLOAT16 else F32)]


_CAST_BASIC = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
_CAST_IDENTITY_ONLY = (T.TENSOR_BOOL8, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM,
                       T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM)
_FLOATS = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)


@register
class Cast(OperationRegistration):
    code = OperationCode.CAST
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "medium"
    same_when_signed = False  # converts raw values
    signatures = ([Signature(29, [a], [b]) for a in _CAST_BASIC for b in _CAST_BASIC]
                  + [Signature(30, [a], [a]) for a in _CAST_IDENTITY_ONLY])

    def check_declared(self, in_dims: list, out_dims: list) -> str | None:
        """AOSP's CAST validation (types/operations/src/Cast.cpp) compares the declared
        dimensions literally: when both are given and the output has elements, they must be
        equal, an unknown dimension (0) in the input included ([1, 0, 0] before [1, 1, 1] is an
        invalid model; ANeuralNetworksModel_finish returns BAD_DATA)."""
        x, out = tuple(in_dims[0] or ()), tuple(out_dims[0] or ())
        if x and out and 0 not in out and x != out:
            return f"output dimensions {list(out)} differ from the input's {list(x)}"
        return None

    def infer(self, call: Call):
        check_rank_at_least_1(self.name, call.ins[0])
        return [call.ins[0].shape]

    def execute(self, call: Call):
        x = call.ins[0]
        out = call.outs[0]
        v = x.value
        if x.type == out.type:
            return [v.copy()]
        if out.type == T.TENSOR_QUANT8_ASYMM:
            if x.type in _FLOATS:
                f = v.astype(np.float64)
                f = np.where(np.isnan(f), 0.0, np.trunc(np.clip(f, 0.0, 255.0)))
                return [f.astype(np.uint8)]
            return [np.clip(v.astype(np.int64), 0, 255).astype(np.uint8)]
        if out.type == T.TENSOR_INT32:
            if x.type in _FLOATS:
                f = v.astype(np.float64)
                f = np.where(np.isnan(f), 0.0, np.trunc(np.clip(f, -2.0 ** 31, 2.0 ** 31 - 1)))
                return [f.astype(np.int32)]
            return [v.astype(np.int32)]
        # To a float type: integers convert exactly to float64, then round once (overflow: inf).
        dtype = np.float16 if out.type == T.TENSOR_FLOAT16 else F32
        with np.errstate(over="ignore"):
            if x.type in _FLOATS:
                return [v.astype(dtype)]
            return [v.astype(np.float64).astype(dtype)]
