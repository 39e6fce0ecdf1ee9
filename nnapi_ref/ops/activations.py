"""Activation functions: RELU, RELU1, RELU6, LOGISTIC, TANH, ELU, HARD_SWISH.

Float tensors are computed in float32 (float16 inputs are widened and the result narrowed back,
as NNAPI's CPU implementation does). Quantized tensors follow the CPU implementation exactly:

* RELU/RELU1/RELU6 clamp in the quantized domain (the output quantization equals the input's).
* LOGISTIC and TANH rescale ``input - zero_point`` to a Q4.27 fixed-point value with an int32
  multiplier and left shift (``input_scale * 2**27``), evaluate gemmlowp's fixed-point logistic
  / tanh (:mod:`.fixedpoint`) and round the Q0.31 result to the fixed output quantization
  (LOGISTIC: scale 1/256, zero point 0 or -128; TANH: scale 1/128, zero point 128 or 0). Inputs
  farther than ``input_range_radius`` from the zero point saturate.
* HARD_SWISH uses TFLite's 16-bit fixed-point kernel: the input on a "hi-res" scale
  (``input_scale / 128``), a "relu-ish" factor in [0, 1] and the output multiplier.

AOSP and TFLite
---------------
RELU, RELU1, RELU6, LOGISTIC, TANH, HARD_SWISH: identical. AOSP runs TFLite's own
fixed-point kernels, and TFLite's reference kernels (the ``tflite`` convention's yardstick, see
:mod:`.requantization`) give the same result on every int8 input (tests/test_diverge.py).
TFLite's RELUs also accept an output quantization other than the input's and requantize; NNAPI's
do not, so such a TFLite RELU has no NNAPI equivalent.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import fixedpoint as fp
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register, signatures
from nnapi_ref.ops.common import QUANT_RANGE, activation_range_quant
from nnapi_ref.ops.requantization import quantize_multiplier
from nnapi_ref.types import DTYPES, FuseCode, ResultCode

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _unary_signatures(by_level: dict[int, tuple]) -> list[Signature]:
    sigs = []
    for level, types in by_level.items():
        sigs += signatures(level, types, [None], [None])
    return sigs


ACTIVATION_SIGNATURES = _unary_signatures({
    27: (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM),
    29: (T.TENSOR_FLOAT16,),
    30: (T.TENSOR_QUANT8_ASYMM_SIGNED,),
})


def _as_float32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32, copy=False)


def _op_failed(message: str) -> NnapiError:
    return NnapiError(ResultCode.OP_FAILED, message)


class _Unary(OperationRegistration):
    """One tensor in, one tensor of the same shape out."""

    max_rank: int | None = 4

    def infer(self, call: Call):
        x = call.ins[0]
        if self.max_rank is not None:
            check(x.rank <= self.max_rank, f"{self.name} input must have rank <= {self.max_rank}, got {x.rank}")
        else:
            check(x.rank >= 1, f"{self.name} input must have rank >= 1, got {x.rank}")
        self.check_quantization(call)
        return [x.shape]

    def check_quantization(self, call: Call) -> None:
        pass


# ---- RELU, RELU1, RELU6 ---------------------------------------------------------------------

class _ReluX(_Unary):
    signatures = ACTIVATION_SIGNATURES
    fuse: FuseCode
    lo: float
    hi: float

    def check_quantization(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            check(np.float32(out.scale) == np.float32(x.scale) and out.zero_point == x.zero_point,
                  f"{self.name} output scale/zero point ({out.scale}, {out.zero_point}) must equal the input's "
                  f"({x.scale}, {x.zero_point})")

    def execute(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            lo, hi = activation_range_quant(self.fuse, x)
            return [np.clip(x.value, lo, hi).astype(DTYPES[out.type])]
        # AOSP computes min(max(lo, x), hi) with std::min/std::max in float32: NaN gives lo, and
        # RELU's upper bound is FLT_MAX, so +inf gives FLT_MAX (inf again once narrowed to half).
        v = _as_float32(x.value)
        lo, hi = np.float32(self.lo), np.float32(self.hi)
        y = np.where(lo < v, v, lo)
        y = np.where(hi < y, hi, y)
        with np.errstate(over="ignore"):
            return [y.astype(DTYPES[out.type])]


@register
class Relu(_ReluX):
    code = OperationCode.RELU
    zero_sized_inputs = None
    accuracy = "medium"
    fuse, lo, hi = FuseCode.RELU, 0.0, float(np.finfo(np.float32).max)


@register
class Relu1(_ReluX):
    code = OperationCode.RELU1
    zero_sized_inputs = None
    accuracy = "medium"
    fuse, lo, hi = FuseCode.RELU1, -1.0, 1.0


@register
class Relu6(_ReluX):
    code = OperationCode.RELU6
    zero_sized_inputs = None
    accuracy = "medium"
    fuse, lo, hi = FuseCode.RELU6, 0.0, 6.0


# ---- LOGISTIC, TANH -------------------------------------------------------------------------

_INPUT_INTEGER_BITS = 4


def _input_rescaling(scale: float):
    """TFLite's (input_multiplier, input_left_shift, input_range_radius) for a Q4.27 input:
    QuantizeMultiplierGreaterThanOne(input_scale * 2**27) and CalculateInputRadius."""
    real = float(np.float32(scale)) * float(1 << (31 - _INPUT_INTEGER_BITS))
    if not real > 1.0:
        raise _op_failed(f"input scale {scale} is too small for the quantized kernel")
    multiplier, left_shift = quantize_multiplier(real)
    radius = fp.calculate_input_radius(_INPUT_INTEGER_BITS, left_shift)
    return multiplier, left_shift, radius


class _QuantizedSigmoidLike(_Unary):
    signatures: list

    def check_quantization(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            scale, zp = self.fixed_output_quant[x.type]
            check(np.float32(out.scale) == np.float32(scale) and out.zero_point == zp,
                  f"{self.name} {x.type.name} output must have scale {scale} and zero point {zp}, "
                  f"got {out.scale} and {out.zero_point}")

    def execute(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            return [self.quantized(x).astype(DTYPES[out.type])]
        return [self.compute(_as_float32(x.value)).astype(DTYPES[out.type])]

    def compute(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def quantized(self, x) -> np.ndarray:
        multiplier, left_shift, radius = _input_rescaling(x.scale)
        centered = x.value.astype(np.int64) - x.zero_point
        q4 = fp.multiply_by_quantized_multiplier_greater_than_one(centered, multiplier, left_shift)
        q0 = self.fixed_point(q4)
        result = self.requantize(q0, x.type)
        qmin, qmax = QUANT_RANGE[x.type]
        low, high = self.saturation_masks(centered, radius, x.type)
        return np.where(low, qmin, np.where(high, qmax, result))

    def fixed_point(self, q4):
        raise NotImplementedError

    def requantize(self, q0, type_):
        raise NotImplementedError

    def saturation_masks(self, centered, radius, type_):
        return centered <= -radius, centered >= radius


@register
class Logistic(_QuantizedSigmoidLike):
    code = OperationCode.LOGISTIC
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = ACTIVATION_SIGNATURES
    fixed_output_quant = {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)}

    def compute(self, v):
        with np.errstate(over="ignore"):
            return np.float32(1) / (np.float32(1) + np.exp(-v))

    def fixed_point(self, q4):
        return fp.logistic(q4, _INPUT_INTEGER_BITS)

    def requantize(self, q0, type_):
        q = fp.rounding_divide_by_pot(q0, 23)  # Q0.31 -> units of 1/256
        if type_ == T.TENSOR_QUANT8_ASYMM:
            return np.minimum(q, 255)
        return np.clip(q - 128, -128, 127)

    def saturation_masks(self, centered, radius, type_):
        if type_ == T.TENSOR_QUANT8_ASYMM:  # optimized_ops::Logistic (uint8) compares strictly
            return centered < -radius, centered > radius
        return centered <= -radius, centered >= radius


@register
class Tanh(_QuantizedSigmoidLike):
    code = OperationCode.TANH
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = _unary_signatures({
        27: (T.TENSOR_FLOAT32,),
        29: (T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM),
        30: (T.TENSOR_QUANT8_ASYMM_SIGNED,),
    })
    fixed_output_quant = {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)}

    def compute(self, v):
        return np.tanh(v)

    def fixed_point(self, q4):
        return fp.tanh(q4, _INPUT_INTEGER_BITS)

    def requantize(self, q0, type_):
        q = fp.rounding_divide_by_pot(q0, 24)  # Q0.31 -> units of 1/128
        if type_ == T.TENSOR_QUANT8_ASYMM:
            return np.minimum(q + 128, 255)
        return np.clip(q, -128, 127)


# ---- ELU ------------------------------------------------------------------------------------

@register
class Elu(OperationRegistration):
    code = OperationCode.ELU
    parameters = {1: "alpha"}
    accuracy = "medium"
    signatures = [Signature(30, [T.TENSOR_FLOAT16, T.FLOAT16], [T.TENSOR_FLOAT16]),
                  Signature(30, [T.TENSOR_FLOAT32, T.FLOAT32], [T.TENSOR_FLOAT32])]

    def infer(self, call):
        x = call.ins[0]
        check(x.rank >= 1, f"ELU input must have rank >= 1, got {x.rank}")
        return [x.shape]

    def execute(self, call):
        x, out = call.ins[0], call.outs[0]
        v = _as_float32(x.value)
        alpha = np.float32(call.ins[1].scalar())
        with np.errstate(over="ignore", invalid="ignore"):
            result = np.maximum(np.float32(0), v) + np.minimum(np.float32(0), alpha * (np.exp(v) - np.float32(1)))
        return [result.astype(DTYPES[out.type])]


# ---- HARD_SWISH -----------------------------------------------------------------------------

def _int16_srdhm(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul on int16 values."""
    a = np.asarray(a, np.int64)
    ab = a * np.int64(b)
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    s = ab + nudge
    high = np.where(s >= 0, s >> 15, -((-s) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, high)


def _int16_sdhm(a, b):
    """TFLite SaturatingDoublingHighMul on int16 values (truncating, like ARM SQDMULH)."""
    a = np.asarray(a, np.int64)
    ab = a * np.asarray(b, np.int64)
    high = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == -32768) & (np.asarray(b) == -32768), 32767, high)


def _int16_saturating_left_shift(x, amount: int):
    return np.clip(np.asarray(x, np.int64) * (1 << amount), -32768, 32767)


def _wrap16(x):
    return ((np.asarray(x, np.int64) + 32768) & 0xFFFF) - 32768


def _downscale_multiplier_to_int16(m32: int) -> int:
    if m32 >= fp.INT32_MAX - (1 << 15):
        return 32767
    return (m32 + (1 << 15)) >> 16


def hard_swish_quantized(x_value, in_scale, in_zp, out_scale, out_zp, out_type) -> np.ndarray:
    """TFLite's reference quantized HardSwish with NNAPI's parameter preparation."""
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)
    output_multiplier = hires_input_scale / np.float32(out_scale)
    reluish_multiplier = hires_input_scale / reluish_scale
    out_m32, out_exp = quantize_multiplier(float(output_multiplier))
    if out_exp > 0:
        raise _op_failed("HARD_SWISH: output multiplier exponent must be <= 0 "
                         f"(input scale {in_scale} too large for output scale {out_scale})")
    rel_m32, rel_exp = quantize_multiplier(float(reluish_multiplier))
    out_m16 = _downscale_multiplier_to_int16(out_m32)
    rel_m16 = _downscale_multiplier_to_int16(rel_m32)

    input_value = _wrap16(x_value.astype(np.int64) - in_zp)
    hires = _wrap16(input_value * 128)
    preshift_out_scale = _int16_srdhm(hires, out_m16)
    reluish = hires
    if rel_exp > 0:
        reluish = _int16_saturating_left_shift(reluish, rel_exp - 1)
    reluish = _int16_srdhm(reluish, rel_m16)
    if rel_exp > 0:
        reluish = _int16_saturating_left_shift(reluish, 1)
    if rel_exp < 0:
        reluish = fp.rounding_divide_by_pot(reluish, -rel_exp)
    reluish = (reluish + (1 << 15)) >> 1
    preshift_output = _int16_sdhm(reluish, preshift_out_scale)
    output = fp.rounding_divide_by_pot(preshift_output, -out_exp)
    output = _wrap16(output + out_zp)
    qmin, qmax = QUANT_RANGE[out_type]
    return np.clip(output, qmin, qmax)


@register
class HardSwish(_Unary):
    code = OperationCode.HARD_SWISH
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = _unary_signatures({30: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32) + QUANT8})
    max_rank = None

    def execute(self, call):
        x, out = call.ins[0], call.outs[0]
        if x.type in QUANT8:
            result = hard_swish_quantized(x.value, x.scale, x.zero_point, out.scale, out.zero_point, out.type)
            return [result.astype(DTYPES[out.type])]
        v = _as_float32(x.value)
        with np.errstate(over="ignore", invalid="ignore"):
            result = v * np.minimum(np.float32(6), np.maximum(np.float32(0), v + np.float32(3))) / np.float32(6)
            return [result.astype(DTYPES[out.type])]
