"""Arithmetic shared by operation families: NNAPI's exact quantized integer arithmetic
(the gemmlowp/TFLite fixed-point rounding the NNAPI CPU implementation uses), fused
activations, and small shape helpers.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import check
from ..types import DTYPES, FuseCode, OperandCode as T
from .base import Arg, Call, Operation

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

QUANT_RANGE = {
    T.TENSOR_QUANT8_ASYMM: (0, 255),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    T.TENSOR_QUANT8_SYMM: (-128, 127),
    T.TENSOR_QUANT16_ASYMM: (0, 65535),
    T.TENSOR_QUANT16_SYMM: (-32768, 32767),
}


def round_half_away(x):
    """std::round: halves away from zero (numpy's round goes to even). Computed in float64, where
    adding 0.5 to any float32 value is exact (in float32, 0.49999997 + 0.5 rounds up to 1)."""
    x = np.asarray(x, np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: ``real ~= multiplier * 2**(shift - 31)``, multiplier in
    [2**30, 2**31). Returns (multiplier, shift); shift > 0 is a left shift."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(round_half_away(q * (1 << 31)))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def wrap(x, bits: int = 32) -> np.ndarray:
    """Two's complement wrap-around of integers to ``bits`` bits (C's int32/int16 overflow), as
    int64."""
    x = np.asarray(x, np.int64)
    if bits == 32:
        return x.astype(np.int32).astype(np.int64)
    half = 1 << (bits - 1)
    return ((x + half) & ((1 << bits) - 1)) - half


def wrap_int32(x) -> np.ndarray:
    """Wrap int64 values as the C implementation's int32 arithmetic would."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def saturating_rounding_doubling_high_mul(a, b, bits: int = 32) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul (ARM VQRDMULH) on int64 arrays holding
    ``bits``-bit values (int32 by default, int16 for 16-bit fixed point); ``a`` and ``b``
    broadcast. round(a * b / 2**(bits-1)) with halves rounded up, and MIN * MIN saturating to MAX.

    gemmlowp adds a nudge of 2**(bits-2) (or 1 - 2**(bits-2) when a*b < 0) and divides with C's
    truncation toward zero; for every sign that equals floor((a*b + 2**(bits-2)) / 2**(bits-1)),
    an arithmetic right shift."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    high = np.asarray(a * b)  # a fresh array; |a*b| <= 2**62: no int64 overflow
    high += np.int64(1 << (bits - 2))
    high >>= bits - 1
    lo = -(1 << (bits - 1))
    if np.any(b == lo):
        high = np.where((a == lo) & (b == lo), np.int64(-lo - 1), high)
    return high


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent rounded to nearest, halves away from zero;
    ``exponent`` (0..62) may be an array broadcasting with ``x`` (per channel, say).

    gemmlowp adds 1 when the remainder exceeds half the divisor (half plus one for negative x);
    that is floor((x + 2**(exponent-1) - [x < 0]) / 2**exponent) for exponent > 0."""
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    if exponent.ndim == 0:
        e = int(exponent)
        if e == 0:
            return x
        r = np.asarray(x >> 63)  # -1 where x < 0
        r += x
        r += np.int64(1 << (e - 1))
        r >>= e
        return r
    half = (np.int64(1) << exponent) >> 1  # 0 where exponent == 0
    r = np.where(exponent > 0, x >> 63, np.int64(0)) + x
    r += half
    r >>= exponent
    return r


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier: round(x * multiplier * 2**(shift-31)) in int32
    fixed point, i.e. RoundingDivideByPOT(SRDHM(x << max(shift, 0), multiplier), max(-shift, 0)),
    the left shift wrapping around in int32 as the C code does. ``x`` holds int32 values;
    ``multiplier`` and ``shift`` may be arrays broadcasting with it (per channel, say)."""
    x = np.asarray(x, np.int64)
    multiplier = np.asarray(multiplier, np.int64)
    shift = np.asarray(shift, np.int64)
    if shift.ndim == 0:
        s = int(shift)
        if s > 0:
            x = wrap_int32(x << s)
        return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), max(-s, 0))
    if np.any(shift > 0):
        x = wrap_int32(x << np.maximum(shift, 0))
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), np.maximum(-shift, 0))


def activation_range_quant(fuse: int, arg: Arg) -> tuple[int, int]:
    """NNAPI's CalculateActivationRange for a quantized output operand."""
    qmin, qmax = QUANT_RANGE[arg.type]
    scale = np.float32(arg.scale)

    def quantize(f):
        return arg.zero_point + int(round_half_away(np.float32(f) / scale))

    if fuse == FuseCode.RELU:
        return max(qmin, quantize(0.0)), qmax
    if fuse == FuseCode.RELU6:
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if fuse == FuseCode.RELU1:
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    return qmin, qmax


FLOAT_ACTIVATION_RANGE = {
    FuseCode.NONE: (-np.inf, np.inf),
    FuseCode.RELU: (0.0, np.inf),
    FuseCode.RELU1: (-1.0, 1.0),
    FuseCode.RELU6: (0.0, 6.0),
}


def check_fuse_code(fuse: int) -> None:
    check(fuse in (0, 1, 2, 3), f"fused activation function code {fuse} is not one of 0..3")


def apply_activation(x: np.ndarray, fuse: int, out: Arg) -> np.ndarray:
    """Clamp ``x`` (float values, or integers in the output's quantized domain) by the fused
    activation ``fuse`` and cast to the output's element type."""
    if out.type in QUANT_RANGE:
        lo, hi = activation_range_quant(fuse, out)
        return np.clip(x, lo, hi).astype(DTYPES[out.type], copy=False)  # clip made the copy
    lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(fuse)]
    if fuse != FuseCode.NONE:
        x = np.clip(x, lo, hi)
    return x.astype(DTYPES[out.type], copy=False)


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """NumPy-style broadcasting of two shapes, as NNAPI's elementwise operations define it."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        check(x == y or x == 1 or y == 1, f"shapes {a} and {b} cannot be broadcast (dimension {i})")
        out.append(y if x == 1 else x)
    return tuple(out)


def check_rank_at_least_1(name: str, *args: Arg) -> None:
    """Operations documented "up to 4 dimensions, from 1" reject rank-0 tensors."""
    for i, a in enumerate(args):
        check(a.rank >= 1, f"{name} input {i} must have rank >= 1, got a rank-0 tensor")


class BroadcastBinary(Operation):
    """An operation on two tensors of rank >= 1 broadcast against each other (comparisons,
    logical operations, MAXIMUM, MINIMUM, POW, PRELU)."""

    def infer(self, call: Call):
        a, b = call.ins[0], call.ins[1]
        check_rank_at_least_1(self.name, a, b)
        return [broadcast_shape(a.shape, b.shape)]


def normalize_axis(axis: int, rank: int) -> int:
    check(-rank <= axis < rank, f"axis {axis} out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0
