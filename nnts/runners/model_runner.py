"""Runs one test model through the runtime against chosen devices, as AOSP's generated tests do:
build it call by call, compile it for the devices (no CPU fallback to hide a driver's faults),
feed the inputs, execute in the chosen mode, and compare every output with NNAPI's tolerances.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import extensions
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import Model as HalModel, Subgraph
from nnapi_ref.runtime import (AHardwareBuffer, Compilation, Device, Execution, HardwareBufferDesc, Memory, MemoryDesc,
                               Model, OperandType)
from nnapi_ref.tolerance import compare, compare_multinomial
from nnapi_ref.types import SCALAR_TYPES, Lifetime, OperandCode, OperationCode, ResultCode, type_name
from nnapi_ref.vectors import TestModel
from nnts.generators.builders import compute_in_mode
from nnts.generators.criteria import Criterion, compare_output
from nnts.runners.parameters import unsupported_operations

MODES = ("sync", "async", "burst", "fenced")
# A model that must fail only has to fail: an infinite WHILE loop need not run for NNAPI's
# default 2 s loop timeout before it does.
EXPECT_FAILURE_LOOP_TIMEOUT_NS = 100_000_000
PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"


@dataclass
class TestResult:
    name: str
    status: str
    message: str = ""
    source: str = ""
    stage: str = ""   # build, support, compile, execute or compare
    outputs: list = field(default_factory=list)


def _code_in(model: Model, code, names: dict[int, str], operation: bool):
    """A HAL model's type code as ``model`` numbers it (extensions: through its own prefixes)."""
    if not extensions.is_extension_type(code):
        return code
    name = names.get(extensions.prefix_of(code))
    if name is None:
        raise NnapiError(ResultCode.BAD_DATA, f"type {code}: prefix {extensions.prefix_of(code)} names no extension")
    get = model.get_extension_operation_type if operation else model.get_extension_operand_type
    return get(name, extensions.within_extension(code))


def _add_subgraph(model: Model, sg: Subgraph, referenced: list[Model], dynamic_outputs: bool,
                  names: dict[int, str] | None = None) -> None:
    names = names or {}
    for k, o in enumerate(sg.operands):
        dims = o.dimensions
        if dynamic_outputs and o.lifetime == Lifetime.SUBGRAPH_OUTPUT:
            dims = (0,) * len(dims)
        model.add_operand(OperandType(_code_in(model, o.type, names, False), dims, o.scale, o.zero_point))
        if o.extension_data is not None:
            model.set_operand_extension_data(k, o.extension_data)
        if o.channel_quant is not None:
            model.set_operand_symm_per_channel_quant_params(k, o.channel_quant.scales, o.channel_quant.channel_dim)
        if o.lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE):
            model.set_operand_value(k, o.value)
        elif o.lifetime == Lifetime.NO_VALUE:
            model.set_operand_value(k, None)
        elif o.lifetime == Lifetime.SUBGRAPH:
            model.set_operand_value_from_model(k, referenced[o.value])
    for op in sg.operations:
        model.add_operation(_code_in(model, op.type, names, True), op.inputs, op.outputs)
    model.identify_inputs_and_outputs(sg.input_indexes, sg.output_indexes)


def build_model(hal_model: HalModel, dynamic_outputs: bool = False) -> Model:
    """The model rebuilt through the NDK-style builder (referenced subgraphs first)."""
    referenced: list[Model | None] = [None] * len(hal_model.referenced)
    names = extensions.prefix_map(hal_model)

    def build(k: int) -> Model:
        if referenced[k] is None:
            sg = hal_model.referenced[k]
            for o in sg.operands:
                if o.lifetime == Lifetime.SUBGRAPH:
                    build(o.value)
            m = Model()
            _add_subgraph(m, sg, referenced, False, names)
            m.relax_computation_float32_to_float16(hal_model.relax_computation_float32_to_float16)
            m.finish()
            referenced[k] = m
        return referenced[k]

    for o in hal_model.main.operands:
        if o.lifetime == Lifetime.SUBGRAPH:
            build(o.value)
    model = Model()
    _add_subgraph(model, hal_model.main, referenced, dynamic_outputs, names)
    model.relax_computation_float32_to_float16(hal_model.relax_computation_float32_to_float16)
    model.finish()
    return model


def uses_float16(model: HalModel) -> bool:
    return any(o.type in (OperandCode.TENSOR_FLOAT16, OperandCode.FLOAT16)
               for sg in [model.main] + model.referenced for o in sg.operands)


def supports_dynamic_outputs(model: HalModel) -> bool:
    """The harness re-runs models with unspecified outputs, except those with IF, WHILE or RANK."""
    no = {OperationCode.IF, OperationCode.WHILE, OperationCode.RANK}
    return not any(op.type in no for sg in [model.main] + model.referenced for op in sg.operations)


def outputs_fully_specified(model: HalModel) -> bool:
    """Fenced executions need every output's dimensions known before they start."""
    main = model.main
    return all(main.operands[k].type in SCALAR_TYPES or (main.operands[k].dimensions and
                                                        0 not in main.operands[k].dimensions)
               for k in main.output_indexes)


def _device_memory(compilation: Compilation, index: int, is_input: bool) -> Memory:
    """A memory for one input or output in the memory domain of the compilation's device."""
    desc = MemoryDesc()
    (desc.add_input_role if is_input else desc.add_output_role)(compilation, index)
    desc.finish()
    return Memory.from_desc(desc)


def _aligned(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _in_hardware_buffer(execution: Execution, compilation: Compilation, inputs: list, outputs: list) -> np.ndarray:
    """Bind every input and output to its own region of one BLOB hardware buffer, each at the
    alignment the compilation prefers (as AOSP's generated tests place them in an AHWB); return
    the buffer's bytes, from which the outputs are read after the execution."""
    places, size = [], 0
    for i, value in enumerate(inputs):
        if value is not None:
            size = _aligned(size, compilation.get_preferred_memory_alignment_for_input(i))
            places.append((True, i, size, value.nbytes))
            size += value.nbytes
    for i, out in enumerate(outputs):
        size = _aligned(size, compilation.get_preferred_memory_alignment_for_output(i))
        places.append((False, i, size, out.nbytes))
        size += out.nbytes
    buffer = AHardwareBuffer.allocate(HardwareBufferDesc(max(size, 1)))
    memory = Memory.from_ahardware_buffer(buffer)
    for is_input, i, offset, length in places:
        if is_input:
            buffer.data[offset:offset + length] = inputs[i].reshape(-1).view(np.uint8)
            execution.set_input_from_memory(i, memory, offset, length)
        else:
            execution.set_output_from_memory(i, memory, offset, length)
            outputs[i] = buffer.data[offset:offset + length].view(outputs[i].dtype)
    return buffer.data


def execute(compilation: Compilation, test: TestModel, mode: str = "sync", device_memory: bool = False,
            hardware_buffer: bool = False) -> tuple[list[np.ndarray], list[tuple]]:
    """Run ``test``'s inputs through ``compilation``; return the outputs and their dimensions.
    With ``device_memory`` every input and output lives in memory allocated from a descriptor,
    with ``hardware_buffer`` in one BLOB hardware buffer."""
    execution = Execution(compilation)
    if test.expect_failure:
        execution.set_loop_timeout(EXPECT_FAILURE_LOOP_TIMEOUT_NS)
    main = test.model.main
    inputs = [None if value is None else np.ascontiguousarray(value) for value in test.inputs]
    built = compilation.model.hal_model.main  # the same operands, extension types in its own numbering
    outputs = [np.zeros(test.expected[i].size, compilation.model.dtype_of(built.operands[k].type))
               for i, k in enumerate(main.output_indexes)]
    output_memories = []
    if hardware_buffer:
        for i, value in enumerate(inputs):
            if value is None:
                execution.set_input(i, None)
        _in_hardware_buffer(execution, compilation, inputs, outputs)
    else:
        for i, value in enumerate(inputs):
            if value is None or not device_memory:
                execution.set_input(i, value)
            else:
                memory = _device_memory(compilation, i, True)
                Memory.copy(Memory.from_buffer(value.copy()), memory)
                execution.set_input_from_memory(i, memory, 0, 0)
        for i, out in enumerate(outputs):
            if device_memory:
                output_memories.append(_device_memory(compilation, i, False))
                execution.set_output_from_memory(i, output_memories[-1], 0, 0)
            else:
                execution.set_output(i, out)
    compute_in_mode(execution, mode, compilation)
    for out, memory in zip(outputs, output_memories):
        Memory.copy(memory, Memory.from_buffer(out))
    dims = [execution.get_output_operand_dimensions(i) for i in range(len(outputs))]
    return outputs, dims


def compile_for(model: Model, devices: list[Device], cache_dir: str | None, token: bytes) -> Compilation:
    """Compile ``model``; with ``cache_dir`` (made here: the NDK makes no folder), compile once to
    fill the cache, then again from it."""
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    for _ in range(2 if cache_dir else 1):
        compilation = Compilation(model, devices)
        if cache_dir:
            compilation.set_caching(cache_dir, token)
        compilation.finish()
    return compilation


def compare_with_criteria(criteria: dict, expected: np.ndarray, actual: np.ndarray, type_: OperandCode,
                          position: int) -> str | None:
    """Why output ``position`` fails the random tests' criteria recorded in a test
    (``accuracy_criteria``: atol, rtol, bias, mse per output type), or None."""
    judged_as = {OperandCode.INT32: OperandCode.TENSOR_INT32}.get(type_, type_)  # RANK's scalar, as in the random tests
    c = criteria.get(type_name(judged_as))
    criterion = None if c is None else Criterion(c["atol"], c.get("rtol", 0.0), c.get("bias", math.inf),
                                                 c.get("mse", math.inf))
    if criterion is None and judged_as != OperandCode.TENSOR_BOOL8:
        result = compare(expected, actual, type_, what=f"output {position}")
        return None if result.ok else result.message
    return compare_output(expected, actual, judged_as, criterion, f"output {position}")


def check_outputs(test: TestModel, outputs: list[np.ndarray], dims: list[tuple]) -> list[str]:
    """Messages for every output that is wrong (empty when all pass)."""
    problems = []
    float16_rules = test.is_relaxed or uses_float16(test.model)
    mobilenet = "mobilenet" in test.name
    main = test.model.main
    for i, k in enumerate(main.output_indexes):
        if test.ignored[i]:
            continue
        operand = main.operands[k]
        expected = test.expected[i]
        expected_dims = tuple(test.output_dims[i]) if test.output_dims else tuple(dims[i])
        if test.criteria is not None:  # a random test's reproducer: judged as the random test judged it
            actual = outputs[i][:int(np.prod(dims[i], dtype=np.int64))].reshape(dims[i])
            message = compare_with_criteria(test.criteria, expected.reshape(expected_dims), actual, operand.type, i)
            if message:
                problems.append(message)
            continue
        if operand.type not in (OperandCode.FLOAT32, OperandCode.INT32, OperandCode.BOOL, OperandCode.FLOAT16,
                                OperandCode.UINT32) and tuple(dims[i]) != expected_dims:
            problems.append(f"output {i}: dimensions {list(dims[i])}, expected {list(expected_dims)}")
            continue
        if test.multinomial_tolerance > 0:
            logits = test.inputs[0]
            result = compare_multinomial(logits, outputs[i].reshape(dims[i]), test.multinomial_tolerance, f"output {i}")
        else:
            result = compare(expected.reshape(expected_dims), outputs[i][:expected.size].reshape(expected_dims),
                             operand.type, float16_rules, mobilenet, f"output {i}")
        if not result.ok:
            problems.append(result.message)
    return problems


def run_test(test: TestModel, devices: list[Device], mode: str = "sync", dynamic_outputs: bool = False,
             device_memory: bool = False, cache_dir: str | None = None, hardware_buffer: bool = False) -> TestResult:
    """Build, compile for ``devices`` and execute one test model; judge the result.

    ``device_memory`` puts every input and output in memory from descriptors (memory domains),
    ``hardware_buffer`` in one BLOB hardware buffer; ``cache_dir`` compiles through the
    compilation cache (saved, then reloaded)."""
    result = TestResult(test.name, FAIL, source=test.source)
    if mode == "fenced" and (dynamic_outputs or not outputs_fully_specified(test.model)):
        result.status, result.message = SKIP, "fenced execution needs fully specified output dimensions"
        return result
    stage = "build"
    declared = {e.name for d in devices for e in d.extensions}
    missing = sorted({e.name for e in test.model.extension_name_to_prefix} - declared)
    if missing:  # its extension operands cannot even be built: unsupported
        result.status, result.message = SKIP, f"unsupported: no device supports extension {', '.join(missing)}"
        return result
    try:
        model = build_model(test.model, dynamic_outputs)
        stage = "support"
        if not test.expect_failure:
            level = test.min_feature_level or 0
            too_old = [d.name for d in devices if d.feature_level < level]
            if too_old and len(too_old) == len(devices):
                result.status, result.message = SKIP, f"feature level {level} needed; {too_old[0]} has a lower one"
                return result
            supported = model.get_supported_operations_for_devices(devices)
            if not all(supported):
                result.status = SKIP
                result.message = f"unsupported: {unsupported_operations(test.model, supported)}"
                return result
        stage = "compile"
        compilation = compile_for(model, devices, cache_dir, hashlib.sha256(test.name.encode()).digest())
        stage = "execute"
        outputs, dims = execute(compilation, test, mode, device_memory, hardware_buffer)
    except NnapiError as e:
        result.stage = stage
        if test.expect_failure:
            result.status, result.message = PASS, f"failed as expected at {stage}: {e.code.name}"
        else:
            result.status, result.message = FAIL, f"{stage}: {e}"
        return result
    except Exception as e:  # a bug: report it as an error, never crash the run
        result.stage, result.status = stage, ERROR
        result.message = f"{stage}: {type(e).__name__}: {e}"
        return result
    result.stage = "compare"
    if test.expect_failure:
        result.message = "expected a failure, but building, compiling and executing all succeeded"
        return result
    problems = check_outputs(test, outputs, dims)
    result.outputs = outputs
    if problems:
        result.message = "; ".join(problems)
    else:
        result.status = PASS
    return result
