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
optimized kernels are checked against. The reference quantized SOFTMAX aborts the whole process
(a failed ``TFLITE_CHECK``) on a row whose exponentials sum to 512 or more: ``tflite-ref``
reports a quantized SOFTMAX over rows of 512 or more elements (or of unknown length) unsupported.

The rest of the interface (request validation, device memory, execution modes) is the reference
driver's, which this driver extends; only compilation and the computation itself differ.
``docs/conformance/tflite.md`` lists where TFLite's results differ from NNAPI's.
"""
from __future__ import annotations

import threading

import numpy as np

from nnapi_ref import hal
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperationCode as Op, ResultCode
from nnts.adapters.base import AdapterDevice, AdapterPreparedModel, Unsupported
from nnts.adapters.tflite_export import BOOL8, F32, I32, Q8, S8, check_operation, to_flatbuffer

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
# The longest row the reference kernels' quantized SOFTMAX is safe on: it sums the row's
# exponentials (each at most 1) in fixed point and, for 8-bit outputs, fails TFLITE_CHECK(exponent
# <= 31) (reference_ops::Softmax, a SIGABRT of the whole process) once the sum reaches 2**9.
REFERENCE_SOFTMAX_MAX_ROW = 511


def check_reference_kernels(sg: hal.Subgraph, op: hal.Operation) -> None:
    """Raise Unsupported for what TFLite's reference kernels abort the process on: a quantized
    SOFTMAX whose rows could reach :data:`REFERENCE_SOFTMAX_MAX_ROW` + 1 elements."""
    if op.type != Op.SOFTMAX or sg.operands[op.inputs[0]].type not in (Q8, S8):
        return
    dims = tuple(sg.operands[op.inputs[0]].dimensions or ())
    if not dims or not 0 < dims[-1] <= REFERENCE_SOFTMAX_MAX_ROW:
        row = f"rows of {dims[-1]}" if dims and dims[-1] else "rows of unknown length"
        raise Unsupported(f"quantized SOFTMAX over {row}: TFLite's reference kernel aborts the process when a "
                          f"row's exponentials sum to 512 or more (rows up to {REFERENCE_SOFTMAX_MAX_ROW} are safe)")


class TfliteDevice(AdapterDevice):
    """NNAPI on TFLite's interpreter with its ``kernels``: ``default`` (builtin kernels and
    XNNPACK) or ``reference`` (BUILTIN_REF). TFLite has no float16 kernels to measure."""

    runtime = "tflite"
    magic = b"NNTSTFL1"
    benchmark_types = (F32, Q8, S8, I32, BOOL8)

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

    def check_operation(self, sg: hal.Subgraph, op: hal.Operation) -> None:
        check_operation(sg, op)
        if self.kernels == "reference":
            check_reference_kernels(sg, op)

    def convert(self, model: hal.Model) -> bytes:
        return to_flatbuffer(model)[0]

    def load(self, model: hal.Model, converted: bytes, plans: list) -> "TflitePreparedModel":
        if self.kernels == "reference":  # a model given without the query, or from the cache
            for op in model.main.operations:
                check_reference_kernels(model.main, op)
        interpreter = litert.Interpreter(model_content=converted, num_threads=1,
                                         experimental_op_resolver_type=self.resolver)
        interpreter.allocate_tensors()
        return TflitePreparedModel(self, model, plans, interpreter)


class TflitePreparedModel(AdapterPreparedModel):
    """An interpreter, which is not thread-safe: one execution at a time."""

    def __init__(self, device: TfliteDevice, model: hal.Model, plans: list, interpreter):
        super().__init__(device, model, plans)
        self.interpreter = interpreter
        self.inputs = [d["index"] for d in interpreter.get_input_details()]
        self.outputs = [d["index"] for d in interpreter.get_output_details()]
        self.shapes = [tuple(d["shape"]) for d in interpreter.get_input_details()]  # the interpreter's now
        self._lock = threading.Lock()

    def compute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            return self._invoke(inputs)

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
