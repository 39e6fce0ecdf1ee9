"""The NNAPI developer guide's example, end to end: two ADDs then a MUL on 3x4 tensors, with
constants read from a memory-mapped file, run in every execution mode."""
import os
import tempfile
import threading

import numpy as np
import pytest

from nnapi_ref import (UINT64_MAX, Compilation, DurationCode, Execution, FuseCode, Memory, Model, NnapiError,
                       OperandCode as T, OperandType, OperationCode, ResultCode, get_devices)
from nnapi_ref.runtime.memory import PROT_READ
from nnts.generators.builders import compute_in_mode

C0 = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
C2 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


@pytest.fixture(scope="module")
def constants_file():
    """A file holding the two constant tensors back to back, as the guide's example mmaps."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(C0.tobytes() + C2.tobytes())
        path = f.name
    yield path
    os.unlink(path)


def build_add_mul(constants_file):
    """tensor0 (file) + tensor1 -> i0; tensor2 (file) + tensor3 -> i1; i0 * i1 -> output."""
    fd = os.open(constants_file, os.O_RDONLY)
    try:
        memory = Memory.from_fd(96, PROT_READ, fd, 0)
    finally:
        os.close(fd)
    model = Model()
    t3x4 = OperandType(T.TENSOR_FLOAT32, [3, 4])
    tensor0 = model.add_operand(t3x4)
    tensor1 = model.add_operand(t3x4)
    fuse0 = model.add_operand(OperandType(T.INT32))
    tensor2 = model.add_operand(t3x4)
    tensor3 = model.add_operand(t3x4)
    fuse1 = model.add_operand(OperandType(T.INT32))
    i0 = model.add_operand(t3x4)
    i1 = model.add_operand(t3x4)
    out = model.add_operand(t3x4)
    model.set_operand_value_from_memory(tensor0, memory, 0, 48)
    model.set_operand_value_from_memory(tensor2, memory, 48, 48)
    model.set_operand_value(fuse0, np.int32(FuseCode.NONE))
    model.set_operand_value(fuse1, np.int32(FuseCode.NONE))
    model.add_operation(OperationCode.ADD, [tensor0, tensor1, fuse0], [i0])
    model.add_operation(OperationCode.ADD, [tensor2, tensor3, fuse1], [i1])
    model.add_operation(OperationCode.MUL, [i0, i1, fuse0], [out])
    model.identify_inputs_and_outputs([tensor1, tensor3], [out])
    model.finish()
    return model, memory


X1 = np.full((3, 4), 0.5, np.float32)
X3 = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
EXPECTED = (C0 + X1) * (C2 + X3)


def run(compilation, mode, measure=False):
    execution = Execution(compilation)
    execution.set_input(0, X1)
    execution.set_input(1, X3)
    out = np.zeros((3, 4), np.float32)
    execution.set_output(0, out)
    if measure:
        execution.set_measure_timing(True)
    compute_in_mode(execution, mode)
    return out, execution


@pytest.mark.parametrize("mode", ["sync", "async", "burst", "fenced"])
@pytest.mark.parametrize("explicit_devices", [False, True])
def test_add_mul_example(constants_file, mode, explicit_devices):
    model, _memory = build_add_mul(constants_file)
    compilation = Compilation(model, get_devices() if explicit_devices else None)
    compilation.finish()
    out, execution = run(compilation, mode, measure=explicit_devices)
    np.testing.assert_array_equal(out, EXPECTED)
    assert execution.get_output_operand_dimensions(0) == (3, 4)
    if explicit_devices:
        fenced = mode == "fenced"
        on_hw = execution.get_duration(DurationCode.FENCED_ON_HARDWARE if fenced else DurationCode.ON_HARDWARE)
        in_driver = execution.get_duration(DurationCode.FENCED_IN_DRIVER if fenced else DurationCode.IN_DRIVER)
        assert 0 < on_hw <= in_driver < UINT64_MAX


def test_timing_unavailable_when_not_requested_is_bad_state(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model, get_devices())
    compilation.finish()
    _, execution = run(compilation, "sync")
    with pytest.raises(NnapiError) as e:
        execution.get_duration(DurationCode.ON_HARDWARE)
    assert e.value.code == ResultCode.BAD_STATE


def test_fenced_durations_of_an_unfenced_execution_are_the_launched_ones(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model, get_devices())
    compilation.finish()
    _, execution = run(compilation, "sync", measure=True)
    on_hw = execution.get_duration(DurationCode.ON_HARDWARE)
    assert 0 < on_hw < UINT64_MAX and execution.get_duration(DurationCode.FENCED_ON_HARDWARE) == on_hw


def test_timing_needs_single_device_compilation(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    with pytest.raises(NnapiError) as e:
        execution.set_measure_timing(True)
    assert e.value.code == ResultCode.BAD_DATA


def test_inputs_and_outputs_from_memory(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model)
    compilation.finish()
    pool = np.zeros(3 * 12, np.float32)
    pool[:12], pool[12:24] = X1.reshape(-1), X3.reshape(-1)
    memory = Memory.from_buffer(pool)
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory, 0, 48)
    execution.set_input_from_memory(1, memory, 48, 48)
    execution.set_output_from_memory(0, memory, 96, 48)
    execution.compute()
    np.testing.assert_array_equal(pool[24:].reshape(3, 4), EXPECTED)


def test_concurrent_executions_of_one_compilation(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model)
    compilation.finish()
    outputs, errors = [], []

    def worker(k):
        try:
            execution = Execution(compilation)
            x1 = X1 + k
            execution.set_input(0, x1)
            execution.set_input(1, X3)
            out = np.zeros((3, 4), np.float32)
            execution.set_output(0, out)
            for _ in range(5):
                execution = Execution(compilation)
                execution.set_input(0, x1)
                execution.set_input(1, X3)
                execution.set_output(0, out)
                execution.compute()
            outputs.append((k, out))
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k, out in outputs:
        np.testing.assert_array_equal(out, (C0 + X1 + k) * (C2 + X3))


def test_event_waited_on_by_several_threads(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, X1)
    execution.set_input(1, X3)
    out = np.zeros((3, 4), np.float32)
    execution.set_output(0, out)
    event = execution.start_compute()
    seen = []
    threads = [threading.Thread(target=lambda: (event.wait(), seen.append(out.copy()))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4
    for s in seen:
        np.testing.assert_array_equal(s, EXPECTED)


def test_fenced_execution_waits_for_its_dependency(constants_file):
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model, get_devices())
    compilation.finish()
    first = Execution(compilation)
    first.set_input(0, X1)
    first.set_input(1, X3)
    mid = np.zeros((3, 4), np.float32)
    first.set_output(0, mid)
    event = first.start_compute()
    second = Execution(compilation)
    second.set_input(0, mid)  # reads the first execution's output
    second.set_input(1, X3)
    out = np.zeros((3, 4), np.float32)
    second.set_output(0, out)
    second.start_compute_with_dependencies([event]).wait()
    np.testing.assert_array_equal(out, (C0 + EXPECTED) * (C2 + X3))


def test_fenced_execution_gives_a_sync_fence_and_waits_for_an_outside_one(constants_file):
    from nnapi_ref import Event
    from nnapi_ref.hal import SyncFence
    model, _ = build_add_mul(constants_file)
    compilation = Compilation(model, get_devices())
    compilation.finish()
    outside = SyncFence()
    execution = Execution(compilation)
    execution.set_input(0, X1)
    execution.set_input(1, X3)
    out = np.zeros((3, 4), np.float32)
    execution.set_output(0, out)
    waiter = threading.Thread(target=lambda: execution.start_compute_with_dependencies(
        [Event.from_sync_fence(outside)]).wait())
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not out.any()  # still waiting for the outside fence
    outside.signal()
    waiter.join(10)
    np.testing.assert_array_equal(out, EXPECTED)
    second = Execution(compilation)
    second.set_input(0, X1)
    second.set_input(1, X3)
    second.set_output(0, np.zeros((3, 4), np.float32))
    event = second.start_compute_with_dependencies([])
    event.wait()
    assert event.get_sync_fence().is_signalled()
