"""What the drivers backed by another inference runtime share (``onnxruntime``, ``tflite``).

Such a driver converts the part of an NNAPI model the runtime assigned to it into the runtime's
own format when the model is prepared, and runs it there. A subclass says how: which operations
convert (:meth:`AdapterDevice.check_operation`, raising :class:`Unsupported`), the conversion
(:meth:`AdapterDevice.convert`), the runtime's compiled form (:meth:`AdapterDevice.load`) and one
inference (:meth:`AdapterPreparedModel.compute`). Everything else is here, once: the
supported-operations query, prepare with the shared argument checks and the operations' own
checks, the compilation cache (the NNAPI model and the converted one under the token), capabilities
measured against the reference, and execution through the reference's request checks and output
writing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from nnapi_ref import extensions, hal
from nnapi_ref.drivers.cache import check_cache_files
from nnapi_ref.drivers.reference import (ReferenceDevice, ReferencePreparedModel, check_deadline,
                                         check_prepare_arguments, hal_error)
from nnapi_ref.errors import NnapiError
from nnapi_ref.executor import Plan, prepare_plans
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.ops.base import Arg, Call, ValueUnknown
from nnapi_ref.ops.spatial import Spatial, parse_spatial
from nnapi_ref.types import DTYPES, Lifetime, OperandCode as T, OperationCode as Op
from nnapi_ref.vectors import FormatError, model_from_json, model_to_json


class Unsupported(Exception):
    """What a mapping raises for an operation it cannot convert (a type, a parameter)."""


CONSTANT_LIFETIMES = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)


class SubgraphView:
    """Reading an NNAPI subgraph's operands as a converter does: parameters must be constants
    (anything else is Unsupported), and the reference's parsers read the operation."""

    def __init__(self, sg: hal.Subgraph):
        self.sg = sg

    def operand(self, k: int) -> hal.Operand:
        return self.sg.operands[k]

    def is_constant(self, k: int) -> bool:
        return self.operand(k).lifetime in CONSTANT_LIFETIMES

    def omitted(self, k: int) -> bool:
        return self.operand(k).lifetime == Lifetime.NO_VALUE

    def value(self, k: int) -> np.ndarray:
        """A constant operand's data (parameters must be constants for the conversion)."""
        o = self.operand(k)
        if o.lifetime not in CONSTANT_LIFETIMES:
            raise Unsupported(f"operand {k} is not a constant")
        return np.asarray(o.value, DTYPES[o.type]).reshape(o.dimensions)

    def scalar(self, k: int):
        return self.value(k).item()

    def flag(self, op: hal.Operation, i: int) -> bool:
        """Optional BOOL input ``i`` (layout, align corners, ...): False when absent or omitted."""
        return len(op.inputs) > i and not self.omitted(op.inputs[i]) and bool(self.scalar(op.inputs[i]))

    def resize_output_size(self, op: hal.Operation, h: int, w: int) -> tuple[int, int]:
        """RESIZE_*'s output height and width: given (INT32), or the ``h`` x ``w`` image scaled
        (floor of the float32 product, as NNAPI computes it; ``h``, ``w`` 0 when unknown)."""
        wk, hk = op.inputs[1], op.inputs[2]
        if self.operand(wk).type == T.INT32:
            return int(self.scalar(hk)), int(self.scalar(wk))
        if not (h and w):
            raise Unsupported("scale factors on an image of unknown size")
        return (int(np.floor(np.float32(h) * np.float32(self.scalar(hk)))),
                int(np.floor(np.float32(w) * np.float32(self.scalar(wk)))))

    def rank(self, k: int) -> int:
        dims = self.operand(k).dimensions
        if not dims:
            raise Unsupported(f"operand {k} has an unknown rank")
        return len(dims)

    def call(self, op: hal.Operation) -> Call:
        """The operation as the reference's parameter parsers read it (constants have values)."""
        def arg(k):
            o = self.operand(k)
            value = self.value(k) if o.lifetime in CONSTANT_LIFETIMES else None
            return Arg(o.type, o.dimensions, o.scale, o.zero_point, o.channel_quant, value,
                       omitted=o.lifetime == Lifetime.NO_VALUE)
        return Call([arg(k) for k in op.inputs], [arg(k) for k in op.outputs])

    def spatial(self, op: hal.Operation, base: int, n_extra: int, dilation: bool) -> Spatial:
        """The reference's parsing of NNAPI's padding, stride, layout and dilation parameters."""
        try:
            return parse_spatial(self.call(op), op.type.name, base, n_extra, dilation)
        except (ValueUnknown, NnapiError) as e:
            raise Unsupported(f"{op.type.name} parameters: {e}") from None


def with_static_shapes(model: hal.Model) -> hal.Model:
    """``model`` with the dimensions its operands leave unknown (0, or no rank) but its input
    shapes and constants fix filled in, by the reference's shape propagation: a mapping then
    sees, say, the image size of a pooling after a RESHAPE. The model as it is when the
    propagation cannot run (an invalid model) or finds nothing."""
    try:
        shapes = Plan(model, model.main, "main").shapes
    except Exception:  # noqa: BLE001 - no propagation: the mappings see the model as declared
        return model
    operands = list(model.main.operands)
    changed = False
    for k, o in enumerate(operands):
        shape = shapes.get(k)
        if (o.lifetime in (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT) and shape is not None and len(shape) > 0
                and tuple(shape) != tuple(o.dimensions)):
            operands[k] = dataclasses.replace(o, dimensions=tuple(int(d) for d in shape))
            changed = True
    if not changed:
        return model
    return dataclasses.replace(model, main=dataclasses.replace(model.main, operands=operands))


@dataclass(frozen=True)
class Mapping:
    """How one NNAPI operation becomes the runtime's, for which types of its first input."""

    types: frozenset
    emit: Callable[[Any, hal.Operation], None]


class Mappings(dict):
    """An adapter's mappings, one per NNAPI operation (``{OperationCode: Mapping}``)."""

    def maps(self, codes, types):
        """Declare ``emit(graph, operation)`` the mapping of ``codes`` for first inputs of ``types``."""
        def register(emit):
            for code in (codes if isinstance(codes, tuple) else (codes,)):
                assert code not in self, f"{code.name} mapped twice"
                self[code] = Mapping(frozenset(types), emit)
            return emit
        return register

    def check(self, graph, op: hal.Operation) -> None:
        """Raise Unsupported unless the operation's mapping accepts its first input's type and,
        emitted into ``graph`` (over the operation's subgraph ``graph.sg``), its parameters."""
        mapping = self.get(op.type)
        if mapping is None:
            raise Unsupported(f"{op.type.name} has no mapping")
        first = graph.sg.operands[op.inputs[0]].type
        if first not in mapping.types:
            raise Unsupported(f"{op.type.name} on {first.name}")
        try:
            mapping.emit(graph, op)
        except Unsupported:
            raise
        except Exception as e:  # parameters the mapping cannot read (invalid ones, say)
            raise Unsupported(f"{op.type.name}: {type(e).__name__}: {e}") from None


class AdapterDevice(ReferenceDevice):
    """A driver running the converted model in another runtime; ``runtime`` names it in messages,
    ``magic`` marks its cache files, ``benchmark_types`` are the operand types whose speed is
    measured (the others, and IF/WHILE, are reported infinitely slow)."""

    runtime = ""
    magic = b""
    benchmark_types: tuple = ()

    def check_operation(self, sg: hal.Subgraph, op: hal.Operation) -> None:
        """Raise Unsupported unless the operation's mapping accepts its types and parameters."""
        raise NotImplementedError

    def convert(self, model: hal.Model) -> bytes:
        """The runtime's model for ``model``; Unsupported if any operation does not convert."""
        raise NotImplementedError

    def load(self, model: hal.Model, converted: bytes, plans: list) -> "AdapterPreparedModel":
        """The prepared model running ``converted`` (``plans``: the reference's, for checking
        requests); any exception is a failed compilation."""
        raise NotImplementedError

    def get_capabilities(self) -> hal.Capabilities:
        if self.capabilities is None:
            self.capabilities = measure_capabilities(self)
        return self.capabilities

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        self._validated.level(model)
        flags = []
        for op in model.main.operations:
            if extensions.operation_uses_extension(model.main, op):  # an adapter runs no extension
                flags.append(False)
                continue
            try:
                self.check_operation(model.main, op)
                flags.append(True)
            except Unsupported:
                flags.append(False)
        return flags

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        check_prepare_arguments(preference, priority, deadline_ns)
        level = self._validated.level(model)
        self.check_extensions(model)
        if level > self.feature_level:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"model needs feature level {level}")
        plans = _plans(model)
        try:
            converted = self.convert(model)
        except Unsupported as e:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot convert the model: {e}") from None
        prepared = self._load(model, converted, plans)
        if token is not None and (model_cache or data_cache):
            save_compilation(self.magic, model, converted, model_cache, data_cache, token)
        return prepared

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        check_deadline(deadline_ns, "compilation")
        model, converted = load_compilation(self.magic, model_cache, data_cache, token)
        self._validated.level(model)
        return self._load(model, converted, _plans(model))

    def _load(self, model: hal.Model, converted: bytes, plans: list) -> "AdapterPreparedModel":
        try:
            return self.load(model, converted, plans)
        except Exception as e:  # the runtime rejecting the model: a failed compilation
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.runtime}: {type(e).__name__}: {e}") from None


def _plans(model: hal.Model) -> list:
    """The reference's execution plans: the operations' own checks (parameters NNAPI forbids),
    run as the reference runs them, and what requests are checked against."""
    try:
        return prepare_plans(model)
    except NnapiError as e:
        raise hal_error(e) from None


class AdapterPreparedModel(ReferencePreparedModel):
    """A model compiled by the runtime; requests are checked (against the reference's plans) and
    outputs written by the reference's execution path, the computation is :meth:`compute`'s."""

    def __init__(self, device: AdapterDevice, model: hal.Model, plans: list):
        super().__init__(device, model, plans)

    def compute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs for ``inputs`` (one array per model input), by the runtime."""
        raise NotImplementedError

    def _executor(self, deadline_ns, loop_timeout_ns):
        return None  # the runtime computes: no reference executor

    def _compute(self, executor, inputs: list) -> list[np.ndarray]:
        if any(x is None for x in inputs):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "omitted (optional) inputs are not supported")
        try:
            return self.compute([np.ascontiguousarray(x) for x in inputs])
        except Exception as e:  # the runtime refusing the inputs at run time (shapes, a kernel's checks)
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.device.runtime}: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------------------------------------
# The compilation cache: the NNAPI model (requests are checked against it) and the converted one
# ---------------------------------------------------------------------------------------------

def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def save_compilation(magic: bytes, model: hal.Model, converted: bytes, model_cache, data_cache, token) -> None:
    """Best effort: wrong cache files or a failing write leave nothing saved. Each file is
    ``magic``, sha256(token), sha256(payload), payload."""
    try:
        check_cache_files(model_cache, 1, "model")
        check_cache_files(data_cache, 1, "data")
        for f, payload in ((model_cache[0], json.dumps(model_to_json(model)).encode()), (data_cache[0], converted)):
            f.seek(0)
            f.truncate()
            f.write(magic + _digest(token) + _digest(payload) + payload)
            f.flush()
    except (HalError, OSError):
        pass


def load_compilation(magic: bytes, model_cache, data_cache, token) -> tuple[hal.Model, bytes]:
    """The model and converted model saved by :func:`save_compilation`; GENERAL_FAILURE for a
    wrong token, a corrupted or foreign file."""
    check_cache_files(model_cache, 1, "model")
    check_cache_files(data_cache, 1, "data")
    if token is None or len(token) != 32:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, "cache token must be 32 bytes")
    model_json, converted = (_load(magic, f, token) for f in (model_cache[0], data_cache[0]))
    try:
        return model_from_json(json.loads(model_json)), converted
    except (ValueError, KeyError, TypeError, FormatError) as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"model cache: cannot decode: {e}") from None


def _load(magic: bytes, f, token: bytes) -> bytes:
    try:
        f.seek(0)
        blob = f.read()
    except OSError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot read the cache: {e}") from None
    header = len(magic) + 64
    if len(blob) < header or blob[:len(magic)] != magic:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "not a cache of this driver")
    if blob[len(magic):len(magic) + 32] != _digest(token):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "cache saved under another token")
    if blob[len(magic) + 32:header] != _digest(blob[header:]):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "cache checksum mismatch (corrupted)")
    return blob[header:]


# ---------------------------------------------------------------------------------------------
# Capabilities: measured against the reference driver on a small model per operand type
# ---------------------------------------------------------------------------------------------

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def benchmark_model(code: T) -> hal.Model:
    """A 3x3 convolution over a 16x16x8 image for float and quantized types, an elementwise
    operation over 4096 elements for INT32 and BOOL8."""
    quant = code in QUANT8

    def tensor(dims, scale=0.0, zero=0, code=code, value=None):
        life = Lifetime.CONSTANT_COPY if value is not None else Lifetime.TEMPORARY_VARIABLE
        quantized = code in QUANT8 or (code == T.TENSOR_INT32 and quant)
        return hal.Operand(code, dims, scale if quantized else 0.0, zero if code in QUANT8 else 0, life, value)

    def scalar(v):
        return hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(v, np.int32))
    if code in (T.TENSOR_INT32, T.TENSOR_BOOL8):
        operands = [tensor((64, 64)), tensor((64, 64)), scalar(0), tensor((64, 64))]
        if code == T.TENSOR_INT32:
            op = hal.Operation(Op.ADD, (0, 1, 2), (3,))
        else:
            op = hal.Operation(Op.LOGICAL_AND, (0, 1), (3,))
    else:
        dtype = DTYPES[code]
        rng = np.random.default_rng(0)
        weights = rng.integers(1, 100, (8, 3, 3, 8)).astype(dtype) if quant else \
            rng.standard_normal((8, 3, 3, 8)).astype(dtype)
        bias = np.zeros(8, np.int32 if quant else dtype)
        operands = [tensor((1, 16, 16, 8), 0.5, 1), tensor((8, 3, 3, 8), 0.5, 0, value=weights),
                    tensor((8,), 0.25, 0, T.TENSOR_INT32 if quant else code, bias), scalar(1), scalar(1), scalar(1),
                    scalar(1), tensor((1, 16, 16, 8), 4.0, 1)]
        op = hal.Operation(Op.CONV_2D, (0, 1, 2, 3, 4, 5, 6), (7,))
    inputs = tuple(k for k in op.inputs if operands[k].lifetime == Lifetime.TEMPORARY_VARIABLE)
    for k in inputs:
        operands[k].lifetime = Lifetime.SUBGRAPH_INPUT
    operands[op.outputs[0]].lifetime = Lifetime.SUBGRAPH_OUTPUT
    return hal.Model(hal.Subgraph(operands, [op], inputs, op.outputs))


def seconds_per_run(prepared, model: hal.Model) -> float:
    """The fastest of a few synchronous executions."""
    main = model.main
    args = []
    for k in main.input_indexes:
        o = main.operands[k]
        args.append(hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=np.ones(o.dimensions, DTYPES[o.type])))
    out = main.operands[main.output_indexes[0]]
    result = hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=np.zeros(out.dimensions, DTYPES[out.type]))
    request = hal.Request(args, [result])
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        prepared.execute_synchronously(request, False, None, 0)
        best = min(best, time.perf_counter() - start)
    return best


def measure_capabilities(device: AdapterDevice) -> hal.Capabilities:
    """Execution time relative to the reference driver (the CPU), per operand type in
    ``device.benchmark_types``, measured on :func:`benchmark_model`; power is reported equal to
    time (the same CPU does the work). Other types, IF and WHILE: infinitely slow."""
    reference = ReferenceDevice()
    performance = []
    for code in sorted(device.benchmark_types):
        model = benchmark_model(code)
        mine = device.prepare_model(model, 1, 100, None, (), (), None)
        theirs = reference.prepare_model(model, 1, 100, None, (), (), None)
        ratio = seconds_per_run(mine, model) / seconds_per_run(theirs, model)
        performance.append((code, hal.PerformanceInfo(ratio, ratio)))
    relaxed = dict(performance)[T.TENSOR_FLOAT32]
    never = hal.PerformanceInfo(float("inf"), float("inf"))
    return hal.Capabilities(relaxed, relaxed, performance, never, never)
