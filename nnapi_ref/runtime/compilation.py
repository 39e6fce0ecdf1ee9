"""Compilation (ANeuralNetworksCompilation): partitioning a model into an ExecutionPlan.

Each operation goes to the device that supports it with the best performance for the
compilation's preference (the CPU reference device on ties); operations that run one after
another on the same device form a step. A single-step plan hands the whole model to its device.
With fallback allowed (not for an explicit device list), a step whose driver fails to prepare is
prepared on the CPU instead, and if the plan still cannot be made the whole model goes to the CPU.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import extensions as ext, hal, trace, vlog
from nnapi_ref.errors import HostResourceError, NnapiError, check
from nnapi_ref.hal import Model as HalModel, Operation
from nnapi_ref.runtime.devices import MANAGER, MIN_MEMORY_ALIGNMENT, MIN_MEMORY_PADDING, Device, Partitioning
from nnapi_ref.runtime.model import Model, extension_prefix
from nnapi_ref.types import (BYTE_SIZE_OF_CACHE_TOKEN, OperandCode, OperationCode, PreferenceCode, PriorityCode,
                             ResultCode)
from nnapi_ref.validation import topological_order

BAD_STATE = ResultCode.BAD_STATE

RESULT_OF_STATUS = {
    hal.ErrorStatus.NONE: ResultCode.NO_ERROR,
    hal.ErrorStatus.DEVICE_UNAVAILABLE: ResultCode.UNAVAILABLE_DEVICE,
    hal.ErrorStatus.GENERAL_FAILURE: ResultCode.OP_FAILED,
    hal.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: ResultCode.OUTPUT_INSUFFICIENT_SIZE,
    hal.ErrorStatus.INVALID_ARGUMENT: ResultCode.BAD_DATA,
    hal.ErrorStatus.MISSED_DEADLINE_TRANSIENT: ResultCode.MISSED_DEADLINE_TRANSIENT,
    hal.ErrorStatus.MISSED_DEADLINE_PERSISTENT: ResultCode.MISSED_DEADLINE_PERSISTENT,
    hal.ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
    hal.ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ResultCode.RESOURCE_EXHAUSTED_PERSISTENT,
    hal.ErrorStatus.DEAD_OBJECT: ResultCode.DEAD_OBJECT,
}


def nnapi_error(e: Exception, device: Device | None, what: str) -> NnapiError:
    """A driver failure as the NnapiError the application sees."""
    name = device.name if device is not None else "driver"
    if isinstance(e, NnapiError):
        return e
    if isinstance(e, hal.HalError):
        error = NnapiError(RESULT_OF_STATUS.get(e.status, ResultCode.OP_FAILED), f"{what} on {name}: {e.message}")
        error.output_shapes = e.output_shapes
        return error
    return NnapiError(ResultCode.OP_FAILED, f"{what} on {name}: driver raised {type(e).__name__}: {e}")


def call_driver(device: Device, what: str, fn, *args):
    """Call into a driver, turning any failure into an NnapiError."""
    try:
        return fn(*args)
    except HostResourceError:  # the host's, not the driver's: the caller reports it as such
        raise
    except Exception as e:  # a driver is foreign code: any exception is its failure
        raise nnapi_error(e, device, what) from None


@dataclass
class ExecutionStep:
    """One part of the plan (as AOSP's ExecutionStep): operations of the main model run by one device.

    ``inputs``/``outputs`` are the main-model operand indexes behind the step model's inputs and
    outputs; ``model`` is the whole model for a single-step plan.
    """

    device: Device
    operations: list[int]
    model: HalModel
    inputs: list[int]
    outputs: list[int]
    prepared: hal.PreparedModel | None = None
    cpu_fallback: "ExecutionStep | None" = None


@dataclass
class ExecutionPlan:
    """What a compilation made of its model (as AOSP's ExecutionPlan): the steps to run in order,
    or one step running the whole model (``single``)."""

    steps: list[ExecutionStep] = field(default_factory=list)

    @property
    def single(self) -> bool:
        return len(self.steps) == 1 and self.steps[0].operations is None


def _performance(device: Device, model: HalModel, operation: Operation, preference: PreferenceCode) -> float:
    caps = device.capabilities
    if operation.type == OperationCode.IF:
        info = caps.if_performance
    elif operation.type == OperationCode.WHILE:
        info = caps.while_performance
    else:
        operand = model.main.operands[operation.inputs[0]] if operation.inputs else None
        code = operand.type if operand is not None else OperandCode.TENSOR_FLOAT32
        if model.relax_computation_float32_to_float16 and code in (OperandCode.TENSOR_FLOAT32, OperandCode.FLOAT32):
            info = caps.relaxed_float32_to_float16_performance_tensor
        else:
            info = caps.performance(code)
    return info.power_usage if preference == PreferenceCode.LOW_POWER else info.exec_time


def _operation_name(code: int, names: dict[int, str]) -> str:
    if ext.is_extension_type(code):
        return f"operation {ext.within_extension(code)} of extension {names.get(ext.prefix_of(code), '?')}"
    return OperationCode(code).name


def partition(model: HalModel, devices: list[Device], preference: PreferenceCode,
              allow_cpu: bool) -> list[tuple[Device, list[int]]]:
    """Assign each operation to a device and group them into steps, in a valid order."""
    main = model.main
    supported: dict[int, list[bool]] = {}
    for device in devices:
        try:
            flags = device.driver.get_supported_operations(model)
            supported[id(device)] = list(flags) if len(flags) == len(main.operations) else [False] * len(main.operations)
        except HostResourceError:
            raise
        except Exception:  # a driver that can't answer supports nothing
            supported[id(device)] = [False] * len(main.operations)
    cpu = None  # the CPU fallback device, looked up once it matters
    assignment = []
    for j, operation in enumerate(main.operations):
        candidates = [d for d in devices if supported[id(d)][j]]
        if not candidates and ext.operation_uses_extension(main, operation):
            # No CPU fallback for an extension: the CPU knows none (NNAPI's runtime: BAD_DATA).
            names = ext.prefix_map(model)
            raise NnapiError(ResultCode.BAD_DATA, f"no device supports operation {j} "
                                                  f"({_operation_name(operation.type, names)})")
        if not candidates:
            if not allow_cpu:
                raise NnapiError(ResultCode.BAD_DATA, f"no device supports operation {j} "
                                                      f"({OperationCode(operation.type).name})")
            cpu = cpu or MANAGER.cpu
            candidates = [cpu]
        if len(candidates) == 1:
            best = candidates[0]
        else:
            cpu = cpu or MANAGER.cpu
            best = min(candidates, key=lambda d: (_performance(d, model, operation, preference), d is not cpu))
        assignment.append(best)
        if vlog.on["compilation"]:
            _log_decision(j, operation, devices, supported, candidates, best, model, preference)
    # Group: run ready operations on the current device as long as possible.
    order = topological_order(main)
    if all(device is assignment[0] for device in assignment):  # one device runs them all: one step
        if vlog.on["compilation"]:
            vlog.info("ExecutionPlan", "step 0: %s runs operations %s", assignment[0].name, order)
        return [(assignment[0], order)]
    rank = {j: i for i, j in enumerate(order)}
    writer = {k: j for j, op in enumerate(main.operations) for k in op.outputs}
    deps = {j: {writer[k] for k in op.inputs if k in writer} for j, op in enumerate(main.operations)}
    done: set[int] = set()
    steps: list[tuple[Device, list[int]]] = []
    remaining = sorted(range(len(main.operations)), key=rank.get)
    while remaining:
        ready = [j for j in remaining if deps[j] <= done]
        device = assignment[ready[0]] if not steps else next(
            (assignment[j] for j in ready if assignment[j] is steps[-1][0]), assignment[ready[0]])
        group = []
        progress = True
        while progress:
            progress = False
            for j in list(remaining):
                if assignment[j] is device and deps[j] <= done:
                    group.append(j)
                    done.add(j)
                    remaining.remove(j)
                    progress = True
        steps.append((device, group))
    if vlog.on["compilation"]:
        for n, (device, group) in enumerate(steps):
            vlog.info("ExecutionPlan", "step %d: %s runs operations %s", n, device.name, group)
    return steps


def _log_decision(j: int, operation: Operation, devices, supported, candidates, best, model, preference) -> None:
    """Why operation ``j`` went to ``best`` (AOSP's findBestDeviceForEachOperation log line)."""
    name = OperationCode(operation.type).name if operation.type in OperationCode._value2member_map_ \
        else str(operation.type)
    unsupported = [d.name for d in devices if not supported[id(d)][j]]
    if best not in devices:
        why = f"no listed device supports it ({', '.join(unsupported)}): CPU fallback"
    else:
        metric = "power_usage" if preference == PreferenceCode.LOW_POWER else "exec_time"
        costs = ", ".join(f"{d.name} {_performance(d, model, operation, preference):g}" for d in candidates)
        why = f"supported by {', '.join(d.name for d in candidates)}; {metric} for {preference.name}: {costs}"
        if unsupported:
            why += f"; not supported by {', '.join(unsupported)}"
        if len(candidates) > 1:
            why += "; best performance (the CPU on ties)"
    vlog.info("CompilationBuilder", "findBestDeviceForEachOperation(%s) operation %d: device %s: %s",
              name, j, best.name, why)


def with_attribute(hints: hal.Hints, extension_name: str, attribute_code: int, data, call: str) -> hal.Hints:
    """``hints`` and one more extension attribute, by AOSP's runtime rules: the token is the
    extension's prefix (numbered as for operand types) and the code; a token only once."""
    check(isinstance(extension_name, str) and extension_name, f"{call}: the extension name must be a non-empty string")
    check(isinstance(attribute_code, (int, np.integer)) and 0 <= attribute_code <= 0xFFFF,
          f"{call}: attribute code {attribute_code!r} is not a uint16")
    try:
        value = b"" if data is None else bytes(memoryview(data).cast("B"))
    except TypeError:
        raise NnapiError(ResultCode.BAD_DATA, f"{call}: data of type {type(data).__name__} is not bytes-like") from None
    prefix = extension_prefix(extension_name, call)
    token = prefix << 16 | int(attribute_code)
    check(all(h.token != token for h in hints.hints),
          f"{call}: attribute {attribute_code} of {extension_name} is already added")
    prefixes = hints.extension_name_to_prefix
    if all(p.prefix != prefix for p in prefixes):
        prefixes += (hal.ExtensionNameAndPrefix(extension_name, prefix),)
    return hal.Hints(hints.hints + (hal.TokenValuePair(token, value),), prefixes)


class Compilation:
    """ANeuralNetworksCompilation (AOSP's CompilationBuilder), which partitions the model into an
    :class:`ExecutionPlan`: ``Compilation(model)`` for all devices (with CPU fallback), or
    ``Compilation(model, devices)`` for an explicit list (no fallback)."""

    def __init__(self, model: Model, devices: list[Device] | None = None):
        if model is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Compilation: model is None")
        check(model.finished, "Compilation: the model is not finished", BAD_STATE)
        if devices is not None:
            devices = list(devices)
            check(len(devices) > 0, "Compilation: the device list is empty")
            check(all(isinstance(d, Device) for d in devices), "Compilation: device list holds a non-Device")
            check(len({id(d) for d in devices}) == len(devices), "Compilation: a device is listed twice")
        self.model = model
        self.explicit_devices = devices
        self.preference = PreferenceCode.FAST_SINGLE_ANSWER
        self.priority = PriorityCode.MEDIUM
        self.timeout_ns: int | None = None
        self.cache_dir: str | None = None
        self.token: bytes | None = None
        self.finished = False
        self.hints = hal.NO_HINTS  # from add_extension_attribute, for the one device
        self.plan = ExecutionPlan()
        self.fallback = devices is None and MANAGER.partitioning == Partitioning.WITH_FALLBACK

    def _check_building(self, call: str) -> None:
        check(not self.finished, f"Compilation.{call}: the compilation is finished", BAD_STATE)

    @property
    def devices(self) -> list[Device]:
        return self.explicit_devices if self.explicit_devices is not None else MANAGER.devices

    @property
    def for_single_device(self) -> bool:
        """Created for exactly one device: timing and timeouts are allowed."""
        return self.explicit_devices is not None and len(self.explicit_devices) == 1

    def set_preference(self, preference: int) -> None:
        self._check_building("set_preference")
        check(preference in (0, 1, 2), f"Compilation.set_preference: invalid preference {preference}")
        self.preference = PreferenceCode(preference)

    def set_priority(self, priority: int) -> None:
        self._check_building("set_priority")
        check(priority in (90, 100, 110), f"Compilation.set_priority: invalid priority {priority} "
                                          "(must be LOW 90, MEDIUM 100 or HIGH 110)")
        self.priority = PriorityCode(priority)

    def set_timeout(self, duration_ns: int) -> None:
        """ANeuralNetworksCompilation_setTimeout; 0 means no timeout."""
        self._check_building("set_timeout")
        check(self.for_single_device, "Compilation.set_timeout: only for a compilation created for one device")
        check(duration_ns >= 0, f"Compilation.set_timeout: negative duration {duration_ns}")
        self.timeout_ns = duration_ns or None

    def set_caching(self, cache_dir: str, token: bytes) -> None:
        self._check_building("set_caching")
        if cache_dir is None or token is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Compilation.set_caching: cache_dir or token is None")
        check(len(token) == BYTE_SIZE_OF_CACHE_TOKEN,
              f"Compilation.set_caching: token must be {BYTE_SIZE_OF_CACHE_TOKEN} bytes, got {len(token)}")
        self.cache_dir, self.token = str(cache_dir), bytes(token)

    def add_extension_attribute(self, extension_name: str, attribute_code: int, data: bytes | None) -> None:
        """ANeuralNetworksCompilation_addExtensionAttribute: a vendor hint for the driver,
        passed to it with the model (prepare_model_with_config)."""
        if extension_name is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Compilation.add_extension_attribute: extension_name is None")
        self._check_building("add_extension_attribute")
        check(self.for_single_device, "Compilation.add_extension_attribute: only for a compilation created for "
                                      "exactly one device")
        self.hints = with_attribute(self.hints, extension_name, attribute_code, data,
                                    "Compilation.add_extension_attribute")

    # -- finish ----------------------------------------------------------------------------------

    def finish(self) -> None:
        self._check_building("finish")
        with trace.span("compilation", "runtime", "CompilationBuilder::finish"):
            self._finish()

    def _finish(self) -> None:
        deadline = None if self.timeout_ns is None else time.monotonic_ns() + self.timeout_ns
        model = self.model.hal_model
        if self.explicit_devices is None and MANAGER.partitioning == Partitioning.NONE:
            self.plan = ExecutionPlan([self._single_step(MANAGER.cpu, model, deadline)])
        else:
            try:
                self.plan = self._partitioned_plan(model, deadline)
            except NnapiError as e:
                if not self.fallback or e.code in (ResultCode.MISSED_DEADLINE_PERSISTENT,
                                                   ResultCode.MISSED_DEADLINE_TRANSIENT) or ext.uses_extensions(model):
                    raise
                if vlog.on["compilation"]:
                    vlog.info("CompilationBuilder", "partitioned plan failed (%s: %s): the whole model on the CPU",
                              e.code.name, e.message)
                self.plan = ExecutionPlan([self._single_step(MANAGER.cpu, model, deadline)])
        self.finished = True

    def _partitioned_plan(self, model: HalModel, deadline) -> ExecutionPlan:
        with trace.span("compilation", "runtime", "partition"):
            groups = partition(model, self.devices, self.preference, allow_cpu=self.fallback)
        if len(groups) == 1:
            return ExecutionPlan([self._single_step(groups[0][0], model, deadline)])
        steps = []
        for device, operations in groups:
            sub, inputs, outputs = hal.step_model(model, operations)
            step = ExecutionStep(device, operations, sub, inputs, outputs)
            self._prepare_with_fallback(step, deadline, cache=False)
            steps.append(step)
        return ExecutionPlan(steps)

    def _single_step(self, device: Device, model: HalModel, deadline) -> ExecutionStep:
        main = model.main
        if vlog.on["compilation"]:
            vlog.info("ExecutionPlan", "single step: %s runs the whole model (%d operations)", device.name,
                      len(main.operations))
        step = ExecutionStep(device, None, model, list(main.input_indexes), list(main.output_indexes))
        self._prepare_with_fallback(step, deadline, cache=True)
        return step

    def _prepare_with_fallback(self, step: ExecutionStep, deadline, cache: bool) -> None:
        """Prepare ``step`` on its device or, when that fails and fallback is allowed, on the CPU."""
        try:
            step.prepared = self._prepare(step.device, step.model, deadline, cache)
        except NnapiError as e:
            if not self.fallback or step.device is MANAGER.cpu or ext.uses_extensions(step.model):
                raise
            if vlog.on["compilation"]:
                vlog.info("CompilationBuilder", "prepare on %s failed (%s: %s): CPU fallback", step.device.name,
                          e.code.name, e.message)
            step.device = MANAGER.cpu
            step.prepared = self._prepare(MANAGER.cpu, step.model, deadline, cache=False)

    def _prepare(self, device: Device, model: HalModel, deadline, cache: bool) -> hal.PreparedModel:
        if not trace.on:
            return self._prepare_on(device, model, deadline, cache)
        with trace.span("compilation", "runtime", f"prepare on {device.name}"):
            return self._prepare_on(device, model, deadline, cache)

    def _prepare_on(self, device: Device, model: HalModel, deadline, cache: bool) -> hal.PreparedModel:
        driver = device.driver
        if cache and self.token is not None:
            counts = call_driver(device, "get_number_of_cache_files_needed", driver.get_number_of_cache_files_needed)
            if counts[0] or counts[1]:
                return self._prepare_with_cache(device, model, deadline, counts)
        return self._call_prepare(device, model, deadline, (), (), None)

    def _call_prepare(self, device: Device, model: HalModel, deadline, model_cache, data_cache, token):
        driver = device.driver
        if self.hints.hints:
            return call_driver(device, "prepare_model", driver.prepare_model_with_config, model, self.preference,
                               self.priority, deadline, model_cache, data_cache, token, self.hints)
        return call_driver(device, "prepare_model", driver.prepare_model, model, self.preference, self.priority,
                           deadline, model_cache, data_cache, token)

    def _prepare_with_cache(self, device: Device, model: HalModel, deadline, counts) -> hal.PreparedModel:
        """Reload a compilation saved under this token if the driver accepts it, else prepare and save."""
        driver = device.driver
        key = hashlib.sha256(self.token + device.name.encode() + device.version.encode()).hexdigest()[:32]
        names = [os.path.join(self.cache_dir, f"{key}.model{i}") for i in range(counts[0])]
        names += [os.path.join(self.cache_dir, f"{key}.data{i}") for i in range(counts[1])]
        if all(os.path.exists(n) for n in names):
            files = [open(n, "rb") for n in names]
            try:
                prepared = driver.prepare_model_from_cache(deadline, files[:counts[0]], files[counts[0]:], self.token)
                if vlog.on["compilation"]:
                    vlog.info("CompilationBuilder", "cache hit on %s (%s)", device.name, key)
                return prepared
            except Exception as e:  # a stale or corrupted cache: compile from the model instead
                if vlog.on["compilation"]:
                    vlog.info("CompilationBuilder", "cache entry on %s rejected (%s): compiling", device.name, e)
            finally:
                for f in files:
                    f.close()
        elif vlog.on["compilation"]:
            vlog.info("CompilationBuilder", "cache miss on %s (%s)", device.name, key)
        try:  # the folder is the application's, as in the NDK: never created here
            files = [open(n, "w+b") for n in names]
        except OSError:
            files = None  # caching is best effort, as in the NDK
        if files is None:
            return self._call_prepare(device, model, deadline, (), (), None)
        try:
            return self._call_prepare(device, model, deadline, files[:counts[0]], files[counts[0]:], self.token)
        finally:
            for f in files:
                f.close()

    # -- what executions and memories use ------------------------------------------------------

    def get_preferred_memory_alignment_for_input(self, index: int) -> int:
        """ANeuralNetworksCompilation_getPreferredMemoryAlignmentForInput: a power of 2, in bytes."""
        return self._memory_preference(index, True, "get_preferred_memory_alignment_for_input")[0]

    def get_preferred_memory_padding_for_input(self, index: int) -> int:
        """ANeuralNetworksCompilation_getPreferredMemoryPaddingForInput: a power of 2, in bytes."""
        return self._memory_preference(index, True, "get_preferred_memory_padding_for_input")[1]

    def get_preferred_memory_alignment_for_output(self, index: int) -> int:
        """ANeuralNetworksCompilation_getPreferredMemoryAlignmentForOutput: a power of 2, in bytes."""
        return self._memory_preference(index, False, "get_preferred_memory_alignment_for_output")[0]

    def get_preferred_memory_padding_for_output(self, index: int) -> int:
        """ANeuralNetworksCompilation_getPreferredMemoryPaddingForOutput: a power of 2, in bytes."""
        return self._memory_preference(index, False, "get_preferred_memory_padding_for_output")[1]

    def _memory_preference(self, index: int, is_input: bool, call: str) -> tuple[int, int]:
        """(alignment, padding) for a model input or output: the largest that any step reading or
        writing it prefers, as AOSP's ExecutionPlan combines its steps' devices; the minimum when
        no step touches it."""
        check(self.finished, f"Compilation.{call}: the compilation is not finished", BAD_STATE)
        main = self.model.hal_model.main
        indexes = main.input_indexes if is_input else main.output_indexes
        check(isinstance(index, int) and 0 <= index < len(indexes),
              f"Compilation.{call}: index {index} out of range ({len(indexes)} {'inputs' if is_input else 'outputs'})")
        operand = indexes[index]
        preferences = [step.device.memory_preference for step in self.plan.steps
                       if operand in (step.inputs if is_input else step.outputs)]
        if not preferences:
            return MIN_MEMORY_ALIGNMENT, MIN_MEMORY_PADDING
        return max(a for a, _ in preferences), max(p for _, p in preferences)

    @property
    def single_device(self) -> Device:
        return self.plan.steps[0].device if self.plan.single else None

    @property
    def single_prepared_model(self) -> hal.PreparedModel | None:
        return self.plan.steps[0].prepared if self.plan.single else None


class Burst:
    """ANeuralNetworksBurst: reusable context for repeated executions of one compilation, holding
    a driver's :class:`nnapi_ref.hal.IBurst` per prepared model it runs on."""

    def __init__(self, compilation: Compilation):
        if compilation is None:
            raise NnapiError(ResultCode.UNEXPECTED_NULL, "Burst: compilation is None")
        check(compilation.finished, "Burst: the compilation is not finished", BAD_STATE)
        self.compilation = compilation
        self.hal_bursts: dict[int, tuple[Device, hal.IBurst]] = {}
        self.busy = False
        self._tokens: dict[tuple, tuple[int, object]] = {}  # pool -> (memory identifier token, pool)
        self._next_token = 1

    @staticmethod
    def _key(pool) -> tuple:
        return ("shared", id(pool)) if isinstance(pool, hal.SharedMemory) else ("device", int(pool))

    def tokens(self, pools) -> list[int]:
        """A memory identifier token per request pool, the same for the same memory until the
        memory is freed and another for any other memory: a driver may cache a pool's mapping
        by its token. The burst keeps its pools, so no other memory can take their identity."""
        tokens = []
        for pool in pools:
            key = self._key(pool)
            if key not in self._tokens:
                self._tokens[key] = (self._next_token, pool)
                self._next_token += 1
            tokens.append(self._tokens[key][0])
        return tokens

    def release(self, pool) -> None:
        """The memory behind ``pool`` is freed (ANeuralNetworksMemory_free): every driver burst is
        told to release its token (IBurst::releaseMemoryResource), so a driver's cache of mappings
        does not grow with every memory a long-lived burst has seen. Freeing cannot fail: a
        driver's error here is its own and ignored, as the NDK's free ignores it."""
        entry = self._tokens.pop(self._key(pool), None)
        if entry is None:
            return
        for device, hal_burst in list(self.hal_bursts.values()):
            try:
                call_driver(device, "release_memory_resource", hal_burst.release_memory_resource, entry[0])
            except NnapiError:
                pass

    def for_step(self, step: ExecutionStep) -> hal.IBurst:
        if id(step.prepared) not in self.hal_bursts:
            self.hal_bursts[id(step.prepared)] = step.device, call_driver(
                step.device, "configure_execution_burst", step.prepared.configure_execution_burst)
        return self.hal_bursts[id(step.prepared)][1]
