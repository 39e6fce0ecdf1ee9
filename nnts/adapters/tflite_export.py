"""NNAPI subgraph -> .tflite flatbuffer: one mapping per NNAPI operation, declared in :data:`MAPPINGS`
with the data types (of its first input) it accepts.

How NNAPI's conventions become TFLite's:

* types: TENSOR_QUANT8_ASYMM is UINT8, TENSOR_QUANT8_ASYMM_SIGNED and the symmetric quant8 types
  INT8 (per-channel scales on the schema's ``quantizedDimension``), BOOL8 BOOL; quantized bias
  tensors get the scales TFLite checks (input scale x filter scale, per channel).
* layout: TFLite is NHWC; NCHW operands are transposed in and out around the operation.
* fused activations: NNAPI's FuseCode values are TFLite's ActivationFunctionType values.
* padding: SAME and VALID are TFLite's; explicit paddings are SAME or VALID when they equal what
  those give on a known image size, else (convolutions only) a PAD before a VALID convolution.
* scalar parameters become builtin options and must be constants; tensor parameters (shapes,
  axes, paddings) are constant tensors, or model inputs where TFLite's kernel accepts them.
* shapes: an unknown dimension is 1 in the file with -1 in the shape signature; the interpreter
  is resized to each execution's input shapes, and output shapes are what TFLite computes.

TFLite has no float16 kernels for these operations (its converter computes float16 models in
float32), so TENSOR_FLOAT16 is mapped only where a kernel takes it (CAST).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref import hal
from nnapi_ref.ops.spatial import resolve_padding
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op, PaddingCode
from nnts.adapters.base import Mappings, SubgraphView, Unsupported
from nnts.formats.tflite.writer import GraphBuilder, options

F32, F16, I32, BOOL8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
QUANT8 = frozenset({Q8, S8})
NUMERIC = QUANT8 | {F32}
ANY = NUMERIC | {I32, BOOL8}
# NNAPI operand type -> the writer's (numpy) type name
TENSOR_TYPES = {F32: "float32", F16: "float16", I32: "int32", Q8: "uint8", S8: "int8", BOOL8: "bool",
                T.TENSOR_QUANT8_SYMM: "int8", T.TENSOR_QUANT8_SYMM_PER_CHANNEL: "int8",
                T.TENSOR_QUANT16_SYMM: "int16", T.INT32: "int32", T.FLOAT32: "float32", T.BOOL: "bool",
                T.FLOAT16: "float16"}
_QUANTIZED = QUANT8 | {T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_SYMM}


# ---------------------------------------------------------------------------------------------
# The TFLite subgraph under construction
# ---------------------------------------------------------------------------------------------

class Graph(SubgraphView):
    """TFLite tensors and operators for one NNAPI subgraph; operand ``k`` becomes one tensor,
    made when first used."""

    def __init__(self, sg: hal.Subgraph):
        super().__init__(sg)
        self.b = GraphBuilder("nnts: NNAPI model converted by nnts.adapters.tflite")
        self.tensors: dict[int, int] = {}
        self._after: list[tuple] = []  # operators that consume the next operator's output

    @staticmethod
    def _quant(o: hal.Operand) -> dict:
        if o.channel_quant is not None:
            n = len(o.channel_quant.scales)
            return dict(scale=o.channel_quant.scales, zero_point=np.zeros(n, np.int64), axis=o.channel_quant.channel_dim)
        if o.type in _QUANTIZED or (o.type == I32 and o.scale):
            return dict(scale=o.scale, zero_point=o.zero_point)
        return {}

    def tensor(self, k: int, quant: dict | None = None, dims: tuple | None = None) -> int:
        """Operand ``k``'s tensor (``quant`` overrides its quantization, for biases; ``dims`` its
        dimensions where NNAPI leaves them unknown and the operation fixes them)."""
        if k in self.tensors:
            return self.tensors[k]
        o = self.operand(k)
        if o.type not in TENSOR_TYPES:
            raise Unsupported(f"operand type {o.type.name}")
        dims = tuple(o.dimensions) if o.dimensions or dims is None else tuple(dims)
        data = self.value(k) if self.is_constant(k) else None
        signature = [d or -1 for d in dims] if 0 in dims else None
        self.tensors[k] = self.b.tensor(f"t{k}", [d or 1 for d in dims], TENSOR_TYPES[o.type], data,
                                        signature=signature, **(self._quant(o) if quant is None else quant))
        return self.tensors[k]

    def like(self, k: int) -> int:
        """A new intermediate tensor of operand ``k``'s type and quantization (its shape is what
        TFLite computes when it allocates the tensors)."""
        o = self.operand(k)
        return self.b.tensor(f"v{len(self.b.tensors)}", [], TENSOR_TYPES[o.type], **self._quant(o))

    def const(self, array, dtype: str = "int32", **quant) -> int:
        array = np.asarray(array)
        return self.b.tensor(f"c{len(self.b.tensors)}", array.shape, dtype, array, **quant)

    def op(self, name: str, inputs, outputs, opts=None, version: int = 1) -> None:
        """Append an operator, then those waiting for its output (see :meth:`nhwc_out`)."""
        self.b.op(name, inputs, outputs, opts, version)
        after, self._after = self._after, []
        for args in after:
            self.b.op(*args)

    def transpose(self, x: int, perm, out: int | None = None, like: int | None = None) -> int:
        """A TRANSPOSE of tensor ``x`` into ``out`` (or a new tensor like operand ``like``)."""
        out = self.like(like) if out is None else out
        self.op("TRANSPOSE", [x, self.const(np.array(perm, np.int32))], [out])
        return out

    def nhwc_in(self, k: int, nchw: bool) -> int:
        """Operand ``k`` in NHWC: itself, or transposed from NCHW."""
        return self.transpose(self.tensor(k), [0, 2, 3, 1], like=k) if nchw else self.tensor(k)

    def nhwc_out(self, k: int, nchw: bool) -> int:
        """Where the next NHWC operator writes output operand ``k``; for NCHW a tensor that is
        transposed into it once that operator is appended."""
        if not nchw:
            return self.tensor(k)
        t = self.like(k)
        self._after.append(("TRANSPOSE", [t, self.const(np.array([0, 3, 1, 2], np.int32))], [self.tensor(k)], None))
        return t

    def same_quant(self, op: hal.Operation) -> None:
        """TFLite's kernel copies quantized values: every quantized input and output of ``op``
        must share one scale and zero point."""
        params = {(self.operand(k).scale, self.operand(k).zero_point) for k in op.inputs + op.outputs
                  if self.operand(k).type in QUANT8}
        if len(params) > 1:
            raise Unsupported(f"{op.type.name}: quantized operands with different scales or zero points")


# ---------------------------------------------------------------------------------------------
# The mappings: one per NNAPI operation
# ---------------------------------------------------------------------------------------------

MAPPINGS = Mappings()
maps = MAPPINGS.maps


def _padding(g: Graph, x: int, p, filter_h: int, filter_w: int) -> tuple[int, tuple | None]:
    """TFLite's padding (SAME 0, VALID 1) and the explicit paddings (left, right, top, bottom)
    still to apply with a PAD, if NNAPI's paddings are neither."""
    if not p.explicit:
        return (0 if p.padding_code == PaddingCode.SAME else 1), None
    if p.pads == (0, 0, 0, 0):
        return 1, None
    dims = g.operand(x).dimensions
    h, w = ((dims[2], dims[3]) if p.nchw else (dims[1], dims[2])) if len(dims) == 4 else (0, 0)
    if h and w:
        explicit = p.pads
        p.explicit = False
        p.padding_code = PaddingCode.SAME
        resolve_padding(p, h, w, filter_h, filter_w)
        same, p.pads, p.explicit = p.pads, explicit, True
        if same == explicit:
            return 0, None
    return 1, p.pads


def _padded(g: Graph, x: int, image: int, pads) -> int:
    """``image`` (NHWC) padded by ``pads`` (left, right, top, bottom) with zeros (quantized: the
    zero point, TFLite's PAD fill)."""
    left, right, top, bottom = pads
    out = g.like(x)
    g.op("PAD", [image, g.const(np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32))], [out])
    return out


@maps((Op.CONV_2D, Op.DEPTHWISE_CONV_2D), NUMERIC)
def _conv(g, op):
    """CONV_2D (filter OHWI, as NNAPI's) and DEPTHWISE_CONV_2D ([1, H, W, C_out])."""
    depthwise = op.type == Op.DEPTHWISE_CONV_2D
    p = g.spatial(op, 3, 1 if depthwise else 0, dilation=True)
    x, w, b, out = op.inputs[0], op.inputs[1], op.inputs[2], op.outputs[0]
    wo = g.operand(w)
    if len(wo.dimensions) != 4 or 0 in wo.dimensions or not g.is_constant(w):
        raise Unsupported("the filter must be a constant of known shape")
    xo = g.operand(x)
    if xo.type == Q8 and wo.type != Q8:
        raise Unsupported("TFLite's uint8 convolutions take uint8 filters only")
    if wo.channel_quant is not None and wo.channel_quant.channel_dim != (3 if depthwise else 0):
        raise Unsupported("per-channel filter scales on another dimension than the output channels")
    if wo.type == S8 and wo.zero_point != 0:
        raise Unsupported("TFLite's int8 convolutions take symmetric filters (zero point 0) only")
    padding, pads = _padding(g, x, p, wo.dimensions[1], wo.dimensions[2])
    image = g.nhwc_in(x, p.nchw)
    if pads is not None:
        image = _padded(g, x, image, pads)
    bias_quant = None
    if xo.type in QUANT8:
        scales = np.asarray(wo.channel_quant.scales if wo.channel_quant else [wo.scale], np.float64) * xo.scale
        bias_quant = dict(scale=scales.astype(np.float32), zero_point=np.zeros(len(scales), np.int64))
    common = dict(padding=padding, strideW=p.stride_w, strideH=p.stride_h, fusedActivationFunction=p.fuse,
                  dilationWFactor=p.dilation_w, dilationHFactor=p.dilation_h)
    if depthwise:
        opts = options("DepthwiseConv2DOptions", depthMultiplier=int(p.extra[0]), **common)
    else:
        opts = options("Conv2DOptions", **common)
    g.op(op.type.name, [image, g.tensor(w), g.tensor(b, bias_quant)], [g.nhwc_out(out, p.nchw)], opts)


@maps((Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D), NUMERIC)
@maps(Op.L2_POOL_2D, {F32})
def _pool(g, op):
    """Pool2D; explicit paddings only where they are SAME's or VALID's (padding is never part of
    NNAPI's windows, a PAD would put it in)."""
    p = g.spatial(op, 1, 2, dilation=False)
    filter_w, filter_h = int(p.extra[0]), int(p.extra[1])
    padding, pads = _padding(g, op.inputs[0], p, filter_h, filter_w)
    if pads is not None:
        raise Unsupported(f"{op.type.name}: explicit paddings {list(pads)} are neither SAME nor VALID")
    g.op(op.type.name, [g.nhwc_in(op.inputs[0], p.nchw)], [g.nhwc_out(op.outputs[0], p.nchw)],
         options("Pool2DOptions", padding=padding, strideW=p.stride_w, strideH=p.stride_h, filterWidth=filter_w,
                 filterHeight=filter_h, fusedActivationFunction=p.fuse))


@maps(Op.FULLY_CONNECTED, NUMERIC)
def _fully_connected(g, op):
    """FULLY_CONNECTED: the input flattened to [batches, input_size], as NNAPI's."""
    x, w, b, fuse = op.inputs
    xo, wo = g.operand(x), g.operand(w)
    if len(wo.dimensions) != 2 or 0 in wo.dimensions:
        raise Unsupported("weight dimensions unknown")
    bias_quant = dict(scale=np.float32(xo.scale * wo.scale), zero_point=0) if xo.type in QUANT8 else None
    bias = -1 if g.omitted(b) else g.tensor(b, bias_quant)
    g.op("FULLY_CONNECTED", [g.tensor(x), g.tensor(w), bias], [g.tensor(op.outputs[0])],
         options("FullyConnectedOptions", fusedActivationFunction=int(g.scalar(fuse)), keepNumDims=False))


_FUSED = {Op.ADD: "AddOptions", Op.SUB: "SubOptions", Op.MUL: "MulOptions", Op.DIV: "DivOptions"}


@maps((Op.ADD, Op.SUB, Op.MUL), NUMERIC | {I32})
@maps(Op.DIV, {F32, I32})
def _arithmetic(g, op):
    a, b, fuse = op.inputs
    g.op(op.type.name, [g.tensor(a), g.tensor(b)], [g.tensor(op.outputs[0])],
         options(_FUSED[op.type], fusedActivationFunction=int(g.scalar(fuse))))


_ELEMENTWISE = {Op.MAXIMUM: "MAXIMUM", Op.MINIMUM: "MINIMUM", Op.POW: "POW", Op.PRELU: "PRELU",
                Op.EQUAL: "EQUAL", Op.NOT_EQUAL: "NOT_EQUAL", Op.GREATER: "GREATER",
                Op.GREATER_EQUAL: "GREATER_EQUAL", Op.LESS: "LESS", Op.LESS_EQUAL: "LESS_EQUAL",
                Op.LOGICAL_AND: "LOGICAL_AND", Op.LOGICAL_OR: "LOGICAL_OR", Op.LOGICAL_NOT: "LOGICAL_NOT",
                Op.ABS: "ABS", Op.EXP: "EXP", Op.LOG: "LOG", Op.SQRT: "SQRT", Op.RSQRT: "RSQRT", Op.NEG: "NEG",
                Op.SIN: "SIN", Op.FLOOR: "FLOOR", Op.LOGISTIC: "LOGISTIC", Op.TANH: "TANH", Op.RELU: "RELU",
                Op.RELU1: "RELU_N1_TO_1", Op.RELU6: "RELU6", Op.HARD_SWISH: "HARD_SWISH", Op.CAST: "CAST",
                Op.DEQUANTIZE: "DEQUANTIZE", Op.QUANTIZE: "QUANTIZE"}


@maps((Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_NOT), {BOOL8})
@maps(Op.POW, {F32})
@maps((Op.NEG, Op.ABS), {F32, I32})
@maps((Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.FLOOR), {F32})
@maps((Op.LOGISTIC, Op.TANH, Op.RELU, Op.RELU1, Op.RELU6, Op.HARD_SWISH), NUMERIC)
@maps(Op.CAST, {F32, F16, I32})
@maps(Op.DEQUANTIZE, QUANT8 | {T.TENSOR_QUANT8_SYMM})
@maps(Op.QUANTIZE, {F32})
def _elementwise(g, op):
    """One TFLite operator on the same inputs, broadcasting as NNAPI does."""
    if op.type == Op.CAST and g.operand(op.outputs[0]).type not in (F32, F16, I32):
        raise Unsupported(f"CAST to {g.operand(op.outputs[0]).type.name}")
    if op.type == Op.DEQUANTIZE and g.operand(op.outputs[0]).type != F32:
        raise Unsupported("DEQUANTIZE to float16")
    if op.type == Op.DEQUANTIZE and g.is_constant(op.inputs[0]):
        # XNNPACK folds the DEQUANTIZE of a constant into a static tensor and fails when that
        # reaches a model output ("failed to setup XNNPACK runtime"; through a RESHAPE the
        # process aborts in free()): unsupported, with either kernel set (one conversion).
        raise Unsupported("DEQUANTIZE of a constant (XNNPACK fails on it)")
    g.op(_ELEMENTWISE[op.type], [g.tensor(k) for k in op.inputs], [g.tensor(k) for k in op.outputs])


@maps(Op.PRELU, NUMERIC)
def _prelu(g, op):
    """PRELU; TFLite's kernel requires the output to have the input's shape, NNAPI broadcasts
    input and alpha both (its header's example: alpha {5, 4, 3, 1}, output {5, 4, 3, 2}). An
    input smaller than the output is broadcast to it first (BROADCAST_TO, on known shapes)."""
    x, alpha = op.inputs
    xdims, adims = g.operand(x).dimensions, g.operand(alpha).dimensions
    grows = len(adims) > len(xdims) or any(a not in (1, d) for a, d in zip(reversed(adims), reversed(xdims)))
    image = g.tensor(x)
    if grows:
        if not xdims or not adims or 0 in xdims or 0 in adims:
            raise Unsupported("PRELU whose alpha may broadcast the input, on shapes not known")
        shape = np.broadcast_shapes(tuple(xdims), tuple(adims))
        image = g.like(x)
        g.op("BROADCAST_TO", [g.tensor(x), g.const(np.array(shape, np.int32))], [image], version=2)
    g.op("PRELU", [image, g.tensor(alpha)], [g.tensor(op.outputs[0])])


@maps((Op.EQUAL, Op.NOT_EQUAL, Op.GREATER, Op.GREATER_EQUAL, Op.LESS, Op.LESS_EQUAL), NUMERIC | {I32})
def _comparison(g, op):
    """Comparisons; TFLite 2.x aborts the process (a failed TFLITE_CHECK: the scale taken as a
    multiplier below one) when the second quantized input's scale is 1 or more."""
    second = g.operand(op.inputs[1])
    if second.type in QUANT8 and second.scale >= 1.0:
        raise Unsupported(f"{op.type.name}: TFLite aborts on a second quantized input of scale >= 1")
    _elementwise(g, op)


@maps((Op.MAXIMUM, Op.MINIMUM), NUMERIC | {I32})
def _maximum(g, op):
    """MAXIMUM/MINIMUM compare the stored values: quantized operands must share their parameters."""
    g.same_quant(op)
    _elementwise(g, op)


@maps(Op.SELECT, {BOOL8})
def _select(g, op):
    """SELECT; its output has the inputs' shape, written into the file: TFLite keeps an output's
    file shape when every tensor has one element (a scalar output of unknown rank otherwise)."""
    g.same_quant(op)
    g.op("SELECT", [g.tensor(k) for k in op.inputs],
         [g.tensor(op.outputs[0], dims=g.operand(op.inputs[1]).dimensions)])


@maps(Op.ELU, {F32})
def _elu(g, op):
    if g.scalar(op.inputs[1]) != 1.0:
        raise Unsupported("TFLite's ELU has alpha 1")
    g.op("ELU", [g.tensor(op.inputs[0])], [g.tensor(op.outputs[0])])


def _last_axis(g: Graph, op: hal.Operation, i: int) -> None:
    """TFLite normalizes over the last axis only: optional axis input ``i`` must name it."""
    if len(op.inputs) > i and not g.omitted(op.inputs[i]):
        rank = g.rank(op.inputs[0])
        if int(g.scalar(op.inputs[i])) % rank != rank - 1:
            raise Unsupported(f"{op.type.name} over axis {g.scalar(op.inputs[i])}: TFLite uses the last axis")


@maps(Op.SOFTMAX, NUMERIC)
def _softmax(g, op):
    _last_axis(g, op, 2)
    g.op("SOFTMAX", [g.tensor(op.inputs[0])], [g.tensor(op.outputs[0])],
         options("SoftmaxOptions", beta=float(g.scalar(op.inputs[1]))))


@maps(Op.LOG_SOFTMAX, {F32})
def _log_softmax(g, op):
    """LOG_SOFTMAX of beta * x (TFLite's has no beta)."""
    _last_axis(g, op, 2)
    x, beta = g.tensor(op.inputs[0]), float(g.scalar(op.inputs[1]))
    if beta != 1.0:
        scaled = g.like(op.inputs[0])
        g.op("MUL", [x, g.const(np.float32(beta), "float32")], [scaled], options("MulOptions"))
        x = scaled
    g.op("LOG_SOFTMAX", [x], [g.tensor(op.outputs[0])])


@maps(Op.L2_NORMALIZATION, NUMERIC)
def _l2_normalization(g, op):
    _last_axis(g, op, 1)
    g.op("L2_NORMALIZATION", [g.tensor(op.inputs[0])], [g.tensor(op.outputs[0])], options("L2NormOptions"))


@maps(Op.LOCAL_RESPONSE_NORMALIZATION, {F32})
def _local_response_normalization(g, op):
    if g.rank(op.inputs[0]) != 4:
        raise Unsupported("TFLite's LOCAL_RESPONSE_NORMALIZATION takes 4-D inputs only")
    _last_axis(g, op, 5)
    radius, bias, alpha, beta = (g.scalar(k) for k in op.inputs[1:5])
    g.op("LOCAL_RESPONSE_NORMALIZATION", [g.tensor(op.inputs[0])], [g.tensor(op.outputs[0])],
         options("LocalResponseNormalizationOptions", radius=int(radius), bias=float(bias), alpha=float(alpha),
                 beta=float(beta)))


_REDUCE = {Op.MEAN: "MEAN", Op.REDUCE_SUM: "SUM", Op.REDUCE_PROD: "REDUCE_PROD", Op.REDUCE_MAX: "REDUCE_MAX",
           Op.REDUCE_MIN: "REDUCE_MIN", Op.REDUCE_ANY: "REDUCE_ANY", Op.REDUCE_ALL: "REDUCE_ALL"}


@maps((Op.MEAN, Op.REDUCE_MAX, Op.REDUCE_MIN), NUMERIC)
@maps((Op.REDUCE_SUM, Op.REDUCE_PROD), {F32})
@maps((Op.REDUCE_ANY, Op.REDUCE_ALL), {BOOL8})
def _reduce(g, op):
    """A reducer; reducing every axis without keep_dims gives NNAPI's shape [1], not a scalar."""
    x, axes_k, keep_k = op.inputs
    rank = g.rank(x)
    axes = sorted({int(a) % rank for a in g.value(axes_k).reshape(-1)})
    keep = bool(g.scalar(keep_k))
    opts = options("ReducerOptions", keepDims=keep)
    axes_t = g.const(np.array(axes, np.int32))
    if len(axes) == rank and not keep:
        scalar = g.like(op.outputs[0])
        g.op(_REDUCE[op.type], [g.tensor(x), axes_t], [scalar], opts)
        g.op("RESHAPE", [scalar, g.const(np.array([1], np.int32))], [g.tensor(op.outputs[0])])
    else:
        g.op(_REDUCE[op.type], [g.tensor(x), axes_t], [g.tensor(op.outputs[0])], opts)


@maps((Op.ARGMAX, Op.ARGMIN), NUMERIC | {I32})
def _argmax(g, op):
    """ARG_MAX / ARG_MIN; of a 1-D input NNAPI's result has shape [1], TFLite's is a scalar."""
    name, kind = ("ARG_MAX", "ArgMaxOptions") if op.type == Op.ARGMAX else ("ARG_MIN", "ArgMinOptions")
    axis = g.const(np.array([g.scalar(op.inputs[1])], np.int32))
    opts = options(kind, outputType=2)
    if g.rank(op.inputs[0]) == 1:
        index = g.like(op.outputs[0])
        g.op(name, [g.tensor(op.inputs[0]), axis], [index], opts)
        g.op("RESHAPE", [index, g.const(np.array([1], np.int32))], [g.tensor(op.outputs[0])])
    else:
        g.op(name, [g.tensor(op.inputs[0]), axis], [g.tensor(op.outputs[0])], opts)


@maps(Op.BATCH_MATMUL, {F32, S8})
def _batch_matmul(g, op):
    adj = [g.flag(op, 2), g.flag(op, 3)]
    g.op("BATCH_MATMUL", [g.tensor(op.inputs[0]), g.tensor(op.inputs[1])], [g.tensor(op.outputs[0])],
         options("BatchMatMulOptions", adjX=adj[0], adjY=adj[1]))


# -- operations that move data: quantized values are copied, so parameters must match ---------

@maps(Op.RESHAPE, ANY)
def _reshape(g, op):
    g.same_quant(op)
    g.op("RESHAPE", [g.tensor(op.inputs[0]), g.tensor(op.inputs[1])], [g.tensor(op.outputs[0])])


@maps(Op.SQUEEZE, ANY)
def _squeeze(g, op):
    """Squeeze the given axes, or every size-1 dimension; NNAPI's result of squeezing every
    dimension is [1] (a RESHAPE then, on a known shape)."""
    g.same_quant(op)
    axes = [] if len(op.inputs) < 2 or g.omitted(op.inputs[1]) else [int(a) for a in g.value(op.inputs[1]).reshape(-1)]
    dims = g.operand(op.inputs[0]).dimensions
    if dims and 0 not in dims:
        rank = len(dims)
        gone = {a % rank for a in axes} if axes else {i for i, d in enumerate(dims) if d == 1}
        shape = [d for i, d in enumerate(dims) if i not in gone] or [1]
        g.op("RESHAPE", [g.tensor(op.inputs[0]), g.const(np.array(shape, np.int32))], [g.tensor(op.outputs[0])])
        return
    g.op("SQUEEZE", [g.tensor(op.inputs[0])], [g.tensor(op.outputs[0])], options("SqueezeOptions", squeezeDims=axes))


@maps(Op.EXPAND_DIMS, ANY)
def _expand_dims(g, op):
    g.same_quant(op)
    axis = g.const(np.array([g.scalar(op.inputs[1])], np.int32))
    g.op("EXPAND_DIMS", [g.tensor(op.inputs[0]), axis], [g.tensor(op.outputs[0])])


@maps(Op.TRANSPOSE, ANY)
def _transpose(g, op):
    """TRANSPOSE by the permutation, or reversing the dimensions when it is omitted."""
    g.same_quant(op)
    if len(op.inputs) < 2 or g.omitted(op.inputs[1]):
        perm = list(range(g.rank(op.inputs[0])))[::-1]
    else:
        perm = [int(v) for v in g.value(op.inputs[1]).reshape(-1)]
    g.transpose(g.tensor(op.inputs[0]), perm, out=g.tensor(op.outputs[0]))


@maps(Op.CONCATENATION, ANY)
def _concatenation(g, op):
    """CONCATENATION; TFLite requantizes uint8 inputs to the output's parameters, int8 ones it
    copies (they must share the output's)."""
    *tensors, axis = op.inputs
    if g.operand(op.outputs[0]).type == S8:
        g.same_quant(op)
    g.op("CONCATENATION", [g.tensor(k) for k in tensors], [g.tensor(op.outputs[0])],
         options("ConcatenationOptions", axis=int(g.scalar(axis))))


@maps(Op.SPLIT, ANY)
def _split(g, op):
    g.same_quant(op)
    x, axis, count = op.inputs
    g.op("SPLIT", [g.const(np.array(g.scalar(axis), np.int32)), g.tensor(x)], [g.tensor(k) for k in op.outputs],
         options("SplitOptions", numSplits=int(g.scalar(count))))


@maps(Op.GATHER, ANY)
def _gather(g, op):
    g.same_quant(op)
    x, axis, indices = op.inputs
    g.op("GATHER", [g.tensor(x), g.tensor(indices)], [g.tensor(op.outputs[0])],
         options("GatherOptions", axis=int(g.scalar(axis))))


@maps((Op.PAD, Op.PAD_V2), NUMERIC | {I32})
def _pad(g, op):
    """PAD fills with 0 (the zero point for quantized tensors); PAD_V2 with its value, which for
    quantized tensors is already quantized (given TFLite the output's parameters)."""
    g.same_quant(op)
    x, paddings = op.inputs[0], op.inputs[1]
    inputs = [g.tensor(x), g.tensor(paddings)]
    if op.type == Op.PAD_V2:
        o = g.operand(x)
        inputs.append(g.const(np.asarray(g.scalar(op.inputs[2]), DTYPES[o.type]), TENSOR_TYPES[o.type],
                              **g._quant(o)))
    g.op("PADV2" if op.type == Op.PAD_V2 else "PAD", inputs, [g.tensor(op.outputs[0])])


@maps(Op.MIRROR_PAD, ANY - {BOOL8})
def _mirror_pad(g, op):
    g.same_quant(op)
    x, paddings, mode = op.inputs
    g.op("MIRROR_PAD", [g.tensor(x), g.tensor(paddings)], [g.tensor(op.outputs[0])],
         options("MirrorPadOptions", mode=int(g.scalar(mode))))


@maps(Op.SLICE, ANY)
def _slice(g, op):
    g.same_quant(op)
    x, begin, size = op.inputs
    g.op("SLICE", [g.tensor(x), g.tensor(begin), g.tensor(size)], [g.tensor(op.outputs[0])])


@maps(Op.STRIDED_SLICE, ANY)
def _strided_slice(g, op):
    g.same_quant(op)
    x, begin, end, strides, begin_mask, end_mask, shrink = op.inputs
    g.op("STRIDED_SLICE", [g.tensor(x), g.tensor(begin), g.tensor(end), g.tensor(strides)],
         [g.tensor(op.outputs[0])],
         options("StridedSliceOptions", beginMask=int(g.scalar(begin_mask)), endMask=int(g.scalar(end_mask)),
                 shrinkAxisMask=int(g.scalar(shrink))))


@maps(Op.TILE, ANY)
def _tile(g, op):
    g.same_quant(op)
    g.op("TILE", [g.tensor(op.inputs[0]), g.tensor(op.inputs[1])], [g.tensor(op.outputs[0])])


@maps(Op.REVERSE, ANY)
def _reverse(g, op):
    g.same_quant(op)
    g.op("REVERSE_V2", [g.tensor(op.inputs[0]), g.tensor(op.inputs[1])], [g.tensor(op.outputs[0])])


@maps((Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH), NUMERIC)
def _depth_space(g, op):
    g.same_quant(op)
    nchw = g.flag(op, 2)
    kind = "DepthToSpaceOptions" if op.type == Op.DEPTH_TO_SPACE else "SpaceToDepthOptions"
    g.op(op.type.name, [g.nhwc_in(op.inputs[0], nchw)], [g.nhwc_out(op.outputs[0], nchw)],
         options(kind, blockSize=int(g.scalar(op.inputs[1]))))


@maps(Op.BATCH_TO_SPACE_ND, NUMERIC)
def _batch_to_space(g, op):
    g.same_quant(op)
    nchw = g.flag(op, 2)
    g.op("BATCH_TO_SPACE_ND", [g.nhwc_in(op.inputs[0], nchw), g.tensor(op.inputs[1]),
                               g.const(np.zeros((2, 2), np.int32))], [g.nhwc_out(op.outputs[0], nchw)])


@maps(Op.SPACE_TO_BATCH_ND, NUMERIC)
def _space_to_batch(g, op):
    """SPACE_TO_BATCH_ND; the padding is zeros (quantized: the zero point), as TFLite's."""
    g.same_quant(op)
    nchw = g.flag(op, 3)
    g.op("SPACE_TO_BATCH_ND", [g.nhwc_in(op.inputs[0], nchw), g.tensor(op.inputs[1]), g.tensor(op.inputs[2])],
         [g.nhwc_out(op.outputs[0], nchw)])


@maps((Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR), NUMERIC)
def _resize(g, op):
    """RESIZE_* to explicit sizes (a scale factor gives floor(size * scale), as NNAPI) with
    NNAPI's align-corners and half-pixel flags, which are TFLite's options."""
    x = op.inputs[0]
    nchw, align, half = g.flag(op, 3), g.flag(op, 4), g.flag(op, 5)
    dims = g.operand(x).dimensions
    if len(dims) != 4:
        raise Unsupported("input rank unknown")
    h, w = (dims[2], dims[3]) if nchw else (dims[1], dims[2])
    out_h, out_w = g.resize_output_size(op, h, w)
    kind = "ResizeBilinearOptions" if op.type == Op.RESIZE_BILINEAR else "ResizeNearestNeighborOptions"
    g.op(op.type.name, [g.nhwc_in(x, nchw), g.const(np.array([out_h, out_w], np.int32))],
         [g.nhwc_out(op.outputs[0], nchw)], options(kind, alignCorners=align, halfPixelCenters=half))


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------

def check_operation(sg: hal.Subgraph, op: hal.Operation) -> None:
    """Raise Unsupported unless the operation's mapping accepts its types and parameters."""
    for k in op.inputs + op.outputs:
        o = sg.operands[k]
        if o.type not in TENSOR_TYPES:
            raise Unsupported(f"{op.type.name}: operand of type {o.type.name}")
    MAPPINGS.check(Graph(sg), op)


def to_flatbuffer(model: hal.Model) -> tuple[bytes, list[int], list[int]]:
    """The .tflite flatbuffer computing ``model.main`` and the tensor indexes of its inputs and
    outputs; Unsupported if any operation is."""
    if model.referenced:
        raise Unsupported("control flow (IF, WHILE) is not mapped")
    g = Graph(model.main)
    for op in model.main.operations:
        check_operation(model.main, op)
        MAPPINGS[op.type].emit(g, op)
    inputs = [g.tensor(k) for k in model.main.input_indexes]
    outputs = [g.tensor(k) for k in model.main.output_indexes]
    return g.b.finish(inputs, outputs), inputs, outputs
