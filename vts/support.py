"""What the VTS tests share: the test models (the CTS set), deterministic subsets of them, safe
copies of models, requests over shared memory pools or POINTER arguments, and one function per
execution path that returns the outcome (status, output shapes, timing) whatever it was.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from nnapi_ref import AHardwareBuffer, HardwareBufferDesc, hal
from nnapi_ref.hal import ArgumentLifetime, ErrorStatus, HalError, Request, RequestArgument, SharedMemory
from nnapi_ref.types import DTYPES, SCALAR_TYPES, PreferenceCode, PriorityCode
from nnts.runners.cases import model_cases  # noqa: F401 (the VTS modules' test models, from here)
from nnts.runners.model_runner import supports_dynamic_outputs
from nnts.runners.parameters import unsupported_operations

LOOP_TIMEOUT_NS = 2_000_000_000
# A model that must fail only has to fail; an infinite loop need not run for 2 s first.
EXPECT_FAILURE_LOOP_TIMEOUT_NS = 100_000_000
WAIT_S = 60.0          # longest wait for a callback or a fence
ALIGNMENT = 64         # offsets of arguments inside a pool
PATHS = ("sync", "async", "burst", "fenced")


# -- which test models ---------------------------------------------------------------------------

def first_per_file(cases: list, n: int | None) -> list:
    """The first ``n`` cases of each test-vector file (all if None): deterministic, and one of
    every kind of model the corpus has."""
    if n is None:
        return list(cases)
    seen: dict = {}
    out = []
    for c in cases:
        k = seen.get(c.path, 0)
        if k < n:
            out.append(c)
        seen[c.path] = k + 1
    return out


def mark_node(request, case) -> None:
    """Tell the nnts plugin which operation and data type the test is about."""
    request.node.nnts_op = case.operation
    request.node.nnts_dtype = case.dtype


def case_marks(case) -> list:
    dtype = "TENSOR_FLOAT32" if case.dtype == "TENSOR_FLOAT32_RELAXED" else case.dtype
    return [_mark(f"op_{case.operation}"), _mark(f"dtype_{dtype}"), _mark("vts")]


@functools.lru_cache(maxsize=None)
def _mark(name: str):
    """``pytest.mark.<name>``, made once (each lookup checks the registered markers; 13k cases)."""
    return getattr(pytest.mark, name)


# -- models --------------------------------------------------------------------------------------

def _read_only(value):
    if isinstance(value, np.ndarray):
        view = value.view()
        view.flags.writeable = False
        return view
    return value


def clone_subgraph(sg: hal.Subgraph) -> hal.Subgraph:
    return hal.Subgraph([dataclasses.replace(o, value=_read_only(o.value)) for o in sg.operands],
                        [hal.Operation(op.type, tuple(op.inputs), tuple(op.outputs)) for op in sg.operations],
                        tuple(sg.input_indexes), tuple(sg.output_indexes))


def clone_model(model: hal.Model) -> hal.Model:
    """A copy that shares nothing mutable with ``model``: constants are read-only views (a driver
    must never write into the caller's model), everything else is new."""
    return hal.Model(clone_subgraph(model.main), [clone_subgraph(sg) for sg in model.referenced],
                     model.relax_computation_float32_to_float16)


def dynamic_model(model: hal.Model) -> hal.Model:
    """A copy with every main output's dimensions unspecified (rank kept)."""
    copy = clone_model(model)
    for k in copy.main.output_indexes:
        o = copy.main.operands[k]
        copy.main.operands[k] = dataclasses.replace(o, dimensions=(0,) * len(o.dimensions))
    return copy


def has_dynamic_variant(test) -> bool:
    """AOSP's dynamic-output-shape tests: not for models that must fail, have scalar outputs, or
    use IF, WHILE or RANK."""
    main = test.model.main
    return (not test.expect_failure and supports_dynamic_outputs(test.model)
            and not any(main.operands[k].type in SCALAR_TYPES for k in main.output_indexes))


def has_unspecified_output(model: hal.Model) -> bool:
    main = model.main
    return any(main.operands[k].type not in SCALAR_TYPES and
               (not main.operands[k].dimensions or 0 in main.operands[k].dimensions) for k in main.output_indexes)


def operation_names(model: hal.Model, flags) -> str:
    """The operations ``flags`` marks unsupported, each with its operand type and feature level."""
    return unsupported_operations(model, flags)


def prepare(driver: hal.Device, model: hal.Model, preference=PreferenceCode.FAST_SINGLE_ANSWER,
            priority=PriorityCode.MEDIUM, deadline_ns=None, model_cache=(), data_cache=(), token=None):
    return driver.prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)


def prepare_or_skip(driver: hal.Device, test, model: hal.Model) -> hal.PreparedModel:
    """Prepare a valid test model the way AOSP's VTS does: ask which operations are supported,
    prepare, and skip (as unsupported) only when preparing fails for a model the driver said it
    does not fully support."""
    level = test.min_feature_level or 0
    if level > driver.get_feature_level():
        pytest.skip(f"needs feature level {level}, the driver has {driver.get_feature_level()}")
    try:
        flags = driver.get_supported_operations(model)
    except HalError as e:
        pytest.fail(f"get_supported_operations rejected a valid model: {e}", pytrace=False)
    assert len(flags) == len(model.main.operations), \
        f"get_supported_operations gave {len(flags)} flags for {len(model.main.operations)} operations"
    try:
        prepared = prepare(driver, model)
    except HalError as e:
        if not all(flags):
            pytest.skip(f"unsupported: {operation_names(model, flags)} (prepare: {e.status.name})")
        pytest.fail(f"prepare_model failed for a model the driver fully supports: {e}", pytrace=False)
    assert prepared is not None, "prepare_model returned no prepared model and raised nothing"
    return prepared


# -- requests ------------------------------------------------------------------------------------

def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass
class IO:
    """A request for one test model and how to read its outputs back."""

    request: Request
    readers: list[Callable[[], np.ndarray]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # bytes given per output

    def outputs(self) -> list[np.ndarray]:
        return [read() for read in self.readers]


def output_dtype(test, i: int) -> np.dtype:
    main = test.model.main
    return DTYPES[main.operands[main.output_indexes[i]].type]


def make_io(test, style: str = "pool", shrink_output: int | None = None) -> IO:
    """A request feeding ``test``'s inputs. ``style``: ``pool`` (one input and one output shared
    memory pool, arguments at aligned offsets), ``hardware_buffer`` (the same pools as BLOB
    hardware buffers) or ``pointer`` (POINTER arguments). Output ``shrink_output`` gets one byte
    less than it needs."""
    inputs: list[RequestArgument] = []
    outputs: list[RequestArgument] = []
    readers = []
    lengths = []
    values = [None if v is None else np.ascontiguousarray(v) for v in test.inputs]
    out_bytes = []
    for i, e in enumerate(test.expected):
        n = max(e.size * output_dtype(test, i).itemsize, 1)  # a zero-sized output still gets a byte
        out_bytes.append(n - 1 if i == shrink_output else n)
    if style in ("pool", "hardware_buffer"):
        in_size = sum(_align(v.nbytes) for v in values if v is not None)
        in_pool = _shared_pool(max(in_size, 1), style)
        offset = 0
        for v in values:
            if v is None:
                inputs.append(RequestArgument(ArgumentLifetime.NO_VALUE))
                continue
            in_pool.buffer[offset:offset + v.nbytes] = v.reshape(-1).view(np.uint8)
            inputs.append(RequestArgument(ArgumentLifetime.POOL, 0, offset, v.nbytes))
            offset += _align(v.nbytes)
        out_pool = _shared_pool(max(sum(_align(n) for n in out_bytes), 1), style)
        offset = 0
        for i, n in enumerate(out_bytes):
            outputs.append(RequestArgument(ArgumentLifetime.POOL, 1, offset, n))
            readers.append(_pool_reader(out_pool.buffer, offset, test, i))
            offset += _align(n)
        pools = [in_pool, out_pool]
    elif style == "pointer":
        for v in values:
            inputs.append(RequestArgument(ArgumentLifetime.NO_VALUE) if v is None else
                          RequestArgument(ArgumentLifetime.POINTER, pointer=v.copy(), length=v.nbytes))
        for i, n in enumerate(out_bytes):
            buffer = np.zeros(n, np.uint8)
            outputs.append(RequestArgument(ArgumentLifetime.POINTER, pointer=buffer, length=n))
            readers.append(_pool_reader(buffer, 0, test, i))
        pools = []
    else:
        raise ValueError(style)
    lengths = out_bytes
    return IO(Request(inputs, outputs, pools), readers, lengths)


def _shared_pool(size: int, style: str) -> SharedMemory:
    if style == "hardware_buffer":
        buffer = AHardwareBuffer.allocate(HardwareBufferDesc(size))
        return SharedMemory(buffer.data, hal.HARDWARE_BUFFER_BLOB, buffer.describe())
    return SharedMemory(np.zeros(size, np.uint8))


def _pool_reader(buffer: np.ndarray, offset: int, test, i: int):
    dtype = output_dtype(test, i)
    nbytes = test.expected[i].size * dtype.itemsize

    def read() -> np.ndarray:
        return buffer[offset:offset + nbytes].copy().view(dtype)
    return read


# -- execution -----------------------------------------------------------------------------------

@dataclass
class Outcome:
    status: ErrorStatus
    shapes: list[hal.OutputShape]
    timing: hal.Timing = hal.NO_TIMING
    timing_fenced: hal.Timing | None = None
    message: str = ""


def run_path(prepared: hal.PreparedModel, request: Request, path: str, measure: bool = False,
             deadline_ns: int | None = None, loop_timeout_ns: int = LOOP_TIMEOUT_NS) -> Outcome:
    """Execute ``request`` through one execution path. A HalError is an outcome, not a failure;
    any other exception escapes (a driver must report errors as HalError)."""
    if path == "sync":
        try:
            result = prepared.execute_synchronously(request, measure, deadline_ns, loop_timeout_ns)
        except HalError as e:
            return Outcome(e.status, list(e.output_shapes), message=e.message)
        return Outcome(ErrorStatus.NONE, list(result.output_shapes), result.timing)
    if path == "async":
        callback = hal.ExecutionCallback()
        try:
            prepared.execute(request, measure, deadline_ns, loop_timeout_ns, callback)
        except HalError as e:
            return Outcome(e.status, list(e.output_shapes), message=e.message)
        assert callback.wait(WAIT_S), f"execute: no callback within {WAIT_S} s"
        return Outcome(ErrorStatus(callback.status), list(callback.output_shapes), callback.timing,
                       message=callback.message)
    if path == "burst":
        burst = prepared.configure_execution_burst()
        assert burst is not None, "configure_execution_burst returned None"
        tokens = list(range(len(request.pools)))
        try:
            return run_burst(burst, request, tokens, measure, deadline_ns, loop_timeout_ns)
        finally:
            for token in tokens:
                burst.release_memory_resource(token)
    if path == "fenced":
        # As AOSP: execute, then execute again waiting for the first execution's fence.
        wait_for: list = []
        for _ in range(2):
            try:
                fence, callback = prepared.execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns,
                                                          None)
            except HalError as e:
                return Outcome(e.status, [], message=e.message)
            assert fence is not None and callback is not None, "execute_fenced returned no fence or callback"
            assert fence.wait(WAIT_S), f"execute_fenced: fence not signalled within {WAIT_S} s"
            launched, fenced, status = callback.get_execution_info()
            status = ErrorStatus(status)
            if fence.status != ErrorStatus.NONE or status != ErrorStatus.NONE:
                # A fence signalled with an error and a callback saying NONE disagree: report the error.
                return Outcome(status if status != ErrorStatus.NONE else ErrorStatus(fence.status), [], launched,
                               fenced, message="fenced execution failed")
            wait_for = [fence]
        return Outcome(ErrorStatus.NONE, [], launched, fenced)
    raise ValueError(f"unknown execution path {path!r}")


def run_burst(burst: hal.IBurst, request: Request, tokens: list[int], measure: bool = False,
              deadline_ns: int | None = None, loop_timeout_ns: int = LOOP_TIMEOUT_NS) -> Outcome:
    """One execution in ``burst``, ``tokens`` naming the request's pools; a HalError is an outcome."""
    try:
        result = burst.execute(request, tokens, measure, deadline_ns, loop_timeout_ns)
    except HalError as e:
        return Outcome(e.status, list(e.output_shapes), message=e.message)
    return Outcome(ErrorStatus.NONE, list(result.output_shapes), result.timing)


def timing_problems(outcome: Outcome, measure: bool) -> list[str]:
    """AOSP's timing rules: nothing measured unless asked; a measured time is -1 (unavailable)
    or non-negative, and time on the device never exceeds time in the driver."""
    problems = []
    timings = [("timing", outcome.timing)]
    if outcome.timing_fenced is not None:
        timings.append(("fenced timing", outcome.timing_fenced))
    for what, t in timings:
        if not measure:
            if (t.time_on_device_ns, t.time_in_driver_ns) != (hal.NO_TIME, hal.NO_TIME):
                problems.append(f"{what} {t} reported though measurement was not requested")
            continue
        for name, value in (("time_on_device", t.time_on_device_ns), ("time_in_driver", t.time_in_driver_ns)):
            if value != hal.NO_TIME and value < 0:
                problems.append(f"{what}: {name} {value} is negative (only -1 means unavailable)")
        if t.time_on_device_ns != hal.NO_TIME and t.time_in_driver_ns != hal.NO_TIME and \
                t.time_on_device_ns > t.time_in_driver_ns:
            problems.append(f"{what}: time_on_device {t.time_on_device_ns} ns > time_in_driver {t.time_in_driver_ns} ns")
    return problems
