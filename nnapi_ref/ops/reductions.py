"""Reductions along axes: MEAN, REDUCE_SUM/PROD/MAX/MIN/ANY/ALL, ARGMAX, ARGMIN, TOPK_V2.

Arithmetic follows NNAPI's CPU implementation:

* REDUCE_* start from the operation's identity (``lowest``/``max`` of the element type for
  MAX/MIN, so an empty reduction gives that value) and ignore repeated axes; REDUCE_PROD is 0
  whenever a reduced element is 0 (no ``0 * inf = nan``).
* NaN: REDUCE_MAX/MIN fold ``std::max(best, x)`` / ``std::min(best, x)``, false for a NaN, so a
  NaN is skipped (REDUCE_MAX([1, NaN, 3]) = 3; all NaN gives the starting ``lowest``/``max``).
  ARGMAX/ARGMIN start from the axis' first element and move on only to a strictly greater
  (smaller) one: a NaN after the first is skipped (ARGMAX([1, NaN, 0, 5]) = 3), a NaN first is
  never left (index 0).
* Quantized MEAN sums the raw quantized values in 32-bit integers and divides by the element
  count with C's truncating division; the output has the input's scale and zero point (under
  the ``tflite`` convention: TFLite's integer mean, :func:`tflite_quantized_mean`).
* TOPK_V2 orders by value, then by index, both descending (ties give the larger index first).

AOSP and TFLite
---------------
MEAN: AOSP (tflite::reference_ops::Mean of its TFLite version) requires the input's
quantization on the output and truncates the division; TFLite's current kernel
(reference_ops::QuantizedMeanOrSum, ai-edge-litert 2.3.0) rounds, and accepts any output
quantization (its multiplier ``s_in / s_out`` in double with ``1 / count`` folded in,
:func:`.requantization.tflite_mean_multiplier`). TFLite's NNAPI delegate refuses a MEAN whose
quantizations differ (NNAPI cannot express it) and leaves it to TFLite's kernel. The ``tflite``
convention computes TFLite's mean and accepts the differing quantization; the ``nnapi`` one
rejects it (BAD_DATA). REDUCE_MAX, REDUCE_MIN, ARGMAX, ARGMIN, TOPK_V2: identical, they only
compare stored values (both require REDUCE_*'s output quantization to be the input's).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, T, check, register, signatures
from nnapi_ref.ops.common import normalize_axis
from nnapi_ref.types import ResultCode

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def check_same_quant(name: str, inp, out) -> None:
    """A quantized output must carry the input's scale and zero point."""
    if inp.type in QUANT8:
        check(np.float32(out.scale) == np.float32(inp.scale) and out.zero_point == inp.zero_point,
              f"{name}: output scale/zero point ({out.scale}, {out.zero_point}) must equal the input's "
              f"({inp.scale}, {inp.zero_point})")


def reduce_axes(name: str, inp, axes_arg) -> tuple[int, ...]:
    """The (deduplicated, non-negative) axes to reduce, validated against the input rank."""
    rank = inp.rank
    check(rank <= 4, f"{name}: input rank {rank} is above 4")
    check(axes_arg.rank == 1, f"{name}: axes must be a 1-D tensor, got rank {axes_arg.rank}")
    axes = [int(a) for a in np.asarray(axes_arg.value).reshape(-1)]
    check(all(-rank <= a < rank for a in axes),
          f"{name}: axes {axes} out of range for an input of rank {rank}")
    return tuple(sorted({a % rank for a in axes})) if rank else ()


def reduced_shape(shape: tuple, axes: tuple, keep_dims: bool) -> tuple:
    out = []
    for i, d in enumerate(shape):
        if i in axes:
            if keep_dims:
                out.append(1)
        else:
            out.append(d)
    return tuple(out) if out else (1,)


class _Reduce(OperationRegistration):
    """Shared by MEAN and REDUCE_*: (input, axes, keep_dims)."""

    same_quant = False

    def infer(self, call: Call):
        inp, axes_arg, keep, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        axes = reduce_axes(self.name, inp, axes_arg)
        if self.same_quant:
            check_same_quant(self.name, inp, out)
        return [reduced_shape(inp.shape, axes, self.keep_dims(keep))]

    @staticmethod
    def keep_dims(arg) -> bool:
        return bool(arg.scalar())

    def execute(self, call: Call):
        inp, axes_arg, keep = call.ins[0], call.ins[1], call.ins[2]
        axes = reduce_axes(self.name, inp, axes_arg)
        result = self.reduce(inp, axes)
        return [np.asarray(result).reshape(reduced_shape(inp.shape, axes, self.keep_dims(keep)))]

    def reduce(self, inp, axes: tuple) -> np.ndarray:
        raise NotImplementedError


def _lowest(dtype) -> float | int:
    dtype = np.dtype(dtype)
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype) -> float | int:
    dtype = np.dtype(dtype)
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


def tflite_quantized_mean(x: np.ndarray, axes: tuple, in_scale: float, in_zero_point: int,
                          out_scale: float, out_zero_point: int) -> np.ndarray:
    """TFLite's quantized MEAN (reference_ops::QuantizedMeanOrSum): the int32 sum less ``count``
    input zero points, requantized once by ``in_scale / (out_scale * count)``
    (:func:`requantization.tflite_mean_multiplier`), plus the output zero point, saturated."""
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = np.sum(x, axis=axes, dtype=np.int64)
    if count == 0:
        return np.zeros(total.shape, x.dtype)
    multiplier, shift = requantization.tflite_mean_multiplier(in_scale, out_scale, count)
    acc = requantization.wrap_int32(requantization.wrap_int32(total) - in_zero_point * count)
    info = np.iinfo(x.dtype)
    mean = requantization.multiply_by_quantized_multiplier(acc, multiplier, shift) + out_zero_point
    return np.clip(mean, info.min, info.max).astype(x.dtype)


@register
class Mean(_Reduce):
    code = OperationCode.MEAN
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = (signatures(28, (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM), [None, T.TENSOR_INT32, T.INT32], [None])
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.TENSOR_INT32, T.INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32, T.INT32], [None]))

    @property
    def same_quant(self) -> bool:
        """NNAPI requires the input's quantization on the output; TFLite's kernel requantizes."""
        return requantization.convention() == "nnapi"

    @staticmethod
    def keep_dims(arg) -> bool:
        return arg.scalar() > 0

    def execute(self, call: Call):
        inp, out = call.ins[0], call.outs[0]
        if inp.type not in QUANT8 or requantization.convention() != "tflite":
            return super().execute(call)
        axes = reduce_axes(self.name, inp, call.ins[1])
        mean = tflite_quantized_mean(inp.value, axes, inp.scale, inp.zero_point, out.scale, out.zero_point)
        return [mean.reshape(reduced_shape(inp.shape, axes, self.keep_dims(call.ins[2])))]

    def reduce(self, inp, axes):
        x = inp.value
        count = int(np.prod([inp.shape[a] for a in axes], dtype=np.int64))
        if inp.type in QUANT8:
            total = np.sum(x.astype(np.int64), axis=axes)
            if count == 0:
                return np.zeros_like(total, dtype=x.dtype)
            mean = np.sign(total) * (np.abs(total) // count)  # C's truncating division
            return mean.astype(x.dtype)
        total = np.sum(x.astype(np.float64), axis=axes)
        if count == 0:
            return np.zeros_like(total, dtype=x.dtype)
        return (total / count).astype(np.float32).astype(x.dtype)


@register
class ReduceSum(_Reduce):
    code = OperationCode.REDUCE_SUM
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = signatures(29, FLOATS, [None, T.TENSOR_INT32, T.BOOL], [None])

    def reduce(self, inp, axes):
        x = inp.value
        return np.sum(x.astype(np.float64), axis=axes).astype(np.float32).astype(x.dtype)


@register
class ReduceProd(_Reduce):
    code = OperationCode.REDUCE_PROD
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = signatures(29, FLOATS, [None, T.TENSOR_INT32, T.BOOL], [None])

    def reduce(self, inp, axes):
        x = inp.value.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            prod = np.prod(x, axis=axes)
        # NNAPI's CPU kernel returns 0 as soon as a factor is 0 (so 0 * inf is 0, not NaN).
        prod = np.where(np.any(x == 0, axis=axes), 0.0, prod)
        with np.errstate(over="ignore"):
            return prod.astype(np.float32).astype(inp.value.dtype)


@register
class ReduceMax(_Reduce):
    code = OperationCode.REDUCE_MAX
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = (signatures(29, FLOATS + (T.TENSOR_QUANT8_ASYMM,), [None, T.TENSOR_INT32, T.BOOL], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32, T.BOOL], [None]))
    same_quant = True

    def reduce(self, inp, axes):
        x = inp.value
        if x.dtype.kind == "f":
            return np.fmax.reduce(x, axis=axes, initial=_lowest(x.dtype))  # fmax skips NaN, as std::max here
        return np.max(x, axis=axes, initial=_lowest(x.dtype))


@register
class ReduceMin(_Reduce):
    code = OperationCode.REDUCE_MIN
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = ReduceMax.signatures
    same_quant = True

    def reduce(self, inp, axes):
        x = inp.value
        if x.dtype.kind == "f":
            return np.fmin.reduce(x, axis=axes, initial=_highest(x.dtype))  # fmin skips NaN, as std::min here
        return np.min(x, axis=axes, initial=_highest(x.dtype))


@register
class ReduceAny(_Reduce):
    code = OperationCode.REDUCE_ANY
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = [*signatures(29, (T.TENSOR_BOOL8,), [None, T.TENSOR_INT32, T.BOOL], [None])]

    def reduce(self, inp, axes):
        return np.any(inp.value, axis=axes)


@register
class ReduceAll(_Reduce):
    code = OperationCode.REDUCE_ALL
    parameters = {1: "axes", 2: "keep dims"}
    accuracy = "relaxed"
    signatures = ReduceAny.signatures

    def reduce(self, inp, axes):
        return np.all(inp.value, axis=axes)


_ARG_TYPES_29 = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


class _ArgMinMax(OperationRegistration):
    signatures = (signatures(29, _ARG_TYPES_29, [None, T.INT32], [T.TENSOR_INT32])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32], [T.TENSOR_INT32]))

    def infer(self, call: Call):
        inp = call.ins[0]
        check(inp.rank >= 1, f"{self.name}: input must have rank >= 1")
        check(int(np.prod(inp.shape)) > 0, f"{self.name}: input must be non-empty, got shape {list(inp.shape)}")
        axis = normalize_axis(call.ins[1].scalar(), inp.rank)
        shape = tuple(d for i, d in enumerate(inp.shape) if i != axis)
        return [shape if shape else (1,)]

    def execute(self, call: Call):
        inp = call.ins[0]
        axis = normalize_axis(call.ins[1].scalar(), inp.rank)
        x = inp.value
        # numpy returns the first index among equal extremes, as AOSP's strict comparison does.
        if x.dtype.kind == "f" and np.isnan(x).any():
            # A NaN never wins a comparison: as the worst value it is passed over (ties keep the
            # first index, so a NaN is picked only where every later element is a NaN or the
            # worst value, and then index 0 is); a NaN first is never left.
            worst = np.inf if self.code == OperationCode.ARGMIN else -np.inf
            picked = self.pick(np.where(np.isnan(x), worst, x), axis)
            first_is_nan = np.isnan(np.take(x, 0, axis=axis))
            result = np.where(first_is_nan, 0, picked).astype(np.int32)
        else:
            result = self.pick(x, axis).astype(np.int32)
        return [result.reshape(result.shape if result.ndim else (1,))]


@register
class ArgMax(_ArgMinMax):
    code = OperationCode.ARGMAX
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "axis"}
    accuracy = "strict"

    @staticmethod
    def pick(x, axis):
        return np.argmax(x, axis=axis)


@register
class ArgMin(_ArgMinMax):
    code = OperationCode.ARGMIN
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "axis"}
    accuracy = "strict"

    @staticmethod
    def pick(x, axis):
        return np.argmin(x, axis=axis)


@register
class TopKV2(OperationRegistration):
    code = OperationCode.TOPK_V2
    parameters = {1: "k"}
    accuracy = "strict"
    signatures = (signatures(29, _ARG_TYPES_29, [None, T.INT32], [None, T.TENSOR_INT32])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32], [None, T.TENSOR_INT32]))

    def infer(self, call: Call):
        inp, k_arg = call.ins
        check(inp.rank >= 1, "TOPK_V2: input must have rank >= 1")
        k = k_arg.scalar()
        check(k > 0, f"TOPK_V2: k must be positive, got {k}")
        check(k <= inp.shape[-1], f"TOPK_V2: k = {k} exceeds the last dimension {inp.shape[-1]}")
        check_same_quant("TOPK_V2", inp, call.outs[0])
        shape = tuple(inp.shape[:-1]) + (k,)
        return [shape, shape]

    def execute(self, call: Call):
        inp, k_arg = call.ins
        k = k_arg.scalar()
        x = inp.value
        n = x.shape[-1]
        index = np.broadcast_to(np.arange(n, dtype=np.int64), x.shape)
        # Ascending by (value, index), reversed: values descending, ties by larger index first.
        order = np.lexsort((index, x), axis=-1)[..., ::-1][..., :k]
        values = np.take_along_axis(x, order, axis=-1)
        return [values, order.astype(np.int32)]
