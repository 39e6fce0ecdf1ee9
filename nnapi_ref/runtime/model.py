"""The model builder (ANeuralNetworksModel), call for call.

Each method validates its arguments the way the NDK does and raises
:class:`~nnapi_ref.errors.NnapiError` with the NDK's result code: UNEXPECTED_NULL for a missing
argument, BAD_DATA for a wrong one, BAD_STATE for a call after ``finish()``.
"""
from __future__ import annotations

import math
import operator
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from nnapi_ref import extensions as ext, ops, trace, vlog
from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.hal import ChannelQuant, ExtensionNameAndPrefix, Model as HalModel, Operand, Operation, Subgraph
from nnapi_ref.runtime.devices import declared_extensions, extension_operand_info
from nnapi_ref.types import (DTYPES, MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES, SCALAR_TYPES, Lifetime, OperandCode,
                             OperationCode, ResultCode, type_name)
from nnapi_ref.validation import (note_runtime_validated, operand_type_problem, plain_indexes, topological_order,
                                  validate_model, validate_operand_type)

UNEXPECTED_NULL = ResultCode.UNEXPECTED_NULL
BAD_STATE = ResultCode.BAD_STATE
_OPERATION_CODES = {int(c): c for c in OperationCode}  # a dict lookup, not an enum call, per add_operation
_OPERAND_CODES = {int(c): c for c in OperandCode}
_VALUE_LIFETIMES = frozenset({Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE, Lifetime.NO_VALUE,
                              Lifetime.SUBGRAPH})
_INT = frozenset({int})
_TEMPORARY, _INPUT, _OUTPUT = Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT
_IO_LIFETIMES = frozenset({_TEMPORARY, _INPUT, _OUTPUT})  # what identify_inputs_and_outputs may (re)assign
_LIFETIME = operator.attrgetter("lifetime")
_SUBGRAPH = OperandCode.SUBGRAPH


@dataclass(frozen=True)
class OperandType:
    """ANeuralNetworksOperandType: an operand's type, dimensions and quantization."""

    type: OperandCode
    dimensions: tuple[int, ...] = ()
    scale: float = 0.0
    zero_point: int = 0

    def __init__(self, type, dimensions=(), scale=0.0, zero_point=0):
        dims, scale, zero_point = _converted(dimensions, scale, zero_point, "OperandType")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "dimensions", dims)
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero_point", zero_point)


def _converted(dimensions, scale, zero_point, call: str) -> tuple[tuple[int, ...], float, int]:
    """The C types of ANeuralNetworksOperandType (uint32_t dimensions, float scale, int32_t zero
    point) from Python values; anything that is not one (a string, nan, None, a bare number
    where the dimensions belong) is BAD_DATA, as a wrong value passed to the NDK is."""
    try:
        if type(dimensions) is tuple or type(dimensions) is list:
            dims = tuple(dimensions)
        elif dimensions is None:
            dims = ()
        elif isinstance(dimensions, (str, bytes)) or not hasattr(dimensions, "__iter__"):
            raise TypeError(f"dimensions {dimensions!r} are not a sequence of integers")
        else:
            dims = tuple(dimensions)
        if not _INT.issuperset(map(type, dims)):  # the usual case, plain ints, needs no conversion
            dims = tuple(_integer(d, "dimension") for d in dims)
        scale_ = float(scale)
        zero_point_ = zero_point if type(zero_point) is int else _integer(zero_point, "zero point")
    except (TypeError, ValueError, OverflowError) as e:
        raise NnapiError(ResultCode.BAD_DATA, f"{call}: {e}") from None
    return dims, scale_, zero_point_


def _integer(value, what: str) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)  # 2.0 is 2, as a C conversion would take it
    raise TypeError(f"{what} {value!r} is not an integer")


# Operand types add_operand accepted, as (code, dims, scale, zero point): a model has few distinct
# types, and checking one was most of the cost of building a model. An equal key has the same
# answer (dims, scale and zero point are already int, float, int; a code equal to a valid one is
# that code to the check too); a rejected type is checked again each time.
_ACCEPTED_TYPES: set[tuple] = set()


# Extension prefixes, assigned once per extension name for the whole process, as NNAPI's runtime
# (its TypeManager) does: every model, and the IF/WHILE bodies it references, then number an
# extension alike. Each HAL model lists only the extensions it uses; drivers assume no prefix.
_PREFIXES: dict[str, int] = {}
_PREFIXES_LOCK = threading.Lock()


def extension_prefix(name: str, call: str) -> int:
    with _PREFIXES_LOCK:
        prefix = _PREFIXES.get(name)
        if prefix is None:
            check(len(_PREFIXES) < ext.MAX_PREFIX, f"{call}: too many extensions")
            prefix = _PREFIXES[name] = len(_PREFIXES) + 1
        return prefix


def _as_bytes_view(value) -> np.ndarray:
    """A flat uint8 view of a buffer-like value (no copy)."""
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(value).cast("B"), np.uint8)


class Model:
    """ANeuralNetworksModel (AOSP's ModelBuilder). Build it with the ``add``/``set``/``identify``
    calls, then ``finish()``: ``hal_model`` is then the canonical :class:`nnapi_ref.hal.Model`."""

    def __init__(self):
        self._operands: list[Operand] = []
        self._operations: list[Operation] = []
        self._inputs: tuple[int, ...] | None = None
        self._outputs: tuple[int, ...] = ()
        self._referenced: dict[int, Model] = {}  # operand index -> model used by IF/WHILE
        self._relaxed = False
        self._finished = False
        self._hal: HalModel | None = None
        self.feature_level = 0
        self._extension_prefixes: dict[str, int] = {}  # the extensions this model uses -> their prefixes
        self._extension_info: dict[int, object] = {}  # extension operand type -> its declaration

    # -- building ------------------------------------------------------------------------------

    def _check_building(self, call: str) -> None:
        if self._finished:
            raise NnapiError(BAD_STATE, f"{call} called on a finished model")

    def _operand(self, index, call: str) -> Operand:
        # The hot path of every builder call: the message is only formatted for a failure.
        if not (isinstance(index, (int, np.integer)) and 0 <= index < len(self._operands)):
            raise NnapiError(ResultCode.BAD_DATA,
                             f"{call}: operand index {index} out of range ({len(self._operands)} operands)")
        return self._operands[index]

    @property
    def operand_count(self) -> int:
        return len(self._operands)

    def add_operand(self, operand_type: OperandType | OperandCode | int, dimensions=None,
                    scale: float = 0.0, zero_point: int = 0) -> int:
        """ANeuralNetworksModel_addOperand; returns the new operand's index."""
        if self._finished:
            raise NnapiError(BAD_STATE, "add_operand called on a finished model")
        if operand_type is None:
            raise NnapiError(UNEXPECTED_NULL, "add_operand: operand type is None")
        if isinstance(operand_type, OperandType):
            code, dims = operand_type.type, operand_type.dimensions
            scale, zero_point = operand_type.scale, operand_type.zero_point
        elif type(dimensions) is tuple and type(scale) is float and type(zero_point) is int and \
                _INT.issuperset(map(type, dimensions)):  # already the C types: nothing to convert
            code, dims = operand_type, dimensions
        else:  # OperandType's conversions, without building one
            code = operand_type
            dims, scale, zero_point = _converted(dimensions, scale, zero_point, "add_operand")
        key = (code, dims, scale, zero_point)
        try:
            accepted = key in _ACCEPTED_TYPES
        except TypeError:  # an unhashable code (a list, say): no operand type, which the check names
            accepted = False
        if not accepted:
            if isinstance(code, (int, np.integer)) and ext.is_extension_type(code):
                return self._add_extension_operand(int(code), dims, scale, zero_point)
            problem = operand_type_problem(code, dims, scale, zero_point, None, channel_quant_pending=True)
            if problem:
                raise NnapiError(ResultCode.BAD_DATA, f"add_operand (operand {len(self._operands)}): {problem}")
            if len(_ACCEPTED_TYPES) >= 4096:
                _ACCEPTED_TYPES.clear()
            _ACCEPTED_TYPES.add(key)
        self._operands.append(Operand(_OPERAND_CODES[code], dims, scale, zero_point))
        return len(self._operands) - 1

    # -- vendor extensions (NeuralNetworksExtensions.h) ------------------------------------------

    def _extension_type(self, call: str, name, type_within) -> int:
        self._check_building(call)
        if name is None:
            raise NnapiError(UNEXPECTED_NULL, f"{call}: extension name is None")
        problem = ext.name_problem(name)
        check(problem is None, f"{call}: {problem}")
        check(isinstance(type_within, (int, np.integer)) and 0 <= type_within <= ext.EXTENSION_TYPE_MASK,
              f"{call}: type {type_within} within the extension is outside 0-{ext.EXTENSION_TYPE_MASK}")
        prefix = self._extension_prefixes[name] = extension_prefix(name, call)
        return ext.encode(prefix, int(type_within))

    def get_extension_operand_type(self, extension_name: str, operand_code_within_extension: int) -> int:
        """ANeuralNetworksModel_getExtensionOperandType: the operand type code, in this model, of
        type ``operand_code_within_extension`` of the named extension."""
        return self._extension_type("get_extension_operand_type", extension_name, operand_code_within_extension)

    def get_extension_operation_type(self, extension_name: str, operation_code_within_extension: int) -> int:
        """ANeuralNetworksModel_getExtensionOperationType: the operation type code, in this
        model, of operation ``operation_code_within_extension`` of the named extension."""
        return self._extension_type("get_extension_operation_type", extension_name, operation_code_within_extension)

    def set_operand_extension_data(self, index: int, data) -> None:
        """ANeuralNetworksModel_setOperandExtensionData: an extension operand's extra parameters,
        opaque bytes for its driver (copied); None clears them."""
        self._check_building("set_operand_extension_data")
        operand = self._operand(index, "set_operand_extension_data")
        check(ext.is_extension_type(operand.type),
              f"set_operand_extension_data: operand {index} is a {type_name(operand.type)}, not an extension type")
        if data is None:
            operand.extension_data = None
            return
        try:
            operand.extension_data = bytes(memoryview(data).cast("B"))
        except TypeError:
            raise NnapiError(ResultCode.BAD_DATA, f"set_operand_extension_data: data of type {type(data).__name__} "
                                                  "is not a buffer") from None

    def _prefix_name(self, code: int) -> str | None:
        prefix = ext.prefix_of(code)
        return next((n for n, p in self._extension_prefixes.items() if p == prefix), None)

    def _add_extension_operand(self, code: int, dims: tuple[int, ...], scale: float, zero_point: int) -> int:
        """An operand of an extension type: its extension must be this model's and declared by a
        device, which says whether the type is a tensor."""
        what = f"add_operand (operand {len(self._operands)})"
        name = self._prefix_name(code)
        check(name is not None, f"{what}: type {code} has prefix {ext.prefix_of(code)}, which this model has not "
                                "assigned (get_extension_operand_type gives the codes)")
        info = extension_operand_info(name, ext.within_extension(code))
        check(info is not None, f"{what}: no device declares operand type {ext.within_extension(code)} of "
                                f"extension {name}")
        for d in dims:
            check(isinstance(d, int) and d >= 0, f"{what}: dimensions {list(dims)} must be non-negative integers")
        check(info.is_tensor or not dims, f"{what}: scalar extension type with dimensions {list(dims)}")
        check(scale == 0 and zero_point == 0, f"{what}: an extension operand must have scale 0 and zero point 0 "
                                              "(its parameters go in its extension data)")
        self._extension_info[code] = info
        self._operands.append(Operand(code, dims, scale, zero_point))
        return len(self._operands) - 1

    def is_scalar(self, code) -> bool:
        info = self._extension_info.get(code)
        return code in SCALAR_TYPES if info is None else not info.is_tensor

    def dtype_of(self, code) -> np.dtype:
        """The element type of an operand type of this model (an extension's: opaque bytes)."""
        info = self._extension_info.get(code)
        return ext.dtype_of(info) if info is not None else DTYPES[code]

    def set_operand_symm_per_channel_quant_params(self, index: int, scales: Sequence[float], channel_dim: int) -> None:
        """ANeuralNetworksModel_setOperandSymmPerChannelQuantParams."""
        self._check_building("set_operand_symm_per_channel_quant_params")
        if scales is None:
            raise NnapiError(UNEXPECTED_NULL, "set_operand_symm_per_channel_quant_params: scales is None")
        operand = self._operand(index, "set_operand_symm_per_channel_quant_params")
        quant = ChannelQuant(tuple(float(s) for s in scales), int(channel_dim))
        validate_operand_type(operand.type, operand.dimensions, operand.scale, operand.zero_point, quant,
                              f"set_operand_symm_per_channel_quant_params (operand {index})")
        operand.channel_quant = quant

    def set_operand_value(self, index: int, value) -> None:
        """ANeuralNetworksModel_setOperandValue. ``value`` is a numpy array, a Python scalar or a
        bytes-like buffer of exactly the operand's size, or None to mark an optional operand
        omitted. Values up to 128 bytes are copied; larger ones are referenced, so the buffer
        must stay unchanged while the model is in use, as in the NDK."""
        if self._finished:
            raise NnapiError(BAD_STATE, "set_operand_value called on a finished model")
        operand = self._operand(index, "set_operand_value")
        if value is None:
            operand.lifetime, operand.value = Lifetime.NO_VALUE, None
            return
        code = operand.type
        if code == _SUBGRAPH:
            raise NnapiError(ResultCode.BAD_DATA, f"set_operand_value: operand {index} is a SUBGRAPH; "
                                                  "use set_operand_value_from_model")
        extension = type(code) is not OperandCode  # built-in operands hold an OperandCode, extension ones an int
        dtype = self.dtype_of(code) if extension else DTYPES[code]
        dims = operand.dimensions
        if not ((self.is_scalar(code) if extension else code in SCALAR_TYPES) or (dims and 0 not in dims)):
            raise NnapiError(ResultCode.BAD_DATA, f"set_operand_value: operand {index} has unspecified dimensions "
                                                  f"{list(dims)}")
        needed = dtype.itemsize * math.prod(dims)
        if extension and not isinstance(value, np.ndarray):
            try:
                raw = _as_bytes_view(value)  # an extension's value: bytes only its driver can read
            except TypeError:
                raise NnapiError(ResultCode.BAD_DATA, f"set_operand_value: value of type {type(value).__name__} "
                                                      "is not a buffer") from None
        elif isinstance(value, (bool, int, float, np.generic)) or (isinstance(value, (list, tuple))):
            raw = np.asarray(value, dtype).reshape(-1).view(np.uint8)
        else:
            try:
                raw = _as_bytes_view(value)
            except TypeError:
                raise NnapiError(ResultCode.BAD_DATA, f"set_operand_value: value of type {type(value).__name__} "
                                                      "is not a buffer") from None
        if raw.nbytes != needed:
            raise NnapiError(ResultCode.BAD_DATA, f"set_operand_value: operand {index} needs {needed} bytes, "
                                                  f"got {raw.nbytes}")
        copy = raw.nbytes <= MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES
        operand.lifetime = Lifetime.CONSTANT_COPY if copy else Lifetime.CONSTANT_REFERENCE
        data = raw.copy() if copy else raw
        operand.value = data.view(dtype)

    def set_operand_value_from_memory(self, index: int, memory, offset: int, length: int) -> None:
        """ANeuralNetworksModel_setOperandValueFromMemory: the value lives in ``memory``."""
        self._check_building("set_operand_value_from_memory")
        if memory is None:
            raise NnapiError(UNEXPECTED_NULL, "set_operand_value_from_memory: memory is None")
        operand = self._operand(index, "set_operand_value_from_memory")
        shared = memory.shared_region("set_operand_value_from_memory")
        dtype = self.dtype_of(operand.type)
        dims = operand.dimensions
        check(self.is_scalar(operand.type) or (dims and 0 not in dims),
              f"set_operand_value_from_memory: operand {index} has unspecified dimensions {list(dims)}")
        needed = dtype.itemsize * math.prod(dims)
        check(length == needed, f"set_operand_value_from_memory: operand {index} needs {needed} bytes, got {length}")
        check(0 <= offset and offset + length <= shared.size,
              f"set_operand_value_from_memory: [{offset}, {offset + length}) exceeds the memory's {shared.size} bytes")
        operand.lifetime = Lifetime.CONSTANT_REFERENCE
        region = shared.buffer[offset:offset + length]
        operand.value = (region if offset % dtype.itemsize == 0 else region.copy()).view(dtype)

    def set_operand_value_from_model(self, index: int, model: "Model") -> None:
        """ANeuralNetworksModel_setOperandValueFromModel: a SUBGRAPH operand naming a finished model."""
        self._check_building("set_operand_value_from_model")
        if model is None:
            raise NnapiError(UNEXPECTED_NULL, "set_operand_value_from_model: model is None")
        operand = self._operand(index, "set_operand_value_from_model")
        check(operand.type == OperandCode.SUBGRAPH,
              f"set_operand_value_from_model: operand {index} is {type_name(operand.type)}, not MODEL")
        check(model._finished, "set_operand_value_from_model: the referenced model is not finished")
        operand.lifetime = Lifetime.SUBGRAPH
        self._referenced[index] = model

    def add_operation(self, type: OperationCode | int, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """ANeuralNetworksModel_addOperation."""
        if self._finished:
            raise NnapiError(BAD_STATE, "add_operation called on a finished model")
        if inputs is None or outputs is None:
            raise NnapiError(UNEXPECTED_NULL, "add_operation: inputs or outputs is None")
        try:
            code = _OPERATION_CODES.get(type)
        except TypeError:  # unhashable
            code = None
        if code is None:
            if isinstance(type, (int, np.integer)) and ext.is_extension_type(type):
                return self._add_extension_operation(int(type), tuple(inputs), tuple(outputs))
            raise NnapiError(ResultCode.BAD_DATA, f"add_operation: invalid operation type {type}")
        inputs, outputs = tuple(inputs), tuple(outputs)
        operands = self._operands
        if not plain_indexes(inputs + outputs, len(operands)):
            for k in inputs + outputs:
                self._operand(k, f"add_operation ({code.name})")  # raises, naming the first bad index
        impl = ops.load_all().get(code)
        in_types = [operands[k].type for k in inputs]
        out_types = [operands[k].type for k in outputs]
        if impl is not None and impl.match(in_types, out_types) is None:
            raise NnapiError(ResultCode.BAD_DATA,
                             f"add_operation: {code.name} does not accept inputs "
                             f"({', '.join(type_name(t) for t in in_types)}) and outputs "
                             f"({', '.join(type_name(t) for t in out_types)})")
        for k in outputs:
            if operands[k].lifetime in _VALUE_LIFETIMES:
                raise NnapiError(ResultCode.BAD_DATA, f"add_operation ({code.name}): output operand {k} has a value set")
        self._operations.append(Operation(code, inputs, outputs))

    def _add_extension_operation(self, code: int, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> None:
        """An extension operation: of an extension this model assigned; only its driver knows its
        signature, so the runtime checks no more than the operand indexes (as NNAPI's does)."""
        name = self._prefix_name(code)
        check(name is not None, f"add_operation: type {code} has prefix {ext.prefix_of(code)}, which this model "
                                "has not assigned (get_extension_operation_type gives the codes)")
        for k in inputs + outputs:
            self._operand(k, f"add_operation ({name} operation {ext.within_extension(code)})")
        for k in outputs:
            if self._operands[k].lifetime in _VALUE_LIFETIMES:
                raise NnapiError(ResultCode.BAD_DATA, f"add_operation ({name} operation "
                                                      f"{ext.within_extension(code)}): output operand {k} has a value set")
        self._operations.append(Operation(code, inputs, outputs))

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """ANeuralNetworksModel_identifyInputsAndOutputs."""
        self._check_building("identify_inputs_and_outputs")
        if inputs is None or outputs is None:
            raise NnapiError(UNEXPECTED_NULL, "identify_inputs_and_outputs: inputs or outputs is None")
        inputs, outputs = tuple(inputs), tuple(outputs)
        operands = self._operands
        for role, indexes in (("input", inputs), ("output", outputs)):
            # In C first (see plain_indexes); the loop names the first bad index
            if not (plain_indexes(indexes, len(operands)) and
                    _IO_LIFETIMES.issuperset(map(_LIFETIME, map(operands.__getitem__, indexes)))):
                for k in indexes:
                    if self._operand(k, f"identify_inputs_and_outputs ({role})").lifetime not in _IO_LIFETIMES:
                        raise NnapiError(ResultCode.BAD_DATA, f"identify_inputs_and_outputs: {role} operand {k} "
                                                              "already has a value")
            if len(set(indexes)) != len(indexes):
                raise NnapiError(ResultCode.BAD_DATA, f"identify_inputs_and_outputs: an {role} is listed twice")
        check(set(inputs).isdisjoint(outputs), "identify_inputs_and_outputs: an operand is both input and output")
        if self._inputs is not None:  # called again: the previous inputs and outputs are plain operands again
            for operand in operands:
                if operand.lifetime == _INPUT or operand.lifetime == _OUTPUT:
                    operand.lifetime = _TEMPORARY
        for k in inputs:
            operands[k].lifetime = _INPUT
        for k in outputs:
            operands[k].lifetime = _OUTPUT
        self._inputs, self._outputs = inputs, outputs

    def relax_computation_float32_to_float16(self, allow: bool) -> None:
        """ANeuralNetworksModel_relaxComputationFloat32toFloat16."""
        self._check_building("relax_computation_float32_to_float16")
        self._relaxed = bool(allow)

    def finish(self) -> None:
        """ANeuralNetworksModel_finish: validate the whole graph and freeze the model."""
        self._check_building("finish")
        check(self._inputs is not None, "finish: identify_inputs_and_outputs was not called")
        with trace.span("preparation", "runtime", "ModelBuilder::finish"):
            self._finish()

    def _finish(self) -> None:
        hal = self._to_hal()
        # add_operand and set_operand_symm_per_channel_quant_params checked the operand types
        self.feature_level = validate_model(hal, declared_extensions(), strict=True, operand_types_checked=True)
        # Drivers receive operations in execution order, as NNAPI's runtime hands them over;
        # ``_run_order[i]`` is the index the application gave the i-th operation of the HAL model.
        self._run_order = topological_order(hal.main)
        hal.main.operations = [hal.main.operations[j] for j in self._run_order]
        for sg in hal.referenced:
            sg.operations = [sg.operations[j] for j in topological_order(sg)]
        note_runtime_validated(hal, self.feature_level)  # drivers it is handed to need not validate it again
        self._hal = hal
        self._finished = True
        if vlog.on["model"]:
            vlog.info("ModelBuilder", "finish: %d operands, %d operations, %d referenced subgraphs, feature level %d",
                      len(hal.main.operands), len(hal.main.operations), len(hal.referenced), self.feature_level)

    def get_supported_operations_for_devices(self, devices) -> list[bool]:
        """ANeuralNetworksModel_getSupportedOperationsForDevices: per operation of the main
        model, whether any of ``devices`` supports it."""
        if devices is None:
            raise NnapiError(UNEXPECTED_NULL, "get_supported_operations_for_devices: devices is None")
        check(self._finished, "get_supported_operations_for_devices: the model is not finished", BAD_STATE)
        devices = list(devices)
        check(len(devices) > 0, "get_supported_operations_for_devices: no devices given")
        supported = [False] * len(self._operations)  # in the HAL model's (run) order
        for device in devices:
            try:
                flags = device.driver.get_supported_operations(self._hal)
            except HostResourceError:  # the host's failure, not the driver's
                raise
            except Exception as e:  # a driver failing the query supports nothing
                raise NnapiError(ResultCode.OP_FAILED, f"get_supported_operations on {device.name}: {e}") from None
            if len(flags) != len(supported):
                raise NnapiError(ResultCode.OP_FAILED, f"{device.name} returned {len(flags)} flags for "
                                                       f"{len(supported)} operations")
            supported = [a or bool(b) for a, b in zip(supported, flags)]
        by_added_order = [False] * len(supported)
        for flag, j in zip(supported, self._run_order):
            by_added_order[j] = flag
        return by_added_order

    # -- what the runtime uses -------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def hal_model(self) -> HalModel:
        if self._hal is None:
            raise NnapiError(BAD_STATE, "the model is not finished")
        return self._hal

    @property
    def input_count(self) -> int:
        return len(self._inputs or ())

    @property
    def output_count(self) -> int:
        return len(self._outputs)

    def _subgraph(self, referenced: list[Subgraph], index_of: dict[int, int]) -> Subgraph:
        """This model as a Subgraph, adding the models it references to ``referenced``."""
        operands = [Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime, o.value, o.channel_quant,
                            o.extension_data) for o in self._operands]
        for k in sorted(self._referenced):  # in operand order: the referenced subgraphs' numbering
            operands[k].value = self._referenced[k]._add_to(referenced, index_of)
        operations = [Operation(op.type, op.inputs, op.outputs) for op in self._operations]
        return Subgraph(operands, operations, tuple(self._inputs or ()), self._outputs)

    def _add_to(self, referenced: list[Subgraph], index_of: dict[int, int]) -> int:
        if id(self) not in index_of:
            index_of[id(self)] = -1  # placeholder against self reference
            sg = self._subgraph(referenced, index_of)
            referenced.append(sg)
            index_of[id(self)] = len(referenced) - 1
        return index_of[id(self)]

    def _to_hal(self) -> HalModel:
        referenced: list[Subgraph] = []
        main = self._subgraph(referenced, {id(self): -1})
        used = dict(self._extension_prefixes)
        stack, seen = list(self._referenced.values()), set()
        while stack:  # the extensions of the IF/WHILE bodies, numbered alike
            model = stack.pop()
            if id(model) not in seen:
                seen.add(id(model))
                used.update(model._extension_prefixes)
                stack.extend(model._referenced.values())
        prefixes = [ExtensionNameAndPrefix(n, p) for n, p in sorted(used.items(), key=lambda item: item[1])]
        return HalModel(main, referenced, self._relaxed, prefixes)
