"""Runs one test model through the runtime against chosen devices, as AOSP's generated tests do:
build it call by call, compile it for the devices (no CPU fallback to hide a driver's faults),
feed the inputs, execute in the chosen mode, and compare every output with NNAPI's tolerances.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import extensions
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import Model as HalModel, Subgraph
from nnapi_ref.runtime import Compilation, Device, Execution, Memory, MemoryDesc, Model, OperandType
from nnapi_ref.tolerance import compare, compare_multinomial
from nnapi_ref.types import SCALAR_TYPES, Lifetime, OperandCode, OperationCode, ResultCode
from nnapi_ref.vectors import TestModel
from nnts.generators.builders import compute_in_mode
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


def execute(compilation: Compilation, test: TestModel, mode: str = "sync",
            device_memory: bool = False) -> tuple[list[np.ndarray], list[tuple]]:
    """Run ``test``'s inputs through ``compilation``; return the outputs and their dimensions.
    With ``device_memory`` every input and output lives in memory allocated from a descriptor."""
    execution = Execution(compilation)
    if test.expect_failure:
        execution.set_loop_timeout(EXPECT_FAILURE_LOOP_TIMEOUT_NS)
    main = test.model.main
    for i, value in enumerate(test.inputs):
        if value is None or not device_memory:
            execution.set_input(i, None if value is None else np.ascontiguousarray(value))
        else:
            memory = _device_memory(compilation, i, True)
            Memory.copy(Memory.from_buffer(np.ascontiguousarray(value).copy()), memory)
            execution.set_input_from_memory(i, memory, 0, 0)
    outputs, output_memories = [], []
    built = compilation.model.hal_model.main  # the same operands, extension types in its own numbering
    for i, k in enumerate(main.output_indexes):
        outputs.append(np.zeros(test.expected[i].size, compilation.model.dtype_of(built.operands[k].type)))
        if device_memory:
            output_memories.append(_device_memory(compilation, i, False))
            execution.set_output_from_memory(i, output_memories[-1], 0, 0)
        else:
            execution.set_output(i, outputs[-1])
    compute_in_mode(execution, mode, compilation)
    for out, memory in zip(outputs, output_memories):
        Memory.copy(memory, Memory.from_buffer(out))
    dims = [execution.get_output_operand_dimensions(i) for i in range(len(outputs))]
    return outputs, dims


def compile_for(model: Model, devices: list[Device], cache_dir: str | None, token: bytes) -> Compilation:
    """Compile ``model``; with ``cache_dir``, compile once to fill the cache, then again from it."""
    for _ in range(2 if cache_dir else 1):
        compilation = Compilation(model, devices)
        if cache_dir:
            compilation.set_caching(cache_dir, token)
        compilation.finish()
    return compilation


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
             device_memory: bool = False, cache_dir: str | None = None) -> TestResult:
    """Build, compile for ``devices`` and execute one test model; judge the result.

    ``device_memory`` puts every input and output in memory from descriptors (memory domains);
    ``cache_dir`` compiles through the compilation cache (saved, then reloaded)."""
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
        outputs, dims = execute(compilation, test, mode, device_memory)
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
