"""Binary elementwise arithmetic with broadcasting and a fused activation: ADD, MUL (SUB, DIV, ...).

Quantized ADD and MUL follow NNAPI's CPU implementation exactly: inputs are offset by their zero
points, rescaled in 32-bit fixed point (ADD with a 20-bit left shift so both inputs share the
larger scale), combined, requantized to the output scale and clamped by the activation.
"""
from __future__ import annotations

import numpy as np

from .base import Call, Operation, OperationCode, Signature, T, check, register, signatures
from .common import (apply_activation, broadcast_shape, check_fuse_code, multiply_by_quantized_multiplier,
                     quantize_multiplier)

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _binary_signatures(by_level: dict[int, tuple]) -> list[Signature]:
    sigs = []
    for level, types in by_level.items():
        sigs += signatures(level, types, [None, None, T.INT32], [None])
    return sigs


class _BinaryWithActivation(Operation):
    """Shared by the arithmetic operations taking (input0, input1, fuse code)."""

    def infer(self, call: Call):
        a, b, fuse, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        check(a.rank <= 4 and b.rank <= 4, f"{self.name} inputs must have rank <= 4, got {a.rank} and {b.rank}")
        fuse_code = fuse.scalar()
        check_fuse_code(fuse_code)
        if a.type == T.TENSOR_INT32:
            check(fuse_code == 0, f"{self.name} on TENSOR_INT32 takes no fused activation, got {fuse_code}")
        return [broadcast_shape(a.shape, b.shape)]

    def execute(self, call: Call):
        a, b, out = call.ins[0], call.ins[1], call.outs[0]
        fuse = call.ins[2].scalar()
        if a.type in QUANT8:
            return [apply_activation(self.quantized(a, b, out), fuse, out)]
        return [apply_activation(self.compute(a.value, b.value), fuse, out)]

    def compute(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def quantized(self, a, b, out) -> np.ndarray:
        raise NotImplementedError


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
    signatures = Add.signatures

    def compute(self, x, y):
        return x * y

    def quantized(self, a, b, out):
        product_scale = float(np.float32(a.scale) * np.float32(b.scale))
        m, s = quantize_multiplier(product_scale / float(np.float32(out.scale)))
        prod = (a.value.astype(np.int64) - a.zero_point) * (b.value.astype(np.int64) - b.zero_point)
        return multiply_by_quantized_multiplier(prod, m, s) + out.zero_point
