"""Import a TensorFlow Lite flatbuffer (.tflite) as an :class:`nnapi_ref.Model` of NNAPI operations.

    from nnts.mlts.tflite import load_tflite
    model, info = load_tflite("mobilenet_v1_1.0_224_quant.tflite")   # a finished nnapi_ref.Model
    info.inputs[0].shape, info.inputs[0].dtype, info.outputs[0].scale, ...

The flatbuffer is read with TFLite's own schema: the flatc-generated module that ai-edge-litert
ships (``ai_edge_litert.schema_py_generated``, its object API, over the ``flatbuffers`` package),
the same module :mod:`nnapi_ref.drivers.tflite.writer` writes .tflite files with (the TFLite
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

Anything else (an unknown operator, a custom operator, an unsupported type or option) raises
:class:`TFLiteImportError` (a ValueError) naming the TFLite operator and its index; a malformed
or truncated file raises it too, never a crash deep inside.
"""
from __future__ import annotations

import math

import functools
import inspect
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nnapi_ref import Compilation, Execution, Model, OperandType
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op


class TFLiteImportError(ValueError):
    """The file is not a well-formed .tflite model, or uses something the importer cannot map."""


# ----------------------------------------------------------------------------- reading the flatbuffer

try:
    import flatbuffers  # noqa: F401  (the generated schema module reads through it)
    from ai_edge_litert import schema_py_generated as schema
except ImportError:  # pragma: no cover - depends on the environment
    schema = None

NEEDS_SCHEMA = ("reading .tflite files needs the ai-edge-litert package (its flatc-generated schema "
                "ai_edge_litert.schema_py_generated) and flatbuffers: pip install ai-edge-litert")


def _enum_names(enum) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


BUILTIN_NAMES = _enum_names(schema.BuiltinOperator) if schema is not None else {}
TENSOR_TYPE_NAMES = _enum_names(schema.TensorType) if schema is not None else {}
# TFLite TensorType name -> numpy dtype of its raw data (types without one cannot be constants here).
NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "FLOAT64": np.float64, "INT32": np.int32,
               "UINT8": np.uint8, "INT64": np.int64, "BOOL": np.bool_, "INT16": np.int16, "INT8": np.int8,
               "UINT64": np.uint64, "UINT32": np.uint32, "UINT16": np.uint16}
CUSTOM = 32
# Errors the generated reader raises on a truncated or corrupt buffer (it does no bounds checks of
# its own: struct and numpy refuse to read past the end).
READ_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, AttributeError, UnicodeDecodeError,
               RecursionError, MemoryError)


def builtin_name(code: int) -> str:
    return BUILTIN_NAMES.get(code, f"builtin operator {code}")


@dataclass
class TfTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type: int                       # TFLite TensorType
    data: np.ndarray | None         # constant data (shape applied, sparse data densified), None for activations
    scale: np.ndarray | None = None  # float32 scales, None when not quantized
    zero_point: np.ndarray | None = None
    quantized_dimension: int = 0
    is_variable: bool = False

    @property
    def type_name(self) -> str:
        return TENSOR_TYPE_NAMES.get(self.type, f"tensor type {self.type}")

    @property
    def per_channel(self) -> bool:
        return self.scale is not None and len(self.scale) > 1


@dataclass
class TfOperator:
    index: int
    name: str                        # builtin name, or "CUSTOM(code)"
    inputs: list[int]                # tensor indices, -1 for an omitted optional input
    outputs: list[int]
    options: object | None           # the schema's ...OptionsT object, None when absent
    intermediates: list[int] = field(default_factory=list)
    custom_options: bytes = b""      # a CUSTOM operator's raw options


@dataclass
class TfGraph:
    tensors: list[TfTensor]
    operators: list[TfOperator]
    inputs: list[int]
    outputs: list[int]
    description: str = ""
    subgraphs: list["TfGraph"] = field(default_factory=list)   # all of the model's, this (main) one first


def _ints(v) -> list[int]:
    return [] if v is None else [int(x) for x in v]


def _text(v) -> str:
    return "" if v is None else v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def parse_tflite(buf: bytes) -> TfGraph:
    """Read the (only) subgraph of a .tflite flatbuffer with TFLite's own schema (object API)."""
    if schema is None:
        raise TFLiteImportError(NEEDS_SCHEMA)
    buf = bytes(buf)
    if len(buf) < 8:
        raise TFLiteImportError(f"not a .tflite file: {len(buf)} bytes is too short for a flatbuffer")
    if buf[4:8] != b"TFL3":
        raise TFLiteImportError(f"not a .tflite file: file identifier {buf[4:8]!r}, expected b'TFL3'")
    try:
        model = schema.ModelT.InitFromPackedBuf(buf, 0)
    except READ_ERRORS as e:
        raise TFLiteImportError(f"malformed .tflite (truncated or corrupt): the flatbuffer cannot be read "
                                f"({type(e).__name__}: {e})") from None
    try:
        return _graph(model, buf)
    except TFLiteImportError:
        raise
    except READ_ERRORS as e:
        raise TFLiteImportError(f"malformed .tflite: inconsistent model ({type(e).__name__}: {e})") from None


def _graph(model, buf: bytes) -> TfGraph:
    """The main subgraph (the first), the others in its ``subgraphs`` (CALL_ONCE's, IF's, ...)."""
    subgraphs = model.subgraphs or []
    if not subgraphs:
        raise TFLiteImportError("malformed .tflite: the model has no subgraph")
    buffers = model.buffers or []
    opcodes = []
    for oc in model.operatorCodes or []:
        # builtin_code superseded the int8 deprecated_builtin_code at code 127.
        code = max(int(oc.deprecatedBuiltinCode), int(oc.builtinCode))
        opcodes.append(f"CUSTOM({_text(oc.customCode)})" if code == CUSTOM else builtin_name(code))
    graphs = [_subgraph(n, sg, opcodes, buffers, buf) for n, sg in enumerate(subgraphs)]
    main = graphs[0]
    main.description, main.subgraphs = _text(model.description), graphs
    return main


def _subgraph(n: int, sg, opcodes, buffers, buf: bytes) -> TfGraph:
    where = f"subgraph {n}: " if n else ""
    tensors = [_tensor(k, t, buffers, buf) for k, t in enumerate(sg.tensors or [])]
    operators = []
    for k, o in enumerate(sg.operators or []):
        i = int(o.opcodeIndex)
        if i >= len(opcodes):
            raise TFLiteImportError(f"malformed .tflite: {where}operator {k} has opcode index {i} of {len(opcodes)}")
        name = opcodes[i]
        ins, outs = _ints(o.inputs), _ints(o.outputs)
        for t in ins + outs:
            if not -1 <= t < len(tensors):
                raise TFLiteImportError(f"malformed .tflite: {where}operator {k} ({name}) names tensor {t} of "
                                        f"{len(tensors)}")
        custom = bytes(np.asarray(o.customOptions, np.uint8)) if o.customOptions is not None else b""
        operators.append(TfOperator(k, name, ins, outs, o.builtinOptions, _ints(o.intermediates), custom))
    ins, outs = _ints(sg.inputs), _ints(sg.outputs)
    for t in ins + outs:
        if not 0 <= t < len(tensors):
            raise TFLiteImportError(f"malformed .tflite: {where}input/output names tensor {t} of {len(tensors)}")
    return TfGraph(tensors, operators, ins, outs)


def _tensor(k: int, t, buffers, buf: bytes) -> TfTensor:
    shape = tuple(_ints(t.shape))
    if any(d < 0 for d in shape):
        raise TFLiteImportError(f"malformed .tflite: tensor {k} has shape {list(shape)}")
    tensor = TfTensor(k, _text(t.name), shape, int(t.type), None, is_variable=bool(t.isVariable))
    q = t.quantization
    if q is not None and q.scale is not None and len(q.scale):
        tensor.scale = np.asarray(q.scale, np.float32)
        zp = q.zeroPoint
        tensor.zero_point = np.zeros(tensor.scale.size, np.int64) if zp is None or not len(zp) \
            else np.asarray(zp, np.int64)
        tensor.quantized_dimension = int(q.quantizedDimension)
    if q is not None and q.details is not None:
        raise TFLiteImportError(f"unsupported .tflite: tensor {k} ({tensor.name!r}) has "
                                f"{type(q.details).__name__[:-1]} quantization")
    if t.externalBuffer:
        raise TFLiteImportError(f"unsupported .tflite: tensor {k} ({tensor.name!r}) keeps its data in an "
                                "external buffer group")
    b = int(t.buffer)
    if b >= len(buffers):
        raise TFLiteImportError(f"malformed .tflite: tensor {k} names buffer {b} of {len(buffers)}")
    raw = None
    if b:
        raw = buffers[b].data
        if raw is None and int(buffers[b].offset) > 1:   # data after the flatbuffer (models > 2 GB)
            off, size = int(buffers[b].offset), int(buffers[b].size)
            if off + size > len(buf):
                raise TFLiteImportError(f"malformed .tflite: buffer {b} at byte {off} (+{size}) lies outside the "
                                        f"file's {len(buf)} bytes (truncated?)")
            raw = np.frombuffer(buf, np.uint8, size, off)
    if raw is None or not len(raw):
        if t.sparsity is not None:
            raise TFLiteImportError(f"malformed .tflite: sparse tensor {k} ({tensor.name!r}) has no data")
        return tensor
    raw = np.asarray(raw, np.uint8)
    if tensor.type_name == "INT4":
        # Two values a byte, the first in the low nibble (TFLite's packed int4 weights).
        n = int(np.prod(shape)) if shape else 1
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)[:n].astype(np.int8)
        values = np.where(nibbles > 7, nibbles - 16, nibbles).astype(np.int8)
    else:
        dtype = NUMPY_TYPES.get(tensor.type_name)
        if dtype is None:
            raise TFLiteImportError(f"unsupported .tflite: constant tensor {k} ({tensor.name!r}) has type "
                                    f"{tensor.type_name}")
        itemsize = np.dtype(dtype).itemsize
        if raw.size % itemsize:
            raise TFLiteImportError(f"malformed .tflite: tensor {k} has {raw.size} bytes of {tensor.type_name} data")
        values = raw.view(np.dtype(dtype).newbyteorder("<")).astype(dtype)   # an aligned, native-order copy
    if t.sparsity is not None:
        tensor.data = densify(values, shape, t.sparsity, f"tensor {k} ({tensor.name!r})")
    else:
        n = int(np.prod(shape)) if shape else 1
        if values.size != n:
            raise TFLiteImportError(f"malformed .tflite: tensor {k} of shape {list(shape)} has {values.size} "
                                    f"values of data")
        tensor.data = values.reshape(shape)
    return tensor


def _index_vector(v) -> np.ndarray:
    return np.asarray([] if v is None or v.values is None else v.values, np.int64)


def densify(values: np.ndarray, shape, sparsity, what: str) -> np.ndarray:
    """The dense tensor of ``shape`` whose non-zero ``values`` are stored in TFLite's sparse format:
    the tensor's n dimensions, plus k block dimensions (``block_map[j]`` is the dimension block
    dimension n+j subdivides), traversed in ``traversal_order``; level i of ``dim_metadata``
    describes traversal dimension i, DENSE (all ``dense_size`` indices) or SPARSE_CSR (for the
    p-th position of the level above, the indices ``array_indices[array_segments[p]:
    array_segments[p+1]]``). The leaves, in traversal order, are ``values``."""
    order = _ints(sparsity.traversalOrder)
    block_map = _ints(sparsity.blockMap)
    levels = sparsity.dimMetadata or []
    n, k = len(shape), len(block_map)
    if int(np.prod(shape, dtype=np.float64)) > 2 ** 31:
        raise TFLiteImportError(f"unsupported .tflite: {what}: sparse tensor of shape {list(shape)} is too large "
                                "to densify")
    if sorted(order) != list(range(n + k)) or len(levels) != n + k or sorted(order[:n]) != list(range(n)) \
            or any(not 0 <= d < n for d in block_map):
        raise TFLiteImportError(f"malformed .tflite: {what}: sparsity with traversal order {order}, block map "
                                f"{block_map} and {len(levels)} dimension levels does not fit shape {list(shape)}")
    block = [1] * n
    for j, d in enumerate(block_map):
        level = levels[order.index(n + j)]
        if level.format != schema.DimensionType.DENSE:
            raise TFLiteImportError(f"unsupported .tflite: {what}: block dimension {n + j} is not DENSE")
        block[d] = int(level.denseSize)
    positions = np.zeros(1, np.int64)    # position of each node at the current level
    coords = []                          # per level: each node's index along that level's dimension
    for i, level in enumerate(levels):
        if level.format == schema.DimensionType.DENSE:
            size, parents = int(level.denseSize), positions.size
            positions = (positions[:, None] * size + np.arange(size)).reshape(-1)
            coords = [np.repeat(c, size) for c in coords] + [np.tile(np.arange(size), parents)]
        elif level.format == schema.DimensionType.SPARSE_CSR:
            segments, indices = _index_vector(level.arraySegments), _index_vector(level.arrayIndices)
            if segments.size == 0 or (positions.size and positions.max() + 1 >= segments.size) \
                    or np.any(np.diff(segments) < 0) or segments[0] < 0 or segments[-1] > indices.size:
                raise TFLiteImportError(f"malformed .tflite: {what}: sparse level {i} has inconsistent segments")
            starts, counts = segments[positions], segments[positions + 1] - segments[positions]
            parent = np.repeat(np.arange(positions.size), counts)
            positions = starts[parent] + np.arange(parent.size) - np.repeat(np.cumsum(counts) - counts, counts)
            coords = [c[parent] for c in coords] + [indices[positions]]
        else:
            raise TFLiteImportError(f"unsupported .tflite: {what}: dimension format {level.format}")
    if positions.size != values.size:
        raise TFLiteImportError(f"malformed .tflite: {what}: the sparsity describes {positions.size} values, "
                                f"the buffer holds {values.size}")
    by_dim = {order[i]: c for i, c in enumerate(coords)}
    index = []
    for d in range(n):
        c = by_dim[d] * block[d] if d in by_dim else np.zeros(values.size, np.int64)
        for j, bd in enumerate(block_map):
            if bd == d:
                c = c + by_dim[n + j]
        if c.size and (c.min() < 0 or c.max() >= shape[d]):
            raise TFLiteImportError(f"malformed .tflite: {what}: a sparse index lies outside shape {list(shape)}")
        index.append(c)
    dense = np.zeros(shape, values.dtype)
    dense[tuple(index)] = values
    return dense


# ----------------------------------------------------------------------------- conversion

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
PADDING = {0: 1, 1: 2}              # TFLite Padding SAME/VALID -> NNAPI PaddingCode SAME/VALID
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
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def conv_out_size(padding: int, in_size: int, stride: int, dilation: int, k: int) -> int:
    """TFLite's ComputeOutSize (padding 0 SAME, 1 VALID)."""
    effective = (k - 1) * dilation + 1
    return (in_size + stride - 1) // stride if padding == 0 else (in_size + stride - effective) // stride


class _Converter:
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

    # -- operators -------------------------------------------------------------------------------
    # One method per TFLite builtin, named op_<BUILTIN NAME>; ``op.inputs``/``op.outputs`` are
    # TFLite tensor indices (-1 for an omitted optional input). Option slots follow schema.fbs.

    def type_of(self, idx: int) -> OperandType:
        o = self.m._operands[idx]
        return OperandType(o.type, o.dimensions, o.scale, o.zero_point)

    def dequantized(self, t: TfTensor) -> np.ndarray:
        """A constant int8/uint8 (per-tensor or per-channel) or float16 tensor as float32."""
        data = t.data
        if t.type_name == "FLOAT16":
            return data.astype(np.float32)
        if t.scale is None:
            self.fail(f"tensor {t.index} ({t.name!r}) of type {t.type_name} has no quantization parameters")
        shape = [1] * data.ndim
        if t.per_channel:
            shape[t.quantized_dimension] = -1
        scale = t.scale.astype(np.float32).reshape(shape)
        zp = t.zero_point.astype(np.float32).reshape(shape)
        return ((data.astype(np.float32) - zp) * scale).astype(np.float32)

    def filter_operand(self, k: int, x_type: OperandType, channel_dim: int, shape=None) -> int:
        """The weights of a convolution / FC (``shape``: reshaped) in the type NNAPI wants with an
        input of type ``x_type``."""
        t = self.t(k)
        data = self.value_of(k, "the filter")
        shape = tuple(shape or data.shape)
        data = data.reshape(shape)
        key = ("filter", k, shape, x_type.type)
        if x_type.type == T.TENSOR_FLOAT32:
            if t.type_name == "FLOAT32":
                return self.const(OperandType(T.TENSOR_FLOAT32, shape), data, key=key)
            if t.type_name in ("INT8", "INT4", "UINT8", "FLOAT16"):
                if t.type_name != "FLOAT16" and ("hybrid", k) not in self.const_cache:
                    self.const_cache[("hybrid", k)] = 0
                    self.note(f"hybrid weights (tensor {k}, {t.type_name}) dequantized to float32 "
                              "(NNAPI has no hybrid operation)")
                return self.const(OperandType(T.TENSOR_FLOAT32, shape), self.dequantized(t).reshape(shape), key=key)
        elif x_type.type in QUANT8 and t.type_name in ("INT8", "INT4", "UINT8"):
            # INT4 weights (unpacked to int8 values on read) are int8 weights that use 16 levels.
            if t.per_channel:
                if t.type_name == "UINT8" or np.any(t.zero_point != 0):
                    self.fail(f"per-channel filter tensor {k} must be INT8 or INT4 with zero points 0")
                if t.quantized_dimension != channel_dim:
                    self.fail(f"filter tensor {k} is quantized along dimension {t.quantized_dimension}; "
                              f"NNAPI needs {channel_dim}")
                cq = (tuple(float(s) for s in t.scale), channel_dim)
                return self.const(OperandType(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, shape), data.astype(np.int8),
                                  channel_quant=cq, key=key)
            scale, zp = self.quant(t)
            if x_type.type == T.TENSOR_QUANT8_ASYMM_SIGNED and t.type_name == "UINT8":
                data, zp = (data.astype(np.int16) - 128).astype(np.int8), zp - 128
            elif x_type.type == T.TENSOR_QUANT8_ASYMM and t.type_name in ("INT8", "INT4"):
                data, zp = (data.astype(np.int16) + 128).astype(np.uint8), zp + 128
            return self.const(OperandType(x_type.type, shape, scale, zp), data, key=key)
        self.fail(f"filter tensor {k} of type {t.type_name} with input type {x_type.type.name} is not supported")

    def bias_operand(self, k: int, x_type: OperandType, w_idx: int, n: int) -> int:
        w_type = self.type_of(w_idx)
        if x_type.type == T.TENSOR_FLOAT32:
            if k < 0:
                return self.const(OperandType(T.TENSOR_FLOAT32, (n,)), np.zeros(n, np.float32), key=("zeros", n))
            t = self.t(k)
            data = self.value_of(k, "the bias")
            if t.type_name != "FLOAT32":
                self.fail(f"bias tensor {k} of type {t.type_name} with float input is not supported")
            return self.const(OperandType(T.TENSOR_FLOAT32, (n,)), data.reshape(n), key=("tensor", k))
        # NNAPI: bias scale = input scale * filter scale, 0 (ignored) with a per-channel filter.
        per_channel = w_type.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL
        scale = 0.0 if per_channel else float(np.float32(x_type.scale) * np.float32(w_type.scale))
        if k < 0:
            data = np.zeros(n, np.int32)
        else:
            t = self.t(k)
            data = self.value_of(k, "the bias")
            if t.type_name != "INT32":
                self.fail(f"bias tensor {k} of type {t.type_name} with quantized input is not supported "
                          "(NNAPI needs INT32)")
            if t.scale is not None:
                want = (np.float64(x_type.scale) * np.asarray(self.m._operands[w_idx].channel_quant.scales)
                        if per_channel else np.array([scale]))
                if np.max(np.abs(t.scale.astype(np.float64) - want) / want) > 1e-5:
                    self.note(f"bias tensor {k} scale differs from input scale * filter scale; "
                              "NNAPI uses the latter (as TFLite's kernels do)")
        return self.const(OperandType(T.TENSOR_INT32, (n,), scale), data.astype(np.int32).reshape(n),
                          key=("bias", k, scale))

    def conv(self, op: TfOperator, depthwise: bool) -> None:
        ins = op.inputs
        if len(ins) < 2:
            self.fail(f"takes at least 2 inputs, got {len(ins)}")
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wshape = self.value_of(w, "the filter").shape
        if len(xt.dimensions) != 4 or len(wshape) != 4:
            self.fail(f"input {list(xt.dimensions)} and filter {list(wshape)} must be 4-D")
        padding = self.opt("padding")
        sw, sh = self.opt("strideW"), self.opt("strideH")
        if depthwise:
            fuse = self.fuse()
            dw, dh = self.opt("dilationWFactor", 1), self.opt("dilationHFactor", 1)
            c_out = wshape[3]
            if wshape[0] != 1 or c_out % xt.dimensions[3]:
                self.fail(f"filter {list(wshape)} does not fit input {list(xt.dimensions)}")
            mult = c_out // xt.dimensions[3]   # the depth_multiplier option is unreliable in old files
        else:
            fuse = self.fuse()
            dw, dh = self.opt("dilationWFactor", 1), self.opt("dilationHFactor", 1)
            c_out = wshape[0]
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        n, h, wd, _ = xt.dimensions
        kh, kw = wshape[1], wshape[2]
        expect = (n, conv_out_size(padding, h, sh, dh, kh), conv_out_size(padding, wd, sw, dw, kw), c_out)
        out_k = op.outputs[0]
        if tuple(self.t(out_k).shape) != expect:
            self.fail(f"output shape {list(self.t(out_k).shape)} differs from {list(expect)} computed with "
                      f"{'SAME' if padding == 0 else 'VALID'} padding")
        wi = self.filter_operand(w, xt, 3 if depthwise else 0)
        bi = self.bias_operand(b, xt, wi, c_out)
        args = [xi, wi, bi, self.i32(PADDING[padding]), self.i32(sw), self.i32(sh)]
        if depthwise:
            args.append(self.i32(mult))
        args.append(self.i32(fuse))
        if dw != 1 or dh != 1:
            args += [self.boolean(False), self.i32(dw), self.i32(dh)]
        self.emit(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, args, [self.define(out_k)])

    def op_CONV_2D(self, op):
        self.conv(op, depthwise=False)

    def op_DEPTHWISE_CONV_2D(self, op):
        self.conv(op, depthwise=True)

    def reshape_to(self, src: int, shape, dst: int) -> None:
        self.emit(Op.RESHAPE, [src, self.i32_tensor(list(shape))], [dst])

    def op_FULLY_CONNECTED(self, op):
        ins = op.inputs
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
        fuse = self.fuse()
        if self.opt("weightsFormat") != 0:
            self.fail("weights_format other than DEFAULT (shuffled weights) is not supported")
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wt = self.t(w)
        wshape = self.value_of(w, "the weights").shape
        if len(wshape) != 2:
            self.fail(f"weights must be 2-D, got {list(wshape)}")
        units, n_in = wshape
        total = int(np.prod(xt.dimensions))
        if total % n_in:
            self.fail(f"input {list(xt.dimensions)} is not a whole number of rows of {n_in}")
        batch = total // n_in
        out_k = op.outputs[0]
        out_shape = tuple(self.t(out_k).shape)
        if int(np.prod(out_shape)) != batch * units:
            self.fail(f"output shape {list(out_shape)} does not hold {batch} x {units} values")
        ot = self.out_type(out_k)
        if xt.type in QUANT8 and wt.per_channel:
            # NNAPI's FULLY_CONNECTED has no per-channel filter: RESHAPE -> 1x1 CONV_2D -> RESHAPE.
            self.note("per-channel FULLY_CONNECTED lowered to RESHAPE -> 1x1 CONV_2D -> RESHAPE")
            x4 = self.temp(xt, (batch, 1, 1, n_in))
            self.reshape_to(xi, (batch, 1, 1, n_in), x4)
            wi = self.filter_operand(w, xt, 0, (units, 1, 1, n_in))
            bi = self.bias_operand(b, xt, wi, units)
            y4 = self.temp(ot, (batch, 1, 1, units))
            self.emit(Op.CONV_2D, [x4, wi, bi, self.i32(2), self.i32(1), self.i32(1), self.i32(fuse)], [y4])
            self.reshape_to(y4, out_shape, self.define(out_k))
            return
        if len(xt.dimensions) < 2:
            x2 = self.temp(xt, (batch, n_in))
            self.reshape_to(xi, (batch, n_in), x2)
            xi = x2
        wi = self.filter_operand(w, xt, 0)
        bi = self.bias_operand(b, xt, wi, units)
        if out_shape == (batch, units):
            self.emit(Op.FULLY_CONNECTED, [xi, wi, bi, self.i32(fuse)], [self.define(out_k)])
        else:   # keep_num_dims: NNAPI's output is 2-D
            y2 = self.temp(ot, (batch, units))
            self.emit(Op.FULLY_CONNECTED, [xi, wi, bi, self.i32(fuse)], [y2])
            self.reshape_to(y2, out_shape, self.define(out_k))

    def binary(self, op, code: Op):
        a, b = op.inputs[:2]
        self.emit(code, [self.tensor(a), self.tensor(b), self.i32(self.fuse())], [self.define(op.outputs[0])])

    def pool(self, op, code: Op):
        padding = self.opt("padding")
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        sw, sh, fw, fh = (self.opt(s) for s in ("strideW", "strideH", "filterWidth", "filterHeight"))
        xi = self.tensor(op.inputs[0])
        n, h, w, c = self.type_of(xi).dimensions
        expect = (n, conv_out_size(padding, h, sh, 1, fh), conv_out_size(padding, w, sw, 1, fw), c)
        if tuple(self.t(op.outputs[0]).shape) != expect:
            self.fail(f"output shape {list(self.t(op.outputs[0]).shape)} differs from {list(expect)}")
        args = [xi, self.i32(PADDING[padding]), self.i32(sw), self.i32(sh), self.i32(fw), self.i32(fh),
                self.i32(self.fuse())]
        self.emit(code, args, [self.define(op.outputs[0])])

    def op_AVERAGE_POOL_2D(self, op):
        self.pool(op, Op.AVERAGE_POOL_2D)

    def op_MAX_POOL_2D(self, op):
        self.pool(op, Op.MAX_POOL_2D)

    def requantize(self, src: int, out_k: int) -> None:
        """src (quantized) -> TFLite tensor out_k of another quantization, through float32:
        DEQUANTIZE -> QUANTIZE (NNAPI has no quantized-to-quantized QUANTIZE)."""
        f = self.temp(OperandType(T.TENSOR_FLOAT32), self.type_of(src).dimensions)
        self.emit(Op.DEQUANTIZE, [src], [f])
        self.emit(Op.QUANTIZE, [f], [self.define(out_k)])

    def op_MEAN(self, op):
        x, axes_k = op.inputs[:2]
        xi = self.tensor(x)
        xt = self.type_of(xi)
        rank = len(xt.dimensions)
        axes = sorted({int(a) % rank for a in np.asarray(self.value_of(axes_k, "the axes")).reshape(-1)})
        keep = bool(self.opt(0, "?", False))
        out_k = op.outputs[0]
        ot = self.out_type(out_k)
        args = [xi, self.i32_tensor(axes), self.i32(int(keep))]
        requantized = xt.type in QUANT8 and (np.float32(ot.scale) != np.float32(xt.scale)
                                             or ot.zero_point != xt.zero_point)
        if requantized and self.convention == "nnapi":
            # NNAPI's MEAN keeps the input's quantization (and truncates its division), and
            # TFLite's NNAPI delegate refuses such a MEAN (TFLite's own kernel runs it): in
            # float32 the mean is rounded once, to the output's quantization. Under the "tflite"
            # convention the MEAN keeps TFLite's output quantization, which only the reference
            # driver's TFLite convention accepts (it computes TFLite's integer mean).
            self.note(f"MEAN output quantization ({ot.scale:.7g}, {ot.zero_point}) differs from the input's "
                      f"({xt.scale:.7g}, {xt.zero_point}): DEQUANTIZE -> MEAN (float32) -> QUANTIZE")
            f_in = self.temp(OperandType(T.TENSOR_FLOAT32), xt.dimensions)
            f_out = self.temp(OperandType(T.TENSOR_FLOAT32), ot.dimensions)
            self.emit(Op.DEQUANTIZE, [xi], [f_in])
            self.emit(Op.MEAN, [f_in] + args[1:], [f_out])
            self.emit(Op.QUANTIZE, [f_out], [self.define(out_k)])
        else:
            self.emit(Op.MEAN, args, [self.define(out_k)])

    def op_RESHAPE(self, op):
        self.reshape_to(self.tensor(op.inputs[0]), self.t(op.outputs[0]).shape, self.define(op.outputs[0]))

    def op_SQUEEZE(self, op):
        xi = self.tensor(op.inputs[0])
        shape = self.type_of(xi).dimensions
        dims = _ints(self.opt("squeezeDims", None))
        axes = sorted({d % len(shape) for d in dims}) if dims else [i for i, s in enumerate(shape) if s == 1]
        if any(shape[a] != 1 for a in axes):
            self.fail(f"squeezes dimensions {axes} of {list(shape)} that are not 1")
        self.emit(Op.SQUEEZE, [xi, self.i32_tensor(axes)], [self.define(op.outputs[0])])

    def op_SOFTMAX(self, op):
        xi = self.tensor(op.inputs[0])
        beta = self.opt("beta", 0.0)
        args = [xi, self.f32(beta)]
        if len(self.type_of(xi).dimensions) not in (2, 4):
            args.append(self.i32(-1))
        self.emit(Op.SOFTMAX, args, [self.define(op.outputs[0])])

    def op_PAD(self, op):
        pads = np.asarray(self.value_of(op.inputs[1], "the paddings"))
        self.emit(Op.PAD, [self.tensor(op.inputs[0]), self.i32_tensor(pads)], [self.define(op.outputs[0])])

    def op_PADV2(self, op):
        pads = np.asarray(self.value_of(op.inputs[1], "the paddings"))
        xi = self.tensor(op.inputs[0])
        value = np.asarray(self.value_of(op.inputs[2], "the pad value")).reshape(-1)[0]
        pad = self.f32(value) if self.type_of(xi).type == T.TENSOR_FLOAT32 else self.i32(int(value))
        self.emit(Op.PAD_V2, [xi, self.i32_tensor(pads), pad], [self.define(op.outputs[0])])

    def op_QUANTIZE(self, op):
        xi = self.tensor(op.inputs[0])
        if self.type_of(xi).type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
            self.emit(Op.QUANTIZE, [xi], [self.define(op.outputs[0])])
            return
        xt, ot = self.type_of(xi), self.out_type(op.outputs[0])
        exact = np.float32(xt.scale) == np.float32(ot.scale)
        self.note(f"quantized QUANTIZE ({xt.type.name} -> {ot.type.name}) as DEQUANTIZE -> QUANTIZE"
                  + (" (exact: equal scales)" if exact else " (rounds through float32)"))
        self.requantize(xi, op.outputs[0])

    def op_DEQUANTIZE(self, op):
        x = op.inputs[0]
        if x not in self.operand_of and self.t(x).data is not None:   # constant (e.g. float16 weights): fold
            self.fold(op.outputs[0], self.dequantized(self.t(x)))
            return
        xi = self.tensor(x)
        # NNAPI's DEQUANTIZE takes quantized input only; float16 -> float32 is a CAST.
        code = Op.CAST if self.type_of(xi).type == T.TENSOR_FLOAT16 else Op.DEQUANTIZE
        self.emit(code, [xi], [self.define(op.outputs[0])])

    def op_CONCATENATION(self, op):
        ins = [self.tensor(k) for k in op.inputs]
        rank = len(self.t(op.outputs[0]).shape)
        axis = self.opt("axis") % rank
        out = self.activation_after(self.fuse(), op.outputs[0], self.out_type(op.outputs[0]))
        self.emit(Op.CONCATENATION, ins + [self.i32(axis)], [out])

    def op_TRANSPOSE(self, op):
        perm = np.asarray(self.value_of(op.inputs[1], "the permutation"))
        self.emit(Op.TRANSPOSE, [self.tensor(op.inputs[0]), self.i32_tensor(perm)], [self.define(op.outputs[0])])

    # -- helpers of the operators below ----------------------------------------------------------

    def const_ints(self, k: int, what: str) -> list[int]:
        """A constant integer input tensor as a list (int64 constants must fit in int32)."""
        values = [int(v) for v in np.asarray(self.value_of(k, what)).reshape(-1)]
        if any(not -2 ** 31 <= v < 2 ** 31 for v in values):
            self.fail(f"{what} {values} do not fit in int32")
        return values

    def const_int(self, k: int, what: str) -> int:
        values = self.const_ints(k, what)
        if len(values) != 1:
            self.fail(f"{what} must hold one value, got {values}")
        return values[0]

    def int_operand(self, k: int) -> int:
        """An integer tensor input: a TENSOR_INT32 constant (int64 constants converted), or the
        operand computed for it."""
        if k not in self.operand_of and k >= 0 and self.t(k).data is not None:
            return self.i32_tensor(self.const_ints(k, f"tensor {k}"))
        return self.tensor(k)

    def same_shape(self, a: int, b: int, what: str) -> None:
        sa, sb = self.type_of(a).dimensions, self.type_of(b).dimensions
        if tuple(sa) != tuple(sb):
            self.fail(f"{what}: shapes {list(sa)} and {list(sb)} differ (NNAPI does not broadcast them)")

    def plain(self, op, code: Op):
        """A TFLite operator that is NNAPI operation ``code`` of the same inputs, no options. (NNAPI's
        CAST ignores quantization, a QUANT8 tensor is its raw values, as TFLite's does.)"""
        ins = [self.tensor(k) for k in op.inputs]
        xt, out_k = self.type_of(ins[0]), op.outputs[0]
        ot = self.out_type(out_k)
        if code in (Op.RELU, Op.RELU1, Op.RELU6) and xt.type in QUANT8 and (np.float32(ot.scale), ot.zero_point) != (
                np.float32(xt.scale), xt.zero_point):
            # NNAPI's RELUs keep the input's quantization; TFLite's may rescale: RELU, then requantize.
            tmp = self.temp(xt, xt.dimensions)
            self.emit(code, ins, [tmp])
            self.requantize(tmp, out_k)
            return
        self.emit(code, ins, [self.define(k) for k in op.outputs])

    def reduce(self, op, code: Op):
        """SUM, REDUCE_PROD/MAX/MIN/ANY: NNAPI's REDUCE_* take the axes and a BOOL keep_dims."""
        xi = self.tensor(op.inputs[0])
        if not self.t(op.outputs[0]).shape:
            self.fail("reduces to a scalar, which NNAPI cannot output")
        axes = self.const_ints(op.inputs[1], "the axes")
        self.emit(code, [xi, self.i32_tensor(axes), self.boolean(bool(self.opt("keepDims", False)))],
                  [self.define(op.outputs[0])])

    # -- activations and elementwise operators -----------------------------------------------------

    def op_ELU(self, op):
        self.emit(Op.ELU, [self.tensor(op.inputs[0]), self.f32(1.0)], [self.define(op.outputs[0])])

    def op_LEAKY_RELU(self, op):
        """NNAPI has no LEAKY_RELU: PRELU with a one-element alpha (as TFLite's NNAPI delegate maps
        it); a quantized alpha is exact: scale |alpha|, value 1 (zero point 0) or 0 (zero point 1)."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        alpha = float(np.float32(self.opt("alpha", 0.0)))
        if xt.type in QUANT8:
            if alpha == 0:
                self.fail("alpha 0 cannot be a quantized PRELU alpha (scale 0)")
            q, zp = (1, 0) if alpha > 0 else (0, 1)
            dtype = np.uint8 if xt.type == T.TENSOR_QUANT8_ASYMM else np.int8
            ai = self.const(OperandType(xt.type, (1,), abs(alpha), zp), np.array([q], dtype))
        else:
            ai = self.const(OperandType(xt.type, (1,)), np.array([alpha], DTYPES[xt.type]))
        self.emit(Op.PRELU, [xi, ai], [self.define(op.outputs[0])])

    def op_SQUARED_DIFFERENCE(self, op):
        xi, yi = self.tensor(op.inputs[0]), self.tensor(op.inputs[1])
        ot = self.out_type(op.outputs[0])
        if ot.type != T.TENSOR_FLOAT32:
            self.fail(f"{ot.type.name} output: only float32 is lowered (SUB -> MUL)")
        d = self.temp(ot, ot.dimensions)
        self.emit(Op.SUB, [xi, yi, self.i32(0)], [d])
        self.emit(Op.MUL, [d, d, self.i32(0)], [self.define(op.outputs[0])])

    def op_GELU(self, op):
        """GELU with approximate=true, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as MULs, ADDs and a
        TANH in float32; the exact form needs erf, which NNAPI lacks."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            self.fail(f"{xt.type.name} input: only float32 is lowered")
        if not self.opt("approximate", False):
            self.fail("approximate=false (erf-based GELU): NNAPI has no erf")
        zero = self.i32(0)

        def emit(code, ins):
            out = self.temp(xt, xt.dimensions)
            self.emit(code, ins, [out])
            return out

        def scalar(v):
            return self.const(OperandType(T.TENSOR_FLOAT32, (1,)), np.array([v], np.float32), key=("gelu", v))

        cube = emit(Op.MUL, [emit(Op.MUL, [xi, xi, zero]), xi, zero])
        inner = emit(Op.ADD, [xi, emit(Op.MUL, [cube, scalar(0.044715), zero]), zero])
        t = emit(Op.TANH, [emit(Op.MUL, [inner, scalar(float(np.sqrt(2 / np.pi))), zero])])
        half = emit(Op.MUL, [xi, scalar(0.5), zero])
        self.emit(Op.MUL, [half, emit(Op.ADD, [t, scalar(1.0), zero]), zero], [self.define(op.outputs[0])])

    def op_SQUARE(self, op):
        xi = self.tensor(op.inputs[0])
        if self.type_of(xi).type != T.TENSOR_FLOAT32:
            self.fail(f"{self.type_of(xi).type.name} input: only float32 is lowered (MUL)")
        self.emit(Op.MUL, [xi, xi, self.i32(0)], [self.define(op.outputs[0])])

    def op_ADD_N(self, op):
        """A chain of ADDs (exact in float32 up to the summation order, which TFLite's kernel shares)."""
        ins = [self.tensor(k) for k in op.inputs]
        ot = self.out_type(op.outputs[0])
        if ot.type != T.TENSOR_FLOAT32:
            self.fail(f"{ot.type.name} output: only float32 is lowered (a chain of ADDs)")
        acc = ins[0]
        for k, x in enumerate(ins[1:], 2):
            out = self.define(op.outputs[0]) if k == len(ins) else self.temp(ot, ot.dimensions)
            self.emit(Op.ADD, [acc, x, self.i32(0)], [out])
            acc = out

    def op_CEIL(self, op):
        """NNAPI has no CEIL: ceil(x) = -floor(-x), exact in float."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            self.fail(f"{xt.type.name} input: only float32 is lowered (NEG -> FLOOR -> NEG)")
        neg, floor = self.temp(xt, xt.dimensions), self.temp(xt, xt.dimensions)
        self.emit(Op.NEG, [xi], [neg])
        self.emit(Op.FLOOR, [neg], [floor])
        self.emit(Op.NEG, [floor], [self.define(op.outputs[0])])

    def op_REVERSE_V2(self, op):
        axes = self.const_ints(op.inputs[1], "the axes")
        if len(axes) != 1:
            self.fail(f"reverses {len(axes)} axes; NNAPI's REVERSE takes one")
        self.emit(Op.REVERSE, [self.tensor(op.inputs[0]), self.i32_tensor(axes)], [self.define(op.outputs[0])])

    def op_ZEROS_LIKE(self, op):
        self.fold(op.outputs[0], np.zeros(self.type_of(self.tensor(op.inputs[0])).dimensions))

    def broadcast(self, xi: int, target, out: int | None = None) -> int:
        """Operand ``xi`` broadcast to shape ``target``: RESHAPE to the target's rank (leading
        ones), then TILE; exact for every type (booleans, which TILE does not take: LOGICAL_OR
        with false). Written to ``out`` when given."""
        xt = self.type_of(xi)
        target = tuple(target)
        shape = (1,) * (len(target) - len(xt.dimensions)) + tuple(xt.dimensions)
        if len(shape) != len(target) or any(s not in (1, t) for s, t in zip(shape, target)):
            self.fail(f"shape {list(xt.dimensions)} does not broadcast to {list(target)}")
        if shape == target and out is None:
            return xi
        if xt.type == T.TENSOR_BOOL8:
            out = self.temp(xt, target) if out is None else out
            false = self.const(OperandType(T.TENSOR_BOOL8, target), np.zeros(target, np.bool_))
            self.emit(Op.LOGICAL_OR, [xi, false], [out])
            return out
        if shape != tuple(xt.dimensions):
            reshaped = self.temp(xt, shape)
            self.reshape_to(xi, shape, reshaped)
            xi = reshaped
        out = self.temp(xt, target) if out is None else out
        self.emit(Op.TILE, [xi, self.i32_tensor([t // s for s, t in zip(shape, target)])], [out])
        return out

    def op_BROADCAST_TO(self, op):
        target = self.const_ints(op.inputs[1], "the shape")
        self.broadcast(self.tensor(op.inputs[0]), target, self.define(op.outputs[0]))

    def op_LOG_SOFTMAX(self, op):
        self.emit(Op.LOG_SOFTMAX, [self.tensor(op.inputs[0]), self.f32(1.0), self.i32(-1)],
                  [self.define(op.outputs[0])])

    def op_L2_POOL_2D(self, op):
        self.pool(op, Op.L2_POOL_2D)

    def op_L2_NORMALIZATION(self, op):
        if self.fuse() != 0:
            self.fail("a fused activation is not supported (TFLite's NNAPI delegate refuses it too)")
        self.emit(Op.L2_NORMALIZATION, [self.tensor(op.inputs[0])], [self.define(op.outputs[0])])

    def op_LOCAL_RESPONSE_NORMALIZATION(self, op):
        args = [self.tensor(op.inputs[0]), self.i32(self.opt("radius")), self.f32(self.opt("bias", 0.0)),
                self.f32(self.opt("alpha", 0.0)), self.f32(self.opt("beta", 0.0))]
        self.emit(Op.LOCAL_RESPONSE_NORMALIZATION, args, [self.define(op.outputs[0])])

    def op_SELECT(self, op):
        cond, a, b = (self.tensor(k) for k in op.inputs[:3])
        self.same_shape(cond, a, "condition and values")
        self.same_shape(a, b, "the two value tensors")
        self.emit(Op.SELECT, [cond, a, b], [self.define(op.outputs[0])])

    def op_SELECT_V2(self, op):
        """SELECT_V2 broadcasts its three inputs; NNAPI's SELECT does not: each is broadcast to
        the output's shape first (RESHAPE, TILE)."""
        shape = list(self.t(op.outputs[0]).shape)
        ins = [self.broadcast(self.tensor(k), shape) for k in op.inputs[:3]]
        self.emit(Op.SELECT, ins, [self.define(op.outputs[0])])

    # -- shapes, slicing, layout ---------------------------------------------------------------

    def op_MIRROR_PAD(self, op):
        pads = self.const_ints(op.inputs[1], "the paddings")
        mode = self.opt("mode")   # TFLite MirrorPadMode and NNAPI's mode: REFLECT 0, SYMMETRIC 1
        self.emit(Op.MIRROR_PAD, [self.tensor(op.inputs[0]), self.i32_tensor(np.reshape(pads, (-1, 2))),
                                  self.i32(mode)], [self.define(op.outputs[0])])

    def op_SPLIT(self, op):
        axis = self.const_int(op.inputs[0], "the axis")
        xi = self.tensor(op.inputs[1])
        self.emit(Op.SPLIT, [xi, self.i32(axis), self.i32(len(op.outputs))], [self.define(k) for k in op.outputs])

    def op_SPLIT_V(self, op):
        """NNAPI's SPLIT makes equal parts: one SLICE per output, its size from the output's shape."""
        xi = self.tensor(op.inputs[0])
        shape = self.type_of(xi).dimensions
        axis = self.const_int(op.inputs[2], "the axis") % len(shape)
        begin = 0
        for k in op.outputs:
            size = self.t(k).shape[axis]
            starts = [begin if d == axis else 0 for d in range(len(shape))]
            sizes = [size if d == axis else -1 for d in range(len(shape))]
            self.emit(Op.SLICE, [xi, self.i32_tensor(starts), self.i32_tensor(sizes)], [self.define(k)])
            begin += size
        if begin != shape[axis]:
            self.fail(f"outputs hold {begin} of the {shape[axis]} elements along axis {axis}")

    def op_STRIDED_SLICE(self, op):
        for name in ("ellipsisMask", "newAxisMask"):
            if self.opt(name, 0):
                self.fail(f"{name} {self.opt(name, 0)} is not supported by NNAPI's STRIDED_SLICE")
        if self.opt("offset", False):
            self.fail("offset=true (begin/end relative to begin) is not supported by NNAPI's STRIDED_SLICE")
        xi = self.tensor(op.inputs[0])
        masks = [self.opt(name, 0) for name in ("beginMask", "endMask", "shrinkAxisMask")]
        args = [xi] + [self.int_operand(k) for k in op.inputs[1:4]]
        if masks[2]:
            # TFLite takes element begin[i] of a shrunk axis whatever end[i] and the masks say; NNAPI
            # needs the slice [begin, begin + 1) spelled out.
            shape = self.type_of(xi).dimensions
            begin = self.const_ints(op.inputs[1], "begin (with shrink_axis_mask)")
            end = self.const_ints(op.inputs[2], "end (with shrink_axis_mask)")
            for i in range(len(begin)):
                if masks[2] >> i & 1:
                    begin[i] %= shape[i]
                    end[i] = begin[i] + 1
                    masks[0] &= ~(1 << i)
                    masks[1] &= ~(1 << i)
            args[1:3] = [self.i32_tensor(begin), self.i32_tensor(end)]
        args += [self.i32(m) for m in masks]
        self.emit(Op.STRIDED_SLICE, args, [self.define(op.outputs[0])])

    def op_SLICE(self, op):
        args = [self.tensor(op.inputs[0])] + [self.int_operand(k) for k in op.inputs[1:3]]
        self.emit(Op.SLICE, args, [self.define(op.outputs[0])])

    def op_EXPAND_DIMS(self, op):
        axis = self.const_int(op.inputs[1], "the axis")
        self.emit(Op.EXPAND_DIMS, [self.tensor(op.inputs[0]), self.i32(axis)], [self.define(op.outputs[0])])

    def op_GATHER(self, op):
        if self.opt("batchDims", 0):
            self.fail(f"batch_dims {self.opt('batchDims', 0)} is not supported by NNAPI's GATHER")
        xi = self.tensor(op.inputs[0])
        axis = self.opt("axis", 0) % len(self.type_of(xi).dimensions)
        self.emit(Op.GATHER, [xi, self.i32(axis), self.int_operand(op.inputs[1])], [self.define(op.outputs[0])])

    def arg(self, op, code: Op):
        if self.t(op.outputs[0]).type_name != "INT32":
            self.fail(f"output type {self.t(op.outputs[0]).type_name}: NNAPI's {code.name} outputs INT32 only")
        axis = self.const_int(op.inputs[1], "the axis")
        self.emit(code, [self.tensor(op.inputs[0]), self.i32(axis)], [self.define(op.outputs[0])])

    def op_ARG_MAX(self, op):
        self.arg(op, Op.ARGMAX)

    def op_ARG_MIN(self, op):
        self.arg(op, Op.ARGMIN)

    def op_DEPTH_TO_SPACE(self, op):
        self.emit(Op.DEPTH_TO_SPACE, [self.tensor(op.inputs[0]), self.i32(self.opt("blockSize"))],
                  [self.define(op.outputs[0])])

    def op_SPACE_TO_DEPTH(self, op):
        self.emit(Op.SPACE_TO_DEPTH, [self.tensor(op.inputs[0]), self.i32(self.opt("blockSize"))],
                  [self.define(op.outputs[0])])

    def op_BATCH_TO_SPACE_ND(self, op):
        crops = self.const_ints(op.inputs[2], "the crops")
        if any(crops):
            self.fail(f"crops {crops}: NNAPI's BATCH_TO_SPACE_ND does not crop (TFLite's NNAPI delegate "
                      "refuses non-zero crops too)")
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the block shape"))]
        self.emit(Op.BATCH_TO_SPACE_ND, args, [self.define(op.outputs[0])])

    def op_SPACE_TO_BATCH_ND(self, op):
        pads = np.reshape(self.const_ints(op.inputs[2], "the paddings"), (-1, 2))
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the block shape")),
                self.i32_tensor(pads)]
        self.emit(Op.SPACE_TO_BATCH_ND, args, [self.define(op.outputs[0])])

    def op_TILE(self, op):
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the multiples"))]
        self.emit(Op.TILE, args, [self.define(op.outputs[0])])

    def op_PACK(self, op):
        axis = self.opt("axis", 0)
        self.emit(Op.PACK, [self.i32(axis)] + [self.tensor(k) for k in op.inputs], [self.define(op.outputs[0])])

    def op_UNPACK(self, op):
        """NNAPI has no UNPACK: SPLIT along the axis, then a RESHAPE of each part that drops it."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        axis = self.opt("axis", 0) % len(xt.dimensions)
        part = tuple(1 if d == axis else s for d, s in enumerate(xt.dimensions))
        parts = [self.temp(xt, part) for _ in op.outputs]
        self.emit(Op.SPLIT, [xi, self.i32(axis), self.i32(len(op.outputs))], parts)
        for p, k in zip(parts, op.outputs):
            self.reshape_to(p, self.t(k).shape, self.define(k))

    def op_TOPK_V2(self, op):
        k = self.const_int(op.inputs[1], "k")
        self.emit(Op.TOPK_V2, [self.tensor(op.inputs[0]), self.i32(k)], [self.define(j) for j in op.outputs])

    def resize(self, op, code: Op):
        h, w = self.const_ints(op.inputs[1], "the size")
        align, half = (self.boolean(bool(self.opt(name, False))) for name in ("alignCorners", "halfPixelCenters"))
        args = [self.tensor(op.inputs[0]), self.i32(w), self.i32(h), self.boolean(False), align, half]
        self.emit(code, args, [self.define(op.outputs[0])])

    def op_RESIZE_BILINEAR(self, op):
        self.resize(op, Op.RESIZE_BILINEAR)

    def op_RESIZE_NEAREST_NEIGHBOR(self, op):
        self.resize(op, Op.RESIZE_NEAREST_NEIGHBOR)

    def op_FILL(self, op):
        dims = self.const_ints(op.inputs[0], "the dimensions")
        value = np.asarray(self.value_of(op.inputs[1], "the value")).reshape(-1)[0]
        ot = self.out_type(op.outputs[0])
        scalar = {T.TENSOR_FLOAT32: self.f32, T.TENSOR_INT32: self.i32}.get(ot.type)
        if scalar is None:
            self.fail(f"{ot.type.name} output: NNAPI's FILL makes FLOAT32 or INT32 here")
        self.emit(Op.FILL, [self.i32_tensor(dims), scalar(value)], [self.define(op.outputs[0])])

    def fold(self, k: int, value) -> None:
        """Output tensor ``k`` is a constant known at import (static shapes): no operation."""
        t = self.t(k)
        t.data = np.asarray(value, NUMPY_TYPES.get(t.type_name, np.int32)).reshape(t.shape)
        self.folded.add(k)

    def op_SHAPE(self, op):
        self.fold(op.outputs[0], self.type_of(self.tensor(op.inputs[0])).dimensions)

    def op_RANK(self, op):
        self.fold(op.outputs[0], len(self.type_of(self.tensor(op.inputs[0])).dimensions))

    def op_DENSIFY(self, op):
        """TFLite stores sparse weights as a constant that DENSIFY expands; it was densified on read."""
        self.fold(op.outputs[0], self.value_of(op.inputs[0], "the sparse tensor"))

    def op_TRANSPOSE_CONV(self, op):
        out_shape, w, x = op.inputs[:3]
        b = op.inputs[3] if len(op.inputs) > 3 else -1
        xi = self.tensor(x)
        xt = self.type_of(xi)
        padding = self.opt("padding")
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        wi = self.filter_operand(w, xt, 0)
        c_out = self.type_of(wi).dimensions[0]
        bi = self.bias_operand(b, xt, wi, c_out)
        args = [xi, wi, bi, self.i32_tensor(self.const_ints(out_shape, "the output shape")), self.i32(PADDING[padding]),
                self.i32(self.opt("strideW")), self.i32(self.opt("strideH")), self.i32(self.fuse()),
                self.boolean(False)]
        self.emit(Op.TRANSPOSE_CONV_2D, args, [self.define(op.outputs[0])])

    def op_LSH_PROJECTION(self, op):
        """TFLite's SPARSE projection (1) is NNAPI's type 3 (its type 1 is the deprecated one that
        hashes differently), without weights, as TFLite's NNAPI delegate maps it; DENSE is 2 in both."""
        kind = self.opt("type")
        if kind not in (1, 2):
            self.fail(f"projection type {kind} is neither SPARSE (1) nor DENSE (2)")
        weight = op.inputs[2] if len(op.inputs) > 2 else -1
        if kind == 1 and weight >= 0:
            self.fail("a SPARSE projection with weights is not supported by NNAPI")
        args = [self.tensor(op.inputs[0]), self.tensor(op.inputs[1]),
                self.tensor(weight) if weight >= 0 else self.omitted(), self.i32(3 if kind == 1 else 2)]
        self.emit(Op.LSH_PROJECTION, args, [self.define(op.outputs[0])])

    def custom_transpose_conv_bias(self, op):
        """MediaPipe's Convolution2DTransposeBias (segmentation models): TRANSPOSE_CONV with a bias
        input, inputs (input, filter, bias), options a raw TfLiteTransposeConvParams (int32
        padding: 1 SAME, 2 VALID, NNAPI's codes too; stride width; stride height)."""
        if len(op.custom_options) < 12 or len(op.inputs) != 3:
            self.fail(f"expects 3 inputs and 12 bytes of options, got {len(op.inputs)} and {len(op.custom_options)}")
        padding, stride_w, stride_h = struct.unpack_from("<3i", op.custom_options)
        if padding not in (1, 2):
            self.fail(f"padding {padding} is neither SAME (1) nor VALID (2)")
        x, w, b = op.inputs
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wi = self.filter_operand(w, xt, 0)
        bi = self.bias_operand(b, xt, wi, self.type_of(wi).dimensions[0])
        args = [xi, wi, bi, self.i32_tensor(list(self.t(op.outputs[0]).shape)), self.i32(padding),
                self.i32(stride_w), self.i32(stride_h), self.i32(0), self.boolean(False)]
        self.emit(Op.TRANSPOSE_CONV_2D, args, [self.define(op.outputs[0])])

    def op_BATCH_MATMUL(self, op):
        a, b = self.tensor(op.inputs[0]), self.tensor(op.inputs[1])
        args = [a, b, self.boolean(bool(self.opt("adjX", False))), self.boolean(bool(self.opt("adjY", False)))]
        self.emit(Op.BATCH_MATMUL, args, [self.define(op.outputs[0])])

    def op_EMBEDDING_LOOKUP(self, op):
        self.emit(Op.EMBEDDING_LOOKUP, [self.int_operand(op.inputs[0]), self.tensor(op.inputs[1])],
                  [self.define(op.outputs[0])])

    # -- resource variables (streaming models) -------------------------------------------------
    # NNAPI models are stateless: as with the LSTM states, every inference starts from the
    # variables' initial values (those CALL_ONCE's subgraph assigns: a fresh TFLite interpreter's
    # first invocation), and the new values the model assigns are not kept.

    def op_CALL_ONCE(self, op):
        index = self.opt("initSubgraphIndex")
        subgraphs = self.g.subgraphs
        if not 0 < index < len(subgraphs):
            self.fail(f"initializes with subgraph {index} of {len(subgraphs)}")
        init = subgraphs[index]
        handles = {}
        for o in init.operators:
            if o.name == "VAR_HANDLE" and o.options is not None:
                handles[o.outputs[0]] = (_text(o.options.container), _text(o.options.sharedName))
            elif o.name == "ASSIGN_VARIABLE" and o.inputs[0] in handles and init.tensors[o.inputs[1]].data is not None:
                self.variables[handles[o.inputs[0]]] = ("const", init.tensors[o.inputs[1]].data)
            else:
                self.fail(f"subgraph {index} operator {o.index} ({o.name}): only constant variable assignments "
                          "are imported from an initialization subgraph")
        self.note(f"{len(self.variables)} resource variables start from subgraph {index}'s values at every "
                  "inference; their new values are not kept (NNAPI models are stateless)")

    def op_VAR_HANDLE(self, op):
        self.handles[op.outputs[0]] = (_text(self.opt("container", None)), _text(self.opt("sharedName", None)))
        self.folded.add(op.outputs[0])

    def variable(self, k: int) -> tuple[str, str]:
        if k not in self.handles:
            self.fail(f"tensor {k} is not a VAR_HANDLE output")
        return self.handles[k]

    def op_READ_VARIABLE(self, op):
        key = self.variable(op.inputs[0])
        if key not in self.variables:
            self.fail(f"reads variable {key[1]!r} before any value is assigned")
        kind, value = self.variables[key]
        if kind == "const":
            self.fold(op.outputs[0], value)
        else:
            self.emit(Op.RESHAPE, [value, self.i32_tensor(list(self.t(op.outputs[0]).shape))],
                      [self.define(op.outputs[0])])

    def op_ASSIGN_VARIABLE(self, op):
        key = self.variable(op.inputs[0])
        k = op.inputs[1]
        self.variables[key] = ("const", self.t(k).data) if k not in self.operand_of and self.t(k).data is not None \
            else ("operand", self.tensor(k))

    # -- recurrent operators ----------------------------------------------------------------------
    # TFLite's state inputs are variable tensors, zero after reset_all_variables(); NNAPI has none,
    # so each inference starts from zero states (constants). Weights of hybrid operators (int8,
    # float16) are dequantized: NNAPI has no hybrid recurrent operations.

    def float_weight(self, k: int, what: str = "weight") -> int:
        """Constant tensor ``k`` as a TENSOR_FLOAT32 operand (dequantized when int8/uint8/float16);
        an omitted one (-1) as NNAPI's omitted operand."""
        if k < 0:
            return self.omitted()
        t = self.t(k)
        data = self.value_of(k, f"{what} tensor {k}")
        if t.type_name == "FLOAT32":
            return self.const(OperandType(T.TENSOR_FLOAT32, data.shape), data, key=("tensor", k))
        if t.type_name in ("INT8", "INT4", "UINT8", "FLOAT16"):
            if t.type_name != "FLOAT16" and ("hybrid", self.op.index) not in self.const_cache:
                self.const_cache[("hybrid", self.op.index)] = 0
                self.note(f"hybrid weights ({t.type_name}) dequantized to float32 (NNAPI has no hybrid recurrent "
                          "operation; TFLite's hybrid kernels quantize the activations on the fly)")
            return self.const(OperandType(T.TENSOR_FLOAT32, data.shape), self.dequantized(t), key=("deq", k))
        self.fail(f"{what} tensor {k} has type {t.type_name}")

    def zero_state(self, k: int, shape) -> int:
        if k < 0 or not self.t(k).is_variable:
            self.fail(f"state input {k} is not a variable tensor")
        return self.const(OperandType(T.TENSOR_FLOAT32, shape), np.zeros(shape, np.float32),
                          key=("zeros",) + tuple(shape))

    def float_input(self, k: int, what: str) -> int:
        xi = self.tensor(k)
        if self.type_of(xi).type != T.TENSOR_FLOAT32:
            self.fail(f"{self.type_of(xi).type.name} input: only float32 {what}s are imported (NNAPI's is float)")
        return xi

    def op_RNN(self, op):
        x, w, r, b, h = op.inputs[:5]
        xi = self.float_input(x, "RNN")
        batch, units = self.type_of(xi).dimensions[0], self.value_of(w, "the weights").shape[0]
        args = [xi, self.float_weight(w), self.float_weight(r), self.float_weight(b),
                self.zero_state(h, (batch, units)),
                self.i32(self.fuse())]
        self.emit(Op.RNN, args, [self.temp(OperandType(T.TENSOR_FLOAT32), (batch, units)), self.define(op.outputs[0])])

    def op_UNIDIRECTIONAL_SEQUENCE_RNN(self, op):
        x, w, r, b, h = op.inputs[:5]
        xi = self.float_input(x, "RNN")
        time_major = bool(self.opt("timeMajor", False))
        batch, units = self.type_of(xi).dimensions[1 if time_major else 0], self.value_of(w, "the weights").shape[0]
        args = [xi, self.float_weight(w), self.float_weight(r), self.float_weight(b),
                self.zero_state(h, (batch, units)),
                self.i32(self.fuse()), self.i32(int(time_major))]
        self.emit(Op.UNIDIRECTIONAL_SEQUENCE_RNN, args, [self.define(op.outputs[0])])

    def op_BIDIRECTIONAL_SEQUENCE_RNN(self, op):
        """TFLite's inputs 0-11 are NNAPI's (input; forward and backward weights, recurrent
        weights, bias, state (zero); auxiliary input and weights); then activation, time_major,
        merge_outputs."""
        ins = list(op.inputs) + [-1] * (12 - len(op.inputs))
        xi = self.float_input(ins[0], "BIDIRECTIONAL_SEQUENCE_RNN")
        time_major = bool(self.opt("timeMajor", False))
        batch = self.type_of(xi).dimensions[1 if time_major else 0]
        args = [xi]
        for w, r, b, h in (ins[1:5], ins[5:9]):
            units = self.value_of(w, "the weights").shape[0]
            args += [self.float_weight(w), self.float_weight(r), self.float_weight(b),
                     self.zero_state(h, (batch, units))]
        aux = ins[9]
        if aux >= 0 and aux not in self.operand_of:
            self.fail("the auxiliary input must be computed, not a constant")
        args += [self.tensor(aux) if aux >= 0 else self.omitted()] + [self.float_weight(k) for k in ins[10:12]]
        merge = bool(self.opt("mergeOutputs", False))
        args += [self.i32(self.fuse()), self.boolean(time_major), self.boolean(merge)]
        if len(op.outputs) != (1 if merge else 2):
            self.fail(f"{len(op.outputs)} outputs with merge_outputs={merge}")
        self.emit(Op.BIDIRECTIONAL_SEQUENCE_RNN, args, [self.define(k) for k in op.outputs])

    def op_SVDF(self, op):
        x, wf, wt, b, state = (list(op.inputs) + [-1] * 5)[:5]
        xi = self.float_input(x, "SVDF")
        batch = self.type_of(xi).dimensions[0]
        filters, memory = self.value_of(wt, "the time weights").shape
        args = [xi, self.float_weight(wf), self.float_weight(wt), self.float_weight(b),
                self.zero_state(state, (batch, memory * filters)), self.i32(self.opt("rank")), self.i32(self.fuse())]
        self.emit(Op.SVDF, args, [self.temp(OperandType(T.TENSOR_FLOAT32), (batch, memory * filters)),
                                  self.define(op.outputs[0])])

    def lstm_operands(self, op, batch_dim: int) -> tuple[list[int], list[int], tuple[int, int, int]]:
        """NNAPI's (UNIDIRECTIONAL_SEQUENCE_)LSTM inputs 0-19 (input, weights, zero states) and its
        four layer-normalization weights, from TFLite's inputs 0-23; and (batch, cells, outputs)."""
        ins = list(op.inputs) + [-1] * (24 - len(op.inputs))
        xi = self.tensor(ins[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            layer_norm = any(k >= 0 for k in ins[20:24])
            self.fail(f"integer LSTM ({xt.type.name} input) cannot be mapped: NNAPI has no quantized sequence "
                      "LSTM, and its QUANTIZED_LSTM (one time step of the 8x8->16 integer LSTM) "
                      + ("would have to be unrolled over the time steps (not implemented)" if layer_norm else
                         "applies the gate biases only inside layer normalization (AOSP's QLSTM.cpp precomputes "
                         "the effective biases with bias=nullptr), while this LSTM has no layer normalization "
                         "and TFLite adds its gate biases to the gate accumulators: the biases would be lost")
                      + "; only float and hybrid (int8 weights, float activations) LSTMs are imported")
        n_cell = self.value_of(ins[1] if ins[1] >= 0 else ins[2], "the input-to-forget weights").shape[0]
        n_out = self.value_of(ins[16], "the projection weights").shape[0] if ins[16] >= 0 else n_cell
        batch = xt.dimensions[batch_dim]
        states = [self.zero_state(ins[18], (batch, n_out)), self.zero_state(ins[19], (batch, n_cell))]
        args = [xi] + [self.float_weight(k, "LSTM weight") for k in ins[1:18]] + states
        return args, [self.float_weight(k, "LSTM weight") for k in ins[20:24]], (batch, n_cell, n_out)

    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        if self.opt("diagonalRecurrentTensors", False):
            self.fail("diagonal_recurrent_tensors is not supported by NNAPI")
        time_major = bool(self.opt("timeMajor", False))
        args, layer_norm, _ = self.lstm_operands(op, 1 if time_major else 0)
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0)), self.boolean(time_major)]
        args += layer_norm   # TFLite inputs 20-23 -> NNAPI 24-27
        if len(op.outputs) != 1:
            self.fail(f"{len(op.outputs)} outputs; expected 1")
        self.emit(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, args, [self.define(op.outputs[0])])

    def op_BIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        """TFLite's inputs 0-47 are NNAPI's 0-47 (input; forward and backward weights; the four
        states, zero; the auxiliary input and weights); the options follow, then NNAPI's eight
        layer-normalization weights, omitted (TFLite's operator has none)."""
        ins = list(op.inputs) + [-1] * (48 - len(op.inputs))
        time_major = bool(self.opt("timeMajor", True))
        xi = self.float_input(ins[0], "BIDIRECTIONAL_SEQUENCE_LSTM")
        batch = self.type_of(xi).dimensions[1 if time_major else 0]
        states = []
        for weights, state in ((1, 35), (18, 37)):   # each direction's input-to-forget weights, output state
            n_cell = self.value_of(ins[weights + 1], "the input-to-forget weights").shape[0]
            proj = ins[weights + 15]
            n_out = self.value_of(proj, "the projection weights").shape[0] if proj >= 0 else n_cell
            states += [self.zero_state(ins[state], (batch, n_out)), self.zero_state(ins[state + 1], (batch, n_cell))]
        aux = ins[39]
        if aux >= 0 and aux not in self.operand_of:
            self.fail("the auxiliary input must be computed, not a constant")
        args = [xi] + [self.float_weight(k, "LSTM weight") for k in ins[1:35]] + states
        args += [self.tensor(aux) if aux >= 0 else self.omitted()]
        args += [self.float_weight(k, "LSTM weight") for k in ins[40:48]]
        merge = bool(self.opt("mergeOutputs", False))
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0)), self.boolean(merge), self.boolean(time_major)]
        args += [self.omitted() for _ in range(8)]
        if len(op.outputs) != (1 if merge else 2):
            self.fail(f"{len(op.outputs)} outputs with merge_outputs={merge}")
        self.emit(Op.BIDIRECTIONAL_SEQUENCE_LSTM, args, [self.define(k) for k in op.outputs])

    def op_LSTM(self, op):
        """One LSTM step: NNAPI's LSTM, whose scratch buffer and state outputs are not kept."""
        if self.opt("kernelType", 0) != 0:
            self.fail("the BASIC kernel (TFLite's 5-input quantized LSTM cell) is not supported")
        args, layer_norm, (batch, n_cell, n_out) = self.lstm_operands(op, 0)
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0))]
        args += layer_norm   # TFLite inputs 20-23 -> NNAPI 23-26
        if len(op.outputs) != 1:
            self.fail(f"{len(op.outputs)} outputs; expected 1")
        f32 = OperandType(T.TENSOR_FLOAT32)
        gates = 3 if op.inputs[1] < 0 else 4   # CIFG: no input gate
        scratch = [self.temp(f32, (batch, n_cell * gates)), self.temp(f32, (batch, n_out)),
                   self.temp(f32, (batch, n_cell))]
        self.emit(Op.LSTM, args, scratch + [self.define(op.outputs[0])])

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
    buf = Path(path).read_bytes()
    return convert(parse_tflite(buf), extra_outputs, convention)


def unmapped_operators(g: TfGraph) -> list[str]:
    """The operators of ``g`` that the importer has no mapping for (sorted, each once)."""
    converter = _Converter(g)
    return sorted({op.name for op in g.operators if converter.handler(op.name) is None})


MAX_IO_ELEMENTS = 1 << 28  # 1 GiB of float32: an input or output past it is refused, not allocated


def check_io(g: TfGraph) -> None:
    """A model whose inputs and outputs callers can allocate: at least one input, none past
    MAX_IO_ELEMENTS elements (a file can declare 1x100000x100000x3, and every caller would
    allocate it before anything else could refuse it)."""
    if not g.inputs:
        raise TFLiteImportError("unsupported .tflite: the model has no inputs")
    for role, indexes in (("input", g.inputs), ("output", g.outputs)):
        for k in indexes:
            shape = g.tensors[k].shape
            if math.prod(max(d, 1) for d in shape) > MAX_IO_ELEMENTS:
                raise TFLiteImportError(f"unsupported .tflite: {role} tensor {k} ({g.tensors[k].name!r}) of shape "
                                        f"{list(shape)} has more than {MAX_IO_ELEMENTS} elements")


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
