"""Shape-only operations: RESHAPE, SQUEEZE, EXPAND_DIMS, FILL, RANK.

None of them touches values (FILL writes a constant), so quantized operands keep their scale and
zero point: the output's must be the input's. Also home of small helpers the other tensor
manipulation families (slicing, padding, space) share.

AOSP and TFLite
---------------
All of them keep stored values and quantization: identical.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import (Call, OperationCode, OperationRegistration, Signature, T, ValueUnknown, check, register,
                                signatures)
from nnapi_ref.types import DTYPES, ResultCode

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def check_same_quant(name: str, inp, out, what: str = "output") -> None:
    """NNAPI's "the scale and zeroPoint must be the same as input0" for quantized tensors."""
    if inp.type in QUANT8:
        check(np.float32(inp.scale) == np.float32(out.scale) and inp.zero_point == out.zero_point,
              f"{name}: {what} scale {out.scale} and zeroPoint {out.zero_point} must equal input0's "
              f"({inp.scale}, {inp.zero_point})")


def int_vector(name: str, arg, what: str, length: int | None = None) -> list[int]:
    """The values of a 1-D TENSOR_INT32 parameter (checked to be 1-D, of ``length`` entries)."""
    check(arg.rank == 1, f"{name}: {what} must be a 1-D tensor, got rank {arg.rank}")
    if length is not None:
        check(arg.shape[0] == length, f"{name}: {what} must have {length} entries, got {arg.shape[0]}")
    return [int(v) for v in np.asarray(arg.value).reshape(-1)]


def maybe_value(arg):
    """An input's value, or None when it is not known yet (compilation time, not a constant)."""
    try:
        return arg.value
    except ValueUnknown:
        return None


@register
class Reshape(OperationRegistration):
    code = OperationCode.RESHAPE
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "shape"}
    accuracy = "strict"
    signatures = (signatures(27, (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM), [None, T.TENSOR_INT32], [None])
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.TENSOR_INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32], [None])
                  + signatures(1000006, (T.TENSOR_INT32,), [None, T.TENSOR_INT32], [None]))

    def infer(self, call: Call):
        x, shape_arg = call.ins
        check(x.rank <= 4, f"RESHAPE: input rank {x.rank} exceeds 4")
        check_same_quant("RESHAPE", x, call.outs[0])
        target = int_vector("RESHAPE", shape_arg, "the shape tensor")
        check(len(target) <= 4, f"RESHAPE: output rank {len(target)} exceeds 4")
        check(all(d >= -1 for d in target), f"RESHAPE: shape {target} has a negative entry other than -1")
        stretch = [i for i, d in enumerate(target) if d == -1]
        check(len(stretch) <= 1, f"RESHAPE: shape {target} has more than one -1 entry")
        count = int(np.prod(x.shape, dtype=np.int64))
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        if stretch:
            check(known != 0, f"RESHAPE: cannot infer the -1 entry of {target} with a zero-sized dimension")
            check(count % known == 0, f"RESHAPE: {count} elements cannot be reshaped to {target}")
            target[stretch[0]] = count // known
            known *= target[stretch[0]]
        check(known == count, f"RESHAPE: shape {target} has {known} elements, the input {list(x.shape)} has {count}")
        return [tuple(target)]

    def execute(self, call: Call):
        shape = self.infer(call)[0]
        return [call.ins[0].value.reshape(shape)]


@register
class Squeeze(OperationRegistration):
    code = OperationCode.SQUEEZE
    parameters = {1: "axes"}
    accuracy = "strict"
    signatures = (signatures(28, (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM), [None, T.TENSOR_INT32], [None],
                             omittable=[1])
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.TENSOR_INT32], [None], omittable=[1])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32], [None], omittable=[1]))

    def infer(self, call: Call):
        x, dims_arg = call.ins
        rank = x.rank
        check(rank <= 4, f"SQUEEZE: input rank {rank} exceeds 4")
        check_same_quant("SQUEEZE", x, call.outs[0])
        if dims_arg.omitted:
            squeeze = {i for i, d in enumerate(x.shape) if d == 1}
        else:
            dims = int_vector("SQUEEZE", dims_arg, "the squeeze dimensions")
            squeeze = set()
            for d in dims:
                check(-rank <= d < rank, f"SQUEEZE: dimension {d} out of range for rank {rank}")
                d %= rank
                check(x.shape[d] == 1, f"SQUEEZE: cannot squeeze dimension {d} of size {x.shape[d]}")
                squeeze.add(d)
        out = tuple(s for i, s in enumerate(x.shape) if i not in squeeze)
        return [out if out else (1,)]

    def execute(self, call: Call):
        return [call.ins[0].value.reshape(self.infer(call)[0])]


@register
class ExpandDims(OperationRegistration):
    code = OperationCode.EXPAND_DIMS
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "axis"}
    accuracy = "strict"
    signatures = (signatures(29, (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM),
                             [None, T.INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32], [None]))

    def infer(self, call: Call):
        x, axis_arg = call.ins
        check(x.rank >= 1, "EXPAND_DIMS: input must have rank >= 1")
        check_same_quant("EXPAND_DIMS", x, call.outs[0])
        axis = axis_arg.scalar()
        n = x.rank
        check(-(n + 1) <= axis <= n, f"EXPAND_DIMS: axis {axis} out of range [{-(n + 1)}, {n}]")
        axis %= n + 1
        return [tuple(x.shape[:axis]) + (1,) + tuple(x.shape[axis:])]

    def execute(self, call: Call):
        return [call.ins[0].value.reshape(self.infer(call)[0])]


@register
class Fill(OperationRegistration):
    code = OperationCode.FILL
    parameters = {0: "dimensions", 1: "value"}
    accuracy = "strict"
    signatures = [Signature(30, [T.TENSOR_INT32, T.FLOAT16], [T.TENSOR_FLOAT16]),
                  Signature(30, [T.TENSOR_INT32, T.FLOAT32], [T.TENSOR_FLOAT32]),
                  Signature(30, [T.TENSOR_INT32, T.INT32], [T.TENSOR_INT32])]

    def infer(self, call: Call):
        dims = int_vector("FILL", call.ins[0], "the output shape tensor")
        check(len(dims) >= 1, "FILL: the output shape must have at least one dimension")
        check(all(d >= 0 for d in dims), f"FILL: output shape {dims} has a negative dimension")
        return [tuple(dims)]

    def execute(self, call: Call):
        shape = self.infer(call)[0]
        return [np.full(shape, call.ins[1].value, DTYPES[call.outs[0].type])]


RANK_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM,
              T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM,
              T.TENSOR_QUANT8_ASYMM_SIGNED)


@register
class Rank(OperationRegistration):
    code = OperationCode.RANK
    accuracy = "strict"
    signatures = [Signature(30, [t], [T.INT32]) for t in RANK_TYPES]

    def infer(self, call: Call):
        check(call.ins[0].rank >= 1, "RANK: input must have rank >= 1")
        return [()]

    def execute(self, call: Call):
        return [np.asarray(call.ins[0].rank, np.int32)]
