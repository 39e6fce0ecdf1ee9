"""A driver implementing the project's example vendor extension, ``org.nnts.example``: the
template a vendor follows (docs/extensions.md specifies the extension).

``--driver nnapi_ref.drivers.example_extension:make_device``. The driver declares the extension's
one operand type and reports support for the extension's one operation when its operands are
right; it wraps the reference driver, so the built-in operations run too (a model mixing both is
prepared as segments: runs of built-in operations on the reference's executor, the extension's
operations here), and requests, device memory and every execution path are the reference's.

* Operand type 0, ``TENSOR_QUANT64_ASYMM``: a tensor of int64 values (8 bytes each) quantized
  with a float64 scale and an int64 zero point, given as the operand's extension data: 16 bytes,
  the scale then the zero point, little-endian. The scale must be positive and finite.
* Operation 0, ``DEQUANTIZE64``: input 0 a TENSOR_QUANT64_ASYMM, output 0 a TENSOR_FLOAT32 of the
  same shape; ``output = float32((q - zero_point) * scale)``, the difference exact (64-bit values
  are not rounded to a narrower type first), the product in float64.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from nnapi_ref import extensions as ext, hal
from nnapi_ref.drivers.reference import ReferenceDevice, ReferencePreparedModel, check_prepare_arguments, hal_error
from nnapi_ref.errors import NnapiError
from nnapi_ref.executor import Executor, prepare_plans
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.ops import requantization
from nnapi_ref.types import DTYPES, Lifetime, OperandCode

EXTENSION_NAME = "org.nnts.example"
TENSOR_QUANT64_ASYMM = 0  # operand type within the extension
DEQUANTIZE64 = 0  # operation type within the extension
EXTENSION = hal.Extension(EXTENSION_NAME, (hal.ExtensionOperandTypeInformation(TENSOR_QUANT64_ASYMM, True, 8),))
_PARAMS = struct.Struct("<dq")  # the extension data of a TENSOR_QUANT64_ASYMM operand


def quant64_params(scale: float, zero_point: int) -> bytes:
    """The extension data of a TENSOR_QUANT64_ASYMM operand."""
    return _PARAMS.pack(scale, zero_point)


def parse_params(data: bytes | None) -> tuple[float, int] | None:
    """(scale, zero point) from a TENSOR_QUANT64_ASYMM operand's extension data; None if malformed."""
    if data is None or len(data) != _PARAMS.size:
        return None
    scale, zero_point = _PARAMS.unpack(bytes(data))
    return (scale, zero_point) if math.isfinite(scale) and scale > 0 else None


def dequantize64(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """DEQUANTIZE64: the difference in exact integers, then float64, scaled, rounded to float32."""
    diff = np.array([float(int(v) - zero_point) for v in q.reshape(-1)], np.float64).reshape(q.shape)
    return (diff * scale).astype(np.float32)


class ExampleExtensionDevice(ReferenceDevice):
    """``nnts-example-extension``: the reference driver plus ``org.nnts.example``."""

    def __init__(self, name: str = "nnts-example-extension"):
        super().__init__(name=name)

    def get_supported_extensions(self) -> list[hal.Extension]:
        return [EXTENSION]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0)

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "caching not supported")

    def _is_ours(self, model: hal.Model, code, type_within: int) -> bool:
        names = ext.prefix_map(model)
        return (ext.is_extension_type(code) and names.get(ext.prefix_of(code)) == EXTENSION_NAME
                and ext.within_extension(code) == type_within)

    def dtype_of(self, model: hal.Model, code) -> np.dtype:
        if self._is_ours(model, code, TENSOR_QUANT64_ASYMM):
            return np.dtype("<i8")
        return DTYPES[code]

    def supports_extension_operation(self, model, sg, operation) -> bool:
        """DEQUANTIZE64 with one TENSOR_QUANT64_ASYMM input with valid parameters and one
        TENSOR_FLOAT32 output of a compatible shape."""
        if not self._is_ours(model, operation.type, DEQUANTIZE64):
            return False
        if len(operation.inputs) != 1 or len(operation.outputs) != 1:
            return False
        source, target = sg.operands[operation.inputs[0]], sg.operands[operation.outputs[0]]
        if not self._is_ours(model, source.type, TENSOR_QUANT64_ASYMM) or target.type != OperandCode.TENSOR_FLOAT32:
            return False
        if source.lifetime == Lifetime.NO_VALUE or parse_params(source.extension_data) is None:
            return False
        if source.dimensions and target.dimensions and len(source.dimensions) != len(target.dimensions):
            return False
        return all(a == b or 0 in (a, b) for a, b in zip(source.dimensions, target.dimensions))

    def _supports(self, model, sg, operation) -> bool:
        if sg is not model.main and ext.is_extension_type(operation.type):
            return False  # inside IF/WHILE bodies: the reference's executor runs those
        return super()._supports(model, sg, operation)

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        if not ext.uses_extensions(model):
            return super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        check_prepare_arguments(preference, priority, deadline_ns)
        level = self._validated.level(model, self.get_supported_extensions())
        self.check_extensions(model)
        if any(ext.is_extension_type(op.type) for sg in model.referenced for op in sg.operations):
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{self.name} runs {EXTENSION_NAME} operations only "
                                                        "in the main model")
        if level > self.feature_level:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"model needs feature level {level}")
        return ExamplePreparedModel(self, model, self._segments(model))

    def _segments(self, model: hal.Model) -> list:
        """The main model's operations (in execution order) as runs of built-in operations, each
        a sub-model with the reference's plans, and single DEQUANTIZE64 operations."""
        segments, run = [], []

        def close_run():
            if run:
                sub, inputs, outputs = hal.step_model(model, list(run))
                try:
                    with requantization.using(self.convention):
                        plans = prepare_plans(sub)
                except NnapiError as e:
                    raise hal_error(e) from None
                segments.append(_Segment(model.main.operations[run[0]], plans, inputs, outputs,
                                         sub.relax_computation_float32_to_float16))
                run.clear()
        for j, operation in enumerate(model.main.operations):
            if ext.is_extension_type(operation.type):
                close_run()
                segments.append(_Segment(operation))
            else:
                run.append(j)
        close_run()
        return segments


class _Segment:
    """One DEQUANTIZE64 (``plans`` None), or a run of built-in operations: the reference's plans
    of its sub-model and the main-model operands behind the sub-model's inputs and outputs."""

    def __init__(self, operation, plans=None, inputs=(), outputs=(), relaxed=False):
        self.operation, self.plans, self.inputs, self.outputs, self.relaxed = \
            operation, plans, list(inputs), list(outputs), relaxed


class ExamplePreparedModel(ReferencePreparedModel):
    """Runs a model using the extension segment by segment; the request handling is the reference's."""

    def _check_inputs(self, inputs: list) -> None:
        main = self.model.main
        for i, value in enumerate(inputs):
            readers = [s for s in self.plans if s.plans is None and main.input_indexes[i] in s.operation.inputs]
            if value is None and readers:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"input {i}: omitted, and DEQUANTIZE64 needs it")

    def _executor(self, deadline_ns, loop_timeout_ns):
        return deadline_ns, loop_timeout_ns

    def _compute(self, executor, inputs: list) -> list[np.ndarray]:
        deadline_ns, loop_timeout_ns = executor
        main = self.model.main
        values = dict(zip(main.input_indexes, inputs))
        for segment in self.plans:
            if segment.plans is not None:
                run_inputs = [values.get(k) for k in segment.inputs]
                try:
                    segment.plans[0].check_omitted_inputs(run_inputs)
                    with requantization.using(self.device.convention):
                        outputs = Executor(segment.plans, segment.relaxed, deadline_ns, loop_timeout_ns).run(run_inputs)
                except NnapiError as e:
                    raise hal_error(e) from None
                values.update(zip(segment.outputs, outputs))
                continue
            k = segment.operation.inputs[0]
            source = main.operands[k]
            q = values.get(k)
            if q is None:  # a constant
                q = np.asarray(source.value).reshape(-1).view(np.uint8).view("<i8").reshape(source.dimensions)
            scale, zero_point = parse_params(source.extension_data)
            values[segment.operation.outputs[0]] = dequantize64(q, scale, zero_point)
        return [values[k] for k in main.output_indexes]


def make_device() -> ExampleExtensionDevice:
    """The driver string's factory: ``nnapi_ref.drivers.example_extension:make_device``."""
    return ExampleExtensionDevice()
