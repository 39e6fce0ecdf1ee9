"""Binary elementwise arithmetic with broadcasting: ADD, SUB, MUL, DIV (with a fused activation),
MAXIMUM, MINIMUM, POW and PRELU.

Quantized arithmetic follows NNAPI's CPU implementation exactly:

* ADD and SUB offset the inputs by their zero points, shift them left by 20 bits, rescale both to
  twice the larger input scale in 32-bit fixed point (SUB negates the second multiplier), add,
  requantize to the output scale and clamp by the activation.
* MUL multiplies the zero-point-offset inputs and requantizes by ``s1 * s2 / s_out``, the product
  ``s1 * s2`` formed as the requantization convention says (AOSP's Broadcast.cpp: in float32;
  TFLite's mul.cc: in double; see :mod:`.requantization`).
* MAXIMUM and MINIMUM requantize each input to the output's scale and zero point first
  (``round(real / s_out) + zp_out`` in double precision, halves away from zero, saturated), then
  compare the quantized values.
* PRELU rescales positive inputs by ``s_in / s_out`` and negative ones, times the
  zero-point-offset alpha, by ``s_in * s_alpha / s_out``, in 32-bit fixed point.

Float16 is computed in float32 and rounded back, as the CPU implementation does; relaxed float32
models are computed in full float32.

AOSP and TFLite
---------------
ADD, SUB: identical, TFLite's kernel in both (every int8 pair checked). MUL: AOSP divides the
float32 scale product by the output scale in double; TFLite computes the whole multiplier in
float32 (mul.cc: one float expression), measured. MAXIMUM, MINIMUM: AOSP requantizes both inputs
to the output's quantization; TFLite compares the stored values whatever their quantizations
(measured on every int8 pair). PRELU: the positive multiplier is the float32 quotient
``s_in / s_out`` in both; the negative one is the float32 product divided in double (AOSP) or in
float32 (TFLite), measured. The ``tflite`` convention computes TFLite's each time
(tests/test_diverge.py).
"""
from __future__ import annotations

import functools

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import (Arg, Call, OperationCode, OperationRegistration, Signature, T, check, fail, register,
                                signatures)
from nnapi_ref.ops.common import (QUANT_RANGE, BroadcastBinary, apply_activation, broadcast_shape, check_fuse_code,
                                  round_half_away)
from nnapi_ref.ops.requantization import (multiply_by_quantized_multiplier, prelu_multipliers, product_multipliers,
                                          quantize_multiplier)
from nnapi_ref.types import ResultCode

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
F32 = np.float32
_F16 = np.dtype(np.float16)  # compared with a dtype, not a type: no conversion per call


def _binary_signatures(by_level: dict[int, tuple]) -> list[Signature]:
    sigs = []
    for level, types in by_level.items():
        sigs += signatures(level, types, [None, None, T.INT32], [None])
    return sigs


def _pair_signatures(by_level: dict[int, tuple]) -> list[Signature]:
    sigs = []
    for level, types in by_level.items():
        sigs += signatures(level, types, [None, None], [None])
    return sigs


def _as_float32(x: np.ndarray) -> np.ndarray:
    """Float16 data is computed in float32, as NNAPI's CPU implementation does."""
    return x.astype(F32) if x.dtype == _F16 else x


def requantize(arg, out) -> np.ndarray:
    """NNAPI's requantize(): dequantize ``arg`` (in float32) and quantize it to ``out``'s scale and
    zero point in double precision, rounding halves away from zero and saturating."""
    real = (arg.value.astype(np.int32) - np.int32(arg.zero_point)).astype(F32) * F32(arg.scale)
    q = real.astype(np.float64) / float(F32(out.scale)) + out.zero_point
    lo, hi = QUANT_RANGE[out.type]
    return np.clip(round_half_away(np.clip(q, lo, hi)), lo, hi).astype(np.int64)



class _BinaryWithActivation(OperationRegistration):
    """Shared by the arithmetic operations taking (input0, input1, fuse code)."""

    fused_activation = 2

    def infer(self, call: Call):
        a, b, fuse, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        if not (a.rank <= 4 and b.rank <= 4):
            raise fail(f"{self.name} inputs must have rank <= 4, got {a.rank} and {b.rank}")
        fuse_code = fuse.scalar()
        check_fuse_code(fuse_code)
        if fuse_code != 0 and a.type == T.TENSOR_INT32:
            raise fail(f"{self.name} on TENSOR_INT32 takes no fused activation, got {fuse_code}")
        self.check_quantization(a, b, out)
        return [broadcast_shape(a.shape, b.shape)]

    def check_quantization(self, a, b, out) -> None:
        pass

    def execute(self, call: Call):
        a, b, out = call.ins[0], call.ins[1], call.outs[0]
        fuse = call.ins[2].scalar()
        if a.type in QUANT8:
            if a.value.size + b.value.size >= PAIR_TABLE_MIN_SIZE:
                return [self.quantized_by_table(a, b, out, fuse)]
            return [apply_activation(self.quantized(a, b, out), fuse, out)]
        if a.type == T.TENSOR_INT32:
            return [self.integer(a.value, b.value)]
        return [apply_activation(self.compute(_as_float32(a.value), _as_float32(b.value)), fuse, out)]

    def compute(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def integer(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """TENSOR_INT32: 32-bit two's complement arithmetic (wraps around)."""
        with np.errstate(over="ignore"):
            return self.compute(x, y).astype(np.int32)

    def quantized(self, a, b, out) -> np.ndarray:
        raise NotImplementedError

    def quantized_by_table(self, a, b, out, fuse: int) -> np.ndarray:
        """The quantized result looked up in a table of all 256 x 256 pairs of input values,
        built with :meth:`quantized` (so identical by construction)."""
        table = _pair_table(self, a.type, float(a.scale), int(a.zero_point), b.type, float(b.scale),
                            int(b.zero_point), out.type, float(out.scale), int(out.zero_point), int(fuse),
                            requantization.convention())
        x, y = a.value, b.value
        if x.dtype == np.int8:
            x, y = x.view(np.uint8), y.view(np.uint8)
        index = x.astype(np.intp)
        index <<= 8
        if index.shape == np.broadcast_shapes(x.shape, y.shape):
            index |= y
        else:
            index = index | y
        return table.take(index)


# Quantized binary operations on at least this many elements (both inputs) use a pair table.
PAIR_TABLE_MIN_SIZE = 4096


@functools.lru_cache(maxsize=64)
def _pair_table(op, a_type, a_scale, a_zp, b_type, b_scale, b_zp, out_type, out_scale, out_zp, fuse, convention):
    """op's quantized result under the requantization ``convention`` for every pair of 8-bit
    input values, indexed by (byte(a) << 8) | byte(b) (int8 values as their two's complement
    bytes)."""
    dtype = np.int8 if a_type == T.TENSOR_QUANT8_ASYMM_SIGNED else np.uint8
    values = np.arange(256, dtype=np.uint8).view(dtype)
    grid_a = np.repeat(values, 256).reshape(256, 256)
    grid_b = np.tile(values, 256).reshape(256, 256)
    a = Arg(a_type, grid_a.shape, a_scale, a_zp, None, grid_a)
    b = Arg(b_type, grid_b.shape, b_scale, b_zp, None, grid_b)
    out = Arg(out_type, grid_a.shape, out_scale, out_zp)
    with requantization.using(convention):
        return apply_activation(op.quantized(a, b, out), fuse, out).reshape(-1)


def add_sub_quantized(a, b, out, sign: int) -> np.ndarray:
    """a + sign * b in the output's quantized domain, the way NNAPI's CPU ADD/SUB compute it."""
    left_shift = 20
    twice_max_input_scale = 2.0 * max(float(np.float32(a.scale)), float(np.float32(b.scale)))
    m1, s1 = quantize_multiplier(float(np.float32(a.scale)) / twice_max_input_scale)
    m2, s2 = quantize_multiplier(float(np.float32(b.scale)) / twice_max_input_scale)
    mo, so = quantize_multiplier(twice_max_input_scale / ((1 << left_shift) * float(np.float32(out.scale))))
    x = (a.value.astype(np.int64) - a.zero_point) << left_shift
    y = (b.value.astype(np.int64) - b.zero_point) << left_shift
    scaled_x = multiply_by_quantized_multiplier(x, m1, s1)
    scaled_y = multiply_by_quantized_multiplier(y, sign * m2, s2)
    return multiply_by_quantized_multiplier(scaled_x + scaled_y, mo, so) + out.zero_point


@register
class Add(_BinaryWithActivation):
    code = OperationCode.ADD
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = _binary_signatures({
        27: (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM),
        29: (T.TENSOR_FLOAT16,),
        30: (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
    })

    def compute(self, x, y):
        return x + y

    def quantized(self, a, b, out):
        return add_sub_quantized(a, b, out, +1)


@register
class Mul(_BinaryWithActivation):
    code = OperationCode.MUL
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = Add.signatures

    def check_quantization(self, a, b, out):
        if a.type in QUANT8:
            product = F32(a.scale) * F32(b.scale)
            check(F32(out.scale) > product,
                  f"MUL output scale {out.scale} must be larger than input1_scale * input2_scale = {product}")

    def compute(self, x, y):
        return x * y

    def quantized(self, a, b, out):
        m, s = (int(v[0]) for v in product_multipliers(a.scale, [b.scale], out.scale, tflite=requantization.FLOAT32))
        prod = (a.value.astype(np.int64) - a.zero_point) * (b.value.astype(np.int64) - b.zero_point)
        return multiply_by_quantized_multiplier(prod, m, s) + out.zero_point


@register
class Sub(_BinaryWithActivation):
    code = OperationCode.SUB
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = _binary_signatures({
        28: (T.TENSOR_FLOAT32,),
        29: (T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM),
        30: (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
    })

    def compute(self, x, y):
        return x - y

    def quantized(self, a, b, out):
        return add_sub_quantized(a, b, out, -1)


@register
class Div(_BinaryWithActivation):
    code = OperationCode.DIV
    zero_sized_inputs = None
    accuracy = "medium"
    signatures = _binary_signatures({
        28: (T.TENSOR_FLOAT32,),
        29: (T.TENSOR_FLOAT16,),
        30: (T.TENSOR_INT32,),
    })

    def accuracy_at(self, level):
        """Relaxed up to feature level 29, as AOSP tests it per HAL version."""
        return "relaxed" if level < 30 else self.accuracy

    def compute(self, x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return x / y

    def integer(self, x, y):
        """Floor division (rounds toward negative infinity); division by zero gives 0."""
        x = x.astype(np.int64)
        y = y.astype(np.int64)
        zero = y == 0
        q = x // np.where(zero, 1, y)
        return np.where(zero, 0, q).astype(np.int32)  # INT32_MIN // -1 wraps around


class _MaximumMinimum(BroadcastBinary):
    signatures = _pair_signatures({
        29: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM),
        30: (T.TENSOR_QUANT8_ASYMM_SIGNED,),
    })

    def execute(self, call: Call):
        a, b = call.ins
        out = call.outs[0]
        if a.type in QUANT8 and requantization.convention() == "nnapi":
            x, y = requantize(a, out), requantize(b, out)
        else:  # TFLite's kernel compares the stored values whatever their quantization
            x, y = a.value, b.value
        return [self.pick(x, y)]

    def pick(self, x, y):
        raise NotImplementedError


@register
class Maximum(_MaximumMinimum):
    code = OperationCode.MAXIMUM
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "medium"

    def pick(self, x, y):
        return np.where(x < y, y, x)  # std::max: the first operand unless it is less


@register
class Minimum(_MaximumMinimum):
    code = OperationCode.MINIMUM
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "medium"

    def pick(self, x, y):
        return np.where(y < x, y, x)  # std::min: the first operand unless the second is less


@register
class Pow(BroadcastBinary):
    code = OperationCode.POW
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "relaxed"
    signatures = _pair_signatures({29: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)})

    def execute(self, call: Call):
        base, exponent = call.ins
        with np.errstate(all="ignore"):
            result = np.power(base.value.astype(np.float64), exponent.value.astype(np.float64))
        return [result.astype(F32).astype(base.value.dtype)]


@register
class Prelu(BroadcastBinary):
    code = OperationCode.PRELU
    accuracy = "medium"
    signatures = _pair_signatures({
        29: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM),
        30: (T.TENSOR_QUANT8_ASYMM_SIGNED,),
    })

    def execute(self, call: Call):
        x, alpha = call.ins
        out = call.outs[0]
        if x.type in QUANT8:
            return [self.quantized(x, alpha, out)]
        v = x.value
        with np.errstate(all="ignore"):
            return [np.where(v >= 0, v, v * alpha.value).astype(v.dtype)]

    @staticmethod
    def quantized(x, alpha, out):
        (m_pos, s_pos), (m_neg, s_neg) = prelu_multipliers(x.scale, alpha.scale, out.scale)
        v = x.value.astype(np.int64) - x.zero_point
        a = alpha.value.astype(np.int64) - alpha.zero_point
        v, a = np.broadcast_arrays(v, a)
        pos = multiply_by_quantized_multiplier(v, m_pos, s_pos)
        neg = multiply_by_quantized_multiplier(v * a, m_neg, s_neg)
        lo, hi = QUANT_RANGE[out.type]
        return np.clip(np.where(v >= 0, pos, neg) + out.zero_point, lo, hi)
