"""Arithmetic shared by operation families: quantized ranges and rounding, fused activations, and
small shape helpers. (The requantization arithmetic is :mod:`.requantization`.)
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Arg, Call, OperationRegistration, fail
from nnapi_ref.types import DTYPES, FuseCode, OperandCode as T

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


def wrap(x, bits: int = 32) -> np.ndarray:
    """Two's complement wrap-around of integers to ``bits`` bits (C's int32/int16 overflow), as
    int64."""
    x = np.asarray(x, np.int64)
    if bits == 32:
        return x.astype(np.int32).astype(np.int64)
    half = 1 << (bits - 1)
    return ((x + half) & ((1 << bits) - 1)) - half


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
    if fuse not in (0, 1, 2, 3):
        raise fail(f"fused activation function code {fuse} is not one of 0..3")


def apply_activation(x: np.ndarray, fuse: int, out: Arg) -> np.ndarray:
    """Clamp ``x`` (float values, or integers in the output's quantized domain) by the fused
    activation ``fuse`` and cast to the output's element type."""
    if out.type in QUANT_RANGE:
        lo, hi = activation_range_quant(fuse, out)
        return np.clip(x, lo, hi).astype(DTYPES[out.type], copy=False)  # clip made the copy
    if fuse != 0:  # FuseCode.NONE: nothing to clamp
        lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(fuse)]
        x = np.clip(x, lo, hi)
    return x.astype(DTYPES[out.type], copy=False)


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """NumPy-style broadcasting of two shapes, as NNAPI's elementwise operations define it."""
    if a == b:
        return tuple(a)
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if not (x == y or x == 1 or y == 1):
            raise fail(f"shapes {a} and {b} cannot be broadcast (dimension {i})")
        out.append(y if x == 1 else x)
    return tuple(out)


def check_rank_at_least_1(name: str, *args: Arg) -> None:
    """Operations documented "up to 4 dimensions, from 1" reject rank-0 tensors."""
    for i, a in enumerate(args):
        if len(a.shape) < 1:
            raise fail(f"{name} input {i} must have rank >= 1, got a rank-0 tensor")


class BroadcastBinary(OperationRegistration):
    """An operation on two tensors of rank >= 1 broadcast against each other (comparisons,
    logical operations, MAXIMUM, MINIMUM, POW, PRELU)."""

    def infer(self, call: Call):
        a, b = call.ins[0], call.ins[1]
        check_rank_at_least_1(self.name, a, b)
        return [broadcast_shape(a.shape, b.shape)]


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0
