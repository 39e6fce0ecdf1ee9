"""CTS: what a driver gets wrong over time, across calls, through the runtime API.

* memory: guard bytes before and after every output region and every memory pool, input regions
  and constant memories checked unchanged after every execution; device memory and pool regions
  written by one compilation's execution and read by another's, again and again;
* one compilation, many executions with different data: IF branches and WHILE trip counts that
  change from one execution to the next, one reusable execution's input buffers rewritten in place;
* timing against the client's clock: ``get_duration`` within the execution's wall time, and the
  time in the driver not orders of magnitude below it when the execution demonstrably took long
  (units);
* concurrency across compilations: models of their own prepared and executed from several
  threads at once, while other compilations are being prepared;
* the compilation cache keyed by content: the same graph with other weights, and the same
  weights in another graph, each through the cache;
* value ranges that stress a type: float16 data whose normalizations, reductions and dot
  products pass through sums beyond float16's largest value (65504) on the way to results well
  inside it (NNAPI's CPU computes float16 in float32; its tolerance is float16's);
* resources over time: this process's file descriptors, threads, mapped regions and resident
  memory over thousands of executions of each execution path (an in-process driver's; ``nnts
  stress``'s ``resource_soak`` watches a driver's own process).

Every failure names the execution and the kind of fault ("output 0 of execution 3 wrote 4 bytes
past its region", "timeInDriver 40 µs for an execution of 41 ms wall"). Compilations name the
devices under test (no CPU fallback); expected values come from numpy. The guarded regions,
memory across compilations, timing, concurrency and resource tests build their models in float32,
or where the driver does not support it in quant8 (the ``chain_type`` fixture), so that a
quant8-only driver's faults over time are caught too.
"""
from __future__ import annotations

import functools
import gc
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from nnapi_ref import (UINT64_MAX, Compilation, DurationCode, Execution, Memory, MemoryDesc, Model, NnapiError,
                       OperandCode as T, OperandType, OperationCode, tolerance)
from nnts.cts.support import compiled
from nnts.generators.builders import (FLOAT32, ChainType, ExecutionSequence, add_model, assert_step,
                                      build_operation_model, chain, chain_inputs, chain_model, counting_loop_model,
                                      output, repeated_add_model, scalar, tensor)
from nnts.runners import resources

MODES = ("sync", "async", "burst", "fenced")
GUARD = 16  # guard bytes before and after every region of a pool
PATTERN = 0xA5  # what guard bytes hold
FUSE_NONE = np.int32(0)
F32 = T.TENSOR_FLOAT32


@pytest.fixture(autouse=True)
def _mark(request):
    request.node.nnts_op = "over time"
    request.node.nnts_dtype = "TENSOR_FLOAT32"


@pytest.fixture
def ctype(chain_type, request):
    """The data type of the models below on the devices under test (float32 unless unsupported)."""
    request.node.nnts_dtype = chain_type.code.name
    return chain_type


def f32(*dims) -> OperandType:
    return OperandType(F32, dims)


def _add_chain_model(output_dims=(2, 2), input_dims=(2, 2), type_: ChainType = FLOAT32) -> Model:
    """out = (a + b) + a: the chain model's form (an intermediate between two operations) for a
    driver that runs ADD alone."""
    model = Model()
    t = type_.operand(input_dims)
    a, b, fuse, s_ = model.add_operand(t), model.add_operand(t), model.add_operand(OperandType(T.INT32)), \
        model.add_operand(t)
    out = model.add_operand(type_.operand(output_dims))
    model.set_operand_value(fuse, FUSE_NONE)
    model.add_operation(OperationCode.ADD, [a, b, fuse], [s_])
    model.add_operation(OperationCode.ADD, [s_, a, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def _add_chain(a: np.ndarray, b: np.ndarray, type_: ChainType = FLOAT32) -> np.ndarray:
    return type_.combine(np.add, type_.combine(np.add, a, b), a)


def chain_for(devices, type_: ChainType = FLOAT32):
    """(model maker, its numpy function): the chain model, ((a + b) * b) + a, where the devices run
    MUL, else (a + b) + a, so that a driver with ADD alone is tested too; in ``type_``."""
    if all(chain_model(type_=type_).get_supported_operations_for_devices(devices)):
        return functools.partial(chain_model, type_=type_), functools.partial(chain, type_=type_)
    return functools.partial(_add_chain_model, type_=type_), functools.partial(_add_chain, type_=type_)


def binary_for(devices, type_: ChainType = FLOAT32):
    """(operation, its numpy function): MUL where the devices run it, else ADD; in ``type_``."""
    if all(_binary_model(OperationCode.MUL, type_).get_supported_operations_for_devices(devices)):
        return OperationCode.MUL, functools.partial(type_.combine, np.multiply)
    return OperationCode.ADD, functools.partial(type_.combine, np.add)


# ---------------------------------------------------------------------------------------------
# Memory: guard bytes, constant memory, memory across compilations
# ---------------------------------------------------------------------------------------------

class GuardedPool:
    """One memory pool holding regions, each with GUARD bytes of PATTERN before and after it."""

    def __init__(self, sizes: list[int]):
        self.offsets, offset = [], GUARD
        for size in sizes:
            self.offsets.append(offset)
            offset += size + GUARD
        self.sizes = list(sizes)
        self.data = np.full(offset, PATTERN, np.uint8)
        self.memory = Memory.from_buffer(self.data)

    def region(self, k: int) -> np.ndarray:
        return self.data[self.offsets[k]:self.offsets[k] + self.sizes[k]]

    def put(self, k: int, array: np.ndarray) -> None:
        self.region(k)[:] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)

    def check_guards(self, names: list[str], execution: str) -> None:
        """Every guard byte still PATTERN; the AssertionError says how far past (or before) which
        region the driver wrote."""
        problems = []
        for k, name in enumerate(names):
            start, end = self.offsets[k], self.offsets[k] + self.sizes[k]
            after = np.flatnonzero(self.data[end:end + GUARD] != PATTERN)
            if after.size:
                problems.append(f"{name} of {execution} wrote {after[-1] + 1} bytes past its region "
                                f"(memory bytes [{end}, {end + after[-1] + 1}))")
            before = np.flatnonzero(self.data[start - GUARD:start] != PATTERN)
            if before.size:
                problems.append(f"{name} of {execution} wrote {GUARD - before[0]} bytes before its region "
                                f"(memory bytes [{start - GUARD + before[0]}, {start}))")
        if problems:
            raise AssertionError("; ".join(problems))


OUTPUT_SHAPES = [(2, 2), (3, 4), (1, 3), (3, 3), (1, 1)]  # 16, 48, 12, 36 and 4 bytes


@pytest.mark.parametrize("mode", MODES)
def test_output_regions_guarded(mode, devices, ctype):
    """The chain model's inputs and output in one pool, each region between guard bytes, shapes
    changing from one execution to the next (sizes that are not multiples of 16 bytes among
    them): after every execution the guards and the input regions are as they were."""
    make, compute = chain_for(devices, ctype)
    runner = ExecutionSequence(compiled(make(output_dims=(0, 0), input_dims=(0, 0)), devices), mode)
    for n, shape in enumerate(OUTPUT_SHAPES, 1):
        pool = GuardedPool([ctype.nbytes(int(np.prod(shape)))] * 3)
        a, b = chain_inputs(n, shape, ctype)
        pool.put(0, a)
        pool.put(1, b)
        inputs = pool.data.copy()
        size, dims = ctype.nbytes(a.size), ctype.operand(shape)
        runner.execution.set_input_from_memory(0, pool.memory, pool.offsets[0], size, dims)
        runner.execution.set_input_from_memory(1, pool.memory, pool.offsets[1], size, dims)
        runner.execution.set_output_from_memory(0, pool.memory, pool.offsets[2], size, dims)
        execution = f"execution {n}"
        runner.run(f"{execution} (shape {list(shape)})")
        pool.check_guards(["input 0", "input 1", "output 0"], execution)
        for k in (0, 1):
            changed = np.count_nonzero(pool.region(k) != inputs[pool.offsets[k]:pool.offsets[k] + size])
            assert not changed, f"input {k} of {execution} was written: {changed} bytes of its region changed"
        assert_step(f"{execution} (shape {list(shape)})", [compute(a, b)], [pool.region(2).view(ctype.dtype)], ctype)


CONSTANT_SIZE = 64  # floats: 256 bytes, above the 128 the runtime copies, so set_operand_value references it too
SUBNORMAL = np.float32(1e-40)


def _constant_values(seed: int) -> np.ndarray:
    """Constants with subnormals, signed zeros, ordinary and large values among them."""
    values = np.random.default_rng(seed).uniform(-2, 2, CONSTANT_SIZE).astype(np.float32)
    values[::4] = SUBNORMAL
    values[1::8] = np.float32(-0.0)
    values[2::8] = np.float32(3e38)
    return values


@pytest.mark.parametrize("mode", MODES)
def test_constant_memory_never_written(mode, devices):
    """out = a * w + v (a + w + v for a driver without MUL), w a constant in a memory pool (between
    guard bytes), v a constant the runtime references in the caller's buffer: after compiling and
    after every execution both hold what they held (a driver reads its weights, never writes them)."""
    w, v = _constant_values(1), _constant_values(2)
    w[2::8] = 1.0  # a * w + v within float32's range
    pool = GuardedPool([4 * CONSTANT_SIZE])
    pool.put(0, w)
    v_buffer = v.copy()
    model = Model()
    t = f32(CONSTANT_SIZE)
    a, w_operand, v_operand, fuse, product, out = (model.add_operand(t), model.add_operand(t), model.add_operand(t),
                                                   model.add_operand(OperandType(T.INT32)), model.add_operand(t),
                                                   model.add_operand(t))
    model.set_operand_value_from_memory(w_operand, pool.memory, pool.offsets[0], 4 * CONSTANT_SIZE)
    model.set_operand_value(v_operand, v_buffer)
    model.set_operand_value(fuse, FUSE_NONE)
    code, combine = binary_for(devices)
    model.add_operation(code, [a, w_operand, fuse], [product])
    model.add_operation(OperationCode.ADD, [product, v_operand, fuse], [out])
    model.identify_inputs_and_outputs([a], [out])
    model.finish()
    constants = pool.data.copy()

    def check(when: str) -> None:
        changed = np.flatnonzero(pool.data != constants)
        assert not changed.size, f"constant memory written by the driver {when}: {changed.size} bytes changed, " \
                                 f"first at byte {changed[0]} (operand w, bytes [{pool.offsets[0]}, " \
                                 f"{pool.offsets[0] + pool.sizes[0]}) of its memory)"
        moved = np.flatnonzero(v_buffer.view(np.uint32) != v.view(np.uint32))
        assert not moved.size, f"constant operand v (the caller's buffer) written by the driver {when}: " \
                               f"{moved.size} values changed, first at element {moved[0]}"

    runner = ExecutionSequence(compiled(model, devices), mode)
    check("while compiling")
    result = np.zeros(CONSTANT_SIZE, np.float32)
    runner.execution.set_output(0, result)
    for n in range(1, 4):
        x = np.random.default_rng(10 + n).uniform(-2, 2, CONSTANT_SIZE).astype(np.float32)
        runner.execution.set_input(0, x)
        runner.run(f"execution {n}")
        check(f"in execution {n}")
        assert_step(f"execution {n}", [combine(x, w) + v], [result])


def _binary_model(code: OperationCode, type_: ChainType = FLOAT32) -> Model:
    """out = x (ADD or MUL) y on float32 [2, 2] (or ``type_``): a second model for memory shared
    between compilations."""
    model = Model()
    t = type_.operand((2, 2))
    x, y, fuse, out = model.add_operand(t), model.add_operand(t), model.add_operand(
        OperandType(T.INT32)), model.add_operand(t)
    model.set_operand_value(fuse, FUSE_NONE)
    model.add_operation(code, [x, y, fuse], [out])
    model.identify_inputs_and_outputs([x, y], [out])
    model.finish()
    return model


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["device_memory", "pool"])
def test_memory_across_compilations(mode, kind, devices, ctype):
    """One memory, the output of the chain model's compilation and the input of a MUL (or ADD) model's:
    written by one, read by the other, written again, read again, overwritten by a copy, read
    again. One device: a memory from a descriptor belongs to one."""
    (make, compute), (code, combine) = chain_for(devices[:1], ctype), binary_for(devices[:1], ctype)
    writer_compilation = compiled(make(), devices[:1])
    reader_compilation = compiled(_binary_model(code, ctype), devices[:1])
    memory_kind = kind.replace("_", " ")
    if memory_kind == "device memory":
        desc = MemoryDesc()
        desc.add_output_role(writer_compilation, 0)
        desc.add_input_role(reader_compilation, 0)
        desc.finish()
        memory, offset, length = Memory.from_desc(desc), 0, 0
    else:
        length = ctype.nbytes(4)
        pool = GuardedPool([length])
        memory, offset = pool.memory, pool.offsets[0]
    writer, reader = ExecutionSequence(writer_compilation, mode), ExecutionSequence(reader_compilation, mode)
    writer.execution.set_output_from_memory(0, memory, offset, length)
    reader.execution.set_input_from_memory(0, memory, offset, length)
    out = ctype.zeros((2, 2))
    reader.execution.set_output(0, out)
    y = ctype.stored(np.array([[1.5, -0.5], [2.0, 0.25]], np.float32))
    reader.execution.set_input(1, y)
    n = 0
    for round_ in range(1, 4):
        a, b = chain_inputs(round_, type_=ctype)
        if round_ < 3:
            writer.execution.set_input(0, a)
            writer.execution.set_input(1, b)
            n += 1
            writer.run(f"execution {n} (the chain model writing the {memory_kind})")
            held = compute(a, b)
            source = f"the {memory_kind} the chain model wrote in execution {n}"
        else:
            held = a
            if memory_kind == "pool":
                pool.put(0, a)
                source = "the pool rewritten by the client"
            else:
                Memory.copy(Memory.from_buffer(a.copy()), memory)
                source = "the device memory overwritten by a copy"
        for _ in range(2):
            n += 1
            step = f"execution {n} (the {code.name} model reading {source})"
            reader.run(step)
            assert_step(step, [combine(held, y)], [out], ctype)
    if memory_kind == "pool":
        pool.check_guards(["output 0 of the chain model"], "its executions")


# ---------------------------------------------------------------------------------------------
# One compilation, many executions with different data
# ---------------------------------------------------------------------------------------------

def _if_model() -> Model:
    """IF (c) then out = x + x else out = x * x, on float32 [2]."""
    branches = []
    for code in (OperationCode.ADD, OperationCode.MUL):
        branch = Model()
        x, fuse, out = branch.add_operand(f32(2)), branch.add_operand(OperandType(T.INT32)), branch.add_operand(f32(2))
        branch.set_operand_value(fuse, FUSE_NONE)
        branch.add_operation(code, [x, x, fuse], [out])
        branch.identify_inputs_and_outputs([x], [out])
        branch.finish()
        branches.append(branch)
    model = Model()
    c = model.add_operand(OperandType(T.TENSOR_BOOL8, [1]))
    then_ref, else_ref = model.add_operand(OperandType(T.MODEL)), model.add_operand(OperandType(T.MODEL))
    x, out = model.add_operand(f32(2)), model.add_operand(f32(2))
    model.set_operand_value_from_model(then_ref, branches[0])
    model.set_operand_value_from_model(else_ref, branches[1])
    model.add_operation(OperationCode.IF, [c, then_ref, else_ref, x], [out])
    model.identify_inputs_and_outputs([c, x], [out])
    model.finish()
    return model


WHILE_STARTS = [4.5, 0.0, 10.0, -3.5, 2.0]  # 1, 5, 0, 9 and 3 trips of i = i + 1 while i < 5
IF_CONDITIONS = [True, False, False, True, False]


def _trips(start: float) -> int:
    return max(0, int(np.ceil(5.0 - start)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flow", ["WHILE", "IF"])
def test_control_flow_changes_between_executions(mode, flow, devices):
    """One compilation of a WHILE loop whose trip count, or of an IF whose branch, comes from the
    input and changes from one execution to the next."""
    model = counting_loop_model(1.0) if flow == "WHILE" else _if_model()
    runner = ExecutionSequence(compiled(model, devices), mode)
    out = np.zeros(1 if flow == "WHILE" else 2, np.float32)
    runner.execution.set_output(0, out)
    for n in range(1, len(WHILE_STARTS) + 1):
        if flow == "WHILE":
            start = WHILE_STARTS[n - 1]
            runner.execution.set_input(0, np.array([start], np.float32))
            step = f"execution {n} (WHILE from {start}: {_trips(start)} trips of its body)"
            expected = np.array([start + _trips(start)], np.float32)
        else:
            condition = IF_CONDITIONS[n - 1]
            x = np.array([1.5 + n, -0.5 * n], np.float32)
            runner.execution.set_input(0, np.array([condition]))
            runner.execution.set_input(1, x)
            step = f"execution {n} (IF {'true: the then branch' if condition else 'false: the else branch'})"
            expected = x + x if condition else x * x
        runner.run(step)
        assert_step(step, [expected], [out])


@pytest.mark.parametrize("mode", MODES)
def test_input_buffers_rewritten_in_place(mode, devices):
    """One reusable execution, its input and output buffers bound once; new contents written
    into the same input buffers before every execution."""
    make, compute = chain_for(devices)
    runner = ExecutionSequence(compiled(make(), devices), mode)
    a, b, out = np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32)
    runner.execution.set_input(0, a)
    runner.execution.set_input(1, b)
    runner.execution.set_output(0, out)
    for n in range(1, 5):
        a[...], b[...] = chain_inputs(n)
        step = f"execution {n} (new contents in the same input buffers)"
        runner.run(step)
        assert_step(step, [compute(a, b)], [out])


# ---------------------------------------------------------------------------------------------
# Timing against the client's clock
# ---------------------------------------------------------------------------------------------

LONG_NS = 10_000_000  # an execution this long (wall) must report a time in the driver of its order
PLAUSIBLE_SHARE = 100  # a time in the driver below 1/100 of such an execution's wall time is wrong
LAYERS = 3
ADDING_LAYERS, MAX_ADDING_SIZE = 15, 1024
TIMED_RUNS = 3
MIN_TIMED_SIZE, MAX_TIMED_SIZE = 128, 2048


def _accumulating_model(size: int, type_: ChainType = FLOAT32) -> Model:
    """For a driver without FULLY_CONNECTED: h = x, then h = h + x ADDING_LAYERS times, on float32
    (or ``type_``) [size, size] (out = (ADDING_LAYERS + 1) * x)."""
    return repeated_add_model(type_.operand((size, size)), ADDING_LAYERS)


def _accumulated(x: np.ndarray, type_: ChainType) -> np.ndarray:
    """What :func:`_accumulating_model` computes (quantized: every ADD requantized)."""
    if not type_.quantized:
        return x * (ADDING_LAYERS + 1)
    h = x
    for _ in range(ADDING_LAYERS):
        h = type_.combine(np.add, h, x)
    return h


def _dense_model(size: int, type_: ChainType = FLOAT32) -> Model:
    """LAYERS FULLY_CONNECTED layers on a float32 (or ``type_``) [size, size] input, each with the
    same constant weights (a permutation reversing the columns) and zero bias: out = x with its
    columns reversed, exactly, after LAYERS * size**3 multiply-adds (quantized: weights of scale 1,
    so the output's scale is the input's)."""
    model = Model()
    t = type_.operand((size, size))
    if type_.quantized:
        w_type, b_type = OperandType(type_.code, (size, size), 1.0, 0), OperandType(T.TENSOR_INT32, (size,),
                                                                                     type_.scale, 0)
        w_dtype, b_dtype = type_.dtype, np.int32
    else:
        w_type, b_type, w_dtype, b_dtype = t, f32(size), np.float32, np.float32
    x, weights, bias, fuse = model.add_operand(t), model.add_operand(w_type), model.add_operand(b_type), \
        model.add_operand(OperandType(T.INT32))
    model.set_operand_value(weights, np.eye(size, dtype=w_dtype)[::-1].copy())
    model.set_operand_value(bias, np.zeros(size, b_dtype))
    model.set_operand_value(fuse, FUSE_NONE)
    h = x
    for _ in range(LAYERS):
        nxt = model.add_operand(t)
        model.add_operation(OperationCode.FULLY_CONNECTED, [h, weights, bias, fuse], [nxt])
        h = nxt
    model.identify_inputs_and_outputs([x], [h])
    model.finish()
    return model


def _format_ns(ns: int) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


TIMING_NAMES = {DurationCode.ON_HARDWARE: "timeOnDevice", DurationCode.IN_DRIVER: "timeInDriver",
                DurationCode.FENCED_ON_HARDWARE: "fenced timeOnDevice",
                DurationCode.FENCED_IN_DRIVER: "fenced timeInDriver"}


@pytest.mark.parametrize("mode", MODES)
def test_timing_against_the_clock(mode, devices, ctype):
    """Three FULLY_CONNECTED layers (or 15 ADDs) on tensors made larger until three executions each
    take at least 10 ms of the
    client's clock: every duration the driver reports (NNAPI's measureTiming: nanoseconds) is
    within its execution's wall time, and the time in the driver is not orders of magnitude below
    it (the time on the device may be: an accelerator's share of an execution can be small). The
    shortest of the three walls is compared with the longest time reported, so that a machine
    stalling one execution (wall time without work) cannot make a correct driver look wrong."""
    codes = list(TIMING_NAMES) if mode == "fenced" else [DurationCode.ON_HARDWARE, DurationCode.IN_DRIVER]
    dense = all(_dense_model(MIN_TIMED_SIZE, ctype).get_supported_operations_for_devices(devices[:1]))
    make, largest = (_dense_model, MAX_TIMED_SIZE) if dense else (_accumulating_model, MAX_ADDING_SIZE)
    n = MIN_TIMED_SIZE
    while True:
        runner = ExecutionSequence(compiled(make(n, ctype), devices[:1]), mode)
        x = ctype.stored(np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n))
        out = ctype.zeros((n, n))
        runner.execution.set_input(0, x)
        runner.execution.set_output(0, out)
        runner.execution.set_measure_timing(True)
        walls, reported = [], {code: [] for code in codes}
        while len(walls) < TIMED_RUNS and (not walls or walls[0] >= LONG_NS or n >= largest):
            out[:] = 0
            start = time.monotonic_ns()
            runner.run(f"an execution on [{n}, {n}]")
            walls.append(time.monotonic_ns() - start)
            assert_step(f"an execution on [{n}, {n}]", [x[:, ::-1] if dense else _accumulated(x, ctype)], [out], ctype)
            for code in codes:
                value = runner.execution.get_duration(code)
                assert value == UINT64_MAX or value <= walls[-1], \
                    f"{TIMING_NAMES[code]} {_format_ns(value)} for an execution of {_format_ns(walls[-1])} wall " \
                    "(more than the whole call took: not nanoseconds?)"
                reported[code].append(value)
        if min(walls) >= LONG_NS or n >= largest:
            break
        n *= 2
    shortest = min(walls)
    for code in (DurationCode.IN_DRIVER, DurationCode.FENCED_IN_DRIVER):
        values = [v for v in reported.get(code, []) if v != UINT64_MAX]
        if shortest >= LONG_NS and values:
            assert max(values) * PLAUSIBLE_SHARE >= shortest, \
                f"{TIMING_NAMES[code]} {_format_ns(max(values))} for an execution of {_format_ns(shortest)} wall " \
                f"(at most, in {len(values)} executions of at least that: below 1/{PLAUSIBLE_SHARE} of it, " \
                "not nanoseconds?)"


# ---------------------------------------------------------------------------------------------
# Concurrency across compilations
# ---------------------------------------------------------------------------------------------

THREAD_MODELS = 4
THREAD_EXECUTIONS = 6


def _thread_case(k: int, devices, type_: ChainType = FLOAT32):
    """(model, its inputs for execution n, its expected output, a name) for thread ``k``: the
    chain model, ADD on [2], MUL (or ADD) on [2, 2] and the chain model on [3, 4], each of its own,
    in ``type_``."""
    make, compute = chain_for(devices, type_)
    if k == 0:
        return make(), lambda n: chain_inputs(n, type_=type_), compute, "chain [2, 2]"
    if k == 1:
        return (add_model(type_=type_), lambda n: tuple(v.reshape(-1)[:2] for v in chain_inputs(n, type_=type_)),
                functools.partial(type_.combine, np.add), "ADD [2]")
    if k == 2:
        code, combine = binary_for(devices, type_)
        return _binary_model(code, type_), lambda n: chain_inputs(n, type_=type_), combine, f"{code.name} [2, 2]"
    shape = (3, 4)
    return (make(output_dims=shape, input_dims=shape), lambda n: chain_inputs(n, shape, type_), compute,
            "chain [3, 4]")


@pytest.mark.parametrize("mode", MODES)
def test_compilations_of_different_models_at_once(mode, devices, ctype):
    """Four threads, each preparing a model of its own and executing it six times with new inputs,
    and a fifth preparing compilations all the while: every result is its own model's."""
    cases = [_thread_case(k, devices, ctype) for k in range(THREAD_MODELS)]
    for model, _, _, name in cases:
        if not all(model.get_supported_operations_for_devices(devices)):
            pytest.skip(f"unsupported: {name}")
    failures: list[BaseException] = []
    barrier = threading.Barrier(THREAD_MODELS + 1)
    done = threading.Event()

    def worker(k: int) -> None:
        try:
            model, inputs, compute, name = cases[k]
            barrier.wait()
            runner = ExecutionSequence(compiled(model, devices), mode)
            for n in range(1, THREAD_EXECUTIONS + 1):
                x, y = inputs(100 * k + n)
                out = ctype.zeros(x.shape)
                runner.execution.set_input(0, x)
                runner.execution.set_input(1, y)
                runner.execution.set_output(0, out)
                step = f"thread {k} ({name}), execution {n}, other compilations executing and being prepared"
                runner.run(step)
                assert_step(step, [compute(x, y)], [out], ctype)
        except BaseException as e:  # collected, raised in the main thread
            failures.append(e)

    def preparer() -> None:
        try:
            barrier.wait()
            while not done.is_set():
                compiled(_binary_model(binary_for(devices, ctype)[0], ctype), devices)
        except BaseException as e:
            failures.append(AssertionError(f"preparing while other compilations execute: {e}"))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREAD_MODELS)]
    prepare_thread = threading.Thread(target=preparer)
    for t in threads + [prepare_thread]:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    prepare_thread.join(60)
    assert not any(t.is_alive() for t in threads + [prepare_thread]), "threads still running after 60 s (deadlock?)"
    if failures:
        raise failures[0]


# ---------------------------------------------------------------------------------------------
# The compilation cache, by content
# ---------------------------------------------------------------------------------------------

def _weights_model(code: OperationCode, weights: np.ndarray) -> Model:
    """out = x (ADD or MUL) w, w a [4] constant."""
    model = Model()
    x, w, fuse, out = model.add_operand(f32(4)), model.add_operand(f32(4)), model.add_operand(
        OperandType(T.INT32)), model.add_operand(f32(4))
    model.set_operand_value(w, weights)
    model.set_operand_value(fuse, FUSE_NONE)
    model.add_operation(code, [x, w, fuse], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


CACHE_CASES = [  # (name, operation, weights): the same graph with other weights, the same weights in another graph
    ("MUL by w1", OperationCode.MUL, np.array([1.0, 2.0, 3.0, 4.0], np.float32)),
    ("MUL by w2", OperationCode.MUL, np.array([-2.0, 0.5, 8.0, -1.0], np.float32)),
    ("ADD of w1", OperationCode.ADD, np.array([1.0, 2.0, 3.0, 4.0], np.float32)),
]

CACHE_INPUT = np.array([0.5, -1.0, 2.0, 3.0], np.float32)


def test_cache_keyed_by_content(devices, tmp_path):
    """Three models through one cache folder, each with its own token, compiled then compiled
    again (from the cache where the driver keeps one): each computes with its own graph and weights."""
    x = CACHE_INPUT
    for again in (False, True):
        for k, (name, code, weights) in enumerate(CACHE_CASES):
            token = bytes([k + 1]) * 32
            compilation = compiled(_weights_model(code, weights), devices[:1], (str(tmp_path), token))
            out = np.zeros(4, np.float32)
            execution = Execution(compilation)
            execution.set_input(0, x)
            execution.set_output(0, out)
            before = ", ".join(c[0] for c in CACHE_CASES[:k])
            step = f"{name} (token {k + 1}), " + ("compiled again, from the cache where the driver keeps one"
                                                  if again else f"compiled after {before}" if k else "compiled first")
            try:
                execution.compute()
            except NnapiError as e:
                raise AssertionError(f"{step}: execution failed: {e}") from None
            expected = x * weights if code == OperationCode.MUL else x + weights
            assert_step(f"cache by content: {step}", [expected], [out])


def _cache_child(driver: str, isolate: bool, cache_dir: str) -> None:
    """The other process of :func:`test_cache_keyed_by_content_across_processes`: compile the first
    case with its token into ``cache_dir`` on the drivers' first device, execute it, print the output."""
    from nnapi_ref.runtime import get_devices, set_drivers
    from nnts.runners.drivers import load_drivers
    set_drivers(load_drivers(driver, isolate=isolate))
    _, code, weights = CACHE_CASES[0]
    compilation = Compilation(_weights_model(code, weights), get_devices()[:1])
    compilation.set_caching(cache_dir, bytes([1]) * 32)
    compilation.finish()
    out = np.zeros(4, np.float32)
    execution = Execution(compilation)
    execution.set_input(0, CACHE_INPUT)
    execution.set_output(0, out)
    execution.compute()
    print(" ".join(repr(float(v)) for v in out))


def test_cache_keyed_by_content_across_processes(devices, tmp_path, pytestconfig):
    """Another process compiles "MUL by w1" into the cache folder with its token; this one then
    compiles "MUL by w2" (the same graph) with another token, and "MUL by w1" with the first
    (from the other process's cache): each computes with its own weights."""
    if not all(_weights_model(OperationCode.MUL, CACHE_CASES[0][2]).get_supported_operations_for_devices(devices[:1])):
        pytest.skip("unsupported: MUL")
    command = [sys.executable, "-m", "nnts.cts.test_over_time", pytestconfig.getoption("driver"),
               "isolate" if pytestconfig.getoption("isolate") else "in-process", str(tmp_path)]
    child = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert child.returncode == 0, f"the other process compiling MUL by w1 into the cache failed: {child.stderr[-2000:]}"
    assert_step("cache by content: MUL by w1 in the other process", [CACHE_INPUT * CACHE_CASES[0][2]],
                [np.array([float(v) for v in child.stdout.split()], np.float32)])
    for k in (1, 0):
        name, code, weights = CACHE_CASES[k]
        compilation = compiled(_weights_model(code, weights), devices[:1], (str(tmp_path), bytes([k + 1]) * 32))
        out = np.zeros(4, np.float32)
        execution = Execution(compilation)
        execution.set_input(0, CACHE_INPUT)
        execution.set_output(0, out)
        step = f"cache by content: {name} (token {k + 1}) in this process, after the other compiled MUL by w1"
        try:
            execution.compute()
        except NnapiError as e:
            raise AssertionError(f"{step}: execution failed: {e}") from None
        assert_step(step, [CACHE_INPUT * weights], [out])


# ---------------------------------------------------------------------------------------------
# Value ranges that stress a type
# ---------------------------------------------------------------------------------------------

F16 = T.TENSOR_FLOAT16
L2_INPUT = np.array([[300, -400, 200, 100]], np.float16)  # squares summing to 300,000
MEAN_INPUT = np.array([[30000, 32000, 34000, 36000, 38000, 40000, 42000, 44000],
                       [60000, 50000, 40000, 30000, 20000, 10000, 5000, 1000]], np.float16)  # sums to 296,000 and 216,000
FC_INPUT, FC_WEIGHTS = np.array([[250, 250, -250, -250]], np.float16), np.array([[240] * 4, [240, -240] * 2], np.float16)
FC_BIAS = np.array([1.0, -2.0], np.float16)  # products of 60,000: partial sums of 120,000


def _float16_case(name: str):
    """(operation, inputs, outputs, expected, what) of a float16 case, expected from float64 math."""
    if name == "L2_NORMALIZATION":
        x = L2_INPUT.astype(np.float64)
        return (OperationCode.L2_NORMALIZATION, [tensor(F16, L2_INPUT)], [output(F16, L2_INPUT.shape)],
                x / np.sqrt((x * x).sum(-1, keepdims=True)), "values up to 400, their squares summing to 300,000")
    if name == "MEAN":
        return (OperationCode.MEAN, [tensor(F16, MEAN_INPUT), tensor(T.TENSOR_INT32, [1], as_input=False),
                                     scalar(T.INT32, 0)], [output(F16, (2,))],
                MEAN_INPUT.astype(np.float64).mean(1), "rows averaging 37,000 and 27,000 (sums of 296,000 and 216,000)")
    x, w = FC_INPUT.astype(np.float64), FC_WEIGHTS.astype(np.float64)
    return (OperationCode.FULLY_CONNECTED, [tensor(F16, FC_INPUT), tensor(F16, FC_WEIGHTS, as_input=False),
                                            tensor(F16, FC_BIAS, as_input=False), scalar(T.INT32, 0)],
            [output(F16, (1, 2))], x @ w.T + FC_BIAS, "products of 60,000 summing to 1 and -2, partial sums of 120,000")


@pytest.mark.parametrize("operation", ["L2_NORMALIZATION", "MEAN", "FULLY_CONNECTED"])
def test_float16_near_its_range(operation, devices, request):
    """float16 results well inside its range whose intermediate sums are not: a driver summing in
    float16 overflows to inf or NaN."""
    request.node.nnts_op, request.node.nnts_dtype = operation, "TENSOR_FLOAT16"
    code, inputs, outputs, expected, what = _float16_case(operation)
    model, fed = build_operation_model(code, inputs, outputs)
    runner = ExecutionSequence(compiled(model, devices), "sync")
    for n, i in enumerate(fed):
        runner.execution.set_input(n, inputs[i].value)
    out = np.zeros(expected.shape, np.float16)
    runner.execution.set_output(0, out)
    step = f"float16 near its range: {operation} of {what}"
    runner.run(step)
    result = tolerance.compare(expected, out, F16, what="output 0")
    assert result.ok, f"{step}: {result.message}"


# ---------------------------------------------------------------------------------------------
# Resources over time
# ---------------------------------------------------------------------------------------------

SOAK_WARMUP, SOAK_EXECUTIONS = 100, 2000
SOAK_PATHS = ("sync", "async", "fenced", "burst", "device_memory")


@pytest.mark.parametrize("path", SOAK_PATHS)
def test_resources_per_execution_path(path, devices, ctype):
    """2,000 executions of ADD on one path (device_memory: input and output in device memories,
    synchronously) after 100 to warm up: this process's fds, threads, mapped regions and resident
    memory may not grow with them (the driver under test runs in this process, unless isolated)."""
    if not resources.available():
        pytest.skip("no /proc: resources are read from Linux's /proc")
    compilation = compiled(add_model(type_=ctype), devices[:1])
    runner = ExecutionSequence(compilation, "sync" if path == "device_memory" else path)
    x, y = ctype.stored(np.array([1.5, -2.0], np.float32)), ctype.stored(np.array([0.25, 4.0], np.float32))
    out = ctype.zeros(2)
    runner.execution.set_input(1, y)
    if path == "device_memory":
        memories = []
        for role in ("input", "output"):
            desc = MemoryDesc()
            (desc.add_input_role if role == "input" else desc.add_output_role)(compilation, 0)
            desc.finish()
            memories.append(Memory.from_desc(desc))
        Memory.copy(Memory.from_buffer(x.copy()), memories[0])
        runner.execution.set_input_from_memory(0, memories[0], 0, 0)
        runner.execution.set_output_from_memory(0, memories[1], 0, 0)
    else:
        runner.execution.set_input(0, x)
        runner.execution.set_output(0, out)
    what = f"{path.replace('_', ' ')} execution"
    for n in range(1, SOAK_WARMUP + SOAK_EXECUTIONS + 1):
        if n == SOAK_WARMUP + 1:
            gc.collect()
            before = resources.sample()
        runner.run(f"{what} {n}")
    gc.collect()
    after = resources.sample()
    if path == "device_memory":
        Memory.copy(memories[1], Memory.from_buffer(out))
    assert_step(f"{what} {n}", [ctype.combine(np.add, x, y)], [out], ctype)
    leaks = resources.leaks(before, after, SOAK_EXECUTIONS, what)
    assert not leaks, "; ".join(leaks)


if __name__ == "__main__":  # the other process of test_cache_keyed_by_content_across_processes
    _cache_child(sys.argv[1], sys.argv[2] == "isolate", sys.argv[3])
