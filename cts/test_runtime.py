"""CTS: runtime behaviour a driver takes part in, through the NNAPI programming model.

* OUTPUT_INSUFFICIENT_SIZE and the output dimensions reported with it (AOSP TestUnknownDimensions,
  dynamic output shapes), in every execution mode;
* WHILE loop timeouts, execution and compilation deadlines (MISSED_DEADLINE_*);
* timing: what ``get_duration`` reports is consistent (on hardware <= in driver <= wall clock);
* many executions of one compilation at once, from many threads;
* partitioning a model between the driver under test and other drivers, and CPU fallback (with
  the test drivers of :mod:`nnapi_ref.drivers.variants`, whatever ``--driver`` is).

Compilations name the devices under test, so no CPU fallback hides a driver's fault, except in
the tests about fallback. Expected values are computed by hand or with numpy.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from nnapi_ref import (UINT64_MAX, Burst, Compilation, DurationCode, Execution, FeatureLevel, Model, NnapiError,
                       OperandCode as T, OperandType, OperationCode, Partitioning, ResultCode, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.drivers.variants import FaultyDevice, SubsetDevice
from nnapi_ref.hal import ErrorStatus
from nnts.generators.builders import chain_model, compute_in_mode, counting_loop_model

MODES = ("sync", "async", "burst", "fenced")
MISSED_DEADLINE = (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
ADD, MUL = OperationCode.ADD, OperationCode.MUL
I32 = OperandType(T.INT32)


def f32(*dims) -> OperandType:
    return OperandType(T.TENSOR_FLOAT32, dims)


def failure(execution: Execution, mode: str) -> NnapiError:
    """The error ``execution`` fails with in ``mode`` (it must fail)."""
    with pytest.raises(NnapiError) as e:
        compute_in_mode(execution, mode)
    return e.value


def require(model: Model, devices, what: str) -> None:
    if not all(model.get_supported_operations_for_devices(devices)):
        pytest.skip(f"the drivers under test do not support {what}")


def add_model(output_type: OperandType, n: int = 4, second_output: bool = False) -> Model:
    """out0 = a + b (declared as ``output_type``); with ``second_output``, out1 = a + a declared [n]."""
    model = Model()
    a, b, fuse = model.add_operand(f32(n)), model.add_operand(f32(n)), model.add_operand(I32)
    model.set_operand_value(fuse, np.int32(0))
    out = model.add_operand(output_type)
    model.add_operation(ADD, [a, b, fuse], [out])
    outputs = [out]
    if second_output:
        out1 = model.add_operand(f32(n))
        model.add_operation(ADD, [a, a, fuse], [out1])
        outputs.append(out1)
    model.identify_inputs_and_outputs([a, b], outputs)
    model.finish()
    return model


X = np.array([1.0, -2.5, 3.25, 100.0], np.float32)
Y = np.array([0.5, 0.5, -3.25, 1e-3], np.float32)


def add_execution(compilation: Compilation) -> Execution:
    """An execution of an :func:`add_model` compilation, its inputs set to X and Y."""
    execution = Execution(compilation)
    execution.set_input(0, X)
    execution.set_input(1, Y)
    return execution


def compiled(model: Model, devices) -> Compilation:
    compilation = Compilation(model, devices)
    compilation.finish()
    return compilation


# ---------------------------------------------------------------------------------------------
# OUTPUT_INSUFFICIENT_SIZE and dynamic output shapes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["sync", "async", "burst"])
@pytest.mark.parametrize("declared", [(0,), ()], ids=["unknown-dimension", "unknown-rank"])
def test_output_insufficient_size_then_dimensions(devices, mode, declared):
    """A too-small output buffer: OUTPUT_INSUFFICIENT_SIZE, with the real dimensions reported;
    the other output's dimensions can be queried; a second execution with room succeeds."""
    model = add_model(f32(*declared), second_output=True)
    require(model, devices, "ADD on TENSOR_FLOAT32 with unspecified output dimensions")
    compilation = compiled(model, devices)
    execution = add_execution(compilation)
    execution.set_output(0, np.zeros(3, np.float32))  # 12 bytes for 16
    out1 = np.zeros(4, np.float32)
    execution.set_output(1, out1)
    error = failure(execution, mode)
    assert error.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE, error
    with pytest.raises(NnapiError) as e:
        execution.get_output_operand_dimensions(0)
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert "[4]" in e.value.message, f"the real dimensions must be reported: {e.value.message}"
    with pytest.raises(NnapiError) as e:
        execution.get_output_operand_rank(0)
    assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert execution.get_output_operand_dimensions(1) == (4,)  # a sufficient output's shape is known

    execution = add_execution(compilation)
    out0 = np.zeros(4, np.float32)
    execution.set_output(0, out0)
    execution.set_output(1, out1)
    compute_in_mode(execution, mode)
    np.testing.assert_array_equal(out0, X + Y)
    np.testing.assert_array_equal(out1, X + X)
    assert execution.get_output_operand_dimensions(0) == (4,)
    assert execution.get_output_operand_rank(0) == 1


def test_larger_output_buffer_than_needed(devices):
    """A buffer larger than the output is fine: the output's dimensions say how much is valid."""
    model = add_model(f32(0))
    require(model, devices, "ADD on TENSOR_FLOAT32 with unspecified output dimensions")
    execution = add_execution(compiled(model, devices))
    out = np.full(10, 7.0, np.float32)
    execution.set_output(0, out)
    execution.compute()
    assert execution.get_output_operand_dimensions(0) == (4,)
    np.testing.assert_array_equal(out[:4], X + Y)


def test_output_dimensions_given_at_execution(devices):
    """Dimensions left unknown in the model and given with set_output are used."""
    model = add_model(f32(0))
    require(model, devices, "ADD on TENSOR_FLOAT32 with unspecified output dimensions")
    for mode in MODES:
        execution = add_execution(compiled(model, devices))
        out = np.zeros(4, np.float32)
        execution.set_output(0, out, f32(4))
        compute_in_mode(execution, mode)
        np.testing.assert_array_equal(out, X + Y)
        assert execution.get_output_operand_dimensions(0) == (4,)


# ---------------------------------------------------------------------------------------------
# WHILE loop timeout, deadlines
# ---------------------------------------------------------------------------------------------

def while_execution(compilation: Compilation, out: np.ndarray | None = None) -> Execution:
    execution = Execution(compilation)
    execution.set_input(0, np.zeros(1, np.float32))
    execution.set_output(0, np.zeros(1, np.float32) if out is None else out)
    return execution


@pytest.fixture
def while_devices(devices):
    require(counting_loop_model(1.0), devices, "WHILE")
    return devices


def test_finite_while_loop_computes(while_devices, request):
    request.node.nnts_op = "WHILE"
    out = np.zeros(1, np.float32)
    while_execution(compiled(counting_loop_model(1.0), while_devices), out).compute()
    assert out[0] == 5.0


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_hits_a_1ms_loop_timeout(while_devices, mode, request):
    request.node.nnts_op = "WHILE"
    compilation = compiled(counting_loop_model(0.0), while_devices)
    execution = while_execution(compilation)
    execution.set_loop_timeout(1_000_000)  # 1 ms
    start = time.monotonic()
    error = failure(execution, mode)
    elapsed = time.monotonic() - start
    assert error.code in MISSED_DEADLINE, f"WHILE: expected MISSED_DEADLINE_*, got {error}"
    assert elapsed < 1.5, f"a 1 ms loop timeout took {elapsed:.2f} s to fire (the default is 2 s)"
    with pytest.raises(NnapiError) as e:  # a failed execution has no output shapes
        execution.get_output_operand_dimensions(0)
    assert e.value.code == ResultCode.BAD_STATE


def test_infinite_loop_hits_the_default_loop_timeout(while_devices, request):
    """Without set_loop_timeout, the default of 2 s applies."""
    request.node.nnts_op = "WHILE"
    execution = while_execution(compiled(counting_loop_model(0.0), while_devices))
    start = time.monotonic()
    error = failure(execution, "sync")
    elapsed = time.monotonic() - start
    assert error.code in MISSED_DEADLINE, error
    assert 1.0 < elapsed < 10.0, f"the default 2 s loop timeout fired after {elapsed:.2f} s"


def test_loop_timeout_does_not_fall_back_to_the_cpu(while_devices):
    """A missed deadline is final: even with CPU fallback allowed it is reported, not retried."""
    compilation = Compilation(counting_loop_model(0.0))
    compilation.finish()
    execution = while_execution(compilation)
    execution.set_loop_timeout(1_000_000)
    start = time.monotonic()
    assert failure(execution, "sync").code in MISSED_DEADLINE
    assert time.monotonic() - start < 1.5


def test_loop_timeout_above_the_maximum_is_clamped(while_devices):
    execution = while_execution(compiled(counting_loop_model(1.0), while_devices))
    execution.set_loop_timeout(10 ** 15)  # more than the 15 s maximum: clamped, not an error
    execution.compute()


@pytest.fixture
def deadline_device(devices):
    """The first device under test, if it must honour deadlines (feature level 4 and later)."""
    device = devices[0]
    if device.feature_level < FeatureLevel.LEVEL_4:
        pytest.skip(f"{device.name} has feature level {device.feature_level}: timeouts are only hints")
    require(add_model(f32(4)), devices[:1], "ADD on TENSOR_FLOAT32")
    return [device]


@pytest.mark.parametrize("mode", MODES)
def test_execution_deadline_that_has_passed(deadline_device, mode):
    execution = add_execution(compiled(add_model(f32(4)), deadline_device))
    execution.set_output(0, np.zeros(4, np.float32))
    execution.set_timeout(1)  # 1 ns: over before the driver sees the request
    error = failure(execution, mode)
    assert error.code in MISSED_DEADLINE, f"expected MISSED_DEADLINE_* for a 1 ns timeout, got {error}"


@pytest.mark.parametrize("mode", MODES)
def test_generous_execution_deadline_is_met(deadline_device, mode):
    out = np.zeros(4, np.float32)
    execution = add_execution(compiled(add_model(f32(4)), deadline_device))
    execution.set_output(0, out)
    execution.set_timeout(30_000_000_000)
    compute_in_mode(execution, mode)
    np.testing.assert_array_equal(out, X + Y)


def test_deadline_interrupts_a_long_execution(deadline_device, request):
    """An execution that would run long (a loop with a 15 s loop timeout) stops at its 50 ms deadline."""
    request.node.nnts_op = "WHILE"
    require(counting_loop_model(1.0), deadline_device, "WHILE")
    execution = while_execution(compiled(counting_loop_model(0.0), deadline_device))
    execution.set_loop_timeout(15_000_000_000)
    execution.set_timeout(50_000_000)
    start = time.monotonic()
    error = failure(execution, "sync")
    elapsed = time.monotonic() - start
    assert error.code in MISSED_DEADLINE, error
    assert elapsed < 3.0, f"a 50 ms execution deadline stopped the execution after {elapsed:.2f} s"


def test_fenced_duration_after_dependencies(deadline_device):
    """start_compute_with_dependencies' duration bounds the execution once its fences fire."""
    execution = add_execution(compiled(add_model(f32(4)), deadline_device))
    execution.set_output(0, np.zeros(4, np.float32))
    with pytest.raises(NnapiError) as e:
        execution.start_compute_with_dependencies([], 1).wait()
    assert e.value.code in MISSED_DEADLINE, e.value


def test_compilation_deadline_that_has_passed(deadline_device):
    compilation = Compilation(add_model(f32(4)), deadline_device)
    compilation.set_timeout(1)  # 1 ns
    with pytest.raises(NnapiError) as e:
        compilation.finish()
    assert e.value.code in MISSED_DEADLINE, f"expected MISSED_DEADLINE_* for a 1 ns compilation timeout, got {e.value}"


def test_generous_compilation_deadline_is_met(deadline_device):
    compilation = Compilation(add_model(f32(4)), deadline_device)
    compilation.set_timeout(30_000_000_000)
    compilation.finish()
    out = np.zeros(4, np.float32)
    execution = add_execution(compilation)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, X + Y)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def one_device(devices):
    require(add_model(f32(4)), devices[:1], "ADD on TENSOR_FLOAT32")
    return devices[:1]


def measured(one_device, mode: str, model: Model | None = None):
    """Run with timing requested; return the execution and the wall-clock time around it (ns)."""
    out = np.zeros(4, np.float32)
    execution = add_execution(compiled(model or add_model(f32(4)), one_device))
    execution.set_output(0, out)
    execution.set_measure_timing(True)
    start = time.monotonic_ns()
    compute_in_mode(execution, mode)
    wall = time.monotonic_ns() - start
    np.testing.assert_array_equal(out, X + Y)
    return execution, wall


def check_pair(on_hardware: int, in_driver: int, wall: int, what: str) -> None:
    for name, value in (("on hardware", on_hardware), ("in driver", in_driver)):
        assert value == UINT64_MAX or 0 <= value <= wall, \
            f"timing: {what} time {name} {value} ns exceeds the {wall} ns the whole call took"
    if on_hardware != UINT64_MAX and in_driver != UINT64_MAX:
        assert on_hardware <= in_driver, \
            f"timing: {what} time on hardware {on_hardware} ns exceeds the time in driver {in_driver} ns"


@pytest.mark.parametrize("mode", MODES)
def test_measured_durations_are_consistent(one_device, mode):
    execution, wall = measured(one_device, mode)
    d = {code: execution.get_duration(code) for code in DurationCode}
    assert all(isinstance(v, int) and 0 <= v <= UINT64_MAX for v in d.values())
    check_pair(d[DurationCode.ON_HARDWARE], d[DurationCode.IN_DRIVER], wall, "launched")
    if mode == "fenced":
        check_pair(d[DurationCode.FENCED_ON_HARDWARE], d[DurationCode.FENCED_IN_DRIVER], wall, "fenced")
        for launched, fenced in ((DurationCode.ON_HARDWARE, DurationCode.FENCED_ON_HARDWARE),
                                 (DurationCode.IN_DRIVER, DurationCode.FENCED_IN_DRIVER)):
            if d[launched] != UINT64_MAX and d[fenced] != UINT64_MAX:
                assert d[fenced] <= d[launched], f"timing: {fenced.name} {d[fenced]} > {launched.name} {d[launched]}"


def test_timing_not_requested_is_bad_state(one_device):
    execution = add_execution(compiled(add_model(f32(4)), one_device))
    execution.set_output(0, np.zeros(4, np.float32))
    execution.compute()
    for code in DurationCode:
        with pytest.raises(NnapiError) as e:
            execution.get_duration(code)
        assert e.value.code == ResultCode.BAD_STATE


@pytest.mark.parametrize("mode", ["sync", "async", "burst"])
def test_fenced_durations_of_an_unfenced_execution_equal_the_launched_ones(one_device, mode):
    execution, _ = measured(one_device, mode)
    assert execution.get_duration(DurationCode.FENCED_ON_HARDWARE) == execution.get_duration(DurationCode.ON_HARDWARE)
    assert execution.get_duration(DurationCode.FENCED_IN_DRIVER) == execution.get_duration(DurationCode.IN_DRIVER)


def test_duration_of_a_failed_execution_is_bad_state(one_device):
    model = add_model(f32(0))
    require(model, one_device, "ADD on TENSOR_FLOAT32 with unspecified output dimensions")
    execution = add_execution(compiled(model, one_device))
    execution.set_output(0, np.zeros(1, np.float32))
    execution.set_measure_timing(True)
    assert failure(execution, "sync").code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    with pytest.raises(NnapiError) as e:
        execution.get_duration(DurationCode.ON_HARDWARE)
    assert e.value.code == ResultCode.BAD_STATE


# ---------------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_concurrent_executions_of_one_compilation(devices, mode):
    """8 threads, 4 executions each, on one compilation; each sees its own inputs' results."""
    model = add_model(f32(4))
    require(model, devices, "ADD on TENSOR_FLOAT32")
    compilation = compiled(model, devices)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        try:
            burst = Burst(compilation) if mode == "burst" else None
            barrier.wait()
            for n in range(4):
                a = X * (k + 1) + n
                out = np.zeros(4, np.float32)
                execution = Execution(compilation)
                execution.set_input(0, a)
                execution.set_input(1, Y)
                execution.set_output(0, out)
                if burst is not None:
                    execution.burst_compute(burst)
                else:
                    compute_in_mode(execution, mode)
                np.testing.assert_array_equal(out, a + Y, err_msg=f"thread {k}, execution {n}")
        except BaseException as e:  # collected, asserted in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "executions did not finish (deadlock?)"
    assert not errors, errors[0]


def test_concurrent_compilations(devices):
    """Compiling the same model from several threads at once."""
    model = add_model(f32(4))
    require(model, devices, "ADD on TENSOR_FLOAT32")
    results, errors = [], []

    def worker():
        try:
            compilation = compiled(model, devices)
            out = np.zeros(4, np.float32)
            execution = add_execution(compilation)
            execution.set_output(0, out)
            execution.compute()
            results.append(out)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert len(results) == 6
    for out in results:
        np.testing.assert_array_equal(out, X + Y)


# ---------------------------------------------------------------------------------------------
# Partitioning and CPU fallback
# ---------------------------------------------------------------------------------------------

A2 = np.array([[1, 2], [3, 4]], np.float32)
B2 = np.array([[0.5, -1], [2, 3]], np.float32)
CHAIN = (A2 + B2) * B2 + A2


def run_chain(compilation: Compilation, mode: str = "sync", out: np.ndarray | None = None) -> np.ndarray:
    execution = Execution(compilation)
    execution.set_input(0, A2)
    execution.set_input(1, B2)
    out = np.zeros((2, 2), np.float32) if out is None else out
    execution.set_output(0, out)
    compute_in_mode(execution, mode)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_driver_under_test_runs_steps_of_a_partitioned_model(drivers, mode):
    """The driver under test gets the ADDs (as step models with inputs that were internal
    operands), another driver the MUL, in one explicit device list."""
    helper = SubsetDevice("nnts-cts-multiplier", [MUL], 0.01)
    with using_drivers(list(drivers) + [helper]) as devices:
        tested = [d for d in devices if d.driver is drivers[0]]
        helper_device = [d for d in devices if d.driver is helper]
        model = chain_model()
        flags = model.get_supported_operations_for_devices(tested)
        if not (flags[0] and flags[2]):
            pytest.skip(f"{tested[0].name} does not support ADD on TENSOR_FLOAT32")
        compilation = compiled(model, tested + helper_device)
        names = [s.device.name for s in compilation.plan.steps]
        assert names[1] == "nnts-cts-multiplier" and len(names) == 3, names
        np.testing.assert_array_equal(run_chain(compilation, mode), CHAIN)


def test_partitioned_output_insufficient_size():
    adder, multiplier = SubsetDevice("nnts-adder", [ADD], 0.5), SubsetDevice("nnts-multiplier", [MUL], 0.5)
    with using_drivers([ReferenceDevice(), adder, multiplier]) as devices:
        compilation = compiled(chain_model(output_dims=(0, 0)), devices[1:])
        assert len(compilation.plan.steps) == 3
        execution = Execution(compilation)
        execution.set_input(0, A2)
        execution.set_input(1, B2)
        execution.set_output(0, np.zeros(3, np.float32))
        assert failure(execution, "sync").code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
        with pytest.raises(NnapiError) as e:
            execution.get_output_operand_dimensions(0)
        assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE and "[2, 2]" in e.value.message
        out = np.zeros(4, np.float32)
        execution = Execution(compilation)
        execution.set_input(0, A2)
        execution.set_input(1, B2)
        execution.set_output(0, out)
        execution.compute()
        assert execution.get_output_operand_dimensions(0) == (2, 2)
        np.testing.assert_array_equal(out.reshape(2, 2), CHAIN)


@pytest.mark.parametrize("mode", MODES)
def test_failing_step_falls_back_to_the_cpu(mode):
    multiplier = FaultyDevice("nnts-faulty-multiplier", [MUL], 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), SubsetDevice("nnts-adder", [ADD], 0.5), multiplier]):
        compilation = Compilation(chain_model())
        compilation.finish()
        assert [s.device.name for s in compilation.plan.steps] == ["nnts-adder", "nnts-faulty-multiplier",
                                                                    "nnts-adder"]
        np.testing.assert_array_equal(run_chain(compilation, mode), CHAIN)
        assert multiplier.executions >= 1


@pytest.mark.parametrize("fault", ["prepare", "execute"])
@pytest.mark.parametrize("status", [ErrorStatus.GENERAL_FAILURE, ErrorStatus.DEVICE_UNAVAILABLE,
                                    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT])
def test_whole_model_falls_back_to_the_cpu(fault, status):
    broken = FaultyDevice("nnts-broken", None, 0.1, **{f"fail_{fault}": status})
    with using_drivers([ReferenceDevice(), broken]):
        compilation = Compilation(chain_model())
        compilation.finish()
        np.testing.assert_array_equal(run_chain(compilation), CHAIN)


@pytest.mark.parametrize("fault", ["prepare", "execute"])
def test_no_fallback_for_an_explicit_device_list(fault):
    broken = FaultyDevice("nnts-broken", None, 0.1, **{f"fail_{fault}": ErrorStatus.GENERAL_FAILURE})
    with using_drivers([ReferenceDevice(), broken]) as devices:
        mine = [d for d in devices if d.name == "nnts-broken"]
        with pytest.raises(NnapiError) as e:
            run_chain(compiled(chain_model(), mine))
        assert e.value.code == ResultCode.OP_FAILED


def test_no_fallback_when_partitioning_forbids_it():
    broken = FaultyDevice("nnts-broken", None, 0.1, fail_execute=ErrorStatus.GENERAL_FAILURE)
    with using_drivers([ReferenceDevice(), broken], Partitioning.WITHOUT_FALLBACK):
        compilation = Compilation(chain_model())
        compilation.finish()
        with pytest.raises(NnapiError) as e:
            run_chain(compilation)
        assert e.value.code == ResultCode.OP_FAILED


def test_operation_no_driver_supports_runs_on_the_cpu():
    adder = SubsetDevice("nnts-adder", [ADD], 0.5)
    with using_drivers([adder]):
        compilation = Compilation(chain_model())
        compilation.finish()
        assert [s.device.name for s in compilation.plan.steps] == ["nnts-adder", "nnapi-reference", "nnts-adder"]
        np.testing.assert_array_equal(run_chain(compilation), CHAIN)
    with using_drivers([adder]) as devices:  # but not with an explicit device list
        with pytest.raises(NnapiError) as e:
            compiled(chain_model(), devices)
        assert e.value.code == ResultCode.BAD_DATA and "MUL" in e.value.message
