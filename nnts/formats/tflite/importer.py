"""Import a TensorFlow Lite flatbuffer (.tflite) as an :class:`nnapi_ref.Model` of NNAPI operations.

    from nnts.formats.tflite.importer import load_tflite
    model, info = load_tflite("mobilenet_v1_1.0_224_quant.tflite")   # a finished nnapi_ref.Model
    info.inputs[0].shape, info.inputs[0].dtype, info.outputs[0].scale, ...

The flatbuffer is read with TFLite's own schema: the flatc-generated module that ai-edge-litert
ships (``ai_edge_litert.schema_py_generated``, its object API, over the ``flatbuffers`` package),
the same module :mod:`nnts.formats.tflite.writer` writes .tflite files with (the TFLite
driver's and :mod:`mlts.models`'), so one version-matched schema serves both directions. Operator options are the schema's ``...OptionsT`` objects.
Sparse constant tensors (TFLite's sparsity format) are densified as they are read.

Mapping (TFLite → NNAPI), besides the one-to-one operations:

* Tensor types: FLOAT32 → TENSOR_FLOAT32; INT8 activations → TENSOR_QUANT8_ASYMM_SIGNED; UINT8 →
  TENSOR_QUANT8_ASYMM; INT8 weights with one scale per output channel →
  TENSOR_QUANT8_SYMM_PER_CHANNEL (``channel_dim`` = TFLite's ``quantized_dimension``: 0 for
  CONV_2D filters, 3 for DEPTHWISE_CONV_2D filters); INT32 bias → TENSOR_INT32 with scale
  ``input_scale * filter_scale`` (0 with a per-channel filter, as NeuralNetworks.h requires);
  INT16 → TENSOR_QUANT16_SYMM; INT64 constants (shapes, axes, paddings) → TENSOR_INT32.
* Fused activations (NONE, RELU, RELU_N1_TO_1, RELU6) → NNAPI fuse codes 0-3; where NNAPI's
  operation has no fuse input (CONCATENATION, ...) a separate RELU/RELU1/RELU6 follows.
* Padding SAME/VALID → NNAPI's implicit padding codes. TFLite (ComputePaddingWithOffset) and
  NNAPI (calculateExplicitPadding) both put ``total // 2`` before and the rest after, with
  ``total = max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0)`` and ``out = ceil(in /
  stride)`` (SAME) or ``ceil((in - (k - 1) * dilation) / stride)`` (VALID): the same padding,
  also when it is asymmetric (MobileNets' stride-2 layers pad 0 before and 1 after). Each
  convolution and pooling checks its output shape against TFLite's (ComputeOutSize).
* QUANTIZE between two quantized types (the uint8↔int8 edges of the ``_quant`` classifiers):
  NNAPI's QUANTIZE takes only float input, so it becomes DEQUANTIZE → QUANTIZE through float32,
  which is exact when the two scales are equal (``round((q - z1) * s / s) = q - z1``).
* FULLY_CONNECTED: any input rank is flattened to ``[batch, in]`` (NNAPI does the same);
  ``keep_num_dims`` adds a RESHAPE back. NNAPI's FULLY_CONNECTED has no per-channel filter, so a
  per-channel int8 FC becomes RESHAPE → 1×1 CONV_2D → RESHAPE. Hybrid FCs (int8 weights, float
  activations) get their weights dequantized to float32 at import.
* Quantized MEAN whose output quantization differs from its input's (NNAPI's MEAN keeps the
  input's, and TFLite's NNAPI delegate refuses such a MEAN, leaving it to TFLite's kernel):
  DEQUANTIZE → MEAN in float32 → QUANTIZE, which rounds the mean once (a quantized MEAN followed
  by a requantization rounds twice: one output in five off by one on MobileNet v2's global
  pool). With ``convention="tflite"`` the MEAN keeps TFLite's output quantization instead: not
  valid NNAPI, for the reference driver's TFLite convention, which computes TFLite's integer
  mean (:func:`nnapi_ref.ops.reductions.tflite_quantized_mean`).
* UNIDIRECTIONAL_SEQUENCE_LSTM (float or hybrid): NNAPI operation 92 with zero initial states
  (TFLite's variable state tensors after ``reset_all_variables()``); TFLite's layer-norm inputs
  20-23 move to NNAPI's 24-27 and the options become inputs 20-23. Hybrid LSTMs get their weights
  dequantized. Integer (int8/int16) LSTMs are refused: NNAPI's QUANTIZED_LSTM is a single time
  step and, without layer normalization, ignores the gate biases that TFLite's kernel adds.
  The other recurrent operators (LSTM, BIDIRECTIONAL_SEQUENCE_LSTM, RNN,
  UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN, SVDF) likewise start from zero states.
* The operators TFLite's NNAPI delegate maps (its ``Validate`` in ``nnapi_delegate.cc``), with
  its conditions: e.g. BATCH_TO_SPACE_ND without crops, L2_NORMALIZATION without a fused
  activation, ARG_MAX/ARG_MIN with INT32 output, GATHER without batch_dims, STRIDED_SLICE without
  ellipsis or new-axis masks; RESIZE_* with align_corners / half_pixel_centers as NNAPI's
  optional inputs; LEAKY_RELU as PRELU with a one-element alpha (exact when quantized);
  LSH_PROJECTION's SPARSE as NNAPI's type 3. Where NNAPI's operation is narrower than TFLite's:
  SPLIT_V → one SLICE per output; UNPACK → SPLIT → RESHAPE; SQUARED_DIFFERENCE (float) → SUB →
  MUL; SELECT_V2 and BROADCAST_TO → RESHAPE → TILE of each broadcast input (LOGICAL_OR with
  false for booleans); GELU (approximate=true only: NNAPI has no erf) → its tanh formula in
  MULs, ADDs and a TANH; a shrunk STRIDED_SLICE axis gets ``end = begin + 1`` (NNAPI requires it, TFLite ignores
  ``end``); a quantized RELU/RELU6/RELU_N1_TO_1 that rescales → the RELU, then DEQUANTIZE →
  QUANTIZE; DEQUANTIZE of a float16 activation → CAST. SHAPE and RANK are folded into
  constants (shapes are static). One custom operator: MediaPipe's Convolution2DTransposeBias
  (its segmentation models) → TRANSPOSE_CONV_2D with the bias.
* Weights: float16 constants behind DEQUANTIZE (TFLite's float16 quantization) and sparse
  constants behind DENSIFY are folded into float32 / dense constants at import; packed INT4
  weights are unpacked to int8 values (exact: an int8 tensor that uses 16 levels).
* Resource variables (streaming models: CALL_ONCE runs an initialization subgraph of constant
  ASSIGN_VARIABLEs, the main subgraph READ_VARIABLEs and ASSIGN_VARIABLEs): every inference
  starts from the initial values, like a fresh TFLite interpreter's first invocation, and the
  assigned values are not kept (NNAPI models are stateless). Other subgraphs (IF, WHILE) are
  refused, naming the operator.

The modules beside this one: :mod:`.tflite_format` reads the flatbuffer; the converter's operators
are :mod:`.tflite_layers`, :mod:`.tflite_elementwise`, :mod:`.tflite_shapes` and
:mod:`.tflite_recurrent` (mixed into one converter class here).

Anything else (an unknown operator, a custom operator, an unsupported type or option) raises
:class:`TFLiteImportError` (a ValueError) naming the TFLite operator and its index; a malformed
or truncated file raises it too, never a crash deep inside.
"""
from __future__ import annotations

import functools
import inspect
import math
import os
from dataclasses import dataclass

import numpy as np

from nnapi_ref import Compilation, Execution, Model, OperandType, budget
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op
from nnts.formats.tflite.elementwise import ElementwiseOperators
# NEEDS_SCHEMA, parse_tflite and schema: this module's API (the importer's one entry point).
from nnts.formats.tflite.flatbuffer import (NEEDS_SCHEMA, NUMPY_TYPES, TfGraph, TFLiteImportError,  # noqa: F401
                                            TfOperator, TfTensor, parse_tflite, schema)
from nnts.formats.tflite.layers import LayerOperators
from nnts.formats.tflite.recurrent import RecurrentOperators
from nnts.formats.tflite.shapes import ShapeOperators


@dataclass
class TensorInfo:
    """A model input or output: TFLite's name and tensor index, the NNAPI operand's shape, numpy
    dtype and quantization (scale 0 for float)."""

    name: str
    tensor: int
    operand: int
    shape: tuple[int, ...]
    dtype: np.dtype
    tflite_type: str
    scale: float = 0.0
    zero_point: int = 0

    @property
    def quantized(self) -> bool:
        return self.scale != 0.0

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q)
        return (q.astype(np.float64) - self.zero_point) * self.scale if self.quantized else q.astype(np.float64)


@dataclass
class TFLiteInfo:
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    operators: list[str]             # TFLite operator names, in order
    nnapi_operations: list[str]      # the NNAPI operations emitted, in order
    notes: list[str]                 # lowerings that are not one-to-one
    operand_of: dict[int, int]       # TFLite tensor index -> NNAPI operand index (activations)
    description: str = ""


FUSED = {0: 0, 1: 1, 2: 2, 3: 3}    # TFLite ActivationFunctionType -> NNAPI FuseCode
FUSED_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
# Operators that are one NNAPI operation of the same operands: binary ones with a fused activation.
BINARY_OPS = {"ADD": Op.ADD, "SUB": Op.SUB, "MUL": Op.MUL, "DIV": Op.DIV}
# Operators that are one NNAPI operation of the same inputs and no options.
PLAIN_OPS = {"RELU": Op.RELU, "RELU6": Op.RELU6, "RELU_N1_TO_1": Op.RELU1, "LOGISTIC": Op.LOGISTIC, "TANH": Op.TANH,
             "HARD_SWISH": Op.HARD_SWISH, "EXP": Op.EXP, "LOG": Op.LOG, "SQRT": Op.SQRT, "RSQRT": Op.RSQRT,
             "ABS": Op.ABS, "NEG": Op.NEG,
             "SIN": Op.SIN, "FLOOR": Op.FLOOR, "LOGICAL_NOT": Op.LOGICAL_NOT, "LOGICAL_AND": Op.LOGICAL_AND,
             "LOGICAL_OR": Op.LOGICAL_OR, "CAST": Op.CAST, "MAXIMUM": Op.MAXIMUM, "MINIMUM": Op.MINIMUM, "POW": Op.POW,
             "PRELU": Op.PRELU, "LESS": Op.LESS, "LESS_EQUAL": Op.LESS_EQUAL, "GREATER": Op.GREATER,
             "GREATER_EQUAL": Op.GREATER_EQUAL, "EQUAL": Op.EQUAL, "NOT_EQUAL": Op.NOT_EQUAL,
             "HASHTABLE_LOOKUP": Op.HASHTABLE_LOOKUP}
# Custom operators with a mapping: name -> method.
CUSTOM_OPS = {"CUSTOM(Convolution2DTransposeBias)": "custom_transpose_conv_bias"}
# Reductions with ReducerOptions (MEAN has its own method: NNAPI's MEAN keeps the input's quantization).
REDUCTIONS = {"SUM": Op.REDUCE_SUM, "REDUCE_PROD": Op.REDUCE_PROD, "REDUCE_MAX": Op.REDUCE_MAX,
              "REDUCE_MIN": Op.REDUCE_MIN, "REDUCE_ANY": Op.REDUCE_ANY}


class _Converter(LayerOperators, ElementwiseOperators, ShapeOperators, RecurrentOperators):
    def __init__(self, g: TfGraph, convention: str = "nnapi"):
        self.g = g
        self.convention = convention
        self.m = Model()
        self.operand_of: dict[int, int] = {}
        self.const_cache: dict[tuple, int] = {}
        self.notes: list[str] = []
        self.emitted: list[str] = []
        self.op: TfOperator | None = None
        self.folded: set[int] = set()
        self.emit_after: list = []
        self.handles: dict[int, tuple[str, str]] = {}   # VAR_HANDLE output tensor -> (container, shared name)
        self.variables: dict[tuple[str, str], tuple] = {}   # resource variable -> ("const", array) | ("operand", k)

    # -- errors ------------------------------------------------------------------------------------

    def fail(self, msg: str):
        op = self.op
        where = f"TFLite operator {op.index} ({op.name})" if op is not None else "TFLite model"
        raise TFLiteImportError(f"{where}: {msg}")

    def note(self, msg: str) -> None:
        op = self.op
        self.notes.append(f"operator {op.index} ({op.name}): {msg}" if op is not None else msg)

    # -- operand types -------------------------------------------------------------------------

    def t(self, k: int) -> TfTensor:
        return self.g.tensors[k]

    def quant(self, t: TfTensor) -> tuple[float, int]:
        if t.scale is None:
            self.fail(f"tensor {t.index} ({t.name!r}) of type {t.type_name} has no quantization parameters")
        if t.per_channel:
            self.fail(f"tensor {t.index} ({t.name!r}) is quantized per channel where NNAPI needs one scale")
        return float(t.scale[0]), int(t.zero_point[0])

    def operand_type(self, t: TfTensor) -> OperandType:
        """The NNAPI type of a TFLite tensor used as an activation (or a plain constant)."""
        name = t.type_name
        if name == "FLOAT32":
            return OperandType(T.TENSOR_FLOAT32, t.shape)
        if name == "FLOAT16":
            return OperandType(T.TENSOR_FLOAT16, t.shape)
        if name in ("INT32", "INT64"):
            scale, zp = (float(t.scale[0]), int(t.zero_point[0])) if t.scale is not None and not t.per_channel \
                else (0.0, 0)
            return OperandType(T.TENSOR_INT32, t.shape, scale, zp)
        if name == "BOOL":
            return OperandType(T.TENSOR_BOOL8, t.shape)
        if name in ("INT8", "UINT8"):
            # Without quantization parameters (raw integers, e.g. around CAST) scale 1, as TFLite's
            # NNAPI delegate does: NNAPI's QUANT8 types need a positive scale.
            quant = self.quant(t) if t.scale is not None else (1.0, 0)
            return OperandType(T.TENSOR_QUANT8_ASYMM_SIGNED if name == "INT8" else T.TENSOR_QUANT8_ASYMM, t.shape,
                               *quant)
        if name == "INT16":
            scale, zp = self.quant(t)
            if zp != 0:
                self.fail(f"tensor {t.index} ({t.name!r}): INT16 with zero point {zp} (NNAPI's "
                          f"TENSOR_QUANT16_SYMM has none)")
            return OperandType(T.TENSOR_QUANT16_SYMM, t.shape, scale)
        self.fail(f"tensor {t.index} ({t.name!r}) has type {name}, which the importer does not support")

    def add(self, otype: OperandType, value=None, channel_quant=None) -> int:
        k = self.m.add_operand(otype)
        if channel_quant is not None:
            self.m.set_operand_symm_per_channel_quant_params(k, *channel_quant)
        if value is not None:
            self.m.set_operand_value(k, value)
        return k

    def const(self, otype: OperandType, value, channel_quant=None, key=None) -> int:
        """A constant operand (shared between uses when ``key`` is given)."""
        full_key = (key, otype, channel_quant) if key is not None else None
        if full_key is not None and full_key in self.const_cache:
            return self.const_cache[full_key]
        k = self.add(otype, np.ascontiguousarray(value), channel_quant)
        if full_key is not None:
            self.const_cache[full_key] = k
        return k

    def i32(self, v) -> int:
        return self.const(OperandType(T.INT32), np.int32(v), key=("i32", int(v)))

    def f32(self, v) -> int:
        return self.const(OperandType(T.FLOAT32), np.float32(v), key=("f32", float(np.float32(v))))

    def boolean(self, v) -> int:
        return self.const(OperandType(T.BOOL), np.bool_(v), key=("bool", bool(v)))

    def i32_tensor(self, values) -> int:
        v = np.asarray(values, np.int64)
        if v.size and (v.min() < -2 ** 31 or v.max() >= 2 ** 31):
            self.fail(f"constant {v.tolist()} does not fit in int32")
        v = v.astype(np.int32)
        return self.const(OperandType(T.TENSOR_INT32, v.shape if v.ndim else (1,)), v.reshape(-1) if not v.ndim else v,
                          key=("i32t", v.tobytes(), v.shape))

    def omitted(self, code=T.TENSOR_FLOAT32) -> int:
        k = self.m.add_operand(OperandType(code, (0,)))
        self.m.set_operand_value(k, None)
        return k

    def value_of(self, k: int, what: str) -> np.ndarray:
        """The data of a constant input tensor (error if it is computed)."""
        if k < 0 or self.t(k).data is None:
            self.fail(f"{what} must be a constant tensor")
        return self.t(k).data

    def tensor(self, k: int) -> int:
        """The operand of TFLite tensor ``k`` as an operation input: the operand already defined
        for an activation, or a new constant operand of its own type."""
        if k in self.operand_of:
            return self.operand_of[k]
        t = self.t(k)
        if t.data is None:
            self.fail(f"input tensor {k} ({t.name!r}) is neither a constant nor computed before this operator")
        otype = self.operand_type(t)
        data = t.data.astype(np.int32) if t.type_name == "INT64" else t.data
        if not t.shape:   # a rank-0 constant tensor: NNAPI tensors have rank >= 1
            otype = OperandType(otype.type, (1,), otype.scale, otype.zero_point)
            data = data.reshape(1)
        return self.const(otype, data, key=("tensor", k))

    def define(self, k: int, otype: OperandType | None = None) -> int:
        """The operand of an operator's output tensor ``k``."""
        if k in self.operand_of:
            self.fail(f"tensor {k} is written by two operators")
        t = self.t(k)
        if t.data is not None:
            self.fail(f"output tensor {k} ({t.name!r}) has constant data")
        if 0 in t.shape or not t.shape:
            self.fail(f"output tensor {k} ({t.name!r}) has unknown or empty shape {list(t.shape)}")
        idx = self.add(otype or self.operand_type(t))
        self.operand_of[k] = idx
        return idx

    def temp(self, like: OperandType, shape) -> int:
        return self.add(OperandType(like.type, shape, like.scale, like.zero_point))

    def emit(self, code: Op, ins, outs) -> None:
        self.m.add_operation(code, ins, outs)
        self.emitted.append(code.name)

    def out_type(self, k: int) -> OperandType:
        return self.operand_type(self.t(k))

    # -- options -------------------------------------------------------------------------------

    def opt(self, field, *args):
        """Option ``field`` of the current operator (its camelCase name in the schema's ``...OptionsT``
        object), or the default (``opt(name, default)``) when the operator has no options. The form
        ``opt(slot, fmt, default)`` names the field by its position in schema.fbs instead."""
        if isinstance(field, int):
            default = args[1] if len(args) > 1 else 0
        else:
            default = args[0] if args else 0
        o = self.op.options
        if o is None:
            return default
        if isinstance(field, int):
            names = list(inspect.signature(type(o).__init__).parameters)[1:]
            field = names[field] if field < len(names) else None
        if field is None or not hasattr(o, field):
            self.fail(f"has builtin options {type(o).__name__[:-1]}, which are not this operator's")
        return getattr(o, field)

    def fuse(self, name: str = "fusedActivationFunction") -> int:
        act = self.opt(name, 0)
        if act not in FUSED:
            self.fail(f"fused activation {FUSED_NAMES.get(act, act)} has no NNAPI fuse code")
        return FUSED[act]

    def activation_after(self, fuse: int, out_k: int, otype: OperandType) -> int:
        """For operations without a fuse input: the operand to write, and a RELU* appended after it."""
        if fuse == 0:
            return self.define(out_k)
        tmp = self.temp(otype, otype.dimensions)
        self.emit_after.append((tmp, fuse, out_k))
        return tmp

    # -- model -----------------------------------------------------------------------------------

    def handler(self, name: str):
        """The method that maps TFLite operator ``name``, None if there is none."""
        for table, method in ((BINARY_OPS, self.binary), (PLAIN_OPS, self.plain), (REDUCTIONS, self.reduce)):
            if name in table:
                return functools.partial(method, code=table[name])
        if name in CUSTOM_OPS:
            return getattr(self, CUSTOM_OPS[name])
        return getattr(self, "op_" + name, None)

    def convert(self, extra_outputs=()) -> tuple[Model, TFLiteInfo]:
        g = self.g
        for k in g.inputs:
            if self.t(k).data is not None:
                self.fail(f"model input tensor {k} has constant data")
            try:
                self.define(k)
            except NnapiError as e:
                self.fail(f"model input tensor {k}: {e}")
        for op in g.operators:
            self.op = op
            handler = self.handler(op.name)
            if handler is None:
                self.fail("is not supported by the TFLite importer (no NNAPI mapping implemented)")
            self.emit_after = []
            try:
                handler(op)
                for tmp, fuse, out_k in self.emit_after:
                    self.emit({1: Op.RELU, 2: Op.RELU1, 3: Op.RELU6}[fuse], [tmp], [self.define(out_k)])
            except TFLiteImportError:
                raise
            except NnapiError as e:
                self.fail(f"NNAPI rejects the mapping: {e}")
            except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
                # Inconsistent operands (a wrong input count, shapes that do not fit, ...).
                self.fail(f"operands the mapping cannot take ({type(e).__name__}: {e})")
            for k in op.outputs:
                if k >= 0 and k not in self.operand_of and k not in self.folded:
                    self.fail(f"output tensor {k} was not produced by the mapping")
        self.op = None
        outputs = list(g.outputs) + [k for k in extra_outputs if k not in g.outputs]
        for k in outputs:
            if k in self.folded:
                raise TFLiteImportError(f"TFLite model: output tensor {k} is a constant folded at import (no NNAPI "
                                        "operation computes it; an NNAPI model output cannot be a constant)")
            if k not in self.operand_of:
                raise TFLiteImportError(f"TFLite model: output tensor {k} is not computed by any operator")
        try:
            self.m.identify_inputs_and_outputs([self.operand_of[k] for k in g.inputs],
                                               [self.operand_of[k] for k in outputs])
            self.m.finish()
        except NnapiError as e:
            raise TFLiteImportError(f"TFLite model: NNAPI rejects the converted model: {e}") from None
        info = TFLiteInfo([self.io_info(k) for k in g.inputs], [self.io_info(k) for k in outputs],
                          [op.name for op in g.operators], self.emitted, self.notes, dict(self.operand_of),
                          g.description)
        return self.m, info

    def io_info(self, k: int) -> TensorInfo:
        t = self.t(k)
        idx = self.operand_of[k]
        o = self.type_of(idx)
        return TensorInfo(t.name, k, idx, o.dimensions, DTYPES[o.type], t.type_name, o.scale, o.zero_point)


def infer(compilation: Compilation, info: TFLiteInfo, inputs) -> list[np.ndarray]:
    """One inference of an imported model, compiled: ``inputs`` in the model's input order; the
    outputs shaped and typed as ``info`` describes them."""
    execution = Execution(compilation)
    for k, x in enumerate(inputs):
        execution.set_input(k, x)
    outputs = [np.zeros(o.shape, o.dtype) for o in info.outputs]
    for k, out in enumerate(outputs):
        execution.set_output(k, out)
    execution.compute()
    return outputs


def load_tflite(path, extra_outputs=(), convention: str = "nnapi") -> tuple[Model, TFLiteInfo]:
    """Convert the .tflite file at ``path`` into a finished nnapi_ref Model (NNAPI operations).

    ``extra_outputs``: TFLite tensor indices of intermediate activations to expose as additional
    model outputs (after the model's own), e.g. to find the first layer where two runtimes differ.
    ``convention``: "nnapi" (valid NNAPI, the default) or "tflite", for the reference driver's
    TFLite convention only (a quantized MEAN keeps TFLite's output quantization: see op_MEAN).
    Raises TFLiteImportError (a ValueError) for a malformed file or anything it cannot map."""
    with open(path, "rb") as f:
        try:
            budget.check(os.fstat(f.fileno()).st_size, f"{path}: reading this model")
        except NnapiError as e:
            raise TFLiteImportError(e.message) from None
        buf = f.read()
    return convert(parse_tflite(buf), extra_outputs, convention)


def unmapped_operators(g: TfGraph) -> list[str]:
    """The operators of ``g`` that the importer has no mapping for (sorted, each once)."""
    converter = _Converter(g)
    return sorted({op.name for op in g.operators if converter.handler(op.name) is None})


def check_io(g: TfGraph) -> None:
    """A model whose inputs and outputs callers can allocate: at least one input, none past the
    memory budget (:mod:`nnapi_ref.budget`; a file can declare 1x100000x100000x3, and every caller
    would allocate it before anything else could refuse it)."""
    if not g.inputs:
        raise TFLiteImportError("unsupported .tflite: the model has no inputs")
    for role, indexes in (("input", g.inputs), ("output", g.outputs)):
        for k in indexes:
            tensor = g.tensors[k]
            itemsize = np.dtype(NUMPY_TYPES.get(tensor.type_name, np.uint8)).itemsize
            size = math.prod(max(d, 1) for d in tensor.shape) * itemsize
            try:
                budget.check(size, f"{role} tensor {k} ({tensor.name!r}) of shape {list(tensor.shape)}")
            except NnapiError as e:
                raise TFLiteImportError(f"unsupported .tflite: {e.message}") from None


def convert(g: TfGraph, extra_outputs=(), convention: str = "nnapi") -> tuple[Model, TFLiteInfo]:
    """Convert a parsed graph (see :func:`parse_tflite`) into a finished nnapi_ref Model."""
    if convention not in ("nnapi", "tflite"):
        raise ValueError(f"unknown convention {convention!r}; expected 'nnapi' or 'tflite'")
    check_io(g)
    try:
        return _Converter(g, convention).convert(extra_outputs)
    except TFLiteImportError:
        raise
    except (NnapiError, ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
        raise TFLiteImportError(f"TFLite model: malformed or unsupported ({type(e).__name__}: {e})") from None
