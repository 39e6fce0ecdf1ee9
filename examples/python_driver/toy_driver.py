"""A minimal NNAPI driver in Python, to copy: ADD on TENSOR_FLOAT32 (with its fused activation).

Every method of the driver interface (``nnapi_ref.hal``) is written out below, each with a comment
on what a real driver does there. The toy "accelerator" is numpy; everything else is what a real
driver must do too: validate every model and request it is given (VTS calls these methods
directly, with nothing in between), report every operation it cannot run as unsupported, and
execute on every path the HAL has (synchronous, callback, fenced, burst).

Run the conformance suite against it from the repository root:

    PYTHONPATH=examples/python_driver pytest cts vts -n 2 --driver toy_driver:make_device -m op_ADD

ADD on float32 passes; every other test is skipped as unsupported.
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np

from nnapi_ref import hal
# The checks every driver needs and no driver should write twice, reused from the reference
# driver: the whole-model validation (operand types, lifetimes, index ranges, each operand written
# once, execution order, the signature of every NNAPI operation, no recursive subgraphs), the
# preference / priority / deadline checks of a prepare, and the deadline check of an execution.
from nnapi_ref.drivers.reference import check_deadline, check_prepare_arguments, validate_for_driver
from nnapi_ref.hal import ArgumentLifetime, ErrorStatus, HalError
from nnapi_ref.types import (SCALAR_TYPES, DeviceTypeCode, FeatureLevel, Lifetime, OperandCode, OperationCode,
                             combine_dimensions)

CONSTANTS = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
FUSED_ACTIVATIONS = {0: (-math.inf, math.inf), 1: (0.0, math.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}  # NONE, RELU, RELU1, RELU6
MAX_RANK = 4  # NNAPI's ADD takes tensors of up to 4 dimensions


def invalid(message: str) -> HalError:
    return HalError(ErrorStatus.INVALID_ARGUMENT, message)


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NNAPI's (numpy's) broadcasting of two fully known shapes; None if they do not broadcast."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) if 0 not in (x, y) else 0 for x, y in zip(a, b))


def known(dims: tuple[int, ...]) -> bool:
    return len(dims) > 0 and 0 not in dims


class ToyDevice(hal.Device):
    """The driver (IDevice): what the runtime asks before it compiles anything."""

    def get_name(self) -> str:
        # Unique among the device's drivers; apps select devices by it.
        return "toy-add"

    def get_version_string(self) -> str:
        # The driver build: the runtime keys its compilation cache on name and version.
        return "toy-add 1.0"

    def get_type(self) -> DeviceTypeCode:
        # ACCELERATOR for an NPU/DSP, GPU for a GPU driver; this one computes on the host CPU.
        return DeviceTypeCode.CPU

    def get_feature_level(self) -> int:
        # The NNAPI level the driver implements (here the latest: fenced execution, deadlines,
        # bursts are all exercised). Models needing a higher level are never given to it.
        return int(FeatureLevel.LEVEL_7)

    def get_capabilities(self) -> hal.Capabilities:
        # Measured speed and power relative to the CPU reference (lower is better); the runtime's
        # partitioner gives each operation to the fastest device that supports it. One entry per
        # operand type the driver computes with, sorted by type, never SUBGRAPH.
        fast = hal.PerformanceInfo(exec_time=0.5, power_usage=0.5)
        return hal.Capabilities(
            relaxed_float32_to_float16_performance_scalar=fast,
            relaxed_float32_to_float16_performance_tensor=fast,
            operand_performance=[(OperandCode.INT32, fast), (OperandCode.TENSOR_FLOAT32, fast)],
            if_performance=hal.PerformanceInfo(math.inf, math.inf),  # no control flow
            while_performance=hal.PerformanceInfo(math.inf, math.inf))

    def get_supported_extensions(self) -> list[hal.Extension]:
        # Vendor operations and operand types ("com.acme.fancy_op") would be declared here.
        return []

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        # (model cache files, data cache files) the driver wants to save a compilation into.
        # A driver whose compilation takes long asks for some; this one compiles nothing.
        return (0, 0)

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        # One flag per operation of the main subgraph. An invalid model is INVALID_ARGUMENT here
        # already, not just at prepare (VTS checks both).
        validate_for_driver(model)
        return [self._supports(model.main, op) for op in model.main.operations]

    def _supports(self, sg: hal.Subgraph, op: hal.Operation) -> bool:
        """ADD on TENSOR_FLOAT32 (relaxed models too: float32 is precise enough for them) with a
        constant fused activation; the model is valid, so the other operands' types follow."""
        return (op.type == OperationCode.ADD and sg.operands[op.inputs[0]].type == OperandCode.TENSOR_FLOAT32
                and sg.operands[op.inputs[2]].lifetime in CONSTANTS)

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        # A real driver compiles here: lowers the graph to the accelerator's instructions, lays
        # out memory, uploads the constants (weights) once. Everything that can be checked
        # without the inputs is checked now, so an invalid model fails here, not at execution.
        check_prepare_arguments(preference, priority, deadline_ns)
        validate_for_driver(model)
        if not all(self._supports(model.main, op) for op in model.main.operations):
            # The runtime never asks for this after get_supported_operations said no.
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the model has operations toy-add does not support")
        return ToyPreparedModel(model)

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        # A caching driver reads back what prepare_model saved under ``token`` into the cache
        # files, checks it is intact (a checksum: the files may be corrupted) and returns the
        # prepared model without compiling again. With no cache files asked for, there is none.
        raise HalError(ErrorStatus.GENERAL_FAILURE, "toy-add does not cache compilations")

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        # Memory domains: device memory the runtime passes between executions without copying
        # it back to the host (an activation kept in the NPU's SRAM). Optional; declining it
        # makes the runtime use shared memory instead.
        raise HalError(ErrorStatus.GENERAL_FAILURE, "toy-add allocates no device memory")


class ToyPreparedModel(hal.PreparedModel):
    """A compiled model: here the ADD operations in order, their constants copied."""

    def __init__(self, model: hal.Model):
        main = model.main
        self.inputs = [main.operands[k] for k in main.input_indexes]
        self.outputs = [main.operands[k] for k in main.output_indexes]
        self.input_indexes, self.output_indexes = main.input_indexes, main.output_indexes
        # Copy the constants: the caller's model (CONSTANT_REFERENCE memory included) may change or
        # go away once prepare returns. A real driver uploads them to the device here.
        self.constants = {k: np.array(o.value, np.float32).reshape(o.dimensions) for k, o in enumerate(main.operands)
                          if o.lifetime in CONSTANTS and o.type == OperandCode.TENSOR_FLOAT32}
        self.steps = []  # (input a, input b, fused activation code, output) per ADD
        shapes = {k: o.dimensions for k, o in enumerate(main.operands)}
        for j, op in enumerate(main.operations):
            a, b, fuse, out = op.inputs[0], op.inputs[1], op.inputs[2], op.outputs[0]
            code = int(np.asarray(main.operands[fuse].value).reshape(-1)[0])
            if code not in FUSED_ACTIVATIONS:
                raise invalid(f"operation {j}: fused activation code {code} is not one of 0..3")
            for k in (a, b):
                if len(shapes[k]) > MAX_RANK:
                    raise invalid(f"operation {j}: ADD input of rank {len(shapes[k])} > {MAX_RANK}")
            if known(shapes[a]) and known(shapes[b]):  # static shapes are checked now
                result = broadcast(shapes[a], shapes[b])
                if result is None:
                    raise invalid(f"operation {j}: shapes {list(shapes[a])} and {list(shapes[b])} do not broadcast")
                merged = combine_dimensions(shapes[out], result)
                if merged is None:
                    raise invalid(f"operation {j}: output dimensions {list(shapes[out])}, ADD gives {list(result)}")
                shapes[out] = merged
            self.steps.append((a, b, code, out))

    # -- the execution every path shares ---------------------------------------------------------
    def _run(self, request: hal.Request, measure: bool, deadline_ns) -> hal.ExecutionResult:
        start = time.monotonic_ns()
        check_deadline(deadline_ns, "execution")
        values = dict(self.constants)
        for k, array in zip(self.input_indexes, self._read_inputs(request)):
            values[k] = array  # a real driver DMAs the inputs into device memory here
        device_start = time.monotonic_ns()
        for a, b, code, out in self.steps:  # ... and starts the compiled program here
            x, y = values[a], values[b]
            if max(x.ndim, y.ndim) > MAX_RANK or broadcast(x.shape, y.shape) is None:  # shapes known only now
                raise invalid(f"ADD of shapes {list(x.shape)} and {list(y.shape)}: ranks above {MAX_RANK} "
                              f"or shapes that do not broadcast")
            low, high = FUSED_ACTIVATIONS[code]
            values[out] = np.clip(x + y, low, high).astype(np.float32)
        device_ns = time.monotonic_ns() - device_start
        results = [values[k] for k in self.output_indexes]
        shapes = self._write_outputs(request, results)  # ... and DMAs the outputs back
        timing = hal.Timing(device_ns, time.monotonic_ns() - start) if measure else hal.NO_TIMING
        return hal.ExecutionResult(shapes, timing)

    # -- reading and writing the request's memory ---------------------------------------------------
    # Written out rather than borrowed from the reference: where the bytes of an argument are is
    # each driver's own business (mapped shared memory, a DMA buffer, a device allocation).
    def _check_request(self, request: hal.Request) -> None:
        """Everything about a request that is wrong whatever the inputs' values: INVALID_ARGUMENT
        before anything runs (for an asynchronous execution, before it is launched)."""
        if len(request.inputs) != len(self.inputs) or len(request.outputs) != len(self.outputs):
            raise invalid(f"request has {len(request.inputs)} inputs and {len(request.outputs)} outputs, "
                          f"the model {len(self.inputs)} and {len(self.outputs)}")
        for i, (arg, operand) in enumerate(zip(request.inputs, self.inputs)):
            region = self._region(request, arg, f"input {i}")
            dims = self._dimensions(operand, arg, f"input {i}")
            if not known(dims) and operand.type not in SCALAR_TYPES:
                raise invalid(f"input {i}: dimensions {list(dims)} not fully specified")
            needed = 4 * math.prod(dims)
            if region.nbytes != needed:
                raise invalid(f"input {i}: {region.nbytes} bytes given, {needed} needed")
        for i, (arg, operand) in enumerate(zip(request.outputs, self.outputs)):
            self._region(request, arg, f"output {i}")
            self._dimensions(operand, arg, f"output {i}")

    def _region(self, request: hal.Request, arg: hal.RequestArgument, what: str) -> np.ndarray:
        """The bytes an argument names, as a flat uint8 array."""
        if arg.lifetime == ArgumentLifetime.POINTER:  # in-process callers may pass their buffer
            if arg.pointer is None:
                raise invalid(f"{what}: POINTER argument without a buffer")
            pointer = arg.pointer
            return pointer.reshape(-1).view(np.uint8) if isinstance(pointer, np.ndarray) \
                else np.frombuffer(pointer, np.uint8)
        if arg.lifetime != ArgumentLifetime.POOL:  # NO_VALUE: ADD has no optional inputs
            raise invalid(f"{what}: argument lifetime {arg.lifetime!r}; ADD needs every input and output")
        if not 0 <= arg.pool_index < len(request.pools):
            raise invalid(f"{what}: pool {arg.pool_index} of {len(request.pools)}")
        pool = request.pools[arg.pool_index]
        if not isinstance(pool, hal.SharedMemory):  # a device memory token: this driver makes none
            raise invalid(f"{what}: pool {arg.pool_index} is not shared memory")
        if arg.offset < 0 or arg.length < 0 or arg.offset + arg.length > pool.size:
            raise invalid(f"{what}: bytes [{arg.offset}, {arg.offset + arg.length}) outside a pool of {pool.size}")
        return pool.buffer[arg.offset:arg.offset + arg.length]

    @staticmethod
    def _dimensions(operand: hal.Operand, arg: hal.RequestArgument, what: str) -> tuple[int, ...]:
        """The model's dimensions completed by the request's; a conflict is INVALID_ARGUMENT."""
        if operand.type in SCALAR_TYPES:
            if arg.dimensions:
                raise invalid(f"{what}: dimensions given for a scalar")
            return ()
        dims = combine_dimensions(operand.dimensions, arg.dimensions)
        if dims is None:
            raise invalid(f"{what}: dimensions {list(arg.dimensions)} conflict with the model's "
                          f"{list(operand.dimensions)}")
        return dims

    def _read_inputs(self, request: hal.Request) -> list[np.ndarray]:
        self._check_request(request)
        arrays = []
        for i, (arg, operand) in enumerate(zip(request.inputs, self.inputs)):
            region = self._region(request, arg, f"input {i}")
            arrays.append(region.copy().view(np.float32).reshape(self._dimensions(operand, arg, f"input {i}")))
        return arrays

    def _write_outputs(self, request: hal.Request, results: list[np.ndarray]) -> list[hal.OutputShape]:
        """Write every output, or none: an output buffer too small for its result (dynamic output
        shapes) is OUTPUT_INSUFFICIENT_SIZE with every output's actual shape."""
        regions, shapes = [], []
        for i, (arg, operand, result) in enumerate(zip(request.outputs, self.outputs, results)):
            dims = self._dimensions(operand, arg, f"output {i}")
            if combine_dimensions(dims, result.shape) is None:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"output {i}: computed shape {list(result.shape)}, expected {list(dims)}")
            region = self._region(request, arg, f"output {i}")
            regions.append(region)
            shapes.append(hal.OutputShape(tuple(result.shape), region.nbytes >= result.nbytes))
        if not all(shape.is_sufficient for shape in shapes):
            raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small", shapes)
        for region, result in zip(regions, results):
            region[:result.nbytes] = result.reshape(-1).view(np.uint8)
        return shapes

    # -- the execution paths ---------------------------------------------------------------------
    def execute_synchronously(self, request, measure, deadline_ns, loop_timeout_ns):
        # Blocks until the outputs are written. (loop_timeout_ns bounds WHILE loops: none here.)
        return self._run(request, measure, deadline_ns)

    def execute(self, request, measure, deadline_ns, loop_timeout_ns, callback):
        # Asynchronous: an invalid request fails the launch itself; the outcome of a valid one
        # arrives through the callback, from another thread (a real driver: its completion
        # interrupt or a worker queue).
        self._check_request(request)

        def work():
            try:
                result = self._run(request, measure, deadline_ns)
            except HalError as e:
                callback.notify(e.status, e.output_shapes, hal.NO_TIMING, e.message)
            except Exception as e:  # a bug must still answer the callback, or the caller waits forever
                callback.notify(ErrorStatus.GENERAL_FAILURE, [], hal.NO_TIMING, f"{type(e).__name__}: {e}")
            else:
                callback.notify(ErrorStatus.NONE, result.output_shapes, result.timing)
        threading.Thread(target=work, name="toy-add-execute", daemon=True).start()

    def execute_fenced(self, request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns):
        # Start once every fence in ``wait_for`` is signalled; return a fence for the outputs. A
        # real driver hands the fences to the hardware queue and returns at once; this one waits
        # and runs before returning, which the HAL allows. A fenced execution reports no output
        # shapes, so every output must be fully specified.
        launched = time.monotonic_ns()
        self._check_request(request)
        for i, (arg, operand) in enumerate(zip(request.outputs, self.outputs)):
            if not known(self._dimensions(operand, arg, f"output {i}")):
                raise invalid(f"execute_fenced: output {i} has unspecified dimensions")
        for fence in wait_for:
            if fence is None:
                raise invalid("execute_fenced: a null fence")
            remaining = None if deadline_ns is None else max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
            if not fence.wait(remaining):
                raise HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "deadline passed waiting for a fence")
            if fence.status != ErrorStatus.NONE:
                raise HalError(ErrorStatus.GENERAL_FAILURE, "a waited-for fence signalled an error")
        fenced = time.monotonic_ns()
        if timeout_after_fence_ns is not None:
            after = fenced + timeout_after_fence_ns
            deadline_ns = after if deadline_ns is None else min(deadline_ns, after)
        result = self._run(request, measure, deadline_ns)
        callback = hal.FencedExecutionCallback()
        if measure:
            now, device = time.monotonic_ns(), result.timing.time_on_device_ns
            callback.finish(ErrorStatus.NONE, hal.Timing(device, now - launched), hal.Timing(device, now - fenced))
        else:
            callback.finish(ErrorStatus.NONE, hal.NO_TIMING, hal.NO_TIMING)
        return hal.SyncFence.signalled(), callback

    def configure_execution_burst(self):
        # A burst is a session for many executions of this model in a row: a real driver keeps
        # the pools' mappings (by memory token) and a hot command queue between them.
        return ToyBurst(self)


class ToyBurst(hal.IBurst):
    def __init__(self, prepared: ToyPreparedModel):
        self.prepared = prepared

    def execute(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns):
        # Each pool comes with a token naming it across executions: a real driver looks the
        # token up to reuse the pool's mapping instead of mapping it again.
        if len(memory_identifier_tokens) != len(request.pools):
            raise invalid("burst: one memory identifier token per pool needed")
        return self.prepared._run(request, measure, deadline_ns)

    def release_memory_resource(self, memory_identifier_token):
        # The runtime freed the pool behind this token: drop any mapping cached for it.
        pass


def make_device() -> ToyDevice:
    """The factory the suite calls: ``--driver toy_driver:make_device``."""
    return ToyDevice()
