"""Reading a .tflite flatbuffer with TFLite's own schema (ai-edge-litert's flatc-generated module):
its subgraphs, tensors (sparse constants densified) and operators, and the TFLite enums the
converter maps (padding, output sizes). The conversion to NNAPI is :mod:`.tflite`."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import budget
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T


class TFLiteImportError(ValueError):
    """The file is not a well-formed .tflite model, or uses something the importer cannot map."""


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


def ints_of(v) -> list[int]:
    return [] if v is None else [int(x) for x in v]


def text_of(v) -> str:
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
        opcodes.append(f"CUSTOM({text_of(oc.customCode)})" if code == CUSTOM else builtin_name(code))
    graphs = [_subgraph(n, sg, opcodes, buffers, buf) for n, sg in enumerate(subgraphs)]
    main = graphs[0]
    main.description, main.subgraphs = text_of(model.description), graphs
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
        ins, outs = ints_of(o.inputs), ints_of(o.outputs)
        for t in ins + outs:
            if not -1 <= t < len(tensors):
                raise TFLiteImportError(f"malformed .tflite: {where}operator {k} ({name}) names tensor {t} of "
                                        f"{len(tensors)}")
        custom = bytes(np.asarray(o.customOptions, np.uint8)) if o.customOptions is not None else b""
        operators.append(TfOperator(k, name, ins, outs, o.builtinOptions, ints_of(o.intermediates), custom))
    ins, outs = ints_of(sg.inputs), ints_of(sg.outputs)
    for t in ins + outs:
        if not 0 <= t < len(tensors):
            raise TFLiteImportError(f"malformed .tflite: {where}input/output names tensor {t} of {len(tensors)}")
    return TfGraph(tensors, operators, ins, outs)


def _tensor(k: int, t, buffers, buf: bytes) -> TfTensor:
    shape = tuple(ints_of(t.shape))
    if any(d < 0 for d in shape):
        raise TFLiteImportError(f"malformed .tflite: tensor {k} has shape {list(shape)}")
    tensor = TfTensor(k, text_of(t.name), shape, int(t.type), None, is_variable=bool(t.isVariable))
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
    order = ints_of(sparsity.traversalOrder)
    block_map = ints_of(sparsity.blockMap)
    levels = sparsity.dimMetadata or []
    n, k = len(shape), len(block_map)
    dense_positions = math.prod(int(level.denseSize) for level in levels if level.format == schema.DimensionType.DENSE)
    try:  # the dense tensor, and the 8-byte index arrays of the dense levels' positions
        budget.check(max(math.prod(shape) * values.itemsize, dense_positions * 8 * (len(levels) + 1)),
                     f"{what}: the sparse tensor of shape {list(shape)} densified")
    except NnapiError as e:
        raise TFLiteImportError(f"unsupported .tflite: {e.message}") from None
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


PADDING = {0: 1, 1: 2}              # TFLite Padding SAME/VALID -> NNAPI PaddingCode SAME/VALID
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def conv_out_size(padding: int, in_size: int, stride: int, dilation: int, k: int) -> int:
    """TFLite's ComputeOutSize (padding 0 SAME, 1 VALID)."""
    effective = (k - 1) * dilation + 1
    return (in_size + stride - 1) // stride if padding == 0 else (in_size + stride - effective) // stride
