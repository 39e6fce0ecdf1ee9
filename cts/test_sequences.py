"""CTS execution sequences: one compilation executed again and again through the runtime API,
changing from one step to the next what a driver may keep between executions: the contents of a
Memory used by one reusable execution and one Burst, memories swapped, an output read back as the
next input, input shapes, output shapes decided by the input data (zero-sized among them),
too-small outputs, another compilation, other threads, a released compilation, device memory
(memory domains), failed executions. A driver carrying stale state from one execution to the next
passes every single-execution test; these catch it (``vts/test_sequences.py`` does the same
straight against the driver).

The model is nnts.generators.builders.chain_model, out = ((a + b) * b) + a on float32 (two of its three
operations write intermediates; on a driver without float32, quant8: the ``chain_type`` fixture), or for output shapes decided by data nnts.generators.builders.nms_model
(BOX_WITH_NMS_LIMIT feeding ADD); every output of every step is compared with numpy's result under
NNAPI's tolerances, and a failure names the step. Compilations name the devices under test (no
CPU fallback).
"""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from nnapi_ref import Compilation, Execution, Memory, MemoryDesc, NnapiError, ResultCode
from nnts.cts.support import compiled
from nnts.generators.builders import (NMS_STEPS, ExecutionSequence, add_model, assert_step, chain, chain_inputs,
                                      chain_model, nms_expected, nms_model, nms_scores)

MODES = ("sync", "async", "burst", "fenced")
MISSED = (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)
SHAPE = (2, 2)
N = 4  # floats in one [2, 2] tensor
THREADS, EXECUTIONS = 8, 4


@pytest.fixture(autouse=True)
def _mark(request):
    request.node.nnts_op = "execution sequences"
    request.node.nnts_dtype = "TENSOR_FLOAT32"


@pytest.fixture
def ctype(chain_type, request):
    """The chain model's data type on the devices under test (float32 unless unsupported)."""
    request.node.nnts_dtype = chain_type.code.name
    return chain_type


@pytest.fixture
def chain_compilation(devices, ctype) -> Compilation:
    return compiled(chain_model(type_=ctype), devices)


def check_dimensions(step: str, execution: Execution, shape) -> None:
    dims = execution.get_output_operand_dimensions(0)
    assert dims == tuple(shape), f"{step}: output dimensions {list(dims)} reported, expected {list(shape)}"


@pytest.mark.parametrize("mode", MODES)
def test_memory_rewritten_between_executions(mode, chain_compilation, ctype):
    """One Memory holding a, b and the output, new inputs written into it at every step; then
    another Memory bound to the same execution."""
    sequence = ExecutionSequence(chain_compilation, mode)
    size = ctype.nbytes(N)
    for n in range(1, 5):
        if n in (1, 4):
            data = ctype.zeros(3 * N)
            memory = Memory.from_buffer(data)
            sequence.execution.set_input_from_memory(0, memory, 0, size)
            sequence.execution.set_input_from_memory(1, memory, size, size)
            sequence.execution.set_output_from_memory(0, memory, 2 * size, size)
        a, b = chain_inputs(n, type_=ctype)
        data[:N], data[N:2 * N] = a.reshape(-1), b.reshape(-1)
        step = f"step {n}: " + ("a new memory" if n == 4 else "new inputs written into the same memory")
        sequence.run(step)
        assert_step(step, [chain(a, b, ctype)], [data[2 * N:]], ctype)


@pytest.mark.parametrize("mode", MODES)
def test_memories_swapped(mode, chain_compilation, ctype):
    """Inputs in one Memory and the output in the other, then the other way round."""
    data = [ctype.zeros(3 * N), ctype.zeros(3 * N)]
    memories = [Memory.from_buffer(d) for d in data]
    sequence = ExecutionSequence(chain_compilation, mode)
    size = ctype.nbytes(N)
    for n, (source, target) in enumerate([(0, 1), (1, 0), (0, 1)], 1):
        a, b = chain_inputs(n, type_=ctype)
        data[source][:N], data[source][N:2 * N] = a.reshape(-1), b.reshape(-1)
        sequence.execution.set_input_from_memory(0, memories[source], 0, size)
        sequence.execution.set_input_from_memory(1, memories[source], size, size)
        sequence.execution.set_output_from_memory(0, memories[target], 2 * size, size)
        step = f"step {n}: inputs in memory {source}, output in memory {target}"
        sequence.run(step)
        assert_step(step, [chain(a, b, ctype)], [data[target][2 * N:]], ctype)


@pytest.mark.parametrize("mode", MODES)
def test_output_read_as_next_input(mode, chain_compilation, ctype):
    """Each step reads input a where the step before wrote its output, in the same Memory."""
    data = ctype.zeros(5 * N)  # b, then x0, x1, x2, x3
    memory = Memory.from_buffer(data)
    x, b = chain_inputs(0, type_=ctype)
    data[:N], data[N:2 * N] = b.reshape(-1), x.reshape(-1)
    sequence = ExecutionSequence(chain_compilation, mode)
    size = ctype.nbytes(N)
    sequence.execution.set_input_from_memory(1, memory, 0, size)
    for n in range(1, 4):
        sequence.execution.set_input_from_memory(0, memory, size * n, size)
        sequence.execution.set_output_from_memory(0, memory, size * (n + 1), size)
        step = f"step {n}: input a is the output of step {n - 1}" if n > 1 else "step 1"
        sequence.run(step)
        if ctype.quantized and n > 1:  # from the step before's output: requantization's steps do not add up
            x = data[N * n:N * (n + 1)].reshape(b.shape)
        x = chain(x, b, ctype)
        assert_step(step, [x], [data[N * (n + 1):N * (n + 2)]], ctype)


SHAPES = [(2, 2), (3, 4), (1, 3), (3, 4)]  # larger, then smaller, then larger again


@pytest.mark.parametrize("mode", MODES)
def test_input_shapes_change(mode, devices, ctype):
    """Inputs, intermediates and output of unspecified dimensions, given other dimensions at every
    step of one reusable execution (fenced executions are given the output's too)."""
    sequence = ExecutionSequence(compiled(chain_model(output_dims=(0, 0), input_dims=(0, 0), type_=ctype), devices),
                                 mode)
    out = ctype.zeros(12)
    for n, shape in enumerate(SHAPES, 1):
        a, b = chain_inputs(n, shape, ctype)
        dims = ctype.operand(shape)
        sequence.execution.set_input(0, a, dims)
        sequence.execution.set_input(1, b, dims)
        if mode == "fenced":
            sequence.execution.set_output(0, out[:a.size], dims)
        else:
            sequence.execution.set_output(0, out)
        step = f"step {n}: inputs of shape {list(shape)}"
        sequence.run(step)
        check_dimensions(step, sequence.execution, shape)
        assert_step(step, [chain(a, b, ctype)], [out[:a.size]], ctype)


@pytest.mark.parametrize("mode", ["sync", "async", "burst"])  # fenced: outputs must be fully specified
def test_output_shapes_change_with_data(mode, devices):
    """BOX_WITH_NMS_LIMIT feeding ADD: scores that keep 2 boxes, then 4, 1, none (zero-sized
    outputs, ADD given a zero-sized input) and 3, into the same output buffers, room for 4 boxes."""
    sequence = ExecutionSequence(compiled(nms_model(), devices), mode)
    outputs = [np.zeros(4, np.float32), np.zeros(16, np.float32), np.zeros(4, np.int32), np.zeros(4, np.int32)]
    for i, out in enumerate(outputs):
        sequence.execution.set_output(i, out)
    for n, (scores, kept) in enumerate(NMS_STEPS, 1):
        sequence.execution.set_input(0, nms_scores(scores))
        step = f"step {n}: scores keeping {len(kept)} of 4 boxes"
        sequence.run(step)
        expected = nms_expected(scores, kept)
        dims = [sequence.execution.get_output_operand_dimensions(i) for i in range(len(outputs))]
        wanted = [e.shape for e in expected]
        assert dims == wanted, f"{step}: output dimensions {dims} reported, expected {wanted}"
        assert_step(step, expected, [out[:e.size] for out, e in zip(outputs, expected)])


@pytest.mark.parametrize("mode", ["sync", "async", "burst"])
def test_insufficient_output_then_retry(mode, devices):
    """OUTPUT_INSUFFICIENT_SIZE for an output 4 bytes short, then the same execution (and burst)
    with room for it succeeds, twice over."""
    sequence = ExecutionSequence(compiled(chain_model(output_dims=(0, 0)), devices), mode)
    for n in range(1, 5):
        a, b = chain_inputs(n)
        sequence.execution.set_input(0, a)
        sequence.execution.set_input(1, b)
        out = np.zeros(N - 1 if n % 2 else N, np.float32)
        sequence.execution.set_output(0, out)
        if n % 2 == 0:
            step = f"step {n}: the same execution with room for the output"
            sequence.run(step)
            check_dimensions(step, sequence.execution, SHAPE)
            assert_step(step, [chain(a, b)], [out])
            continue
        step = f"step {n}: output given 12 of 16 bytes"
        with pytest.raises(NnapiError) as e:
            sequence.compute()
        assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE, f"{step}: {e.value}, expected OUTPUT_INSUFFICIENT_SIZE"
        with pytest.raises(NnapiError) as e:
            sequence.execution.get_output_operand_dimensions(0)
        assert e.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE and "[2, 2]" in e.value.message, \
            f"{step}: the real dimensions [2, 2] must be reported: {e.value}"


def _run_add(sequence: ExecutionSequence, seed: int, step: str) -> None:
    """out = x + y on [2] (nnts.generators.builders.add_model) with new inputs."""
    x, y = (v.reshape(-1)[:2] for v in chain_inputs(seed))
    out = np.zeros(2, np.float32)
    sequence.execution.set_input(0, x)
    sequence.execution.set_input(1, y)
    sequence.execution.set_output(0, out)
    sequence.run(step)
    assert_step(step, [x + y], [out])


def _bind_chain(execution: Execution, seed: int, ctype) -> tuple[np.ndarray, np.ndarray]:
    """New inputs for the chain model; returns the expected output and the output buffer."""
    a, b = chain_inputs(seed, type_=ctype)
    out = ctype.zeros(SHAPE)
    execution.set_input(0, a)
    execution.set_input(1, b)
    execution.set_output(0, out)
    return chain(a, b, ctype), out


@pytest.mark.parametrize("mode", MODES)
def test_two_compilations_alternately(mode, devices, chain_compilation, ctype):
    """Two compilations on the same devices, each with its own execution and burst, in turn."""
    first, second = ExecutionSequence(chain_compilation, mode), ExecutionSequence(compiled(add_model(), devices), mode)
    for n in range(1, 5):
        expected, out = _bind_chain(first.execution, n, ctype)
        first.run(f"step {n}a: the chain model")
        assert_step(f"step {n}a: the chain model", [expected], [out], ctype)
        _run_add(second, 10 + n, f"step {n}b: the ADD model")


def test_two_compilations_interleaved(devices, chain_compilation, ctype):
    """Both compilations started asynchronously before either is waited for."""
    add_compilation = compiled(add_model(), devices)
    for n in range(1, 4):
        chain_execution, add_execution = Execution(chain_compilation), Execution(add_compilation)
        expected, out = _bind_chain(chain_execution, n, ctype)
        x, y = (v.reshape(-1)[:2] for v in chain_inputs(10 + n))
        add_out = np.zeros(2, np.float32)
        add_execution.set_input(0, x)
        add_execution.set_input(1, y)
        add_execution.set_output(0, add_out)
        events = [chain_execution.start_compute(), add_execution.start_compute()]
        for event in reversed(events):
            event.wait()
        assert_step(f"step {n}: the chain model", [expected], [out], ctype)
        assert_step(f"step {n}: the ADD model", [x + y], [add_out])


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_executions(mode, chain_compilation, ctype):
    """Eight threads executing one compilation of a model with intermediates, four times each,
    with their own inputs (and burst): each must get its own results."""
    failures: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        try:
            sequence = ExecutionSequence(chain_compilation, mode)
            barrier.wait()
            for n in range(1, EXECUTIONS + 1):
                expected, out = _bind_chain(sequence.execution, 100 * k + n, ctype)
                sequence.run(f"thread {k}, execution {n}")
                assert_step(f"thread {k}, execution {n}", [expected], [out], ctype)
        except BaseException as e:  # collected, raised in the main thread
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "executions still running after 60 s (deadlock?)"
    if failures:
        raise failures[0]


@pytest.mark.parametrize("mode", MODES)
def test_compilation_released_while_another_executes(mode, devices, ctype):
    """Two compilations of one model; the first released (and collected) while the second has an
    execution in flight, and the second executing on after that."""
    model = chain_model(type_=ctype)
    first, second = ExecutionSequence(compiled(model, devices), mode), ExecutionSequence(compiled(model, devices), mode)
    expected, out = _bind_chain(first.execution, 1, ctype)
    first.run("step 1: the first compilation")
    assert_step("step 1: the first compilation", [expected], [out], ctype)
    in_flight = Execution(second.execution.compilation)
    expected_in_flight, out_in_flight = _bind_chain(in_flight, 2, ctype)
    event = in_flight.start_compute()
    del first
    gc.collect()
    event.wait()
    assert_step("step 2: the second compilation, the first released meanwhile", [expected_in_flight],
                [out_in_flight], ctype)
    for n in range(3, 5):
        expected, out = _bind_chain(second.execution, n, ctype)
        second.run(f"step {n}: the second compilation, the first released")
        assert_step(f"step {n}: the second compilation, the first released", [expected], [out], ctype)


def _device_memory(compilation: Compilation) -> Memory:
    """A memory for input a and the output of the chain model: the driver's, where it allocates one."""
    desc = MemoryDesc()
    desc.add_input_role(compilation, 0)
    desc.add_output_role(compilation, 0)
    desc.finish()
    return Memory.from_desc(desc)


@pytest.mark.parametrize("mode", MODES)
def test_device_memory_sequence(mode, devices):
    """A memory from a descriptor for input a and the output: written by one execution, read by
    the next, copied out, overwritten by a copy, and left alone by an execution that failed (its
    deadline had passed). One device: deadlines need a single-device compilation."""
    compilation = compiled(chain_model(), devices[:1])
    memory = _device_memory(compilation)
    a, b = chain_inputs(1)

    def copied_out() -> np.ndarray:
        out = np.zeros(SHAPE, np.float32)
        Memory.copy(memory, Memory.from_buffer(out))
        return out

    writer, reader = ExecutionSequence(compilation, mode), ExecutionSequence(compilation, mode)
    writer.execution.set_input(0, a)
    writer.execution.set_input(1, b)
    writer.execution.set_output_from_memory(0, memory, 0, 0)
    writer.run("step 1: output into the memory")
    assert_step("step 1: output into the memory, copied out", [chain(a, b)], [copied_out()])
    out = np.zeros(SHAPE, np.float32)
    reader.execution.set_input_from_memory(0, memory, 0, 0)
    reader.execution.set_input(1, b)
    reader.execution.set_output(0, out)
    reader.run("step 2: input a from the memory step 1 wrote")
    assert_step("step 2: input a from the memory step 1 wrote", [chain(chain(a, b), b)], [out])
    x = chain_inputs(3)[0]
    Memory.copy(Memory.from_buffer(x.copy()), memory)
    reader.run("step 3: input a from the memory overwritten by a copy")
    assert_step("step 3: input a from the memory overwritten by a copy", [chain(x, b)], [out])
    writer.execution.set_timeout(1)
    try:
        writer.compute()
        left = chain(a, b)  # AOSP: with a deadline that has passed a driver may complete (correctly)
    except NnapiError as e:
        assert e.code in MISSED, f"step 4: a deadline that has passed: {e}, expected MISSED_DEADLINE_*"
        left = x
    assert_step("step 4: the memory after an execution with a deadline that had passed", [left], [copied_out()])
    reader.run("step 5: input a from the memory after the failed execution")
    assert_step("step 5: input a from the memory after the failed execution", [chain(left, b)], [out])


@pytest.mark.parametrize("mode", MODES)
def test_executions_after_failed_ones(mode, devices, ctype):
    """Executions whose deadline has passed, each followed by a valid execution of the same
    reusable execution (and burst) that must compute its own inputs' results. One device:
    deadlines need a single-device compilation."""
    sequence = ExecutionSequence(compiled(chain_model(type_=ctype), devices[:1]), mode)
    for n in range(1, 6):
        expected, out = _bind_chain(sequence.execution, n, ctype)
        failing = n % 2 == 0
        sequence.execution.set_timeout(1 if failing else 0)  # 1 ns: over before the driver sees the request
        step = f"step {n}: a deadline that has passed" if failing else \
            f"step {n}: after a missed deadline" if n > 1 else "step 1"
        try:
            sequence.compute()
        except NnapiError as e:
            assert failing and e.code in MISSED, f"{step}: {e}"
            continue
        assert_step(step, [expected], [out], ctype)
