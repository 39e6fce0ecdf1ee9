"""Comparisons (EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL), logical operations
(LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT) and SELECT.

Comparisons broadcast their inputs and produce TENSOR_BOOL8. Quantized inputs are compared by
their real values computed in float32, ``(q - zeroPoint) * scale``, as NNAPI's CPU
implementation does (so inputs with different scales compare correctly). SELECT requantizes
quantized inputs to the output's scale and zero point, like MAXIMUM/MINIMUM.

AOSP and TFLite
---------------
EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL: AOSP compares the float32 real
values; TFLite (ComparisonWithScaling) shifts the zero-point-offset values left by 8 and
requantizes them by each scale's Q31 multiplier, so it compares values rounded to 1/256: two
values closer than that may compare equal in TFLite and not in AOSP. The ``tflite`` convention
computes TFLite's. SELECT: AOSP requantizes the chosen input to the output's quantization,
TFLite copies the stored value whatever the quantizations (its converter gives all three the
same); the ``tflite`` convention copies. Both checked on every int8 pair (tests/test_diverge.py).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import BroadcastBinary, check_rank_at_least_1
from nnapi_ref.ops.elementwise import QUANT8, requantize
from nnapi_ref.ops.requantization import multiply_by_quantized_multiplier, quantize_multiplier

F32 = np.float32

_COMPARABLE = {
    29: (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM),
    30: (T.TENSOR_QUANT8_ASYMM_SIGNED,),
}



def _real(arg) -> np.ndarray:
    """The values to compare: for quantized tensors the real values in float32 (AOSP), or under
    the TFLite convention TFLite's fixed-point rescaling (ComparisonWithScaling: the
    zero-point-offset value shifted left by 8 and multiplied by the scale's Q31 multiplier);
    else the data."""
    if arg.type in QUANT8 and requantization.convention() == "tflite":
        shifted = (arg.value.astype(np.int64) - arg.zero_point) << 8
        return multiply_by_quantized_multiplier(shifted, *quantize_multiplier(float(F32(arg.scale))))
    if arg.type in QUANT8:
        return (arg.value.astype(np.int32) - np.int32(arg.zero_point)).astype(F32) * F32(arg.scale)
    return arg.value


class _Comparison(BroadcastBinary):
    signatures = [Signature(level, [t, t], [T.TENSOR_BOOL8])
                  for level, types in _COMPARABLE.items() for t in types]
    ufunc = None

    def execute(self, call: Call):
        a, b = call.ins
        with np.errstate(invalid="ignore"):
            return [type(self).ufunc(_real(a), _real(b))]


@register
class Equal(_Comparison):
    code = OperationCode.EQUAL
    accuracy = "strict"
    ufunc = np.equal


@register
class NotEqual(_Comparison):
    code = OperationCode.NOT_EQUAL
    accuracy = "strict"
    ufunc = np.not_equal


@register
class Greater(_Comparison):
    code = OperationCode.GREATER
    accuracy = "strict"
    ufunc = np.greater


@register
class GreaterEqual(_Comparison):
    code = OperationCode.GREATER_EQUAL
    accuracy = "strict"
    ufunc = np.greater_equal


@register
class Less(_Comparison):
    code = OperationCode.LESS
    accuracy = "strict"
    ufunc = np.less


@register
class LessEqual(_Comparison):
    code = OperationCode.LESS_EQUAL
    accuracy = "strict"
    ufunc = np.less_equal


class _LogicalBinary(BroadcastBinary):
    signatures = [Signature(29, [T.TENSOR_BOOL8, T.TENSOR_BOOL8], [T.TENSOR_BOOL8])]
    ufunc = None

    def execute(self, call: Call):
        a, b = call.ins
        return [type(self).ufunc(a.value.astype(bool), b.value.astype(bool))]


@register
class LogicalAnd(_LogicalBinary):
    code = OperationCode.LOGICAL_AND
    accuracy = "strict"
    ufunc = np.logical_and


@register
class LogicalOr(_LogicalBinary):
    code = OperationCode.LOGICAL_OR
    accuracy = "strict"
    ufunc = np.logical_or


@register
class LogicalNot(OperationRegistration):
    code = OperationCode.LOGICAL_NOT
    accuracy = "strict"
    signatures = [Signature(29, [T.TENSOR_BOOL8], [T.TENSOR_BOOL8])]

    def infer(self, call: Call):
        check_rank_at_least_1(self.name, call.ins[0])
        return [call.ins[0].shape]

    def execute(self, call: Call):
        return [np.logical_not(call.ins[0].value.astype(bool))]


@register
class Select(OperationRegistration):
    code = OperationCode.SELECT
    accuracy = "strict"
    signatures = [Signature(level, [T.TENSOR_BOOL8, t, t], [t])
                  for level, types in {29: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32,
                                            T.TENSOR_QUANT8_ASYMM),
                                       30: (T.TENSOR_QUANT8_ASYMM_SIGNED,)}.items()
                  for t in types]

    def infer(self, call: Call):
        cond, a, b = call.ins
        check_rank_at_least_1(self.name, cond, a, b)
        check(tuple(cond.shape) == tuple(a.shape),
              f"SELECT condition shape {list(cond.shape)} differs from input1 shape {list(a.shape)}")
        check(tuple(a.shape) == tuple(b.shape),
              f"SELECT input1 shape {list(a.shape)} differs from input2 shape {list(b.shape)}")
        return [tuple(a.shape)]

    def execute(self, call: Call):
        cond, a, b = call.ins
        out = call.outs[0]
        if a.type in QUANT8 and requantization.convention() == "nnapi":
            x, y = requantize(a, out), requantize(b, out)
        else:  # TFLite's kernel picks the stored values whatever their quantization
            x, y = a.value, b.value
        return [np.where(cond.value.astype(bool), x, y)]
