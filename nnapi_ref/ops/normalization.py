"""Normalizations: SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION,
INSTANCE_NORMALIZATION.

Float variants are computed in float64 and rounded to the output type (float16 and relaxed
float32 included). Quantized SOFTMAX and L2_NORMALIZATION reproduce NNAPI's CPU kernels (TFLite's
fixed-point arithmetic) exactly:

* SOFTMAX: input differences to the row maximum are scaled by a beta multiplier into Q5.26, fed
  to gemmlowp's ``exp_on_negative_values``, summed in Q12.19, inverted with
  ``one_over_one_plus_x_for_x_in_0_1`` and scaled to the fixed output scale 1/256; differences
  below ``-input_radius`` contribute nothing and give the minimum output.
* L2_NORMALIZATION: the squared norm of the zero-point-offset values gives an inverse square root
  multiplier (TFLite's ``GetInvSqrtQuantizedMultiplierExp``, a fixed-point Newton-Raphson
  iteration); values are rescaled to the fixed output scale 1/128.

AOSP and TFLite
---------------
SOFTMAX, L2_NORMALIZATION: identical, TFLite's fixed-point kernels in both (measured for
int8 and uint8, beta from 0.1 to 7).
"""
from __future__ import annotations

import functools

import numpy as np

from nnapi_ref.ops import fixedpoint as fp
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import normalize_axis
from nnapi_ref.ops.requantization import quantize_multiplier

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
Q8_RANGE = {T.TENSOR_QUANT8_ASYMM: (0, 255), T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127)}
SCALAR_OF = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16}


def _to_float_output(x: np.ndarray, dtype) -> np.ndarray:
    """Round float64 results to float32 first (NNAPI computes float16 in float32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float64).astype(np.float32).astype(dtype)


def _check_fixed_output_quant(op: OperationRegistration, out) -> None:
    if out.type in op.fixed_output_quant:
        name, (scale, zp) = op.name, op.fixed_output_quant[out.type]
        check(np.float32(out.scale) == np.float32(scale) and out.zero_point == zp,
              f"{name}: a {out.type.name} output must have scale {scale} and zero point {zp}, "
              f"got {out.scale} and {out.zero_point}")


def _axis(call: Call, index: int, rank: int) -> int:
    """The optional axis input ``index`` (default -1), normalized."""
    axis = call.ins[index].scalar() if len(call.ins) > index else -1
    return normalize_axis(axis, rank)


# ---- SOFTMAX -------------------------------------------------------------------------------

_SCALED_DIFF_INTEGER_BITS = 5
_ACCUMULATION_INTEGER_BITS = 12


def _count_leading_zeros_u32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.int64)
    bits = np.zeros(x.shape, np.int64)
    v = x.copy()
    for shift in (16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << shift)
        bits = np.where(big, bits + shift, bits)
        v = np.where(big, v >> shift, v)
    length = bits + (v > 0)  # bit length of x
    return 32 - length


@functools.lru_cache(maxsize=64)
def _exp_of_diffs(multiplier: int, left_shift: int) -> np.ndarray:
    """The fixed-point exp (Q0.31) of every 8-bit input difference -255..0 (index diff + 255),
    rescaled by the softmax multiplier: the same values, computed once instead of per element."""
    diff = np.arange(-255, 1, dtype=np.int64)
    rescaled = fp.multiply_by_quantized_multiplier_greater_than_one(diff, multiplier, left_shift)
    table = fp.exp_on_negative_values(rescaled, _SCALED_DIFF_INTEGER_BITS)
    table.flags.writeable = False
    return table


def softmax_quant8(x: np.ndarray, in_scale: float, beta: float, out_type) -> np.ndarray:
    """Quantized softmax along the last axis of raw values ``x`` (uint8 or int8)."""
    qmin, qmax = Q8_RANGE[out_type]
    real = min(1.0 * float(np.float32(beta)) * float(np.float32(in_scale)) * (1 << (31 - _SCALED_DIFF_INTEGER_BITS)),
               (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    check(multiplier > 0 and left_shift >= 0,
          f"SOFTMAX: beta * input scale ({beta} * {in_scale}) is too small for the quantized kernel")
    diff_min = -fp.calculate_input_radius(_SCALED_DIFF_INTEGER_BITS, left_shift)

    xi = x.astype(np.int64)
    diff = xi - xi.max(axis=-1, keepdims=True)
    used = diff >= diff_min
    exp = _exp_of_diffs(multiplier, left_shift)[diff + 255]  # Q0.31
    exp_acc = fp.rescale(exp, 0, _ACCUMULATION_INTEGER_BITS)
    sum_of_exps = fp.wrap32(np.sum(np.where(used, exp_acc, 0), axis=-1, keepdims=True))
    headroom_plus_one = _count_leading_zeros_u32(sum_of_exps)
    num_bits_over_unit = _ACCUMULATION_INTEGER_BITS - headroom_plus_one
    shifted_sum_minus_one = fp.wrap32((sum_of_exps << headroom_plus_one) - (np.int64(1) << 31))
    shifted_scale = fp.one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
    unsat = fp.rounding_divide_by_pot(fp.mul(shifted_scale, exp), num_bits_over_unit + 31 - 8)
    if out_type == T.TENSOR_QUANT8_ASYMM_SIGNED:
        unsat = unsat - 128
    out = np.where(used, np.clip(unsat, qmin, qmax), qmin)
    return out.astype(x.dtype)


def _softmax_signatures() -> list[Signature]:
    sigs = []
    for t in (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM):
        sigs.append(Signature(27, [t, T.FLOAT32], [t]))
        sigs.append(Signature(29, [t, T.FLOAT32, T.INT32], [t]))
    sigs.append(Signature(29, [T.TENSOR_FLOAT16, T.FLOAT16, T.INT32], [T.TENSOR_FLOAT16], optional=1))
    sigs.append(Signature(30, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.FLOAT32, T.INT32], [T.TENSOR_QUANT8_ASYMM_SIGNED],
                          optional=1))
    return sigs


@register
class Softmax(OperationRegistration):
    code = OperationCode.SOFTMAX
    zero_sized_inputs = None
    parameters = {1: "beta", 2: "axis"}
    accuracy = "relaxed"
    fixed_output_quant = {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)}
    signatures = _softmax_signatures()

    def infer(self, call: Call):
        inp, beta, out = call.ins[0], call.ins[1], call.outs[0]
        check(inp.rank <= 4, f"SOFTMAX: input rank {inp.rank} is above 4")
        _axis(call, 2, inp.rank)
        b = beta.scalar()
        check(b > 0, f"SOFTMAX: beta must be positive, got {b}")
        _check_fixed_output_quant(self, out)
        return [inp.shape]

    def execute(self, call: Call):
        inp, beta, out = call.ins[0], call.ins[1].scalar(), call.outs[0]
        axis = _axis(call, 2, inp.rank)
        x = np.moveaxis(inp.value, axis, -1)
        if inp.type in QUANT8:
            y = softmax_quant8(x, inp.scale, beta, out.type)
        else:
            xf = x.astype(np.float64)
            e = np.exp((xf - xf.max(axis=-1, keepdims=True)) * float(np.float32(beta)))
            y = _to_float_output(e / e.sum(axis=-1, keepdims=True), x.dtype)
        return [np.moveaxis(y, -1, axis)]


@register
class LogSoftmax(OperationRegistration):
    code = OperationCode.LOG_SOFTMAX
    parameters = {1: "beta", 2: "axis"}
    accuracy = "relaxed"
    signatures = [Signature(29, [T.TENSOR_FLOAT32, T.FLOAT32, T.INT32], [T.TENSOR_FLOAT32]),
                  Signature(29, [T.TENSOR_FLOAT16, T.FLOAT16, T.INT32], [T.TENSOR_FLOAT16])]

    def infer(self, call: Call):
        inp, beta = call.ins[0], call.ins[1]
        check(inp.rank >= 1, "LOG_SOFTMAX: input must have rank >= 1")
        normalize_axis(call.ins[2].scalar(), inp.rank)
        b = beta.scalar()
        check(b > 0, f"LOG_SOFTMAX: beta must be positive, got {b}")
        return [inp.shape]

    def execute(self, call: Call):
        inp, beta = call.ins[0], float(call.ins[1].scalar())
        axis = normalize_axis(call.ins[2].scalar(), inp.rank)
        x = inp.value.astype(np.float64)
        scaled = (x - x.max(axis=axis, keepdims=True)) * beta
        y = scaled - np.log(np.exp(scaled).sum(axis=axis, keepdims=True))
        return [_to_float_output(y, inp.value.dtype)]


# ---- L2_NORMALIZATION ----------------------------------------------------------------------

def inv_sqrt_quantized_multiplier_exp(value: np.ndarray, reverse_shift: int = -1):
    """TFLite GetInvSqrtQuantizedMultiplierExp, vectorized: for non-negative int32 ``value``
    returns (multiplier, shift) with 1/sqrt(value) ~= multiplier * 2**shift / 2**31."""
    v = np.asarray(value, np.int64)
    small = v <= 1
    v = np.where(small, 4, v)  # any value > 1; replaced by the special case below
    shift = np.full(v.shape, 11, np.int64)
    # while (input >= 1 << 29) { input /= 4; ++shift; }
    for _ in range(2):
        big = v >= (1 << 29)
        v = np.where(big, v // 4, v)
        shift = shift + big
    max_left_shift_bits = _count_leading_zeros_u32(v) - 1
    left_shift_bit_pairs = max_left_shift_bits // 2 - 1
    shift = shift - left_shift_bit_pairs
    v = v << (2 * left_shift_bit_pairs)
    x_input = v >> 1                                          # F3
    half_input = fp.saturating_rounding_multiply_by_pot(x_input, -1)
    half_three = (1 << 28) + (1 << 27)                        # 1.5 in F3
    x = np.full(v.shape, 1 << 28, np.int64)                   # F3::One()
    for _ in range(5):
        x3 = fp.rescale(fp.mul(fp.mul(x, x), x), 9, 3)
        x = fp.rescale(fp.wrap32(fp.mul(half_three, x) - fp.mul(half_input, x3)), 6, 3)
    x = fp.mul(x, 1518500250)                                 # * sqrt(2)/2 in F0
    negative = shift < 0
    x = np.where(negative, fp.wrap32(x << np.where(negative, -shift, 0)), x)
    shift = np.where(negative, 0, shift)
    x = np.where(small, np.int64(fp.INT32_MAX), x)
    shift = np.where(small, 0, shift)
    return x, shift * reverse_shift


def _multiply_by_quantized_multiplier_arrays(x, multiplier, shift):
    """TFLite MultiplyByQuantizedMultiplier with per-element multiplier and shift."""
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return fp.rounding_divide_by_pot(fp.mul(fp.wrap32(np.asarray(x, np.int64) << left), multiplier), right)


def l2norm_quant8(x: np.ndarray, zero_point: int, out_type, last_axis: bool) -> np.ndarray:
    """Quantized L2 normalization along the last axis of raw values ``x``."""
    diff = x.astype(np.int64) - zero_point
    square_sum = fp.wrap32(np.sum(diff * diff, axis=-1, keepdims=True))
    multiplier, shift = inv_sqrt_quantized_multiplier_exp(square_sum, -1)
    if out_type == T.TENSOR_QUANT8_ASYMM_SIGNED and last_axis:
        # reference_integer_ops::L2Normalization: the 1/128 output scale folded into the shift.
        out = _multiply_by_quantized_multiplier_arrays(diff, multiplier, shift + 7)
        return np.clip(out, -128, 127).astype(np.int8)
    scaled = fp.rounding_divide_by_pot(fp.mul(128 * diff, multiplier), -shift)
    if out_type == T.TENSOR_QUANT8_ASYMM:
        return np.clip(scaled + 128, 0, 255).astype(np.uint8)
    return np.clip(scaled, -128, 127).astype(np.int8)


def _l2_signatures() -> list[Signature]:
    sigs = [Signature(27, [T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32]),
            Signature(29, [T.TENSOR_FLOAT32, T.INT32], [T.TENSOR_FLOAT32])]
    for t in (T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM):
        sigs.append(Signature(29, [t, T.INT32], [t], optional=1))
    sigs.append(Signature(30, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32], [T.TENSOR_QUANT8_ASYMM_SIGNED], optional=1))
    return sigs


@register
class L2Normalization(OperationRegistration):
    code = OperationCode.L2_NORMALIZATION
    parameters = {1: "axis"}
    accuracy = "relaxed"
    fixed_output_quant = {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)}
    signatures = _l2_signatures()

    def infer(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        check(1 <= inp.rank <= 4, f"L2_NORMALIZATION: input rank {inp.rank} is not in 1..4")
        _axis(call, 1, inp.rank)
        _check_fixed_output_quant(self, out)
        return [inp.shape]

    def execute(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        axis = _axis(call, 1, inp.rank)
        x = np.moveaxis(inp.value, axis, -1)
        if inp.type in QUANT8:
            y = l2norm_quant8(x, inp.zero_point, out.type, axis == inp.rank - 1)
        else:
            xf = x.astype(np.float64)
            norm = np.maximum(np.sqrt(np.sum(xf * xf, axis=-1, keepdims=True)), 1e-6)
            y = _to_float_output(xf / norm, x.dtype)
        return [np.moveaxis(y, -1, axis)]


# ---- LOCAL_RESPONSE_NORMALIZATION ----------------------------------------------------------

def _lrn_signatures() -> list[Signature]:
    f32 = [T.TENSOR_FLOAT32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32]
    f16 = [T.TENSOR_FLOAT16, T.INT32, T.FLOAT16, T.FLOAT16, T.FLOAT16, T.INT32]
    return [Signature(27, f32, [T.TENSOR_FLOAT32]),
            Signature(29, f32 + [T.INT32], [T.TENSOR_FLOAT32]),
            Signature(29, f16, [T.TENSOR_FLOAT16], optional=1)]


@register
class LocalResponseNormalization(OperationRegistration):
    code = OperationCode.LOCAL_RESPONSE_NORMALIZATION
    parameters = {1: "radius", 2: "bias", 3: "alpha", 4: "beta", 5: "axis"}
    accuracy = "relaxed"
    signatures = _lrn_signatures()

    def infer(self, call: Call):
        inp = call.ins[0]
        check(1 <= inp.rank <= 4, f"LOCAL_RESPONSE_NORMALIZATION: input rank {inp.rank} is not in 1..4")
        _axis(call, 5, inp.rank)
        bias = call.ins[2].scalar()
        check(bias != 0, "LOCAL_RESPONSE_NORMALIZATION: bias must not be zero")
        return [inp.shape]

    def execute(self, call: Call):
        inp = call.ins[0]
        radius = int(call.ins[1].scalar())
        bias, alpha, beta = (float(call.ins[k].scalar()) for k in (2, 3, 4))
        axis = _axis(call, 5, inp.rank)
        x = np.moveaxis(inp.value.astype(np.float64), axis, -1)
        n = x.shape[-1]
        # Windowed sum of squares over [max(0, i - r), min(n, i + r + 1)).
        csum = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x * x, axis=-1)], axis=-1)
        i = np.arange(n)
        lo = np.clip(i - radius, 0, n)
        hi = np.clip(i + radius + 1, 0, n)
        sqr_sum = np.maximum(csum[..., hi] - csum[..., lo], 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = x * np.power(bias + alpha * sqr_sum, -beta)
        return [_to_float_output(np.moveaxis(y, -1, axis), inp.value.dtype)]


# ---- INSTANCE_NORMALIZATION ----------------------------------------------------------------

@register
class InstanceNormalization(OperationRegistration):
    code = OperationCode.INSTANCE_NORMALIZATION
    parameters = {1: "gamma", 2: "beta", 3: "epsilon", 4: "layout"}
    accuracy = "relaxed"
    signatures = [Signature(29, [T.TENSOR_FLOAT32, T.FLOAT32, T.FLOAT32, T.FLOAT32, T.BOOL], [T.TENSOR_FLOAT32]),
                  Signature(29, [T.TENSOR_FLOAT16, T.FLOAT16, T.FLOAT16, T.FLOAT16, T.BOOL], [T.TENSOR_FLOAT16])]

    def infer(self, call: Call):
        inp = call.ins[0]
        check(inp.rank == 4, f"INSTANCE_NORMALIZATION: input must have rank 4, got {inp.rank}")
        return [inp.shape]

    def execute(self, call: Call):
        inp = call.ins[0]
        gamma, beta, epsilon = (float(call.ins[k].scalar()) for k in (1, 2, 3))
        nchw = bool(call.ins[4].scalar())
        x = inp.value.astype(np.float64)
        spatial = (2, 3) if nchw else (1, 2)
        mean = x.mean(axis=spatial, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=spatial, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (x - mean) * gamma / np.sqrt(var + epsilon) + beta
        return [_to_float_output(y, inp.value.dtype)]
