"""``tflite``: a driver that runs NNAPI models in TensorFlow Lite's interpreter (``ai-edge-litert``).

The model a driver is given (the part of an NNAPI model the runtime assigned to it) is converted
into a .tflite flatbuffer (:mod:`.convert`, written with the schema module the interpreter ships,
:mod:`.writer`) and loaded into an ``ai_edge_litert.interpreter.Interpreter``, one thread. Every
NNAPI operation it can run has exactly one mapping, declared with the data types it accepts; the
supported-operations query converts each operation on its own and says yes only when its mapping
accepts the operation's types and parameters, so anything else counts as unsupported.

Kernels (driver strings, see :mod:`nnapi_ref.drivers`): ``tflite`` uses TFLite's default
builtin kernels with the XNNPACK delegate TFLite applies by default (what an application gets);
``tflite-ref`` its reference kernels (``OpResolverType.BUILTIN_REF``), the plain C++ that the
optimized kernels are checked against.

The rest of the interface (request validation, device memory, execution modes) is the reference
driver's, which this driver extends; only compilation and the computation itself differ.
``docs/conformance/tflite.md`` lists where TFLite's results differ from NNAPI's.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time

import numpy as np

from ... import hal
from ...errors import NnapiError
from ...executor import prepare_plans
from ...hal import ErrorStatus, HalError
from ...types import ResultCode
from ...vectors import FormatError, model_from_json, model_to_json
from ..reference import (ReferenceDevice, ReferencePreparedModel, check_cache_files, check_deadline,
                         check_prepare_arguments, hal_error)
from .convert import Unsupported, check_operation, to_flatbuffer

_IMPORT_ERROR = ""
try:
    from importlib.metadata import version as _version

    from ai_edge_litert import interpreter as litert
    LITERT_VERSION = _version("ai-edge-litert")
except ImportError as e:  # the driver reports itself unavailable (see TfliteDevice)
    litert = None
    LITERT_VERSION = ""
    _IMPORT_ERROR = str(e)

KERNELS = ("default", "reference")
MAGIC = b"NNTSTFL1"


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class TfliteDevice(ReferenceDevice):
    """NNAPI on TFLite's interpreter with its ``kernels``: ``default`` (builtin kernels and
    XNNPACK) or ``reference`` (BUILTIN_REF)."""

    def __init__(self, kernels: str = "default"):
        if litert is None:
            raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                             f"driver 'tflite' needs the ai-edge-litert package "
                             f"(pip install ai-edge-litert): {_IMPORT_ERROR}")
        if kernels not in KERNELS:
            raise NnapiError(ResultCode.BAD_DATA, f"tflite kernels {kernels!r}: expected one of {KERNELS}")
        super().__init__(name="tflite" if kernels == "default" else "tflite-ref")
        self.kernels = kernels
        self.resolver = litert.OpResolverType.BUILTIN if kernels == "default" else litert.OpResolverType.BUILTIN_REF
        self.capabilities = None  # measured on first request

    def get_version_string(self) -> str:
        return f"ai-edge-litert {LITERT_VERSION} ({self.kernels} kernels)"

    def get_capabilities(self) -> hal.Capabilities:
        if self.capabilities is None:
            self.capabilities = measure_capabilities(self)
        return self.capabilities

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        self._validated.level(model)
        flags = []
        for op in model.main.operations:
            try:
                check_operation(model.main, op)
                flags.append(True)
            except Unsupported:
                flags.append(False)
        return flags

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        check_prepare_arguments(preference, priority, deadline_ns)
        level = self._validated.level(model)
        if level > self.feature_level:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"model needs feature level {level}")
        try:  # the operations' own checks (parameters NNAPI forbids), as the reference runs them
            prepare_plans(model)
        except NnapiError as e:
            raise hal_error(e) from None
        try:
            flatbuffer, _, _ = to_flatbuffer(model)
        except Unsupported as e:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot convert the model: {e}") from None
        prepared = self._prepared(model, flatbuffer)
        if token is not None and (model_cache or data_cache):
            save_compilation(MAGIC, model, flatbuffer, model_cache, data_cache, token)
        return prepared

    def _prepared(self, model: hal.Model, flatbuffer: bytes) -> "TflitePreparedModel":
        try:
            interpreter = litert.Interpreter(model_content=flatbuffer, num_threads=1,
                                             experimental_op_resolver_type=self.resolver)
            interpreter.allocate_tensors()
        except Exception as e:  # TFLite rejecting the model (a kernel's Prepare): a failed compilation
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"tflite: {type(e).__name__}: {e}") from None
        return TflitePreparedModel(self, model, interpreter)

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        check_deadline(deadline_ns, "compilation")
        model, flatbuffer = load_compilation(MAGIC, model_cache, data_cache, token)
        self._validated.level(model)
        return self._prepared(model, flatbuffer)


def reference_kernels() -> TfliteDevice:
    """TFLite with its reference kernels (driver string ``tflite-ref``)."""
    return TfliteDevice(kernels="reference")


# -- the compilation cache: the NNAPI model (requests are checked against it) and the converted one --

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


class TflitePreparedModel(ReferencePreparedModel):
    """An interpreter; requests are checked and outputs written by the reference's code. The
    interpreter is not thread-safe: one execution at a time."""

    def __init__(self, device: TfliteDevice, model: hal.Model, interpreter):
        super().__init__(device, model, [])
        self.interpreter = interpreter
        self.inputs = [d["index"] for d in interpreter.get_input_details()]
        self.outputs = [d["index"] for d in interpreter.get_output_details()]
        self.shapes = [tuple(d["shape"]) for d in interpreter.get_input_details()]  # the interpreter's now
        self._lock = threading.Lock()

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        start = time.monotonic_ns()
        check_deadline(deadline_ns, "execution")
        pools, inputs = self._check_request(request)
        if any(x is None for x in inputs):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "omitted inputs are not supported")
        with self._lock:
            device_start = time.monotonic_ns()
            try:
                results = self._invoke(inputs)
            except Exception as e:  # TFLite refusing the inputs (shapes, a kernel's checks)
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"tflite: {type(e).__name__}: {e}") from None
            device_ns = time.monotonic_ns() - device_start
        shapes = [hal.OutputShape(tuple(r.shape), True) for r in results]
        targets = [self._output_target(i, arg, r, pools, shapes[i])
                   for i, (arg, r) in enumerate(zip(request.outputs, results))]
        if not all(s.is_sufficient for s in shapes):
            raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small", shapes)
        for target, result in zip(targets, results):
            if target is not None:
                target(result)
        timing = hal.Timing(device_ns, time.monotonic_ns() - start) if measure else hal.NO_TIMING
        return hal.ExecutionResult(shapes, timing)

    def _invoke(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Resize the interpreter to the inputs' shapes where they changed, run it, copy the outputs."""
        it = self.interpreter
        if [x.shape for x in inputs] != self.shapes:
            for index, x in zip(self.inputs, inputs):
                it.resize_tensor_input(index, list(x.shape), strict=False)
            it.allocate_tensors()
            self.shapes = [x.shape for x in inputs]
        for index, x in zip(self.inputs, inputs):
            it.set_tensor(index, np.ascontiguousarray(x))
        it.invoke()
        return [it.get_tensor(index) for index in self.outputs]


# ---------------------------------------------------------------------------------------------
# Capabilities: measured against the reference driver on a small model per operand type
# ---------------------------------------------------------------------------------------------

def measure_capabilities(device: TfliteDevice) -> hal.Capabilities:
    """Execution time relative to the reference driver (the CPU), per operand type this driver
    maps, measured on the ONNX Runtime driver's benchmark model (a 3x3 convolution, an
    elementwise operation for INT32 and BOOL8); power is reported equal to time. Types it has no
    benchmark operation for, and IF/WHILE, are not mapped: infinitely slow."""
    from ..onnxruntime import _benchmark_model, _seconds_per_run
    from .convert import F32, I32, Q8, S8, BOOL8
    reference = ReferenceDevice()
    performance = []
    for code in sorted((F32, Q8, S8, I32, BOOL8)):
        model = _benchmark_model(code)
        mine = device.prepare_model(model, 1, 100, None, (), (), None)
        theirs = reference.prepare_model(model, 1, 100, None, (), (), None)
        ratio = _seconds_per_run(mine, model) / _seconds_per_run(theirs, model)
        performance.append((code, hal.PerformanceInfo(ratio, ratio)))
    relaxed = dict(performance)[F32]
    never = hal.PerformanceInfo(float("inf"), float("inf"))
    return hal.Capabilities(relaxed, relaxed, performance, never, never)
