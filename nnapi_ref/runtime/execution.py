"""Execution (ANeuralNetworksExecution) and Event (ANeuralNetworksEvent).

An execution binds inputs and outputs (caller buffers or Memory regions), then runs once
synchronously, asynchronously (an Event), in a Burst, or fenced after other events. For a
single-step plan the caller's buffers go to the driver as they are; a multi-step plan runs its
steps in order through intermediate arrays (the step executor), growing an intermediate whose
size a driver reports insufficient, and falling back to the CPU when a driver fails.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Sequence

import numpy as np

from nnapi_ref import hal, trace, vlog
from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.extensions import uses_extensions
from nnapi_ref.types import (LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, DurationCode,
                     ResultCode, type_name)
from nnapi_ref.runtime.compilation import RESULT_OF_STATUS, Burst, Compilation, Step, call_driver, nnapi_error
from nnapi_ref.runtime.devices import MANAGER
from nnapi_ref.runtime.memory import Memory
from nnapi_ref.runtime.model import OperandType

BAD_STATE = ResultCode.BAD_STATE
UINT64_MAX = (1 << 64) - 1
_NO_FALLBACK = (ResultCode.OUTPUT_INSUFFICIENT_SIZE, ResultCode.MISSED_DEADLINE_TRANSIENT,
                ResultCode.MISSED_DEADLINE_PERSISTENT)


class _Binding:
    """What the caller bound to one input or output."""

    __slots__ = ("kind", "view", "memory", "offset", "length", "dims")

    def __init__(self, kind: str, view=None, memory=None, offset=0, length=0, dims=()):
        self.kind = kind  # "pointer", "memory" or "omitted"
        self.view, self.memory, self.offset, self.length, self.dims = view, memory, offset, length, dims


def _merge_dims(declared: tuple, given: tuple):
    if not declared or not given:
        return declared or given
    if len(declared) != len(given) or any(d and g != d for d, g in zip(declared, given)):
        return None
    return tuple(given)


def _byte_view(buffer, writable: bool, what: str) -> np.ndarray:
    if isinstance(buffer, np.ndarray):
        flags = buffer.flags
        if not flags.c_contiguous:
            raise NnapiError(ResultCode.BAD_DATA, f"{what}: the array is not contiguous")
        if writable and not flags.writeable:
            raise NnapiError(ResultCode.BAD_DATA, f"{what}: the output array is read-only")
        return buffer.reshape(-1).view(np.uint8)
    try:
        view = memoryview(buffer)
    except TypeError:
        raise NnapiError(ResultCode.BAD_DATA, f"{what}: a {type(buffer).__name__} is not a buffer") from None
    check(not writable or not view.readonly, f"{what}: the output buffer is read-only")
    return np.frombuffer(view.cast("B"), np.uint8) if view.nbytes else np.zeros(0, np.uint8)


class Event:
    """ANeuralNetworksEvent: completion of an asynchronous or fenced execution, or of an outside
    sync fence (``from_sync_fence``)."""

    def __init__(self, fence: hal.SyncFence | None = None):
        self._done = threading.Event()
        self.error: NnapiError | None = None
        self.fence = fence           # what get_sync_fence returns
        self._completes_by_fence = False

    @classmethod
    def from_sync_fence(cls, fence: hal.SyncFence) -> "Event":
        """ANeuralNetworksEvent_createFromSyncFenceFd: the event is done when the fence fires."""
        if fence is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Event.from_sync_fence: fence is None")
        event = cls(fence)
        event._completes_by_fence = True
        return event

    def get_sync_fence(self) -> hal.SyncFence:
        """ANeuralNetworksEvent_getSyncFenceFd: BAD_DATA if the event has no fence."""
        check(self.fence is not None, "Event.get_sync_fence: the event has no sync fence")
        return self.fence

    def _complete(self, error: NnapiError | None) -> None:
        self.error = error
        self._done.set()

    def wait(self) -> None:
        """ANeuralNetworksEvent_wait: block until done; raise the execution's error."""
        if self._completes_by_fence and not self._done.is_set():
            self.fence.wait()
            self._complete(None if self.fence.status == hal.ErrorStatus.NONE else
                           NnapiError(ResultCode.OP_FAILED, "the sync fence signalled an error"))
        self._done.wait()
        if self.error is not None:
            raise self.error


class Execution:
    """ANeuralNetworksExecution."""

    def __init__(self, compilation: Compilation):
        if compilation is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Execution: compilation is None")
        check(compilation.finished, "Execution: the compilation is not finished", BAD_STATE)
        self.compilation = compilation
        model = compilation.model.hal_model
        self._types = compilation.model  # element types and scalar-ness, extension types too
        self._main = model.main
        self._inputs: list[_Binding | None] = [None] * len(self._main.input_indexes)
        self._outputs: list[_Binding | None] = [None] * len(self._main.output_indexes)
        self._measure = False
        self._timeout_ns: int | None = None
        self._loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        self._reusable = False
        self._state = "preparation"  # -> "computation" -> "completed"
        self._lock = threading.Lock()
        self._output_shapes: list[hal.OutputShape] | None = None
        self._timing = hal.NO_TIMING
        self._fenced_timing: tuple[hal.Timing, hal.Timing] | None = None
        self._last_error: NnapiError | None = None

    # -- binding -------------------------------------------------------------------------------

    def _check_not_computing(self, call: str) -> None:
        """BAD_STATE while computing, and once computed unless the execution is reusable."""
        if self._state == "computation":
            raise NnapiError(BAD_STATE, f"Execution.{call}: the execution is computing")
        if self._state == "completed" and not self._reusable:
            raise NnapiError(BAD_STATE, f"Execution.{call}: the execution has already been computed")

    def _check_preparation(self, call: str) -> None:
        self._check_not_computing(call)
        self._state = "preparation"

    def _operand(self, index: int, is_input: bool, call: str):
        indexes = self._main.input_indexes if is_input else self._main.output_indexes
        if not (isinstance(index, (int, np.integer)) and 0 <= index < len(indexes)):
            raise NnapiError(ResultCode.BAD_DATA, f"Execution.{call}: index {index} out of range "
                                                  f"({len(indexes)} {'inputs' if is_input else 'outputs'})")
        return self._main.operands[indexes[index]]

    def _dims(self, operand, type_: OperandType | None, call: str) -> tuple:
        if type_ is None:
            return tuple(operand.dimensions)
        check(type_.type == operand.type and type_.scale == operand.scale and type_.zero_point == operand.zero_point,
              f"Execution.{call}: type {type_name(type_.type)} (scale {type_.scale}, zero point {type_.zero_point}) "
              f"differs from the model's {type_name(operand.type)} (scale {operand.scale}, "
              f"zero point {operand.zero_point})")
        if self._types.is_scalar(operand.type):
            check(not type_.dimensions, f"Execution.{call}: dimensions given for a scalar")
            return ()
        dims = _merge_dims(tuple(operand.dimensions), type_.dimensions)
        check(dims is not None, f"Execution.{call}: dimensions {list(type_.dimensions)} conflict with the model's "
                                f"{list(operand.dimensions)}")
        return dims

    def _size(self, operand, dims) -> int | None:
        if self._types.is_scalar(operand.type):
            return self._types.dtype_of(operand.type).itemsize
        if not dims or 0 in dims:
            return None
        return math.prod(dims) * self._types.dtype_of(operand.type).itemsize

    def _bind(self, index, buffer, type_, is_input: bool) -> None:
        call = "set_input" if is_input else "set_output"
        self._check_preparation(call)
        operand = self._operand(index, is_input, call)
        if buffer is None:
            check(type_ is None, f"Execution.{call}: a type given for an omitted operand")
            (self._inputs if is_input else self._outputs)[index] = _Binding("omitted")
            return
        dims = self._dims(operand, type_, call)
        view = _byte_view(buffer, not is_input, f"Execution.{call}")
        size = self._size(operand, dims)
        if size is not None and view.nbytes != size:
            raise NnapiError(ResultCode.BAD_DATA, f"Execution.{call}: {'input' if is_input else 'output'} {index} "
                                                  f"needs {size} bytes, got {view.nbytes}")
        (self._inputs if is_input else self._outputs)[index] = _Binding("pointer", view, dims=dims)

    def _bind_memory(self, index, memory: Memory, offset: int, length: int, type_, is_input: bool) -> None:
        call = "set_input_from_memory" if is_input else "set_output_from_memory"
        self._check_preparation(call)
        if memory is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, f"Execution.{call}: memory is None")
        operand = self._operand(index, is_input, call)
        dims = self._dims(operand, type_, call)
        if memory.desc is not None:
            check(memory.desc.allows(self.compilation, index, is_input),
                  f"Execution.{call}: the memory's descriptor has no role for {'input' if is_input else 'output'} "
                  f"{index} of this compilation")
            check(offset == 0 and length == 0, f"Execution.{call}: memory from a descriptor needs offset 0 and length 0")
            merged = _merge_dims(dims, memory.dimensions)
            check(merged is not None, f"Execution.{call}: dimensions {list(dims)} conflict with the memory's "
                                      f"{list(memory.dimensions)}")
            dims = merged
        else:
            size = self._size(operand, dims)
            check(offset >= 0 and length >= 0 and offset + length <= memory.size,
                  f"Execution.{call}: [{offset}, {offset + length}) outside the memory's {memory.size} bytes")
            if size is not None:
                check(length == size,
                      f"Execution.{call}: {'input' if is_input else 'output'} {index} needs {size} bytes, got {length}")
        (self._inputs if is_input else self._outputs)[index] = _Binding("memory", None, memory, offset, length, dims)

    def set_input(self, index: int, buffer, type: OperandType | None = None) -> None:
        """ANeuralNetworksExecution_setInput; ``buffer`` None omits an optional input."""
        self._bind(index, buffer, type, True)

    def set_output(self, index: int, buffer, type: OperandType | None = None) -> None:
        """ANeuralNetworksExecution_setOutput: ``buffer`` (writable) receives the output."""
        self._bind(index, buffer, type, False)

    def set_input_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                              type: OperandType | None = None) -> None:
        self._bind_memory(index, memory, offset, length, type, True)

    def set_output_from_memory(self, index: int, memory: Memory, offset: int, length: int,
                               type: OperandType | None = None) -> None:
        self._bind_memory(index, memory, offset, length, type, False)

    def set_measure_timing(self, measure: bool) -> None:
        self._check_preparation("set_measure_timing")
        check(self.compilation.for_single_device,
              "Execution.set_measure_timing: only for a compilation created for exactly one device")
        self._measure = bool(measure)

    def set_timeout(self, duration_ns: int) -> None:
        """ANeuralNetworksExecution_setTimeout; 0 means none."""
        self._check_preparation("set_timeout")
        check(self.compilation.for_single_device,
              "Execution.set_timeout: only for a compilation created for exactly one device")
        check(duration_ns >= 0, f"Execution.set_timeout: negative duration {duration_ns}")
        self._timeout_ns = duration_ns or None

    def set_loop_timeout(self, duration_ns: int) -> None:
        """ANeuralNetworksExecution_setLoopTimeout; clamped to the 15 s maximum."""
        self._check_preparation("set_loop_timeout")
        check(duration_ns >= 0, f"Execution.set_loop_timeout: negative duration {duration_ns}")
        self._loop_timeout_ns = min(int(duration_ns), LOOP_TIMEOUT_MAXIMUM_NS)

    def set_reusable(self, reusable: bool) -> None:
        check(self._state == "preparation", "Execution.set_reusable: the execution has been computed", BAD_STATE)
        self._reusable = bool(reusable)

    # -- computing -----------------------------------------------------------------------------

    def _begin(self, call: str) -> int | None:
        with self._lock:
            self._check_not_computing(call)
            for role, bindings in (("input", self._inputs), ("output", self._outputs)):
                if None in bindings:
                    missing = [i for i, b in enumerate(bindings) if b is None]
                    raise NnapiError(ResultCode.BAD_DATA, f"Execution.{call}: {role}s {missing} are not set")
            self._state = "computation"
        self._output_shapes, self._timing, self._fenced_timing, self._last_error = None, hal.NO_TIMING, None, None
        return None if self._timeout_ns is None else time.monotonic_ns() + self._timeout_ns

    def _end(self, error: NnapiError | None) -> None:
        self._last_error = error
        self._state = "completed"

    def compute(self) -> None:
        """ANeuralNetworksExecution_compute: run synchronously."""
        deadline = self._begin("compute")
        self._finish_run(deadline, None)

    def burst_compute(self, burst: Burst) -> None:
        """ANeuralNetworksExecution_burstCompute."""
        if burst is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Execution.burst_compute: burst is None")
        check(burst.compilation is self.compilation,
              "Execution.burst_compute: the burst belongs to another compilation")
        with self._lock:
            check(not burst.busy, "Execution.burst_compute: the burst is in use by another execution", BAD_STATE)
            burst.busy = True
        try:
            deadline = self._begin("burst_compute")
            self._finish_run(deadline, burst)
        finally:
            burst.busy = False

    def start_compute(self) -> Event:
        """ANeuralNetworksExecution_startCompute: run asynchronously; wait on the Event."""
        deadline = self._begin("start_compute")
        event = Event()
        plan = self.compilation.plan
        if plan.single:
            step = plan.steps[0]
            try:
                request, finalize = self._single_request(step)
            except NnapiError as e:
                self._end(e)
                raise

            def on_finish(cb: hal.ExecutionCallback) -> None:
                error = None
                if cb.status == hal.ErrorStatus.NONE:
                    finalize(cb.output_shapes)
                    self._output_shapes, self._timing = cb.output_shapes, cb.timing
                else:
                    failure = hal.HalError(cb.status, cb.message, cb.output_shapes)
                    error = self._recover(failure, step, deadline)
                self._end(error)
                event._complete(error)

            try:
                with trace.span("execution", "runtime", "ExecutionBuilder::startCompute"):
                    step.prepared.execute(request, self._measure, deadline, self._loop_timeout_ns,
                                          hal.ExecutionCallback(on_finish))
            except Exception as e:
                error = self._recover(e, step, deadline)
                self._end(error)
                event._complete(error)
        else:
            def work():
                try:
                    self._finish_run(deadline, None)
                    event._complete(None)
                except NnapiError as e:
                    event._complete(e)
            threading.Thread(target=work, name="nnapi-execution", daemon=True).start()
        return event

    def start_compute_with_dependencies(self, dependencies: Sequence[Event], duration_ns: int = 0) -> Event:
        """ANeuralNetworksExecution_startComputeWithDependencies: start once ``dependencies``
        are signalled; ``duration_ns`` (single-device compilations only) bounds the time after that."""
        if dependencies is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Execution.start_compute_with_dependencies: dependencies is None")
        check(duration_ns == 0 or self.compilation.for_single_device,
              "Execution.start_compute_with_dependencies: a duration needs a compilation for exactly one device")
        for i, b in enumerate(self._outputs):
            operand = self._main.operands[self._main.output_indexes[i]]
            check(b is None or self._size(operand, b.dims) is not None,
                  f"Execution.start_compute_with_dependencies: output {i} has unspecified dimensions")
        deadline = self._begin("start_compute_with_dependencies")
        plan = self.compilation.plan
        fences = []
        for event in dependencies:
            if not event._completes_by_fence:
                try:
                    event.wait()
                except NnapiError as e:
                    error = NnapiError(ResultCode.OP_FAILED, f"a dependency failed: {e.message}")
                    self._end(error)
                    raise error from None
                fences.append(hal.SyncFence.signalled())
            else:
                fences.append(event.fence)
        if plan.single:
            step = plan.steps[0]
            try:
                request, finalize = self._single_request(step)
                fence, callback = call_driver(step.device, "execute_fenced", step.prepared.execute_fenced, request,
                                              fences, self._measure, deadline, self._loop_timeout_ns,
                                              duration_ns or None)
            except NnapiError as e:
                error = self._recover_error(e, step, deadline)
                self._end(error)
                if error is not None:
                    raise error from None
                return Event(hal.SyncFence.signalled())
            done = Event(fence)

            def complete():
                fence.wait()
                launched, fenced, status = callback.get_execution_info()
                if status == hal.ErrorStatus.NONE and fence.status == hal.ErrorStatus.NONE:
                    # Fenced executions need fully specified outputs: their shapes are the bound ones.
                    self._output_shapes = [hal.OutputShape(tuple(b.dims)) for b in self._outputs]
                    finalize(self._output_shapes)
                    self._fenced_timing = (launched, fenced)
                    self._end(None)
                    done._complete(None)
                else:
                    error = NnapiError(RESULT_OF_STATUS.get(status, ResultCode.OP_FAILED), "fenced execution failed")
                    self._end(error)
                    done._complete(error)
            if fence.is_signalled():
                complete()
            else:
                threading.Thread(target=complete, name="nnapi-fenced", daemon=True).start()
            return done
        for fence in fences:
            fence.wait()
            if fence.status != hal.ErrorStatus.NONE:
                error = NnapiError(ResultCode.OP_FAILED, "a dependency signalled an error")
                self._end(error)
                raise error
        self._finish_run(deadline, None)
        done = Event()
        done._complete(None)
        return done

    # -- results -------------------------------------------------------------------------------

    def _check_completed(self, call: str) -> None:
        check(self._state == "completed", f"Execution.{call}: the execution has not completed", BAD_STATE)

    def get_output_operand_rank(self, index: int) -> int:
        return len(self.get_output_operand_dimensions(index, "get_output_operand_rank"))

    def get_output_operand_dimensions(self, index: int, call: str = "get_output_operand_dimensions") -> tuple:
        self._check_completed(call)
        self._operand(index, False, call)
        check(self._output_shapes is not None, f"Execution.{call}: the execution failed", ResultCode.BAD_STATE)
        shape = self._output_shapes[index]
        if not shape.is_sufficient and self._last_error is not None:
            raise NnapiError(ResultCode.OUTPUT_INSUFFICIENT_SIZE,
                             f"Execution.{call}: output {index} buffer too small for {list(shape.dimensions)}")
        return tuple(shape.dimensions)

    def get_duration(self, code: DurationCode) -> int:
        """ANeuralNetworksExecution_getDuration in ns; UINT64_MAX when the driver did not measure it.
        BAD_STATE before completion, after a failure, or when timing was not requested. For an
        execution started without dependencies the FENCED_* durations equal the launched ones."""
        self._check_completed("get_duration")
        check(code in (0, 1, 2, 3), f"Execution.get_duration: invalid duration code {code}")
        check(self._measure, "Execution.get_duration: timing was not requested", BAD_STATE)
        check(self._last_error is None, "Execution.get_duration: the execution failed", BAD_STATE)
        launched, fenced = self._fenced_timing or (self._timing, self._timing)
        timing = fenced if code in (DurationCode.FENCED_ON_HARDWARE, DurationCode.FENCED_IN_DRIVER) else launched
        value = timing.time_on_device_ns if code in (DurationCode.ON_HARDWARE, DurationCode.FENCED_ON_HARDWARE) \
            else timing.time_in_driver_ns
        return UINT64_MAX if value < 0 else int(value)

    # -- the step executor ------------------------------------------------------------------------

    def _finish_run(self, deadline, burst: Burst | None) -> None:
        t0 = trace.now() if trace.on else 0
        try:
            self._run_plan(deadline, burst)
        except NnapiError as e:
            self._end(e)
            raise
        finally:
            if t0:
                trace.end(t0, "execution", "runtime", "ExecutionBuilder::compute")
        self._end(None)

    def _run_plan(self, deadline, burst: Burst | None) -> None:
        plan = self.compilation.plan
        if plan.single:
            step = plan.steps[0]
            try:
                result = self._execute_single(step, deadline, burst)
            except HostResourceError:  # the host's failure, not the driver's
                raise
            except Exception as e:
                error = self._recover(e, step, deadline)
                if error is not None:
                    raise error from None
                return
            self._output_shapes, self._timing = result.output_shapes, result.timing
        else:
            self._run_steps(plan.steps, deadline)

    def _execute_single(self, step: Step, deadline, burst: Burst | None) -> hal.ExecutionResult:
        t0 = trace.now() if trace.on else 0
        request, finalize = self._single_request(step)
        if t0:
            trace.end(t0, "io", "runtime", "request")
            t0 = trace.now()
        if burst is not None:
            hal_burst = burst.for_step(step)
            for binding in self._inputs + self._outputs:
                if binding.kind == "memory":
                    binding.memory.seen_by(burst)
            result = call_driver(step.device, "burst execute", hal_burst.execute, request,
                                 burst.tokens(request.pools), self._measure, deadline, self._loop_timeout_ns)
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

    def _recover(self, failure: Exception, step: Step, deadline) -> NnapiError | None:
        return self._recover_error(nnapi_error(failure, step.device, "execution"), step, deadline)

    def _recover_error(self, error: NnapiError, step: Step, deadline) -> NnapiError | None:
        """After a single-step failure: record output shapes, or fall back to the CPU. Returns
        the error to report, None if the CPU fallback succeeded."""
        if error.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE and error.output_shapes:
            self._output_shapes = list(error.output_shapes)
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
        self._output_shapes, self._timing = result.output_shapes, hal.NO_TIMING
        return None

    def _cpu_step(self, step: Step) -> Step:
        if step.cpu_fallback is None:
            cpu = MANAGER.cpu
            prepared = call_driver(cpu, "prepare_model", cpu.driver.prepare_model, step.model,
                                   self.compilation.preference, self.compilation.priority, None, (), (), None)
            step.cpu_fallback = Step(cpu, step.operations, step.model, step.inputs, step.outputs, prepared)
        return step.cpu_fallback

    def _single_request(self, step: Step):
        """The request for a whole-model step, over the caller's buffers; and a function that
        finishes the outputs (device memory state) after success."""
        pools: list = []
        pool_index: dict[int, int] = {}
        device_outputs = []

        def argument(binding: _Binding, i: int, is_input: bool) -> hal.RequestArgument:
            if binding.kind == "omitted":
                if is_input:
                    return hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE)
                operand = self._main.operands[self._main.output_indexes[i]]
                size = self._size(operand, binding.dims)
                check(size is not None, f"output {i} is omitted but its dimensions are not specified")
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

    def _read_binding(self, binding: _Binding, operand, i: int) -> np.ndarray | None:
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

    def _write_binding(self, binding: _Binding, array: np.ndarray, i: int) -> bool:
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

    def _run_steps(self, steps: list[Step], deadline) -> None:
        main = self._main
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
        self._output_shapes = shapes
        if not ok:
            raise NnapiError(ResultCode.OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small")

    def _run_step(self, step: Step, values: dict, deadline) -> None:
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

    def _run_step_on(self, step: Step, values: dict, deadline) -> None:
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
            sizes.append(self._size(operand, operand.dimensions) or 0)
        for _ in range(4):
            buffers = [np.zeros(max(size, 1), np.uint8) for size in sizes]
            outputs = [hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=b[:size], length=size)
                       for b, size in zip(buffers, sizes)]
            try:
                result = call_driver(step.device, "execute", step.prepared.execute_synchronously,
                                     hal.Request(inputs, outputs, []), False, deadline, self._loop_timeout_ns)
            except NnapiError as e:
                if e.code != ResultCode.OUTPUT_INSUFFICIENT_SIZE or not e.output_shapes:
                    raise
                sizes = [self._size(sg.operands[sg.output_indexes[n]], s.dimensions) or 0
                         for n, s in enumerate(e.output_shapes)]
                continue
            for n, (k, shape) in enumerate(zip(step.outputs, result.output_shapes)):
                dtype = self._types.dtype_of(sg.operands[sg.output_indexes[n]].type)
                values[k] = buffers[n][:sizes[n]].view(dtype).reshape(shape.dimensions)
            return
        raise NnapiError(ResultCode.OP_FAILED, f"step on {step.device.name}: output sizes never settled")
