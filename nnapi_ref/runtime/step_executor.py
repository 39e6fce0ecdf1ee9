"""StepExecutor: runs an execution's plan, step by step, on the steps' devices.

As AOSP's StepExecutor runs each step of an ExecutionPlan for the ExecutionBuilder: a single-step
plan runs over the caller's buffers as they are (AOSP's mapInputsAndOutputsTrivially); a
multi-step plan runs its steps in order through intermediate arrays, growing an intermediate whose
size a driver reports insufficient. A driver that fails falls back to the CPU, a step at a time.
"""
from __future__ import annotations

import math

import numpy as np

from nnapi_ref import budget, hal, trace, vlog
from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.extensions import uses_extensions
from nnapi_ref.runtime.compilation import Burst, Compilation, ExecutionStep, call_driver, nnapi_error
from nnapi_ref.runtime.devices import MANAGER
from nnapi_ref.runtime.model import Model
from nnapi_ref.types import ResultCode

_NO_FALLBACK = (ResultCode.OUTPUT_INSUFFICIENT_SIZE, ResultCode.MISSED_DEADLINE_TRANSIENT,
                ResultCode.MISSED_DEADLINE_PERSISTENT)


class Binding:
    """What the caller bound to one input or output (AOSP's ModelArgumentInfo)."""

    __slots__ = ("kind", "view", "memory", "offset", "length", "dims")

    def __init__(self, kind: str, view=None, memory=None, offset=0, length=0, dims=()):
        self.kind = kind  # "pointer", "memory" or "omitted"
        self.view, self.memory, self.offset, self.length, self.dims = view, memory, offset, length, dims


def operand_size(types: Model, operand, dims) -> int | None:
    """Bytes of ``operand`` with dimensions ``dims``; None while a dimension is unknown."""
    if types.is_scalar(operand.type):
        return types.dtype_of(operand.type).itemsize
    if not dims or 0 in dims:
        return None
    return math.prod(dims) * types.dtype_of(operand.type).itemsize


class StepExecutor:
    """Runs the plan of ``compilation`` for one computation of an execution over its bindings.

    ``output_shapes`` and ``timing`` are what the computation reported, output shapes also when it
    failed for an insufficient output buffer. ``types`` is the model builder, which knows the
    element types and scalar-ness of operand types (extension types too).
    """

    def __init__(self, compilation: Compilation, types: Model, inputs: list[Binding], outputs: list[Binding],
                 measure: bool, loop_timeout_ns: int, hints: hal.Hints = hal.NO_HINTS):
        self.compilation = compilation
        self._hints = hints  # the execution's, for a single step on its one device
        self._types = types
        self._main = compilation.model.hal_model.main
        self._inputs, self._outputs = inputs, outputs
        self._measure, self._loop_timeout_ns = measure, loop_timeout_ns
        self.output_shapes: list[hal.OutputShape] | None = None
        self.timing = hal.NO_TIMING

    def compute(self, deadline, burst: Burst | None) -> None:
        """Run every step of the plan (in ``burst`` for a single-step plan)."""
        plan = self.compilation.plan
        if plan.single:
            step = plan.steps[0]
            try:
                result = self._execute_single(step, deadline, burst)
            except HostResourceError:  # the host's failure, not the driver's
                raise
            except Exception as e:
                error = self.recover(e, step, deadline)
                if error is not None:
                    raise error from None
                return
            self.output_shapes, self.timing = result.output_shapes, result.timing
        else:
            self._run_steps(plan.steps, deadline)

    # -- a single step over the caller's buffers ---------------------------------------------------

    def _execute_single(self, step: ExecutionStep, deadline, burst: Burst | None) -> hal.ExecutionResult:
        t0 = trace.now() if trace.on else 0
        request, finalize = self.single_request(step)
        if t0:
            trace.end(t0, "io", "runtime", "request")
            t0 = trace.now()
        if burst is not None:
            hal_burst = burst.for_step(step)
            for binding in self._inputs + self._outputs:
                if binding.kind == "memory":
                    binding.memory.seen_by(burst)
            args = (request, burst.tokens(request.pools), self._measure, deadline, self._loop_timeout_ns)
            if self._hints.hints:
                result = call_driver(step.device, "burst execute", hal_burst.execute_with_config, *args, self._hints)
            else:
                result = call_driver(step.device, "burst execute", hal_burst.execute, *args)
        elif self._hints.hints:
            result = call_driver(step.device, "execute", step.prepared.execute_synchronously_with_config, request,
                                 self._measure, deadline, self._loop_timeout_ns, self._hints)
        else:
            result = call_driver(step.device, "execute", step.prepared.execute_synchronously, request,
                                 self._measure, deadline, self._loop_timeout_ns)
        if t0:
            trace.end(t0, "compute", "runtime", f"execute on {step.device.name}")
            t0 = trace.now()
        finalize(result.output_shapes)
        if t0:
            trace.end(t0, "results", "runtime", "output shapes")
        return result

    def recover(self, failure: Exception, step: ExecutionStep, deadline) -> NnapiError | None:
        """After a driver's failure on a single step: see :meth:`recover_error`."""
        return self.recover_error(nnapi_error(failure, step.device, "execution"), step, deadline)

    def recover_error(self, error: NnapiError, step: ExecutionStep, deadline) -> NnapiError | None:
        """After a single-step failure: record output shapes, or fall back to the CPU. Returns
        the error to report, None if the CPU fallback succeeded."""
        if error.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE and error.output_shapes:
            self.output_shapes = list(error.output_shapes)
            return error
        if not self.compilation.fallback or error.code in _NO_FALLBACK or step.device is MANAGER.cpu or \
                uses_extensions(step.model):  # the CPU runs no extension
            return error
        if any(b.kind == "memory" and b.memory.buffer is not None for b in self._inputs + self._outputs):
            return error  # device memories live in the failed driver
        if vlog.on["execution"]:
            vlog.info("ExecutionBuilder", "execution on %s failed (%s: %s): CPU fallback", step.device.name,
                      error.code.name, error.message)
        try:
            cpu_step = self._cpu_step(step)
            result = self._execute_single(cpu_step, deadline, None)
        except NnapiError as e:
            return e
        self.output_shapes, self.timing = result.output_shapes, hal.NO_TIMING
        return None

    def _cpu_step(self, step: ExecutionStep) -> ExecutionStep:
        if step.cpu_fallback is None:
            cpu = MANAGER.cpu
            prepared = call_driver(cpu, "prepare_model", cpu.driver.prepare_model, step.model,
                                   self.compilation.preference, self.compilation.priority, None, (), (), None)
            step.cpu_fallback = ExecutionStep(cpu, step.operations, step.model, step.inputs, step.outputs, prepared)
        return step.cpu_fallback

    def single_request(self, step: ExecutionStep):
        """The request for a whole-model step, over the caller's buffers; and a function that
        finishes the outputs (device memory state) after success."""
        pools: list = []
        pool_index: dict[int, int] = {}
        device_outputs = []

        def argument(binding: Binding, i: int, is_input: bool) -> hal.RequestArgument:
            if binding.kind == "omitted":
                if is_input:
                    return hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE)
                operand = self._main.operands[self._main.output_indexes[i]]
                size = operand_size(self._types, operand, binding.dims)
                check(size is not None, f"output {i} is omitted but its dimensions are not specified")
                budget.check(size, f"omitted output {i}")
                scratch = np.zeros(size, np.uint8)
                return hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=scratch, length=size,
                                           dimensions=binding.dims)
            if binding.kind == "pointer":
                return hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=binding.view,
                                           length=binding.view.nbytes, dimensions=binding.dims)
            memory = binding.memory
            if memory.buffer is not None and memory.device is step.device:
                check(not is_input or memory.initialized, f"input {i}: the device memory is not initialized",
                      ResultCode.OP_FAILED)
                pool = memory.token
                if not is_input:
                    device_outputs.append((i, memory))
                offset, length = 0, 0
            elif memory.buffer is not None:
                raise NnapiError(ResultCode.OP_FAILED, f"{'input' if is_input else 'output'} {i}: device memory of "
                                                       f"{memory.device.name} used on {step.device.name}")
            else:
                check(not is_input or memory.initialized, f"input {i}: the memory is not initialized",
                      ResultCode.OP_FAILED)
                pool = memory.shared
                offset, length = binding.offset, binding.length
                if memory.desc is not None:
                    length = memory.size
                    if not is_input:
                        device_outputs.append((i, memory))
            key = id(pool) if not isinstance(pool, int) else ("token", pool)
            if key not in pool_index:
                pool_index[key] = len(pools)
                pools.append(pool)
            return hal.RequestArgument(hal.ArgumentLifetime.POOL, pool_index[key], offset, length,
                                       dimensions=binding.dims)

        inputs = [argument(b, i, True) for i, b in enumerate(self._inputs)]
        outputs = [argument(b, i, False) for i, b in enumerate(self._outputs)]

        def finalize(shapes) -> None:
            for i, memory in device_outputs:
                memory.initialized = True
                if shapes:
                    memory.dimensions = tuple(shapes[i].dimensions)
        return hal.Request(inputs, outputs, pools), finalize

    # -- steps through intermediate arrays -------------------------------------------------------

    def _read_binding(self, binding: Binding, operand, i: int) -> np.ndarray | None:
        """An input's value as an array (multi-step plans)."""
        if binding.kind == "omitted":
            return None
        scalar = self._types.is_scalar(operand.type)
        dims = binding.dims if not scalar else ()
        check(scalar or (dims and 0 not in dims),
              f"input {i}: dimensions {list(dims)} are not fully specified")
        dtype = self._types.dtype_of(operand.type)
        if binding.kind == "pointer":
            raw = binding.view
        elif binding.memory.buffer is not None:
            check(binding.memory.initialized, f"input {i}: the device memory is not initialized", ResultCode.OP_FAILED)
            staging = hal.SharedMemory(np.zeros(binding.memory._byte_size(), np.uint8))
            call_driver(binding.memory.device, "copy_to", binding.memory.buffer.copy_to, staging)
            raw = staging.buffer
        else:
            check(binding.memory.initialized, f"input {i}: the memory is not initialized", ResultCode.OP_FAILED)
            raw = binding.memory.shared.buffer[binding.offset:binding.offset + (binding.length or binding.memory.size)]
        return raw.copy().view(dtype).reshape(dims)

    def _write_binding(self, binding: Binding, array: np.ndarray, i: int) -> bool:
        """Store output ``i``; False when the caller's buffer is too small."""
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if binding.kind == "omitted":
            return True
        if binding.kind == "pointer":
            target = binding.view
        elif binding.memory.buffer is not None:
            call_driver(binding.memory.device, "copy_from", binding.memory.buffer.copy_from,
                        hal.SharedMemory(raw.copy()), array.shape)
            binding.memory.initialized, binding.memory.dimensions = True, array.shape
            return True
        else:
            memory = binding.memory
            length = binding.length if memory.desc is None else memory.size
            target = memory.shared.buffer[binding.offset:binding.offset + length]
            if memory.desc is not None:
                memory.initialized, memory.dimensions = True, array.shape
        if target.nbytes < raw.nbytes:
            return False
        target[:raw.nbytes] = raw
        return True

    def _run_steps(self, steps: list[ExecutionStep], deadline) -> None:
        main = self._main
        for role, bindings in (("input", self._inputs), ("output", self._outputs)):
            for i, binding in enumerate(bindings):
                check(binding.kind != "memory" or not binding.memory.is_image_buffer,
                      f"{role} {i}: a hardware buffer of a format other than BLOB cannot cross the steps of a "
                      f"partitioned plan (the runtime would read it on the CPU)", ResultCode.OP_FAILED)
        values: dict[int, np.ndarray | None] = {}
        t0 = trace.now() if trace.on else 0
        for i, (k, binding) in enumerate(zip(main.input_indexes, self._inputs)):
            values[k] = self._read_binding(binding, main.operands[k], i)
        if t0:
            trace.end(t0, "io", "runtime", "read inputs")
        for n, step in enumerate(steps):
            if vlog.on["execution"]:
                vlog.info("ExecutionPlan", "execute step %d on %s: operations %s", n, step.device.name,
                          step.operations)
            t0 = trace.now() if trace.on else 0
            try:
                self._run_step(step, values, deadline)
            finally:
                if t0:
                    trace.end(t0, "compute", "runtime", f"step {n} on {step.device.name}")
        t0 = trace.now() if trace.on else 0
        try:
            self._write_outputs(values)
        finally:
            if t0:
                trace.end(t0, "results", "runtime", "write outputs")

    def _write_outputs(self, values: dict) -> None:
        main = self._main
        shapes, ok = [], True
        for i, (k, binding) in enumerate(zip(main.output_indexes, self._outputs)):
            sufficient = self._write_binding(binding, values[k], i)
            shapes.append(hal.OutputShape(tuple(values[k].shape), sufficient))
            ok &= sufficient
        self.output_shapes = shapes
        if not ok:
            raise NnapiError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small")

    def _run_step(self, step: ExecutionStep, values: dict, deadline) -> None:
        """Run one step of a multi-step plan on its device, the CPU if it fails, and as a
        last resort the whole model on the CPU."""
        try:
            self._run_step_on(step, values, deadline)
            return
        except NnapiError as e:
            if not self.compilation.fallback or e.code in _NO_FALLBACK or step.device is MANAGER.cpu or \
                    uses_extensions(step.model):
                raise
            if vlog.on["execution"]:
                vlog.info("ExecutionBuilder", "step on %s failed (%s: %s): CPU fallback", step.device.name,
                          e.code.name, e.message)
        self._run_step_on(self._cpu_step(step), values, deadline)

    def _run_step_on(self, step: ExecutionStep, values: dict, deadline) -> None:
        sg = step.model.main
        inputs = []
        for k in step.inputs:
            value = values[k]
            if value is None:
                inputs.append(hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE))
            else:
                inputs.append(hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=value.reshape(-1).view(np.uint8),
                                                  length=value.nbytes, dimensions=value.shape))
        sizes = []
        for n, k in enumerate(step.outputs):
            operand = sg.operands[sg.output_indexes[n]]
            sizes.append(operand_size(self._types, operand, operand.dimensions) or 0)
        for _ in range(4):
            budget.check(sum(sizes), f"the outputs of a step on {step.device.name}")  # (sizes a driver reported too)
            buffers = [np.zeros(max(size, 1), np.uint8) for size in sizes]
            outputs = [hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=b[:size], length=size)
                       for b, size in zip(buffers, sizes)]
            try:
                result = call_driver(step.device, "execute", step.prepared.execute_synchronously,
                                     hal.Request(inputs, outputs, []), False, deadline, self._loop_timeout_ns)
            except NnapiError as e:
                if e.code != ResultCode.OUTPUT_INSUFFICIENT_SIZE or not e.output_shapes:
                    raise
                sizes = [operand_size(self._types, sg.operands[sg.output_indexes[n]], s.dimensions) or 0
                         for n, s in enumerate(e.output_shapes)]
                continue
            for n, (k, shape) in enumerate(zip(step.outputs, result.output_shapes)):
                dtype = self._types.dtype_of(sg.operands[sg.output_indexes[n]].type)
                values[k] = buffers[n][:sizes[n]].view(dtype).reshape(shape.dimensions)
            return
        raise NnapiError(ResultCode.OP_FAILED, f"step on {step.device.name}: output sizes never settled")
