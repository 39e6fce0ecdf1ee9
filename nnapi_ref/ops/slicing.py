"""Joining and cutting tensors: CONCATENATION, SPLIT, PACK, SLICE, STRIDED_SLICE, GATHER, TILE, REVERSE.

All of them move elements only. The one exception is quantized CONCATENATION since feature level 3,
whose inputs may carry their own scale and zero point: an input whose parameters differ from the
output's is requantized the way NNAPI's CPU implementation (TFLite's ConcatenationWithScaling)
does it, in float32 arithmetic on the uint8 representation.

AOSP and TFLite
---------------
CONCATENATION: identical where both accept it (measured for uint8 inputs of their own
quantizations; TFLite's int8 kernel requires one scale). The others move stored values:
identical.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, T, check, register, signatures
from nnapi_ref.ops.common import round_half_away
from nnapi_ref.ops.shapes import QUANT8, check_same_quant, int_vector, maybe_value
from nnapi_ref.types import ResultCode

FLOAT_Q8 = (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM)
WITH_INT32 = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
LEVEL6_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
                T.TENSOR_INT32)


def requantize_concat(arg, out) -> np.ndarray:
    """One CONCATENATION input in the output's quantization (TFLite's ConcatenationWithScaling)."""
    x = arg.value
    if np.float32(arg.scale) == np.float32(out.scale) and arg.zero_point == out.zero_point:
        return x
    # NNAPI runs the signed variant on uint8 data shifted by 128 (zero points too).
    shift = 128 if arg.type == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    xu = (x.astype(np.int32) + shift).astype(np.float32)
    scale = np.float32(arg.scale) * (np.float32(1.0) / np.float32(out.scale))
    bias = np.float32(-(arg.zero_point + shift)) * scale
    value = round_half_away(xu * scale + bias).astype(np.int64) + (out.zero_point + shift)
    return np.clip(value, 0, 255) - shift


@register
class Concatenation(OperationRegistration):
    code = OperationCode.CONCATENATION
    zero_sized_inputs = None
    parameters = {-1: "axis"}
    accuracy = "medium"
    signatures = (signatures(27, FLOAT_Q8, [None, T.INT32], [None], repeat=0)
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.INT32], [None], repeat=0)
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32], [None], repeat=0))

    def infer(self, call: Call):
        tensors = call.ins[:-1]
        first = tensors[0]
        rank = first.rank
        check(rank <= 4, f"CONCATENATION: input rank {rank} exceeds 4")
        axis = call.ins[-1].scalar()
        check(0 <= axis < rank, f"CONCATENATION: axis {axis} out of range [0, {rank})")
        total = 0
        for i, t in enumerate(tensors):
            check(t.rank == rank, f"CONCATENATION: input {i} has rank {t.rank}, input 0 has rank {rank}")
            for d in range(rank):
                if d != axis:
                    check(t.shape[d] == first.shape[d], f"CONCATENATION: input {i} dimension {d} is "
                          f"{t.shape[d]}, input 0's is {first.shape[d]}")
            total += t.shape[axis]
        shape = list(first.shape)
        shape[axis] = total
        return [tuple(shape)]

    def execute(self, call: Call):
        tensors, out = call.ins[:-1], call.outs[0]
        axis = call.ins[-1].scalar()
        if out.type in QUANT8:
            parts = [requantize_concat(t, out) for t in tensors]
        else:
            parts = [t.value for t in tensors]
        return [np.concatenate(parts, axis=axis)]


@register
class Split(OperationRegistration):
    code = OperationCode.SPLIT
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "axis", 2: "splits"}
    accuracy = "medium"
    signatures = (signatures(29, WITH_INT32, [None, T.INT32, T.INT32], [None], repeat_outputs=True)
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32, T.INT32], [None],
                               repeat_outputs=True))

    def infer(self, call: Call):
        x = call.ins[0]
        rank = x.rank
        check(rank >= 1, "SPLIT: input must have rank >= 1")
        axis = call.ins[1].scalar()
        check(-rank <= axis < rank, f"SPLIT: axis {axis} out of range [{-rank}, {rank})")
        axis %= rank
        n = call.ins[2].scalar()
        check(n >= 1, f"SPLIT: number of splits {n} must be positive")
        check(len(call.outs) == n, f"SPLIT: {n} splits but {len(call.outs)} outputs")
        check(x.shape[axis] % n == 0, f"SPLIT: axis size {x.shape[axis]} is not divisible by {n}")
        for k, out in enumerate(call.outs):
            check_same_quant("SPLIT", x, out, f"output {k}")
        shape = list(x.shape)
        shape[axis] //= n
        return [tuple(shape)] * n

    def execute(self, call: Call):
        x = call.ins[0]
        axis = call.ins[1].scalar() % x.rank
        return list(np.split(x.value, call.ins[2].scalar(), axis=axis))


@register
class Pack(OperationRegistration):
    code = OperationCode.PACK
    parameters = {0: "axis"}
    accuracy = "strict"
    signatures = signatures(1000006, LEVEL6_TYPES, [T.INT32, None], [None], repeat=1)

    def infer(self, call: Call):
        axis = call.ins[0].scalar()
        tensors, out = call.ins[1:], call.outs[0]
        first = tensors[0]
        rank = first.rank
        check(rank >= 1, "PACK: input tensors must have rank >= 1")
        check(0 <= axis <= rank, f"PACK: axis {axis} out of range [0, {rank + 1})")
        for i, t in enumerate(tensors):
            check(tuple(t.shape) == tuple(first.shape), f"PACK: input tensor {i} has shape {list(t.shape)}, "
                  f"input tensor 0 has {list(first.shape)}")
            check_same_quant("PACK", out, t, f"input tensor {i}")
        return [tuple(first.shape[:axis]) + (len(tensors),) + tuple(first.shape[axis:])]

    def execute(self, call: Call):
        return [np.stack([t.value for t in call.ins[1:]], axis=call.ins[0].scalar())]


@register
class Slice(OperationRegistration):
    code = OperationCode.SLICE
    zero_sized_inputs = None
    parameters = {1: "begin", 2: "size"}
    accuracy = "strict"
    signatures = (signatures(29, WITH_INT32, [None, T.TENSOR_INT32, T.TENSOR_INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32, T.TENSOR_INT32], [None]))

    def infer(self, call: Call):
        x = call.ins[0]
        rank = x.rank
        check(rank >= 1, "SLICE: input must have rank >= 1")
        check_same_quant("SLICE", x, call.outs[0])
        begin = int_vector("SLICE", call.ins[1], "begin", rank)
        size = int_vector("SLICE", call.ins[2], "size", rank)
        out = []
        for d in range(rank):
            b, s, n = begin[d], size[d], x.shape[d]
            if s == -1:
                s = n - b
            check(0 <= b <= n, f"SLICE: begin {b} out of range [0, {n}] in dimension {d}")
            check(s >= 0, f"SLICE: size {size[d]} in dimension {d} must be -1 or non-negative")
            check(b + s <= n, f"SLICE: begin {b} + size {s} exceeds dimension {d} of size {n}")
            out.append(s)
        return [tuple(out)]

    def execute(self, call: Call):
        begin = [int(b) for b in call.ins[1].value]
        shape = self.infer(call)[0]
        return [call.ins[0].value[tuple(slice(b, b + s) for b, s in zip(begin, shape))]]


def _clamped_index(index: int, dim: int, positive: bool) -> int:
    """TFLite's ClampedIndex (the STRIDED_SLICE start/stop normalization)."""
    if dim == 0:
        return 0 if positive else -1
    if positive:
        return dim if index >= dim else min(max(index, -dim), dim) % dim
    return -1 if index < -dim else min(max(index, -dim), dim - 1) % dim


@register
class StridedSlice(OperationRegistration):
    code = OperationCode.STRIDED_SLICE
    parameters = {1: "begin", 2: "end", 3: "strides", 4: "begin mask", 5: "end mask", 6: "shrink axis mask"}
    accuracy = "strict"
    _params = [None, T.TENSOR_INT32, T.TENSOR_INT32, T.TENSOR_INT32, T.INT32, T.INT32, T.INT32]
    signatures = (signatures(28, FLOAT_Q8, _params, [None])
                  + signatures(29, (T.TENSOR_FLOAT16,), _params, [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), _params, [None]))

    def _plan(self, call: Call):
        """Per dimension: (begin, stride, count, shrink)."""
        x = call.ins[0]
        rank = x.rank
        check(rank <= 4, f"STRIDED_SLICE: input rank {rank} exceeds 4")
        check_same_quant("STRIDED_SLICE", x, call.outs[0])
        begin = int_vector("STRIDED_SLICE", call.ins[1], "begin", rank)
        end = int_vector("STRIDED_SLICE", call.ins[2], "end", rank)
        strides = int_vector("STRIDED_SLICE", call.ins[3], "strides", rank)
        begin_mask, end_mask, shrink_mask = (call.ins[k].scalar() for k in (4, 5, 6))
        plan = []
        for d in range(rank):
            n, stride = x.shape[d], strides[d]
            check(stride != 0, f"STRIDED_SLICE: stride of dimension {d} is zero")
            positive = stride > 0
            b = (0 if positive else n - 1) if begin_mask & (1 << d) else _clamped_index(begin[d], n, positive)
            e = (n if positive else -1) if end_mask & (1 << d) else _clamped_index(end[d], n, positive)
            count = max(0, -((b - e) // stride))  # ceil((e - b) / stride)
            shrink = bool(shrink_mask & (1 << d))
            if shrink:
                check(positive, f"STRIDED_SLICE: shrinking dimension {d} needs a positive stride")
                check(count == 1, f"STRIDED_SLICE: shrinking dimension {d} needs a slice of size 1, got {count}")
            plan.append((b, stride, count, shrink))
        return plan

    def infer(self, call: Call):
        shape = tuple(c for _, _, c, shrink in self._plan(call) if not shrink)
        return [shape if shape else (1,)]

    def execute(self, call: Call):
        plan = self._plan(call)
        index = np.ix_(*[b + s * np.arange(c) for b, s, c, _ in plan])
        shape = tuple(c for _, _, c, shrink in plan if not shrink)
        return [call.ins[0].value[index].reshape(shape if shape else (1,))]


@register
class Gather(OperationRegistration):
    code = OperationCode.GATHER
    parameters = {1: "axis"}
    accuracy = "strict"
    signatures = (signatures(29, WITH_INT32, [None, T.INT32, T.TENSOR_INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32, T.TENSOR_INT32], [None]))

    def infer(self, call: Call):
        x, axis_arg, indices = call.ins
        rank = x.rank
        check(rank >= 1, "GATHER: input must have rank >= 1")
        check_same_quant("GATHER", x, call.outs[0])
        axis = axis_arg.scalar()
        check(-rank <= axis < rank, f"GATHER: axis {axis} out of range [{-rank}, {rank})")
        axis %= rank
        values = maybe_value(indices)
        if values is not None and values.size:
            check(values.min() >= 0 and values.max() < x.shape[axis],
                  f"GATHER: indices must be in [0, {x.shape[axis]}), got [{values.min()}, {values.max()}]")
        return [tuple(x.shape[:axis]) + tuple(indices.shape) + tuple(x.shape[axis + 1:])]

    def execute(self, call: Call):
        x, axis_arg, indices = call.ins
        return [np.take(x.value, indices.value.astype(np.intp), axis=axis_arg.scalar() % x.rank)]


@register
class Tile(OperationRegistration):
    code = OperationCode.TILE
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "multiples"}
    accuracy = "strict"
    signatures = (signatures(29, WITH_INT32, [None, T.TENSOR_INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32], [None]))

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank >= 1, "TILE: input must have rank >= 1")
        check_same_quant("TILE", x, call.outs[0])
        multiples = int_vector("TILE", call.ins[1], "multiples", x.rank)
        check(all(m >= 0 for m in multiples), f"TILE: multiples {multiples} must be non-negative")
        return [tuple(d * m for d, m in zip(x.shape, multiples))]

    def execute(self, call: Call):
        return [np.tile(call.ins[0].value, [int(m) for m in call.ins[1].value])]


@register
class Reverse(OperationRegistration):
    code = OperationCode.REVERSE
    parameters = {1: "axis"}
    accuracy = "strict"
    signatures = signatures(1000007, LEVEL6_TYPES, [None, T.TENSOR_INT32], [None])

    def infer(self, call: Call):
        x = call.ins[0]
        check(1 <= x.rank <= 8, f"REVERSE: input rank {x.rank} must be in [1, 8]")
        check_same_quant("REVERSE", x, call.outs[0])
        axis = int_vector("REVERSE", call.ins[1], "the axis tensor", 1)[0]
        check(0 <= axis < x.rank, f"REVERSE: axis {axis} out of range [0, {x.rank})")
        return [tuple(x.shape)]

    def execute(self, call: Call):
        return [np.flip(call.ins[0].value, axis=int(call.ins[1].value[0]))]
