"""``onnxruntime``: a driver that runs NNAPI models on ONNX Runtime's CPU execution provider.

The model a driver is given (the part of an NNAPI model the runtime assigned to it) is converted
into an ONNX graph with ``onnx.helper`` and compiled into an ``InferenceSession``. Every NNAPI
operation it can run has exactly one mapping, declared in :data:`MAPPINGS` with the data types it
accepts; the supported-operations query converts each operation on its own and says yes only when
its mapping accepts the operation's types and parameters, so anything else counts as unsupported.

How NNAPI's conventions become ONNX's:

* layout: ONNX convolutions, pooling, resizing and depth/space rearrangements are NCHW; NHWC
  operands are transposed in and out around them.
* fused activations become Relu/Clip after the operation (in the quantized domain for QLinearConv).
* implicit padding: SAME is ``auto_pad=SAME_UPPER`` (NNAPI puts the odd padding element at the
  end), VALID is VALID; explicit paddings are reordered to ONNX's (begins, ends).
* quantized types: CONV_2D and DEPTHWISE_CONV_2D use ``QLinearConv`` (per-tensor or per-channel
  weights); every other quantized operation is DequantizeLinear -> float operation ->
  QuantizeLinear (ONNX Runtime fuses such groups into its quantized kernels where it has them).
  Operations that only move data (RESHAPE, TRANSPOSE, ...) work on the quantized values directly.
* dynamic shapes: unknown dimensions become symbolic ONNX dimensions; output shapes are whatever
  ONNX Runtime computes.

The rest of the interface (request validation, device memory, execution modes) is the reference
driver's, which this driver extends; only compilation and the computation itself differ.
``docs/conformance/onnxruntime.md`` lists where ONNX Runtime's results differ from NNAPI's.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref import hal, ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Arg, ValueUnknown
from nnapi_ref.ops.common import activation_range_quant
from nnapi_ref.ops.spatial import resolve_padding
from nnapi_ref.types import DTYPES, FuseCode, OperandCode as T, OperationCode as Op, PaddingCode, ResultCode
from nnts.adapters.base import (AdapterDevice, AdapterPreparedModel, Mappings, SubgraphView, Unsupported,
                                with_static_shapes)

_IMPORT_ERROR = ""
try:
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper
except ImportError as e:  # the driver reports itself unavailable (see OnnxRuntimeDevice)
    onnx = onnxruntime = None
    _IMPORT_ERROR = str(e)

OPSET = 21
F32, F16, I32, BOOL8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
FLOATS = frozenset({F32, F16})
QUANT8 = frozenset({Q8, S8})
NUMERIC = FLOATS | QUANT8
_QUANTIZED = QUANT8 | {T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL}


# ---------------------------------------------------------------------------------------------
# The ONNX graph under construction
# ---------------------------------------------------------------------------------------------

class Graph(SubgraphView):
    """ONNX nodes and initializers for one NNAPI subgraph; operand ``k`` is the value ``t{k}``."""

    def __init__(self, sg: hal.Subgraph):
        super().__init__(sg)
        self.nodes: list = []
        self.initializers: dict[str, object] = {}
        self._fresh = 0

    @staticmethod
    def name(k: int) -> str:
        return f"t{k}"

    def fresh(self) -> str:
        self._fresh += 1
        return f"v{self._fresh}"

    def const(self, array) -> str:
        name = self.fresh()
        self.initializers[name] = numpy_helper.from_array(np.asarray(array), name)
        return name

    def node(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, **attrs):
        """Add a node; return its output name (or names, for several outputs)."""
        names = [self.fresh() for _ in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op_type, inputs, names, **attrs))
        return names[0] if len(names) == 1 else names

    def tensor(self, k: int) -> str:
        """Operand ``k`` as stored (quantized values for quantized types)."""
        name = self.name(k)
        if self.is_constant(k) and name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(self.value(k), name)
        return name

    def transposed(self, k: int, perm: list[int]) -> str:
        """Operand ``k`` transposed: folded now for a constant, a Transpose node otherwise."""
        if self.is_constant(k):
            return self.const(np.ascontiguousarray(self.value(k).transpose(perm)))
        return self.node("Transpose", [self.tensor(k)], perm=perm)

    def quant_params(self, k: int) -> tuple[str, str, dict]:
        """Scale and zero point names (and the axis attribute) for Quantize/DequantizeLinear."""
        o = self.operand(k)
        if o.channel_quant is not None:
            n = len(o.channel_quant.scales)
            return (self.const(np.asarray(o.channel_quant.scales, np.float32)), self.const(np.zeros(n, np.int8)),
                    {"axis": o.channel_quant.channel_dim})
        return self.const(np.float32(o.scale)), self.const(np.asarray(o.zero_point, DTYPES[o.type])), {}

    def real(self, k: int) -> str:
        """Operand ``k`` as real numbers: dequantized (float32) if quantized, else as it is."""
        o = self.operand(k)
        if o.type in _QUANTIZED or (o.type == I32 and o.scale):
            scale, zero, attrs = self.quant_params(k)
            return self.node("DequantizeLinear", [self.tensor(k), scale, zero], **attrs)
        return self.tensor(k)

    def float_dtype(self, k: int):
        return np.float16 if self.operand(k).type == F16 else np.float32

    def store(self, k: int, value: str, fuse: int = FuseCode.NONE, raw: bool = False) -> None:
        """Make ``value`` operand ``k``: clamp by the fused activation, quantize if ``k`` is
        quantized (unless ``raw`` says ``value`` is already in ``k``'s representation)."""
        o = self.operand(k)
        if raw:
            if fuse != FuseCode.NONE:
                lo, hi = activation_range_quant(fuse, Arg(o.type, o.dimensions, o.scale, o.zero_point))
                dtype = DTYPES[o.type]
                value = self.node("Clip", [value, self.const(dtype.type(lo)), self.const(dtype.type(hi))])
            self.node("Identity", [value], [self.name(k)])
            return
        value = self.activation(value, fuse, np.float32 if o.type in QUANT8 else self.float_dtype(k))
        if o.type in QUANT8:
            scale, zero, _ = self.quant_params(k)
            self.node("QuantizeLinear", [value, scale, zero], [self.name(k)])
        else:
            self.node("Identity", [value], [self.name(k)])

    def activation(self, value: str, fuse: int, dtype) -> str:
        if fuse == FuseCode.NONE:
            return value
        if fuse == FuseCode.RELU:
            return self.node("Relu", [value])
        lo, hi = {FuseCode.RELU1: (-1.0, 1.0), FuseCode.RELU6: (0.0, 6.0)}[FuseCode(fuse)]
        return self.node("Clip", [value, self.const(dtype(lo)), self.const(dtype(hi))])

    def int64(self, k: int) -> str:
        """An INT32 tensor operand as the int64 tensor ONNX shape inputs take."""
        if self.is_constant(k):
            return self.const(self.value(k).astype(np.int64).reshape(-1))
        return self.node("Cast", [self.tensor(k)], to=onnx.TensorProto.INT64)


# ---------------------------------------------------------------------------------------------
# The mappings: one per NNAPI operation
# ---------------------------------------------------------------------------------------------

MAPPINGS = Mappings()
maps = MAPPINGS.maps


def _nchw(g: Graph, name: str, nchw: bool) -> str:
    return name if nchw else g.node("Transpose", [name], perm=[0, 3, 1, 2])


def _nhwc(g: Graph, name: str, nchw: bool) -> str:
    return name if nchw else g.node("Transpose", [name], perm=[0, 2, 3, 1])


def _window(g: Graph, x: int, p, filter_h: int, filter_w: int) -> dict:
    """ONNX's padding attributes: explicit paddings, NNAPI's SAME resolved on a known image size,
    else ``auto_pad`` (ORT has no SAME with dilation)."""
    dims = g.operand(x).dimensions
    h, w = ((dims[2], dims[3]) if p.nchw else (dims[1], dims[2])) if len(dims) == 4 else (0, 0)
    if not p.explicit and h and w:
        resolve_padding(p, h, w, filter_h, filter_w)
    elif not p.explicit:
        if p.padding_code != PaddingCode.SAME:
            return {"auto_pad": "VALID"}
        if p.dilation_h != 1 or p.dilation_w != 1:
            raise Unsupported("SAME padding with dilation on an image of unknown size")
        if p.stride_h > filter_h or p.stride_w > filter_w:
            # ORT's SAME_UPPER padding turns negative there (NNAPI clamps it to 0), and fails.
            raise Unsupported("SAME padding with a stride larger than the window on an image of unknown size")
        return {"auto_pad": "SAME_UPPER"}
    left, right, top, bottom = p.pads
    return {"pads": [top, left, bottom, right]}


@maps((Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D), NUMERIC)
def _conv(g, op):
    """Conv / QLinearConv; the filter is transposed to OIHW (depthwise: one group per input
    channel, [1, H, W, C_out] becoming [C_out, 1, H, W]; grouped: ONNX's ``group``, the filter
    already [C_out, H, W, C_in / groups])."""
    depthwise, grouped = op.type == Op.DEPTHWISE_CONV_2D, op.type == Op.GROUPED_CONV_2D
    p = g.spatial(op, 3, 0 if op.type == Op.CONV_2D else 1, dilation=not grouped)
    x, w, b, out = op.inputs[0], op.inputs[1], op.inputs[2], op.outputs[0]
    wdims = g.operand(w).dimensions
    if len(wdims) != 4 or 0 in wdims:
        raise Unsupported("filter dimensions unknown")
    attrs = dict(_window(g, x, p, wdims[1], wdims[2]), strides=[p.stride_h, p.stride_w],
                 dilations=[p.dilation_h, p.dilation_w],
                 kernel_shape=[wdims[1], wdims[2]],
                 group=wdims[3] // int(p.extra[0]) if depthwise else int(p.extra[0]) if grouped else 1)
    weights = g.transposed(w, [3, 0, 1, 2] if depthwise else [0, 3, 1, 2])
    image = _nchw(g, g.tensor(x), p.nchw)
    if g.operand(x).type in QUANT8:
        wq = g.operand(w)
        if wq.channel_quant is not None and g.operand(x).type == Q8:
            # uint8 image, int8 weights: MLAS's u8s8 kernel on x86 without VNNI sums pairs of
            # products in saturating int16 (vpmaddubsw), far off NNAPI's exact int32
            # accumulator (random graphs, seeds 3002630, 3003740); the same weights as uint8
            # with zero point 128 run on the exact u8u8 kernel.
            scales = np.asarray(wq.channel_quant.scales, np.float32)
            weights = _as_uint8_weights(g, weights)
            wscale, wzero = g.const(scales), g.const(np.full(len(scales), 128, np.uint8))
        elif wq.channel_quant is not None:
            scales = np.asarray(wq.channel_quant.scales, np.float32)
            wscale, wzero = g.const(scales), g.const(np.zeros(len(scales), np.int8))
        else:
            wscale, wzero = g.const(np.float32(wq.scale)), g.const(np.asarray(wq.zero_point, DTYPES[wq.type]))
        xs, xz, _ = g.quant_params(x)
        ys, yz, _ = g.quant_params(out)
        y = g.node("QLinearConv", [image, xs, xz, weights, wscale, wzero, ys, yz, g.tensor(b)], **attrs)
        g.store(out, _nhwc(g, y, p.nchw), p.fuse, raw=True)
    else:
        y = g.node("Conv", [image, weights, g.tensor(b)], **attrs)
        g.store(out, _nhwc(g, y, p.nchw), p.fuse)


def _as_uint8_weights(g: Graph, weights: str) -> str:
    """int8 weights (a constant or a node's output) plus 128, as uint8."""
    if weights in g.initializers:
        value = numpy_helper.to_array(g.initializers[weights]).astype(np.int16) + 128
        return g.const(value.astype(np.uint8))
    wide = g.node("Add", [g.node("Cast", [weights], to=onnx.TensorProto.INT16), g.const(np.int16(128))])
    return g.node("Cast", [wide], to=onnx.TensorProto.UINT8)


@maps(Op.TRANSPOSE_CONV_2D, {F32} | QUANT8)
def _transpose_conv(g, op):
    """ConvTranspose with the reference's geometry (explicit paddings; the implicit form's
    resolved from its output shape); the filter [C_out, H, W, C_in] transposed to ONNX's
    [C_in, C_out, H, W]. Quantized: DequantizeLinear -> float -> QuantizeLinear (ONNX has no
    quantized transposed convolution). ONNX Runtime's CPU provider has no float16 kernel."""
    try:
        p, _, (kh, kw), _, _ = ops.get(Op.TRANSPOSE_CONV_2D).geometry(g.call(op))
    except (ValueUnknown, NnapiError) as e:
        raise Unsupported(f"TRANSPOSE_CONV_2D parameters: {e}") from None
    left, right, top, bottom = p.pads
    if min(p.pads) < 0:
        raise Unsupported("TRANSPOSE_CONV_2D with a negative padding (implicit form, tight output)")
    x, w, b = op.inputs[:3]
    weights = g.node("Transpose", [g.real(w)], perm=[3, 0, 1, 2])
    if g.operand(b).type == I32:  # its scale is the input's times the filter's (per channel: of each)
        wq = g.operand(w)
        wscales = np.asarray(wq.channel_quant.scales if wq.channel_quant is not None else [wq.scale], np.float32)
        bias = g.node("Mul", [g.node("Cast", [g.tensor(b)], to=onnx.TensorProto.FLOAT),
                              g.const(np.float32(g.operand(x).scale) * wscales)])
    else:
        bias = g.tensor(b)
    y = g.node("ConvTranspose", [_nchw(g, g.real(x), p.nchw), weights, bias], kernel_shape=[kh, kw],
               strides=[p.stride_h, p.stride_w], pads=[top, left, bottom, right])
    g.store(op.outputs[0], _nhwc(g, y, p.nchw), p.fuse)


@maps((Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D), NUMERIC)
@maps(Op.L2_POOL_2D, FLOATS)
def _pool(g, op):
    """AveragePool (padding never averaged in, as NNAPI), MaxPool, and L2 as sqrt(avg(x^2))."""
    p = g.spatial(op, 1, 2, dilation=False)
    filter_h, filter_w = int(p.extra[1]), int(p.extra[0])
    attrs = dict(_window(g, op.inputs[0], p, filter_h, filter_w), strides=[p.stride_h, p.stride_w],
                 kernel_shape=[filter_h, filter_w])
    if op.type == Op.AVERAGE_POOL_2D and g.operand(op.inputs[0]).type in QUANT8:
        _average_pool_quant(g, op, p, attrs, filter_h * filter_w)
        return
    x = _nchw(g, g.real(op.inputs[0]), p.nchw)
    if op.type == Op.L2_POOL_2D:
        y = g.node("Sqrt", [g.node("AveragePool", [g.node("Mul", [x, x])], **attrs)])
    else:
        y = g.node("AveragePool" if op.type == Op.AVERAGE_POOL_2D else "MaxPool", [x], **attrs)
    g.store(op.outputs[0], _nhwc(g, y, p.nchw), p.fuse)


# Window areas up to this keep a sum of stored values (below 255 * area) under 2**22, where
# AveragePool's average times the area rounds back to the exact sum.
_MAX_EXACT_AREA = (1 << 22) // 256


def _average_pool_quant(g, op, p, attrs: dict, area: int):
    """Quantized AVERAGE_POOL_2D as NNAPI computes it on the stored values (AOSP's and TFLite's
    integer kernels): the exact sum ``acc`` of the covered elements divided by their count with
    halves away from zero, ``sign(acc) * ((|acc| + count / 2) / count)`` in integers, the output
    sharing the input's quantization. Dequantize -> AveragePool -> QuantizeLinear rounds the real
    average half to even instead, one step off at halves (random graph seed 3008336). The sum and
    the count are AveragePool's averages (padding counted in) times the window area, rounded."""
    if area > _MAX_EXACT_AREA:
        raise Unsupported(f"quantized AVERAGE_POOL_2D with a window of {area} elements")
    stored = _nchw(g, g.node("Cast", [g.tensor(op.inputs[0])], to=onnx.TensorProto.FLOAT), p.nchw)
    ones = g.node("Add", [g.node("Mul", [stored, g.const(np.float32(0))]), g.const(np.float32(1))])

    def window_sum(image: str) -> str:
        mean = g.node("AveragePool", [image], count_include_pad=1, **attrs)
        exact = g.node("Round", [g.node("Mul", [mean, g.const(np.float32(area))])])
        return g.node("Cast", [exact], to=onnx.TensorProto.INT32)
    acc, count = window_sum(stored), window_sum(ones)
    half = g.node("Div", [count, g.const(np.int32(2))])
    quotient = g.node("Div", [g.node("Add", [g.node("Abs", [acc]), half]), count])
    q = g.node("Mul", [quotient, g.node("Sign", [acc])])
    out = op.outputs[0]
    to = onnx.TensorProto.UINT8 if g.operand(out).type == Q8 else onnx.TensorProto.INT8
    g.store(out, _nhwc(g, g.node("Cast", [q], to=to), p.nchw), p.fuse, raw=True)


@maps(Op.FULLY_CONNECTED, NUMERIC)
def _fully_connected(g, op):
    """Gemm of the input flattened to [batches, input_size] with the weights transposed;
    quantized, the exact accumulator requantized in NNAPI's fixed point (:func:`_requantize`)."""
    x, w, b = op.inputs[:3]
    wdims = g.operand(w).dimensions
    if len(wdims) != 2 or 0 in wdims:
        raise Unsupported("weight dimensions unknown")
    if g.operand(x).type in QUANT8:
        _fully_connected_quant(g, op, wdims[1])
        return
    rows = g.node("Reshape", [g.real(x), g.const(np.array([-1, wdims[1]], np.int64))])
    inputs = [rows, g.real(w)] + ([] if g.omitted(b) else [g.real(b)])
    g.store(op.outputs[0], g.node("Gemm", inputs, transB=1), g.scalar(op.inputs[3]))


def _int64(g: Graph, k: int) -> str:
    """Quantized operand ``k``'s stored values minus its zero point, as int64."""
    o = g.operand(k)
    values = g.node("Cast", [g.tensor(k)], to=onnx.TensorProto.INT64)
    return g.node("Sub", [values, g.const(np.int64(o.zero_point))]) if o.zero_point else values


def _fully_connected_quant(g, op, input_size: int):
    """The int32 accumulator (sum of zero-point corrected products plus the bias, computed in
    int64: exact) requantized as NNAPI does: a multiplier of
    float32(input_scale * weights_scale) / output_scale in Q31 fixed point, two roundings.
    ONNX's QuantizeLinear of the real product rounds once (half to even), off by one step in
    places (random-graph seed 2005868)."""
    x, w, b, fuse = op.inputs
    xo, wo = g.operand(x), g.operand(w)
    rows = g.node("Reshape", [_int64(g, x), g.const(np.array([-1, input_size], np.int64))])
    acc = g.node("MatMul", [rows, g.node("Transpose", [_int64(g, w)], perm=[1, 0])])
    if not g.omitted(b):
        acc = g.node("Add", [acc, g.node("Cast", [g.tensor(b)], to=onnx.TensorProto.INT64)])
    with requantization.using("nnapi"):
        multiplier, shift = requantization.product_multipliers(xo.scale, [wo.scale], g.operand(op.outputs[0]).scale)
    _requantize(g, acc, int(multiplier[0]), int(shift[0]), op.outputs[0], int(g.scalar(fuse)))


def _floor_div(g: Graph, x: str, divisor: int) -> str:
    """floor(x / divisor) for int64 ``x`` and a positive power of two (ONNX's integer Div
    truncates toward zero: negative values are moved down first)."""
    lowered = g.node("Sub", [x, g.const(np.int64(divisor - 1))])
    x = g.node("Where", [g.node("Less", [x, g.const(np.int64(0))]), lowered, x])
    return g.node("Div", [x, g.const(np.int64(divisor))])


def _requantize(g: Graph, acc: str, multiplier: int, shift: int, out: int, fuse: int) -> None:
    """Store int64 accumulator ``acc`` (int32 values) into quantized operand ``out`` as NNAPI's
    MultiplyByQuantizedMultiplier does (:mod:`nnapi_ref.ops.requantization`): shifted left for a
    positive ``shift``, SaturatingRoundingDoublingHighMul (floor((acc * multiplier + 2**30) /
    2**31)), RoundingDivideByPOT for a negative one (halves away from zero), then the zero point
    and the clamp to the type's and the fused activation's range."""
    o = g.operand(out)
    if shift > 0:
        acc = g.node("Mul", [acc, g.const(np.int64(1 << shift))])
    product = g.node("Add", [g.node("Mul", [acc, g.const(np.int64(multiplier))]), g.const(np.int64(1 << 30))])
    high = _floor_div(g, product, 1 << 31)
    if shift < 0:
        exponent = -shift
        negative = g.node("Cast", [g.node("Less", [high, g.const(np.int64(0))])], to=onnx.TensorProto.INT64)
        nudged = g.node("Sub", [g.node("Add", [high, g.const(np.int64(1 << (exponent - 1)))]), negative])
        high = _floor_div(g, nudged, 1 << exponent)
    lo, hi = activation_range_quant(fuse, Arg(o.type, o.dimensions, o.scale, o.zero_point))
    q = g.node("Clip", [g.node("Add", [high, g.const(np.int64(o.zero_point))]), g.const(np.int64(lo)),
                        g.const(np.int64(hi))])
    g.node("Cast", [q], [g.name(out)], to=onnx.TensorProto.UINT8 if o.type == Q8 else onnx.TensorProto.INT8)


_BINARY = {Op.ADD: "Add", Op.SUB: "Sub", Op.MUL: "Mul", Op.DIV: "Div"}


@maps((Op.ADD, Op.SUB, Op.MUL), NUMERIC | {I32})
@maps(Op.DIV, FLOATS)
def _arithmetic(g, op):
    a, b, fuse = op.inputs
    g.store(op.outputs[0], g.node(_BINARY[op.type], [g.real(a), g.real(b)]), g.scalar(fuse))


_ELEMENTWISE = {Op.MAXIMUM: "Max", Op.MINIMUM: "Min", Op.POW: "Pow", Op.PRELU: "PRelu",
                Op.EQUAL: "Equal", Op.GREATER: "Greater", Op.GREATER_EQUAL: "GreaterOrEqual", Op.LESS: "Less",
                Op.LESS_EQUAL: "LessOrEqual", Op.LOGICAL_AND: "And", Op.LOGICAL_OR: "Or", Op.SELECT: "Where",
                Op.ABS: "Abs", Op.EXP: "Exp", Op.LOG: "Log", Op.SQRT: "Sqrt", Op.NEG: "Neg", Op.SIN: "Sin",
                Op.FLOOR: "Floor", Op.LOGISTIC: "Sigmoid", Op.TANH: "Tanh", Op.RELU: "Relu",
                Op.HARD_SWISH: "HardSwish", Op.LOGICAL_NOT: "Not"}


@maps((Op.MAXIMUM, Op.MINIMUM), NUMERIC | {I32})
@maps((Op.EQUAL, Op.GREATER, Op.GREATER_EQUAL, Op.LESS, Op.LESS_EQUAL), NUMERIC | {I32})
@maps(Op.POW, FLOATS)
@maps(Op.PRELU, NUMERIC)
@maps((Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_NOT), {BOOL8})
@maps(Op.SELECT, {BOOL8})
@maps((Op.ABS, Op.NEG), FLOATS | {I32})
@maps((Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.FLOOR), FLOATS)
@maps((Op.LOGISTIC, Op.TANH, Op.RELU, Op.HARD_SWISH), NUMERIC)
def _elementwise(g, op):
    """One ONNX operator on the real values of every input (broadcast as NNAPI does)."""
    g.store(op.outputs[0], g.node(_ELEMENTWISE[op.type], [g.real(k) for k in op.inputs]))


@maps(Op.NOT_EQUAL, NUMERIC | {I32, BOOL8})
def _not_equal(g, op):
    g.store(op.outputs[0], g.node("Not", [g.node("Equal", [g.real(k) for k in op.inputs])]))


@maps((Op.RELU1, Op.RELU6), NUMERIC)
def _clamp(g, op):
    fuse = FuseCode.RELU1 if op.type == Op.RELU1 else FuseCode.RELU6
    g.store(op.outputs[0], g.real(op.inputs[0]), fuse)


@maps(Op.RSQRT, FLOATS)
def _rsqrt(g, op):
    g.store(op.outputs[0], g.node("Reciprocal", [g.node("Sqrt", [g.real(op.inputs[0])])]))


@maps(Op.ELU, FLOATS)
def _elu(g, op):
    g.store(op.outputs[0], g.node("Elu", [g.real(op.inputs[0])], alpha=float(g.scalar(op.inputs[1]))))


@maps(Op.SOFTMAX, NUMERIC)
@maps(Op.LOG_SOFTMAX, FLOATS)
def _softmax(g, op):
    """exp(beta * x) normalized along the axis (last by default): Softmax of beta * x."""
    x, beta = op.inputs[0], op.inputs[1]
    axis = g.scalar(op.inputs[2]) if len(op.inputs) > 2 else -1
    dtype = np.float32 if g.operand(x).type in QUANT8 else g.float_dtype(x)
    scaled = g.node("Mul", [g.real(x), g.const(dtype(g.scalar(beta)))])
    g.store(op.outputs[0], g.node("Softmax" if op.type == Op.SOFTMAX else "LogSoftmax", [scaled], axis=axis))


_REDUCE = {Op.MEAN: "ReduceMean", Op.REDUCE_SUM: "ReduceSum", Op.REDUCE_PROD: "ReduceProd",
           Op.REDUCE_MAX: "ReduceMax", Op.REDUCE_MIN: "ReduceMin"}


@maps((Op.MEAN, Op.REDUCE_MAX, Op.REDUCE_MIN), NUMERIC)
@maps((Op.REDUCE_SUM, Op.REDUCE_PROD), FLOATS)
def _reduce(g, op):
    """Reduce over the (deduplicated) axes; reducing every axis without keep_dims gives NNAPI's
    shape [1], not ONNX's scalar."""
    x, axes_k, keep_k = op.inputs
    rank = g.rank(x)
    axes = sorted({int(a) % rank for a in g.value(axes_k).reshape(-1)})
    keep = bool(g.scalar(keep_k))
    if not axes:
        raise Unsupported("no axes to reduce")
    y = g.node(_REDUCE[op.type], [g.real(x), g.const(np.array(axes, np.int64))], keepdims=int(keep))
    if len(axes) == rank and not keep:
        y = g.node("Reshape", [y, g.const(np.array([1], np.int64))])
    g.store(op.outputs[0], y)


@maps((Op.ARGMAX, Op.ARGMIN), NUMERIC | {I32})
def _argmax(g, op):
    """ArgMax/ArgMin without the reduced axis; of a 1-D input NNAPI's result has shape [1]
    (ONNX's would be a scalar), which keeping the axis gives."""
    index = g.node("ArgMax" if op.type == Op.ARGMAX else "ArgMin", [g.real(op.inputs[0])],
                   axis=g.scalar(op.inputs[1]), keepdims=int(g.rank(op.inputs[0]) == 1))
    g.store(op.outputs[0], g.node("Cast", [index], to=onnx.TensorProto.INT32))


@maps(Op.QUANTIZE, FLOATS)
def _quantize(g, op):
    x = g.real(op.inputs[0])
    if g.operand(op.inputs[0]).type == F16:
        x = g.node("Cast", [x], to=onnx.TensorProto.FLOAT)
    g.store(op.outputs[0], x)


@maps(Op.DEQUANTIZE, QUANT8 | {T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL})
def _dequantize(g, op):
    y = g.real(op.inputs[0])
    if g.operand(op.outputs[0]).type == F16:
        y = g.node("Cast", [y], to=onnx.TensorProto.FLOAT16)
    g.store(op.outputs[0], y)


ANY = NUMERIC | {I32, BOOL8}


@maps(Op.RESHAPE, ANY)
def _reshape(g, op):
    g.store(op.outputs[0], g.node("Reshape", [g.tensor(op.inputs[0]), g.int64(op.inputs[1])]), raw=True)


@maps(Op.SQUEEZE, ANY)
def _squeeze(g, op):
    """Squeeze the given axes, or every size-1 dimension when they are omitted or empty."""
    axes = [] if len(op.inputs) < 2 or g.omitted(op.inputs[1]) else list(g.value(op.inputs[1]).reshape(-1))
    dims = g.operand(op.inputs[0]).dimensions
    if dims and 0 not in dims:  # known shape: NNAPI's result, where squeezing everything leaves [1]
        rank = len(dims)
        gone = {int(a) % rank for a in axes} if axes else {i for i, d in enumerate(dims) if d == 1}
        shape = [d for i, d in enumerate(dims) if i not in gone] or [1]
        y = g.node("Reshape", [g.tensor(op.inputs[0]), g.const(np.array(shape, np.int64))])
    else:
        y = g.node("Squeeze", [g.tensor(op.inputs[0])] + ([g.const(np.array(axes, np.int64))] if axes else []))
    g.store(op.outputs[0], y, raw=True)


@maps(Op.EXPAND_DIMS, ANY)
def _expand_dims(g, op):
    axis = g.const(np.array([g.scalar(op.inputs[1])], np.int64))
    g.store(op.outputs[0], g.node("Unsqueeze", [g.tensor(op.inputs[0]), axis]), raw=True)


@maps(Op.TRANSPOSE, ANY)
def _transpose(g, op):
    """Transpose by the permutation, or reverse the dimensions when it is omitted or empty."""
    perm = [] if len(op.inputs) < 2 or g.omitted(op.inputs[1]) else [int(v) for v in g.value(op.inputs[1]).reshape(-1)]
    g.store(op.outputs[0], g.node("Transpose", [g.tensor(op.inputs[0])], **({"perm": perm} if perm else {})), raw=True)


@maps(Op.CONCATENATION, ANY)
def _concatenation(g, op):
    """Concat of the real values: quantized inputs may each have their own scale."""
    *tensors, axis = op.inputs
    g.store(op.outputs[0], g.node("Concat", [g.real(k) for k in tensors], axis=g.scalar(axis)))


@maps(Op.SPLIT, ANY)
def _split(g, op):
    x, axis, count = op.inputs
    parts = g.node("Split", [g.tensor(x)], int(g.scalar(count)), axis=g.scalar(axis),
                   num_outputs=int(g.scalar(count)))
    for k, part in zip(op.outputs, parts if isinstance(parts, list) else [parts]):
        g.store(k, part, raw=True)


@maps(Op.GATHER, ANY)
def _gather(g, op):
    x, axis, indices = op.inputs
    g.store(op.outputs[0], g.node("Gather", [g.tensor(x), g.tensor(indices)], axis=g.scalar(axis)), raw=True)


@maps((Op.PAD, Op.PAD_V2), NUMERIC | {I32})
def _pad(g, op):
    """Constant padding: with 0 (the zero point for quantized tensors) or PAD_V2's value, which
    for quantized tensors is already quantized."""
    x, paddings = op.inputs[0], op.inputs[1]
    o = g.operand(x)
    amounts = g.value(paddings).astype(np.int64)
    value = g.scalar(op.inputs[2]) if op.type == Op.PAD_V2 else (o.zero_point if o.type in QUANT8 else 0)
    pads = g.const(np.concatenate([amounts[:, 0], amounts[:, 1]]))
    g.store(op.outputs[0], g.node("Pad", [g.tensor(x), pads, g.const(np.asarray(value, DTYPES[o.type]))]), raw=True)


@maps(Op.SLICE, ANY)
def _slice(g, op):
    """Slice from ``begin`` taking ``size`` elements per axis (-1: to the end)."""
    x, begin, size = op.inputs
    starts = g.value(begin).astype(np.int64).reshape(-1)
    sizes = g.value(size).astype(np.int64).reshape(-1)
    ends = np.where(sizes < 0, np.iinfo(np.int64).max, starts + sizes)
    g.store(op.outputs[0], g.node("Slice", [g.tensor(x), g.const(starts), g.const(ends)]), raw=True)


@maps(Op.TILE, ANY)
def _tile(g, op):
    g.store(op.outputs[0], g.node("Tile", [g.tensor(op.inputs[0]), g.int64(op.inputs[1])]), raw=True)


@maps((Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH), NUMERIC)
def _depth_space(g, op):
    """DepthToSpace in DCR order (TensorFlow's, which NNAPI follows), SpaceToDepth, in NCHW."""
    nchw = len(op.inputs) > 2 and bool(g.scalar(op.inputs[2]))
    kind = "DepthToSpace" if op.type == Op.DEPTH_TO_SPACE else "SpaceToDepth"
    attrs = {"mode": "DCR"} if kind == "DepthToSpace" else {}
    y = g.node(kind, [_nchw(g, g.real(op.inputs[0]), nchw)], blocksize=int(g.scalar(op.inputs[1])), **attrs)
    g.store(op.outputs[0], _nhwc(g, y, nchw))


def nearest_source_indices(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    """The source pixel of each output pixel of RESIZE_NEAREST_NEIGHBOR along one axis, as AOSP's
    ResizeImageOps.cpp computes it in float32: scale = in / out ((in - 1) / (out - 1) with
    align_corners), source = floor(x * scale) (x + 0.5 with half-pixel centers; roundf with
    align_corners), at most in - 1 (and at least 0 with half-pixel centers)."""
    f32 = np.float32
    scale = f32(in_size - 1) / f32(out_size - 1) if align and out_size > 1 else f32(in_size) / f32(out_size)
    x = np.arange(out_size, dtype=f32)
    scaled = ((x + f32(0.5)) if half else x) * scale
    if align:  # roundf: halves away from zero (the coordinates are not negative)
        source = np.floor(scaled.astype(np.float64) + 0.5)
    else:
        source = np.floor(scaled)
    source = np.minimum(source.astype(np.int64), in_size - 1)
    return np.maximum(source, 0) if half else source


@maps((Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR), NUMERIC)
def _resize(g, op):
    """RESIZE_BILINEAR: Resize to explicit sizes (a scale factor gives floor(size * scale), as
    NNAPI), NNAPI's coordinates as ONNX's coordinate_transformation_mode. RESIZE_NEAREST_NEIGHBOR:
    two Gathers of the source rows and columns NNAPI picks (:func:`nearest_source_indices`);
    ONNX Runtime's Resize divides by the float32 ratio out / in where NNAPI multiplies by in / out,
    and picks another pixel for some sizes (30 rows to 2: rows 0 and 14, NNAPI's 0 and 15)."""
    x = op.inputs[0]
    nchw, align, half = g.flag(op, 3), g.flag(op, 4), g.flag(op, 5)
    dims = g.operand(x).dimensions
    if len(dims) != 4:
        raise Unsupported("input rank unknown")
    n, c, h, w = dims if nchw else (dims[0], dims[3], dims[1], dims[2])
    out_h, out_w = g.resize_output_size(op, h, w)
    if op.type == Op.RESIZE_NEAREST_NEIGHBOR:
        if not h or not w:
            raise Unsupported("RESIZE_NEAREST_NEIGHBOR of an image of unknown size")
        rows = g.const(nearest_source_indices(h, out_h, align, half))
        columns = g.const(nearest_source_indices(w, out_w, align, half))
        height_axis, width_axis = (2, 3) if nchw else (1, 2)
        picked = g.node("Gather", [g.node("Gather", [g.tensor(x), rows], axis=height_axis), columns], axis=width_axis)
        g.store(op.outputs[0], picked, raw=True)
        return
    mode = dict(mode="linear", coordinate_transformation_mode="align_corners" if align else
                "half_pixel" if half else "asymmetric")
    image = _nchw(g, g.real(x), nchw)
    # Full NCHW sizes (batches and channels from the input's shape): ORT 1.32's transpose
    # optimizer mishandles Resize's ``axes`` attribute.
    batches_channels = g.node("Slice", [g.node("Shape", [image]), g.const(np.array([0], np.int64)),
                                        g.const(np.array([2], np.int64))])
    sizes = g.node("Concat", [batches_channels, g.const(np.array([out_h, out_w], np.int64))], axis=0)
    y = g.node("Resize", [image, "", "", sizes], **mode)
    g.store(op.outputs[0], _nhwc(g, y, nchw))


@maps(Op.L2_NORMALIZATION, NUMERIC)
def _l2_normalization(g, op):
    axis = g.scalar(op.inputs[1]) if len(op.inputs) > 1 else -1
    g.store(op.outputs[0], g.node("LpNormalization", [g.real(op.inputs[0])], axis=axis, p=2))


@maps(Op.BATCH_MATMUL, FLOATS)
def _batch_matmul(g, op):
    """MatMul, with either side's last two dimensions swapped when its adjoint flag is set."""
    sides = []
    for i in (0, 1):
        name = g.real(op.inputs[i])
        if len(op.inputs) > 2 + i and bool(g.scalar(op.inputs[2 + i])):
            rank = g.rank(op.inputs[i])
            name = g.node("Transpose", [name], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        sides.append(name)
    g.store(op.outputs[0], g.node("MatMul", sides))


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------

def _elem_type(code: T) -> int:
    return helper.np_dtype_to_tensor_dtype(DTYPES[code])


def _value_info(g: Graph, k: int, with_shape: bool):
    o = g.operand(k)
    shape = None
    if with_shape:
        shape = [] if o.type in (T.INT32, T.FLOAT32, T.FLOAT16, T.BOOL) else \
            [d or None for d in o.dimensions] if o.dimensions else None
    return helper.make_value_info(g.name(k), helper.make_tensor_type_proto(_elem_type(o.type), shape))


def check_operation(sg: hal.Subgraph, op: hal.Operation) -> None:
    """Raise Unsupported unless the operation's mapping accepts its types and parameters."""
    MAPPINGS.check(Graph(sg), op)


def convert(model: hal.Model) -> bytes:
    """The ONNX model (serialized) computing ``model.main``; Unsupported if any operation is."""
    if model.referenced:
        raise Unsupported("control flow (IF, WHILE) is not mapped")
    g = Graph(model.main)
    for op in model.main.operations:
        check_operation(model.main, op)
        MAPPINGS[op.type].emit(g, op)
    inputs = [_value_info(g, k, True) for k in model.main.input_indexes]
    outputs = [_value_info(g, k, False) for k in model.main.output_indexes]
    graph = helper.make_graph(g.nodes, "nnapi", inputs, outputs, list(g.initializers.values()))
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                   producer_name="nnts")
    onnx_model.ir_version = 10
    return onnx_model.SerializeToString()


def session(onnx_bytes: bytes, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = threads
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    # Run DequantizeLinear -> operation -> QuantizeLinear as written (ONNX's semantics) rather
    # than fused into ORT's quantized kernels; ORT 1.32 also fails to compile some int8 groups
    # (MaxPool + Clip) when fusing them.
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return onnxruntime.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------

class OnnxRuntimeDevice(AdapterDevice):
    """NNAPI on ONNX Runtime's CPU provider; ``threads`` ONNX Runtime threads per session
    (nnts's entry points pass ``NNTS_ORT_THREADS``)."""

    runtime = "onnxruntime"
    magic = b"NNTSORT1"
    benchmark_types = (F32, F16, Q8, S8, I32, BOOL8)

    def __init__(self, threads: int = 1):
        if onnxruntime is None:
            raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                             f"driver 'onnxruntime' needs the onnxruntime and onnx packages "
                             f"(pip install 'nnts[onnxruntime]'): {_IMPORT_ERROR}")
        super().__init__(name="onnxruntime")
        self.threads = threads
        self.capabilities = None  # measured on first request

    def get_version_string(self) -> str:
        return f"onnxruntime {onnxruntime.__version__} (onnx {onnx.__version__}, opset {OPSET})"

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        self._validated.level(model)  # an invalid model is rejected as it is
        return super().get_supported_operations(with_static_shapes(model))

    def check_operation(self, sg: hal.Subgraph, op: hal.Operation) -> None:
        check_operation(sg, op)

    def convert(self, model: hal.Model) -> bytes:
        return convert(with_static_shapes(model))

    def load(self, model: hal.Model, converted: bytes, plans: list) -> "OnnxRuntimePreparedModel":
        return OnnxRuntimePreparedModel(self, model, plans, session(converted, self.threads))


class OnnxRuntimePreparedModel(AdapterPreparedModel):
    """A session (ONNX Runtime's sessions may run concurrently)."""

    def __init__(self, device: OnnxRuntimeDevice, model: hal.Model, plans: list, sess):
        super().__init__(device, model, plans)
        self.session = sess
        main = model.main
        self.input_names = [Graph.name(k) for k in main.input_indexes]
        self.output_names = [Graph.name(k) for k in main.output_indexes]

    def compute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, dict(zip(self.input_names, inputs)))
