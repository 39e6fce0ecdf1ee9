"""Execution (ANeuralNetworksExecution) and Event (ANeuralNetworksEvent).

An execution (AOSP's ExecutionBuilder) binds inputs and outputs (caller buffers or Memory
regions), then runs once synchronously, asynchronously (an Event), in a Burst, or fenced after
other events. It checks the calls and keeps the execution's state and results; a
:class:`~nnapi_ref.runtime.step_executor.StepExecutor` runs the compilation's plan over its
bindings.
"""
from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np

from nnapi_ref import hal, trace
from nnapi_ref.errors import NnapiError, check
from nnapi_ref.runtime.compilation import RESULT_OF_STATUS, Burst, Compilation, call_driver, with_attribute
from nnapi_ref.runtime.memory import Memory
from nnapi_ref.runtime.model import OperandType
from nnapi_ref.runtime.step_executor import Binding, StepExecutor, operand_size
from nnapi_ref.types import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, DurationCode, ResultCode, type_name

BAD_STATE = ResultCode.BAD_STATE
UINT64_MAX = (1 << 64) - 1


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
    """ANeuralNetworksExecution (AOSP's ExecutionBuilder): the request's bindings, state and
    results; a StepExecutor runs each computation."""

    def __init__(self, compilation: Compilation):
        if compilation is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Execution: compilation is None")
        check(compilation.finished, "Execution: the compilation is not finished", BAD_STATE)
        self.compilation = compilation
        model = compilation.model.hal_model
        self._types = compilation.model  # element types and scalar-ness, extension types too
        self._main = model.main
        self._inputs: list[Binding | None] = [None] * len(self._main.input_indexes)
        self._outputs: list[Binding | None] = [None] * len(self._main.output_indexes)
        self._measure = False
        self._timeout_ns: int | None = None
        self._loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        self._reusable = False
        self._padding_enabled = False
        self._bound_any = False  # enabling padding is refused once an input or output is set
        self._state = "preparation"  # -> "computation" -> "completed"
        self._lock = threading.Lock()
        self._output_shapes: list[hal.OutputShape] | None = None
        self._timing = hal.NO_TIMING
        self._fenced_timing: tuple[hal.Timing, hal.Timing] | None = None
        self._last_error: NnapiError | None = None
        self._hints = hal.NO_HINTS  # from add_extension_attribute

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

    def _bind(self, index, buffer, type_, is_input: bool) -> None:
        call = "set_input" if is_input else "set_output"
        self._check_preparation(call)
        operand = self._operand(index, is_input, call)
        if buffer is None:
            check(type_ is None, f"Execution.{call}: a type given for an omitted operand")
            (self._inputs if is_input else self._outputs)[index] = Binding("omitted")
            return
        dims = self._dims(operand, type_, call)
        view = _byte_view(buffer, not is_input, f"Execution.{call}")
        size = operand_size(self._types, operand, dims)
        if size is not None:
            self._check_length(view.nbytes, size, f"Execution.{call}: {'input' if is_input else 'output'} {index}")
            view = view[:size]  # padding is the application's room for the driver, not the operand's data
        self._bound_any = True
        (self._inputs if is_input else self._outputs)[index] = Binding("pointer", view, dims=dims)

    def _check_length(self, length: int, size: int, what: str) -> None:
        """The raw size exactly, or at least it once padding is enabled (NeuralNetworks.h)."""
        if self._padding_enabled:
            check(length >= size, f"{what} needs at least {size} bytes, got {length}")
        else:
            check(length == size, f"{what} needs {size} bytes, got {length}")

    def _bind_memory(self, index, memory: Memory, offset: int, length: int, type_, is_input: bool) -> None:
        call = "set_input_from_memory" if is_input else "set_output_from_memory"
        self._check_preparation(call)
        if memory is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, f"Execution.{call}: memory is None")
        operand = self._operand(index, is_input, call)
        dims = self._dims(operand, type_, call)
        if memory.is_image_buffer:
            check(offset == 0 and length == 0,
                  f"Execution.{call}: a hardware buffer of a format other than BLOB needs offset 0 and length 0")
            length = memory.size
        elif memory.desc is not None:
            check(memory.desc.allows(self.compilation, index, is_input),
                  f"Execution.{call}: the memory's descriptor has no role for {'input' if is_input else 'output'} "
                  f"{index} of this compilation")
            check(offset == 0 and length == 0, f"Execution.{call}: memory from a descriptor needs offset 0 and length 0")
            merged = _merge_dims(dims, memory.dimensions)
            check(merged is not None, f"Execution.{call}: dimensions {list(dims)} conflict with the memory's "
                                      f"{list(memory.dimensions)}")
            dims = merged
        else:
            size = operand_size(self._types, operand, dims)
            check(offset >= 0 and length >= 0 and offset + length <= memory.size,
                  f"Execution.{call}: [{offset}, {offset + length}) outside the memory's {memory.size} bytes")
            if size is not None:
                self._check_length(length, size, f"Execution.{call}: {'input' if is_input else 'output'} {index}")
                length = size
        self._bound_any = True
        (self._inputs if is_input else self._outputs)[index] = Binding("memory", None, memory, offset, length, dims)

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

    def enable_input_and_output_padding(self, enable: bool) -> None:
        """ANeuralNetworksExecution_enableInputAndOutputPadding: lengths beyond the raw size are
        accepted (the driver may use the extra bytes); only before any input or output is set."""
        check(self._state == "preparation" and not self._bound_any,
              "Execution.enable_input_and_output_padding: an input or output is already set", BAD_STATE)
        self._padding_enabled = bool(enable)

    def add_extension_attribute(self, extension_name: str, attribute_code: int, data: bytes | None) -> None:
        """ANeuralNetworksExecution_addExtensionAttribute: a vendor hint passed to the driver
        with each computation (execute_*_with_config)."""
        call = "Execution.add_extension_attribute"
        if extension_name is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, f"{call}: extension_name is None")
        check(self.compilation.for_single_device, f"{call}: only for an execution of a compilation created for "
                                                  "exactly one device")
        with self._lock:
            self._check_preparation("add_extension_attribute")
            self._hints = with_attribute(self._hints, extension_name, attribute_code, data, call)

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
            executor = self._step_executor()
            try:
                request, finalize = executor.single_request(step)
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
                    error = executor.recover(failure, step, deadline)
                    self._take_results(executor)
                self._end(error)
                event._complete(error)

            try:
                with trace.span("execution", "runtime", "ExecutionBuilder::startCompute"):
                    if self._hints.hints:
                        step.prepared.execute_with_config(request, self._measure, deadline, self._loop_timeout_ns,
                                                          hal.ExecutionCallback(on_finish), self._hints)
                    else:
                        step.prepared.execute(request, self._measure, deadline, self._loop_timeout_ns,
                                              hal.ExecutionCallback(on_finish))
            except Exception as e:
                error = executor.recover(e, step, deadline)
                self._take_results(executor)
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
            check(b is None or operand_size(self._types, operand, b.dims) is not None,
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
            executor = self._step_executor()
            try:
                request, finalize = executor.single_request(step)
                args = (request, fences, self._measure, deadline, self._loop_timeout_ns, duration_ns or None)
                if self._hints.hints:
                    fence, callback = call_driver(step.device, "execute_fenced",
                                                  step.prepared.execute_fenced_with_config, *args, self._hints)
                else:
                    fence, callback = call_driver(step.device, "execute_fenced", step.prepared.execute_fenced, *args)
            except NnapiError as e:
                error = executor.recover_error(e, step, deadline)
                self._take_results(executor)
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

    # -- running the plan --------------------------------------------------------------------------

    def _step_executor(self) -> StepExecutor:
        return StepExecutor(self.compilation, self._types, self._inputs, self._outputs, self._measure,
                            self._loop_timeout_ns, self._hints)

    def _take_results(self, executor: StepExecutor) -> None:
        self._output_shapes, self._timing = executor.output_shapes, executor.timing

    def _finish_run(self, deadline, burst: Burst | None) -> None:
        executor = self._step_executor()
        t0 = trace.now() if trace.on else 0
        try:
            executor.compute(deadline, burst)
        except NnapiError as e:
            self._take_results(executor)
            self._end(e)
            raise
        finally:
            if t0:
                trace.end(t0, "execution", "runtime", "ExecutionBuilder::compute")
        self._take_results(executor)
        self._end(None)
