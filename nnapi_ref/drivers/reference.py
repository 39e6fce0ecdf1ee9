"""``nnapi-reference``: the built-in CPU driver. It implements the whole driver interface
(:mod:`nnapi_ref.hal`) on top of the CPU executor, and validates every model and request
it is given, as a conforming driver must.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Sequence

import numpy as np

from nnapi_ref import extensions, hal, ops, trace
from nnapi_ref.drivers.cache import load_from_cache, save_to_cache
from nnapi_ref.errors import NnapiError
from nnapi_ref.executor import Executor, Plan, prepare_plans
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.ops import requantization
from nnapi_ref.types import (DTYPES, SCALAR_TYPES, DeviceTypeCode, FeatureLevel, Lifetime, OperandCode, PreferenceCode,
                             PriorityCode, ResultCode, combine_dimensions)
from nnapi_ref.validation import runtime_validated_level, validate_model

# How the executor's result codes travel back across the driver interface.
STATUS_OF_RESULT = {
    ResultCode.BAD_DATA: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.UNEXPECTED_NULL: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.OP_FAILED: ErrorStatus.GENERAL_FAILURE,
    ResultCode.OUT_OF_MEMORY: ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
    ResultCode.MISSED_DEADLINE_TRANSIENT: ErrorStatus.MISSED_DEADLINE_TRANSIENT,
    ResultCode.MISSED_DEADLINE_PERSISTENT: ErrorStatus.MISSED_DEADLINE_PERSISTENT,
    ResultCode.OUTPUT_INSUFFICIENT_SIZE: ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
}


def hal_error(e: NnapiError) -> HalError:
    return HalError(STATUS_OF_RESULT.get(e.code, ErrorStatus.GENERAL_FAILURE), e.message)


def validate_for_driver(model: hal.Model, extensions: Sequence[hal.Extension] = ()) -> int:
    """Validate a model handed to a driver (whose ``extensions`` it checks the operands of);
    INVALID_ARGUMENT if it is not valid."""
    try:
        level = validate_model(model, extensions)
    except NnapiError as e:
        raise hal_error(e) from None
    except Exception as e:  # the validator choking on a malformed model: the model is invalid
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"malformed model: {type(e).__name__}: {e}") from None
    problem = _hal_model_problem(model)
    if problem:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, problem)
    return level


def _hal_model_problem(model: hal.Model) -> str | None:
    """What the HAL requires beyond the shared validation: operations in execution order (each
    reads only operands already written; the runtime sorts models before handing them over)."""
    subgraphs = [("main", model.main)] + [(f"subgraph {k}", sg) for k, sg in enumerate(model.referenced)]
    for name, sg in subgraphs:
        written = {k for k, o in enumerate(sg.operands)
                   if o.lifetime not in (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT)}
        for j, op in enumerate(sg.operations):
            for k in op.inputs:
                if k not in written:
                    return f"{name} operation {j} reads operand {k} before it is written (not in execution order)"
            written.update(op.outputs)
    return None


class _ValidatedModels:
    """The last few models this driver validated, by identity: the runtime hands the same model
    to the supported-operations query and to prepare. (A caller that mutates a model in place
    after handing it over breaks the HAL's contract; VTS mutates copies.)"""

    SIZE = 8

    def __init__(self):
        self._entries: list[tuple[hal.Model, int]] = []
        self._lock = threading.Lock()

    def level(self, model: hal.Model, extensions: Sequence[hal.Extension] = ()) -> int:
        known = runtime_validated_level(model)  # the runtime's own model, validated and in execution order
        if known is not None:
            return known
        with self._lock:
            for known, level in self._entries:
                if known is model:
                    return level
        level = validate_for_driver(model, extensions)
        with self._lock:
            self._entries = [(model, level)] + self._entries[:self.SIZE - 1]
        return level


_PREFERENCES = frozenset(int(p) for p in PreferenceCode)
_PRIORITIES = frozenset({int(PriorityCode.LOW), int(PriorityCode.MEDIUM), int(PriorityCode.HIGH)})
_POINTER, _POOL, _NO_VALUE = hal.ArgumentLifetime.POINTER, hal.ArgumentLifetime.POOL, hal.ArgumentLifetime.NO_VALUE


def check_deadline(deadline_ns: int | None, what: str) -> None:
    """MISSED_DEADLINE_PERSISTENT when ``deadline_ns`` has passed (``what``: compilation, execution)."""
    if deadline_ns is not None and time.monotonic_ns() > deadline_ns:
        raise HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"the {what} deadline passed")


def check_prepare_arguments(preference, priority, deadline_ns: int | None) -> None:
    """What a prepare checks before the model: the preference and priority are NNAPI's, the
    deadline has not passed (shared with the drivers built on this one)."""
    if preference not in _PREFERENCES:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"invalid execution preference {preference}")
    if priority not in _PRIORITIES:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"invalid priority {priority}")
    check_deadline(deadline_ns, "compilation")


def check_hints(hints: hal.Hints) -> None:
    """What the HAL asks of a driver's hints before it may ignore them (the reference uses none):
    no token twice, and every token's prefix named by the mapping that comes with them."""
    prefixes = {p.prefix for p in hints.extension_name_to_prefix}
    if len(prefixes) != len(hints.extension_name_to_prefix) or \
            len({p.name for p in hints.extension_name_to_prefix}) != len(prefixes):
        raise HalError(ErrorStatus.INVALID_ARGUMENT, "hints: the extension name to prefix mapping is not one to one")
    tokens = [h.token for h in hints.hints]
    if len(set(tokens)) != len(tokens):
        raise HalError(ErrorStatus.INVALID_ARGUMENT, "hints: a token is repeated")
    for token in tokens:
        if (token >> 16) & 0xFFFF not in prefixes:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"hints: token {token:#x} has a prefix the mapping lacks")


class ReferenceDevice(hal.Device):
    """The CPU reference driver. ``name`` and ``feature_level`` may be set to impersonate older
    drivers (the runtime's tests partition across several instances). ``convention`` is the
    quantized arithmetic's: ``"nnapi"`` (AOSP's CPU implementation) or ``"tflite"`` (TensorFlow
    Lite's reference kernels: multiplier derivations, FULLY_CONNECTED, MEAN, comparisons,
    MAXIMUM/MINIMUM/SELECT and RESIZE_BILINEAR differ, see :mod:`nnapi_ref.ops.requantization`).
    Under "tflite" a MEAN may change the quantization, as TFLite's does (not valid NNAPI)."""

    def __init__(self, name: str = "nnapi-reference", feature_level: int = FeatureLevel.LEVEL_7,
                 performance: float = 1.0, convention: str = "nnapi"):
        if convention not in requantization.CONVENTIONS:
            raise ValueError(f"unknown convention {convention!r}; expected one of {requantization.CONVENTIONS}")
        self.convention = convention
        self.name = name
        self.feature_level = int(feature_level)
        info = hal.PerformanceInfo(performance, performance)
        self.capabilities = hal.Capabilities(
            relaxed_float32_to_float16_performance_scalar=info,
            relaxed_float32_to_float16_performance_tensor=info,
            operand_performance=[(code, info) for code in sorted(set(DTYPES) - {OperandCode.SUBGRAPH})],
            if_performance=info, while_performance=info)
        self._validated = _ValidatedModels()
        self._buffers: dict[int, ReferenceBuffer] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()

    # -- device information ---------------------------------------------------------------------
    def get_name(self) -> str:
        return self.name

    def get_version_string(self) -> str:
        return "nnapi_ref 0.1"

    def get_type(self) -> DeviceTypeCode:
        return DeviceTypeCode.CPU

    def get_feature_level(self) -> int:
        return self.feature_level

    def get_capabilities(self) -> hal.Capabilities:
        return self.capabilities

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (1, 1)

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        self._validated.level(model, self.get_supported_extensions())
        return [self._supports(model, model.main, operation) for operation in model.main.operations]

    def _supports(self, model: hal.Model, sg: hal.Subgraph, operation: hal.Operation) -> bool:
        """Implemented at this driver's feature level, and so is everything IF/WHILE would run."""
        if extensions.is_extension_type(operation.type):
            return self.supports_extension_operation(model, sg, operation)
        impl = ops.get(operation.type)
        sig = impl.match([sg.operands[k].type for k in operation.inputs],
                         [sg.operands[k].type for k in operation.outputs]) if impl else None
        if sig is None or sig.level > self.feature_level:
            return False
        for k in operation.inputs:
            if sg.operands[k].type == OperandCode.SUBGRAPH:
                inner = model.referenced[sg.operands[k].value]
                if not all(self._supports(model, inner, op) for op in inner.operations):
                    return False
        return True

    # -- compilation ------------------------------------------------------------------------------
    def check_extensions(self, model: hal.Model) -> None:
        """INVALID_ARGUMENT for a model using an extension this driver does not declare (or an
        operand of its types that breaks the declaration): it cannot be prepared here."""
        if not model.extension_name_to_prefix and not any(
                type(o.type) is not OperandCode and extensions.is_extension_type(o.type)  # never an OperandCode
                for sg in [model.main] + model.referenced for o in sg.operands):
            return
        try:
            validate_model(model, self.get_supported_extensions(), strict=True)
        except NnapiError as e:
            raise hal_error(e) from None
        for sg in [model.main] + model.referenced:
            for op in sg.operations:
                if extensions.is_extension_type(op.type) and not self.supports_extension_operation(model, sg, op):
                    name = extensions.prefix_map(model)[extensions.prefix_of(op.type)]
                    raise HalError(ErrorStatus.INVALID_ARGUMENT,
                                   f"{self.name} has no operation {extensions.within_extension(op.type)} of {name} "
                                   "with these operands")

    def supports_extension_operation(self, model: hal.Model, sg: hal.Subgraph, operation: hal.Operation) -> bool:
        """Whether this driver runs the extension operation with these operands (none here)."""
        return False

    def dtype_of(self, model: hal.Model, code) -> np.dtype:
        """The element type of an operand type of ``model`` (a driver's extension types: its own)."""
        return DTYPES[code]

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        if not trace.on:
            return self._prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        with trace.span("compilation", "driver", f"{self.name} prepareModel"):
            return self._prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)

    def _prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        check_prepare_arguments(preference, priority, deadline_ns)
        level = self._validated.level(model, self.get_supported_extensions())
        self.check_extensions(model)
        registry = ops.load_all()
        unsupported = sorted({op.type.name for sg in [model.main] + model.referenced for op in sg.operations
                              if op.type not in registry})
        if unsupported:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"operations not implemented: {', '.join(unsupported)}")
        if level > self.feature_level:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"model needs feature level {level}, {self.name} has {self.feature_level}")
        try:
            with requantization.using(self.convention):  # the operations' checks are the convention's
                plans = prepare_plans(model)
        except NnapiError as e:
            raise hal_error(e) from None
        prepared = ReferencePreparedModel(self, model, plans)
        if model_cache or data_cache:
            try:
                save_to_cache(model, model_cache, data_cache, token, self.get_number_of_cache_files_needed())
            except HalError:
                pass  # caching is best effort: wrong cache files leave nothing saved, the compilation stands
        return prepared

    def prepare_model_with_config(self, model, preference, priority, deadline_ns, model_cache, data_cache, token,
                                  hints):
        check_hints(hints)
        return self.prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        check_deadline(deadline_ns, "compilation")
        model = load_from_cache(model_cache, data_cache, token, self.get_number_of_cache_files_needed())
        return self.prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, deadline_ns,
                                  (), (), None)

    # -- memory domains ---------------------------------------------------------------------------
    def allocate(self, desc, prepared_models, input_roles, output_roles):
        if not input_roles and not output_roles:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "allocate: no roles")
        operand = None
        seen = set()
        for role, is_input in [(r, True) for r in input_roles] + [(r, False) for r in output_roles]:
            if not 0.0 < role.probability <= 1.0:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"allocate: role probability {role.probability} "
                                                              f"outside (0, 1]")
            if (role.model_index, role.io_index, is_input) in seen:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"allocate: role {role} given twice")
            seen.add((role.model_index, role.io_index, is_input))
            if not 0 <= role.model_index < len(prepared_models):
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"allocate: role names model {role.model_index}")
            prepared = prepared_models[role.model_index]
            if not isinstance(prepared, ReferencePreparedModel) or prepared.device is not self:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "allocate: a prepared model is not from this driver")
            main = prepared.model.main
            indexes = main.input_indexes if is_input else main.output_indexes
            if not 0 <= role.io_index < len(indexes):
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"allocate: role index {role.io_index} out of range")
            candidate = main.operands[indexes[role.io_index]]
            if operand is not None and (candidate.type, candidate.scale, candidate.zero_point) != \
                    (operand.type, operand.scale, operand.zero_point):
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "allocate: roles of different operand types")
            operand = candidate if operand is None else operand
            dims = combine_dimensions(operand.dimensions, candidate.dimensions)
            if dims is None:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "allocate: roles with incompatible dimensions")
            operand = hal.Operand(operand.type, dims, operand.scale, operand.zero_point)
        dims = combine_dimensions(operand.dimensions, tuple(desc.dimensions))
        if dims is None:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "allocate: dimensions incompatible with the roles")
        roles = {(id(prepared_models[r.model_index]), r.io_index, True) for r in input_roles}
        roles |= {(id(prepared_models[r.model_index]), r.io_index, False) for r in output_roles}
        buffer = ReferenceBuffer(operand.type, dims, roles, self.dtype_of(prepared.model, operand.type))
        with self._lock:
            token = next(self._tokens)
            self._buffers[token] = buffer
        return buffer, token

    def buffer(self, token: int) -> "ReferenceBuffer":
        buffer = self._buffers.get(token)
        if buffer is None:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"unknown device memory token {token}")
        return buffer


def tflite_convention() -> ReferenceDevice:
    """The reference driver computing quantized operations as TensorFlow Lite's reference kernels
    do (driver string ``nnapi_ref.drivers.reference:tflite_convention``), where the default NNAPI
    convention (AOSP's arithmetic) differs from them."""
    return ReferenceDevice(convention="tflite")


class ReferenceBuffer(hal.Buffer):
    """Device memory of the reference driver: a typed array and whether it holds data yet."""

    def __init__(self, type_: OperandCode, dimensions: tuple[int, ...], roles, dtype: np.dtype | None = None):
        self.type = type_
        self.dimensions = dimensions
        self.roles = roles
        self.dtype = dtype if dtype is not None else DTYPES[type_]
        self.data: np.ndarray | None = None

    def copy_to(self, destination: hal.SharedMemory) -> None:
        if self.data is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, "copy from an uninitialized device memory")
        raw = self.data.reshape(-1).view(np.uint8)
        if destination.size != raw.nbytes:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"copy of {raw.nbytes} bytes into a memory of {destination.size}")
        destination.buffer[:] = raw

    def copy_from(self, source: hal.SharedMemory, dimensions: Sequence[int]) -> None:
        dims = combine_dimensions(self.dimensions, tuple(dimensions))
        if dims is None or not dims or 0 in dims or 0 in tuple(dimensions):  # given dimensions: all specified
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"copy with dimensions {list(dimensions)} into a memory of {list(self.dimensions)}")
        needed = math.prod(dims) * self.dtype.itemsize
        if source.size != needed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"copy of {source.size} bytes, expected {needed}")
        self.data = source.buffer.copy().view(self.dtype).reshape(dims)

    def write(self, array: np.ndarray) -> None:
        if combine_dimensions(self.dimensions, array.shape) is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"output of shape {list(array.shape)} into device memory of {list(self.dimensions)}")
        self.data = array.copy()


class ReferencePreparedModel(hal.PreparedModel):
    def __init__(self, device: ReferenceDevice, model: hal.Model, plans: list[Plan]):
        self.device = device
        self.model = model
        self.plans = plans

    # -- the one execution path every mode shares ---------------------------------------------
    def _run(self, request: hal.Request, measure: bool, deadline_ns, loop_timeout_ns) -> hal.ExecutionResult:
        if not trace.on:
            return self._run_request(request, measure, deadline_ns, loop_timeout_ns)
        with trace.span("execution", "driver", f"{self.device.name} execute"):
            return self._run_request(request, measure, deadline_ns, loop_timeout_ns)

    def _run_request(self, request: hal.Request, measure: bool, deadline_ns, loop_timeout_ns) -> hal.ExecutionResult:
        start = time.monotonic_ns()
        traced = trace.on
        check_deadline(deadline_ns, "execution")
        pools, inputs, outputs = self._check_request(request)
        self._check_inputs(inputs)
        executor = self._executor(deadline_ns, loop_timeout_ns)
        device_start = time.monotonic_ns()
        results = self._compute(executor, inputs)
        device_end = time.monotonic_ns()
        device_ns = device_end - device_start
        if traced:
            trace.record(start, device_start, "io", "driver", "read request")
            trace.record(device_start, device_end, "compute", "driver", "compute")
            results_start = trace.now()
        shapes = [hal.OutputShape(tuple(r.shape), True) for r in results]
        targets = []
        for i, ((region, dims), result) in enumerate(zip(outputs, results)):
            targets.append(self._output_target(i, region, dims, result, shapes[i]))
        if not all(s.is_sufficient for s in shapes):
            raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small", shapes)
        for target, result in zip(targets, results):
            if target is not None:
                target(result)
        if traced:
            trace.end(results_start, "results", "driver", "write outputs")
        timing = hal.Timing(device_ns, time.monotonic_ns() - start) if measure else hal.NO_TIMING
        return hal.ExecutionResult(shapes, timing)

    def _check_inputs(self, inputs: list) -> None:
        """Inputs the model's operations need are not omitted."""
        try:
            self.plans[0].check_omitted_inputs(inputs)
        except NnapiError as e:
            raise hal_error(e) from None

    def _executor(self, deadline_ns, loop_timeout_ns) -> Executor | None:
        """What :meth:`_compute` runs the inputs with (made before the device time starts)."""
        return Executor(self.plans, self.model.relax_computation_float32_to_float16, deadline_ns, loop_timeout_ns)

    def _compute(self, executor: Executor | None, inputs: list) -> list[np.ndarray]:
        """The outputs for ``inputs``, or a HalError: what a driver extending this one changes."""
        try:
            with requantization.using(self.device.convention):
                return executor.run(inputs)
        except NnapiError as e:
            raise hal_error(e) from None
        except Exception as e:  # an operation choking on its inputs: a failure, never a crash
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"execution failed: {type(e).__name__}: {e}") from None

    def _check_request(self, request: hal.Request):
        """Validate the whole request before anything runs; return its pools, its input arrays
        and, per output, where it goes (a region, or a device buffer) and its dimensions."""
        main = self.model.main
        if len(request.inputs) != len(main.input_indexes) or len(request.outputs) != len(main.output_indexes):
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"request has {len(request.inputs)} inputs and {len(request.outputs)} outputs, "
                           f"model has {len(main.input_indexes)} and {len(main.output_indexes)}")
        pools = [self._pool(p) for p in request.pools]
        inputs = [self._read_input(i, arg, pools) for i, arg in enumerate(request.inputs)]
        outputs = []
        for i, arg in enumerate(request.outputs):
            if arg.lifetime == _NO_VALUE:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"output {i}: outputs may not be omitted")
            region = self._region(arg, pools, "output", i)
            dims = None if isinstance(region, ReferenceBuffer) else \
                self._shape(main.operands[main.output_indexes[i]], arg, "output", i, need_known=False)
            outputs.append((region, dims))
        return pools, inputs, outputs

    def _pool(self, pool):
        if isinstance(pool, hal.SharedMemory):
            if pool.kind == hal.HARDWARE_BUFFER:
                raise HalError(ErrorStatus.GENERAL_FAILURE, "a hardware buffer of an image format cannot be mapped "
                                                            "for the CPU")
            return pool
        if isinstance(pool, (int, np.integer)):
            buffer = self.device.buffer(int(pool))
            return buffer
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"request pool of type {type(pool).__name__}")

    def _region(self, arg: hal.RequestArgument, pools, role: str, i: int):
        """The bytes of a POOL or POINTER argument (or the device buffer it names) of ``role``
        ("input" or "output") ``i``."""
        if arg.lifetime == _POINTER:
            if arg.pointer is None:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: POINTER argument without a buffer")
            return np.frombuffer(arg.pointer, np.uint8) if not isinstance(arg.pointer, np.ndarray) \
                else arg.pointer.reshape(-1).view(np.uint8)
        if arg.lifetime != _POOL:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: invalid argument lifetime {arg.lifetime}")
        if not 0 <= arg.pool_index < len(pools):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: pool {arg.pool_index} of {len(pools)}")
        pool = pools[arg.pool_index]
        if isinstance(pool, ReferenceBuffer):
            if arg.offset != 0 or arg.length != 0:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: device memory with offset or length")
            return pool
        if arg.offset < 0 or arg.length < 0 or arg.offset + arg.length > pool.size:
            raise HalError(ErrorStatus.INVALID_ARGUMENT,
                           f"{role} {i}: [{arg.offset}, {arg.offset + arg.length}) outside a pool of {pool.size} bytes")
        return pool.buffer[arg.offset:arg.offset + arg.length]

    def _shape(self, operand, arg, role: str, i: int, need_known: bool) -> tuple[int, ...]:
        if operand.type in SCALAR_TYPES:
            if arg.dimensions:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: dimensions given for a scalar")
            return ()
        dims = combine_dimensions(operand.dimensions, arg.dimensions)
        if dims is None:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: dimensions {list(arg.dimensions)} conflict "
                                                         f"with the model's {list(operand.dimensions)}")
        if need_known and (not dims or 0 in dims):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{role} {i}: dimensions {list(dims)} not fully specified")
        return dims

    def _read_input(self, i: int, arg: hal.RequestArgument, pools) -> np.ndarray | None:
        if arg.lifetime == _NO_VALUE:
            return None
        operand = self.model.main.operands[self.model.main.input_indexes[i]]
        region = self._region(arg, pools, "input", i)
        if isinstance(region, ReferenceBuffer):
            if (id(self), i, True) not in region.roles:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"input {i}: device memory not allocated for this role")
            if region.data is None:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"input {i}: device memory is uninitialized")
            return region.data
        dims = self._shape(operand, arg, "input", i, need_known=True)
        dtype = self.device.dtype_of(self.model, operand.type)
        needed = dtype.itemsize * math.prod(dims)
        if region.nbytes != needed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"input {i}: {region.nbytes} bytes given, {needed} needed")
        array = region.view(dtype)
        if not array.flags.aligned:  # the caller's bytes at an odd address: computed from an aligned copy
            array = region.copy().view(dtype)
        return array.reshape(dims)

    def _output_target(self, i, region, dims, result, shape: hal.OutputShape):
        """Check where output ``i`` goes (``_check_request``'s region and dimensions); return a
        function writing it there (None when the region is too small)."""
        if isinstance(region, ReferenceBuffer):
            if (id(self), i, False) not in region.roles:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"output {i}: device memory not allocated for this role")
            return region.write
        if combine_dimensions(dims, result.shape) is None and result.ndim:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"output {i}: computed shape {list(result.shape)} differs from {list(dims)}")
        if region.nbytes < result.nbytes:
            shape.is_sufficient = False
            return None

        def write(array: np.ndarray, region=region) -> None:
            region[:array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return write

    # -- execution modes ---------------------------------------------------------------------------
    def execute_synchronously(self, request, measure, deadline_ns, loop_timeout_ns):
        return self._run(request, measure, deadline_ns, loop_timeout_ns)

    def execute(self, request, measure, deadline_ns, loop_timeout_ns, callback):
        self._check_request(request)  # an invalid request fails the launch itself

        def work():
            try:
                result = self._run(request, measure, deadline_ns, loop_timeout_ns)
            except HalError as e:
                callback.notify(e.status, e.output_shapes, hal.NO_TIMING, e.message)
            else:
                callback.notify(ErrorStatus.NONE, result.output_shapes, result.timing)
        threading.Thread(target=work, name="nnapi-reference-execute", daemon=True).start()

    def execute_fenced(self, request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns):
        launched = time.monotonic_ns()
        self._check_outputs_specified(request)
        for fence in wait_for:
            if fence is None:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "execute_fenced: a null fence")
            remaining = None if deadline_ns is None else max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
            if not fence.wait(remaining):
                raise HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline passed waiting for a fence")
            if fence.status != ErrorStatus.NONE:
                raise HalError(ErrorStatus.GENERAL_FAILURE, "a waited-for fence signalled an error")
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:
            after = fenced + timeout_after_fence_ns
            deadline_ns = after if deadline_ns is None else min(deadline_ns, after)
        result = self._run(request, measure, deadline_ns, loop_timeout_ns)
        callback = hal.FencedExecutionCallback()
        if measure:
            now = time.monotonic_ns()
            device = result.timing.time_on_device_ns
            callback.finish(ErrorStatus.NONE, hal.Timing(device, now - launched), hal.Timing(device, now - fenced))
        else:
            callback.finish(ErrorStatus.NONE, hal.NO_TIMING, hal.NO_TIMING)
        return hal.SyncFence.signalled(), callback

    def configure_execution_burst(self):
        return ReferenceBurst(self)

    def execute_synchronously_with_config(self, request, measure, deadline_ns, loop_timeout_ns, hints):
        check_hints(hints)
        return self.execute_synchronously(request, measure, deadline_ns, loop_timeout_ns)

    def execute_with_config(self, request, measure, deadline_ns, loop_timeout_ns, callback, hints):
        check_hints(hints)
        self.execute(request, measure, deadline_ns, loop_timeout_ns, callback)

    def execute_fenced_with_config(self, request, wait_for, measure, deadline_ns, loop_timeout_ns,
                                   timeout_after_fence_ns, hints):
        check_hints(hints)
        return self.execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns)

    def _check_outputs_specified(self, request) -> None:
        """A fenced execution reports no output shapes: every output must be fully specified
        (by the model or the request) and not zero-sized."""
        main = self.model.main
        for i, arg in enumerate(request.outputs[:len(main.output_indexes)]):
            operand = main.operands[main.output_indexes[i]]
            if operand.type in SCALAR_TYPES or arg.lifetime == hal.ArgumentLifetime.NO_VALUE:
                continue
            dims = combine_dimensions(operand.dimensions, tuple(arg.dimensions))
            if arg.lifetime == hal.ArgumentLifetime.POOL and 0 <= arg.pool_index < len(request.pools) and \
                    isinstance(request.pools[arg.pool_index], (int, np.integer)):
                buffer = self.device._buffers.get(int(request.pools[arg.pool_index]))
                if buffer is not None and dims is not None:
                    dims = combine_dimensions(dims, buffer.dimensions)
            if dims is not None and (not dims or 0 in dims):
                raise HalError(ErrorStatus.INVALID_ARGUMENT,
                               f"execute_fenced: output {i} has unspecified dimensions {list(dims)}")


class ReferenceBurst(hal.IBurst):
    def __init__(self, prepared: ReferencePreparedModel):
        self.prepared = prepared

    def execute(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns):
        if len(memory_identifier_tokens) != len(request.pools):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "burst: one memory identifier token per pool needed")
        return self.prepared._run(request, measure, deadline_ns, loop_timeout_ns)

    def execute_with_config(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns, hints):
        check_hints(hints)
        return self.execute(request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns)
