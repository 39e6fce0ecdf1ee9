"""The documented failure classes of the runtime-backed drivers as matchers for random graphs.

``docs/conformance/onnxruntime.md`` and ``docs/conformance/tflite.md`` list the semantic
differences between ONNX Runtime / TensorFlow Lite and NNAPI, one class each. A random graph
failing on such a driver is *explained* by a class when the class applies to an operation of the
failing model (its operation and operand types, and a condition on the values the reference
computes there) that the failing output depends on, and its consequence is what the driver did:

* a value mismatch: the model recomputed on the reference with the class's semantics in place of
  NNAPI's at every operation the class applies to (the runtime's rounding, say, from the exact
  real result) gives outputs that pass the random-graph criteria against the driver's, where
  NNAPI's did not; a class that changes nothing there explains nothing;
* a failed execution: the class says the runtime fails such a model (TFLite's INT32 DIV by
  zero) and an operation meets its condition.

Nothing is decided from the seed. :func:`explain` tries each class of the driver alone, then all
of them together; a failure no class explains stays a failure ("not explained by a documented
class").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnapi_ref import hal, ops
from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Arg
from nnapi_ref.ops.common import QUANT_RANGE, activation_range_quant
from nnapi_ref.types import DTYPES, SCALAR_TYPES, Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators.criteria import compare_output, criteria_for
from nnts.generators.graphs import F32, I32, QUANT8, Graph, Out, Reject, run_operation
from nnts.runners import runtime_arithmetic

Semantics = Callable[[Graph, hal.Operation, dict], list]  # the operation's results, or None: as NNAPI


@dataclass(frozen=True)
class KnownClass:
    """One documented class: ``drivers`` it is documented for, the ``number`` and ``title`` its
    page gives, ``operations`` it concerns, and either ``semantics`` (the runtime's results for
    such an operation, None where they are NNAPI's) or ``fails`` (a condition on the operation
    and the values under which the runtime fails the execution, with ``error`` in its text)."""

    drivers: tuple
    number: int
    title: str
    operations: frozenset
    semantics: Semantics | None = None
    fails: Callable[[Graph, hal.Operation, dict], bool] | None = None
    error: str = ""

    def name(self, driver: str = "") -> str:
        page = "onnxruntime" if "onnxruntime" in self.drivers else "tflite"
        return f"{page} class {self.number} ({self.title})"


# ---------------------------------------------------------------------------------------------
# Values and recomputation
# ---------------------------------------------------------------------------------------------

def operand_value(g: Graph, values: dict, k: int):
    o = g.operands[k]
    return o.value if o.lifetime == Lifetime.CONSTANT_COPY else values.get(k)


def _outs(g: Graph, op: hal.Operation) -> list[Out]:
    return [Out(g.operands[k].type, g.operands[k].scale, g.operands[k].zero_point) for k in op.outputs]


def nnapi(g: Graph, op: hal.Operation, values: dict) -> list[np.ndarray]:
    """The operation's results as NNAPI (the reference) computes them on ``values``."""
    return run_operation(ops.load_all()[op.type], g.operands, values, list(op.inputs), _outs(g, op))


def _real_operand(o: hal.Operand, value) -> tuple[hal.Operand, np.ndarray]:
    """A quantized tensor operand (a quantized bias too) as a float32 one holding its real values."""
    if o.type in SCALAR_TYPES or value is None:
        return o, value
    if o.channel_quant is not None:
        shape = [1] * np.ndim(value)
        shape[o.channel_quant.channel_dim] = -1
        real = np.asarray(value, np.float64) * np.asarray(o.channel_quant.scales, np.float64).reshape(shape)
    elif o.type in QUANT8 or o.type in (T.TENSOR_QUANT8_SYMM,) or (o.type == I32 and o.scale):
        real = (np.asarray(value, np.float64) - o.zero_point) * o.scale
    else:
        return o, value
    real = real.astype(np.float32)
    return hal.Operand(F32, o.dimensions, 0.0, 0, o.lifetime, real if o.lifetime == Lifetime.CONSTANT_COPY else None), real


def _bias_with_scales(g: Graph, op: hal.Operation, position: int) -> hal.Operand:
    """Operand ``position`` of ``op``; a convolution's bias beside a per-channel filter (scale 0
    in NNAPI: its scale is the input's times each channel's) with those scales, as its real values
    need."""
    o = g.operands[op.inputs[position]]
    if position != 2 or o.type != I32 or o.scale or len(op.inputs) < 3:
        return o
    x, flt = g.operands[op.inputs[0]], g.operands[op.inputs[1]]
    if flt.channel_quant is None or x.type not in QUANT8:
        return o
    scales = np.asarray(flt.channel_quant.scales, np.float64) * np.float64(x.scale)
    return hal.Operand(o.type, o.dimensions, 0.0, 0, o.lifetime, o.value, hal.ChannelQuant(scales, 0))


def real_results(g: Graph, op: hal.Operation, values: dict) -> list[np.ndarray] | None:
    """The operation computed in float32 on the real values of its quantized operands (what a
    runtime dequantizing, computing in float and quantizing computes before it rounds), or None
    when the registry has no such float form for it."""
    if op.type == Op.QUANTIZE:  # its input is the real value
        return [np.asarray(operand_value(g, values, op.inputs[0]), np.float32)]
    operands = list(g.operands)
    local = dict(values)
    for position, k in enumerate(op.inputs):
        operands[k], real = _real_operand(_bias_with_scales(g, op, position), operand_value(g, values, k))
        if operands[k].lifetime != Lifetime.CONSTANT_COPY:
            local[k] = real
    outs = [Out(F32) if g.operands[k].type in QUANT8 else Out(g.operands[k].type) for k in op.outputs]
    impl = ops.load_all()[op.type]
    if impl.match([operands[k].type for k in op.inputs], [o.type for o in outs]) is None:
        return None
    with np.errstate(all="ignore"):
        try:
            return run_operation(impl, operands, local, list(op.inputs), outs)
        except Reject:
            return None


def _fused(g: Graph, op: hal.Operation) -> int:
    """The fused activation code of ``op`` (0 if it has none; a window operation's is left out)."""
    position = ops.load_all()[op.type].fused_activation
    if position is None or position >= len(op.inputs):
        return 0
    return int(operand_value(g, {}, op.inputs[position]))


def rounded(g: Graph, op: hal.Operation, values: dict, rounding: Callable) -> list | None:
    """Quantized outputs rounded from the real result with ``rounding`` (np.rint: half to
    even), clamped to the type's and the fused activation's range; None where that does not
    apply (no quantized output, no float form of the operation, a NaN)."""
    if not any(g.operands[k].type in QUANT8 for k in op.outputs):
        return None
    reals = real_results(g, op, values)
    if reals is None or any(np.isnan(r).any() for r in reals if np.asarray(r).dtype.kind == "f"):
        return None  # a NaN is no rounding question (its own classes say what becomes of it)
    results = []
    for k, real in zip(op.outputs, reals):
        o = g.operands[k]
        if o.type not in QUANT8:
            results.append(real)
            continue
        lo, hi = activation_range_quant(_fused(g, op), Arg(o.type, o.dimensions, o.scale, o.zero_point))
        with np.errstate(all="ignore"):
            q = rounding(np.asarray(real, np.float64) / o.scale) + o.zero_point
        results.append(np.clip(q, max(lo, QUANT_RANGE[o.type][0]), min(hi, QUANT_RANGE[o.type][1]))
                       .astype(DTYPES[o.type]))
    return results


def _half_to_even(g: Graph, op: hal.Operation, values: dict):
    """A runtime dequantizing, computing in float and quantizing with halves to even."""
    return rounded(g, op, values, np.rint)


def _tflite_convention(g: Graph, op: hal.Operation, values: dict):
    """The operation as TFLite's reference kernels compute it (the reference's ``tflite``
    requantization convention: rounding MEAN, FULLY_CONNECTED in double, int8 RESIZE_BILINEAR in integers)."""
    if not any(g.operands[k].type in QUANT8 for k in op.inputs[:1]):
        return None
    with requantization.using("tflite"):
        return nnapi(g, op, values)


def _resize_bilinear_form(g: Graph, op: hal.Operation, values: dict):
    """A RESIZE_BILINEAR's layout, output size and coordinate mode: (nchw, height, width, mode)."""
    nchw, align, half = (bool(operand_value(g, values, op.inputs[i])) if i < len(op.inputs) else False
                         for i in (3, 4, 5))
    shape = nnapi(g, op, values)[0].shape
    out_h, out_w = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    return nchw, out_h, out_w, "align_corners" if align else "half_pixel" if half else "asymmetric"


def _ort_resize_bilinear(g: Graph, op: hal.Operation, values: dict):
    """ONNX Runtime's quantized RESIZE_BILINEAR, bit-exact (the driver's DequantizeLinear ->
    Resize -> QuantizeLinear, :func:`nnts.runners.runtime_arithmetic.ort_quantized_resize_bilinear`)."""
    x, out = g.operands[op.inputs[0]], g.operands[op.outputs[0]]
    if x.type not in QUANT8:
        return None
    nchw, out_h, out_w, mode = _resize_bilinear_form(g, op, values)
    low, high = QUANT_RANGE[out.type]
    result = runtime_arithmetic.ort_quantized_resize_bilinear(
        operand_value(g, values, op.inputs[0]), x.scale, x.zero_point, out_h, out_w, mode, out.scale,
        out.zero_point, low, high, nchw)
    return [result.astype(DTYPES[out.type])]


def _xnnpack_resize_bilinear(g: Graph, op: hal.Operation, values: dict):
    """XNNPACK's quantized RESIZE_BILINEAR, bit-exact (Q11 weights, rounded half up:
    :func:`nnts.runners.runtime_arithmetic.xnnpack_quantized_resize_bilinear`)."""
    x, out = g.operands[op.inputs[0]], g.operands[op.outputs[0]]
    if x.type not in QUANT8:
        return None
    nchw, out_h, out_w, mode = _resize_bilinear_form(g, op, values)
    result = runtime_arithmetic.xnnpack_quantized_resize_bilinear(operand_value(g, values, op.inputs[0]), out_h, out_w,
                                                                  mode, nchw)
    return [result.astype(DTYPES[out.type])]


def _xnnpack_mean(g: Graph, op: hal.Operation, values: dict):
    """XNNPACK's quantized MEAN, bit-exact (:func:`nnts.runners.runtime_arithmetic.xnnpack_quantized_mean`:
    float32 scaling, the output zero point added before rounding halves to even)."""
    x, out = g.operands[op.inputs[0]], g.operands[op.outputs[0]]
    if x.type not in QUANT8:
        return None
    value = np.asarray(operand_value(g, values, op.inputs[0]))
    listed = np.asarray(operand_value(g, values, op.inputs[1])).reshape(-1)
    axes = tuple(sorted({int(a) % value.ndim for a in listed})) if value.ndim else ()
    low, high = QUANT_RANGE[out.type]
    result = runtime_arithmetic.xnnpack_quantized_mean(value, axes, x.scale, x.zero_point, out.scale, out.zero_point,
                                                       low, high)
    return [result.astype(DTYPES[out.type]).reshape(nnapi(g, op, values)[0].shape)]


def _mean_halves_up(g: Graph, op: hal.Operation, values: dict):
    """ONNX Runtime's quantized MEAN where the real mean is an exact half of a step: its float32
    sum is Eigen's vectorized one, whose order of additions depends on where the data lies in
    memory, so such a mean comes out a hair either side of the half and rounds either way (NNAPI
    truncates: it goes down). The exact mean, halves up: the way that differs from NNAPI's."""
    x, out = g.operands[op.inputs[0]], g.operands[op.outputs[0]]
    if x.type not in QUANT8:
        return None
    value = np.asarray(operand_value(g, values, op.inputs[0]), np.float64)
    listed = np.asarray(operand_value(g, values, op.inputs[1])).reshape(-1)
    axes = tuple(sorted({int(a) % value.ndim for a in listed})) if value.ndim else ()
    steps = np.mean(value - x.zero_point, axis=axes) * (np.float64(x.scale) / np.float64(out.scale))
    low, high = QUANT_RANGE[out.type]
    result = np.clip(np.floor(steps + 0.5) + out.zero_point, low, high)
    return [result.astype(DTYPES[out.type]).reshape(nnapi(g, op, values)[0].shape)]


def _tflite_builtin_fully_connected(g: Graph, op: hal.Operation, values: dict):
    """TFLite's builtin quantized FULLY_CONNECTED, bit-exact, where XNNPACK declines the node (int8
    weights with a non-zero zero point, which TFLite's int8 scheme does not have, or weights that
    are not constant): NNAPI's fixed point with the right shift's ties rounded up
    (:func:`nnts.runners.runtime_arithmetic.tflite_builtin_quantized_fully_connected`)."""
    x, w, out = g.operands[op.inputs[0]], g.operands[op.inputs[1]], g.operands[op.outputs[0]]
    if x.type not in QUANT8 or (w.lifetime == Lifetime.CONSTANT_COPY
                                and (x.type != T.TENSOR_QUANT8_ASYMM_SIGNED or w.zero_point == 0)):
        return None
    weights = np.asarray(operand_value(g, values, op.inputs[1]))
    bias = None if g.operands[op.inputs[2]].lifetime == Lifetime.NO_VALUE else operand_value(g, values, op.inputs[2])
    (multiplier,), (shift,) = requantization.product_multipliers(x.scale, [w.scale], out.scale)
    lo, hi = activation_range_quant(_fused(g, op), Arg(out.type, out.dimensions, out.scale, out.zero_point))
    low, high = max(lo, QUANT_RANGE[out.type][0]), min(hi, QUANT_RANGE[out.type][1])
    inputs = np.asarray(operand_value(g, values, op.inputs[0])).reshape(-1, weights.shape[1])
    result = runtime_arithmetic.tflite_builtin_quantized_fully_connected(
        inputs, x.zero_point, weights, w.zero_point, bias, int(multiplier), int(shift), out.zero_point, low, high)
    return [result.astype(DTYPES[out.type])]


def _elementwise(fn):
    """Semantics computing a float output from the inputs' values with ``fn`` where a NaN
    reaches them (MAXIMUM and MINIMUM: both inputs; RELU*: the one)."""
    def semantics(g, op, values):
        if g.operands[op.outputs[0]].type not in (F32, T.TENSOR_FLOAT16):
            return None
        args = [np.asarray(operand_value(g, values, k)) for k in op.inputs[:2 if op.type in (Op.MAXIMUM, Op.MINIMUM) else 1]]
        if not any(np.isnan(a).any() for a in args):
            return None
        with np.errstate(all="ignore"):
            return [np.asarray(fn(op, *args)).astype(DTYPES[g.operands[op.outputs[0]].type])]
    return semantics


def _nan_max_ort(op, a, b):
    return np.maximum(a, b) if op.type == Op.MAXIMUM else np.minimum(a, b)


def _nan_max_tflite(op, a, b):
    return np.where(a > b, a, b) if op.type == Op.MAXIMUM else np.where(a < b, a, b)


def _nan_relu(op, x):
    lo, hi = {Op.RELU: (0, np.inf), Op.RELU1: (-1, 1), Op.RELU6: (0, 6)}[op.type]
    return np.where(np.isnan(x), x, np.clip(x, lo, hi))


def _int32_div_truncating(g, op, values):
    if g.operands[op.inputs[0]].type != I32:
        return None
    a, b = (np.asarray(operand_value(g, values, k), np.int64) for k in op.inputs[:2])
    if (b == 0).any():
        return None
    q = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)
    return [q.astype(np.int32)]


def _int32_div_by_zero(g, op, values):
    return g.operands[op.inputs[0]].type == I32 and (np.asarray(operand_value(g, values, op.inputs[1])) == 0).any()


def _lrn_one_sided(g, op, values):
    """TFLite's reference LRN: the sum over channels c - radius .. c + radius - 1 (its loop's
    end is exclusive: ``end_input_c = min(depth, c + range)``)."""
    x = np.asarray(operand_value(g, values, op.inputs[0]), np.float64)
    if x.ndim != 4:
        return None
    radius, bias, alpha, beta = (float(operand_value(g, values, k)) for k in op.inputs[1:5])
    squares = x * x
    depth = x.shape[-1]
    total = np.zeros_like(x)
    for c in range(depth):
        total[..., c] = squares[..., max(0, c - int(radius)):min(depth, c + int(radius))].sum(axis=-1)
    return [(x / (bias + alpha * total) ** beta).astype(np.float32)]


def _with_nan_as(pick):
    """QUANTIZE or CAST where the runtime maps a NaN input to ``pick(output type)`` (NNAPI's
    results elsewhere)."""
    def semantics(g, op, values):
        x = np.asarray(operand_value(g, values, op.inputs[0]))
        if x.dtype.kind != "f" or not np.isnan(x).any():
            return None
        out = g.operands[op.outputs[0]].type
        result = np.array(nnapi(g, op, values)[0])
        result[np.isnan(x)] = pick(out)
        return [result]
    return semantics


def _type_min(type_):
    return QUANT_RANGE[type_][0] if type_ in QUANT_RANGE else np.iinfo(DTYPES[type_]).min


def _int32_max(type_):
    return np.iinfo(np.int32).max


def _rsqrt_zero_nan(g, op, values):
    """XNNPACK's reciprocal square root: NaN for 0 and -0 (NNAPI: +inf and -inf)."""
    x = np.asarray(operand_value(g, values, op.inputs[0]))
    if not (x == 0).any():
        return None
    result = np.array(nnapi(g, op, values)[0])
    result[x == 0] = np.nan
    return [result]


def _nan_aware_arg(g, op, values):
    """TFLite's ARGMAX / ARGMIN on floats: a NaN never replaces the running extreme and any
    number replaces a NaN one (the first extreme among the numbers; index 0 when all are NaN).
    NNAPI's never leaves a NaN in the first position."""
    x = np.asarray(operand_value(g, values, op.inputs[0]))
    if x.dtype.kind != "f" or not np.isnan(x).any():
        return None
    axis = int(operand_value(g, values, op.inputs[1])) % x.ndim
    numbers = ~np.isnan(x)
    worst = -np.inf if op.type == Op.ARGMAX else np.inf
    pick = np.max if op.type == Op.ARGMAX else np.min
    best = pick(np.where(numbers, x, worst), axis=axis, keepdims=True)
    index = np.argmax(numbers & (x == best), axis=axis)
    return [index.astype(np.int32).reshape(nnapi(g, op, values)[0].shape)]


# Operations ONNX Runtime computes as DequantizeLinear -> float -> QuantizeLinear (or QLinearConv;
# quantized AVERAGE_POOL_2D and FULLY_CONNECTED are computed as NNAPI does)
ORT_REQUANTIZED = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D,
                             Op.MAX_POOL_2D, Op.TRANSPOSE_CONV_2D, Op.QUANTIZE, Op.RELU,
                             Op.RELU1, Op.RELU6, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH, Op.SOFTMAX, Op.PRELU,
                             Op.CONCATENATION, Op.L2_NORMALIZATION, Op.REDUCE_MAX, Op.REDUCE_MIN,
                             Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH})
ORT = ("onnxruntime",)
TFLITE = ("tflite", "tflite-ref")

CLASSES: list[KnownClass] = [
    KnownClass(ORT, 1, "NaN propagation in MAXIMUM and MINIMUM", frozenset({Op.MAXIMUM, Op.MINIMUM}),
               _elementwise(_nan_max_ort)),
    KnownClass(ORT, 2, "NaN through RELU, RELU1, RELU6", frozenset({Op.RELU, Op.RELU1, Op.RELU6}),
               _elementwise(_nan_relu)),
    KnownClass(ORT, 3, "requantization rounds once, half to even", ORT_REQUANTIZED, _half_to_even),
    KnownClass(ORT, 4, "quantized MEAN truncates in NNAPI", frozenset({Op.MEAN}), _half_to_even),
    KnownClass(ORT, 4, "quantized MEAN truncates in NNAPI", frozenset({Op.MEAN}), _mean_halves_up),
    KnownClass(ORT, 5, "quantized RESIZE_BILINEAR rounds halves to even in ONNX Runtime", frozenset({Op.RESIZE_BILINEAR}),
               _ort_resize_bilinear),
    KnownClass(ORT, 7, "QUANTIZE of NaN gives the type's minimum", frozenset({Op.QUANTIZE}), _with_nan_as(_type_min)),
    KnownClass(TFLITE, 1, "NaN position in MAXIMUM and MINIMUM", frozenset({Op.MAXIMUM, Op.MINIMUM}),
               _elementwise(_nan_max_tflite)),
    KnownClass(TFLITE, 2, "NaN through RELU, RELU1 and RELU6", frozenset({Op.RELU, Op.RELU1, Op.RELU6}),
               _elementwise(_nan_relu)),
    KnownClass(TFLITE, 3, "NaN in ARGMAX, ARGMIN and MAX_POOL_2D", frozenset({Op.ARGMAX, Op.ARGMIN}), _nan_aware_arg),
    KnownClass(("tflite",), 4, "XNNPACK requantizes with halves to even", frozenset({Op.QUANTIZE, Op.MUL}),
               _half_to_even),
    KnownClass(TFLITE, 5, "INT32 DIV rounds toward zero", frozenset({Op.DIV}), _int32_div_truncating),
    KnownClass(TFLITE, 6, "INT32 DIV by zero fails the execution", frozenset({Op.DIV}), fails=_int32_div_by_zero,
               error="div"),
    KnownClass(TFLITE, 7, "CAST of NaN to INT32", frozenset({Op.CAST}), _with_nan_as(_int32_max)),
    KnownClass(TFLITE, 8, "quantized MEAN rounds in TFLite", frozenset({Op.MEAN}), _tflite_convention),
    KnownClass(("tflite",), 8, "quantized MEAN rounds in TFLite", frozenset({Op.MEAN}), _xnnpack_mean),
    KnownClass(TFLITE, 9, "quantized RESIZE_BILINEAR interpolates in integers in TFLite", frozenset({Op.RESIZE_BILINEAR}),
               _tflite_convention),
    KnownClass(("tflite",), 9, "quantized RESIZE_BILINEAR interpolates in integers in TFLite", frozenset({Op.RESIZE_BILINEAR}),
               _xnnpack_resize_bilinear),
    KnownClass(("tflite",), 10, "XNNPACK's RSQRT of 0 and -0 is NaN", frozenset({Op.RSQRT}), _rsqrt_zero_nan),
    KnownClass(("tflite-ref",), 11, "TFLite's reference LRN window ends one channel early",
               frozenset({Op.LOCAL_RESPONSE_NORMALIZATION}), _lrn_one_sided),
    KnownClass(TFLITE, 12, "quantized FULLY_CONNECTED requantizes once, in double", frozenset({Op.FULLY_CONNECTED}),
               _tflite_convention),
    KnownClass(("tflite-ref",), 13, "QUANTIZE of NaN gives the type's minimum", frozenset({Op.QUANTIZE}),
               _with_nan_as(_type_min)),
    KnownClass(("tflite",), 14, "XNNPACK's quantized convolutions requantize once",
               frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D}), _half_to_even),
    KnownClass(("tflite",), 15, "TFLite's builtin quantized FULLY_CONNECTED rounds ties up",
               frozenset({Op.FULLY_CONNECTED}), _tflite_builtin_fully_connected),
]


def classes_for(driver: str) -> list[KnownClass]:
    """The classes documented for driver string ``driver`` (several, comma-separated: for any
    of them; none for other drivers)."""
    names = {d.strip() for d in driver.split(",")}
    return [c for c in CLASSES if names & set(c.drivers)]


# ---------------------------------------------------------------------------------------------
# Explaining a failure
# ---------------------------------------------------------------------------------------------

def ancestors(g: Graph, outputs) -> set[int]:
    """Indexes of the operations the operands ``outputs`` depend on."""
    needed, found = set(outputs), set()
    for j in reversed(range(len(g.operations))):
        op = g.operations[j]
        if needed & set(op.outputs):
            found.add(j)
            needed |= set(op.inputs)
    return found


def simulate(g: Graph, classes: list[KnownClass]) -> tuple[list[np.ndarray], bool] | None:
    """The model's outputs recomputed with ``classes``' semantics wherever they apply (NNAPI's
    elsewhere), and whether any operation's results changed; None when the recomputation fails."""
    values = {k: g.values[k] for k in g.inputs}
    changed = False
    for op in g.operations:
        try:
            results = None
            for c in classes:
                if c.semantics is not None and op.type in c.operations:
                    results = c.semantics(g, op, values)
                    if results is not None:
                        break
            mine = nnapi(g, op, values)
        except Reject:
            return None
        if results is not None and any(not np.array_equal(a, b, equal_nan=True) for a, b in zip(results, mine)):
            changed = True
        else:
            results = mine
        for k, r in zip(op.outputs, results):
            values[k] = np.asarray(r)
    return [values[k] for k in g.outputs], changed


def explain(g: Graph, outcome, driver: str) -> str | None:
    """The name of the documented class (or classes, joined by " + ") that explains
    ``outcome``, a failure of ``g`` on ``driver``; None when none does."""
    classes = classes_for(driver)
    failure = getattr(outcome, "failure", None)
    if not classes or failure is None or failure.kind == "reference":
        return None
    if failure.kind == "result code":
        for c in classes:
            if c.fails is not None and c.error in failure.detail.lower() and any(
                    op.type in c.operations and c.fails(g, op, g.values) for op in g.operations):
                return c.name(driver)
        return None
    if failure.kind != "mismatch" or failure.detail != "values" or len(outcome.actual) != len(g.outputs):
        return None
    suspects = ancestors(g, [g.outputs[i] for i in outcome.mismatched])
    relevant = [c for c in classes if c.semantics is not None
                and any(g.operations[j].type in c.operations for j in suspects)]
    table = criteria_for(g)
    trials = [[c] for c in relevant] + ([relevant] if len(relevant) > 1 else [])
    for trial in trials:
        simulated = simulate(g, trial)
        if simulated is None or not simulated[1]:
            continue
        expected = simulated[0]
        if all(e.shape == a.shape and compare_output(e, a, g.operands[k].type, table.get(g.operands[k].type), "") is None
               for k, e, a in zip(g.outputs, expected, outcome.actual)):
            return " + ".join(c.name(driver) for c in trial)
    return None
